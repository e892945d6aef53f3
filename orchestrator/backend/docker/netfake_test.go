package docker

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
)

// fakeKernel is the kernel's side of the plumbing for tests with a fake
// engine: it records the links it would make, and its listeners are on
// loopback.
type fakeKernel struct {
	mu    sync.Mutex
	links map[string]netip.Addr // link → S
	hosts int                   // setupHost calls
}

func newFakeKernel() *fakeKernel { return &fakeKernel{links: map[string]netip.Addr{}} }

func (k *fakeKernel) lock(netNames) (io.Closer, error) { return io.NopCloser(nil), nil }

func (k *fakeKernel) setupHost(netNames, netip.Prefix, netip.Addr) error {
	k.mu.Lock()
	k.hosts++
	k.mu.Unlock()
	return nil
}

func (k *fakeKernel) plumb(_ netNames, link string, _ int, _, s netip.Addr) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.links[link] = s
	return nil
}

func (k *fakeKernel) plumbed(link string, _ int, s netip.Addr, addr bool) (bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	got, ok := k.links[link]
	return ok && got == s && !addr, nil
}

func (k *fakeKernel) restoreAddr(int, netip.Addr, netip.Addr) error { return nil }

func (k *fakeKernel) readdress(_ netNames, from, to string, _ int, _, s netip.Addr) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.links[from]; !ok {
		return fmt.Errorf("no link %s", from)
	}
	delete(k.links, from)
	k.links[to] = s
	return nil
}

func (k *fakeKernel) unplumb(link string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.links, link)
	return nil
}

func (k *fakeKernel) linkCount() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.links)
}

func (k *fakeKernel) listen(netip.Addr) (net.Listener, net.PacketConn, net.Listener, error) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, nil, nil, err
	}
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		l.Close()
		return nil, nil, nil, err
	}
	l2, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		l.Close()
		pc.Close()
		return nil, nil, nil, err
	}
	return l, pc, l2, nil
}
