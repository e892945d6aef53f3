package core

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"unicode/utf8"
)

// A sandbox with network reaches the world only through sandboxd's egress
// gateway, which judges every connection and DNS query against the
// sandbox's NetworkPolicy. The policy's words are E2B's (allowOut,
// denyOut, rules, allowPublicTraffic) and so is its precedence: an allowed
// destination is allowed whatever denies it, a denied one is refused, and
// one neither allows nor denies is allowed, so {DenyOut: 0.0.0.0/0,
// AllowOut: [...]} is an allow-list and an empty policy allows every
// public destination. The operator's bounds come first, whatever the
// policy says (EgressBounds): private, loopback, link-local, multicast and
// the host's own addresses are never reached unless the operator allows a
// range, and a tenant never reaches past the operator's ceiling.
//
// A destination is judged on the name the connection carries (TLS SNI, the
// HTTP Host, the name a DNS query asks for) when it carries one, and on
// its IP address otherwise; a name the policy allows is dialled by the
// gateway itself at the addresses it resolves, each judged as an address
// too, so a name cannot smuggle a connection to an address the policy or
// the operator refuses.

// NetworkPolicy is what a sandbox's traffic may reach, and what the
// gateway adds to it on the way.
type NetworkPolicy struct {
	// AllowOut and DenyOut are destinations: a domain ("example.com", or
	// "*.example.com" for its subdomains at any depth but not the domain
	// itself), an IP address ("198.18.0.1") or a CIDR block
	// ("198.18.0.0/15"). Allowed beats denied.
	AllowOut, DenyOut []string
	// Rules transform matching outbound HTTPS requests, keyed by domain
	// pattern (exact, or "*.suffix"): the gateway terminates TLS for that
	// domain with the sandbox's own CA and sets the rule's headers on each
	// request, so a credential never enters the sandbox. A rule grants no
	// access: AllowOut must still allow the destination. An exact key wins
	// over wildcards, the longest wildcard over shorter ones; rules are not
	// merged.
	Rules map[string]NetworkRule
	// AllowPublicTraffic lets the sandbox's port URLs (GetHost) answer
	// without the sandbox's traffic token.
	AllowPublicTraffic bool
}

// NetworkRule is what the gateway does to requests of a rule's domain.
type NetworkRule struct {
	// Headers are set on each request, replacing any of the same name.
	Headers map[string]string
}

// Clone returns a deep copy of p.
func (p NetworkPolicy) Clone() NetworkPolicy {
	out := NetworkPolicy{AllowOut: slices.Clone(p.AllowOut), DenyOut: slices.Clone(p.DenyOut), AllowPublicTraffic: p.AllowPublicTraffic}
	if p.Rules != nil {
		out.Rules = make(map[string]NetworkRule, len(p.Rules))
		for k, r := range p.Rules {
			out.Rules[k] = NetworkRule{Headers: maps.Clone(r.Headers)}
		}
	}
	return out
}

// Redacted is p as callers may see it back: rule keys and header names,
// never a header's value (the secret).
func (p NetworkPolicy) Redacted() NetworkPolicy {
	out := p.Clone()
	for k, r := range out.Rules {
		for h := range r.Headers {
			r.Headers[h] = ""
		}
		out.Rules[k] = r
	}
	return out
}

// Bounds of a policy: enough for a long allow-list and a few brokered
// credentials, small enough to keep in meta.json and judge per connection.
const (
	MaxEgressEntries     = 256
	MaxNetworkRules      = 64
	MaxRuleHeaders       = 16
	MaxRuleHeaderValue   = 8 << 10
	MaxNetworkPolicySize = 64 << 10
	maxDomainLen         = 253
)

// Destination is one parsed AllowOut or DenyOut entry: a domain pattern or
// an address prefix.
type Destination struct {
	// Domain is the lower-case domain without its "*." (empty for a
	// prefix); Wildcard says the entry was "*.Domain".
	Domain   string
	Wildcard bool
	// Prefix is the entry's block (an address is a /32 or /128).
	Prefix netip.Prefix
}

// MatchesName reports whether name (lower-case, no trailing dot) is the
// entry's domain, or one of its subdomains for a wildcard.
func (d Destination) MatchesName(name string) bool {
	if d.Domain == "" {
		return false
	}
	if d.Wildcard {
		return strings.HasSuffix(name, "."+d.Domain)
	}
	return name == d.Domain
}

