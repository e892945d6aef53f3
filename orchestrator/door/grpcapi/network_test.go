package grpcapi

import (
	"context"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// netSecret is a header value that must never come back from the API.
const netSecret = "Bearer sk-live-networktest-0123456789"

// leaky is a sandbox whose policy still holds its secret, as a backend
// that forgot to redact would return it: the door must not echo it.
func leaky(id string) core.Sandbox {
	return core.Sandbox{ID: id, UserID: "u", State: core.StateRunning, Network: true, NetworkPolicy: &core.NetworkPolicy{
		AllowOut: []string{"api.example.com"}, DenyOut: []string{"0.0.0.0/0"},
		Rules: map[string]core.NetworkRule{"api.example.com": {Headers: map[string]string{"Authorization": netSecret}}},
	}}
}

// noSecretIn fails t if m, marshalled, holds the secret.
func noSecretIn(t *testing.T, what string, m proto.Message) {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if strings.Contains(string(b), netSecret) || strings.Contains(string(b), "sk-live") {
		t.Errorf("%s: the response holds the secret header value", what)
	}
}

// TestNetworkPolicyNeverEchoesSecrets: whatever the domain returns, no
// response carries a header value; the names and the rest do arrive.
func TestNetworkPolicyNeverEchoesSecrets(t *testing.T) {
	var gotOpts core.Options
	var gotPolicy core.NetworkPolicy
	fake := &fakeManager{
		AcquireFunc: func(_ context.Context, _ string, opts core.Options) (core.AcquireResult, error) {
			gotOpts = opts
			return core.AcquireResult{Sandbox: leaky(sb1), Created: true}, nil
		},
		GetFunc: func(_ context.Context, id string) (core.Sandbox, error) { return leaky(id), nil },
		ListFunc: func(context.Context, core.ListFilter) ([]core.Sandbox, error) {
			return []core.Sandbox{leaky(sb1), leaky(sb2)}, nil
		},
		UpdateNetworkPolicyFunc: func(_ context.Context, id string, p core.NetworkPolicy) (core.Sandbox, error) {
			gotPolicy = p
			return leaky(id), nil
		},
		NetworkStatusFunc: func(_ context.Context, id string) (core.NetworkStatus, error) {
			return core.NetworkStatus{Policy: *leaky(id).NetworkPolicy}, nil
		},
		HibernateFunc: func(_ context.Context, id string) (core.Sandbox, error) { return leaky(id), nil },
	}
	env := newNetTestEnv(t, fake)
	ctx := testCtx(t)
	in := &sandboxv1.NetworkPolicy{AllowOut: []string{"api.example.com"}, DenyOut: []string{"0.0.0.0/0"},
		Rules: map[string]*sandboxv1.NetworkRule{"API.example.com": {Headers: map[string]string{"Authorization": netSecret}}}}

	acq, err := env.client.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: "u", Options: &sandboxv1.SandboxOptions{NetworkPolicy: in}})
	if err != nil {
		t.Fatal(err)
	}
	wantDomain := &core.NetworkPolicy{AllowOut: []string{"api.example.com"}, DenyOut: []string{"0.0.0.0/0"},
		Rules: map[string]core.NetworkRule{"api.example.com": {Headers: map[string]string{"Authorization": netSecret}}}}
	if !gotOpts.Network || !reflect.DeepEqual(gotOpts.NetworkPolicy, wantDomain) {
		t.Errorf("the domain got %+v; want network and %+v (the secret reaches the domain, the key normalised)", gotOpts, wantDomain)
	}
	want := &sandboxv1.NetworkPolicy{AllowOut: []string{"api.example.com"}, DenyOut: []string{"0.0.0.0/0"},
		Rules: map[string]*sandboxv1.NetworkRule{"api.example.com": {Headers: map[string]string{"Authorization": ""}}}}
	if diff := cmp.Diff(want, acq.GetSandbox().GetNetworkPolicy(), protocmp.Transform()); diff != "" || !acq.GetSandbox().GetNetwork() {
		t.Errorf("acquired sandbox's policy (-want +got):\n%s", diff)
	}
	noSecretIn(t, "AcquireSandbox", acq)

	get, err := env.client.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: sb1})
	if err != nil {
		t.Fatal(err)
	}
	noSecretIn(t, "GetSandbox", get)
	list, err := env.client.ListSandboxes(ctx, &sandboxv1.ListSandboxesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	noSecretIn(t, "ListSandboxes", list)
	hib, err := env.client.HibernateSandbox(ctx, &sandboxv1.HibernateSandboxRequest{SandboxId: sb1})
	if err != nil {
		t.Fatal(err)
	}
	noSecretIn(t, "HibernateSandbox", hib)
	upd, err := env.client.UpdateNetworkPolicy(ctx, &sandboxv1.UpdateNetworkPolicyRequest{SandboxId: sb1, Policy: in})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotPolicy, *wantDomain) {
		t.Errorf("UpdateNetworkPolicy: the domain got %+v", gotPolicy)
	}
	if diff := cmp.Diff(want, upd.GetSandbox().GetNetworkPolicy(), protocmp.Transform()); diff != "" {
		t.Errorf("updated policy (-want +got):\n%s", diff)
	}
	noSecretIn(t, "UpdateNetworkPolicy", upd)
	st, err := env.client.GetNetworkStatus(ctx, &sandboxv1.GetNetworkStatusRequest{SandboxId: sb1})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, st.GetPolicy(), protocmp.Transform()); diff != "" {
		t.Errorf("status policy (-want +got):\n%s", diff)
	}
	noSecretIn(t, "GetNetworkStatus", st)
}

