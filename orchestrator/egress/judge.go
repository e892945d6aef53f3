package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Judging. Every address the gateway would dial goes through admit, which
// applies the operator's bounds and then the policy; a name goes through
// route first, which decides whether the name is resolved at all.
//
// Why a name the policy neither allows nor denies is not always resolved:
// resolving asks the host's resolver, and so every DNS server up to the
// name's own, about a name the sandbox chose. Under an allow-list
// (deny_out 0.0.0.0/0) or a server ceiling that does not allow the name,
// that would be a channel out ("<secret>.attacker.example"), so such a
// name is never resolved: the connection is judged on the address it was
// sent to, as if it carried no name, and DNS answers NXDOMAIN.

// normName turns a name a sandbox sent (SNI, Host, a DNS question) into
// the form policies judge (lower-case, no trailing dot), or "" when it is
// not a domain name: an IP literal, a single label ("localhost"), a
// wildcard, or anything with characters outside letters, digits, '-' and
// '.'. A connection whose name is "" is judged on its address.
func normName(s string) string {
	if len(s) == 0 || len(s) > 254 || strings.HasPrefix(s, "*") {
		return ""
	}
	d, err := core.ParseDestination(s)
	if err != nil || d.Domain == "" || d.Wildcard {
		return ""
	}
	return d.Domain
}

// hostName strips an HTTP Host's port; "" for an IP literal.
func hostName(h string) string {
	if strings.HasPrefix(h, "[") {
		return "" // an IPv6 literal
	}
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return normName(h)
}

// bound applies the operator's bounds to an address: "" if it may be
// dialled, else why not.
func (g *Gateway) bound(a netip.Addr) string {
	a = a.Unmap()
	if !a.IsValid() || a.IsUnspecified() {
		return "unspecified address " + a.String()
	}
	if r := g.hostBound(a); r != "" {
		return r
	}
	if sn := g.cfg.Bounds.SandboxNet; sn.IsValid() && sn.Contains(a) {
		return "a sandbox network address " + a.String()
	}
	if slices.ContainsFunc(g.cfg.Bounds.Cluster, func(p netip.Prefix) bool { return p.Contains(a) }) {
		return "a cluster address " + a.String()
	}
	if r := core.SpecialRange(a); r != "" && !slices.ContainsFunc(g.cfg.Bounds.AllowPrivate, func(p netip.Prefix) bool { return p.Contains(a) }) {
		return r + " address " + a.String()
	}
	return ""
}

// hostBound refuses the host's own addresses, as they are now: the
// operator's HostAddrs, or the host's interfaces' (hostAddrs). Addresses
// that cannot be read refuse everything until they can.
func (g *Gateway) hostBound(a netip.Addr) string {
	var addrs []netip.Addr
	if g.host == nil {
		addrs = g.cfg.HostAddrs()
	} else {
		var err error
		if addrs, err = g.host.get(); err != nil {
			return "the host's own addresses could not be read (" + err.Error() + "), so none is dialled"
		}
	}
	if slices.ContainsFunc(addrs, func(h netip.Addr) bool { return h.Unmap() == a }) {
		return "the host's own address " + a.String()
	}
	return ""
}

// admit judges dialling a (for name, when the connection is dialled by
// name; "" when by address): the operator's bounds, the ceiling, then the
// policy. It returns "" or why not. A nil policy refuses everything.
func (g *Gateway) admit(p *core.CompiledPolicy, name string, a netip.Addr) string {
	a = a.Unmap()
	if r := g.bound(a); r != "" {
		return r
	}
	if c := g.cfg.Bounds.Ceiling; c != nil && !(name != "" && c.JudgeName(name) == core.VerdictAllowed) && c.JudgeAddr(a) != core.VerdictAllowed {
		return "outside the server's ceiling"
	}
	if p == nil {
		return "the sandbox has no network policy"
	}
	if name != "" {
		switch p.JudgeName(name) {
		case core.VerdictAllowed:
			return ""
		case core.VerdictDenied:
			return "denied by deny_out"
		}
	}
	if p.JudgeAddr(a) == core.VerdictDenied {
		if name != "" {
			return fmt.Sprintf("not in allow_out, and its address %s is denied by deny_out", a)
		}
		return fmt.Sprintf("address %s denied by deny_out", a)
	}
	return ""
}

// route decides how a connection or query carrying name is judged:
// refused outright (reason), resolved and dialled by name (byName), or
// judged on its address as if it carried no name (neither).
func (g *Gateway) route(p *core.CompiledPolicy, name string) (byName bool, reason string) {
	if p == nil {
		return false, "the sandbox has no network policy"
	}
	v := p.JudgeName(name)
	if v == core.VerdictDenied {
		return false, "denied by deny_out"
	}
	if v != core.VerdictAllowed && p.AllowsNamesOnly() {
		return false, "" // an allow-list that does not list it
	}
	if c := g.cfg.Bounds.Ceiling; c != nil && c.JudgeName(name) != core.VerdictAllowed {
		return false, ""
	}
	return true, ""
}

