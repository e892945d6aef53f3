//go:build linux

// Package podnet confines a networked sandbox Pod's sandbox user to its io
// sidecar's egress gateway, from inside the Pod's network namespace.
//
// Why here, and why this way. On the Kubernetes backend a networked
// sandbox's egress gateway runs in its Pod's io sidecar
// (orchestrator/backend/kube/iosidecar/egress.go). The sandbox container
// shares the Pod's network namespace, so something must make the sidecar
// its only way out; that takes netfilter rules in the namespace, and Pod
// Security (baseline) forbids the NET_ADMIN a container of the Pod would
// need to write them. So the node writes them, when the Pod's network is
// set up and before any container starts: sandbox-cni (cmd/sandbox-cni),
// a chained CNI plugin, calls Install. The sandbox user cannot change them
// (no capabilities); the sidecar, another user, is not redirected.
//
// A runtime with a network stack of its own (gVisor's netstack, a VM)
// sends the sandbox's packets without passing this namespace's netfilter,
// and a node without the plugin has no table at all: the sidecar probes
// (ProbeAddr) before it opens its gateway, and refuses to while the probe
// is not redirected.
package podnet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/nftexpr"
)

// Config says whose traffic goes where; the zero value takes the
// defaults, which the io sidecar's flags share.
type Config struct {
	// UID is the sandbox user's; default 1000.
	UID uint32
	// TCPPort, DNSPort and ProbePort are the gateway's listeners on
	// 127.0.0.1: its TCP (default 15001), its DNS over UDP and TCP
	// (default 15053), and the probe's (default 15002).
	TCPPort, DNSPort, ProbePort uint16
}

// Defaults.
const (
	DefaultUID       = 1000
	DefaultTCPPort   = 15001
	DefaultDNSPort   = 15053
	DefaultProbePort = 15002
)

// TableName is the table Install writes (family inet).
const TableName = "sandboxd-egress"

// ProbeAddr is where the sidecar's probe connects: the table redirects a
// TCP connection to it, from any user, to 127.0.0.1:ProbePort. Without the
// table it is refused (or, where a runtime lets Pods bind low ports and
// something listens there, it reaches that listener, not the probe's: the
// sidecar checks that the connection it accepts is the one it made).
var ProbeAddr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 2}), 1)

func (c Config) withDefaults() Config {
	if c.UID == 0 {
		c.UID = DefaultUID
	}
	if c.TCPPort == 0 {
		c.TCPPort = DefaultTCPPort
	}
	if c.DNSPort == 0 {
		c.DNSPort = DefaultDNSPort
	}
	if c.ProbePort == 0 {
		c.ProbePort = DefaultProbePort
	}
	return c
}

