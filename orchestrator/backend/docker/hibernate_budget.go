package docker

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// The snapshot budget. The snapshots of hibernated sandboxes' globals take
// the host's disk (each on its sandbox's /io volume); two bounds, both
// optional, keep them within what the operator gives:
//
//	Config.SnapshotDiskBudget           all snapshots together
//	Config.SnapshotDiskBudgetPerTenant  one tenant's snapshots together
//
// After each hibernation, planEvictions chooses which snapshots to drop
// (their sandboxes keep their files and wake at level files, and say why):
//
//  1. A snapshot larger than the smaller bound (what its tenant could ever
//     be given) is dropped first, alone: no other snapshot, of its tenant
//     or another, is dropped to make room for one that cannot fit.
//  2. A tenant over its share (the per-tenant bound) loses its oldest
//     snapshots until it is within it; other tenants are not touched.
//  3. While all snapshots exceed the budget, the tenant furthest over its
//     fair share (the budget divided equally among the tenants holding
//     snapshots), which is the tenant whose snapshots take the most, loses
//     its oldest snapshot; ties go to the tenant with the older snapshot.
//     A tenant under its fair share loses nothing while one is over it.
//
// The sandbox that has just hibernated has the newest snapshot of its
// tenant: within its tenant it goes last, but it is not spared when its
// tenant is the one over its share. A snapshot whose user's lock is busy
// (a wake in progress) is pinned: counted, never dropped; if the tenant to
// lose one has only pinned snapshots, nothing more is dropped, and the
// budget may stay exceeded until the next hibernation.

// heldSnapshot is a hibernated sandbox's snapshot of its globals, as the
// budget sees it.
type heldSnapshot struct {
	id     string // the sandbox's
	tenant string
	at     time.Time // when the sandbox hibernated
	bytes  int64
	// pinned: it cannot be dropped now (its user's lock is busy: a wake in
	// progress); it counts, and is never chosen.
	pinned bool
}

// snapshotLimits are the budget's bounds; 0 = none.
type snapshotLimits struct {
	total     int64 // Config.SnapshotDiskBudget
	perTenant int64 // Config.SnapshotDiskBudgetPerTenant
}

// ceiling is the most one snapshot could ever be given: the smaller
// bound (0 = no bound).
func (l snapshotLimits) ceiling() int64 {
	switch {
	case l.total <= 0:
		return max(l.perTenant, 0)
	case l.perTenant <= 0:
		return l.total
	}
	return min(l.total, l.perTenant)
}

// evictReason says why a snapshot is dropped (the steps above).
type evictReason int

const (
	evictTooLarge    evictReason = iota + 1 // larger than its tenant could ever be given
	evictTenantShare                        // its tenant's snapshots exceed the per-tenant bound
	evictBudget                             // all exceed the budget, and its tenant's take the most
)

var evictReasonNames = [...]string{"", "too-large", "tenant-share", "budget"}

func (r evictReason) String() string { return evictReasonNames[r] }

// eviction is a snapshot to drop: snaps[i] of planEvictions.
type eviction struct {
	i   int
	why evictReason
}

