package egress

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// inOwnNetns runs the calling test again in a network namespace of its
// own (unshare --net, as root) and reports its output; it returns true in
// the parent, which is then done, and false in the child, which runs the
// test. The whole process is in the namespace, so the host's interfaces
// are never touched and nothing the test sends leaves it.
func inOwnNetns(t *testing.T) bool {
	t.Helper()
	if os.Getenv("EGRESS_TEST_NETNS") == t.Name() {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(lo); err != nil {
			t.Fatal(err)
		}
		return false
	}
	if testing.Short() {
		t.Skip("-short")
	}
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "needs root for a network namespace")
		return true
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		testenv.Unavailable(t, "needs unshare: %v", err)
		return true
	}
	cmd := exec.Command("unshare", "--net", os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "EGRESS_TEST_NETNS="+t.Name())
	out, err := cmd.CombinedOutput()
	t.Logf("in a network namespace of its own:\n%s", out)
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// TestHostAddressRefusedAtOnce: an address the host gains is refused to
// a sandbox's connection at once (within 2 s, in practice the next
// connection), not after the periodic re-read the gateway used to do
// every 30 s; and reachable again once the host drops it. In a network
// namespace of its own: the "host" is the namespace, its new address on
// an interface there (a bridge without ports); the gateway's dials go to
// a recorder, never to the network.
func TestHostAddressRefusedAtOnce(t *testing.T) {
	if inOwnNetns(t) {
		return
	}
	la := netlink.NewLinkAttrs()
	la.Name = "hostaddr0"
	iface := &netlink.Bridge{LinkAttrs: la} // a bridge without ports: the iface driver is not in every kernel
	if err := netlink.LinkAdd(iface); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(iface); err != nil {
		t.Fatal(err)
	}
	target := netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, byte(rand.IntN(256)), byte(1 + rand.IntN(254))}), 8080)

	var mu sync.Mutex
	var dialed []string
	orig := newOrigTable()
	g := New(Config{
		Bounds: Bounds{AllowPrivate: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}},
		// HostAddrs unset: the default, the namespace's own addresses.
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			mu.Lock()
			dialed = append(dialed, addr)
			mu.Unlock()
			return nil, errors.New("test: recorded, not dialled")
		},
		PeekTimeout:      time.Second,
		FirstByteTimeout: 100 * time.Millisecond,
		Logger:           slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	defer g.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.ServeTCP(l, orig.get)
	ca, err := NewCA("a")
	if err != nil {
		t.Fatal(err)
	}
	g.Attach("a", netip.MustParseAddr(srcA), compile(t, core.NetworkPolicy{AllowOut: []string{"198.18.0.0/15"}}), ca)

	// attempt makes one connection to target and says whether the
	// gateway dialled it (true) or refused it as the host's (false).
	attempt := func() bool {
		t.Helper()
		mu.Lock()
		before := len(dialed)
		mu.Unlock()
		start := time.Now()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(srcA)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		orig.set(c.LocalAddr().String(), target)
		c.Write([]byte("\x00not a protocol with a name\n"))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		io.Copy(io.Discard, c) // until the gateway closes it
		var verdict bool
		waitFor(t, 5*time.Second, "the connection's verdict", func() bool {
			mu.Lock()
			n := len(dialed)
			mu.Unlock()
			if n > before {
				verdict = true
				return true
			}
			for _, d := range g.Denials("a") {
				if d.Time.Before(start) {
					continue
				}
				if !strings.HasSuffix(d.Reason, "the host's own address "+target.Addr().String()) {
					t.Fatalf("refused for %q", d.Reason)
				}
				return true
			}
			return false
		})
		return verdict
	}
	if !attempt() {
		t.Fatalf("%s refused before the host has it", target)
	}

	addr := &netlink.Addr{IPNet: &net.IPNet{IP: target.Addr().AsSlice(), Mask: net.CIDRMask(32, 32)}}
	if err := netlink.AddrAdd(iface, addr); err != nil {
		t.Fatal(err)
	}
	added := time.Now()
	for n := 1; attempt(); n++ {
		if time.Since(added) > 2*time.Second {
			t.Fatalf("%s, the host's own address for %v, still dialled (%d connections)", target.Addr(), time.Since(added).Round(time.Millisecond), n)
		}
	}
	t.Logf("refused %v after the host gained the address", time.Since(added).Round(time.Microsecond))

	if err := netlink.AddrDel(iface, addr); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	for !attempt() {
		if time.Since(removed) > 2*time.Second {
			t.Fatalf("%s still refused %v after the host dropped it", target.Addr(), time.Since(removed).Round(time.Millisecond))
		}
	}
}

