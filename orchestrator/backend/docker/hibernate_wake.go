package docker

import (
	"context"
	"fmt"
	"time"

	"github.com/docker/docker/api/types/checkpoint"
	"github.com/docker/docker/api/types/container"
	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// wakeLocked wakes sb if hibernated; the caller holds its user's lock.
func (m *Manager) wakeLocked(ctx context.Context, sb *sandbox) (*core.WakeInfo, error) {
	log := m.log.With("sandbox_id", sb.id, "tenant", sb.tenant, "user_id", sb.userID)
	sb.mu.Lock()
	switch {
	case sb.removing || sb.gone:
		sb.mu.Unlock()
		return nil, core.SandboxNotFound(sb.id)
	case sb.state != core.StateHibernated:
		sb.mu.Unlock()
		return nil, nil // woken meanwhile: one wake for concurrent callers
	}
	sb.hib.Phase = phaseWaking
	snap := sb.hib.Snapshot
	seq := sb.hib.Seq
	sb.mu.Unlock()
	memoryFailed := "" // why a memory-level wake fell back
	start := time.Now()
	// A woken sandbox runs again: it counts against its tenant's cap and
	// the server's as a new one would (acquire.go).
	var all int
	release, ok := m.acquiring.reserve(sb.tenant, m.cfg.MaxSandboxesPerTenant, func() int {
		var ofTenant int
		all, ofTenant = m.reg.countRunning(sb.tenant)
		return ofTenant
	})
	if !ok {
		m.endWake(sb)
		return nil, fmt.Errorf("sandbox %s stays hibernated: %w", sb.id, core.TenantCapReached(sb.tenant, m.cfg.MaxSandboxesPerTenant))
	}
	defer release() // once it is running again (registered as such), or failed
	if m.cfg.MaxSandboxes > 0 && all+m.pooled() >= m.cfg.MaxSandboxes {
		m.endWake(sb)
		return nil, fmt.Errorf("sandbox %s stays hibernated: %w", sb.id, core.ServerCapReached(m.cfg.MaxSandboxes))
	}
	if err := sb.persist(true); err != nil {
		m.endWake(sb)
		return nil, fmt.Errorf("write sandbox metadata: %w", err)
	}
	m.step(stepWakeBegun)
	if _, err := ensureMounted(ctx, sb.dir); err != nil {
		m.endWake(sb)
		return nil, fmt.Errorf("mount the volumes of sandbox %s: %w", sb.id, err)
	}
	if snap != nil && snap.Level == ioproto.LevelMemory {
		w, fallback, err := m.wakeFromCheckpoint(ctx, sb, snap, seq)
		if err == nil {
			return w, nil
		}
		log.Warn("restoring the memory checkpoint failed; waking from the globals snapshot", "error", err)
		memoryFailed = fallback
	}
	if err := m.checkImageOf(ctx, sb.image); err != nil {
		m.endWake(sb)
		return nil, err
	}
	// A pool container already running carries the wake when it can
	// (carrier.go); otherwise a new container starts.
	containerID := ""
	if m.fastWakeable(sb) {
		containerID = m.fastWake(ctx, sb)
	}
	fast := containerID != ""
	if !fast {
		// A networked sandbox's holder and veth first, with the address it
		// kept (network.go); undone if the wake fails.
		netDown := func() {
			if sb.net != nil {
				if err := m.downNet(ctx, sb); err != nil {
					log.Warn("remove the network holder of a failed wake; the next start removes it", "error", err)
				}
			}
		}
		if sb.net != nil {
			if err := m.upNet(ctx, sb); err != nil {
				netDown()
				m.endWake(sb)
				return nil, fmt.Errorf("set up the sandbox's network: %w", err)
			}
		}
		cfg, hostCfg := containerSpec(sb, sb.runtime, m.cfg.StateDir, sb.env)
		hostCfg.Binds = append(hostCfg.Binds, m.volumeBinds(sb)...)
		sb.mu.Lock()
		sb.volsMounted = false // its container has them from its configuration
		sb.mu.Unlock()
		resp, err := m.docker.ContainerCreate(ctx, cfg, hostCfg, nil, nil, containerNamePrefix+sb.id)
		if err != nil {
			netDown()
			m.endWake(sb)
			return nil, dockerError("create container", err)
		}
		removeNew := func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), containerRemoveTimeout)
			_ = m.docker.ContainerRemove(cctx, resp.ID, container.RemoveOptions{Force: true})
			cancel()
			netDown()
			m.endWake(sb)
		}
		if sb.net != nil {
			// Written at creation; read again only if it is missing.
			if err := m.writeBundle(ctx, sb, resp.ID); err != nil {
				removeNew()
				return nil, fmt.Errorf("write the sandbox's CA bundle: %w", err)
			}
		}
		if err := m.docker.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
			removeNew()
			return nil, dockerError("start container", err)
		}
		containerID = resp.ID
	}
	m.step(stepWakeStarted)

	level := ioproto.LevelFiles
	if snap != nil && (snap.Level == ioproto.LevelGlobals || snap.Level == ioproto.LevelMemory) && snap.File != "" {
		if _, ok := m.snapshots.Size(sb.dir, snap.File); ok {
			level = ioproto.LevelGlobals
		}
	}
	rec := ioproto.Record{Type: ioproto.KindRestore, CommandID: fmt.Sprintf("sbx-restore-%d-%s", seq, randomSuffix()),
		Level: level, TimeoutMS: restoreTimeout.Milliseconds()}
	if level == ioproto.LevelGlobals {
		rec.Snapshot = snap.File
	}
	sb.mu.Lock()
	sb.state, sb.containerID = core.StateRunning, containerID
	sb.mu.Unlock()
	m.noteBoot(ctx, sb) // gVisor's boot with its address (network.go)
	sb.mu.Lock()
	sb.hib.WakeRecord, sb.hib.WakeLevel, sb.hib.HibernatedAt = rec.CommandID, level, time.Time{}
	sb.lastActive, sb.dirty = time.Now(), true
	sb.mu.Unlock()
	if err := sb.persist(true); err != nil {
		log.Error("persist sandbox metadata", "error", err)
	}
	m.step(stepWakeRunning)

	res, err := m.runHibRecord(ctx, sb, rec, restoreTimeout+30*time.Second)
	w := core.WakeFromEvent(res)
	if err != nil {
		w = &core.WakeInfo{Level: ioproto.LevelFiles, Reason: "the wake could not restore the state: " + err.Error()}
	}
	if memoryFailed != "" {
		w.Reason = core.JoinReasons(memoryFailed, w.Reason)
	}
	if snap != nil && snap.Level == ioproto.LevelGlobals && level == ioproto.LevelFiles {
		w.Reason = core.JoinReasons("the snapshot of the globals is missing", w.Reason)
	} else if snap != nil && snap.Reason != "" && w.Level == ioproto.LevelFiles {
		w.Reason = core.JoinReasons("the hibernation kept files only: "+snap.Reason, w.Reason)
	}
	w.Time = time.Now().UTC()
	sb.mu.Lock()
	sb.hib.Phase, sb.hib.WakeRecord, sb.hib.WakeLevel, sb.hib.Wake = "", "", "", w
	sb.mu.Unlock()
	if err := sb.persist(true); err != nil {
		log.Error("persist sandbox metadata", "error", err)
	}
	m.reg.reset(sb)
	m.publish(sb, core.LifecycleWoken, w.Reason)
	log.Info("sandbox woken", "fast", fast, "level", w.Level, "restored", len(w.Restored), "lost", len(w.Lost), "reason", w.Reason, "took", time.Since(start))
	return w.Clone(), nil
}