// planEvictions returns the snapshots to drop, in order, so that snaps
// keep within lim (see above). It reads nothing but its arguments.
func planEvictions(snaps []heldSnapshot, lim snapshotLimits) []eviction {
	ceiling := lim.ceiling()
	if ceiling == 0 {
		return nil
	}
	// Oldest first; the sandbox ID orders snapshots of the same instant.
	order := make([]int, len(snaps))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Or(snaps[a].at.Compare(snaps[b].at), cmp.Compare(snaps[a].id, snaps[b].id))
	})
	dropped := make([]bool, len(snaps))
	usage := make(map[string]int64) // by tenant
	var total int64
	var out []eviction
	drop := func(i int, why evictReason) {
		dropped[i] = true
		usage[snaps[i].tenant] -= snaps[i].bytes
		total -= snaps[i].bytes
		out = append(out, eviction{i, why})
	}
	// oldest is the tenant's oldest snapshot that may be dropped, or -1.
	oldest := func(tenant string) int {
		for _, i := range order {
			if !dropped[i] && !snaps[i].pinned && snaps[i].tenant == tenant {
				return i
			}
		}
		return -1
	}
	for _, s := range snaps {
		usage[s.tenant] += s.bytes
		total += s.bytes
	}
	tenants := slices.Sorted(maps.Keys(usage))

	// 1. What could never be kept goes first, alone.
	for _, i := range order {
		if snaps[i].bytes > ceiling && !snaps[i].pinned {
			drop(i, evictTooLarge)
		}
	}
	// 2. Each tenant within its share, at its own expense.
	if lim.perTenant > 0 {
		for _, t := range tenants {
			for usage[t] > lim.perTenant {
				i := oldest(t)
				if i < 0 {
					break
				}
				drop(i, evictTenantShare)
			}
		}
	}
	// 3. All within the budget: the tenant holding the most gives first.
	for lim.total > 0 && total > lim.total {
		victim := ""
		for _, t := range tenants {
			if usage[t] <= 0 {
				continue
			}
			if victim == "" || usage[t] > usage[victim] ||
				usage[t] == usage[victim] && olderFirst(snaps, oldest(t), oldest(victim)) {
				victim = t
			}
		}
		i := oldest(victim)
		if i < 0 {
			break // its snapshots are pinned: left for the next hibernation
		}
		drop(i, evictBudget)
	}
	return out
}

// olderFirst reports whether snapshot a (an index of snaps, or -1 for
// none) goes before b: the older, and any before none.
func olderFirst(snaps []heldSnapshot, a, b int) bool {
	switch {
	case a < 0:
		return false
	case b < 0:
		return true
	}
	return cmp.Or(snaps[a].at.Compare(snaps[b].at), cmp.Compare(snaps[a].id, snaps[b].id)) < 0
}

// enforceSnapshotBudget drops hibernated sandboxes' snapshots of the
// globals as planEvictions says: dropping a snapshot, not a sandbox, keeps
// its user's files. self is the sandbox that has just hibernated, whose
// user's lock the caller holds. Another user's lock is only tried, for
// 100 ms, never waited on (so two hibernations cannot deadlock): a wake in
// progress holds it, and that snapshot is then pinned and the rest planned
// again.
func (m *Manager) enforceSnapshotBudget(self *sandbox) {
	lim := snapshotLimits{total: m.cfg.SnapshotDiskBudget, perTenant: m.cfg.SnapshotDiskBudgetPerTenant}
	if lim.ceiling() == 0 {
		return
	}
	var held []*sandbox
	var snaps []heldSnapshot
	for _, sb := range m.reg.all() {
		sb.mu.Lock()
		if sb.state == core.StateHibernated && sb.hib.Snapshot != nil && sb.hib.Snapshot.Level == ioproto.LevelGlobals {
			held = append(held, sb)
			snaps = append(snaps, heldSnapshot{id: sb.id, tenant: sb.tenant, at: sb.hib.HibernatedAt, bytes: sb.hib.Snapshot.Bytes})
		}
		sb.mu.Unlock()
	}
	carryOutEvictions(snaps, lim, func(i int, why evictReason) bool {
		return m.dropSnapshotOf(self, held[i], why)
	})
}