// Install writes the table into the network namespace at netnsPath,
// replacing any table of the name in one transaction (so it is
// idempotent, and there is never a moment with half of it). The rules:
//
//	chain redirect (nat, output, priority dstnat)
//	  ip daddr 127.0.0.2 tcp dport 1 redirect to :ProbePort
//	                                   the probe, from any user
//	  meta skuid UID udp dport 53 redirect to :DNSPort
//	  meta skuid UID tcp dport 53 redirect to :DNSPort
//	                                   the sandbox's DNS, to whatever server
//	                                   (a Pod without a nameserver asks
//	                                   127.0.0.1), to the gateway's
//	  meta skuid UID ip daddr != 127.0.0.0/8 meta l4proto tcp redirect to :TCPPort
//	                                   every other TCP connection leaving
//	                                   the Pod, to the gateway, which judges
//	                                   its original destination
//	chain confine (filter, output, priority filter)
//	  meta skuid UID ip daddr 127.0.0.0/8 accept
//	  meta skuid UID ip6 daddr ::1 accept
//	                                   the Pod's loopback, the redirected
//	                                   connections included (their
//	                                   destination is 127.0.0.1 by now;
//	                                   not "oifname lo": the hook still
//	                                   names the interface they were first
//	                                   routed to)
//	  meta skuid UID ct direction reply meta l4proto tcp accept
//	                                   its answers on TCP connections
//	                                   others opened to it: sandboxd's
//	                                   ports front, reaching a port the
//	                                   sandbox serves (who may open one is
//	                                   the NetworkPolicies' to say)
//	  meta skuid UID drop              anything else the sandbox user sends:
//	                                   UDP, ICMP, IPv6, to any address
//
// Only IPv4 is redirected: the sandbox's IPv6 beyond loopback is dropped.
func Install(netnsPath string, c Config) error {
	c = c.withDefaults()
	return inNetns(netnsPath, func(conn *nftables.Conn) error {
		t := &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}
		conn.AddTable(t)
		conn.DelTable(t)
		conn.AddTable(t)
		accept := nftables.ChainPolicyAccept
		nat := conn.AddChain(&nftables.Chain{Name: "redirect", Table: t, Type: nftables.ChainTypeNAT,
			Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest, Policy: &accept})
		confine := conn.AddChain(&nftables.Chain{Name: "confine", Table: t, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
		rule := func(ch *nftables.Chain, parts ...[]expr.Any) {
			var exprs []expr.Any
			for _, p := range parts {
				exprs = append(exprs, p...)
			}
			conn.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: exprs})
		}
		user := skuid(c.UID)
		ipv4 := nftexpr.NFProto(unix.NFPROTO_IPV4)
		probe := ProbeAddr.Addr().As4()
		rule(nat, ipv4, nftexpr.DAddr4(probe[:]), nftexpr.L4(unix.IPPROTO_TCP), nftexpr.DPort(ProbeAddr.Port()), redirect(c.ProbePort))
		rule(nat, user, ipv4, nftexpr.L4(unix.IPPROTO_UDP), nftexpr.DPort(53), redirect(c.DNSPort))
		rule(nat, user, ipv4, nftexpr.L4(unix.IPPROTO_TCP), nftexpr.DPort(53), redirect(c.DNSPort))
		rule(nat, user, ipv4, loopback(expr.CmpOpNeq), nftexpr.L4(unix.IPPROTO_TCP), redirect(c.TCPPort))
		rule(confine, user, ipv4, loopback(expr.CmpOpEq), nftexpr.Verdict(expr.VerdictAccept))
		rule(confine, user, nftexpr.NFProto(unix.NFPROTO_IPV6), daddr6(net.IPv6loopback), nftexpr.Verdict(expr.VerdictAccept))
		rule(confine, user, ctReply(), nftexpr.L4(unix.IPPROTO_TCP), nftexpr.Verdict(expr.VerdictAccept))
		rule(confine, user, nftexpr.Verdict(expr.VerdictDrop))
		return conn.Flush()
	})
}

// Installed reports whether the network namespace at netnsPath has the
// table (CNI's CHECK).
func Installed(netnsPath string) (bool, error) {
	var found bool
	err := inNetns(netnsPath, func(conn *nftables.Conn) error {
		tables, err := conn.ListTablesOfFamily(nftables.TableFamilyINet)
		if err != nil {
			return err
		}
		for _, t := range tables {
			if t.Name == TableName {
				found = true
			}
		}
		return nil
	})
	return found, err
}

// inNetns runs f with a netlink connection into the namespace at path.
func inNetns(path string, f func(*nftables.Conn) error) error {
	if path == "" {
		return errors.New("podnet: no network namespace given")
	}
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("podnet: open network namespace %s: %w", path, err)
	}
	defer ns.Close()
	conn, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return fmt.Errorf("podnet: nftables in %s: %w", path, err)
	}
	defer conn.CloseLasting()
	if err := f(conn); err != nil {
		return fmt.Errorf("podnet: table %s in %s: %w", TableName, path, err)
	}
	return nil
}

func skuid(uid uint32) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeySKUID, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(uid)}}
}

// loopback is "ip daddr 127.0.0.0/8" (op CmpOpEq) or its negation.
func loopback(op expr.CmpOp) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte{255, 0, 0, 0}, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: op, Register: 1, Data: []byte{127, 0, 0, 0}},
	}
}

// daddr6 is "ip6 daddr a".
func daddr6(a net.IP) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 24, Len: 16},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a.To16()},
	}
}

// ctReply is "ct direction reply": a packet of a connection the other end
// opened.
func ctReply() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeyDIRECTION},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{1}}, // IP_CT_DIR_REPLY,
	}
}

func redirect(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.Redir{RegisterProtoMin: 1},
	}
}