// wakeFromCheckpoint starts sb's stopped container from its memory
// checkpoint: the same processes, exactly. On failure the container is
// removed (the caller wakes from the globals snapshot) and the reason is
// returned for the wake's report.
func (m *Manager) wakeFromCheckpoint(ctx context.Context, sb *sandbox, snap *snapMeta, seq int) (*core.WakeInfo, string, error) {
	containerID := sb.currentContainer()
	err := m.docker.ContainerStart(ctx, containerID, container.StartOptions{CheckpointID: snap.Checkpoint})
	if err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), containerRemoveTimeout)
		_ = m.docker.ContainerRemove(cctx, containerID, container.RemoveOptions{Force: true})
		cancel()
		sb.mu.Lock()
		sb.containerID = ""
		sb.mu.Unlock()
		return nil, core.Truncate("the memory checkpoint could not be restored ("+err.Error()+"); the globals snapshot was used", 512), err
	}
	m.step(stepWakeStarted)
	rec := ioproto.Record{Type: ioproto.KindRestore, CommandID: fmt.Sprintf("sbx-restore-%d-%s", seq, randomSuffix()), Level: ioproto.LevelMemory}
	sb.mu.Lock()
	sb.state = core.StateRunning
	sb.hib.WakeRecord, sb.hib.WakeLevel, sb.hib.HibernatedAt = rec.CommandID, rec.Level, time.Time{}
	sb.lastActive, sb.dirty = time.Now(), true
	sb.mu.Unlock()
	if err := sb.persist(true); err != nil {
		m.log.Error("persist sandbox metadata", "sandbox_id", sb.id, "error", err)
	}
	m.step(stepWakeRunning)
	res, err := m.runHibRecord(ctx, sb, rec, restoreTimeout)
	w := core.WakeFromEvent(res)
	if err != nil {
		w = &core.WakeInfo{Level: ioproto.LevelMemory, Reason: "the processes were restored from the checkpoint, but the sandbox did not confirm: " + err.Error()}
	}
	w.Time = time.Now().UTC()
	sb.mu.Lock()
	sb.hib.Phase, sb.hib.WakeRecord, sb.hib.WakeLevel, sb.hib.Wake = "", "", "", w
	sb.mu.Unlock()
	if err := sb.persist(true); err != nil {
		m.log.Error("persist sandbox metadata", "sandbox_id", sb.id, "error", err)
	}
	if m.checkpoints != nil {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		if err := m.checkpoints.CheckpointDelete(dctx, containerID, checkpoint.DeleteOptions{CheckpointID: snap.Checkpoint}); err != nil {
			m.log.Warn("delete the used checkpoint", "sandbox_id", sb.id, "error", err)
		}
		cancel()
	}
	m.reg.reset(sb)
	m.publish(sb, core.LifecycleWoken, w.Reason)
	m.log.Info("sandbox woken from its memory checkpoint", "sandbox_id", sb.id)
	return w.Clone(), "", nil
}

// endWake undoes the start of a wake that failed before the container
// started: the sandbox stays hibernated.
func (m *Manager) endWake(sb *sandbox) {
	sb.mu.Lock()
	sb.hib.Phase = ""
	sb.mu.Unlock()
	if err := sb.persist(true); err != nil {
		m.log.Error("persist sandbox metadata", "sandbox_id", sb.id, "error", err)
	}
}

// checkImageOf is checkImage for a given image (a woken sandbox keeps the
// image it was created with).
func (m *Manager) checkImageOf(ctx context.Context, image string) error {
	_, err := m.docker.ImageInspect(ctx, image)
	switch {
	case err == nil:
		return nil
	case isDockerNotFound(err):
		return core.Preconditionf("sandbox image %q of this hibernated sandbox is not present any more; it cannot be woken", image)
	}
	return dockerError("inspect image", err)
}
