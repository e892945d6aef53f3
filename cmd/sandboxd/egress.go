package main

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/sandboxd/sandboxd/orchestrator/backend/docker"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/egress"
)

// egressFlags are the operator's egress settings (core.Policy's
// EgressDefault, EgressCeiling and EgressAllowPrivate, docker.Config's
// EgressSubnet): lists given comma-separated or by repeating the flag.
type egressFlags struct {
	defaultAllow, defaultDeny, ceiling destList
	allowPrivate                       prefixList
	subnet                             prefixFlag
	instance, hostsFile, caFile        string
	// roots is caFile's contents, which the Kubernetes backend gives the
	// gateways in its Pods.
	roots []byte
}

// register adds the [egress] section's settings: --allow-network, which
// sets the backends' policy p, and --egress-*.
func (e *egressFlags) register(s sectionReg, p *core.Policy) {
	e.subnet = prefixFlag(docker.DefaultEgressSubnet)
	s.Bool("allow_network", &p.AllowNetwork, "allow-network", false, "let callers give a sandbox outbound network access (options.network, options.network_policy), through sandboxd's egress gateway under the sandbox's policy; without it sandboxes have no network. Under --runtime runsc, networked sandboxes run under the runsc-net runtime (make runsc registers it)")
	s.Var("default_allow", &e.defaultAllow, kindList, "egress-default-allow", "the allow_out of the policy a sandbox asking for network without one gets (`destinations`: domains, *.domains, IPs, CIDRs; comma-separated or repeated; allowed beats denied), copied into the sandbox at its creation. Needs --allow-network")
	s.Var("default_deny", &e.defaultDeny, kindList, "egress-default-deny", "the deny_out of that default policy (`destinations`; 0.0.0.0/0 with --egress-default-allow makes it an allow-list). Without either, network means every public destination")
	s.Var("ceiling", &e.ceiling, kindList, "egress-ceiling", "the most any sandbox may reach (`destinations`, as allow_out entries): the egress gateway refuses everything else whatever a sandbox's policy says, and a policy allowing only beyond it is INVALID_ARGUMENT (empty: no ceiling)")
	s.Var("allow_private", &e.allowPrivate, kindList, "egress-allow-private", "special `CIDR blocks` (private, CGNAT, ULA, link-local, loopback, ...) sandboxes may reach nonetheless when their policy allows, comma-separated or repeated (empty: none; the host's own addresses and other sandboxes stay unreachable)")
	s.Var("subnet", &e.subnet, kindString, "egress-subnet", "IPv4 `block` networked sandboxes are addressed from (the gateway takes its first address, each sandbox a /31); it must not overlap the host's networks: sandboxd refuses to start when it overlaps an address or a route of the host (routes shorter than /8 aside), naming the interface")
	s.String("instance", &e.instance, "egress-instance", "", "for several sandboxd on one host (tests, private deployments): names this one's network objects on the host, nftables table inet sandboxd-NAME, bridge sandboxd-NAME and interfaces sxNAME-* (`NAME`: 1 to 4 lower-case letters and digits); give each its own --egress-subnet too (empty: table sandboxd, bridge sandboxd0, interfaces sbx-*)")
	s.String("hosts_file", &e.hostsFile, "egress-hosts-file", "", "resolve the names sandboxes reach from this hosts(5) `file` alone, never asking the host's resolver (for tests and private deployments with a fixed map of names; empty: the host's /etc/hosts and resolvers). Read once, at start")
	s.String("ca_file", &e.caFile, "egress-ca-file", "", "PEM `file` of certificates the egress gateway trusts, besides the host's roots, when it verifies the server of a connection it intercepts for a header rule (a private CA; the tests' throwaway one)")
}