// TestHostAddrsNeverStale: the kept list is used only while it is known
// to be current. Before the first listing, after a change (invalidate:
// what an update and the subscription's errors do) and until a listing
// taken after that change is kept, every check lists afresh; a listing
// that a change overtook is not kept; a listing that fails refuses every
// address rather than judging against an old list.
func TestHostAddrsNeverStale(t *testing.T) {
	h := newHostAddrs(slog.New(slog.NewTextHandler(io.Discard, nil)))
	h.watch = func(h *hostAddrs) { defer close(h.stopped); <-h.stop } // the test drives the changes
	defer h.close()
	var (
		mu     sync.Mutex
		lists  int
		now    = []netip.Addr{netip.MustParseAddr("192.0.2.1")}
		fail   error
		during func()
	)
	h.list = func() ([]netip.Addr, error) {
		mu.Lock()
		lists++
		addrs, err, f := slices.Clone(now), fail, during
		mu.Unlock()
		if f != nil {
			f()
		}
		return addrs, err
	}
	set := func(f func()) { mu.Lock(); f(); mu.Unlock() }
	count := func() int { mu.Lock(); defer mu.Unlock(); return lists }

	for i := range 3 {
		if a, err := h.get(); err != nil || !slices.Equal(a, now) {
			t.Fatalf("get %d: %v, %v", i, a, err)
		}
	}
	if c := count(); c != 3 {
		t.Fatalf("%d listings for 3 checks before the first kept list; want 3 (one each)", c)
	}
	h.refresh()
	before := count()
	h.get()
	h.get()
	if c := count(); c != before {
		t.Fatalf("checks listed again (%d times) while the kept list is current", c-before)
	}

	// A change: the next check sees it, without a refresh.
	set(func() { now = append(now, netip.MustParseAddr("198.18.0.9")) })
	h.invalidate()
	if a, _ := h.get(); !slices.Contains(a, netip.MustParseAddr("198.18.0.9")) {
		t.Fatalf("after a change, get = %v", a)
	}

	// A change during a refresh's listing: its list is not kept.
	set(func() { during = h.invalidate })
	h.refresh()
	set(func() { during = nil })
	if h.cur.Load() != nil {
		t.Fatal("a listing overtaken by a change was kept")
	}

	// A listing that fails: the gateway refuses, whatever the address.
	set(func() { fail = errors.New("netlink: no buffer space") })
	g := New(Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer g.Close()
	g.host.close()
	g.host = h
	if r := g.bound(netip.MustParseAddr("93.184.216.34")); r == "" {
		t.Fatal("a public address admitted while the host's addresses cannot be read")
	} else {
		t.Logf("refused: %s", r)
	}
}

// TestHostAddrsClose: closing the gateway ends the subscription's
// goroutine (its socket closed, its channel drained).
func TestHostAddrsClose(t *testing.T) {
	g := New(Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if r := g.bound(netip.MustParseAddr("127.0.0.1")); r == "" {
		t.Fatal("127.0.0.1 admitted")
	}
	waitFor(t, 5*time.Second, "the first kept list", func() bool { return g.host.cur.Load() != nil })
	done := make(chan struct{})
	go func() { g.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return within 5 s: the subscription's goroutine hangs")
	}
}

// TestHostAddrsFollow: each change (a burst of them) lists the addresses
// again; a subscription that ends (its socket's buffer overflowed:
// changes lost) leaves no kept list behind, so that checks list afresh
// until a new one has listed them.
func TestHostAddrsFollow(t *testing.T) {
	h := newHostAddrs(slog.New(slog.NewTextHandler(io.Discard, nil)))
	var mu sync.Mutex
	lists := 0
	h.list = func() ([]netip.Addr, error) {
		mu.Lock()
		defer mu.Unlock()
		lists++
		return []netip.Addr{netip.AddrFrom4([4]byte{192, 0, 2, byte(lists)})}, nil
	}
	updates := make(chan netlink.AddrUpdate, 4)
	done := make(chan struct{})
	ended := make(chan bool, 1)
	go func() { ended <- h.follow(updates, done) }()
	updates <- netlink.AddrUpdate{NewAddr: true}
	waitFor(t, 5*time.Second, "the re-listing after a change", func() bool {
		p := h.cur.Load()
		return p != nil && (*p)[0] == netip.MustParseAddr("192.0.2.1")
	})
	close(updates) // what the library does when the socket fails
	select {
	case again := <-ended:
		if !again {
			t.Fatal("follow asked for no new subscription")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("follow did not return within 5 s of its subscription's end")
	}
	select {
	case <-done:
	default:
		t.Fatal("the ended subscription's socket was not closed")
	}
	if h.cur.Load() != nil {
		t.Fatal("a kept list outlived the subscription that kept it current")
	}
}
