package docker

import (
	"context"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// recoverHibernation finishes or undoes, at start-up, a hibernation or
// wake that sandboxd was in when it stopped, so that sb is running or
// hibernated with a usable snapshot. alive says whether the container
// meta.json names exists and runs.
func (m *Manager) recoverHibernation(ctx context.Context, sb *sandbox, alive, exists bool) error {
	sb.mu.Lock()
	h, state, containerID := sb.hib, sb.state, sb.containerID
	sb.mu.Unlock()
	log := m.log.With("sandbox_id", sb.id)
	switch {
	case state == core.StateHibernated:
		if h.Phase != "" {
			// A wake that had not started its container: any container it
			// made is an orphan (meta.json names none), removed by reconcile.
			log.Info("sandboxd stopped during a wake; the sandbox stays hibernated")
			sb.mu.Lock()
			sb.hib.Phase = ""
			sb.mu.Unlock()
			return sb.persist(true)
		}
		return nil
	case h.Phase == phaseHibernating && alive:
		log.Info("sandboxd stopped during a hibernation before the container was removed; the sandbox stays running")
		sb.mu.Lock()
		sb.hib.Phase, sb.hib.Pending = "", nil
		sb.mu.Unlock()
		return sb.persist(true)
	case h.Phase == phaseHibernating:
		// The container is gone (or going): finish the hibernation with
		// the best complete snapshot.
		if exists {
			if err := m.removeContainer(ctx, containerID); err != nil {
				return err
			}
		}
		snap := snapMeta{Level: ioproto.LevelFiles, TakenAt: time.Now().UTC(),
			Reason: "sandboxd stopped during the hibernation before the globals were saved"}
		if p := h.Pending; p != nil {
			if size, ok := m.snapshots.Size(sb.dir, p.File); ok {
				snap = *p
				snap.Level, snap.Bytes = ioproto.LevelGlobals, size
				if snap.TakenAt.IsZero() {
					snap.TakenAt = time.Now().UTC()
				}
			} else if prev := h.Snapshot; prev != nil && prev.Level == ioproto.LevelGlobals {
				if size, ok := m.snapshots.Size(sb.dir, prev.File); ok {
					snap = *prev
					snap.Bytes = size
					snap.Reason = joinReasons(fmt.Sprintf("the newest snapshot was not completed; the previous one, taken %s, is used", prev.TakenAt.Format(time.RFC3339)), prev.Reason)
				}
			}
		}
		log.Info("sandboxd stopped during a hibernation after the container was removed; finished it", "level", snap.Level)
		m.commitHibernated(sb, snap)
		if err := sb.persist(true); err != nil {
			return err
		}
		return m.snapshots.Prune(sb.dir, snap.File)
	case h.WakeRecord != "" && alive:
		// The container of a wake runs; its restore record may be missing.
		rec := ioproto.Record{Type: ioproto.KindRestore, CommandID: h.WakeRecord, Level: h.WakeLevel, TimeoutMS: restoreTimeout.Milliseconds()}
		if h.WakeLevel == ioproto.LevelGlobals && h.Snapshot != nil {
			rec.Snapshot = h.Snapshot.File
		}
		if _, err := sb.io.AppendContext(ctx, rec, func() error { return nil }); err != nil {
			log.Error("append the restore record of an interrupted wake", "error", err)
		}
		log.Info("sandboxd stopped during a wake; its restore record is in the log", "level", h.WakeLevel)
		sb.mu.Lock()
		sb.hib.Phase, sb.hib.WakeRecord, sb.hib.WakeLevel = "", "", ""
		sb.hib.Wake = &core.WakeInfo{Level: h.WakeLevel, Time: time.Now().UTC(),
			Reason: "sandboxd restarted during the wake; the first command after it reports how the state came back"}
		sb.mu.Unlock()
		return sb.persist(true)
	case h.Phase != "" || h.WakeRecord != "":
		sb.mu.Lock()
		sb.hib.Phase, sb.hib.WakeRecord, sb.hib.WakeLevel = "", "", ""
		sb.mu.Unlock()
		return sb.persist(true)
	}
	return nil
}
