package docker

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/nftexpr"
)

// linuxKernel is the real netKernel: netlink for links, addresses and
// routes, nftables for the table, /proc/sys for IPv6.
type linuxKernel struct{}

var _ netKernel = linuxKernel{}

// setupHost checks that the subnet is the instance's alone
// (checkOverlap), creates the bridge holding G (a bridge without ports:
// the dummy driver is not in every kernel, the bridge is in every kernel
// Docker runs on) and writes the table.
func (linuxKernel) setupHost(n netNames, subnet netip.Prefix, gw netip.Addr) error {
	if err := checkOverlap(n, subnet); err != nil {
		return err
	}
	br, err := netlink.LinkByName(n.bridge)
	if _, missing := err.(netlink.LinkNotFoundError); missing {
		la := netlink.NewLinkAttrs()
		la.Name = n.bridge
		if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: la}); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("create bridge %s: %w", n.bridge, err)
		}
		br, err = netlink.LinkByName(n.bridge)
	}
	if err != nil {
		return fmt.Errorf("find bridge %s: %w", n.bridge, err)
	}
	if br.Type() != "bridge" {
		return fmt.Errorf("%s exists and is a %s, not sandboxd's bridge", n.bridge, br.Type())
	}
	if err := disableIPv6(n.bridge); err != nil {
		return err
	}
	if err := netlink.AddrReplace(br, &netlink.Addr{IPNet: prefixNet(netip.PrefixFrom(gw, 32))}); err != nil {
		return fmt.Errorf("address %s on %s: %w", gw, n.bridge, err)
	}
	if err := netlink.LinkSetUp(br); err != nil {
		return fmt.Errorf("set %s up: %w", n.bridge, err)
	}
	return writeTable(n, gw)
}

