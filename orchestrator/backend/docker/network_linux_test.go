package docker

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestDNSMeter checks writeTable's per-sandbox DNS meters in the kernel,
// in a network namespace of its own (unshare --net, as root; nothing
// leaves it): the real table and plumbing (setupHost, plumb) for two
// "sandboxes", each a process in a namespace of its own. A flood of
// UDP queries and of TCP connections to port 53 from one reaches the
// gateway's sockets at most at the meter's burst and rate; the other's
// queries, sent after the flood, all arrive.
func TestDNSMeter(t *testing.T) {
	if os.Getenv("DOCKER_TEST_NETNS") != "1" {
		if testing.Short() {
			t.Skip("-short")
		}
		if os.Geteuid() != 0 {
			testenv.Unavailable(t, "needs root for network namespaces and nftables")
			return
		}
		for _, bin := range []string{"unshare", "sleep"} {
			if _, err := exec.LookPath(bin); err != nil {
				testenv.Unavailable(t, "needs %s: %v", bin, err)
				return
			}
		}
		cmd := exec.Command("unshare", "--net", os.Args[0], "-test.run=^TestDNSMeter$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "DOCKER_TEST_NETNS=1")
		out, err := cmd.CombinedOutput()
		t.Logf("in a new network namespace:\n%s", out)
		if err != nil {
			t.Fatal(err)
		}
		return
	}

	k := linuxKernel{}
	names := defaultNetNames // the namespace is this test's alone
	subnet := netip.MustParsePrefix("100.127.0.0/24")
	pool := newAddrPool(subnet)
	gw := pool.gateway()
	if err := k.setupHost(names, subnet, gw); err != nil {
		t.Fatal(err)
	}
	udp, err := net.ListenPacket("udp4", netip.AddrPortFrom(gw, gatewayDNSPort).String())
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	tcp, err := net.Listen("tcp4", netip.AddrPortFrom(gw, gatewayDNSPort).String())
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	perSource := func() (map[netip.Addr]*atomic.Int64, map[netip.Addr]*atomic.Int64) {
		return map[netip.Addr]*atomic.Int64{}, map[netip.Addr]*atomic.Int64{}
	}
	udpGot, tcpGot := perSource()

	// Two sandboxes: a process each in a namespace of its own, plumbed.
	type box struct {
		pid  int
		s    netip.Addr
		link string
	}
	var boxes []box
	for i, id := range []string{"sb-aaaaaaaa-flood", "sb-bbbbbbbb-quiet"} {
		cmd := exec.Command("unshare", "--net", "sleep", "600")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		s, err := pool.alloc(id)
		if err != nil {
			t.Fatal(err)
		}
		// unshare has made its namespace once its process runs sleep.
		waitExec(t, cmd.Process.Pid, "sleep")
		if err := k.plumb(names, names.link(id), cmd.Process.Pid, hostAddr(s), s); err != nil {
			t.Fatalf("plumb sandbox %d: %v", i, err)
		}
		boxes = append(boxes, box{cmd.Process.Pid, s, names.link(id)})
		udpGot[s], tcpGot[s] = new(atomic.Int64), new(atomic.Int64)
	}
	go func() {
		buf := make([]byte, 512)
		for {
			_, from, err := udp.ReadFrom(buf)
			if err != nil {
				return
			}
			if n := udpGot[addrPortOf(from).Addr()]; n != nil {
				n.Add(1)
			}
		}
	}()
	go func() {
		for {
			c, err := tcp.Accept()
			if err != nil {
				return
			}
			if n := tcpGot[addrPortOf(c.RemoteAddr()).Addr()]; n != nil {
				n.Add(1)
			}
			c.Close()
		}
	}()

	// The flood: 5000 queries and 1000 connections as fast as they go.
	const floodUDP, floodTCP, quiet = 5000, 1000, 50
	start := time.Now()
	if err := inNetns(boxes[0].pid, func() error {
		c, err := net.Dial("udp4", "198.51.100.53:53") // any server: DNATed to G
		if err != nil {
			return err
		}
		defer c.Close()
		for range floodUDP {
			c.Write([]byte("flood"))
		}
		for range floodTCP {
			fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK, 0)
			if err != nil {
				return err
			}
			err = syscall.Connect(fd, &syscall.SockaddrInet4{Port: 53, Addr: [4]byte{198, 51, 100, 53}})
			if err != nil && !errors.Is(err, syscall.EINPROGRESS) {
				syscall.Close(fd)
				return err
			}
			defer syscall.Close(fd) // open until the flood ends: no RST before the SYN is judged
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	// The quiet sandbox, after the flood: every query arrives.
	if err := inNetns(boxes[1].pid, func() error {
		c, err := net.Dial("udp4", "198.51.100.53:53")
		if err != nil {
			return err
		}
		defer c.Close()
		for range quiet {
			c.Write([]byte("quiet"))
			time.Sleep(time.Millisecond)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	settle := time.Now().Add(5 * time.Second)
	for udpGot[boxes[1].s].Load() < quiet && time.Now().Before(settle) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the flood's last accepted segments
	elapsed := time.Since(start)
	// At most the burst plus the rate over the time the flood took to be
	// sent and counted, with room for the SYN retransmissions of refused
	// connects (1 s, then 3 s) that fall in it.
	most := func(n int) int64 { return int64(dnsPacketBurst + dnsPacketRate*elapsed.Seconds() + float64(n)) }
	gotUDP, gotTCP := udpGot[boxes[0].s].Load(), tcpGot[boxes[0].s].Load()
	t.Logf("flood sent in %v: %d of %d queries and %d of %d connections reached the gateway's sockets (in %v); the quiet sandbox's %d of %d",
		took.Round(time.Millisecond), gotUDP, floodUDP, gotTCP, floodTCP, elapsed.Round(time.Millisecond), udpGot[boxes[1].s].Load(), quiet)
	if gotUDP > most(0) || gotUDP < dnsPacketBurst/2 {
		t.Errorf("%d flood queries reached the socket; want between %d and %d", gotUDP, dnsPacketBurst/2, most(0))
	}
	if gotTCP > most(50) || gotTCP < dnsPacketBurst/2 {
		t.Errorf("%d flood connections reached the listener; want between %d and %d", gotTCP, dnsPacketBurst/2, most(50))
	}
	if n := udpGot[boxes[1].s].Load(); n != quiet {
		t.Errorf("the quiet sandbox's queries: %d of %d arrived", n, quiet)
	}
	if out, err := exec.Command("nft", "list", "table", "inet", names.table).CombinedOutput(); err == nil {
		for _, set := range []string{"@dns_udp", "@dns_tcp"} {
			if !strings.Contains(string(out), set+" { ip saddr limit rate over 200/second burst 200 packets }") {
				t.Errorf("the table lacks the meter %s:\n%s", set, out)
			}
		}
	} else {
		t.Logf("nft list: %v", err)
	}
}

func addrPortOf(a net.Addr) netip.AddrPort {
	ap, _ := netip.ParseAddrPort(a.String())
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// waitExec waits until process pid runs the program name (unshare has
// made its namespace and exec'd), bounded.
func waitExec(t *testing.T, pid int, name string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if strings.TrimSpace(string(b)) == name {
			ns, err := netns.GetFromPid(pid)
			if err == nil {
				ns.Close()
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d never ran %s", pid, name)
		}
		runtime.Gosched()
		time.Sleep(5 * time.Millisecond)
	}
}
