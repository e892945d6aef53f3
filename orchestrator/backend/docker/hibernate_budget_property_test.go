package docker

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// The snapshot budget's guarantees, checked on random sequences of
// hibernations (and wakes) under random bounds: planEvictions after each
// hibernation, as enforceSnapshotBudget runs it, with the plan carried out.
// The seeds are fixed, so a failure is reproduced by its seed.

// budgetStep is one event of a sequence: a hibernation (a new snapshot),
// or a wake (a held snapshot leaves the budget).
type budgetStep struct {
	wake   bool
	tenant string
	bytes  int64
	// pinned: some held snapshots are being woken (their users' locks
	// are busy) while this hibernation's plan is carried out.
	pinned bool
	// lim, when set, are the bounds from this step on (sandboxd restarted
	// with other flags: held snapshots may be over them).
	lim *snapshotLimits
}

// checkPlan reports the first guarantee that evs, the evictions carried
// out among s under lim (a pinned one's user's lock being busy), breaks:
//
//   - it drops no pinned snapshot, and none twice;
//   - an oversized snapshot (larger than lim.ceiling()) that is not pinned
//     is dropped, as too-large, and takes nothing with it: the rest of the
//     evictions are those plan makes without it;
//   - a tenant loses a snapshot for its share only while it is over
//     lim.perTenant, and for the budget only while all are over lim.total
//     and it is over its fair share (lim.total divided among the tenants
//     then holding snapshots), holding the most of those that can give
//     (of equals, the one with the older snapshot); either way it loses
//     its oldest droppable;
//   - when the plan ends, all are within the bounds, or the tenant that
//     would give next has only pinned snapshots left.
func checkPlan(s []heldSnapshot, lim snapshotLimits, evs []eviction, plan func([]heldSnapshot) []eviction) error {
	ceiling := lim.ceiling()
	seen := make([]bool, len(s))
	usage := map[string]int64{}
	var total int64
	for _, x := range s {
		usage[x.tenant] += x.bytes
		total += x.bytes
	}
	oversized := func(i int) bool { return ceiling > 0 && s[i].bytes > ceiling && !s[i].pinned }
	// The plan without the oversized snapshots must be the rest of this one.
	var rest []heldSnapshot
	var restIdx []int
	for i := range s {
		if !oversized(i) {
			rest, restIdx = append(rest, s[i]), append(restIdx, i)
		}
	}
	var want []string
	if len(rest) < len(s) {
		for _, ev := range plan(rest) {
			want = append(want, s[restIdx[ev.i]].id)
		}
	}
	var got []string
	holders := func() int {
		n := 0
		for _, u := range usage {
			if u > 0 {
				n++
			}
		}
		return n
	}
	oldestOf := func(tenant string) int {
		best := -1
		for i, x := range s {
			if x.tenant == tenant && !seen[i] && !x.pinned && (best < 0 || olderFirst(s, i, best)) {
				best = i
			}
		}
		return best
	}
	for k, ev := range evs {
		x := s[ev.i]
		switch {
		case seen[ev.i]:
			return fmt.Errorf("eviction %d: %s dropped twice", k, x.id)
		case x.pinned:
			return fmt.Errorf("eviction %d: %s is pinned", k, x.id)
		}
		switch ev.why {
		case evictTooLarge:
			if !oversized(ev.i) {
				return fmt.Errorf("eviction %d: %s (%d bytes) dropped as too large under a ceiling of %d", k, x.id, x.bytes, ceiling)
			}
		case evictTenantShare:
			if lim.perTenant <= 0 || usage[x.tenant] <= lim.perTenant {
				return fmt.Errorf("eviction %d: %s dropped for its tenant's share, but %s holds %d of %d", k, x.id, x.tenant, usage[x.tenant], lim.perTenant)
			}
		case evictBudget:
			if lim.total <= 0 || total <= lim.total {
				return fmt.Errorf("eviction %d: %s dropped for the budget, but all hold %d of %d", k, x.id, total, lim.total)
			}
			if share := lim.total / int64(holders()); usage[x.tenant] <= share {
				return fmt.Errorf("eviction %d: %s dropped for the budget, but %s holds %d, within its fair share %d (usage %v)", k, x.id, x.tenant, usage[x.tenant], share, usage)
			}
			for t, u := range usage {
				// The tenant holding the most gives; of equals, the one
				// with the older snapshot.
				if o := oldestOf(t); t != x.tenant && o >= 0 && (u > usage[x.tenant] || u == usage[x.tenant] && olderFirst(s, o, oldestOf(x.tenant))) {
					return fmt.Errorf("eviction %d: %s dropped for the budget before %s of %s (usage %v)", k, x.id, s[o].id, t, usage)
				}
			}
		default:
			return fmt.Errorf("eviction %d: %s with no reason", k, x.id)
		}
		if ev.why != evictTooLarge {
			if o := oldestOf(x.tenant); o != ev.i {
				return fmt.Errorf("eviction %d: %s dropped before %s, its tenant's oldest", k, x.id, s[o].id)
			}
			got = append(got, x.id)
		}
		seen[ev.i] = true
		usage[x.tenant] -= x.bytes
		total -= x.bytes
	}
	for i := range s {
		if oversized(i) && !seen[i] {
			return fmt.Errorf("%s (%d bytes, over the ceiling %d) is kept", s[i].id, s[i].bytes, ceiling)
		}
	}
	if len(rest) < len(s) && !slices.Equal(got, want) {
		return fmt.Errorf("an oversized snapshot changed the plan: %v; without it %v", got, want)
	}
	for t, u := range usage {
		if lim.perTenant > 0 && u > lim.perTenant && oldestOf(t) >= 0 {
			return fmt.Errorf("tenant %s holds %d, over its share %d, with snapshots left to drop", t, u, lim.perTenant)
		}
	}
	if lim.total > 0 && total > lim.total {
		for t, u := range usage {
			if u > lim.total/int64(holders()) && oldestOf(t) >= 0 {
				// Someone over its fair share could still give; the plan
				// stops only when the one to give has only pinned ones.
				top := ""
				for t2, u2 := range usage {
					if top == "" || u2 > usage[top] || u2 == usage[top] && t2 < top {
						top = t2
					}
				}
				if oldestOf(top) >= 0 {
					return fmt.Errorf("all hold %d, over %d, and %s could still give (usage %v)", total, lim.total, t, usage)
				}
			}
		}
	}
	return nil
}

