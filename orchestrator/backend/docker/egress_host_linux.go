package docker

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// The host's side of an egress instance beyond its plumbing: the check
// that its subnet is its own, the lock saying it runs, and the removal of
// what a stopped one left (sandboxd egress cleanup).

// checkOverlap refuses an egress subnet that overlaps an address or a
// route of the host, naming the interface. The instance's own objects, a
// previous run's that setupHost and plumb reuse (its bridge holding G,
// its interfaces of the prefix holding the host ends H), are not
// overlaps: a restarted sandboxd finds them as it left them. Routes
// shorter than /8 (default routes, a VPN's 0.0.0.0/1 and 128.0.0.0/1)
// cover every subnet and are ignored; every other overlap is refused, a
// stopped sandboxd's leftover bridge included: its address on two
// interfaces, the gateway's would be unreachable, and sandboxes' DNS
// lookups fail (EAI_AGAIN) with no word at start.
func checkOverlap(n netNames, subnet netip.Prefix) error {
	links, err := netlink.LinkList()
	if err != nil {
		return fmt.Errorf("list the host's interfaces: %w", err)
	}
	names := make(map[int]string, len(links))
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
	}
	own := func(index int) bool {
		name, ok := names[index]
		return ok && (name == n.bridge || strings.HasPrefix(name, n.prefix))
	}
	refuse := func(what string, index int) error {
		on := "an interface that is gone"
		if name, ok := names[index]; ok {
			on = "interface " + name + leftBy(name)
		}
		return core.Preconditionf("the egress subnet %s overlaps %s on %s: give sandboxd --egress-subnet a block the host does not use", subnet, what, on)
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("list the host's addresses: %w", err)
	}
	for _, a := range addrs {
		p, ok := prefixOf(a.IPNet)
		if !ok || !p.Masked().Overlaps(subnet) || own(a.LinkIndex) {
			continue
		}
		return refuse("the address "+p.String(), a.LinkIndex)
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return fmt.Errorf("list the host's routes: %w", err)
	}
	for _, r := range routes {
		p, ok := prefixOf(r.Dst)
		if !ok || p.Bits() < 8 || !p.Masked().Overlaps(subnet) {
			continue
		}
		what := "the route to " + p.Masked().String()
		if r.Table != unix.RT_TABLE_MAIN {
			what += " in table " + strconv.Itoa(r.Table)
		}
		index := r.LinkIndex
		if index == 0 && len(r.MultiPath) > 0 {
			index = r.MultiPath[0].LinkIndex
		}
		if index == 0 {
			return core.Preconditionf("the egress subnet %s overlaps %s (a route of type %d, through no interface): give sandboxd --egress-subnet a block the host does not use", subnet, what, r.Type)
		}
		if own(index) && !foreignHop(r.MultiPath, own) {
			continue
		}
		return refuse(what, index)
	}
	return nil
}

// foreignHop reports whether a multipath route has a hop through an
// interface that is not the instance's.
func foreignHop(hops []*netlink.NexthopInfo, own func(int) bool) bool {
	for _, h := range hops {
		if !own(h.LinkIndex) {
			return true
		}
	}
	return false
}

// prefixOf is an IPv4 IPNet as a prefix; false for none.
func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok || !a.Unmap().Is4() {
		return netip.Prefix{}, false
	}
	bits, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), bits), true
}

// leftBy says which sandboxd an interface named like another instance's
// objects belongs to, and how to remove them once it is stopped; "" for
// any other interface.
func leftBy(name string) string {
	var instance string
	switch {
	case name == defaultNetNames.bridge || strings.HasPrefix(name, defaultNetNames.prefix):
		return " (the default egress instance's: if that sandboxd is stopped, `sandboxd egress cleanup` removes its objects)"
	case strings.HasPrefix(name, "sandboxd-"):
		instance = strings.TrimPrefix(name, "sandboxd-")
	case strings.HasPrefix(name, "sx") && strings.Contains(name, "-"):
		instance = name[2:strings.Index(name, "-")]
	}
	if instance == "" || CheckEgressInstance(instance) != nil {
		return ""
	}
	return fmt.Sprintf(" (egress instance %s's: if that sandboxd is stopped, `sandboxd egress cleanup --instance %s` removes its objects)", instance, instance)
}

// egressLockDir holds each egress instance's lock file (lockInstance):
// root's, on the tmpfs /run, so that no stale file outlives a reboot.
// Tests substitute a directory of their own.
var egressLockDir = "/run/sandboxd"