// apply puts the settings into the backends' policy p and the Docker
// backend's config mc, reading the files they name.
func (e *egressFlags) apply(p *core.Policy, mc *docker.Config) error {
	if len(e.defaultAllow) > 0 || len(e.defaultDeny) > 0 {
		p.EgressDefault = &core.NetworkPolicy{AllowOut: e.defaultAllow, DenyOut: e.defaultDeny}
	}
	p.EgressCeiling = e.ceiling
	p.EgressAllowPrivate = e.allowPrivate
	mc.EgressSubnet = netip.Prefix(e.subnet)
	if e.instance != "" {
		if err := docker.CheckEgressInstance(e.instance); err != nil {
			return fmt.Errorf("--egress-instance %q: want 1 to 4 lower-case letters and digits", e.instance)
		}
		mc.EgressInstance = e.instance
	}
	if (e.hostsFile != "" || e.caFile != "") && !p.AllowNetwork {
		return errors.New("--egress-hosts-file and --egress-ca-file need --allow-network")
	}
	if e.hostsFile != "" {
		h, err := egress.ReadHostsFile(e.hostsFile)
		if err != nil {
			return fmt.Errorf("--egress-hosts-file: %w", err)
		}
		mc.Egress.Resolver = h
	}
	if e.caFile != "" {
		b, err := os.ReadFile(e.caFile)
		if err != nil {
			return fmt.Errorf("--egress-ca-file: %w", err)
		}
		pool, err := egress.RootsWithPEM(b, e.caFile)
		if err != nil {
			return fmt.Errorf("--egress-ca-file: %w", err)
		}
		mc.Egress.RootCAs, e.roots = pool, b
	}
	return nil
}

// egressFlagNames names the flag of each egress field of core.Policy in
// its checks' messages.
var egressFlagNames = strings.NewReplacer(
	"EgressDefault, EgressCeiling and EgressAllowPrivate need AllowNetwork (sandboxd --allow-network)",
	"--egress-default-allow, --egress-default-deny, --egress-ceiling and --egress-allow-private need --allow-network",
	"EgressDefault: network allow_out", "--egress-default-allow", "EgressDefault: network deny_out", "--egress-default-deny",
	"EgressDefault", "--egress-default-allow/--egress-default-deny", "EgressCeiling", "--egress-ceiling", "EgressAllowPrivate", "--egress-allow-private")

// checkEgress applies core.Policy's checks of the egress settings to the
// flags' values, naming the flags; and the Docker backend's of the subnet.
func checkEgress(pol *core.Policy, s netip.Prefix) error {
	p := core.Policy{AllowNetwork: pol.AllowNetwork, EgressDefault: pol.EgressDefault, EgressCeiling: pol.EgressCeiling,
		EgressAllowPrivate: append([]netip.Prefix(nil), pol.EgressAllowPrivate...)}
	if err := p.ApplyDefaults(); err != nil {
		return errors.New(egressFlagNames.Replace(strings.TrimPrefix(err.Error(), "config: ")))
	}
	switch {
	case !s.Addr().Is4() || s.Bits() < 8 || s.Bits() > 28:
		return fmt.Errorf("--egress-subnet %s: want an IPv4 block of /8 to /28", s)
	case s != s.Masked():
		return fmt.Errorf("--egress-subnet %s has host bits set; did you mean %s?", s, s.Masked())
	}
	return nil
}

// destList is a list of egress destinations, checked as they are given.
type destList []string

func (l *destList) String() string { return strings.Join(*l, ",") }

func (l *destList) Set(s string) error {
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if _, err := core.ParseDestination(e); err != nil {
			return errors.New(strings.TrimPrefix(err.Error(), core.ErrInvalidArgument.Error()+": "))
		}
		*l = append(*l, e)
	}
	return nil
}

// prefixList is a list of CIDR blocks.
type prefixList []netip.Prefix

func (l *prefixList) String() string {
	s := make([]string, len(*l))
	for i, p := range *l {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

func (l *prefixList) Set(s string) error {
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		p, err := netip.ParsePrefix(e)
		if err != nil {
			return fmt.Errorf("%q is not a CIDR block such as 10.1.0.0/16", e)
		}
		*l = append(*l, p.Masked())
	}
	return nil
}

// prefixFlag is one CIDR block.
type prefixFlag netip.Prefix

func (p *prefixFlag) String() string { return netip.Prefix(*p).String() }

func (p *prefixFlag) Set(s string) error {
	v, err := netip.ParsePrefix(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("%q is not a CIDR block such as 100.127.0.0/16", s)
	}
	*p = prefixFlag(v)
	return nil
}
