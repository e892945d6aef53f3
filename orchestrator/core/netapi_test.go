package core_test

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
)

// netPolicy is the default policy with network allowed and the given
// egress settings, defaults applied.
func netPolicy(t *testing.T, ceiling []string, private ...string) core.Policy {
	t.Helper()
	p := core.Policy{AllowNetwork: true, EgressCeiling: ceiling}
	for _, s := range private {
		p.EgressAllowPrivate = append(p.EgressAllowPrivate, netip.MustParsePrefix(s))
	}
	if err := p.ApplyDefaults(); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCheckNetworkPolicyRefuses: every rule of a policy a caller gives,
// each refused with INVALID_ARGUMENT naming the entry, rule or header.
func TestCheckNetworkPolicyRefuses(t *testing.T) {
	open := netPolicy(t, nil)
	bounded := netPolicy(t, []string{"*.example.com", "pypi.org", "198.18.0.0/15"}, "10.1.0.0/16")
	names := netPolicy(t, []string{"*.example.com", "pypi.org"})
	rule := func(key string, h map[string]string) map[string]core.NetworkRule {
		return map[string]core.NetworkRule{key: {Headers: h}}
	}
	for _, c := range []struct {
		name string
		p    core.Policy
		np   core.NetworkPolicy
		want string // in the message
	}{
		{"bad allow entry", open, core.NetworkPolicy{AllowOut: []string{"ok.com", "bad_name.com"}}, `"bad_name.com"`},
		{"bare star", open, core.NetworkPolicy{AllowOut: []string{"*"}}, `"*"`},
		{"single label", open, core.NetworkPolicy{DenyOut: []string{"localhost"}}, `deny_out`},
		{"bad CIDR", open, core.NetworkPolicy{DenyOut: []string{"10.0.0.0/33"}}, `"10.0.0.0/33"`},
		{"too many entries", open, core.NetworkPolicy{AllowOut: make([]string, core.MaxEgressEntries+1)}, "the limit is 256"},
		{"rule keyed by address", open, core.NetworkPolicy{Rules: rule("1.2.3.4", nil)}, `"1.2.3.4"`},
		{"bad rule key", open, core.NetworkPolicy{Rules: rule("-x.com", nil)}, `"-x.com"`},
		{"bad header name", open, core.NetworkPolicy{Rules: rule("api.com", map[string]string{"Bad Header": "v"})}, `"Bad Header"`},
		{"owned header", open, core.NetworkPolicy{Rules: rule("api.com", map[string]string{"Host": "evil.com"})}, `"Host"`},
		{"header with newline", open, core.NetworkPolicy{Rules: rule("api.com", map[string]string{"X-Key": "a\r\nX-Other: b"})}, "X-Key"},
		{"header too long", open, core.NetworkPolicy{Rules: rule("api.com", map[string]string{"X-Key": strings.Repeat("v", core.MaxRuleHeaderValue+1)})}, "X-Key"},
		{"rule keys the same domain", open, core.NetworkPolicy{Rules: map[string]core.NetworkRule{"API.example.com": {}, "api.example.com.": {}}}, `"API.example.com" and "api.example.com."`},
		{"headers the same header", open, core.NetworkPolicy{Rules: rule("api.com", map[string]string{"Authorization": "a", "authorization": "b"})}, `"Authorization" and "authorization"`},
		{"private block", open, core.NetworkPolicy{AllowOut: []string{"10.0.0.0/8"}}, `"10.0.0.0/8" can never be reached on this server: it lies in the private (RFC 1918) range`},
		{"link-local address", open, core.NetworkPolicy{AllowOut: []string{"169.254.77.2"}}, `--egress-allow-private`},
		{"loopback v6", open, core.NetworkPolicy{AllowOut: []string{"::1"}}, `loopback`},
		{"private outside the allowed", bounded, core.NetworkPolicy{AllowOut: []string{"10.2.0.0/16"}}, `"10.2.0.0/16"`},
		{"name outside the ceiling", names, core.NetworkPolicy{AllowOut: []string{"evil.org"}}, `"evil.org" can never be reached on this server: it is outside the most any sandbox may reach here (sandboxd --egress-ceiling *.example.com,pypi.org)`},
		{"block outside the ceiling", bounded, core.NetworkPolicy{AllowOut: []string{"203.0.113.0/24"}}, `"203.0.113.0/24"`},
		{"wildcard outside the ceiling", names, core.NetworkPolicy{AllowOut: []string{"*.evil.org"}}, `"*.evil.org"`},
		{"wildcard under an exact ceiling name", names, core.NetworkPolicy{AllowOut: []string{"*.pypi.org"}}, `"*.pypi.org"`},
	} {
		_, err := c.p.CheckNetworkPolicy(c.np)
		if !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want INVALID_ARGUMENT with %s", c.name, err, c.want)
		}
	}
}

