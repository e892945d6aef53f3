package docker

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// enforceSnapshotBudget drops the oldest hibernated sandboxes' snapshots
// of the globals while all of them together exceed
// Config.SnapshotDiskBudget: dropping a snapshot, not a sandbox, keeps its
// user's files. self (whose user's lock the caller holds) is dropped last.
// Another sandbox's user lock is only tried briefly (a wake in progress
// holds it; its snapshot is then left for the next hibernation to judge).
func (m *Manager) enforceSnapshotBudget(self *sandbox) {
	budget := m.cfg.SnapshotDiskBudget
	if budget <= 0 {
		return
	}
	type held struct {
		sb    *sandbox
		at    time.Time
		bytes int64
	}
	var all []held
	var total int64
	for _, sb := range m.reg.all() {
		sb.mu.Lock()
		if sb.state == core.StateHibernated && sb.hib.Snapshot != nil && sb.hib.Snapshot.Level == ioproto.LevelGlobals {
			all = append(all, held{sb, sb.hib.HibernatedAt, sb.hib.Snapshot.Bytes})
			total += sb.hib.Snapshot.Bytes
		}
		sb.mu.Unlock()
	}
	slices.SortFunc(all, func(a, b held) int {
		if (a.sb == self) != (b.sb == self) {
			if a.sb == self {
				return 1
			}
			return -1
		}
		return a.at.Compare(b.at)
	})
	for _, h := range all {
		if total <= budget {
			return
		}
		if h.sb != self {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			unlock, err := m.userLocks.lock(ctx, h.sb.key().String())
			cancel()
			if err != nil {
				continue
			}
			m.dropSnapshot(h.sb)
			unlock()
		} else {
			m.dropSnapshot(h.sb)
		}
		total -= h.bytes
	}
}

// dropSnapshot lowers a hibernated sandbox's snapshot to level files.
func (m *Manager) dropSnapshot(sb *sandbox) {
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