// runBudgetSequence plays steps as the manager would: each hibernation
// adds a snapshot and carries out the plan (carryOutEvictions), a step's
// busy snapshots refusing to be dropped; each wake takes a held snapshot
// out. It checks every hibernation's evictions and returns the snapshots
// held at the end, and what happened ("hibernate ID:bytes", "  drop ID
// (reason)", "wake ID"), the IDs being the tenant and the step's index.
func runBudgetSequence(steps []budgetStep, lim snapshotLimits, wakeIdx func(n int) int) ([]heldSnapshot, []string, error) {
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var held []heldSnapshot
	var log []string
	for k, st := range steps {
		if st.lim != nil {
			lim = *st.lim
		}
		if st.wake {
			if len(held) > 0 {
				i := wakeIdx(len(held))
				log = append(log, "wake "+held[i].id)
				held = slices.Delete(held, i, i+1)
			}
			continue
		}
		id := fmt.Sprintf("%s%d", st.tenant, k)
		held = append(held, heldSnapshot{id: id, tenant: st.tenant, at: base.Add(time.Duration(k) * time.Second), bytes: st.bytes})
		log = append(log, fmt.Sprintf("hibernate %s:%d", id, st.bytes))
		// The busy ones: every third, when the step says so; never the
		// newcomer, whose user's lock the caller holds.
		busy := func(s heldSnapshot) bool { return st.pinned && s.id != id && s.at.Unix()%3 == 0 }
		carry := func(s []heldSnapshot) []eviction {
			return carryOutEvictions(s, lim, func(i int, _ evictReason) bool { return !busy(s[i]) })
		}
		evs := carry(held)
		seen := slices.Clone(held)
		for i := range seen {
			seen[i].pinned = busy(seen[i])
		}
		if err := checkPlan(seen, lim, evs, func(rest []heldSnapshot) []eviction {
			for i := range rest {
				rest[i].pinned = false
			}
			return carry(rest)
		}); err != nil {
			return held, log, fmt.Errorf("step %d: %v\n%s\nheld: %+v", k, err, strings.Join(log, "\n"), seen)
		}
		drop := make([]bool, len(held))
		for _, ev := range evs {
			drop[ev.i] = true
			log = append(log, fmt.Sprintf("  drop %s (%v)", held[ev.i].id, ev.why))
		}
		kept := held[:0:0]
		for i, x := range held {
			if !drop[i] {
				kept = append(kept, x)
			}
		}
		held = kept
	}
	return held, log, nil
}