// lockInstance takes the egress instance n's lock for this process, for
// as long as its networking runs (netState), so that a second sandboxd
// naming the same instance is refused at start and `sandboxd egress
// cleanup` refuses to remove a running instance's objects. An flock: the
// kernel releases it when the process dies, however it dies. The file
// holds the holder's PID, for the refusal's message.
func lockInstance(n netNames) (*os.File, error) {
	if err := os.MkdirAll(egressLockDir, 0o700); err != nil {
		return nil, fmt.Errorf("egress instance lock: %w", err)
	}
	path := lockPath(n)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("egress instance lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			pid, _ := io.ReadAll(io.LimitReader(f, 32))
			return nil, core.Preconditionf("the egress instance of bridge %s and nftables table inet %s is in use by a running sandboxd (pid %s, lock %s)", n.bridge, n.table, cmpReason(strings.TrimSpace(string(pid)), "unknown"), path)
		}
		return nil, fmt.Errorf("egress instance lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// lockPath is instance n's lock file.
func lockPath(n netNames) string { return filepath.Join(egressLockDir, "egress-"+n.table+".lock") }

// lock: see netKernel.
func (linuxKernel) lock(n netNames) (io.Closer, error) { return lockInstance(n) }

// CleanupEgress removes what a stopped sandboxd's egress networking left
// on the host (its isolation outlives it by design, see network.go): the
// host ends of its sandboxes' veths (interfaces of its prefix), its
// bridge and its nftables table, for the instance named (empty: the
// default one). It refuses while that instance runs: its lock is held
// (lockInstance), or something listens on its gateway's port. It holds
// the lock while it works, so that the instance cannot start meanwhile.
// The interfaces go first, and the table stays if any of them could not
// be removed: nothing that still reaches a sandbox goes unfiltered. It
// returns what it removed.
//
// The instance's sandboxes, if still running, lose their network (the
// veths are gone); the next start of that sandboxd plumbs them again.
func CleanupEgress(instance string) ([]string, error) {
	n := defaultNetNames
	if instance != "" {
		var err error
		if n, err = instanceNetNames(instance); err != nil {
			return nil, err
		}
	}
	return cleanupNet(n)
}

func cleanupNet(n netNames) ([]string, error) {
	lock, err := lockInstance(n)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	br, err := netlink.LinkByName(n.bridge)
	switch {
	case isLinkGone(err):
		br = nil
	case err != nil:
		return nil, fmt.Errorf("find bridge %s: %w", n.bridge, err)
	case br.Type() != "bridge":
		return nil, core.Preconditionf("%s is a %s, not a sandboxd bridge; nothing removed", n.bridge, br.Type())
	default:
		if err := gatewayIdle(br); err != nil {
			return nil, err
		}
	}

	var removed []string
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list the host's interfaces: %w", err)
	}
	var errs []error
	for _, l := range links {
		name := l.Attrs().Name
		if !strings.HasPrefix(name, n.prefix) {
			continue
		}
		if err := netlink.LinkDel(l); err != nil && !isLinkGone(err) {
			errs = append(errs, fmt.Errorf("remove %s: %w", name, err))
			continue
		}
		removed = append(removed, "interface "+name)
	}
	if len(errs) > 0 {
		return removed, fmt.Errorf("%w; the bridge %s and the table inet %s stay, so that no sandbox's traffic goes unfiltered", errors.Join(errs...), n.bridge, n.table)
	}
	if br != nil {
		if err := netlink.LinkDel(br); err != nil && !isLinkGone(err) {
			return removed, fmt.Errorf("remove bridge %s: %w", n.bridge, err)
		}
		removed = append(removed, "bridge "+n.bridge)
	}
	c, err := nftables.New()
	if err != nil {
		return removed, err
	}
	if _, err := c.ListTableOfFamily(n.table, nftables.TableFamilyINet); err == nil {
		c.DelTable(&nftables.Table{Name: n.table, Family: nftables.TableFamilyINet})
		if err := c.Flush(); err != nil && !errors.Is(err, os.ErrNotExist) {
			return removed, fmt.Errorf("remove nftables table inet %s: %w", n.table, err)
		}
		removed = append(removed, "nftables table inet "+n.table)
	} else if !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENOENT) {
		return removed, fmt.Errorf("look up nftables table inet %s: %w", n.table, err)
	}
	return removed, nil
}

// gatewayIdle refuses when something listens on the gateway's port of an
// address of the bridge: a sandboxd of the instance runs, whose lock
// this process cannot see (another mount namespace's /run).
func gatewayIdle(br netlink.Link) error {
	addrs, err := netlink.AddrList(br, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("list %s's addresses: %w", br.Attrs().Name, err)
	}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		at := netip.AddrPortFrom(ip.Unmap(), gatewayTCPPort).String()
		l, err := net.Listen("tcp4", at)
		if errors.Is(err, unix.EADDRINUSE) {
			return core.Preconditionf("something listens on %s, the egress gateway's address on %s: a sandboxd of this instance runs; stop it first", at, br.Attrs().Name)
		}
		if err == nil {
			l.Close()
		}
	}
	return nil
}
