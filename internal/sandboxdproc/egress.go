package sandboxdproc

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
)

// EgressNet is an --egress-instance and --egress-subnet of their own for a
// sandboxd started with --allow-network. Without them every sandboxd on a
// host uses the default table, bridge and gateway address, and go test runs
// packages side by side: the second to start could not bind the gateway.
type EgressNet struct {
	Instance string       // names the table inet sandboxd-NAME and the bridge sandboxd-NAME
	Subnet   netip.Prefix // a /24
}

// NewEgressNet picks a name no bridge has (the letter tag and three hex
// digits) and a /24 of block (a /16) that no address of this host, nor
// any of avoid, is in.
//
// Each caller takes a /16 of its own, so that the /24s picked by tests
// running at once never overlap even before their gateways are up: the
// docker package's tests 100.126, the network suite (e2e) 100.125, the
// E2B SDK suites 100.124, the MCP tests 100.123, the network pool's crash
// test (e2e) 100.122, the bench 198.19.
func NewEgressNet(tag byte, block netip.Prefix, avoid ...netip.Addr) (EgressNet, error) {
	if !block.Addr().Is4() || block.Bits() != 16 {
		return EgressNet{}, fmt.Errorf("egress block %s: want an IPv4 /16", block)
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return EgressNet{}, fmt.Errorf("list addresses: %w", err)
	}
	b := block.Masked().Addr().As4()
	for range 64 {
		e := EgressNet{
			Instance: fmt.Sprintf("%c%03x", tag, rand.IntN(1<<12)),
			Subnet:   netip.PrefixFrom(netip.AddrFrom4([4]byte{b[0], b[1], byte(rand.IntN(256)), 0}), 24),
		}
		used := false
		for _, a := range avoid {
			used = used || e.Subnet.Contains(a)
		}
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok && e.Subnet.Contains(ip.Unmap()) {
				used = true
			}
		}
		if _, err := netlink.LinkByName("sandboxd-" + e.Instance); err == nil {
			used = true
		}
		if !used {
			return e, nil
		}
	}
	return EgressNet{}, fmt.Errorf("no free /24 in %s for the sandboxes", block)
}

// Flags are sandboxd's flags naming it.
func (e EgressNet) Flags() []string {
	return []string{"--egress-instance", e.Instance, "--egress-subnet", e.Subnet.String()}
}

// Remove deletes what sandboxd leaves of it on the host once stopped (its
// isolation outlives it by design): the nftables table and the bridge.
// Either being gone already is no error.
func (e EgressNet) Remove() error {
	name := "sandboxd-" + e.Instance
	var errs []error
	c, err := nftables.New()
	if err == nil {
		c.DelTable(&nftables.Table{Name: name, Family: nftables.TableFamilyINet})
		if err := c.Flush(); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove nftables table inet %s: %w", name, err))
		}
	} else {
		errs = append(errs, err)
	}
	if l, err := netlink.LinkByName(name); err == nil {
		if err := netlink.LinkDel(l); err != nil {
			errs = append(errs, fmt.Errorf("remove bridge %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}
