//go:build linux

package podnet

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/sandboxd/sandboxd/internal/nettest"
	"github.com/sandboxd/sandboxd/orchestrator/backend/kube/iosidecar"
	"github.com/sandboxd/sandboxd/orchestrator/egress"
)

// podNS is a Pod's network namespace as a CNI plugin finds it, made by
// the test: lo up, and a veth to a "host" namespace of its own, the Pod
// at podAddr, the host end at hostAddr (in a free block of
// 198.18.0.0/15), the default route through it.
type podNS struct {
	name, path        string
	pod, host         netns.NsHandle
	podAddr, hostAddr netip.Addr
}

func need(t *testing.T) {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	for _, b := range []string{"ip", "nsenter", "setpriv", "/usr/bin/python3"} {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("podnet's test needs %v", missing)
	}
	t.Skipf("podnet's test needs %v", missing)
}

// onThread runs f on a locked OS thread in namespace ns, back in the
// thread's own after (a thread that cannot go back is not unlocked, so
// the runtime retires it).
func onThread(ns netns.NsHandle, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		ferr := f()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

func newPodNS(t *testing.T) *podNS {
	t.Helper()
	block := nettest.FreeBlock(t)
	b := block.Addr().As4()
	b[3] = 1
	host := netip.AddrFrom4(b)
	b[3] = 2
	p := &podNS{name: fmt.Sprintf("sbxpn-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6), hostAddr: host, podAddr: netip.AddrFrom4(b)}
	p.path = "/var/run/netns/" + p.name
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	run("netns", "add", p.name)
	run("netns", "add", p.name+"-h")
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", p.name).Run()
		exec.Command("ip", "netns", "del", p.name+"-h").Run()
	})
	run("-n", p.name, "link", "set", "lo", "up")
	run("-n", p.name+"-h", "link", "set", "lo", "up")
	run("-n", p.name, "link", "add", "eth0", "type", "veth", "peer", "name", "host0", "netns", p.name+"-h")
	run("-n", p.name, "addr", "add", p.podAddr.String()+"/30", "dev", "eth0")
	run("-n", p.name+"-h", "addr", "add", p.hostAddr.String()+"/30", "dev", "host0")
	run("-n", p.name, "link", "set", "eth0", "up")
	run("-n", p.name+"-h", "link", "set", "host0", "up")
	run("-n", p.name, "route", "add", "default", "via", p.hostAddr.String())
	// Any group may open ICMP echo sockets, as in a Pod of containerd's
	// (enable_unprivileged_icmp): the sandbox user's ping must meet the table.
	run("netns", "exec", p.name, "sysctl", "-q", "-w", "net.ipv4.ping_group_range=0 2147483647")
	var err error
	if p.pod, err = netns.GetFromPath(p.path); err != nil {
		t.Fatal(err)
	}
	if p.host, err = netns.GetFromPath("/var/run/netns/" + p.name + "-h"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.pod.Close(); p.host.Close() })
	return p
}

// listen opens a TCP listener in ns at addr, counting what it accepts;
// each accepted connection is handed to each (if not nil) then closed.
func listen(t *testing.T, ns netns.NsHandle, addr string, each func(net.Conn)) *atomic.Int64 {
	t.Helper()
	var l net.Listener
	if err := onThread(ns, func() (err error) { l, err = net.Listen("tcp", addr); return err }); err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	t.Cleanup(func() { l.Close() })
	n := new(atomic.Int64)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			if each != nil {
				each(c)
			}
			c.Close()
		}
	}()
	return n
}

// listenUDP opens a UDP socket in ns at addr, recording the source of
// each datagram.
func listenUDP(t *testing.T, ns netns.NsHandle, addr string) chan string {
	t.Helper()
	var pc net.PacketConn
	if err := onThread(ns, func() (err error) { pc, err = net.ListenPacket("udp", addr); return err }); err != nil {
		t.Fatalf("listen udp %s: %v", addr, err)
	}
	t.Cleanup(func() { pc.Close() })
	got := make(chan string, 64)
	go func() {
		buf := make([]byte, 512)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			got <- from.String()
		}
	}()
	return got
}

// asUser runs Python as the sandbox user in the Pod's namespace: each
// target "tcp ADDR PORT" connects (and sends a byte), "tcp6 ADDR PORT"
// likewise over IPv6, "udp ADDR PORT" sends a datagram, "icmp ADDR 0"
// pings and waits for the echo reply; it prints what happened to each.
func (p *podNS) asUser(t *testing.T, targets ...string) map[string]string {
	t.Helper()
	js, _ := json.Marshal(targets)
	code := `
import json, socket, sys
out = {}
for t in json.loads(sys.argv[1]):
    kind, host, port = t.split()
    try:
        if kind in ("tcp", "tcp6"):
            s = socket.create_connection((host, int(port)), timeout=3)
            s.sendall(b"x")
            s.close()
        elif kind == "icmp":
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
            s.settimeout(3)
            s.sendto(b"\x08\x00\x00\x00\x00\x00\x00\x01ping", (host, 0))
            if s.recv(64)[0] != 0:
                raise OSError("not an echo reply")
        else:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.sendto(b"x", (host, int(port)))
        out[t] = "ok"
    except OSError as e:
        out[t] = "failed: %s" % e
print(json.dumps(out))
`
	cmd := exec.Command("nsenter", "--net="+p.path, "setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "/usr/bin/python3", "-c", code, string(js))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the sandbox user's probe: %v: %s", err, out)
	}
	got := map[string]string{}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("the sandbox user's probe printed %q: %v", out, err)
	}
	return got
}