// TestCheckNetworkPolicyKeeps: what the bounds let through in part is
// kept, and rule keys come back in E2B's normal form.
func TestCheckNetworkPolicyKeeps(t *testing.T) {
	bounded := netPolicy(t, []string{"*.example.com", "pypi.org", "198.18.0.0/15", "10.0.0.0/8"}, "10.1.0.0/16")
	in := core.NetworkPolicy{
		AllowOut: []string{"api.example.com", "*.example.com", "*.a.example.com", "pypi.org", "198.18.3.4", "198.0.0.0/8", "0.0.0.0/0", "10.1.2.3", "10.0.0.0/8"},
		DenyOut:  []string{"0.0.0.0/0", "10.0.0.0/8", "evil.org"},
		Rules: map[string]core.NetworkRule{
			"API.Example.com.": {Headers: map[string]string{"Authorization": "Bearer s3cret"}},
			"*.example.com":    {Headers: map[string]string{"X-A": "1", "X-B": "2"}},
		},
		AllowPublicTraffic: true,
	}
	got, err := bounded.CheckNetworkPolicy(in)
	if err != nil {
		t.Fatal(err)
	}
	want := in.Clone()
	want.Rules = map[string]core.NetworkRule{
		"api.example.com": {Headers: map[string]string{"Authorization": "Bearer s3cret"}},
		"*.example.com":   {Headers: map[string]string{"X-A": "1", "X-B": "2"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CheckNetworkPolicy = %+v\nwant %+v", got, want)
	}
	got.Rules["api.example.com"].Headers["Authorization"] = "changed"
	if in.Rules["API.Example.com."].Headers["Authorization"] != "Bearer s3cret" {
		t.Error("the result shares the caller's maps")
	}
	// A name under a ceiling of blocks may resolve into them: kept.
	blocks := netPolicy(t, []string{"198.18.0.0/15"})
	if _, err := blocks.CheckNetworkPolicy(core.NetworkPolicy{AllowOut: []string{"anything.org"}}); err != nil {
		t.Errorf("a name under a ceiling of blocks: %v", err)
	}
	if _, err := bounded.CheckNetworkPolicy(core.NetworkPolicy{}); err != nil {
		t.Errorf("the empty policy: %v", err)
	}
}

// TestResolveNetworkOptions: a policy implies network; network needs the
// server's leave; a sandbox with network always reaches the backend with
// a policy of its own.
func TestResolveNetworkOptions(t *testing.T) {
	sealed := core.DefaultPolicy()
	for _, o := range []core.Options{{Network: true}, {NetworkPolicy: &core.NetworkPolicy{}}} {
		if _, err := sealed.ResolveOptions(o); !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), "--allow-network") {
			t.Errorf("ResolveOptions(%+v) on a server without network: %v", o, err)
		}
	}
	open := netPolicy(t, nil)
	got, err := open.ResolveOptions(core.Options{})
	if err != nil || got.Network || got.NetworkPolicy != nil {
		t.Errorf("no network asked: %+v, %v", got, err)
	}
	got, err = open.ResolveOptions(core.Options{Network: true})
	if err != nil || !got.Network || got.NetworkPolicy == nil || !reflect.DeepEqual(*got.NetworkPolicy, core.NetworkPolicy{}) {
		t.Errorf("network without a policy: %+v, %v; want an empty policy", got, err)
	}
	got, err = open.ResolveOptions(core.Options{NetworkPolicy: &core.NetworkPolicy{AllowOut: []string{"pypi.org"}, Rules: map[string]core.NetworkRule{"A.com": {}}}})
	if err != nil || !got.Network || got.NetworkPolicy.AllowOut[0] != "pypi.org" || len(got.NetworkPolicy.Rules) != 1 || got.NetworkPolicy.Rules["a.com"].Headers != nil {
		t.Errorf("a policy: %+v, %v; want network, the policy normalised", got, err)
	}
	if _, err := open.ResolveOptions(core.Options{NetworkPolicy: &core.NetworkPolicy{AllowOut: []string{"x..com"}}}); !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), `"x..com"`) {
		t.Errorf("a bad policy: %v", err)
	}

	def := core.Policy{AllowNetwork: true, EgressDefault: &core.NetworkPolicy{AllowOut: []string{"pypi.org"}, DenyOut: []string{"0.0.0.0/0"}}}
	if err := def.ApplyDefaults(); err != nil {
		t.Fatal(err)
	}
	got, err = def.ResolveOptions(core.Options{Network: true})
	if err != nil || !reflect.DeepEqual(*got.NetworkPolicy, *def.EgressDefault) {
		t.Fatalf("network with a server default: %+v, %v", got, err)
	}
	got.NetworkPolicy.AllowOut[0] = "changed.org"
	if def.EgressDefault.AllowOut[0] != "pypi.org" {
		t.Error("a sandbox's policy shares the server's default")
	}
	got, err = def.ResolveOptions(core.Options{NetworkPolicy: &core.NetworkPolicy{}})
	if err != nil || len(got.NetworkPolicy.AllowOut) != 0 {
		t.Errorf("a caller's empty policy is the caller's, not the default: %+v, %v", got, err)
	}
}