// TestPlanEvictionsProperties: random sequences, fixed seeds.
func TestPlanEvictionsProperties(t *testing.T) {
	const sequences, length = 400, 40
	for seed := uint64(1); seed <= sequences; seed++ {
		r := rand.New(rand.NewPCG(seed, 45))
		lim := snapshotLimits{total: int64(r.IntN(4)) * 32 * mib}
		if r.IntN(3) == 0 {
			lim.perTenant = int64(1+r.IntN(6)) * 8 * mib
		}
		if lim.ceiling() == 0 {
			lim.total = 64 * mib
		}
		first := lim
		tenants := []string{"a", "b", "c", "d"}[:1+r.IntN(4)]
		steps := make([]budgetStep, length)
		for k := range steps {
			st := budgetStep{tenant: tenants[r.IntN(len(tenants))], wake: r.IntN(6) == 0, pinned: r.IntN(5) == 0}
			if r.IntN(20) == 0 { // a restart with a smaller budget
				lower := snapshotLimits{total: lim.total / 2, perTenant: lim.perTenant / 2}
				if lower.ceiling() > 0 {
					st.lim, lim = &lower, lower
				}
			}
			switch r.IntN(10) {
			case 0: // oversized, or near the bound
				st.bytes = lim.ceiling() + int64(r.IntN(3)-1)*int64(1+r.IntN(mib))
			case 1: // sizes that tie
				st.bytes = 16 * mib
			default:
				st.bytes = 1 + r.Int64N(lim.ceiling())
			}
			steps[k] = st
		}
		if _, _, err := runBudgetSequence(steps, first, func(n int) int { return r.IntN(n) }); err != nil {
			t.Fatalf("seed %d, limits %+v: %v", seed, first, err)
		}
	}
}

// TestPlanEvictionsBystanderSequence is issue 45's sequence under a 64 MiB
// budget: tenant A's H1 and tenant B's H2 hibernate with 40 MB of globals
// each, then A's H3 with 150 MB, over the budget on its own. H3 is dropped
// alone and takes nothing with it. The two 40 MB snapshots do not fit
// together (80 MB > 64 MiB), so one of them goes at H2's hibernation,
// before H3 exists: both tenants are over their fair share (32 MiB), and
// the one holding more gives (equal: the older snapshot, A's H1).
func TestPlanEvictionsBystanderSequence(t *testing.T) {
	lim := snapshotLimits{total: 64 * mib}
	seq := func(h1, h2, h3 int64) []budgetStep {
		return []budgetStep{{tenant: "a", bytes: h1}, {tenant: "b", bytes: h2}, {tenant: "a", bytes: h3}}
	}
	cases := []struct {
		name  string
		steps []budgetStep
		trace []string
		kept  []string
	}{
		{"equal globals: the older H1 goes at H2, H3 alone", seq(40_000_079, 40_000_079, 150_000_079),
			[]string{"hibernate a0:40000079", "hibernate b1:40000079", "  drop a0 (budget)", "hibernate a2:150000079", "  drop a2 (too-large)"},
			[]string{"b1"}},
		// One more byte in B's pickle (a longer name) and B holds the
		// most when H2 hibernates: H2 goes then, still not at H3's.
		{"B's a byte larger: H2 goes at H2, H3 alone", seq(40_000_079, 40_000_080, 150_000_079),
			[]string{"hibernate a0:40000079", "hibernate b1:40000080", "  drop b1 (budget)", "hibernate a2:150000079", "  drop a2 (too-large)"},
			[]string{"a0"}},
		{"H1 and H2 fit: H3 alone, both kept", seq(30_000_000, 30_000_000, 150_000_000),
			[]string{"hibernate a0:30000000", "hibernate b1:30000000", "hibernate a2:150000000", "  drop a2 (too-large)"},
			[]string{"a0", "b1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			held, trace, err := runBudgetSequence(c.steps, lim, nil)
			if err != nil {
				t.Fatal(err)
			}
			var kept []string
			for _, h := range held {
				kept = append(kept, h.id)
			}
			if !slices.Equal(trace, c.trace) || !slices.Equal(kept, c.kept) {
				t.Errorf("trace %q, kept %v; want %q, %v", trace, kept, c.trace, c.kept)
			}
		})
	}
}