// TestNetworkRequestsRefused: bad policies are INVALID_ARGUMENT naming
// the entry; a server without networking is FAILED_PRECONDITION; none
// reaches the domain.
func TestNetworkRequestsRefused(t *testing.T) {
	fake := &fakeManager{}
	env := newNetTestEnv(t, fake)
	ctx := testCtx(t)
	for _, c := range []struct {
		name string
		call func() error
		code codes.Code
		msg  string
	}{
		{"acquire with a bad entry", func() error {
			_, err := env.client.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: "u", Options: &sandboxv1.SandboxOptions{
				NetworkPolicy: &sandboxv1.NetworkPolicy{AllowOut: []string{"good.com", "bad..com"}}}})
			return err
		}, codes.InvalidArgument, `"bad..com"`},
		{"acquire with a private block", func() error {
			_, err := env.client.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: "u", Options: &sandboxv1.SandboxOptions{
				NetworkPolicy: &sandboxv1.NetworkPolicy{AllowOut: []string{"192.168.1.0/24"}}}})
			return err
		}, codes.InvalidArgument, `"192.168.1.0/24"`},
		{"update with a bad header", func() error {
			_, err := env.client.UpdateNetworkPolicy(ctx, &sandboxv1.UpdateNetworkPolicyRequest{SandboxId: sb1, Policy: &sandboxv1.NetworkPolicy{
				Rules: map[string]*sandboxv1.NetworkRule{"api.com": {Headers: map[string]string{"Transfer-Encoding": "x"}}}}})
			return err
		}, codes.InvalidArgument, `"Transfer-Encoding"`},
		{"update without a policy", func() error {
			_, err := env.client.UpdateNetworkPolicy(ctx, &sandboxv1.UpdateNetworkPolicyRequest{SandboxId: sb1})
			return err
		}, codes.InvalidArgument, "policy is required"},
		{"update without a sandbox", func() error {
			_, err := env.client.UpdateNetworkPolicy(ctx, &sandboxv1.UpdateNetworkPolicyRequest{Policy: &sandboxv1.NetworkPolicy{}})
			return err
		}, codes.InvalidArgument, "sandbox ID is empty"},
		{"status of a malformed ID", func() error {
			_, err := env.client.GetNetworkStatus(ctx, &sandboxv1.GetNetworkStatusRequest{SandboxId: "nope"})
			return err
		}, codes.InvalidArgument, `"nope"`},
		{"port 0", func() error {
			_, err := env.client.GetHost(ctx, &sandboxv1.GetHostRequest{SandboxId: sb1})
			return err
		}, codes.InvalidArgument, "port 0 is outside 1-65535"},
		{"port past 65535", func() error {
			_, err := env.client.GetHost(ctx, &sandboxv1.GetHostRequest{SandboxId: sb1, Port: 1 << 20})
			return err
		}, codes.InvalidArgument, "port 1048576"},
	} {
		err := c.call()
		if status.Code(err) != c.code || !strings.Contains(status.Convert(err).Message(), c.msg) {
			t.Errorf("%s: %v; want %v with %s", c.name, err, c.code, c.msg)
		}
	}

	sealed := newTestEnv(t, fake)
	_, e1 := sealed.client.UpdateNetworkPolicy(ctx, &sandboxv1.UpdateNetworkPolicyRequest{SandboxId: sb1, Policy: &sandboxv1.NetworkPolicy{}})
	_, e2 := sealed.client.GetNetworkStatus(ctx, &sandboxv1.GetNetworkStatusRequest{SandboxId: sb1})
	_, e3 := sealed.client.GetHost(ctx, &sandboxv1.GetHostRequest{SandboxId: sb1, Port: 80})
	for _, err := range []error{e1, e2, e3} {
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "--allow-network") {
			t.Errorf("on a server without networking: %v", err)
		}
	}
	_, err := sealed.client.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: "u", Options: &sandboxv1.SandboxOptions{NetworkPolicy: &sandboxv1.NetworkPolicy{}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "--allow-network") {
		t.Errorf("a policy on a server without networking: %v; want INVALID_ARGUMENT as for network", err)
	}
	if calls := fake.Calls(); len(calls) != 0 {
		t.Errorf("refused calls reached the domain: %v", calls)
	}
}