// carryOutEvictions drops, through drop, the snapshots planEvictions
// chooses among snaps, in order, and returns those dropped (indexes of
// snaps). drop reports false when it cannot drop one now (its user's lock
// is busy): that snapshot is then pinned and the rest planned again
// without what is gone. It is enforceSnapshotBudget's loop, apart so that
// its choices can be tested without Docker.
func carryOutEvictions(snaps []heldSnapshot, lim snapshotLimits, drop func(i int, why evictReason) bool) []eviction {
	snaps = slices.Clone(snaps)
	idx := make([]int, len(snaps)) // snaps[k] is the caller's idx[k]
	for k := range idx {
		idx[k] = k
	}
	var out []eviction
	for {
		evs := planEvictions(snaps, lim)
		pinned := -1
		dropped := make(map[int]bool)
		for _, ev := range evs {
			if !drop(idx[ev.i], ev.why) {
				pinned = ev.i
				break
			}
			dropped[ev.i] = true
			out = append(out, eviction{idx[ev.i], ev.why})
		}
		if pinned < 0 {
			return out
		}
		// Plan again without what is gone, the busy one pinned.
		snaps[pinned].pinned = true
		var keptIdx []int
		var keptSnaps []heldSnapshot
		for k := range snaps {
			if !dropped[k] {
				keptIdx, keptSnaps = append(keptIdx, idx[k]), append(keptSnaps, snaps[k])
			}
		}
		idx, snaps = keptIdx, keptSnaps
	}
}

// dropSnapshotOf drops sb's snapshot under its user's lock, which the
// caller holds for self's user and which is only tried briefly for
// another's; it reports false when that lock is busy.
func (m *Manager) dropSnapshotOf(self, sb *sandbox, why evictReason) bool {
	if sb.key() != self.key() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		unlock, err := m.userLocks.lock(ctx, sb.key().String())
		cancel()
		if err != nil {
			return false
		}
		defer unlock()
	}
	m.dropSnapshot(sb, why)
	return true
}

// dropSnapshot lowers a hibernated sandbox's snapshot to level files,
// with the reason its wake will report.
func (m *Manager) dropSnapshot(sb *sandbox, why evictReason) {
	sb.mu.Lock()
	if sb.state != core.StateHibernated || sb.hib.Snapshot == nil || sb.hib.Snapshot.Level != ioproto.LevelGlobals {
		sb.mu.Unlock()
		return
	}
	s := *sb.hib.Snapshot
	s.Reason = "the snapshot of the globals was dropped: " + m.evictionText(why, s.Bytes)
	s.Level, s.File, s.Bytes = ioproto.LevelFiles, "", 0
	sb.hib.Snapshot = &s
	sb.mu.Unlock()
	if err := sb.persist(true); err != nil {
		m.log.Error("persist sandbox metadata", "sandbox_id", sb.id, "error", err)
	}
	if err := m.snapshots.Prune(sb.dir, ""); err != nil {
		m.log.Warn("remove dropped snapshot", "sandbox_id", sb.id, "error", err)
	}
	m.log.Info("snapshot dropped over the disk budget; the sandbox will wake at level files", "sandbox_id", sb.id, "tenant", sb.tenant, "why", why)
}

// evictionText says why a snapshot of size bytes was dropped, naming the
// flag that bounds it.
func (m *Manager) evictionText(why evictReason, bytes int64) string {
	total, perTenant := m.cfg.SnapshotDiskBudget, m.cfg.SnapshotDiskBudgetPerTenant
	switch why {
	case evictTooLarge:
		if perTenant > 0 && (total <= 0 || perTenant < total) {
			return fmt.Sprintf("at %d bytes it alone is larger than a tenant's snapshots may take (sandboxd --snapshot-disk-budget-per-tenant %d bytes)", bytes, perTenant)
		}
		return fmt.Sprintf("at %d bytes it alone is larger than all snapshots may take (sandboxd --snapshot-disk-budget %d bytes)", bytes, total)
	case evictTenantShare:
		return fmt.Sprintf("the tenant's hibernated sandboxes' snapshots exceeded sandboxd --snapshot-disk-budget-per-tenant %d bytes (its oldest are dropped first)", perTenant)
	}
	return fmt.Sprintf("hibernated sandboxes' snapshots exceeded sandboxd --snapshot-disk-budget %d bytes (the tenant whose snapshots take the most loses its oldest first)", total)
}
