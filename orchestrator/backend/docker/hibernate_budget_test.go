package docker

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// The snapshot budget's policy, without Docker: planEvictions.

const mib = 1 << 20

// snaps builds held snapshots from "tenant/id:MiB" items, the oldest
// first; an item ending in "!" is pinned.
func snaps(items ...string) []heldSnapshot {
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	out := make([]heldSnapshot, 0, len(items))
	for i, it := range items {
		pinned := strings.HasSuffix(it, "!")
		it = strings.TrimSuffix(it, "!")
		who, size, _ := strings.Cut(it, ":")
		tenant, id, _ := strings.Cut(who, "/")
		var n int64
		fmt.Sscan(size, &n)
		out = append(out, heldSnapshot{id: id, tenant: tenant, at: base.Add(time.Duration(i) * time.Minute), bytes: n * mib, pinned: pinned})
	}
	return out
}

// evicted names the snapshots planEvictions drops, in order, as "id" or,
// with reasons, "id(reason)".
func evicted(s []heldSnapshot, lim snapshotLimits, reasons bool) []string {
	var out []string
	for _, ev := range planEvictions(s, lim) {
		if reasons {
			out = append(out, fmt.Sprintf("%s(%v)", s[ev.i].id, ev.why))
		} else {
			out = append(out, s[ev.i].id)
		}
	}
	return out
}

// TestPlanEvictionsBudget: the budget alone (--snapshot-disk-budget).
func TestPlanEvictionsBudget(t *testing.T) {
	cases := []struct {
		name  string
		snaps []heldSnapshot
		want  []string
	}{
		{"within the budget: nothing", snaps("b/b1:40", "a/a1:24"), nil},
		// Issue 22: tenant B hibernates 40 MB of globals, then tenant A
		// 150 MB, more than the whole budget. A's cannot be kept whatever
		// is dropped: it goes alone, and B's stays.
		{"one larger than the budget is dropped alone", snaps("b/b1:40", "a/a1:150"), []string{"a1"}},
		{"one larger than the budget, however old", snaps("c/c1:100", "b/b1:10", "a/a1:30"), []string{"c1"}},
		{"one tenant: its oldest first", snaps("a/a1:30", "a/a2:30", "a/a3:30"), []string{"a1"}},
		// X holds 70 of 80 against a fair share of 32: its oldest goes,
		// though Y's is older, and then all fit.
		{"the tenant holding the most gives first", snaps("y/y1:10", "x/x1:40", "x/x2:30"), []string{"x1"}},
		{"the newcomer's tenant over its share loses its older one", snaps("x/x1:30", "y/y1:20", "x/x2:30"), []string{"x1"}},
		// Each of four tenants holds 15 (fair share 12.8); the newcomer's
		// tenant holds 30: it is the one furthest over its share.
		{"the newcomer is not spared when its tenant takes the most", snaps("b/b1:15", "c/c1:15", "d/d1:15", "e/e1:15", "a/a1:30"), []string{"a1"}},
		{"the newest snapshot of the largest tenant goes after its older ones", snaps("x/x1:20", "x/x2:20", "y/y1:10", "x/x3:20"), []string{"x1"}},
		{"tenants holding the same: the older snapshot goes", snaps("x/x1:32", "y/y1:32", "z/z1:10"), []string{"x1"}},
		{"the largest tenant's oldest is pinned: its next oldest goes", snaps("x/x1:30!", "x/x2:30", "y/y1:20"), []string{"x2"}},
		{"the largest tenant's are all pinned: no other tenant pays", snaps("x/x1:50!", "y/y1:20"), nil},
		{"exactly the budget: nothing", snaps("x/x1:32", "y/y1:32"), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := evicted(c.snaps, snapshotLimits{total: 64 * mib}, false); !slices.Equal(got, c.want) {
				t.Errorf("evicted %v; want %v", got, c.want)
			}
		})
	}
}

// TestPlanEvictionsTenantShare: with --snapshot-disk-budget-per-tenant.
func TestPlanEvictionsTenantShare(t *testing.T) {
	cases := []struct {
		name  string
		lim   snapshotLimits
		snaps []heldSnapshot
		want  []string
	}{
		{"a tenant over its share loses its oldest; others untouched", snapshotLimits{perTenant: 32 * mib},
			snaps("x/x1:20", "y/y1:30", "x/x2:20"), []string{"x1(tenant-share)"}},
		{"one larger than the share is dropped alone", snapshotLimits{total: 64 * mib, perTenant: 32 * mib},
			snaps("y/y1:30", "z/z1:30", "x/x1:40"), []string{"x1(too-large)"}},
		{"within their shares, over the budget: the largest gives first", snapshotLimits{total: 64 * mib, perTenant: 32 * mib},
			snaps("x/x1:16", "x/x2:16", "y/y1:30", "z/z1:20"), []string{"x1(budget)", "y1(budget)"}},
		{"a share larger than the budget: the budget bounds one snapshot", snapshotLimits{total: 64 * mib, perTenant: 100 * mib},
			snaps("y/y1:10", "x/x1:80"), []string{"x1(too-large)"}},
		{"no bound: nothing", snapshotLimits{}, snaps("x/x1:1000", "y/y1:1000"), nil},
		{"the issue's scenario, with reasons", snapshotLimits{total: 64 * mib},
			snaps("b/b1:40", "a/a1:150"), []string{"a1(too-large)"}},
		{"over the budget, with reasons", snapshotLimits{total: 64 * mib},
			snaps("y/y1:10", "x/x1:40", "x/x2:30"), []string{"x1(budget)"}},
		{"one of exactly the budget can be kept: it goes as the largest, not as too large", snapshotLimits{total: 64 * mib},
			snaps("y/y1:10", "x/x1:64"), []string{"x1(budget)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := evicted(c.snaps, c.lim, true); !slices.Equal(got, c.want) {
				t.Errorf("evicted %v; want %v", got, c.want)
			}
		})
	}
}
