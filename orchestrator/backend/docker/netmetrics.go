package docker

import (
	"cmp"
	"slices"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/egress"
)

// EgressCounters returns, for the metrics read at scrape time
// (metrics.Metrics.WatchEgress), the egress gateway's totals and the
// counters of each sandbox it serves now, sorted by ID; ok is false while
// the gateway has not started (no networked sandbox yet, or sandboxd
// without --allow-network). A sandbox the gateway serves but the registry
// no longer holds (being removed) is left out: its series go with it.
func (m *Manager) EgressCounters() (per []core.SandboxEgress, totals core.EgressTotals, ok bool) {
	if m.net == nil || !m.net.started.Load() {
		return nil, core.EgressTotals{}, false
	}
	t, stats := m.net.gw.Counters()
	totals = core.EgressTotals{NetworkCounters: networkCounters(t.Stats), Sandboxes: t.Sandboxes, DNSInFlight: t.DNSInFlight,
		StrayConns: t.StrayConns, StrayDNS: t.StrayDNS}
	for id, st := range stats {
		sb := m.reg.get(id)
		if sb == nil {
			continue
		}
		sb.mu.Lock()
		tenant := sb.tenant
		sb.mu.Unlock()
		per = append(per, core.SandboxEgress{SandboxID: id, Tenant: tenant, NetworkCounters: networkCounters(st)})
	}
	slices.SortFunc(per, func(a, b core.SandboxEgress) int { return cmp.Compare(a.SandboxID, b.SandboxID) })
	return per, totals, true
}

// networkCounters is egress.Stats in the domain's words.
func networkCounters(st egress.Stats) core.NetworkCounters {
	return core.NetworkCounters{BytesOut: st.BytesOut, BytesIn: st.BytesIn, ConnsAllowed: st.ConnsAllowed, ConnsDenied: st.ConnsDenied,
		DNSAllowed: st.DNSAllowed, DNSDenied: st.DNSDenied, ConnsOpen: st.ConnsOpen, RuleRequests: st.RuleRequests,
		DenialsDropped: st.DeniedLogDropped, DNSRateLimited: st.DNSRateLimited, ConnsRefusedAtCap: st.ConnsRefusedAtCap}
}