// writeTable replaces the table inet <n.table> atomically (one netlink
// batch: add, delete, add and fill), so that there is never a moment
// without its rules. The rules, and what each blocks:
//
//	chain guard (filter, prerouting, priority raw: before conntrack)
//	  iifname "sbx-*" meta nfproto ipv6 drop         IPv6 (also disabled on
//	                                                 both ends of each veth)
//	  iifname "sbx-*" fib saddr . iif oif missing drop
//	                                                 a source address not
//	                                                 routed back through the
//	                                                 interface it came from:
//	                                                 spoofing another
//	                                                 sandbox's S, H, G or any
//	                                                 other address
//	  iifname "sbx-*" udp dport 53 add @dns_udp { ip saddr limit rate over 200/second burst 200 packets } drop
//	  iifname "sbx-*" tcp dport 53 tcp flags & (syn|ack) == syn add @dns_tcp { ip saddr limit rate over 200/second burst 200 packets } drop
//	                                                 a sandbox's DNS past
//	                                                 dnsPacketRate (per source
//	                                                 address, so per sandbox:
//	                                                 the rule above keeps it
//	                                                 honest), dropped here,
//	                                                 before conntrack and the
//	                                                 gateway's shared socket:
//	                                                 a flood cannot fill that
//	                                                 socket's queue for every
//	                                                 sandbox, nor the conntrack
//	                                                 table
//	chain dnat (nat, prerouting, priority dstnat)
//	  iifname "sbx-*" udp dport 53 dnat ip to G:53   DNS, whatever server the
//	  iifname "sbx-*" tcp dport 53 dnat ip to G:53   sandbox names, to the
//	                                                 gateway's
//	  iifname "sbx-*" meta l4proto tcp dnat ip to G:15001
//	                                                 every other TCP
//	                                                 connection, to any
//	                                                 address (the world, H,
//	                                                 the host's addresses,
//	                                                 other sandboxes, link-
//	                                                 local), to the gateway,
//	                                                 which judges it
//	chain input (filter, input, priority filter)
//	  ct state established,related accept             replies to the host's own
//	                                                 connections into a
//	                                                 sandbox (ports), and the
//	                                                 gateway's flows
//	  iifname "sbx-*" ip daddr G tcp dport 15001 accept
//	  iifname "sbx-*" ip daddr G udp dport 53 accept
//	  iifname "sbx-*" ip daddr G tcp dport 53 accept
//	  iifname "sbx-*" drop                           anything else for the
//	                                                 host: UDP, ICMP, other
//	                                                 ports of G
//	  iifname != "sbx-*" ip daddr G drop             the gateway is the
//	                                                 sandboxes' alone
//	chain forward (filter, forward, priority filter)
//	  iifname "sbx-*" drop                           no routing from sandboxes
//	  oifname "sbx-*" drop                           nor to them: UDP and ICMP
//	                                                 to the world or another
//	                                                 sandbox go nowhere
//
// "sbx-" is n.prefix; interface names are matched by prefix, so the table
// never changes with the sandboxes.
func writeTable(n netNames, gw netip.Addr) error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	t := &nftables.Table{Name: n.table, Family: nftables.TableFamilyINet}
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	accept := nftables.ChainPolicyAccept
	guard := c.AddChain(&nftables.Chain{Name: "guard", Table: t, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRaw, Policy: &accept})
	dnat := c.AddChain(&nftables.Chain{Name: "dnat", Table: t, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest, Policy: &accept})
	input := c.AddChain(&nftables.Chain{Name: "input", Table: t, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	forward := c.AddChain(&nftables.Chain{Name: "forward", Table: t, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept})

	fromSandbox := ifname(expr.MetaKeyIIFNAME, n.prefix, expr.CmpOpEq)
	notFromSandbox := ifname(expr.MetaKeyIIFNAME, n.prefix, expr.CmpOpNeq)
	toSandbox := ifname(expr.MetaKeyOIFNAME, n.prefix, expr.CmpOpEq)
	g := gw.AsSlice()
	rule := func(ch *nftables.Chain, parts ...[]expr.Any) {
		var exprs []expr.Any
		for _, p := range parts {
			exprs = append(exprs, p...)
		}
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: exprs})
	}
	verdict := func(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }

	rule(guard, fromSandbox, nftexpr.NFProto(unix.NFPROTO_IPV6), verdict(expr.VerdictDrop))
	rule(guard, fromSandbox, nftexpr.NFProto(unix.NFPROTO_IPV4), []expr.Any{
		&expr.Fib{Register: 1, FlagSADDR: true, FlagIIF: true, ResultOIF: true, FlagPRESENT: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: make([]byte, 4)},
	}, verdict(expr.VerdictDrop))

	for _, p := range []struct {
		set   string
		proto byte
		syn   bool
	}{{"dns_udp", unix.IPPROTO_UDP, false}, {"dns_tcp", unix.IPPROTO_TCP, true}} {
		set := &nftables.Set{Table: t, Name: p.set, KeyType: nftables.TypeIPAddr, Dynamic: true, Size: dnsMeterSize}
		if err := c.AddSet(set, nil); err != nil {
			return fmt.Errorf("nftables set %s: %w", p.set, err)
		}
		match := [][]expr.Any{fromSandbox, nftexpr.NFProto(unix.NFPROTO_IPV4), nftexpr.L4(p.proto), nftexpr.DPort(gatewayDNSPort)}
		if p.syn {
			match = append(match, synOnly())
		}
		rule(guard, append(match, overRate(set), verdict(expr.VerdictDrop))...)
	}

	rule(dnat, fromSandbox, nftexpr.NFProto(unix.NFPROTO_IPV4), nftexpr.L4(unix.IPPROTO_UDP), nftexpr.DPort(gatewayDNSPort), dnatTo(g, gatewayDNSPort))
	rule(dnat, fromSandbox, nftexpr.NFProto(unix.NFPROTO_IPV4), nftexpr.L4(unix.IPPROTO_TCP), nftexpr.DPort(gatewayDNSPort), dnatTo(g, gatewayDNSPort))
	rule(dnat, fromSandbox, nftexpr.NFProto(unix.NFPROTO_IPV4), nftexpr.L4(unix.IPPROTO_TCP), dnatTo(g, gatewayTCPPort))

	rule(input, []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}, verdict(expr.VerdictAccept))
	for _, p := range []struct {
		proto byte
		port  uint16
	}{{unix.IPPROTO_TCP, gatewayTCPPort}, {unix.IPPROTO_UDP, gatewayDNSPort}, {unix.IPPROTO_TCP, gatewayDNSPort}} {
		rule(input, fromSandbox, nftexpr.NFProto(unix.NFPROTO_IPV4), nftexpr.DAddr4(g), nftexpr.L4(p.proto), nftexpr.DPort(p.port), verdict(expr.VerdictAccept))
	}
	rule(input, fromSandbox, verdict(expr.VerdictDrop))
	rule(input, notFromSandbox, nftexpr.NFProto(unix.NFPROTO_IPV4), nftexpr.DAddr4(g), verdict(expr.VerdictDrop))

	rule(forward, fromSandbox, verdict(expr.VerdictDrop))
	rule(forward, toSandbox, verdict(expr.VerdictDrop))
	if err := c.Flush(); err != nil {
		return fmt.Errorf("write nftables table inet %s: %w", n.table, err)
	}
	return nil
}

