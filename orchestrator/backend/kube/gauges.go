package kube

import (
	"cmp"
	"slices"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// The scrape-time gauges (orchestrator/metrics' Source): sandboxes by
// tenant and state, and the warm pool's size. Every replica sees the whole
// namespace, so only the leader reports them (Reporting): summed over a
// deployment's instances, as one sums Docker hosts, each sandbox counts
// once. The counters (acquires, pool refills) are each replica's own.

// Reporting reports whether this replica reports the gauges: while it
// leads.
func (m *Manager) Reporting() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.leader
}

// SandboxCounts counts the users' sandboxes in the cache by tenant and
// state (running, dead, hibernated), as GetSandbox would say.
func (m *Manager) SandboxCounts() []core.SandboxCount {
	type key struct {
		tenant string
		state  core.State
	}
	counts := map[key]int{}
	for _, p := range m.userPods() {
		gone, dead, _, _ := podState(p)
		switch {
		case gone:
			continue
		case dead:
			counts[key{p.Annotations[annTenant], core.StateDead}]++
		default:
			counts[key{p.Annotations[annTenant], core.StateRunning}]++
		}
	}
	for _, c := range m.hibernatedClaims() {
		if p, err := m.pods.Pods(m.cfg.Namespace).Get(c.Name); err == nil {
			if gone, _, _, _ := podState(p); !gone {
				continue // waking: counted with its Pod
			}
		}
		counts[key{c.Annotations[annTenant], core.StateHibernated}]++
	}
	out := make([]core.SandboxCount, 0, len(counts))
	for k, n := range counts {
		out = append(out, core.SandboxCount{Tenant: k.tenant, State: k.state, N: n})
	}
	slices.SortFunc(out, func(a, b core.SandboxCount) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.State, b.State))
	})
	return out
}

// PoolSize is the number of ready, unclaimed warm-pool Pods.
func (m *Manager) PoolSize() int { return len(m.readyPool()) }
