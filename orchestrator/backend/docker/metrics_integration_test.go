package docker

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// waitSample polls the sandbox's newest sample until ok accepts it,
// failing after a minute; the poll's pace is the sampling interval.
func waitSample(t *testing.T, ctx context.Context, m *validated, id string, every time.Duration, what string, ok func(core.SandboxMetrics) bool) core.SandboxMetrics {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	var last core.SandboxMetrics
	for {
		ss, err := m.SandboxMetrics(ctx, id, time.Time{})
		if err != nil {
			t.Fatalf("SandboxMetrics: %v", err)
		}
		if len(ss) > 0 {
			last = ss[len(ss)-1]
			if ok(last) {
				return last
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sample with %s within a minute; last %+v", what, last)
		}
		time.Sleep(every) // a poll's pace: a new sample comes each interval
	}
}

// TestIntegrationSandboxMetrics: with real containers, a busy loop and a
// 200 MB allocation show in the samples and go once they stop; the limits
// are the sandbox's; since filters; another tenant's sandbox is not
// found; a hibernated sandbox keeps its last sample alone.
func TestIntegrationSandboxMetrics(t *testing.T) {
	const every = 200 * time.Millisecond
	m, _, _ := integrationManager(t, func(c *Config) { c.MetricsSampleInterval = every })
	ctx := as(t, "acme", false)
	res, err := m.Acquire(ctx, "it-metrics", core.Options{Limits: core.Limits{NanoCPUs: 1e9, MemoryBytes: 512 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Sandbox.ID
	mustRunOK(t, m, id, "python", "x = 1") // the kernel is up: its start-up is not the load measured
	idle := waitSample(t, ctx, m, id, every, "an idle CPU", func(s core.SandboxMetrics) bool { return s.CPUUsedCores < 0.2 && s.Pids > 0 })
	if idle.CPULimitCores != 1 || idle.MemoryLimitBytes != 512<<20 || idle.PidsLimit != res.Sandbox.Limits.PidsLimit {
		t.Errorf("limits in a sample: cpu %v, memory %d, pids %d; want 1, %d, %d", idle.CPULimitCores, idle.MemoryLimitBytes, idle.PidsLimit, 512<<20, res.Sandbox.Limits.PidsLimit)
	}
	if !m.cfg.NoDiskLimit && (idle.Workspace.LimitBytes <= 0 || idle.IO.LimitBytes <= 0 || idle.IO.UsedBytes <= 0) {
		t.Errorf("disk in a sample: workspace %+v, io %+v; want the volumes' sizes and /io in use", idle.Workspace, idle.IO)
	}
	if idle.Network != nil {
		t.Errorf("a sandbox without network has network bytes: %+v", idle.Network)
	}

	// The hog: 200 MB held, then a busy loop, until interrupted.
	cmd, err := m.Submit(ctx, core.ExecRequest{SandboxID: id, Code: "hog = b'x' * (200 << 20)\nwhile True: pass", Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	busy := waitSample(t, ctx, m, id, every, "the busy loop and the hog", func(s core.SandboxMetrics) bool {
		return s.CPUUsedCores > 0.5 && s.MemoryUsedBytes > idle.MemoryUsedBytes+180<<20
	})
	if busy.CPUUsedCores > 1.2 || busy.CPUUsedPercent() < 50 {
		t.Errorf("busy: %.2f cores, %.0f%% of the limit; want about one core, the limit", busy.CPUUsedCores, busy.CPUUsedPercent())
	}
	if err := m.Interrupt(ctx, id, cmd); err != nil {
		t.Fatal(err)
	}
	if err := m.Follow(ctx, id, cmd, 0, func(core.Event) error { return nil }); err != nil {
		t.Fatal(err)
	}
	mustRunOK(t, m, id, "python", "del hog")
	calm := waitSample(t, ctx, m, id, every, "calm again", func(s core.SandboxMetrics) bool {
		return s.CPUUsedCores < 0.2 && s.MemoryUsedBytes < idle.MemoryUsedBytes+60<<20
	})
	t.Logf("idle %.2f cores %d MiB; busy %.2f cores %d MiB; calm %.2f cores %d MiB", idle.CPUUsedCores, idle.MemoryUsedBytes>>20,
		busy.CPUUsedCores, busy.MemoryUsedBytes>>20, calm.CPUUsedCores, calm.MemoryUsedBytes>>20)

	newer, err := m.SandboxMetrics(ctx, id, calm.Time)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range newer {
		if !s.Time.After(calm.Time) {
			t.Errorf("since %v returned a sample of %v", calm.Time, s.Time)
		}
	}
	_, err = m.SandboxMetrics(as(t, "beta", false), id, time.Time{})
	wantClass(t, err, core.ErrNotFound, id)

	if _, err := m.Hibernate(ctx, id); err != nil {
		t.Fatal(err)
	}
	// The sampler freezes the ring at its next round; then one sample is
	// left, and it stays one.
	deadline := time.Now().Add(time.Minute)
	for {
		ss, err := m.SandboxMetrics(ctx, id, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if len(ss) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hibernated sandbox keeps %d samples", len(ss))
		}
		time.Sleep(every)
	}
}