// TestApplyDefaultsEgress: the operator's egress settings are checked
// once, naming what is wrong.
func TestApplyDefaultsEgress(t *testing.T) {
	for _, c := range []struct {
		name string
		p    core.Policy
		want string
	}{
		{"ceiling without network", core.Policy{EgressCeiling: []string{"a.com"}}, "need AllowNetwork"},
		{"default without network", core.Policy{EgressDefault: &core.NetworkPolicy{}}, "need AllowNetwork"},
		{"bad ceiling entry", core.Policy{AllowNetwork: true, EgressCeiling: []string{"a.com", "b_c.com"}}, `EgressCeiling: network destination "b_c.com"`},
		{"bad default entry", core.Policy{AllowNetwork: true, EgressDefault: &core.NetworkPolicy{DenyOut: []string{"1.2.3.4/40"}}}, `EgressDefault: network deny_out: network destination "1.2.3.4/40"`},
		{"default beyond the ceiling", core.Policy{AllowNetwork: true, EgressCeiling: []string{"a.com"}, EgressDefault: &core.NetworkPolicy{AllowOut: []string{"b.com"}}}, `EgressDefault: network allow_out "b.com"`},
		{"invalid private block", core.Policy{AllowNetwork: true, EgressAllowPrivate: []netip.Prefix{{}}}, "EgressAllowPrivate entry 0"},
	} {
		err := c.p.ApplyDefaults()
		if !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", c.name, err, c.want)
		}
	}
	p := core.Policy{AllowNetwork: true, EgressCeiling: []string{"*.example.com", "198.18.0.0/15"}, EgressAllowPrivate: []netip.Prefix{netip.MustParsePrefix("10.1.2.3/16")}}
	if err := p.ApplyDefaults(); err != nil {
		t.Fatal(err)
	}
	if p.EgressAllowPrivate[0].String() != "10.1.0.0/16" {
		t.Errorf("EgressAllowPrivate not masked: %v", p.EgressAllowPrivate)
	}
	c := p.CompiledCeiling()
	if c.JudgeName("a.example.com") != core.VerdictAllowed || c.JudgeName("b.org") == core.VerdictAllowed ||
		c.JudgeAddr(netip.MustParseAddr("198.19.0.1")) != core.VerdictAllowed {
		t.Error("the compiled ceiling judges wrongly")
	}
	if def := core.DefaultPolicy(); def.CompiledCeiling() != nil {
		t.Error("no ceiling compiles to something")
	}
}

