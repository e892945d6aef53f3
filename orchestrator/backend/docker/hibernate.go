package docker

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/docker/docker/api/types/checkpoint"
	"github.com/docker/docker/api/types/container"

	"github.com/sandboxd/sandboxd/ioproto"
)

// Hibernation: a sandbox idle for its TTL (Config.OnIdle) or asked to
// (Hibernate) saves what it can of its state, loses its container (so it
// uses no memory and no CPU) and keeps its volumes; its next use wakes it
// in a new container on the same volumes, and the state comes back at the
// best level the snapshot reached:
//
//	memory   (opt-in, Config.MemorySnapshots, runsc only) the container
//	         checkpointed by the runtime and kept stopped; the globals
//	         snapshot is taken too, as the fallback when the restore fails;
//	globals  the default context's Python globals, pickled by the kernel
//	         inside the container (ioproto snapshot and restore records);
//	files    /workspace only: everything in memory is reported lost.
//
// It is a state machine persisted in meta.json (hibMeta), so a crash of
// sandboxd at any step leaves the sandbox running or hibernated with a
// usable snapshot (reconcile finishes or undoes the step):
//
//	hibernate: Phase=hibernating (Pending named) → snapshot record answered
//	           → Pending filled in → container removed → commit: State
//	           hibernated, Snapshot=Pending, Phase cleared (the commit point)
//	wake:      Phase=waking → container created and started → State
//	           running with the new container and WakeRecord named (the
//	           commit point) → restore record appended → its answer kept
//	           in Wake, Phase and WakeRecord cleared
//
// A snapshot file is only ever renamed into place whole, and old ones are
// deleted only after a newer commit, so the snapshot a hibernated sandbox
// names is always complete.

// Timeouts of hibernation.
const (
	// snapshotTimeout bounds the snapshot record, which waits behind a
	// running command of the default context; past it the level is files.
	snapshotTimeout = 2 * time.Minute
	// restoreTimeout bounds the wait for a restore record's answer.
	restoreTimeout = 2 * time.Minute
)

// Hibernation phases (hibMeta.Phase).
const (
	phaseHibernating = "hibernating"
	phaseWaking      = "waking"
)

// hibMeta is the hibernation state of a sandbox, in meta.json.
type hibMeta struct {
	// Phase is the step in progress ("" when none).
	Phase string `json:"phase,omitempty"`
	// Seq counts hibernations; it names snapshot files and records.
	Seq int `json:"seq,omitempty"`
	// Snapshot is the last committed snapshot: the one a wake restores.
	Snapshot *snapMeta `json:"snapshot,omitempty"`
	// Pending is the snapshot of a hibernation in progress.
	Pending *snapMeta `json:"pending,omitempty"`
	// HibernatedAt is set while the sandbox is hibernated.
	HibernatedAt time.Time `json:"hibernated_at,omitzero"`
	// Wake is how the state came back at the last wake.
	Wake *core.WakeInfo `json:"wake,omitempty"`
	// WakeRecord and WakeLevel are the restore record of a wake whose
	// container runs but whose restore may not be in the log yet.
	WakeRecord string `json:"wake_record,omitempty"`
	WakeLevel  string `json:"wake_level,omitempty"`
}

// snapMeta describes one snapshot.
type snapMeta struct {
	// Level is ioproto.LevelGlobals or LevelFiles; empty while being taken.
	Level string `json:"level,omitempty"`
	// File is the snapshot's name in the SnapshotStore ("" for files).
	File string `json:"file,omitempty"`
	// Record is the snapshot record's command ID.
	Record  string    `json:"record"`
	Bytes   int64     `json:"bytes,omitempty"`
	TakenAt time.Time `json:"taken_at,omitzero"`
	// Reason says why the level is lower than globals.
	Reason string `json:"reason,omitempty"`
	// Checkpoint names the runtime checkpoint of the stopped container
	// (level memory); File is then the globals fallback.
	Checkpoint string `json:"checkpoint,omitempty"`
}

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

// forMeta returns h for meta.json: nil when there is nothing to keep.
func (h hibMeta) forMeta() *hibMeta {
	if h.Seq == 0 && h.Phase == "" && h.Wake == nil {
		return nil
	}
	return &h
}

