//go:build linux

package node

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// The cluster's addresses, all in one /24 of 198.18.0.0/15 (RFC 2544's
// benchmarking block) that no other test process uses (nettest.FreeBlock):
//
//	.1          the API server, on a link of the host (sbxkn<tag>)
//	.2i, .2i+1  node i's veth pair: the host's end, the node's (/31)
//	.64(i+1)/26 node i's Pod addresses (at most three nodes), on the
//	            node's bridge, routed by the host through the node
//
// Pods reach nothing but their node and the host (the host does not
// forward: Docker's FORWARD policy is DROP), and nothing here reaches any
// other address; a test that wants them to reach its own test hosts
// (internal/nettest) says so (ForwardTo).
const maxNodes = 3

// blockAddr is address n of block.
func blockAddr(block netip.Prefix, n int) netip.Addr {
	b := block.Addr().As4()
	b[3] = byte(n)
	return netip.AddrFrom4(b)
}

// podCIDR is node i's Pod range.
func podCIDR(block netip.Prefix, i int) netip.Prefix {
	return netip.PrefixFrom(blockAddr(block, 64*(i+1)), 26)
}

// nsPrefix names what a cluster makes on the host, so that the next
// cluster can remove what a killed test process left: namespaces
// nsPrefix<pid>-<node>, links sbxkn<tag>… (tag: four hex digits).
const nsPrefix = "sbxkn-"

// makeAPILink puts the API server's address on a link of the host of its
// own: a bridge without ports, since this machine's kernel may lack the
// dummy module (an address is local whatever its link's carrier).
func makeAPILink(name string, addr netip.Addr) (netlink.Link, error) {
	la := netlink.NewLinkAttrs()
	la.Name = name
	link := &netlink.Bridge{LinkAttrs: la}
	if err := netlink.LinkAdd(link); err != nil {
		return nil, fmt.Errorf("link %s: %w", name, err)
	}
	if err := netlink.LinkSetAlias(link, ownerAlias()); err != nil {
		_ = netlink.LinkDel(link)
		return nil, err
	}
	if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: ipNet(addr, 32)}); err != nil {
		_ = netlink.LinkDel(link)
		return nil, err
	}
	return link, netlink.LinkSetUp(link)
}

// makeNodeNet makes node n's namespace, joined to the host by a veth pair
// (n.hostEnd on the host, n.Addr inside), forwarding between its veth and
// its Pods' bridge, and the host's route to its Pods.
func makeNodeNet(n *Node, vethName string) error {
	if err := onThread(func() error {
		ns, err := netns.NewNamed(n.netns) // moves this (discarded) thread in
		if err != nil {
			return err
		}
		defer ns.Close()
		// Forwarding between eth0 and the Pods' bridge; a new namespace
		// starts with it off.
		return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644)
	}); err != nil {
		return fmt.Errorf("namespace %s: %w", n.netns, err)
	}
	ns, err := netns.GetFromName(n.netns)
	if err != nil {
		return err
	}
	defer ns.Close()
	la := netlink.NewLinkAttrs()
	la.Name = vethName
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(ns))}); err != nil {
		return fmt.Errorf("veth %s: %w", vethName, err)
	}
	host, err := netlink.LinkByName(vethName)
	if err != nil {
		return err
	}
	n.hostLink = host
	if err := netlink.LinkSetAlias(host, ownerAlias()); err != nil {
		return err
	}
	if err := netlink.AddrAdd(host, &netlink.Addr{IPNet: ipNet(n.hostEnd, 31)}); err != nil {
		return err
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return err
	}
	nh, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer nh.Close()
	eth0, err := nh.LinkByName("eth0")
	if err != nil {
		return err
	}
	if err := nh.AddrAdd(eth0, &netlink.Addr{IPNet: ipNet(n.Addr, 31)}); err != nil {
		return err
	}
	for _, name := range []string{"eth0", "lo"} {
		l, err := nh.LinkByName(name)
		if err != nil {
			return err
		}
		if err := nh.LinkSetUp(l); err != nil {
			return err
		}
	}
	if err := nh.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: n.hostEnd.AsSlice(), Dst: ipNet(netip.IPv4Unspecified(), 0)}); err != nil {
		return err
	}
	return netlink.RouteAdd(&netlink.Route{LinkIndex: host.Attrs().Index, Gw: n.Addr.AsSlice(), Dst: prefixNet(n.PodCIDR)})
}

// ownerAlias marks a link of the host as this process's, for sweepStale.
func ownerAlias() string { return "pid-" + strconv.Itoa(os.Getpid()) }

func ipNet(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, 32)}
}

func prefixNet(p netip.Prefix) *net.IPNet { return ipNet(p.Addr(), p.Bits()) }

// onThread runs f on a thread of its own that is never reused: the
// goroutine ends with the thread locked, so the runtime ends the thread
// with whatever namespace f left it in.
func onThread(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		errc <- f()
	}()
	return <-errc
}