// serveAsUser starts a TCP server as the sandbox user in the Pod's
// namespace, on every address at port: it answers each connection's line
// with "pong " and the line. It returns once the server listens.
func (p *podNS) serveAsUser(t *testing.T, port int) {
	t.Helper()
	code := `
import socket, sys
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("0.0.0.0", int(sys.argv[1])))
l.listen(8)
print("ready", flush=True)
while True:
    c, _ = l.accept()
    c.settimeout(3)
    try:
        c.sendall(b"pong " + c.makefile("rb").readline())
    except OSError:
        pass
    c.close()
`
	cmd := exec.Command("nsenter", "--net="+p.path, "setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "/usr/bin/python3", "-c", code, fmt.Sprint(port))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("the sandbox user's server: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("it printed %q", line)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("the sandbox user's server did not start: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the sandbox user's server did not listen within 10 s")
	}
}

// exchange connects from ns to addr, sends a line and returns the answer.
func exchange(ns netns.NsHandle, addr, line string) (string, error) {
	var got string
	err := onThread(ns, func() error {
		c, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.Write([]byte(line + "\n")); err != nil {
			return err
		}
		got, err = bufio.NewReader(c).ReadString('\n')
		return err
	})
	return strings.TrimSpace(got), err
}

// dialFrom connects from ns (as this process, root) to addr.
func dialFrom(ns netns.NsHandle, addr string) error {
	return onThread(ns, func() error {
		c, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
}

// waitFor waits (bounded) until n reaches want.
func waitFor(t *testing.T, what string, n func() int64, want int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for n() < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d within 5 s; want %d", what, n(), want)
		}
		time.Sleep(10 * time.Millisecond) // polling a counter a goroutine raises
	}
}

// TestSidecarDefaults: the io sidecar's gateway listens where the table
// sends traffic by default.
func TestSidecarDefaults(t *testing.T) {
	for _, tc := range [][2]string{
		{iosidecar.DefaultEgressTCP, fmt.Sprintf("127.0.0.1:%d", DefaultTCPPort)},
		{iosidecar.DefaultEgressDNS, fmt.Sprintf("127.0.0.1:%d", DefaultDNSPort)},
		{iosidecar.DefaultEgressProbe, fmt.Sprintf("127.0.0.1:%d", DefaultProbePort)},
		{iosidecar.DefaultEgressProbeTarget, ProbeAddr.String()},
	} {
		if tc[0] != tc[1] {
			t.Errorf("the sidecar's default %s; the table's %s", tc[0], tc[1])
		}
	}
}