// snapshotInfo describes the committed snapshot.
func (h hibMeta) snapshotInfo() *core.SnapshotInfo {
	if h.Snapshot == nil {
		return nil
	}
	return &core.SnapshotInfo{Level: h.Snapshot.Level, Bytes: h.Snapshot.Bytes, TakenAt: h.Snapshot.TakenAt, Reason: h.Snapshot.Reason}
}

// SnapshotStore keeps hibernated sandboxes' snapshots. The local store
// keeps them on the sandbox's /io volume (the driver writes them there
// from inside the container); a Kubernetes backend would map it to the
// volume it keeps when it deletes the Pod.
type SnapshotStore interface {
	// Size reports the size of the complete snapshot name of the sandbox
	// in dir, and false when there is none (never finished, or deleted).
	Size(dir, name string) (int64, bool)
	// Prune deletes the sandbox's snapshots other than keep ("" = all).
	Prune(dir, keep string) error
}

// LocalSnapshots is the SnapshotStore on the host's disk: files in the
// sandbox's io/hibernate/, which the sandbox itself writes. sandboxd only
// looks at their size and deletes them, never reads their content, and
// does both through an os.Root confined to io/: the sandbox may have made
// io/hibernate, or an entry in it, a symlink to anywhere (a host path).
type LocalSnapshots struct{}

// Size is Lstat of a regular file, confined to io/.
func (LocalSnapshots) Size(dir, name string) (int64, bool) {
	if !ioproto.ValidSnapshotName(name) {
		return 0, false
	}
	root, err := os.OpenRoot(filepath.Join(dir, ioDir))
	if err != nil {
		return 0, false
	}
	defer root.Close()
	st, err := root.Lstat(ioproto.HibernateDir + "/" + name)
	if err != nil || !st.Mode().IsRegular() {
		return 0, false
	}
	return st.Size(), true
}

// Prune removes the entries of io/hibernate/ but keep, confined to io/
// (os.Root.RemoveAll never follows a symlink out of it).
func (LocalSnapshots) Prune(dir, keep string) error {
	root, err := os.OpenRoot(filepath.Join(dir, ioDir))
	if err != nil {
		return err
	}
	defer root.Close()
	if st, err := root.Lstat(ioproto.HibernateDir); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	} else if !st.IsDir() {
		return root.Remove(ioproto.HibernateDir) // a planted symlink or file
	}
	d, err := root.Open(ioproto.HibernateDir)
	if err != nil {
		return err
	}
	names, err := d.Readdirnames(10000) // bounded: the sandbox may have filled it
	d.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	var errs []error
	for _, name := range names {
		if name == keep {
			continue
		}
		errs = append(errs, root.RemoveAll(ioproto.HibernateDir+"/"+name))
	}
	return errors.Join(errs...)
}

