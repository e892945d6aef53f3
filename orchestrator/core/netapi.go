package core

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// The network API's side of the domain: what a caller sees of a
// sandbox's network (NetworkStatus, HostInfo), and the checks a policy
// meets before any backend stores it (Policy.CheckNetworkPolicy). The
// policy itself, its parsing, bounds and judging are network.go's.

// NetworkStatus is what a networked sandbox's egress looks like now: the
// policy in force and what the gateway did under it.
type NetworkStatus struct {
	// Policy is the sandbox's policy, redacted (NetworkPolicy.Redacted):
	// rule keys and header names, never a header's value.
	Policy NetworkPolicy
	// Counters count the sandbox's egress since the gateway last attached
	// it (its creation, its wake, or sandboxd's start): they are not
	// persisted.
	Counters NetworkCounters
	// Denials are the most recent refused queries and connections, oldest
	// first; the gateway keeps a bounded number (Counters.DenialsDropped
	// counts those it forgot).
	Denials []NetworkDenial
}

// NetworkCounters are a sandbox's egress counters (egress.Stats, in the
// domain's words).
type NetworkCounters struct {
	// BytesOut and BytesIn are the bytes carried to and from the world.
	BytesOut, BytesIn uint64
	// ConnsAllowed and ConnsDenied count TCP connections judged.
	ConnsAllowed, ConnsDenied uint64
	// DNSAllowed and DNSDenied count DNS queries answered and refused.
	DNSAllowed, DNSDenied uint64
	// ConnsOpen is the number of connections open now.
	ConnsOpen int
	// RuleRequests counts HTTP requests sent on with a rule's headers.
	RuleRequests uint64
	// DenialsDropped counts denials forgotten past the log's bound.
	DenialsDropped uint64
	// DNSRateLimited counts queries refused past the sandbox's DNS rate.
	DNSRateLimited uint64
	// ConnsRefusedAtCap counts connections refused past a cap on open
	// connections (the sandbox's or the server's).
	ConnsRefusedAtCap uint64
}

// NetworkDenial is one refused query or connection. Name and Reason come
// partly from the sandbox (the name it asked for or carried): a door makes
// them valid text and bounds them before showing them.
type NetworkDenial struct {
	Time time.Time
	// Kind is "dns" or "tcp".
	Kind string
	// Name is the name asked for (DNS) or carried (TLS SNI, HTTP Host);
	// empty when the connection carried none.
	Name string
	// Addr is the destination (tcp) when known; invalid otherwise.
	Addr netip.AddrPort
	// Reason says what refused it ("denied by deny_out 0.0.0.0/0",
	// "private (RFC 1918) address 10.0.0.5", ...).
	Reason string
}

// HostInfo is how a caller reaches a port of a sandbox (GetHost).
type HostInfo struct {
	// URL is the port's address on sandboxd's HTTP front.
	URL string
	// TokenRequired is true unless the sandbox's policy allows public
	// traffic: a request then needs Token, in the header TokenHeader.
	TokenRequired bool
	Token         string
	TokenHeader   string
}

// MaxPort is the largest TCP port.
const MaxPort = 65535

// ValidatePort checks a port a caller names (GetHost): 1 to 65535.
func ValidatePort(port int) error {
	if port < 1 || port > MaxPort {
		return Invalidf("port %d is outside 1-%d", port, MaxPort)
	}
	return nil
}

// CheckNetworkPolicy validates a caller's policy (from Options or
// UpdateNetworkPolicy) against the domain's rules and p's bounds, and
// returns it normalised: a deep copy, its rule keys in lower case without
// a trailing dot (as E2B stores them). Errors wrap ErrInvalidArgument and
// name the entry, rule or header:
//
//   - CompileNetworkPolicy's: a malformed entry, rule key or header, a
//     policy past the bounds;
//   - two rule keys naming the same domain ("API.example.com" and
//     "api.example.com"), or two headers of one rule naming the same
//     header (HTTP header names are case-insensitive): which one the
//     gateway would apply would be left to chance;
//   - an allow_out entry that can never be reached on this server: one
//     sharing nothing with the operator's ceiling (EgressCeiling), or a
//     block lying wholly in a special range (private, loopback,
//     link-local, ...) the operator does not allow (EgressAllowPrivate).
//     Entries that overlap what is reachable are kept: the gateway judges
//     each connection against the bounds as well as the policy.
func (p *Policy) CheckNetworkPolicy(np NetworkPolicy) (NetworkPolicy, error) {
	if _, err := CompileNetworkPolicy(np); err != nil {
		return NetworkPolicy{}, err
	}
	out := np.Clone()
	if np.Rules != nil {
		out.Rules = make(map[string]NetworkRule, len(np.Rules))
		canon := make(map[string]string, len(np.Rules)) // normalised key → the caller's
		for _, key := range slices.Sorted(maps.Keys(np.Rules)) {
			k := strings.ToLower(strings.TrimSuffix(key, "."))
			if prev, dup := canon[k]; dup {
				return NetworkPolicy{}, Invalidf("network rules %q and %q name the same domain; give one rule per domain", prev, key)
			}
			canon[k] = key
			if err := checkHeaderNames(key, np.Rules[key].Headers); err != nil {
				return NetworkPolicy{}, err
			}
			out.Rules[k] = NetworkRule{Headers: maps.Clone(np.Rules[key].Headers)}
		}
	}
	for _, e := range np.AllowOut {
		d, _ := ParseDestination(e) // compiled above
		if why := p.unreachable(d); why != "" {
			return NetworkPolicy{}, Invalidf("network allow_out %q can never be reached on this server: %s", Truncate(e, 64), why)
		}
	}
	return out, nil
}

