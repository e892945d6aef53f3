package kubelet

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// hostIP is the Node's address and every Pod's status.hostIP.
const hostIP = "127.0.0.1"

// ipAllocator hands out Pod IPs from a base address up to .254 of its /24.
// Each IP in use is held by an flock on a file in a directory shared by
// every test kubelet on the machine: kubelets of test binaries running at
// once (go test ./... runs packages in parallel) would otherwise give two
// Pods the same IP, and Docker would refuse the second one's ports. The
// kernel drops the lock of a test binary that dies.
type ipAllocator struct {
	base netip.Addr
	dir  string

	mu   sync.Mutex
	held map[netip.Addr]*os.File
}

func newIPAllocator(base netip.Addr) (*ipAllocator, error) {
	dir := filepath.Join(os.TempDir(), "sandboxd-test-kubelet-ips")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, fmt.Errorf("kubelet: IP lock directory: %w", err)
	}
	// Kubelets of other users share it too.
	_ = os.Chmod(dir, 0o1777)
	return &ipAllocator{base: base, dir: dir, held: map[netip.Addr]*os.File{}}, nil
}

// alloc returns a free IP, skipping those in avoid.
func (a *ipAllocator) alloc(avoid map[netip.Addr]bool) (netip.Addr, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for ip := a.base; ip.IsValid() && ip.As4()[2] == a.base.As4()[2] && ip.As4()[3] < 255; ip = ip.Next() {
		if a.held[ip] != nil || avoid[ip] {
			continue
		}
		f, err := os.OpenFile(filepath.Join(a.dir, ip.String()+".lock"), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("kubelet: IP lock: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				continue
			}
			return netip.Addr{}, fmt.Errorf("kubelet: IP lock %s: %w", f.Name(), err)
		}
		a.held[ip] = f
		return ip, nil
	}
	return netip.Addr{}, fmt.Errorf("kubelet: no free pod IP from %v up", a.base)
}

// free releases an IP from alloc.
func (a *ipAllocator) free(ip netip.Addr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if f := a.held[ip]; f != nil {
		f.Close() // drops the lock
		delete(a.held, ip)
	}
}

// close releases every IP.
func (a *ipAllocator) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for ip, f := range a.held {
		f.Close()
		delete(a.held, ip)
	}
}