// sweepStale removes the namespaces and links of clusters whose test
// process is gone (killed before its clean-up ran), and their processes.
func sweepStale(logf func(string, ...any)) {
	killOrphans()
	sweepForwards(logf)
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), nsPrefix)
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(strings.SplitN(rest, "-", 2)[0])
		if err != nil || !ownerGone(pid) {
			continue
		}
		killNodeProcesses(e.Name(), logf)
		// Its containerd's state (network namespaces, shm and root file
		// system mounts) and its kubelet's root (Pod volumes); the kept
		// image store's mounts the next containerd there cleans up.
		for _, d := range []string{filepath.Join("/run", e.Name()), filepath.Join(os.TempDir(), e.Name())} {
			unmountUnder(logf, d)
			if err := os.RemoveAll(d); err != nil {
				logf("node: remove stale %s: %v", d, err)
			}
		}
		if err := netns.DeleteNamed(e.Name()); err != nil {
			// Not a mount any more (someone unmounted it): a plain file.
			if rerr := os.Remove(filepath.Join("/run/netns", e.Name())); rerr != nil {
				logf("node: remove stale namespace %s: %v, %v", e.Name(), err, rerr)
			}
		}
	}
	links, _ := netlink.LinkList()
	for _, l := range links {
		name := l.Attrs().Name
		if !strings.HasPrefix(name, "sbxkn") {
			continue
		}
		// The owner of every link made here is named in its alias.
		alias := l.Attrs().Alias
		pid, err := strconv.Atoi(strings.TrimPrefix(alias, "pid-"))
		if err == nil && ownerGone(pid) {
			if err := netlink.LinkDel(l); err != nil {
				logf("node: remove stale link %s: %v", name, err)
			}
		}
	}
}

// HostAddr is the host's address on node n's link: what the host sends
// to the node's Pods comes from it (sandboxd, in the tests, runs on the
// host), so a NetworkPolicy admits the host by it.
func (n *Node) HostAddr() netip.Addr { return n.hostEnd }

// ForwardTo lets the cluster's Pods reach addrs, test hosts of the
// test's own (internal/nettest) joined to the host, as a cluster's Pods
// reach the world beyond their nodes: the host forwards between the
// cluster's block and each address (two rules at the head of its FORWARD
// chain, ahead of Docker's DROP policy), until t ends.
func (c *Cluster) ForwardTo(t testing.TB, addrs ...netip.Addr) {
	t.Helper()
	undo, err := c.Forward(addrs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := undo(); err != nil {
			t.Error(err)
		}
	})
}

// Forward is ForwardTo for a program (the benchmark): undo removes the
// rules.
func (c *Cluster) Forward(addrs ...netip.Addr) (undo func() error, err error) {
	var added [][]string
	undo = func() error {
		var errs []error
		for i := len(added) - 1; i >= 0; i-- {
			if out, err := exec.Command("iptables", append([]string{"-w", "5", "-D"}, added[i]...)...).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("node: iptables -D %v: %v: %s", added[i], err, out))
			}
		}
		added = nil
		return errors.Join(errs...)
	}
	for _, a := range addrs {
		for _, dir := range [][2]string{{c.block.String(), a.String() + "/32"}, {a.String() + "/32", c.block.String()}} {
			rule := []string{"FORWARD", "-s", dir[0], "-d", dir[1], "-m", "comment", "--comment", ownerAlias(), "-j", "ACCEPT"}
			if out, err := exec.Command("iptables", append([]string{"-w", "5", "-I"}, rule...)...).CombinedOutput(); err != nil {
				return nil, errors.Join(fmt.Errorf("node: iptables -I %v: %v: %s", rule, err, out), undo())
			}
			added = append(added, rule)
		}
	}
	return undo, nil
}

// sweepForwards removes the FORWARD rules (ForwardTo) of clusters whose
// test process is gone.
func sweepForwards(logf func(string, ...any)) {
	out, err := exec.Command("iptables", "-w", "5", "-S", "FORWARD").Output()
	if err != nil {
		return // no iptables: no rules of ours either
	}
	for _, rule := range staleForwards(string(out), ownerGone) {
		if out, err := exec.Command("iptables", append([]string{"-w", "5", "-D"}, rule...)...).CombinedOutput(); err != nil {
			logf("node: remove stale rule %q: %v: %s", rule, err, out)
		}
	}
}

// staleForwards picks, from `iptables -S FORWARD`'s output, the rules
// ForwardTo made for a test process that is gone, each as the arguments
// that follow -D to delete it.
func staleForwards(listing string, gone func(pid int) bool) [][]string {
	var rules [][]string
	for _, line := range strings.Split(listing, "\n") {
		rest, ok := strings.CutPrefix(line, "-A ")
		if !ok || !strings.HasPrefix(rest, "FORWARD ") {
			continue
		}
		fields := strings.Fields(rest)
		i := slices.Index(fields, "--comment")
		if i < 0 || i+1 == len(fields) {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimPrefix(fields[i+1], "pid-"))
		if err != nil || !strings.HasPrefix(fields[i+1], "pid-") || !gone(pid) {
			continue
		}
		rules = append(rules, fields)
	}
	return rules
}