// checkHeaderNames refuses two names of one rule's headers that are the
// same header.
func checkHeaderNames(key string, headers map[string]string) error {
	seen := make(map[string]string, len(headers))
	for _, h := range slices.Sorted(maps.Keys(headers)) {
		l := strings.ToLower(h)
		if prev, dup := seen[l]; dup {
			return Invalidf("network rule %s: headers %q and %q are the same header (header names are case-insensitive)", key, prev, h)
		}
		seen[l] = h
	}
	return nil
}

// unreachable says why no connection to d can ever pass p's bounds, or ""
// when some can. It is conservative: only what certainly shares nothing
// with what the bounds let through is refused.
func (p *Policy) unreachable(d Destination) string {
	if d.Prefix.IsValid() {
		for _, r := range specialRanges {
			if r.prefix.Bits() <= d.Prefix.Bits() && r.prefix.Contains(d.Prefix.Addr()) &&
				!slices.ContainsFunc(p.EgressAllowPrivate, d.Prefix.Overlaps) {
				return fmt.Sprintf("it lies in the %s range %s, which sandboxes reach only when the operator allows it (sandboxd --egress-allow-private)", r.name, r.prefix)
			}
		}
	}
	if len(p.EgressCeiling) == 0 || p.withinCeiling(d) {
		return ""
	}
	return fmt.Sprintf("it is outside the most any sandbox may reach here (sandboxd --egress-ceiling %s)", strings.Join(p.EgressCeiling, ","))
}

// withinCeiling reports whether d shares anything with the ceiling's
// entries. A domain may resolve to an address the ceiling has a block for,
// so a domain is refused only by a ceiling of domains alone.
func (p *Policy) withinCeiling(d Destination) bool {
	for _, e := range p.EgressCeiling {
		c, err := ParseDestination(e)
		if err != nil {
			continue // ApplyDefaults refused it
		}
		switch {
		case d.Prefix.IsValid():
			if c.Prefix.IsValid() && c.Prefix.Overlaps(d.Prefix) {
				return true
			}
		case c.Prefix.IsValid():
			return true
		case !d.Wildcard:
			if c.MatchesName(d.Domain) {
				return true
			}
		case c.Wildcard:
			// *.x and *.y share names when one domain is the other or
			// lies under it.
			if d.Domain == c.Domain || strings.HasSuffix(d.Domain, "."+c.Domain) || strings.HasSuffix(c.Domain, "."+d.Domain) {
				return true
			}
		default:
			// *.x and the name y share y when y lies under x.
			if strings.HasSuffix(c.Domain, "."+d.Domain) {
				return true
			}
		}
	}
	return false
}

// CompiledCeiling is the operator's ceiling (EgressCeiling) ready to judge
// destinations, as the egress gateway takes it (egress.Bounds.Ceiling): a
// destination it does not allow (VerdictAllowed) is refused. nil when
// there is none. Call it on a policy ApplyDefaults accepted.
func (p *Policy) CompiledCeiling() *CompiledPolicy {
	if len(p.EgressCeiling) == 0 {
		return nil
	}
	c, err := CompileNetworkPolicy(NetworkPolicy{AllowOut: p.EgressCeiling})
	if err != nil {
		panic(fmt.Sprintf("core: the egress ceiling was not checked: %v", err)) // ApplyDefaults refuses it
	}
	return c
}

// checkEgress is ApplyDefaults's part for the network: the ceiling's
// entries, the private ranges allowed, and the default policy, which must
// pass the checks a caller's policy passes.
func (p *Policy) checkEgress() error {
	if !p.AllowNetwork && (p.EgressDefault != nil || len(p.EgressCeiling) > 0 || len(p.EgressAllowPrivate) > 0) {
		return Invalidf("config: EgressDefault, EgressCeiling and EgressAllowPrivate need AllowNetwork (sandboxd --allow-network)")
	}
	if len(p.EgressCeiling) > MaxEgressEntries {
		return Invalidf("config: EgressCeiling has %d entries; the limit is %d", len(p.EgressCeiling), MaxEgressEntries)
	}
	for _, e := range p.EgressCeiling {
		if _, err := ParseDestination(e); err != nil {
			return Invalidf("config: EgressCeiling: %v", err)
		}
	}
	for i, a := range p.EgressAllowPrivate {
		if !a.IsValid() {
			return Invalidf("config: EgressAllowPrivate entry %d is not a valid CIDR block", i)
		}
		p.EgressAllowPrivate[i] = a.Masked()
	}
	if p.EgressDefault != nil {
		np, err := p.CheckNetworkPolicy(*p.EgressDefault)
		if err != nil {
			return Invalidf("config: EgressDefault: %v", err)
		}
		p.EgressDefault = &np
	}
	return nil
}

// resolveNetwork is ResolveOptions's part for the network: a policy
// implies network, network needs AllowNetwork, and a sandbox with network
// gets a policy of its own, checked: the caller's, else a copy of the
// server's default, else an empty one (every public destination).
func (p *Policy) resolveNetwork(opts Options) (Options, error) {
	if opts.NetworkPolicy != nil {
		opts.Network = true
	}
	if !opts.Network {
		return opts, nil
	}
	if !p.AllowNetwork {
		return Options{}, Invalidf("network access is not allowed on this server: sandboxes have no network unless sandboxd is started with --allow-network")
	}
	var np NetworkPolicy
	switch {
	case opts.NetworkPolicy != nil:
		var err error
		if np, err = p.CheckNetworkPolicy(*opts.NetworkPolicy); err != nil {
			return Options{}, err
		}
	case p.EgressDefault != nil:
		np = p.EgressDefault.Clone()
	}
	opts.NetworkPolicy = &np
	return opts, nil
}
