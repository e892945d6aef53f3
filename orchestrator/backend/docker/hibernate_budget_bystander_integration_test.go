package docker

import (
	"context"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// TestIntegrationSnapshotBudgetBystander is issue 45's sequence with real
// containers, under a 64 MiB budget: tenant A's H1 and tenant B's H2
// hibernate with 40 MB of globals each, then A's H3 with 150 MB, over the
// budget on its own. H3 is dropped alone: nothing another sandbox held
// before H3's hibernation changes. The two 40 MB snapshots do not fit
// together, so one goes at H2's hibernation, before H3 exists: the same
// globals pickle to the same bytes, and on a tie the older goes (A's H1),
// so B keeps H2 and wakes with it.
func TestIntegrationSnapshotBudgetBystander(t *testing.T) {
	const budget = 64 << 20
	m, _, _ := integrationManager(t, func(c *Config) { c.SnapshotDiskBudget = budget })
	ctxA, ctxB := as(t, "tenant-a", false), as(t, "tenant-b", false)
	hibernate := func(ctx context.Context, user, code string) string {
		t.Helper()
		res, err := m.Acquire(ctx, user, core.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if d := lastDone(t, runCommand(t, m, res.Sandbox.ID, core.ExecRequest{CommandID: "set", Code: code})); d.Status != "ok" {
			t.Fatalf("%s: %+v", code, d)
		}
		if _, err := m.Hibernate(ctx, res.Sandbox.ID); err != nil {
			t.Fatal(err)
		}
		return res.Sandbox.ID
	}
	snapshotOf := func(ctx context.Context, id string) core.SnapshotInfo {
		t.Helper()
		sb, err := m.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State != core.StateHibernated || sb.Snapshot == nil {
			t.Fatalf("%s: %s, snapshot %+v; want hibernated with a snapshot", id, sb.State, sb.Snapshot)
		}
		return *sb.Snapshot
	}

	h1 := hibernate(ctxA, "h1", "x = bytes(40_000_000)")
	s1 := snapshotOf(ctxA, h1)
	if s1.Level != ioproto.LevelGlobals || s1.Bytes < 40_000_000 || s1.Bytes > budget {
		t.Fatalf("H1's snapshot %+v; want level globals, about 40 MB", s1)
	}
	h2 := hibernate(ctxB, "h2", "x = bytes(40_000_000)")
	s1, s2 := snapshotOf(ctxA, h1), snapshotOf(ctxB, h2)
	t.Logf("after H2: H1 %+v; H2 %+v", s1, s2)
	if s1.Level != ioproto.LevelFiles || !strings.Contains(s1.Reason, "exceeded sandboxd --snapshot-disk-budget") {
		t.Fatalf("H1's snapshot after H2's hibernation: %+v; want dropped for the budget (80 MB > 64 MiB, a tie: the older goes)", s1)
	}
	if s2.Level != ioproto.LevelGlobals {
		t.Fatalf("H2's snapshot after its hibernation: %+v; want it kept", s2)
	}

	h3 := hibernate(ctxA, "h3", "x = bytes(150_000_000)")
	if s3 := snapshotOf(ctxA, h3); s3.Level != ioproto.LevelFiles || !strings.Contains(s3.Reason, "alone is larger than all snapshots may take (sandboxd --snapshot-disk-budget") {
		t.Fatalf("H3's snapshot %+v; want level files, dropped alone as larger than the budget", s3)
	}
	// H3 took nothing: the others are as they were before it.
	if got := snapshotOf(ctxA, h1); got != s1 {
		t.Errorf("H1 after H3's hibernation: %+v; before it %+v", got, s1)
	}
	if got := snapshotOf(ctxB, h2); got != s2 {
		t.Errorf("H2 after H3's hibernation: %+v; before it %+v", got, s2)
	}

	_, w2, err := m.Wake(ctxB, h2)
	if err != nil {
		t.Fatal(err)
	}
	if w2 == nil || w2.Level != ioproto.LevelGlobals {
		t.Fatalf("H2's wake %+v; want level globals", w2)
	}
	var out string
	for _, e := range runCommand(t, m, h2, core.ExecRequest{CommandID: "get", Code: "print(len(x))"}) {
		if e.Type == "stdout" {
			out += e.Text
		}
	}
	if out != "40000000\n" {
		t.Errorf("H2's x after the wake: %q", out)
	}
}
