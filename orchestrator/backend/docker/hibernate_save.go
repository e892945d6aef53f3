package docker

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/docker/docker/api/types/checkpoint"
	"github.com/docker/docker/api/types/container"
	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// checkpointer is the part of the Docker client that checkpoints
// containers (dockerd in experimental mode); the real client has it.
type checkpointer interface {
	CheckpointCreate(ctx context.Context, containerID string, options checkpoint.CreateOptions) error
	CheckpointDelete(ctx context.Context, containerID string, options checkpoint.DeleteOptions) error
	ContainerStop(ctx context.Context, containerID string, options container.StopOptions) error
}

// checkpointTimeout bounds a runtime checkpoint.
const checkpointTimeout = 2 * time.Minute

// tryCheckpoint checkpoints sb's container for the memory level and
// reports the checkpoint's name, or why there is none. Only gVisor is
// tried: its checkpoint keeps a Python kernel exactly; runc needs CRIU,
// whose Debian bookworm build fails on current kernels ("vdso: Unexpected
// rt vDSO area bounds"), so runc sandboxes use the globals level.
func (m *Manager) tryCheckpoint(ctx context.Context, sb *sandbox, containerID string, seq int) (string, string) {
	switch {
	case !m.cfg.MemorySnapshots:
		return "", ""
	case m.checkpoints == nil:
		return "", "the Docker client cannot checkpoint"
	case sb.runtime != core.RuntimeGVisor:
		return "", "the memory level needs the runsc runtime (runc would need a working CRIU)"
	case sb.net != nil:
		return "", "the memory level is not available to sandboxes with network (gVisor's netstack would be restored into a new namespace)"
	}
	name := fmt.Sprintf("sbx-ckpt-%d-%s", seq, randomSuffix())
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), checkpointTimeout)
	defer cancel()
	if err := m.checkpoints.CheckpointCreate(cctx, containerID, checkpoint.CreateOptions{CheckpointID: name, Exit: true}); err != nil {
		return "", core.Truncate("docker checkpoint failed (is dockerd in experimental mode?): "+err.Error(), 512)
	}
	// The checkpoint's exit is not a manual stop: the restart policy would
	// start the container afresh. A stop marks it stopped on purpose (and
	// ends such a fresh start); the checkpoint stays for the wake.
	zero := 0
	if err := m.checkpoints.ContainerStop(cctx, containerID, container.StopOptions{Timeout: &zero}); err != nil {
		return "", core.Truncate("cannot keep the checkpointed container stopped: "+err.Error(), 512)
	}
	return name, ""
}

// hibernateLocked hibernates sb; the caller holds its user's lock.
func (m *Manager) hibernateLocked(ctx context.Context, sb *sandbox, why string) error {
	log := m.log.With("sandbox_id", sb.id, "tenant", sb.tenant, "user_id", sb.userID)
	sb.mu.Lock()
	switch {
	case sb.removing || sb.gone:
		sb.mu.Unlock()
		return core.SandboxNotFound(sb.id)
	case sb.state == core.StateHibernated:
		sb.mu.Unlock()
		return nil
	case sb.state == core.StateDead:
		sb.mu.Unlock()
		return core.Preconditionf("sandbox %s is dead (%s): there is no state to hibernate", sb.id, sb.reason)
	}
	sb.hib.Seq++
	seq, suffix := sb.hib.Seq, randomSuffix()
	pending := &snapMeta{File: fmt.Sprintf("snap-%d-%s", seq, suffix), Record: fmt.Sprintf("sbx-snapshot-%d-%s", seq, suffix)}
	sb.hib.Phase, sb.hib.Pending = phaseHibernating, pending
	containerID := sb.containerID
	sb.mu.Unlock()
	start := time.Now()
	if err := sb.persist(true); err != nil {
		m.abortHibernate(sb)
		return fmt.Errorf("write sandbox metadata: %w", err)
	}
	// Commands appended from now on are refused (appendable) and retried
	// after the wake; wait for an append already past that check.
	sb.io.HoldAppends(func() {})
	m.step(stepHibernateBegun)

	snap := m.takeSnapshot(context.WithoutCancel(ctx), sb, pending)
	snap.TakenAt = time.Now().UTC()
	sb.mu.Lock()
	sb.hib.Pending = &snap
	sb.mu.Unlock()
	if err := sb.persist(true); err != nil {
		log.Error("persist sandbox metadata", "error", err)
	}
	m.step(stepHibernateSnapshotted)

	ckpt, noCkpt := m.tryCheckpoint(ctx, sb, containerID, seq)
	if ckpt != "" {
		// The container stays, stopped, with its checkpoint; the globals
		// snapshot is the fallback should the restore fail.
		snap.Checkpoint, snap.Level = ckpt, ioproto.LevelMemory
	} else {
		if noCkpt != "" {
			log.Info("memory level not available; keeping level "+snap.Level, "why", noCkpt)
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), containerRemoveTimeout)
		err := m.docker.ContainerRemove(rctx, containerID, container.RemoveOptions{Force: true})
		cancel()
		if err != nil && !isDockerNotFound(err) {
			m.abortHibernate(sb)
			return dockerError("remove container", err)
		}
		if sb.net != nil {
			// Its holder and veth go too; its address stays its own.
			if err := m.downNet(ctx, sb); err != nil {
				log.Warn("remove the hibernated sandbox's network holder; the next start removes it", "error", err)
			}
		}
	}
	m.step(stepHibernateRemoved)
	m.commitHibernated(sb, snap)
	if err := sb.persist(true); err != nil {
		// Reconcile finishes it from Phase: the container is gone.
		log.Error("persist sandbox metadata", "error", err)
	}
	if ckpt == "" {
		// A fast-woken sandbox's carrier goes with its container
		// (carrier.go); a crash before this, and reconcile releases it.
		m.dropCarrier(ctx, sb)
		if err := sb.persist(true); err != nil {
			log.Error("persist sandbox metadata", "error", err)
		}
	}
	keep := snap.File
	if err := m.snapshots.Prune(sb.dir, keep); err != nil {
		log.Warn("remove old snapshots", "error", err)
	}
	m.reg.reset(sb)
	m.publish(sb, core.LifecycleHibernated, why)
	log.Info("sandbox hibernated", "reason", why, "level", snap.Level, "snapshot_bytes", snap.Bytes,
		"level_reason", snap.Reason, "took", time.Since(start))
	m.enforceSnapshotBudget(sb) // logs a drop, of this snapshot too
	return nil
}

