package docker

import (
	"context"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// TestIntegrationSnapshotBudgetTenants is issue 22's scenario at a small
// size, with real containers: under an 8 MiB budget, tenant B hibernates a
// sandbox with 3 MB of globals, then tenant A one with 12 MB, more than the
// whole budget. A's snapshot is dropped alone (A wakes at level files and
// says why); B's is kept and B wakes with its globals. (Before, B's was
// dropped first, and then A's all the same: nothing was kept.)
func TestIntegrationSnapshotBudgetTenants(t *testing.T) {
	const budget = 8 << 20
	m, _, _ := integrationManager(t, func(c *Config) { c.SnapshotDiskBudget = budget })
	ctxA, ctxB := as(t, "tenant-a", false), as(t, "tenant-b", false)
	setUp := func(ctx context.Context, user, code string) string {
		t.Helper()
		res, err := m.Acquire(ctx, user, core.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if d := lastDone(t, runCommand(t, m, res.Sandbox.ID, core.ExecRequest{CommandID: "set", Code: code})); d.Status != "ok" {
			t.Fatalf("%s: %+v", code, d)
		}
		return res.Sandbox.ID
	}

	b := setUp(ctxB, "bob", "x = bytes(3_000_000)")
	hb, err := m.Hibernate(ctxB, b)
	if err != nil {
		t.Fatal(err)
	}
	if s := hb.Snapshot; s == nil || s.Level != ioproto.LevelGlobals || s.Bytes < 3_000_000 || s.Bytes > budget {
		t.Fatalf("B's snapshot %+v; want level globals, about 3 MB", s)
	}

	a := setUp(ctxA, "alice", "y = bytes(12_000_000)")
	ha, err := m.Hibernate(ctxA, a)
	if err != nil {
		t.Fatal(err)
	}
	gb, err := m.Get(ctxB, b)
	if err != nil {
		t.Fatal(err)
	}
	if s := gb.Snapshot; s == nil || s.Level != ioproto.LevelGlobals {
		t.Fatalf("B's snapshot after A's hibernation: %+v; want it kept at level globals", s)
	}
	if s := ha.Snapshot; s == nil || s.Level != ioproto.LevelFiles || !strings.Contains(s.Reason, "alone is larger") || !strings.Contains(s.Reason, "--snapshot-disk-budget") {
		t.Fatalf("A's snapshot %+v; want level files, dropped as larger than the budget", s)
	}

	_, wb, err := m.Wake(ctxB, b)
	if err != nil {
		t.Fatal(err)
	}
	if wb == nil || wb.Level != ioproto.LevelGlobals {
		t.Fatalf("B's wake %+v; want level globals", wb)
	}
	var out string
	for _, e := range runCommand(t, m, b, core.ExecRequest{CommandID: "get", Code: "print(len(x))"}) {
		if e.Type == "stdout" {
			out += e.Text
		}
	}
	if out != "3000000\n" {
		t.Errorf("B's x after the wake: %q", out)
	}

	_, wa, err := m.Wake(ctxA, a)
	if err != nil {
		t.Fatal(err)
	}
	if wa == nil || wa.Level != ioproto.LevelFiles || !strings.Contains(wa.Reason, "snapshot of the globals was dropped") {
		t.Fatalf("A's wake %+v; want level files, saying its snapshot was dropped", wa)
	}
	t.Logf("A's wake: %s", wa.Reason)
}

// TestIntegrationWakeCountsAgainstTheTenantCap: a hibernated sandbox runs
// no container and counts against no cap, but waking it does, as a new
// sandbox would: a tenant at its cap cannot pass it by waking one (it
// could: only the server's cap was checked), and the sandbox stays
// hibernated, saying which cap refused it.
func TestIntegrationWakeCountsAgainstTheTenantCap(t *testing.T) {
	m, _, _ := integrationManager(t, func(c *Config) { c.MaxSandboxesPerTenant = 2 })
	acme := as(t, "acme", false)
	acquired := func(user string) string {
		t.Helper()
		res, err := m.Acquire(acme, user, core.Options{})
		if err != nil {
			t.Fatalf("Acquire(%s): %v", user, err)
		}
		return res.Sandbox.ID
	}
	first := acquired("a1")
	if _, err := m.Hibernate(acme, first); err != nil {
		t.Fatal(err)
	}
	acquired("a2")
	acquired("a3") // two running: the tenant's cap
	_, _, err := m.Wake(acme, first)
	wantClass(t, err, core.ErrResourceExhausted, "stays hibernated: tenant acme runs its maximum of 2 sandboxes (sandboxd --max-sandboxes-per-tenant)")
	if sb, err := m.Get(acme, first); err != nil || sb.State != core.StateHibernated {
		t.Fatalf("after the refused wake: %+v, %v; want it hibernated", sb, err)
	}
}