// The kernel's bound on each sandbox's DNS (writeTable): packets per
// second and burst, per source address. Above the gateway's own rate
// (egress: 100 queries/s, burst 200), so that the kernel only ever drops
// what the gateway would refuse anyway, and low enough that the gateway's
// socket sees a bounded share of a flood: 200/s from each sandbox.
const (
	dnsPacketRate  = 200
	dnsPacketBurst = 200
	// dnsMeterSize bounds the meters' entries (one per source address
	// that sent DNS; the egress subnet bounds them anyway).
	dnsMeterSize = 65535
)

// overRate matches a packet whose source address sent more than
// dnsPacketRate DNS packets a second (burst dnsPacketBurst), counted in
// set, an entry per address: nft's `add @set { ip saddr limit rate over
// N/second burst B packets }` (a meter).
func overRate(set *nftables.Set) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Dynset{SrcRegKey: 1, SetName: set.Name, SetID: set.ID, Operation: unix.NFT_DYNSET_OP_ADD,
			Exprs: []expr.Any{&expr.Limit{Type: expr.LimitTypePkts, Rate: dnsPacketRate, Over: true, Unit: expr.LimitTimeSecond, Burst: dnsPacketBurst}}},
	}
}

// synOnly matches a TCP segment opening a connection (SYN without ACK):
// the TCP meter counts connections, not the packets of one.
func synOnly() []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 1, Mask: []byte{0x12}, Xor: []byte{0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0x02}},
	}
}

// deleteTable removes the table (tests).
func deleteTable(name string) error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	c.DelTable(&nftables.Table{Name: name, Family: nftables.TableFamilyINet})
	return c.Flush()
}

// ifname matches an interface name by prefix (nft's "sbx-*"): the
// comparison covers the prefix's bytes alone.
func ifname(key expr.MetaKey, prefix string, op expr.CmpOp) []expr.Any {
	return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: op, Register: 1, Data: []byte(prefix)}}
}

func dnatTo(a []byte, port uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: a},
		&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2, Specified: true},
	}
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// disableIPv6 turns IPv6 off on a host interface.
func disableIPv6(link string) error {
	return writeSysctl(filepath.Join("/proc/sys/net/ipv6/conf", link, "disable_ipv6"), "1")
}

func writeSysctl(path, v string) error {
	if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
		if errors.Is(err, os.ErrNotExist) && strings.HasPrefix(path, "/proc/sys/net/ipv6/") {
			return nil // a kernel without IPv6
		}
		return fmt.Errorf("sysctl %s: %w", path, err)
	}
	return nil
}

