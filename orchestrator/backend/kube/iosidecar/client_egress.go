package iosidecar

import (
	"context"

	"maps"
	"net/netip"
	"slices"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	sandboxiov1 "github.com/sandboxd/sandboxd/proto/sandboxio/v1"
)

// What the Client accepts of an EgressStatus: the gateway's own bounds
// (256 denials, its default ring, names of a domain's length), with room
// for nothing else. The sidecar shares its Pod with the sandbox: a reply
// past them is ErrBadResponse, never a large allocation of sandboxd's.
const (
	maxEgressDenials = 256
	maxDenialName    = 1 << 10
	maxDenialReason  = 4 << 10
)

// EgressPolicy is what SetEgress puts in force: the sandbox's policy and
// the operator's bounds above it.
type EgressPolicy struct {
	SandboxID string
	// Generation orders policies across replicas: the sidecar keeps the
	// highest it was given.
	Generation        uint64
	AllowOut, DenyOut []string
	// Ceiling, AllowPrivate and Cluster are the operator's bounds
	// (core.Policy's EgressCeiling and EgressAllowPrivate; the cluster's
	// blocks).
	Ceiling      []string
	AllowPrivate []netip.Prefix
	Cluster      []netip.Prefix
	// Hosts are the operator's fixed names (--egress-hosts-file); nil: the
	// Pod's resolver.
	Hosts map[string][]netip.Addr
	// SealedRules are the sandbox's header rules, sealed for the sidecar
	// (SealRules); nil: none.
	SealedRules []byte
	// UpstreamRoots are PEM certificates the gateway trusts besides the
	// image's roots when it verifies a rule's upstream (--egress-ca-file).
	UpstreamRoots []byte
}

// SetEgress puts p in force in the Pod's egress gateway; applied is false
// when a later generation already is. ErrEgressUnavailable: the Pod's
// redirect is not in force, and the sandbox must not be given network.
func (c *Client) SetEgress(ctx context.Context, p EgressPolicy) (applied bool, err error) {
	req := &sandboxiov1.SetEgressRequest{SandboxId: p.SandboxID, Generation: p.Generation,
		AllowOut: p.AllowOut, DenyOut: p.DenyOut, Ceiling: p.Ceiling,
		SealedRules: p.SealedRules, UpstreamRoots: p.UpstreamRoots}
	for _, b := range p.AllowPrivate {
		req.AllowPrivate = append(req.AllowPrivate, b.String())
	}
	for _, b := range p.Cluster {
		req.Cluster = append(req.Cluster, b.String())
	}
	// In the names' order: the sidecar keeps its gateway while the bounds
	// it is given are the same, and replicas must give the same.
	for _, name := range slices.Sorted(maps.Keys(p.Hosts)) {
		h := &sandboxiov1.EgressHost{Name: name}
		for _, a := range p.Hosts[name] {
			h.Addresses = append(h.Addresses, a.String())
		}
		req.Hosts = append(req.Hosts, h)
	}
	resp, err := c.rpc.SetEgress(ctx, req)
	if err != nil {
		return false, errorOf(ctx, callEgress, err)
	}
	if resp.GetApplied() && resp.GetGeneration() != p.Generation {
		return false, badResponse("egress: applied generation %d, not %d", resp.GetGeneration(), p.Generation)
	}
	if resp.GetApplied() && len(p.SealedRules) > 0 && resp.GetRules() == 0 {
		// Applied without them: never taken as the policy in force.
		return false, &Error{Code: codes.FailedPrecondition, kind: ErrRulesSealed, Reason: "RULES_SEALED",
			Message: "this Pod's io sidecar is of an earlier release, which does not apply header rules; a hibernation and wake, or a new sandbox, gives a Pod of this release"}
	}
	return resp.GetApplied(), nil
}

// EgressStatus returns what the Pod's gateway counted and refused since
// the sidecar started, and the generation of the policy in force (0: none
// yet, e.g. a sidecar container that restarted).
func (c *Client) EgressStatus(ctx context.Context) (core.NetworkCounters, []core.NetworkDenial, uint64, error) {
	resp, err := c.rpc.EgressStatus(ctx, &sandboxiov1.EgressStatusRequest{})
	if err != nil {
		return core.NetworkCounters{}, nil, 0, errorOf(ctx, callEgress, err)
	}
	if len(resp.GetDenials()) > maxEgressDenials || resp.GetConnsOpen() > 1<<20 {
		return core.NetworkCounters{}, nil, 0, badResponse("egress: %d denials, %d connections open", len(resp.GetDenials()), resp.GetConnsOpen())
	}
	counters := core.NetworkCounters{BytesOut: resp.GetBytesOut(), BytesIn: resp.GetBytesIn(),
		ConnsAllowed: resp.GetConnsAllowed(), ConnsDenied: resp.GetConnsDenied(),
		DNSAllowed: resp.GetDnsAllowed(), DNSDenied: resp.GetDnsDenied(), ConnsOpen: int(resp.GetConnsOpen()),
		RuleRequests: resp.GetRuleRequests(), DenialsDropped: resp.GetDenialsDropped(),
		DNSRateLimited: resp.GetDnsRateLimited(), ConnsRefusedAtCap: resp.GetConnsRefusedAtCap()}
	var denials []core.NetworkDenial
	for _, d := range resp.GetDenials() {
		if d.GetKind() != "dns" && d.GetKind() != "tcp" {
			return core.NetworkCounters{}, nil, 0, badResponse("egress: a denial of kind %.32q", d.GetKind())
		}
		if len(d.GetName()) > maxDenialName || len(d.GetReason()) > maxDenialReason {
			return core.NetworkCounters{}, nil, 0, badResponse("egress: a denial's name or reason is too long (%d, %d bytes)", len(d.GetName()), len(d.GetReason()))
		}
		nd := core.NetworkDenial{Time: time.Unix(0, d.GetTimeUnixNano()).UTC(), Kind: d.GetKind(),
			Name: sanitize(d.GetName()), Reason: sanitize(d.GetReason())}
		if d.GetAddress() != "" {
			ap, err := netip.ParseAddrPort(d.GetAddress())
			if err != nil {
				return core.NetworkCounters{}, nil, 0, badResponse("egress: a denial's address %.64q", d.GetAddress())
			}
			nd.Addr = ap
		}
		denials = append(denials, nd)
	}
	return counters, denials, resp.GetGeneration(), nil
}
