package kube

import (
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
	counts := map[core.CountKey]int{}
	for _, p := range m.userPods() {
		gone, dead, _, _ := podState(p)
		switch {
		case gone:
			continue
		case dead:
			counts[core.CountKey{Tenant: p.Annotations[annTenant], State: core.StateDead}]++
		default:
			counts[core.CountKey{Tenant: p.Annotations[annTenant], State: core.StateRunning}]++
		}
	}
	for _, c := range m.hibernatedClaims() {
		if p, err := m.pods.Pods(m.cfg.Namespace).Get(c.Name); err == nil {
			if gone, _, _, _ := podState(p); !gone {
				continue // waking: counted with its Pod
			}
		}
		counts[core.CountKey{Tenant: c.Annotations[annTenant], State: core.StateHibernated}]++
	}
	return core.SortedCounts(counts)
}

// PoolSize is the number of ready, unclaimed warm-pool Pods.
func (m *Manager) PoolSize() int { return len(m.readyPool()) }
