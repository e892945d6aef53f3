package client

import (
	"context"
	"fmt"
	"maps"
	"slices"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// NetworkPolicy is a sandbox's egress policy: what its traffic may reach
// and what sandboxd's egress gateway adds to its HTTPS requests on the way
// (sandbox.proto's NetworkPolicy has the whole contract). E2B's words and
// precedence: an AllowOut entry beats a DenyOut one, a destination neither
// matches is allowed, so DenyOut ["0.0.0.0/0"] with AllowOut is an
// allow-list and the zero policy allows every public destination.
type NetworkPolicy struct {
	// AllowOut and DenyOut are domains ("example.com", "*.example.com"),
	// IP addresses and CIDR blocks.
	AllowOut, DenyOut []string
	// Rules map a domain pattern to the HTTP headers the gateway sets on
	// each HTTPS request to it (a credential the sandbox never sees). A
	// rule grants no access: AllowOut must let the domain through.
	Rules map[string]map[string]string
	// AllowPublicTraffic lets the sandbox's port URLs (GetHost) answer
	// without its traffic token.
	AllowPublicTraffic bool
}

// proto converts p for a request.
func (p NetworkPolicy) proto() *sandboxv1.NetworkPolicy {
	out := &sandboxv1.NetworkPolicy{AllowOut: slices.Clone(p.AllowOut), DenyOut: slices.Clone(p.DenyOut), AllowPublicTraffic: p.AllowPublicTraffic}
	if p.Rules != nil {
		out.Rules = make(map[string]*sandboxv1.NetworkRule, len(p.Rules))
		for k, h := range p.Rules {
			out.Rules[k] = &sandboxv1.NetworkRule{Headers: maps.Clone(h)}
		}
	}
	return out
}

// PolicyFromProto converts a policy sandboxd returned (header values come
// back empty: sandboxd never returns them); nil is the zero policy.
func PolicyFromProto(p *sandboxv1.NetworkPolicy) NetworkPolicy {
	out := NetworkPolicy{AllowOut: p.GetAllowOut(), DenyOut: p.GetDenyOut(), AllowPublicTraffic: p.GetAllowPublicTraffic()}
	if rules := p.GetRules(); rules != nil {
		out.Rules = make(map[string]map[string]string, len(rules))
		for k, r := range rules {
			out.Rules[k] = r.GetHeaders()
		}
	}
	return out
}

// WithNetworkPolicy gives a new sandbox network access under p (it implies
// WithNetwork). A malformed entry, rule or header is ErrInvalidArgument
// naming it; sandboxd refuses network unless started with --allow-network
// (ErrInvalidArgument), and its kubernetes backend unless started with
// --kube-egress-cni too (ErrNotImplemented).
func WithNetworkPolicy(p NetworkPolicy) AcquireOption {
	pp := p.proto()
	return func(o *sandboxv1.SandboxOptions) { o.NetworkPolicy = pp }
}

// UpdateNetworkPolicy replaces the egress policy of a sandbox created with
// network, whole, and returns the sandbox with its new policy (header
// values empty). New connections follow it at once; open ones it refuses
// are closed. ErrInvalidArgument for a bad policy (the message names the
// entry), ErrFailedPrecondition for a sandbox without network, a dead one,
// or a server without networking (ErrNotImplemented on the kubernetes
// backend without --kube-egress-cni).
func (c *Client) UpdateNetworkPolicy(ctx context.Context, sandboxID string, p NetworkPolicy) (*sandboxv1.Sandbox, error) {
	r, err := c.api.UpdateNetworkPolicy(ctx, &sandboxv1.UpdateNetworkPolicyRequest{SandboxId: sandboxID, Policy: p.proto()})
	if err != nil {
		return nil, fmt.Errorf("updating the network policy of sandbox %s: %w", sandboxID, fromGRPC(err))
	}
	return r.GetSandbox(), nil
}

// NetworkStatus returns a networked sandbox's policy (header values
// empty), its egress counters and its recent denials, oldest first, each
// with why: how to learn why a download failed.
func (c *Client) NetworkStatus(ctx context.Context, sandboxID string) (*sandboxv1.GetNetworkStatusResponse, error) {
	r, err := c.api.GetNetworkStatus(ctx, &sandboxv1.GetNetworkStatusRequest{SandboxId: sandboxID})
	if err != nil {
		return nil, fmt.Errorf("getting the network status of sandbox %s: %w", sandboxID, fromGRPC(err))
	}
	return r, nil
}

// GetHost returns the URL of a port of a networked sandbox on sandboxd's
// HTTP front, and the traffic token a request needs (in the header
// TokenHeader) unless the sandbox's policy allows public traffic.
// ErrInvalidArgument for a port outside 1-65535; ErrFailedPrecondition
// where sandboxd serves no ports.
func (c *Client) GetHost(ctx context.Context, sandboxID string, port int) (*sandboxv1.GetHostResponse, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("getting the URL of port %d of sandbox %s: %w: the port is outside 1-65535", port, sandboxID, ErrInvalidArgument)
	}
	r, err := c.api.GetHost(ctx, &sandboxv1.GetHostRequest{SandboxId: sandboxID, Port: uint32(port)})
	if err != nil {
		return nil, fmt.Errorf("getting the URL of port %d of sandbox %s: %w", port, sandboxID, fromGRPC(err))
	}
	return r, nil
}
