package core

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestSnapshotNamed: a name means the only snapshot of it the caller
// sees, else the caller's tenant's; several other tenants' are ambiguous.
func TestSnapshotNamed(t *testing.T) {
	admin := Caller{Tenant: "ops", Admin: true}
	a, b, own := Snapshot{ID: "a", Tenant: "acme"}, Snapshot{ID: "b", Tenant: "beta"}, Snapshot{ID: "o", Tenant: "ops"}
	for _, tc := range []struct {
		found []Snapshot
		want  string // the ID picked, or the error's class
	}{
		{nil, "not found"},
		{[]Snapshot{a}, "a"},
		{[]Snapshot{a, own, b}, "o"},
		{[]Snapshot{a, b}, "invalid"},
	} {
		i, err := SnapshotNamed(admin, "n", tc.found)
		got := ""
		switch {
		case errors.Is(err, ErrNotFound):
			got = "not found"
		case errors.Is(err, ErrInvalidArgument):
			got = "invalid"
		case err == nil:
			got = tc.found[i].ID
		}
		if got != tc.want {
			t.Errorf("SnapshotNamed(%v) = %d, %v; want %s", tc.found, i, err, tc.want)
		}
	}
}

// TestForkEach: one result per fork, in order, users given or generated
// (distinct), and never more than ForkParallel at once.
func TestForkEach(t *testing.T) {
	var mu sync.Mutex
	running, most := 0, 0
	start := func(user string) ForkResult {
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		time.Sleep(time.Millisecond) // overlap, not synchronisation: the bound is checked either way
		mu.Lock()
		running--
		mu.Unlock()
		return ForkResult{Sandbox: Sandbox{UserID: user}}
	}
	res := ForkEach(ForkRequest{Count: 3, UserIDs: []string{"u1", "u2", "u3"}}, start)
	if len(res) != 3 || res[0].Sandbox.UserID != "u1" || res[2].Sandbox.UserID != "u3" {
		t.Fatalf("results %+v; want u1..u3 in order", res)
	}
	res = ForkEach(ForkRequest{Count: 12}, start)
	seen := map[string]bool{}
	for _, r := range res {
		if !strings.HasPrefix(r.Sandbox.UserID, "fork-") || seen[r.Sandbox.UserID] {
			t.Fatalf("generated user %q: want distinct fork- users", r.Sandbox.UserID)
		}
		seen[r.Sandbox.UserID] = true
	}
	if len(res) != 12 || most > ForkParallel {
		t.Fatalf("%d results, at most %d at once; want 12, at most %d", len(res), most, ForkParallel)
	}
}

// TestSnapshotBudgetCheck: the tenant's share is checked first, then the
// server's; zero bounds nothing.
func TestSnapshotBudgetCheck(t *testing.T) {
	b := SnapshotBudget{All: 100, PerTenant: 40}
	for _, tc := range []struct {
		all, ofTenant, adding int64
		flag                  string // "" if allowed
	}{
		{0, 0, 40, ""},
		{50, 30, 11, "--snapshot-disk-budget-per-tenant"},
		{90, 0, 11, "--snapshot-disk-budget)"},
		{90, 0, 10, ""},
	} {
		err := b.Check("acme", tc.all, tc.ofTenant, tc.adding)
		if (tc.flag == "") != (err == nil) || (err != nil && (!errors.Is(err, ErrResourceExhausted) || !strings.Contains(err.Error(), tc.flag))) {
			t.Errorf("Check(%d, %d, %d) = %v; want %q", tc.all, tc.ofTenant, tc.adding, err, tc.flag)
		}
	}
	if err := (SnapshotBudget{}).Check("acme", 1<<40, 1<<40, 1<<40); err != nil {
		t.Errorf("no budget: %v", err)
	}
}
