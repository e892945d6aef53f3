package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
)

// TestTop: --once prints one table of every sandbox's newest sample (a
// sandbox without samples shows dashes, network only for a networked
// one); with an ID, that sandbox alone; an unknown ID fails.
func TestTop(t *testing.T) {
	const sbA, sbB = "sb-aaaaaaaaaaaaaaaaaaaa", "sb-bbbbbbbbbbbbbbbbbbbb"
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	sandboxes := map[string]core.Sandbox{
		sbA: {ID: sbA, Tenant: "acme", UserID: "alice", State: core.StateRunning, CreatedAt: t0},
		sbB: {ID: sbB, Tenant: "beta", UserID: "bob", State: core.StateHibernated, CreatedAt: t0.Add(time.Second)},
	}
	pm := &coretest.Manager{
		ListFunc: func(context.Context, core.ListFilter) ([]core.Sandbox, error) {
			return []core.Sandbox{sandboxes[sbA], sandboxes[sbB]}, nil
		},
		GetFunc: func(_ context.Context, id string) (core.Sandbox, error) {
			if sb, ok := sandboxes[id]; ok {
				return sb, nil
			}
			return core.Sandbox{}, core.SandboxNotFound(id)
		},
		SandboxMetricsFunc: func(_ context.Context, id string, _ time.Time) ([]core.SandboxMetrics, error) {
			if id != sbA {
				return nil, nil
			}
			return []core.SandboxMetrics{
				{Time: t0, CPUUsedCores: 0.1, CPULimitCores: 1},
				{Time: t0.Add(5 * time.Second), CPUUsedCores: 0.5, CPULimitCores: 1, MemoryUsedBytes: 200 << 20, MemoryLimitBytes: 512 << 20,
					Workspace: core.DiskUsage{UsedBytes: 1 << 20, LimitBytes: 1 << 30}, Pids: 12, Network: &core.NetworkBytes{In: 2048, Out: 10}},
			}, nil
		},
	}
	addr := startServerWith(t, pm)

	r := runCLI(t, nil, addr, "", "top", "--once")
	if r.code != exitOK {
		t.Fatalf("top --once: exit %d, stderr %q", r.code, r.stderr)
	}
	want := `SANDBOX_ID               TENANT  USER   STATE       CPU         MEMORY             DISK           PIDS  NET_IN/OUT
sb-aaaaaaaaaaaaaaaaaaaa  acme    alice  running     50.0% of 1  200.0MiB/512.0MiB  1.0MiB/1.0GiB  12    2.0KiB/10B
sb-bbbbbbbbbbbbbbbbbbbb  beta    bob    hibernated  -           -                  -              -     -
`
	if r.stdout != want {
		t.Errorf("top printed:\n%s\nwant:\n%s", r.stdout, want)
	}
	if r := runCLI(t, nil, addr, "", "top", sbA, "--once"); r.code != exitOK || strings.Count(r.stdout, "\n") != 2 || !strings.Contains(r.stdout, sbA) {
		t.Errorf("top %s --once: exit %d, stdout %q", sbA, r.code, r.stdout)
	}
	if r := runCLI(t, nil, addr, "", "top", "sb-zzzzzzzzzzzzzzzzzzzz", "--once"); r.code == exitOK || !strings.Contains(r.stderr, "not found") {
		t.Errorf("top of an unknown sandbox: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := runCLI(t, nil, addr, "", "top", sbA, sbB); r.code != exitUsage {
		t.Errorf("top with two IDs: exit %d", r.code)
	}
}