// crashAt kills sandboxd at a named step of hibernation or wake when the
// test-only SANDBOXD_TEST_CRASH_AT names it (e.g. "hibernate:removed"):
// the e2e tests' way to check that every step is crash safe. SIGKILL, so
// nothing is cleaned up, as in a real crash.
func crashAt(step string) {
	if v := os.Getenv("SANDBOXD_TEST_CRASH_AT"); v != "" && v == step {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}

// Crash points (crashAt), in order.
var (
	// HibernateSteps are the steps of a hibernation a test may crash at.
	HibernateSteps = []string{"hibernate:begun", "hibernate:snapshotted", "hibernate:removed"}
	// WakeSteps are those of a wake.
	WakeSteps = []string{"wake:begun", "wake:started", "wake:running", "wake:appended"}
)

func randomSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Hibernate hibernates a running sandbox now (see above) and returns it.
// A hibernated one is returned as it is; a dead one is
// ErrFailedPrecondition. It does not count as a use of the sandbox.
func (m *Manager) Hibernate(ctx context.Context, sandboxID string) (core.Sandbox, error) {
	sb, err := m.lookup(ctx, sandboxID)
	if err != nil {
		return core.Sandbox{}, err
	}
	unlock, err := m.userLocks.lock(ctx, sb.key().String())
	if err != nil {
		return core.Sandbox{}, err
	}
	defer unlock()
	if err := m.hibernateLocked(ctx, sb, "on request"); err != nil {
		return core.Sandbox{}, err
	}
	return m.snapshot(sb), nil
}

// Wake wakes a hibernated sandbox now and returns it with how its state
// came back (nil when it was running already).
func (m *Manager) Wake(ctx context.Context, sandboxID string) (core.Sandbox, *core.WakeInfo, error) {
	sb, err := m.lookup(ctx, sandboxID)
	if err != nil {
		return core.Sandbox{}, nil, err
	}
	w, err := m.ensureAwake(ctx, sb)
	if err != nil {
		return core.Sandbox{}, nil, err
	}
	m.reg.touch(sb)
	return m.snapshot(sb), w, nil
}

// ensureAwake wakes sb if it is hibernated (or being hibernated: it waits
// for that to end). Concurrent calls yield one wake; the others return nil.
func (m *Manager) ensureAwake(ctx context.Context, sb *sandbox) (*core.WakeInfo, error) {
	if !sb.asleep() {
		return nil, nil
	}
	unlock, err := m.userLocks.lock(ctx, sb.key().String())
	if err != nil {
		return nil, err
	}
	defer unlock()
	return m.wakeLocked(ctx, sb)
}

// asleep reports whether sb is hibernated or in a hibernation or wake.
func (sb *sandbox) asleep() bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.state == core.StateHibernated || sb.hib.Phase != ""
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
	suffix := randomSuffix()
	pending := &snapMeta{File: fmt.Sprintf("snap-%d-%s", sb.hib.Seq, suffix), Record: fmt.Sprintf("sbx-snapshot-%d-%s", sb.hib.Seq, suffix)}
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
	crashAt("hibernate:begun")

	snap := m.takeSnapshot(context.WithoutCancel(ctx), sb, pending)
	snap.TakenAt = time.Now().UTC()
	sb.mu.Lock()
	sb.hib.Pending = &snap
	sb.mu.Unlock()
	if err := sb.persist(true); err != nil {
		log.Error("persist sandbox metadata", "error", err)
	}
	crashAt("hibernate:snapshotted")

	ckpt, why := m.tryCheckpoint(ctx, sb, containerID, snap.seq(sb))
	if ckpt != "" {
		// The container stays, stopped, with its checkpoint; the globals
		// snapshot is the fallback should the restore fail.
		snap.Checkpoint, snap.Level = ckpt, ioproto.LevelMemory
	} else {
		if why != "" {
			log.Info("memory level not available; keeping level "+snap.Level, "why", why)
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), containerRemoveTimeout)
		err := m.docker.ContainerRemove(rctx, containerID, container.RemoveOptions{Force: true})
		cancel()
		if err != nil && !isDockerNotFound(err) {
			m.abortHibernate(sb)
			return dockerError("remove container", err)
		}
	}
	crashAt("hibernate:removed")
	m.commitHibernated(sb, snap)
	if err := sb.persist(true); err != nil {
		// Reconcile finishes it from Phase: the container is gone.
		log.Error("persist sandbox metadata", "error", err)
	}
	keep := snap.File
	if err := m.snapshots.Prune(sb.dir, keep); err != nil {
		log.Warn("remove old snapshots", "error", err)
	}
	m.reg.reset(sb)
	m.enforceSnapshotBudget(sb)
	log.Info("sandbox hibernated", "reason", why, "level", snap.Level, "snapshot_bytes", snap.Bytes,
		"level_reason", snap.Reason, "took", time.Since(start))
	return nil
}

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

