package docker

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

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
	total int64 // Config.SnapshotDiskBudget
}

// evictReason says why a snapshot is dropped.
type evictReason int

const (
	evictBudget evictReason = iota + 1 // all snapshots together exceed the budget
)

// eviction is a snapshot to drop: snaps[i] of planEvictions.
type eviction struct {
	i   int
	why evictReason
}

// planEvictions returns the snapshots to drop, in order, so that snaps
// keep within lim: the oldest first, while all together exceed the budget.
func planEvictions(snaps []heldSnapshot, lim snapshotLimits) []eviction {
	if lim.total <= 0 {
		return nil
	}
	order := make([]int, len(snaps))
	var total int64
	for i, s := range snaps {
		order[i] = i
		total += s.bytes
	}
	slices.SortStableFunc(order, func(a, b int) int { return snaps[a].at.Compare(snaps[b].at) })
	var out []eviction
	for _, i := range order {
		if total <= lim.total {
			break
		}
		if snaps[i].pinned {
			continue
		}
		out = append(out, eviction{i, evictBudget})
		total -= snaps[i].bytes
	}
	return out
}

// enforceSnapshotBudget drops hibernated sandboxes' snapshots of the
// globals as planEvictions says: dropping a snapshot, not a sandbox, keeps
// its user's files. self is the sandbox that has just hibernated, whose
// user's lock the caller holds. Another user's lock is only tried briefly
// (a wake in progress holds it; its snapshot is then pinned, and the plan
// made again without it).
func (m *Manager) enforceSnapshotBudget(self *sandbox) {
	lim := snapshotLimits{total: m.cfg.SnapshotDiskBudget}
	if lim.total <= 0 {
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
	for {
		evs := planEvictions(snaps, lim)
		pinned := -1
		dropped := make(map[int]bool)
		for _, ev := range evs {
			if !m.dropSnapshotOf(self, held[ev.i], ev.why) {
				pinned = ev.i
				break
			}
			dropped[ev.i] = true
		}
		if pinned < 0 {
			return
		}
		// Plan again without what is gone, the busy one pinned.
		snaps[pinned].pinned = true
		var keptHeld []*sandbox
		var keptSnaps []heldSnapshot
		for i := range snaps {
			if !dropped[i] {
				keptHeld, keptSnaps = append(keptHeld, held[i]), append(keptSnaps, snaps[i])
			}
		}
		held, snaps = keptHeld, keptSnaps
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

// dropSnapshot lowers a hibernated sandbox's snapshot to level files.
func (m *Manager) dropSnapshot(sb *sandbox, _ evictReason) {
	sb.mu.Lock()
	if sb.state != core.StateHibernated || sb.hib.Snapshot == nil || sb.hib.Snapshot.Level != ioproto.LevelGlobals {
		sb.mu.Unlock()
		return
	}
	s := *sb.hib.Snapshot
	s.Level, s.File, s.Bytes = ioproto.LevelFiles, "", 0
	s.Reason = fmt.Sprintf("the snapshot of the globals was dropped: hibernated sandboxes' snapshots exceeded sandboxd --snapshot-disk-budget %d bytes", m.cfg.SnapshotDiskBudget)
	sb.hib.Snapshot = &s
	sb.mu.Unlock()
	if err := sb.persist(true); err != nil {
		m.log.Error("persist sandbox metadata", "sandbox_id", sb.id, "error", err)
	}
	if err := m.snapshots.Prune(sb.dir, ""); err != nil {
		m.log.Warn("remove dropped snapshot", "sandbox_id", sb.id, "error", err)
	}
	m.log.Info("snapshot dropped over the disk budget; the sandbox will wake at level files", "sandbox_id", sb.id)
}
