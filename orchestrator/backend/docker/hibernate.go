package docker

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

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
//
// The files, by responsibility:
//
//	hibernate.go          this overview, the persisted state (hibMeta,
//	                      snapMeta), the API (Hibernate, Wake) and what
//	                      both state machines share
//	hibernate_save.go     the hibernation: snapshot, checkpoint, removal,
//	                      commit; the idle TTL's way into it
//	hibernate_wake.go     the wake, from a snapshot or a memory checkpoint
//	hibernate_recover.go  start-up recovery of a step sandboxd stopped in
//	hibernate_budget.go   the snapshots' disk budget
//	hibernate_store.go    where snapshots are kept (SnapshotStore)

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

// The named steps of a hibernation and a wake (Config.AtStep), each
// reached once its state is in meta.json.
const (
	stepHibernateBegun       = "hibernate:begun"       // Phase hibernating, Pending named
	stepHibernateSnapshotted = "hibernate:snapshotted" // the snapshot record answered
	stepHibernateRemoved     = "hibernate:removed"     // the container removed (or checkpointed), not committed
	stepWakeBegun            = "wake:begun"            // Phase waking
	stepWakeStarted          = "wake:started"          // the new container started, not committed
	stepWakeRunning          = "wake:running"          // committed: running, WakeRecord named
	stepWakeAppended         = "wake:appended"         // the restore record in the log
	stepSnapshotFrozen       = "snapshot:frozen"       // a named snapshot's /workspace frozen, its copy not begun
	stepSnapshotCopied       = "snapshot:copied"       // a named snapshot complete in its .tmp- directory, not committed
	stepRestoreRegistered    = "restore:registered"    // a sandbox from a snapshot registered, its restore not appended
)

// The steps, in order, for tests that stop sandboxd at each (Config.AtStep).
var (
	// HibernateSteps are the steps of a hibernation.
	HibernateSteps = []string{stepHibernateBegun, stepHibernateSnapshotted, stepHibernateRemoved}
	// WakeSteps are those of a wake.
	WakeSteps = []string{stepWakeBegun, stepWakeStarted, stepWakeRunning, stepWakeAppended}
	// SnapshotSteps are those of a named snapshot and of a sandbox made
	// from one (a fork's).
	SnapshotSteps = []string{stepSnapshotFrozen, stepSnapshotCopied, stepRestoreRegistered}
)

// step tells Config.AtStep, if set, that a hibernation or wake reached the
// named step.
func (m *Manager) step(name string) {
	if m.cfg.AtStep != nil {
		m.cfg.AtStep(name)
	}
}

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
		m.step(stepWakeAppended)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var snap *ioproto.HibResult
	err := m.follow(wctx, sb, rec.CommandID, 0, func(e core.Event) error {
		if e.Type == ioproto.EventDone {
			snap = e.Snapshot
		}
		return nil
	})
	return core.HibOutcome(rec.Type, wait, snap, err)
}

// onIdleOf is what the idle TTL does to sb: its own Options.OnIdle, else
// Config.OnIdle. Call with sb.mu held or before sb is shared (onIdle is set
// at creation and at a warm-pool claim).
func (m *Manager) onIdleOf(sb *sandbox) string {
	return cmp.Or(sb.onIdle, m.cfg.OnIdle)
}