// inNetns runs f on a thread in pid's network namespace. The thread is
// never given back to the scheduler (the goroutine ends locked, so the
// runtime ends the thread): no other goroutine ever runs in the wrong
// namespace, whatever f or the switch back do.
func inNetns(pid int, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		ns, err := netns.GetFromPid(pid)
		if err != nil {
			errc <- fmt.Errorf("network namespace of process %d: %w", pid, err)
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			errc <- fmt.Errorf("enter the network namespace of process %d: %w", pid, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// handleAt is a netlink handle in pid's network namespace.
func handleAt(pid int) (*netlink.Handle, error) {
	ns, err := netns.GetFromPid(pid)
	if err != nil {
		return nil, fmt.Errorf("network namespace of process %d: %w", pid, err)
	}
	defer ns.Close()
	return netlink.NewHandleAt(ns)
}

// plumb: see netKernel.
func (k linuxKernel) plumb(n netNames, link string, pid int, h, s netip.Addr) error {
	if err := k.clear(n, link, h); err != nil {
		return err
	}
	ns, err := netns.GetFromPid(pid)
	if err != nil {
		return fmt.Errorf("network namespace of process %d: %w", pid, err)
	}
	defer ns.Close()
	la := netlink.NewLinkAttrs()
	la.Name = link
	veth := &netlink.Veth{LinkAttrs: la, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(ns))}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("create veth %s: %w", link, err)
	}
	ok := false
	defer func() {
		if !ok {
			k.unplumb(link)
		}
	}()
	// The namespace's side first: IPv6 off before eth0 comes up, so that
	// it never has a link-local address.
	if err := inNetns(pid, func() error {
		for _, p := range []string{"all", "default", "eth0"} {
			if err := writeSysctl("/proc/sys/net/ipv6/conf/"+p+"/disable_ipv6", "1"); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := k.restoreAddr(pid, h, s); err != nil {
		return err
	}
	host, err := netlink.LinkByName(link)
	if err != nil {
		return err
	}
	if err := disableIPv6(link); err != nil {
		return err
	}
	if err := netlink.AddrReplace(host, &netlink.Addr{IPNet: prefixNet(netip.PrefixFrom(h, 31))}); err != nil {
		return fmt.Errorf("address %s on %s: %w", h, link, err)
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return fmt.Errorf("set %s up: %w", link, err)
	}
	ok = true
	return nil
}

// clear removes what would stand in the way of link with h: a stale
// link of that name, and any other link of the prefix carrying h.
func (k linuxKernel) clear(n netNames, link string, h netip.Addr) error {
	if err := k.unplumb(link); err != nil {
		return err
	}
	return removeStale(n.prefix, h)
}

// removeStale removes links of the prefix other than ours that carry h:
// the host end of a namespace being torn down (the kernel does it
// asynchronously) or of a holder removed behind sandboxd's back. Addresses
// are sandboxd's to hand out, so such a link is stale.
func removeStale(prefix string, h netip.Addr) error {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		ip, _ := netip.AddrFromSlice(a.IP)
		if ip.Unmap() != h {
			continue
		}
		l, err := netlink.LinkByIndex(a.LinkIndex)
		if err != nil || !strings.HasPrefix(l.Attrs().Name, prefix) {
			if err == nil {
				return fmt.Errorf("the address %s is on %s, which is not sandboxd's: is the egress subnet in use on this host?", h, l.Attrs().Name)
			}
			continue
		}
		if err := netlink.LinkDel(l); err != nil && !isLinkGone(err) {
			return fmt.Errorf("remove stale %s: %w", l.Attrs().Name, err)
		}
	}
	return nil
}

func isLinkGone(err error) bool {
	_, nf := err.(netlink.LinkNotFoundError)
	return nf || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOENT)
}

// eth0At is a netlink handle in pid's network namespace and its eth0;
// the caller closes the handle.
func eth0At(pid int) (*netlink.Handle, netlink.Link, error) {
	nh, err := handleAt(pid)
	if err != nil {
		return nil, nil, err
	}
	eth0, err := nh.LinkByName("eth0")
	if err != nil {
		nh.Close()
		return nil, nil, fmt.Errorf("eth0 in the sandbox's namespace: %w", err)
	}
	return nh, eth0, nil
}

// restoreAddr: see netKernel.
func (linuxKernel) restoreAddr(pid int, h, s netip.Addr) error {
	nh, eth0, err := eth0At(pid)
	if err != nil {
		return err
	}
	defer nh.Close()
	if err := nh.AddrReplace(eth0, &netlink.Addr{IPNet: prefixNet(netip.PrefixFrom(s, 31))}); err != nil {
		return fmt.Errorf("address %s on eth0: %w", s, err)
	}
	if err := nh.LinkSetUp(eth0); err != nil {
		return fmt.Errorf("set eth0 up: %w", err)
	}
	if lo, err := nh.LinkByName("lo"); err == nil {
		if err := nh.LinkSetUp(lo); err != nil {
			return fmt.Errorf("set lo up: %w", err)
		}
	}
	def := &netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: h.AsSlice(), Dst: prefixNet(netip.MustParsePrefix("0.0.0.0/0"))}
	if err := nh.RouteReplace(def); err != nil {
		return fmt.Errorf("default route via %s: %w", h, err)
	}
	return nil
}

// readdress: see netKernel.
func (k linuxKernel) readdress(n netNames, from, to string, pid int, h, s netip.Addr) error {
	if err := k.clear(n, to, h); err != nil {
		return err
	}
	host, err := netlink.LinkByName(from)
	if err != nil {
		return fmt.Errorf("veth %s: %w", from, err)
	}
	nh, eth0, err := eth0At(pid)
	if err != nil {
		return err
	}
	defer nh.Close()
	if eth0.Attrs().ParentIndex != host.Attrs().Index {
		return fmt.Errorf("%s is not the peer of eth0 in process %d's namespace", from, pid)
	}
	if err := netlink.LinkSetDown(host); err != nil {
		return fmt.Errorf("set %s down: %w", from, err)
	}
	if err := netlink.LinkSetName(host, to); err != nil {
		return fmt.Errorf("rename %s to %s: %w", from, to, err)
	}
	hh, err := netlink.NewHandle()
	if err != nil {
		return err
	}
	defer hh.Close()
	if err := replaceAddrs(hh, host, h); err != nil {
		return err
	}
	if err := replaceAddrs(nh, eth0, s); err != nil {
		return err
	}
	if err := k.restoreAddr(pid, h, s); err != nil {
		return err
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return fmt.Errorf("set %s up: %w", to, err)
	}
	return nil
}

// replaceAddrs makes a/31 the only IPv4 address of l, with h, a handle
// of the namespace l is in.
func replaceAddrs(h *netlink.Handle, l netlink.Link, a netip.Addr) error {
	addrs, err := h.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("addresses of %s: %w", l.Attrs().Name, err)
	}
	want := prefixNet(netip.PrefixFrom(a, 31))
	for _, old := range addrs {
		if old.IPNet.String() == want.String() {
			continue
		}
		if err := h.AddrDel(l, &old); err != nil {
			return fmt.Errorf("remove %s from %s: %w", old.IPNet, l.Attrs().Name, err)
		}
	}
	if err := h.AddrReplace(l, &netlink.Addr{IPNet: want}); err != nil {
		return fmt.Errorf("address %s on %s: %w", a, l.Attrs().Name, err)
	}
	return nil
}