// nameRefusal says why a name that route does not resolve is refused, for
// DNS and for a connection whose address is refused too.
func (g *Gateway) nameRefusal(p *core.CompiledPolicy, name string) string {
	if c := g.cfg.Bounds.Ceiling; c != nil && c.JudgeName(name) != core.VerdictAllowed && (p == nil || !p.AllowsNamesOnly() || p.JudgeName(name) == core.VerdictAllowed) {
		return "outside the server's ceiling"
	}
	return "not in allow_out (deny_out 0.0.0.0/0 makes it an allow-list)"
}

// candidates resolves name on the host and returns its addresses that
// admit lets through, in the resolver's order; when none does, why not.
// charge: the lookup counts against the sandbox's rate (a DNS query has
// paid on arrival).
func (g *Gateway) candidates(ctx context.Context, sb *sandbox, p *core.CompiledPolicy, name string, charge bool) ([]netip.Addr, string, error) {
	addrs, err := g.res.lookup(ctx, sb, name, charge)
	if err != nil {
		return nil, "", err
	}
	var ok []netip.Addr
	first := ""
	for _, a := range addrs {
		if r := g.admit(p, name, a); r == "" {
			ok = append(ok, a)
		} else if first == "" {
			first = r
		}
	}
	if len(ok) == 0 {
		return nil, "resolves only to refused addresses: " + first, nil
	}
	return ok, "", nil
}

var (
	errNoSuchName = errors.New("the name does not resolve on the host")
	errLookup     = errors.New("the host could not resolve the name")
)

// resolver resolves names on the host for every sandbox: a small cache
// (names and failures, briefly), one lookup per name at a time, and
// bounds on lookups in flight per sandbox and in all, so that a sandbox
// asking for many names waits for its own lookups and nobody else's.
type resolver struct {
	r     Resolver
	total chan struct{}
	sf    singleflight.Group

	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	addrs []netip.Addr
	err   error
	until time.Time
}

func newResolver(r Resolver) *resolver {
	return &resolver{r: r, total: make(chan struct{}, lookupsTotal), cache: map[string]cached{}}
}

// lookup returns name's IPv4 addresses (sandboxes have no IPv6), or
// errNoSuchName, errLookup or ctx's error.
func (r *resolver) lookup(ctx context.Context, sb *sandbox, name string, charge bool) ([]netip.Addr, error) {
	if c, ok := r.get(name); ok {
		return c.addrs, c.err
	}
	if charge {
		if err := sb.limiter.Wait(ctx); err != nil {
			return nil, err
		}
	}
	select {
	case sb.lookups <- struct{}{}:
		defer func() { <-sb.lookups }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	ch := r.sf.DoChan(name, func() (any, error) {
		// Detached from the caller: others may wait on this lookup.
		lctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
		defer cancel()
		select {
		case r.total <- struct{}{}:
			defer func() { <-r.total }()
		case <-lctx.Done():
			return nil, errLookup
		}
		addrs, err := r.r.LookupNetIP(lctx, "ip4", name)
		c := cached{until: time.Now().Add(resolveCacheTTL)}
		var dnsErr *net.DNSError
		switch {
		case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
			c.err, c.until = errNoSuchName, time.Now().Add(resolveCacheNegTTL)
		case err != nil:
			return nil, errLookup // not cached: it may be transient
		}
		for _, a := range addrs {
			if a = a.Unmap(); a.Is4() && !slices.Contains(c.addrs, a) {
				c.addrs = append(c.addrs, a)
			}
		}
		if c.err == nil && len(c.addrs) == 0 {
			c.err, c.until = errNoSuchName, time.Now().Add(resolveCacheNegTTL)
		}
		r.put(name, c)
		return c, nil
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return nil, res.Err
		}
		c := res.Val.(cached)
		return c.addrs, c.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (r *resolver) get(name string) (cached, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.cache[name]
	if !ok || time.Now().After(c.until) {
		return cached{}, false
	}
	return c, true
}

func (r *resolver) put(name string, c cached) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.cache) >= resolveCacheSize {
		now := time.Now()
		for k, v := range r.cache {
			if now.After(v.until) {
				delete(r.cache, k)
			}
		}
		for k := range r.cache { // still full: forget arbitrary entries
			if len(r.cache) < resolveCacheSize {
				break
			}
			delete(r.cache, k)
		}
	}
	r.cache[name] = c
}