// TestNetworkStatusConversion: counters as they are; denials' sandbox-made
// text made valid and bounded, their kinds and addresses mapped, the
// newest kept past the bound.
func TestNetworkStatusConversion(t *testing.T) {
	long := strings.Repeat("é", 300) // 600 bytes
	denials := []core.NetworkDenial{
		{Time: t0, Kind: "dns", Name: "evil\xff.example", Reason: "denied by deny_out evil\xff.example"},
		{Time: t0, Kind: "tcp", Name: long, Addr: netip.MustParseAddrPort("198.51.100.7:443"), Reason: strings.Repeat("r", 5000)},
		{Time: t0, Kind: "tcp", Addr: netip.MustParseAddrPort("[2001:db8::1]:80"), Reason: "no name"},
		{Kind: "udp"},
	}
	fake := &fakeManager{NetworkStatusFunc: func(context.Context, string) (core.NetworkStatus, error) {
		return core.NetworkStatus{Counters: core.NetworkCounters{BytesOut: 1, BytesIn: 2, ConnsAllowed: 3, ConnsDenied: 4, DNSAllowed: 5, DNSDenied: 6,
			ConnsOpen: 7, RuleRequests: 8, DenialsDropped: 9, DNSRateLimited: 10, ConnsRefusedAtCap: 11}, Denials: denials}, nil
	}}
	env := newNetTestEnv(t, fake)
	st, err := env.client.GetNetworkStatus(testCtx(t), &sandboxv1.GetNetworkStatusRequest{SandboxId: sb1})
	if err != nil {
		t.Fatal(err)
	}
	wantCounters := &sandboxv1.NetworkCounters{BytesOut: 1, BytesIn: 2, ConnectionsAllowed: 3, ConnectionsDenied: 4, DnsAllowed: 5, DnsDenied: 6,
		ConnectionsOpen: 7, RuleRequests: 8, DenialsDropped: 9, DnsRateLimited: 10, ConnectionsRefusedAtCap: 11}
	if diff := cmp.Diff(wantCounters, st.GetCounters(), protocmp.Transform()); diff != "" {
		t.Errorf("counters (-want +got):\n%s", diff)
	}
	d := st.GetDenials()
	if len(d) != 4 {
		t.Fatalf("%d denials", len(d))
	}
	want0 := &sandboxv1.NetworkDenial{Time: timestamppb.New(t0), Kind: sandboxv1.NetworkDenialKind_NETWORK_DENIAL_KIND_DNS,
		Name: "evil\uFFFD.example", Reason: "denied by deny_out evil\uFFFD.example"}
	if diff := cmp.Diff(want0, d[0], protocmp.Transform()); diff != "" {
		t.Errorf("first denial (-want +got):\n%s", diff)
	}
	if n := d[1].GetName(); len(n) > maxDenialName || !utf8.ValidString(n) || !strings.HasSuffix(n, "…") || len(d[1].GetReason()) > maxDenialReason {
		t.Errorf("long name and reason not bounded: %d bytes %q, reason %d bytes", len(n), n, len(d[1].GetReason()))
	}
	if d[1].GetAddress() != "198.51.100.7:443" || d[2].GetAddress() != "[2001:db8::1]:80" || d[0].GetAddress() != "" {
		t.Errorf("addresses %q %q %q", d[0].GetAddress(), d[1].GetAddress(), d[2].GetAddress())
	}
	if d[3].GetKind() != sandboxv1.NetworkDenialKind_NETWORK_DENIAL_KIND_UNSPECIFIED || d[3].GetTime() != nil {
		t.Errorf("unknown kind: %v", d[3])
	}

	many := make([]core.NetworkDenial, maxDenials+10)
	for i := range many {
		many[i] = core.NetworkDenial{Kind: "tcp", Reason: "r" + strings.Repeat("x", i%3)}
	}
	many[len(many)-1].Reason = "the newest"
	resp := networkStatusToProto(core.NetworkStatus{Denials: many})
	if len(resp.GetDenials()) != maxDenials || resp.GetDenials()[maxDenials-1].GetReason() != "the newest" {
		t.Errorf("past the bound: %d denials, last %q", len(resp.GetDenials()), resp.GetDenials()[len(resp.GetDenials())-1].GetReason())
	}
}