// TestValidatingNetwork: the network operations' checks, in the API's
// order, before anything reaches the backend; what reaches it is
// normalised.
func TestValidatingNetwork(t *testing.T) {
	var got core.NetworkPolicy
	var gotPort int
	fake := &coretest.Manager{
		UpdateNetworkPolicyFunc: func(_ context.Context, _ string, np core.NetworkPolicy) (core.Sandbox, error) {
			got = np
			return core.Sandbox{ID: sb}, nil
		},
		NetworkStatusFunc: func(context.Context, string) (core.NetworkStatus, error) { return core.NetworkStatus{}, nil },
		GetHostFunc: func(_ context.Context, _ string, port int) (core.HostInfo, error) {
			gotPort = port
			return core.HostInfo{}, nil
		},
	}
	ctx := t.Context()
	sealed := core.Validating(fake, core.DefaultPolicy())
	if _, err := sealed.UpdateNetworkPolicy(ctx, "bad", core.NetworkPolicy{}); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("a malformed ID first: %v", err)
	}
	_, err1 := sealed.UpdateNetworkPolicy(ctx, sb, core.NetworkPolicy{AllowOut: []string{"bad_name"}})
	_, err2 := sealed.NetworkStatus(ctx, sb)
	_, err3 := sealed.GetHost(ctx, sb, 80)
	for _, err := range []error{err1, err2, err3} {
		if !errors.Is(err, core.ErrFailedPrecondition) || !strings.Contains(err.Error(), "--allow-network") {
			t.Errorf("on a server without network: %v; want FAILED_PRECONDITION naming --allow-network", err)
		}
	}

	m := core.Validating(fake, netPolicy(t, nil))
	if _, err := m.UpdateNetworkPolicy(ctx, sb, core.NetworkPolicy{AllowOut: []string{"ok.com"}, DenyOut: []string{"nope nope"}}); !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), `"nope nope"`) {
		t.Errorf("a bad entry: %v", err)
	}
	for _, port := range []int{0, -1, 65536} {
		if _, err := m.GetHost(ctx, sb, port); !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), "port") {
			t.Errorf("GetHost(port %d): %v", port, err)
		}
	}
	if calls := fake.Calls(); len(calls) != 0 {
		t.Fatalf("refused calls reached the backend: %v", calls)
	}
	in := core.NetworkPolicy{AllowOut: []string{"api.com"}, Rules: map[string]core.NetworkRule{"API.com": {Headers: map[string]string{"X-Key": "k"}}}}
	if _, err := m.UpdateNetworkPolicy(ctx, sb, in); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got.Rules["api.com"].Headers, map[string]string{"X-Key": "k"}) {
		t.Errorf("the backend got %+v; want the rule key normalised", got)
	}
	if _, err := m.GetHost(ctx, sb, 65535); err != nil || gotPort != 65535 {
		t.Errorf("GetHost(65535): %v, port %d", err, gotPort)
	}
	if _, err := m.NetworkStatus(ctx, sb); err != nil {
		t.Error(err)
	}
}
