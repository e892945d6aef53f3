package docker

import (
	"context"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// hibRecovery is what start-up recovery does about a hibernation or wake
// that sandboxd was in when it stopped (reconcile plans it, classifyRecovery
// decides it, recoverHibernation carries it out), so that the sandbox is
// running, or hibernated with a usable snapshot.
type hibRecovery int

const (
	recoverNothing hibRecovery = iota // no step was in progress
	// recoverStayHibernated: a wake that had not started its container;
	// any container it made is an orphan (meta.json names none), removed
	// by reconcile. The sandbox stays hibernated.
	recoverStayHibernated
	// recoverStayRunning: a hibernation whose container still runs; the
	// sandbox stays running.
	recoverStayRunning
	// recoverFinishHibernation: a hibernation whose container is gone or
	// stopped (or going): finished with the best complete snapshot.
	recoverFinishHibernation
	// recoverWakeRestore: a wake whose container runs; its restore record
	// is appended if it is not in the log, and the wake reported.
	recoverWakeRestore
	// recoverClear: any other step left half done (a wake whose new
	// container is gone): its marks are cleared.
	recoverClear
)

var hibRecoveryNames = [...]string{"nothing", "stay-hibernated", "stay-running", "finish-hibernation", "wake-restore", "clear"}

func (r hibRecovery) String() string { return hibRecoveryNames[r] }

// classifyRecovery decides the recovery of a sandbox in state with the
// hibernation state h; alive says whether the container meta.json names
// exists and runs.
func classifyRecovery(state core.State, h hibMeta, alive bool) hibRecovery {
	switch {
	case state == core.StateHibernated && h.Phase != "":
		return recoverStayHibernated
	case state == core.StateHibernated:
		return recoverNothing
	case h.Phase == phaseHibernating && alive:
		return recoverStayRunning
	case h.Phase == phaseHibernating:
		return recoverFinishHibernation
	case h.WakeRecord != "" && alive:
		return recoverWakeRestore
	case h.Phase != "" || h.WakeRecord != "":
		return recoverClear
	}
	return recoverNothing
}

// recoverHibernation carries out the recovery r (classifyRecovery) of sb,
// at start-up. listed says whether Docker has the container meta.json
// names.
func (m *Manager) recoverHibernation(ctx context.Context, sb *sandbox, r hibRecovery, listed bool) error {
	sb.mu.Lock()
	h, containerID := sb.hib, sb.containerID
	sb.mu.Unlock()
	log := m.log.With("sandbox_id", sb.id)
	switch r {
	case recoverStayHibernated:
		log.Info("sandboxd stopped during a wake; the sandbox stays hibernated")
		sb.mu.Lock()
		sb.hib.Phase = ""
		sb.mu.Unlock()
		return sb.persist(true)
	case recoverStayRunning:
		log.Info("sandboxd stopped during a hibernation before the container was removed; the sandbox stays running")
		sb.mu.Lock()
		sb.hib.Phase, sb.hib.Pending = "", nil
		sb.mu.Unlock()
		return sb.persist(true)
	case recoverFinishHibernation:
		if listed {
			if err := m.removeContainer(ctx, containerID); err != nil {
				return err
			}
		}
		if sb.net != nil {
			if err := m.downNet(ctx, sb); err != nil {
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
					snap.Reason = core.JoinReasons(fmt.Sprintf("the newest snapshot was not completed; the previous one, taken %s, is used", prev.TakenAt.Format(time.RFC3339)), prev.Reason)
				}
			}
		}
		log.Info("sandboxd stopped during a hibernation after the container was removed; finished it", "level", snap.Level)
		m.commitHibernated(sb, snap)
		if err := sb.persist(true); err != nil {
			return err
		}
		return m.snapshots.Prune(sb.dir, snap.File)
	case recoverWakeRestore:
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
	case recoverClear:
		sb.mu.Lock()
		sb.hib.Phase, sb.hib.WakeRecord, sb.hib.WakeLevel = "", "", ""
		sb.mu.Unlock()
		return sb.persist(true)
	}
	return nil
}