// TestGetHost: the domain's answer, the token only when one is needed.
func TestGetHost(t *testing.T) {
	var gotPort int
	fake := &fakeManager{GetHostFunc: func(_ context.Context, id string, port int) (core.HostInfo, error) {
		gotPort = port
		if id == sb2 {
			return core.HostInfo{URL: "https://8080-" + id + ".example.test/", Token: "tok-ignored"}, nil
		}
		return core.HostInfo{URL: "https://8080-" + id + ".example.test/", TokenRequired: true, Token: "tok", TokenHeader: "sandboxd-traffic-token"}, nil
	}}
	env := newNetTestEnv(t, fake)
	ctx := testCtx(t)
	h, err := env.client.GetHost(ctx, &sandboxv1.GetHostRequest{SandboxId: sb1, Port: 8080})
	if err != nil {
		t.Fatal(err)
	}
	want := &sandboxv1.GetHostResponse{Url: "https://8080-" + sb1 + ".example.test/", TokenRequired: true, TrafficToken: "tok", TokenHeader: "sandboxd-traffic-token"}
	if diff := cmp.Diff(want, h, protocmp.Transform()); diff != "" || gotPort != 8080 {
		t.Errorf("GetHost (-want +got):\n%s (port %d)", diff, gotPort)
	}
	pub, err := env.client.GetHost(ctx, &sandboxv1.GetHostRequest{SandboxId: sb2, Port: 65535})
	if err != nil || pub.GetTokenRequired() || pub.GetTrafficToken() != "" || gotPort != 65535 {
		t.Errorf("public port: %v, %v (port %d)", pub, err, gotPort)
	}
}

// TestPolicyConversionRoundTrip: what a caller sends is what the domain
// gets; what the domain returns arrives, values blanked.
func TestPolicyConversionRoundTrip(t *testing.T) {
	in := &sandboxv1.NetworkPolicy{AllowOut: []string{"a.com", "198.51.100.0/24"}, DenyOut: []string{"0.0.0.0/0"}, AllowPublicTraffic: true,
		Rules: map[string]*sandboxv1.NetworkRule{"a.com": {Headers: map[string]string{"X-K": "v"}}, "*.b.com": nil, "c.com": {}}}
	d := policyFromProto(in)
	want := core.NetworkPolicy{AllowOut: in.AllowOut, DenyOut: in.DenyOut, AllowPublicTraffic: true,
		Rules: map[string]core.NetworkRule{"a.com": {Headers: map[string]string{"X-K": "v"}}, "*.b.com": {}, "c.com": {}}}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("policyFromProto = %+v\nwant %+v", d, want)
	}
	back := policyToProto(&d)
	wantBack := &sandboxv1.NetworkPolicy{AllowOut: in.AllowOut, DenyOut: in.DenyOut, AllowPublicTraffic: true,
		Rules: map[string]*sandboxv1.NetworkRule{"a.com": {Headers: map[string]string{"X-K": ""}}, "*.b.com": {}, "c.com": {}}}
	if diff := cmp.Diff(wantBack, back, protocmp.Transform()); diff != "" {
		t.Errorf("policyToProto (-want +got):\n%s", diff)
	}
	if policyToProto(nil) != nil || !reflect.DeepEqual(policyFromProto(nil), core.NetworkPolicy{}) {
		t.Error("nil policies")
	}
	bad := policyToProto(&core.NetworkPolicy{AllowOut: []string{"\xff"}, Rules: map[string]core.NetworkRule{"\xfe": {Headers: map[string]string{"\xfd": "v"}}}})
	if _, err := proto.Marshal(bad); err != nil {
		t.Errorf("invalid UTF-8 from the domain does not marshal: %v", err)
	}
}