// MatchesAddr reports whether addr lies in the entry's block.
func (d Destination) MatchesAddr(addr netip.Addr) bool {
	return d.Prefix.IsValid() && d.Prefix.Contains(addr.Unmap())
}

// ParseDestination parses an AllowOut or DenyOut entry. Errors wrap
// ErrInvalidArgument and quote the entry.
func ParseDestination(s string) (Destination, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return Destination{Prefix: p.Masked()}, nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		a = a.Unmap()
		return Destination{Prefix: netip.PrefixFrom(a, a.BitLen())}, nil
	}
	name, wildcard := strings.CutPrefix(strings.ToLower(strings.TrimSuffix(s, ".")), "*.")
	if why := checkDomain(name); why != "" {
		return Destination{}, Invalidf("network destination %q is not a domain (example.com, *.example.com), an IP address or a CIDR block: %s", Truncate(s, 64), why)
	}
	return Destination{Domain: name, Wildcard: wildcard}, nil
}

// checkDomain checks a host name in ASCII (IDNs in their xn-- form):
// labels of letters, digits and hyphens, 1 to 63 bytes, at most 253 in all,
// at least two labels. It returns why not, or "".
func checkDomain(name string) string {
	if name == "" || len(name) > maxDomainLen {
		return "a domain is 1 to 253 characters"
	}
	labels := strings.Split(name, ".")
	if len(labels) < 2 {
		return "a domain has at least two labels (a bare \"*\" or a single label is not allowed)"
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return "each label is 1 to 63 characters and does not start or end with '-'"
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return "labels use letters, digits and '-' only (IDNs in their xn-- form)"
			}
		}
	}
	return ""
}

// validateNetworkPolicy checks a policy's entries, rules and size. Errors
// wrap ErrInvalidArgument and name the entry, rule or header.
func validateNetworkPolicy(p NetworkPolicy) error {
	size := 0
	for _, list := range []struct {
		name    string
		entries []string
	}{{"allow_out", p.AllowOut}, {"deny_out", p.DenyOut}} {
		if len(list.entries) > MaxEgressEntries {
			return Invalidf("network %s has %d entries; the limit is %d", list.name, len(list.entries), MaxEgressEntries)
		}
		for _, e := range list.entries {
			if _, err := ParseDestination(e); err != nil {
				return Invalidf("network %s: %v", list.name, err)
			}
			size += len(e)
		}
	}
	if len(p.Rules) > MaxNetworkRules {
		return Invalidf("network rules has %d domains; the limit is %d", len(p.Rules), MaxNetworkRules)
	}
	for _, key := range slices.Sorted(maps.Keys(p.Rules)) {
		d, err := ParseDestination(key)
		switch {
		case err != nil:
			return Invalidf("network rule %q: %v", Truncate(key, 64), err)
		case d.Domain == "":
			return Invalidf("network rule %q: rules are keyed by domain (example.com, *.example.com), not by address", key)
		}
		r := p.Rules[key]
		if len(r.Headers) > MaxRuleHeaders {
			return Invalidf("network rule %s has %d headers; the limit is %d", key, len(r.Headers), MaxRuleHeaders)
		}
		for h, v := range r.Headers {
			switch {
			case !validHeaderName(h):
				return Invalidf("network rule %s: header name %q is not a valid HTTP header name", key, Truncate(h, 64))
			case len(v) > MaxRuleHeaderValue:
				return Invalidf("network rule %s: header %s is %d bytes long; the limit is %d", key, h, len(v), MaxRuleHeaderValue)
			case !utf8.ValidString(v) || strings.ContainsAny(v, "\r\n\x00"):
				return Invalidf("network rule %s: header %s has a line break, a NUL byte or invalid UTF-8", key, h)
			}
			size += len(h) + len(v)
		}
		size += len(key)
	}
	if size > MaxNetworkPolicySize {
		return Invalidf("network policy is %d bytes long; the limit is %d", size, MaxNetworkPolicySize)
	}
	return nil
}

// validHeaderName: an HTTP token (RFC 9110), which no header the gateway
// owns may be (Host, hop-by-hop and framing headers).
func validHeaderName(h string) bool {
	if h == "" || len(h) > 256 {
		return false
	}
	for _, c := range []byte(h) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	switch strings.ToLower(h) {
	case "host", "connection", "content-length", "transfer-encoding", "upgrade", "te", "trailer", "keep-alive", "proxy-connection":
		return false
	}
	return true
}