// abortHibernate undoes the start of a hibernation that failed before the
// container was removed: the sandbox stays running.
func (m *Manager) abortHibernate(sb *sandbox) {
	sb.mu.Lock()
	sb.hib.Phase, sb.hib.Pending = "", nil
	sb.mu.Unlock()
	if err := sb.persist(true); err != nil {
		m.log.Error("persist sandbox metadata", "sandbox_id", sb.id, "error", err)
	}
}

// commitHibernated records, in memory, that sb is hibernated with snap;
// a memory-level snapshot keeps its (stopped) container.
func (m *Manager) commitHibernated(sb *sandbox, snap snapMeta) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	sb.state = core.StateHibernated
	if snap.Checkpoint == "" {
		sb.containerID = ""
	}
	sb.hib.Phase, sb.hib.Pending, sb.hib.WakeRecord, sb.hib.WakeLevel = "", nil, "", ""
	sb.hib.Snapshot = &snap
	sb.hib.HibernatedAt = time.Now().UTC()
	sb.health = ioHealth{}
}

// takeSnapshot asks sb's driver for a snapshot of the globals and waits,
// bounded, for the answer; it returns the snapshot reached (level files
// with a reason when the globals could not be saved).
func (m *Manager) takeSnapshot(ctx context.Context, sb *sandbox, p *snapMeta) snapMeta {
	snap := snapMeta{Record: p.Record, File: p.File}
	files := func(reason string) snapMeta {
		snap.Level, snap.File, snap.Reason = ioproto.LevelFiles, "", reason
		return snap
	}
	rec := ioproto.Record{Type: ioproto.KindSnapshot, CommandID: p.Record, Snapshot: p.File, TimeoutMS: snapshotTimeout.Milliseconds()}
	res, err := m.runHibRecord(ctx, sb, rec, snapshotTimeout+10*time.Second)
	if err != nil {
		return files(err.Error())
	}
	if res == nil || res.Level != ioproto.LevelGlobals {
		reason := "the sandbox did not save its globals"
		if res != nil && res.Reason != "" {
			reason = res.Reason
		}
		return files(reason)
	}
	size, ok := m.snapshots.Size(sb.dir, p.File)
	if !ok {
		return files("the snapshot file is missing after the sandbox reported it written")
	}
	snap.Level, snap.Bytes = ioproto.LevelGlobals, size
	if len(res.Lost) > 0 {
		names := make([]string, 0, len(res.Lost))
		for _, l := range res.Lost {
			names = append(names, l.Name)
		}
		snap.Reason = core.Truncate("not kept: "+strings.Join(names, ", "), 1024)
	}
	return snap
}

// hibernateExpired handles the idle expiry of a running sandbox under
// OnIdleHibernate; it reports false when the sandbox is to be removed
// instead (its maximum lifetime is over, or it is not running).
func (m *Manager) hibernateExpired(sb *sandbox) bool {
	sb.mu.Lock()
	running := sb.state == core.StateRunning && sb.hib.Phase == ""
	lifetimeOver := m.cfg.MaxLifetime > 0 && !time.Now().Before(sb.createdAt.Add(m.cfg.MaxLifetime))
	onIdle := m.onIdleOf(sb)
	sb.mu.Unlock()
	if onIdle != core.OnIdleHibernate || !running || lifetimeOver {
		return false
	}
	if !m.reg.holdExpired(sb, snapshotTimeout+2*removeTimeout) {
		return true // used just as it expired: it lives on
	}
	ctx, cancel := context.WithTimeout(context.Background(), snapshotTimeout+2*removeTimeout)
	defer cancel()
	unlock, err := m.userLocks.lock(ctx, sb.key().String())
	if err != nil {
		m.reg.rearm(sb, removeRetry)
		return true
	}
	defer unlock()
	sb.mu.Lock()
	stillIdle := !time.Now().Before(m.reg.expiry(sb.createdAt, sb.lastActive, sb.idleTTL))
	sb.mu.Unlock()
	if !stillIdle {
		m.reg.reset(sb) // used while we waited for the lock
		return true
	}
	if err := m.hibernateLocked(ctx, sb, fmt.Sprintf("idle for %v", m.reg.idleOf(sb.idleTTL))); err != nil {
		m.log.Error("hibernate idle sandbox; will retry", "sandbox_id", sb.id, "retry_in", removeRetry, "error", err)
		m.reg.rearm(sb, removeRetry)
	}
	return true
}
