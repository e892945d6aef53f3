package docker

import (
	"context"
	"fmt"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// The network API of a networked sandbox: its policy, kept in meta.json
// with the rest of what sandboxd knows about it (so it survives restarts
// and hibernation), and what callers see of it. Enforcement is the egress
// gateway's, wired by network.go: the hooks at the end of this file are
// where the two meet.

// backendName is this backend's --backend value, as core.Unsupported names
// it.
const backendName = "docker"

// redacted is a policy as callers may see it (nil stays nil).
func redacted(p *core.NetworkPolicy) *core.NetworkPolicy {
	if p == nil {
		return nil
	}
	r := p.Redacted()
	return &r
}

// networkPolicy returns a copy of sb's policy in full, header values
// included, for the gateway (nil without network).
func (sb *sandbox) networkPolicy() *core.NetworkPolicy {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.netPolicy == nil {
		return nil
	}
	p := sb.netPolicy.Clone()
	return &p
}

// UpdateNetworkPolicy replaces a networked sandbox's policy (checked and
// normalised by core.Validating): persisted in meta.json first, then
// applied (applyNetworkPolicy), and the sandbox returned with it
// redacted. It does not count as a use of the sandbox, nor wake a
// hibernated one, which applies the policy when it wakes. A sandbox
// without network is core.NoNetwork; a dead one core.SandboxDead.
func (m *Manager) UpdateNetworkPolicy(ctx context.Context, sandboxID string, np core.NetworkPolicy) (core.Sandbox, error) {
	sb, err := m.lookup(ctx, sandboxID)
	if err != nil {
		return core.Sandbox{}, err
	}
	if !sb.network {
		return core.Sandbox{}, core.NoNetwork(sandboxID)
	}
	p := np.Clone()
	sb.mu.Lock()
	if sb.state == core.StateDead {
		sb.mu.Unlock()
		return core.Sandbox{}, sb.deadError()
	}
	prev := sb.netPolicy
	sb.netPolicy, sb.dirty = &p, true
	sb.mu.Unlock()
	// Written now, before the gateway hears of it: a policy applied but
	// lost to a crash would come back as the old one after a restart.
	if err := sb.persist(true); err != nil {
		sb.mu.Lock()
		if sb.netPolicy == &p { // no later update replaced it meanwhile
			sb.netPolicy = prev
		}
		sb.mu.Unlock()
		return core.Sandbox{}, fmt.Errorf("persist the network policy of sandbox %s: %w", sandboxID, err)
	}
	if err := m.applyNetworkPolicy(sb); err != nil {
		return core.Sandbox{}, err
	}
	m.log.Info("sandbox network policy updated", "sandbox_id", sb.id, "tenant", sb.tenant, "user_id", sb.userID,
		"allow_out", len(p.AllowOut), "deny_out", len(p.DenyOut), "rules", len(p.Rules), "public_traffic", p.AllowPublicTraffic)
	return m.snapshot(sb), nil
}

// NetworkStatus returns a networked sandbox's policy, redacted, with what
// the gateway counted and refused (networkActivity). It neither wakes a
// hibernated sandbox nor counts as a use.
func (m *Manager) NetworkStatus(ctx context.Context, sandboxID string) (core.NetworkStatus, error) {
	sb, err := m.lookup(ctx, sandboxID)
	if err != nil {
		return core.NetworkStatus{}, err
	}
	if !sb.network {
		return core.NetworkStatus{}, core.NoNetwork(sandboxID)
	}
	counters, denials := m.networkActivity(sb)
	sb.mu.Lock()
	policy := sb.netPolicy.Redacted()
	sb.mu.Unlock()
	return core.NetworkStatus{Policy: policy, Counters: counters, Denials: denials}, nil
}

// GetHost returns the URL of a networked sandbox's port (hostOf). It
// neither wakes a hibernated sandbox (a request to the URL does) nor
// counts as a use. A sandbox without network has no ports
// (core.NoNetwork); a dead one is core.SandboxDead.
func (m *Manager) GetHost(ctx context.Context, sandboxID string, port int) (core.HostInfo, error) {
	sb, err := m.lookup(ctx, sandboxID)
	if err != nil {
		return core.HostInfo{}, err
	}
	if !sb.network {
		return core.HostInfo{}, core.NoNetwork(sandboxID)
	}
	if st, _ := sb.status(); st == core.StateDead {
		return core.HostInfo{}, sb.deadError()
	}
	return m.hostOf(sb, port)
}

// applyNetworkPolicy makes sb's current policy (sb.networkPolicy()) the
// one in force: new connections follow it, open ones it refuses are
// closed. UpdateNetworkPolicy calls it after persisting the policy, for a
// sandbox in any state but dead; a sandbox not attached to the gateway (a
// hibernated one) is left alone and takes its policy when it is attached.
func (m *Manager) applyNetworkPolicy(sb *sandbox) error {
	if m.net == nil || m.net.gw == nil {
		return nil // no gateway yet: every attach reads the current policy
	}
	m.net.gw.Update(sb.id, m.policyOf(sb))
	return nil
}

// networkActivity returns what the gateway counted for sb since it
// attached it, and its recent denials, oldest first (nothing while it is
// not attached).
func (m *Manager) networkActivity(sb *sandbox) (core.NetworkCounters, []core.NetworkDenial) {
	if m.net == nil || m.net.gw == nil {
		return core.NetworkCounters{}, nil
	}
	st := m.net.gw.Stats(sb.id)
	counters := core.NetworkCounters{BytesOut: st.BytesOut, BytesIn: st.BytesIn, ConnsAllowed: st.ConnsAllowed, ConnsDenied: st.ConnsDenied,
		DNSAllowed: st.DNSAllowed, DNSDenied: st.DNSDenied, ConnsOpen: st.ConnsOpen, RuleRequests: st.RuleRequests,
		DenialsDropped: st.DeniedLogDropped, DNSRateLimited: st.DNSRateLimited, ConnsRefusedAtCap: st.ConnsRefusedAtCap}
	var denials []core.NetworkDenial
	for _, d := range m.net.gw.Denials(sb.id) {
		denials = append(denials, core.NetworkDenial{Time: d.Time, Kind: d.Kind, Name: d.Name, Addr: d.Addr, Reason: d.Reason})
	}
	return counters, denials
}
