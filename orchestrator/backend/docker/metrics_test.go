package docker

import (
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/google/go-cmp/cmp"
)

// recordingMetrics remembers what the Manager reported.
type recordingMetrics struct {
	mu         sync.Mutex
	acquires   []core.AcquireKind
	docker     map[string]int
	reconciled map[core.ReconcileResult]int
	refills    int
	misses     map[core.PoolMiss]int
}

func newRecordingMetrics() *recordingMetrics {
	return &recordingMetrics{docker: map[string]int{}, reconciled: map[core.ReconcileResult]int{}, misses: map[core.PoolMiss]int{}}
}

func (r *recordingMetrics) Acquired(k core.AcquireKind, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.acquires = append(r.acquires, k)
}

func (r *recordingMetrics) PoolRefilled() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refills++
}

func (r *recordingMetrics) PoolMissed(reason core.PoolMiss) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.misses[reason]++
}

func (r *recordingMetrics) DockerError(op string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.docker[op]++
}

func (r *recordingMetrics) Reconciled(res core.ReconcileResult, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reconciled[res] += n
}

func TestMetricsHooks(t *testing.T) {
	fd := newFakeDocker(testImage)
	rec := newRecordingMetrics()
	cfg := testConfig(t)
	cfg.Metrics = rec
	m := newTestManager(t, cfg, fd)

	acquire(t, m, "alice")
	acquire(t, m, "alice")
	acquire(t, m, "bob")
	fd.setUnreachable(true)
	if _, err := m.Acquire(t.Context(), "carol", core.Options{}); err == nil {
		t.Fatal("Acquire with Docker unreachable succeeded")
	}
	fd.setUnreachable(false)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	if diff := cmp.Diff([]core.AcquireKind{core.AcquireCold, core.AcquireExisting, core.AcquireCold}, rec.acquires); diff != "" {
		t.Errorf("acquires (-want +got):\n%s", diff)
	}
	if rec.docker["image_inspect"] != 1 || len(rec.docker) != 1 {
		t.Errorf("docker errors %v, want one image_inspect (the failed acquire's first call)", rec.docker)
	}
	if rec.reconciled[core.ReconcileAdopted] != 0 {
		t.Errorf("reconciled %v on a fresh state directory, want nothing adopted", rec.reconciled)
	}
	want := []core.SandboxCount{{Tenant: core.DefaultCaller.Tenant, State: core.StateRunning, N: 2}}
	if diff := cmp.Diff(want, m.SandboxCounts()); diff != "" {
		t.Errorf("SandboxCounts (-want +got):\n%s", diff)
	}
	if n := m.PoolSize(); n != 0 {
		t.Errorf("PoolSize = %d without a pool", n)
	}

	// A restart adopts both sandboxes.
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	rec2 := newRecordingMetrics()
	cfg.Metrics = rec2
	newTestManager(t, cfg, fd)
	if diff := cmp.Diff(map[core.ReconcileResult]int{core.ReconcileAdopted: 2, core.ReconcileDead: 0, core.ReconcileExpired: 0, core.ReconcileOrphanContainer: 0, core.ReconcileOrphanDir: 0, core.ReconcileHalfShaped: 0}, rec2.reconciled); diff != "" {
		t.Errorf("reconciled after restart (-want +got):\n%s", diff)
	}
}