// plumbed: see netKernel.
func (linuxKernel) plumbed(link string, pid int, s netip.Addr, addr bool) (bool, error) {
	host, err := netlink.LinkByName(link)
	if isLinkGone(err) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	nh, err := handleAt(pid)
	if err != nil {
		return false, err
	}
	defer nh.Close()
	eth0, err := nh.LinkByName("eth0")
	if isLinkGone(err) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	// The pair's two ends name each other's index; the netns check is
	// that eth0 was found in pid's namespace at all.
	if eth0.Attrs().ParentIndex != host.Attrs().Index {
		return false, nil
	}
	if !addr {
		return true, nil
	}
	addrs, err := nh.AddrList(eth0, netlink.FAMILY_V4)
	if err != nil {
		return false, err
	}
	for _, a := range addrs {
		if ip, _ := netip.AddrFromSlice(a.IP); ip.Unmap() == s {
			return true, nil
		}
	}
	return false, nil
}

// unplumb: see netKernel.
func (linuxKernel) unplumb(link string) error {
	l, err := netlink.LinkByName(link)
	if isLinkGone(err) {
		return nil
	} else if err != nil {
		return err
	}
	if err := netlink.LinkDel(l); err != nil && !isLinkGone(err) {
		return fmt.Errorf("remove %s: %w", link, err)
	}
	return nil
}

// listen: see netKernel. The gateway's sockets are sandboxd's, on the
// host: IP_FREEBIND is not needed, G is on the bridge before this.
func (linuxKernel) listen(gw netip.Addr) (net.Listener, net.PacketConn, net.Listener, error) {
	tcp, err := net.Listen("tcp4", netip.AddrPortFrom(gw, gatewayTCPPort).String())
	if err != nil {
		return nil, nil, nil, err
	}
	udp, err := net.ListenPacket("udp4", netip.AddrPortFrom(gw, gatewayDNSPort).String())
	if err != nil {
		tcp.Close()
		return nil, nil, nil, err
	}
	dnsTCP, err := net.Listen("tcp4", netip.AddrPortFrom(gw, gatewayDNSPort).String())
	if err != nil {
		tcp.Close()
		udp.Close()
		return nil, nil, nil, err
	}
	return tcp, udp, dnsTCP, nil
}