// CompiledPolicy is a validated NetworkPolicy ready to judge destinations.
type CompiledPolicy struct {
	allow, deny []Destination
	rules       []compiledRule // exact first, then wildcards longest first
	Public      bool
}

type compiledRule struct {
	dest    Destination
	headers map[string]string
}

// CompileNetworkPolicy validates p and compiles it.
func CompileNetworkPolicy(p NetworkPolicy) (*CompiledPolicy, error) {
	if err := validateNetworkPolicy(p); err != nil {
		return nil, err
	}
	c := &CompiledPolicy{Public: p.AllowPublicTraffic}
	for _, e := range p.AllowOut {
		d, _ := ParseDestination(e)
		c.allow = append(c.allow, d)
	}
	for _, e := range p.DenyOut {
		d, _ := ParseDestination(e)
		c.deny = append(c.deny, d)
	}
	for k, r := range p.Rules {
		d, _ := ParseDestination(k)
		c.rules = append(c.rules, compiledRule{dest: d, headers: maps.Clone(r.Headers)})
	}
	slices.SortFunc(c.rules, func(a, b compiledRule) int {
		if a.dest.Wildcard != b.dest.Wildcard {
			if a.dest.Wildcard {
				return 1
			}
			return -1
		}
		return cmp.Or(cmp.Compare(len(b.dest.Domain), len(a.dest.Domain)), strings.Compare(a.dest.Domain, b.dest.Domain))
	})
	return c, nil
}

// Verdict is how a policy judges a destination.
type Verdict int

const (
	// VerdictAllowed: an AllowOut entry matches.
	VerdictAllowed Verdict = iota + 1
	// VerdictDenied: no AllowOut entry but a DenyOut entry matches.
	VerdictDenied
	// VerdictDefault: neither matches; the destination is allowed.
	VerdictDefault
)

// Allows reports whether v lets the connection through.
func (v Verdict) Allows() bool { return v != VerdictDenied }

// JudgeName judges a destination named name (lower-case, no trailing dot).
func (c *CompiledPolicy) JudgeName(name string) Verdict {
	return c.judge(func(d Destination) bool { return d.MatchesName(name) })
}

// JudgeAddr judges a destination address.
func (c *CompiledPolicy) JudgeAddr(addr netip.Addr) Verdict {
	return c.judge(func(d Destination) bool { return d.MatchesAddr(addr) })
}

func (c *CompiledPolicy) judge(match func(Destination) bool) Verdict {
	if slices.ContainsFunc(c.allow, match) {
		return VerdictAllowed
	}
	if slices.ContainsFunc(c.deny, match) {
		return VerdictDenied
	}
	return VerdictDefault
}

// AllowsNamesOnly reports whether the policy denies every address it does
// not allow by name: a DenyOut block covering all of IPv4 with no address
// allowed. DNS then answers only names the policy allows.
func (c *CompiledPolicy) AllowsNamesOnly() bool {
	all := netip.MustParsePrefix("0.0.0.0/0")
	return slices.ContainsFunc(c.deny, func(d Destination) bool { return d.Prefix == all })
}

// Rule returns the headers of the rule matching name, if one does.
func (c *CompiledPolicy) Rule(name string) (map[string]string, bool) {
	for _, r := range c.rules {
		if r.dest.MatchesName(name) {
			return r.headers, true
		}
	}
	return nil, false
}

// The ranges no sandbox reaches unless the operator allows them
// (Policy.EgressAllowPrivate): the host's own networks and everything
// that is not the public internet. The host's own public addresses are
// the gateway's to add, at run time.
var specialRanges = []struct {
	prefix netip.Prefix
	name   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this network"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private (RFC 1918)"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared address space (CGNAT)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private (RFC 1918)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private (RFC 1918)"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved and broadcast"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64 (maps IPv4, private included)"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "NAT64 (maps IPv4, private included)"},
	{netip.MustParsePrefix("fc00::/7"), "unique local (ULA)"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// SpecialRange names the special range addr lies in ("private (RFC
// 1918)", "link-local", ...), or "" for a public address. An IPv4-mapped
// IPv6 address is judged as the IPv4 one.
func SpecialRange(addr netip.Addr) string {
	addr = addr.Unmap()
	for _, r := range specialRanges {
		if r.prefix.Contains(addr) {
			return r.name
		}
	}
	return ""
}
