package grpcapi

import (
	"context"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// The network RPCs and their conversions. A policy's header values are
// secrets: they travel from a caller to the domain, never back. Every
// policy this door sends is built by policyToProto, which sends header
// names with empty values whatever the domain handed it (the domain
// redacts already; a backend that forgot must still not leak them).

// Bounds of what a denial carries to the caller: its name and reason come
// partly from the sandbox (the name it asked for or carried).
const (
	maxDenialName   = 256
	maxDenialReason = 1024
	// maxDenials bounds the denials of one answer (the gateway keeps 256
	// unless configured); the newest are kept.
	maxDenials = 1024
)

// UpdateNetworkPolicy implements sandboxv1.SandboxServiceServer.
func (s *Service) UpdateNetworkPolicy(ctx context.Context, req *sandboxv1.UpdateNetworkPolicyRequest) (*sandboxv1.UpdateNetworkPolicyResponse, error) {
	if err := required("sandbox ID", req.GetSandboxId()); err != nil {
		return nil, err
	}
	if req.GetPolicy() == nil {
		return nil, invalid("policy is required: it replaces the sandbox's policy whole (send an empty policy to allow every public destination)")
	}
	sb, err := s.m.UpdateNetworkPolicy(ctx, req.GetSandboxId(), policyFromProto(req.GetPolicy()))
	if err != nil {
		return nil, s.fail(ctx, "UpdateNetworkPolicy", err)
	}
	return &sandboxv1.UpdateNetworkPolicyResponse{Sandbox: sandboxToProto(sb)}, nil
}

// GetNetworkStatus implements sandboxv1.SandboxServiceServer.
func (s *Service) GetNetworkStatus(ctx context.Context, req *sandboxv1.GetNetworkStatusRequest) (*sandboxv1.GetNetworkStatusResponse, error) {
	if err := required("sandbox ID", req.GetSandboxId()); err != nil {
		return nil, err
	}
	st, err := s.m.NetworkStatus(ctx, req.GetSandboxId())
	if err != nil {
		return nil, s.fail(ctx, "GetNetworkStatus", err)
	}
	return networkStatusToProto(st), nil
}

// GetHost implements sandboxv1.SandboxServiceServer. The port's range is
// the domain's to check.
func (s *Service) GetHost(ctx context.Context, req *sandboxv1.GetHostRequest) (*sandboxv1.GetHostResponse, error) {
	if err := required("sandbox ID", req.GetSandboxId()); err != nil {
		return nil, err
	}
	h, err := s.m.GetHost(ctx, req.GetSandboxId(), int(req.GetPort()))
	if err != nil {
		return nil, s.fail(ctx, "GetHost", err)
	}
	resp := &sandboxv1.GetHostResponse{Url: validUTF8(h.URL), TokenRequired: h.TokenRequired, TokenHeader: validUTF8(h.TokenHeader)}
	if h.TokenRequired {
		resp.TrafficToken = validUTF8(h.Token)
	}
	return resp, nil
}

// policyFromProto converts a caller's policy (nil is the empty policy);
// the domain checks it.
func policyFromProto(p *sandboxv1.NetworkPolicy) core.NetworkPolicy {
	out := core.NetworkPolicy{AllowOut: p.GetAllowOut(), DenyOut: p.GetDenyOut(), AllowPublicTraffic: p.GetAllowPublicTraffic()}
	if rules := p.GetRules(); rules != nil {
		out.Rules = make(map[string]core.NetworkRule, len(rules))
		for k, r := range rules {
			out.Rules[k] = core.NetworkRule{Headers: r.GetHeaders()}
		}
	}
	return out
}

// policyToProto converts a policy for a caller: entries and names made
// valid UTF-8, and every header value empty (see the top of this file).
// nil stays unset.
func policyToProto(p *core.NetworkPolicy) *sandboxv1.NetworkPolicy {
	if p == nil {
		return nil
	}
	out := &sandboxv1.NetworkPolicy{AllowOut: validUTF8s(p.AllowOut), DenyOut: validUTF8s(p.DenyOut), AllowPublicTraffic: p.AllowPublicTraffic}
	if len(p.Rules) > 0 {
		out.Rules = make(map[string]*sandboxv1.NetworkRule, len(p.Rules))
		for k, r := range p.Rules {
			rule := &sandboxv1.NetworkRule{}
			if len(r.Headers) > 0 {
				rule.Headers = make(map[string]string, len(r.Headers))
				for h := range r.Headers {
					rule.Headers[validUTF8(h)] = ""
				}
			}
			out.Rules[validUTF8(k)] = rule
		}
	}
	return out
}

// networkStatusToProto converts a sandbox's network status: the policy
// redacted, the denials bounded and their sandbox-made text made valid.
func networkStatusToProto(st core.NetworkStatus) *sandboxv1.GetNetworkStatusResponse {
	c := st.Counters
	resp := &sandboxv1.GetNetworkStatusResponse{
		Policy: policyToProto(&st.Policy),
		Counters: &sandboxv1.NetworkCounters{
			BytesOut: c.BytesOut, BytesIn: c.BytesIn,
			ConnectionsAllowed: c.ConnsAllowed, ConnectionsDenied: c.ConnsDenied,
			DnsAllowed: c.DNSAllowed, DnsDenied: c.DNSDenied,
			ConnectionsOpen: int64(c.ConnsOpen), RuleRequests: c.RuleRequests,
			DenialsDropped: c.DenialsDropped, DnsRateLimited: c.DNSRateLimited,
			ConnectionsRefusedAtCap: c.ConnsRefusedAtCap,
		},
	}
	denials := st.Denials
	if len(denials) > maxDenials {
		denials = denials[len(denials)-maxDenials:]
	}
	for _, d := range denials {
		pd := &sandboxv1.NetworkDenial{Time: timestampToProto(d.Time), Kind: denialKindToProto(d.Kind),
			Name: clipUTF8(d.Name, maxDenialName), Reason: clipUTF8(d.Reason, maxDenialReason)}
		if d.Addr.IsValid() {
			pd.Address = d.Addr.String()
		}
		resp.Denials = append(resp.Denials, pd)
	}
	return resp
}

func denialKindToProto(kind string) sandboxv1.NetworkDenialKind {
	switch kind {
	case "dns":
		return sandboxv1.NetworkDenialKind_NETWORK_DENIAL_KIND_DNS
	case "tcp":
		return sandboxv1.NetworkDenialKind_NETWORK_DENIAL_KIND_TCP
	}
	return sandboxv1.NetworkDenialKind_NETWORK_DENIAL_KIND_UNSPECIFIED
}

// clipUTF8 makes s valid UTF-8 and at most max bytes long, cut at a
// character's start and marked with "…" when cut.
func clipUTF8(s string, max int) string {
	s = validUTF8(s)
	if len(s) <= max {
		return s
	}
	const mark = "…"
	cut := max - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