// seq returns the hibernation's sequence number.
func (s snapMeta) seq(sb *sandbox) int {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.hib.Seq
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

// runHibRecord appends a snapshot or restore record to sb's log and waits,
// bounded by wait, for its done; it returns the sanitised outcome.
func (m *Manager) runHibRecord(ctx context.Context, sb *sandbox, rec ioproto.Record, wait time.Duration) (*ioproto.HibResult, error) {
	ready := func() error {
		sb.mu.Lock()
		defer sb.mu.Unlock()
		if sb.removing || sb.gone {
			return core.NotFoundf("sandbox %s was deleted", sb.id)
		}
		return nil
	}
	if _, err := sb.io.AppendContext(ctx, rec, ready); err != nil {
		return nil, fmt.Errorf("append the %s record: %w", rec.Type, err)
	}
	if rec.Type == ioproto.KindRestore {
		crashAt("wake:appended")
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var done *core.Event
	err := m.follow(wctx, sb, rec.CommandID, 0, func(e core.Event) error {
		if e.Type == ioproto.EventDone {
			done = &e
		}
		return nil
	})
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("the sandbox did not answer the %s record within %s", rec.Type, wait)
	case err != nil:
		return nil, fmt.Errorf("%s record: %w", rec.Type, err)
	case done == nil || done.Snapshot == nil:
		return nil, fmt.Errorf("the sandbox answered the %s record without an outcome", rec.Type)
	}
	return done.Snapshot.Sanitized(), nil
}

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
	if all, _ := m.reg.countRunning(""); m.cfg.MaxSandboxes > 0 && all+m.pool.count() >= m.cfg.MaxSandboxes {
		m.endWake(sb)
		return nil, core.Exhaustedf("the server runs its maximum of %d sandboxes (sandboxd --max-sandboxes); sandbox %s stays hibernated, try again later", m.cfg.MaxSandboxes, sb.id)
	}
	if err := sb.persist(true); err != nil {
		m.endWake(sb)
		return nil, fmt.Errorf("write sandbox metadata: %w", err)
	}
	crashAt("wake:begun")
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
	cfg, hostCfg := containerSpec(sb, sb.runtime, m.cfg.StateDir, sb.env)
	resp, err := m.docker.ContainerCreate(ctx, cfg, hostCfg, nil, nil, containerNamePrefix+sb.id)
	if err != nil {
		m.endWake(sb)
		return nil, dockerError("create container", err)
	}
	if err := m.docker.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), containerRemoveTimeout)
		_ = m.docker.ContainerRemove(cctx, resp.ID, container.RemoveOptions{Force: true})
		cancel()
		m.endWake(sb)
		return nil, dockerError("start container", err)
	}
	crashAt("wake:started")

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
	sb.state, sb.containerID = core.StateRunning, resp.ID
	sb.hib.WakeRecord, sb.hib.WakeLevel, sb.hib.HibernatedAt = rec.CommandID, level, time.Time{}
	sb.lastActive, sb.dirty = time.Now(), true
	sb.mu.Unlock()
	if err := sb.persist(true); err != nil {
		log.Error("persist sandbox metadata", "error", err)
	}
	crashAt("wake:running")

	res, err := m.runHibRecord(ctx, sb, rec, restoreTimeout+30*time.Second)
	w := core.WakeFromEvent(res)
	if err != nil {
		w = &core.WakeInfo{Level: ioproto.LevelFiles, Reason: "the wake could not restore the state: " + err.Error()}
	}
	if memoryFailed != "" {
		w.Reason = joinReasons(memoryFailed, w.Reason)
	}
	if snap != nil && snap.Level == ioproto.LevelGlobals && level == ioproto.LevelFiles {
		w.Reason = joinReasons("the snapshot of the globals is missing", w.Reason)
	} else if snap != nil && snap.Reason != "" && w.Level == ioproto.LevelFiles {
		w.Reason = joinReasons("the hibernation kept files only: "+snap.Reason, w.Reason)
	}
	w.Time = time.Now().UTC()
	sb.mu.Lock()
	sb.hib.Phase, sb.hib.WakeRecord, sb.hib.WakeLevel, sb.hib.Wake = "", "", "", w
	sb.mu.Unlock()
	if err := sb.persist(true); err != nil {
		log.Error("persist sandbox metadata", "error", err)
	}
	m.reg.reset(sb)
	log.Info("sandbox woken", "level", w.Level, "restored", len(w.Restored), "lost", len(w.Lost), "reason", w.Reason, "took", time.Since(start))
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
	crashAt("wake:started")
	rec := ioproto.Record{Type: ioproto.KindRestore, CommandID: fmt.Sprintf("sbx-restore-%d-%s", seq, randomSuffix()), Level: ioproto.LevelMemory}
	sb.mu.Lock()
	sb.state = core.StateRunning
	sb.hib.WakeRecord, sb.hib.WakeLevel, sb.hib.HibernatedAt = rec.CommandID, rec.Level, time.Time{}
	sb.lastActive, sb.dirty = time.Now(), true
	sb.mu.Unlock()
	if err := sb.persist(true); err != nil {
		m.log.Error("persist sandbox metadata", "sandbox_id", sb.id, "error", err)
	}
	crashAt("wake:running")
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

func joinReasons(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
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

// onIdleOf is what the idle TTL does to sb: its own Options.OnIdle, else
// Config.OnIdle. Call with sb.mu held or before sb is shared (onIdle is set
// at creation and at a warm-pool claim).
func (m *Manager) onIdleOf(sb *sandbox) string {
	return cmp.Or(sb.onIdle, m.cfg.OnIdle)
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