// TestInstall: in a Pod's namespace, the table sends the sandbox user's
// TCP (with its original destination) and DNS (to any address, loopback
// included) to the gateway's listeners, drops its other traffic, leaves
// its loopback and every other user alone, and makes the probe arrive;
// Install is idempotent and Installed says whether the table is there.
func TestInstall(t *testing.T) {
	need(t)
	p := newPodNS(t)
	c := Config{TCPPort: 25001, DNSPort: 25053, ProbePort: 25002}.withDefaults()

	type accepted struct {
		orig   netip.AddrPort
		remote string
	}
	redirected := make(chan accepted, 16)
	gwTCP := listen(t, p.pod, fmt.Sprintf("127.0.0.1:%d", c.TCPPort), func(conn net.Conn) {
		o, err := egress.OriginalDst(conn)
		if err != nil {
			t.Errorf("OriginalDst: %v", err)
		}
		redirected <- accepted{o, conn.RemoteAddr().String()}
	})
	dnsTCP := listen(t, p.pod, fmt.Sprintf("127.0.0.1:%d", c.DNSPort), nil)
	dnsUDP := listenUDP(t, p.pod, fmt.Sprintf("127.0.0.1:%d", c.DNSPort))
	probe := listen(t, p.pod, fmt.Sprintf("127.0.0.1:%d", c.ProbePort), nil)
	local := listen(t, p.pod, "127.0.0.1:25080", nil)
	local6 := listen(t, p.pod, "[::1]:25080", nil)
	hostTCP := listen(t, p.host, p.hostAddr.String()+":443", nil)
	hostUDP := listenUDP(t, p.host, p.hostAddr.String()+":9999")
	hostDNS := listenUDP(t, p.host, p.hostAddr.String()+":53")

	// Before: no table, and the probe is refused.
	if ok, err := Installed(p.path); err != nil || ok {
		t.Fatalf("Installed before Install = %v, %v", ok, err)
	}
	if err := dialFrom(p.pod, ProbeAddr.String()); err == nil {
		t.Fatalf("the probe connected without the table")
	}
	host := p.hostAddr.String()
	// The sandbox user's ping gets its reply without the table: the drop
	// below is the table's.
	if got := p.asUser(t, "icmp "+host+" 0"); got["icmp "+host+" 0"] != "ok" {
		t.Fatalf("the sandbox user's ping to %s without the table: %s; want ok", host, got["icmp "+host+" 0"])
	}
	for range 2 { // idempotent
		if err := Install(p.path, c); err != nil {
			t.Fatalf("Install: %v", err)
		}
	}
	if ok, err := Installed(p.path); err != nil || !ok {
		t.Fatalf("Installed = %v, %v", ok, err)
	}
	if err := dialFrom(p.pod, ProbeAddr.String()); err != nil {
		t.Fatalf("the probe with the table: %v", err)
	}
	waitFor(t, "probe connections arrived", probe.Load, 1)

	t.Cleanup(func() {
		if t.Failed() {
			out, _ := exec.Command("ip", "netns", "exec", p.name, "nft", "-a", "list", "ruleset").CombinedOutput()
			t.Logf("the Pod's ruleset:\n%s", out)
		}
	})
	got := p.asUser(t, "tcp "+host+" 443", "udp "+host+" 53", "udp 127.0.0.1 53", "tcp "+host+" 53",
		"udp "+host+" 9999", "icmp "+host+" 0", "tcp 127.0.0.1 25080", "tcp6 ::1 25080")
	for _, target := range []string{"tcp " + host + " 443", "udp " + host + " 53", "udp 127.0.0.1 53", "tcp " + host + " 53", "tcp 127.0.0.1 25080", "tcp6 ::1 25080"} {
		if got[target] != "ok" {
			t.Errorf("the sandbox user, %s: %s; want ok", target, got[target])
		}
	}
	for _, target := range []string{"udp " + host + " 9999", "icmp " + host + " 0"} {
		if !strings.Contains(got[target], "Operation not permitted") {
			t.Errorf("the sandbox user, %s: %s; want it refused (dropped on output: EPERM)", target, got[target])
		}
	}
	select {
	case a := <-redirected:
		t.Logf("the redirected connection to %v came from %s", a.orig, a.remote)
		if a.orig != netip.AddrPortFrom(p.hostAddr, 443) || !strings.HasPrefix(a.remote, p.podAddr.String()+":") {
			t.Errorf("redirected connection: original destination %v from %s; want %s:443 from the Pod's address %s", a.orig, a.remote, host, p.podAddr)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the sandbox user's connection never reached the gateway's listener")
	}
	var sources []string
	for range 2 {
		select {
		case s := <-dnsUDP:
			sources = append(sources, s)
		case <-time.After(5 * time.Second):
			t.Fatalf("DNS datagrams at the gateway: %v; want 2", sources)
		}
	}
	t.Logf("redirected DNS came from %v", sources)
	waitFor(t, "DNS over TCP at the gateway", dnsTCP.Load, 1)
	waitFor(t, "loopback connections", local.Load, 1)
	waitFor(t, "IPv6 loopback connections", local6.Load, 1)
	if n := gwTCP.Load(); n != 1 {
		t.Errorf("%d connections at the gateway's TCP listener; want 1", n)
	}

	// Root (the io sidecar) is not redirected: it reaches the host end.
	if err := dialFrom(p.pod, host+":443"); err != nil {
		t.Fatalf("root's connection to %s:443: %v; want it direct", host, err)
	}
	waitFor(t, "root's connections at the host", hostTCP.Load, 1)
	if n := hostTCP.Load(); n != 1 {
		t.Errorf("the host end accepted %d connections; want root's alone", n)
	}

	// A port the sandbox user serves answers a connection opened from
	// outside (sandboxd's ports front, in a cluster): the table lets its
	// replies out, and nothing else of that user's.
	p.serveAsUser(t, 25090)
	served := netip.AddrPortFrom(p.podAddr, 25090).String()
	if got, err := exchange(p.host, served, "ping"); err != nil || got != "pong ping" {
		t.Errorf("a request from the host end to the sandbox user's port %s: %q, %v; want \"pong ping\"", served, got, err)
	}
	if n := hostTCP.Load(); n != 1 {
		t.Errorf("the host end accepted %d connections after the sandbox user served one; want root's alone", n)
	}

	select {
	case s := <-hostUDP:
		t.Errorf("the host end received a datagram from %s; want none", s)
	case s := <-hostDNS:
		t.Errorf("the host end received a DNS datagram from %s; want none", s)
	default:
	}
}
