package docker

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// ownNetns runs the calling test again in a network namespace of its own
// (unshare --net, as root) and reports its output: true in the parent,
// which is then done, false in the child, which runs the test with the
// whole process in the namespace (its interfaces, routes and nftables
// tables are the test's alone; the host's are never touched) and the
// egress instances' locks in a directory of the test's.
func ownNetns(t *testing.T) bool {
	t.Helper()
	if os.Getenv("DOCKER_TEST_OWN_NETNS") == t.Name() {
		egressLockDir = t.TempDir()
		return false
	}
	if testing.Short() {
		t.Skip("-short")
	}
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "needs root for network namespaces and nftables")
		return true
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		testenv.Unavailable(t, "needs unshare: %v", err)
		return true
	}
	cmd := exec.Command("unshare", "--net", os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "DOCKER_TEST_OWN_NETNS="+t.Name())
	out, err := cmd.CombinedOutput()
	t.Logf("in a network namespace of its own:\n%s", out)
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// addBridge adds a bridge (an interface of the "host" that is not the
// instance's: the dummy driver is not in every kernel) with addresses.
func addBridge(t *testing.T, name string, addrs ...string) netlink.Link {
	t.Helper()
	la := netlink.NewLinkAttrs()
	la.Name = name
	if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: la}); err != nil {
		t.Fatal(err)
	}
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: prefixNet(netip.MustParsePrefix(a))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := netlink.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	return l
}

// addHostEnd adds an interface named like a sandbox's host end (a veth,
// its peer left in the namespace) holding h/31.
func addHostEnd(t *testing.T, name string, h netip.Addr) {
	t.Helper()
	la := netlink.NewLinkAttrs()
	la.Name = name
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "p" + name[:min(len(name), 14)]}); err != nil {
		t.Fatal(err)
	}
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: prefixNet(netip.PrefixFrom(h, 31))}); err != nil {
		t.Fatal(err)
	}
}

func mustNames(t *testing.T, instance string) netNames {
	t.Helper()
	n, err := instanceNetNames(instance)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func gatewayOf(subnet string) (netip.Prefix, netip.Addr) {
	p := netip.MustParsePrefix(subnet)
	return p, newAddrPool(p).gateway()
}

// TestEgressSubnetOverlapRefused: a sandboxd whose egress subnet overlaps
// an address or a route of the host does not start, and says which
// interface has it: a foreign interface holding the gateway's address, a
// stopped instance's leftover bridge (the case that started silently,
// and whose sandboxes' DNS then failed), a route. The instance's own
// objects of a previous run (its bridge, its sandboxes' host ends) are
// no overlap: the same instance restarts. A default route is none.
func TestEgressSubnetOverlapRefused(t *testing.T) {
	if ownNetns(t) {
		return
	}
	k := linuxKernel{}

	// A foreign interface holds the gateway's address G.
	addBridge(t, "other0", "198.18.7.1/24")
	subnet, gw := gatewayOf("198.18.7.0/24")
	names := mustNames(t, "t1")
	err := k.setupHost(names, subnet, gw)
	if err == nil || !strings.Contains(err.Error(), "on interface other0") || !strings.Contains(err.Error(), "198.18.7.1/24") {
		t.Fatalf("setupHost with G on other0: %v; want a refusal naming other0", err)
	}
	t.Logf("refused: %v", err)
	if _, err := netlink.LinkByName(names.bridge); err == nil {
		t.Errorf("the refused instance's bridge %s was created", names.bridge)
	}
	// Through the start of a sandboxd's networking too, which then
	// holds no lock.
	ns := &netState{names: names, pool: newAddrPool(subnet), kernel: k}
	if err := ns.start(); err == nil || !strings.Contains(err.Error(), "other0") {
		t.Fatalf("start with G on other0: %v", err)
	}
	if l, err := lockInstance(names); err != nil {
		t.Fatalf("the lock of an instance that failed to start is still held: %v", err)
	} else {
		l.Close()
	}

	// A stopped instance's bridge holds G of the subnet another
	// instance is given.
	subnet, gw = gatewayOf("198.18.8.0/24")
	ab, cd := mustNames(t, "ab"), mustNames(t, "cd")
	if err := k.setupHost(ab, subnet, gw); err != nil {
		t.Fatal(err)
	}
	addHostEnd(t, ab.prefix+"01234567", netip.MustParseAddr("198.18.8.2"))
	err = k.setupHost(cd, subnet, gw)
	if err == nil || !strings.Contains(err.Error(), "interface sandboxd-ab") || !strings.Contains(err.Error(), "sandboxd egress cleanup --instance ab") {
		t.Fatalf("setupHost over instance ab's bridge: %v; want a refusal naming sandboxd-ab and the cleanup", err)
	}
	t.Logf("refused: %v", err)
	// The same instance restarts over its own objects.
	if err := k.setupHost(ab, subnet, gw); err != nil {
		t.Fatalf("instance ab restarting over its own bridge and host end: %v", err)
	}

	// A route into the subnet; a default route through the same
	// interface is no overlap.
	other, err := netlink.LinkByName("other0")
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: other.Attrs().Index, Dst: prefixNet(netip.MustParsePrefix("198.18.9.0/24"))}); err != nil {
		t.Fatal(err)
	}
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: other.Attrs().Index, Gw: net.ParseIP("198.18.7.2")}); err != nil {
		t.Fatal(err)
	}
	subnet, gw = gatewayOf("198.18.9.128/25")
	err = k.setupHost(cd, subnet, gw)
	if err == nil || !strings.Contains(err.Error(), "the route to 198.18.9.0/24 on interface other0") {
		t.Fatalf("setupHost into a route: %v", err)
	}
	subnet, gw = gatewayOf("198.18.10.0/24")
	if err := k.setupHost(cd, subnet, gw); err != nil {
		t.Fatalf("setupHost with only a default route covering the subnet: %v", err)
	}
}

