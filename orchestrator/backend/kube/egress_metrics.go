package kube

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Per-sandbox egress series (orchestrator/metrics' sandbox_egress_*). A
// networked sandbox's gateway runs in its Pod's io sidecar, so its
// counters are there: while it leads, a replica reads every ready
// networked Pod's (EgressStatus) each egressReadEvery, at most
// egressReadParallel calls at once, each bounded by egressReadTimeout,
// and a scrape reports the last reads (SandboxEgress; Reporting, so that
// a deployment counts each sandbox once). What a sidecar answers is
// bounded and checked by the client, as for GetNetworkStatus. A
// sandbox's counters start again when its sidecar does (a restart of its
// container, or a wake: a new Pod), which rate() takes as a counter
// reset, as at each attach on Docker. There are no server-wide totals on
// this backend: the gateways come and go with their Pods, so no count of
// theirs only grows.
const (
	egressReadEvery    = 10 * time.Second
	egressReadTimeout  = time.Second
	egressReadParallel = 8
)

// egressRead is a sandbox's last counters, read from its Pod.
type egressRead struct {
	uid string // the Pod read
	sb  core.SandboxEgress
}

// SandboxEgress returns the networked sandboxes' egress counters as last
// read (nil before the first read, and on a replica that does not lead).
func (m *Manager) SandboxEgress() []core.SandboxEgress {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]core.SandboxEgress, 0, len(m.egressReads))
	for _, r := range m.egressReads {
		out = append(out, r.sb)
	}
	slices.SortFunc(out, func(a, b core.SandboxEgress) int { return cmp.Compare(a.SandboxID, b.SandboxID) })
	return out
}

// egressLoop reads the counters every egressReadEvery until ctx ends
// (leadership lost), then forgets them: another replica reports now.
func (m *Manager) egressLoop(ctx context.Context) {
	defer func() {
		m.mu.Lock()
		m.egressReads = nil
		m.mu.Unlock()
	}()
	t := time.NewTicker(egressReadEvery)
	defer t.Stop()
	for {
		m.readEgress(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// readEgress reads the counters of every ready networked Pod. A read that
// fails keeps the Pod's last one; a sandbox whose Pod is gone, dead or not
// ready (hibernated, starting) is dropped.
func (m *Manager) readEgress(ctx context.Context) {
	var pods []*corev1.Pod
	for _, p := range m.userPods() {
		if _, dead, _, ready := podState(p); ready && !dead && p.Labels[labelNetwork] != "" {
			pods = append(pods, p)
		}
	}
	m.mu.Lock()
	last := m.egressReads
	m.mu.Unlock()
	next := make(map[string]egressRead, len(pods))
	var mu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, egressReadParallel)
	for _, p := range pods {
		id := p.Labels[labelSandboxID]
		if r, ok := last[id]; ok && r.uid == string(p.UID) {
			next[id] = r // until this read replaces it
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-slots }()
			rctx, cancel := context.WithTimeout(ctx, egressReadTimeout)
			defer cancel()
			conn, err := m.io(rctx, p)
			if err != nil {
				return
			}
			counters, _, _, err := conn.EgressStatus(rctx)
			if err != nil {
				if ctx.Err() == nil {
					m.log.Debug("could not read a sandbox's egress counters", "sandbox_id", id, "error", err)
				}
				return
			}
			mu.Lock()
			next[id] = egressRead{uid: string(p.UID), sb: core.SandboxEgress{SandboxID: id, Tenant: p.Annotations[annTenant], NetworkCounters: counters}}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	m.mu.Lock()
	m.egressReads = next
	m.mu.Unlock()
}