// TestEgressCleanup: sandboxd egress cleanup removes a stopped instance's
// host objects (its sandboxes' host ends, its bridge, its table), after
// which its subnet serves another instance; it refuses, removing nothing,
// while the instance runs: its lock held, or (a sandboxd whose lock this
// process cannot see) its gateway's port bound. A second sandboxd of a
// running instance is refused its lock.
func TestEgressCleanup(t *testing.T) {
	if ownNetns(t) {
		return
	}
	k := linuxKernel{}
	ab := mustNames(t, "ab")
	subnet, gw := gatewayOf("198.18.20.0/24")
	if err := k.setupHost(ab, subnet, gw); err != nil {
		t.Fatal(err)
	}
	hostEnd := ab.prefix + "0123abcd"
	addHostEnd(t, hostEnd, netip.MustParseAddr("198.18.20.2"))
	all := func() bool {
		_, e1 := netlink.LinkByName(ab.bridge)
		_, e2 := netlink.LinkByName(hostEnd)
		c, err := nftables.New()
		if err != nil {
			t.Fatal(err)
		}
		_, e3 := c.ListTableOfFamily(ab.table, nftables.TableFamilyINet)
		return e1 == nil && e2 == nil && e3 == nil
	}
	if !all() {
		t.Fatal("the instance's objects are not all there")
	}

	// Running: its lock is held.
	lock, err := lockInstance(ab)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockInstance(ab); err == nil || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("a second lock of a running instance: %v; want a refusal naming the holder", err)
	}
	removed, err := CleanupEgress("ab")
	if err == nil || !strings.Contains(err.Error(), "running sandboxd") || len(removed) > 0 || !all() {
		t.Fatalf("cleanup of a running instance: removed %v, %v", removed, err)
	}
	t.Logf("refused: %v", err)
	lock.Close()

	// Running where its lock cannot be seen: its gateway listens.
	l, err := net.Listen("tcp4", netip.AddrPortFrom(gw, gatewayTCPPort).String())
	if err != nil {
		t.Fatal(err)
	}
	removed, err = CleanupEgress("ab")
	if err == nil || !strings.Contains(err.Error(), "listens on "+gw.String()) || len(removed) > 0 || !all() {
		t.Fatalf("cleanup of an instance whose gateway listens: removed %v, %v", removed, err)
	}
	l.Close()

	// Stopped: everything goes, the host ends first.
	removed, err = CleanupEgress("ab")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"interface " + hostEnd, "bridge " + ab.bridge, "nftables table inet " + ab.table}
	if !slices.Equal(removed, want) {
		t.Errorf("removed %v; want %v", removed, want)
	}
	if _, err := netlink.LinkByName(ab.bridge); err == nil {
		t.Error("the bridge is still there")
	}
	if _, err := netlink.LinkByName(hostEnd); err == nil {
		t.Error("the host end is still there")
	}
	c, _ := nftables.New()
	if _, err := c.ListTableOfFamily(ab.table, nftables.TableFamilyINet); err == nil {
		t.Error("the table is still there")
	}
	if removed, err := CleanupEgress("ab"); err != nil || len(removed) > 0 {
		t.Errorf("cleanup again: removed %v, %v; want nothing, no error", removed, err)
	}
	// Its subnet is free for another instance.
	if err := k.setupHost(mustNames(t, "cd"), subnet, gw); err != nil {
		t.Fatalf("another instance on the cleaned-up subnet: %v", err)
	}
}
