package kube

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Hibernation on Kubernetes: the Pod goes, its state volume stays
// (claim.go), as a Docker sandbox's container goes and its directories
// stay. The steps, each one a write any replica can see and repeat:
//
//  1. annHibernating on the Pod names the snapshot record, derived from
//     the Pod's UID (so every replica that finishes this hibernation
//     sends the same one);
//  2. the snapshot record is run through the sidecar (Run: appended once,
//     followed to its done). From it on, the log is sealed: the sidecar
//     refuses new commands (iolog.ErrHibernating) until a restore record;
//  3. the claim gets the sandbox's record and annHibernated: from now on
//     the sandbox is hibernated;
//  4. the Pod is removed (annDeleting, finalizer dropped, deleted).
//
// A wake creates the Pod again (annWaking holding the record), waits for
// it, runs the restore record (derived from the new Pod's UID), then
// clears annHibernated on the claim and annWaking on the Pod. A replica
// that dies at any step leaves a state the next use (live), or the
// leader's chores, finishes: nothing is lost, and no record runs twice.

// Bounds of the hibernation records, as on the Docker backend.
const (
	snapshotTimeout = 2 * time.Minute
	restoreTimeout  = 2 * time.Minute
	// goneWait bounds the wait for a hibernated Pod's object to go before
	// the Pod that wakes it (of the same name) is created.
	goneWait = time.Minute
)

// hibernatedMark is annDeleting's value on a hibernated sandbox's Pod:
// the Pod goes, the sandbox does not.
const hibernatedMark = "hibernated"

// hibernatingSince is when the hibernation marked on Pod p began (zero
// when none is).
func hibernatingSince(p *corev1.Pod) time.Time {
	_, at, _ := strings.Cut(p.Annotations[annHibernating], " ")
	return parseTime(at)
}

// uidKey is the short form of Pod p's UID that names its records.
func uidKey(p *corev1.Pod) string {
	k := strings.ReplaceAll(string(p.UID), "-", "")
	return k[:min(len(k), 20)]
}

// hibernation says why this backend cannot hibernate, or nil.
func (m *Manager) hibernation() error {
	if m.claims() {
		return nil
	}
	return core.Unsupported(backendName, featHibernation+" without --kube-storage-class (a sandbox's /io and /workspace need a volume that outlives its Pod)")
}

// Hibernate hibernates a running sandbox now and returns it; a hibernated
// one is returned as it is, a dead one is ErrFailedPrecondition.
func (m *Manager) Hibernate(ctx context.Context, sandboxID string) (core.Sandbox, error) {
	if err := m.hibernation(); err != nil {
		return core.Sandbox{}, err
	}
	p, c, err := m.lookup(ctx, sandboxID)
	if err != nil {
		return core.Sandbox{}, err
	}
	if p == nil {
		return m.sandboxOfClaim(c), nil
	}
	if _, dead, reason, _ := podState(p); dead {
		return core.Sandbox{}, core.Preconditionf("sandbox %s is dead (%s): there is no state to hibernate", sandboxID, reason)
	}
	c, err = m.hibernatePod(ctx, p, "on request")
	if err != nil {
		return core.Sandbox{}, err
	}
	return m.sandboxOfClaim(c), nil
}

// Wake wakes a hibernated sandbox now and returns it, with how its state
// came back (nil when it was running).
func (m *Manager) Wake(ctx context.Context, sandboxID string) (core.Sandbox, *core.WakeInfo, error) {
	if err := m.hibernation(); err != nil {
		return core.Sandbox{}, nil, err
	}
	p, w, err := m.awake(ctx, sandboxID)
	if err != nil {
		return core.Sandbox{}, nil, err
	}
	m.touch(sandboxID, p)
	return m.sandboxOf(p), w, nil
}

// awake returns sandbox id's ready Pod, waking it first if it is
// hibernated, waiting for a hibernation under way to end and finishing a
// wake another replica began; w is the wake's outcome when this call
// woke it.
func (m *Manager) awake(ctx context.Context, id string) (*corev1.Pod, *core.WakeInfo, error) {
	deadline := time.Now().Add(snapshotTimeout + goneWait + m.cfg.StartTimeout)
	for {
		ch := m.changed() // before the reads: a change after them ends the wait
		p, c, err := m.lookup(ctx, id)
		if err != nil {
			return nil, nil, err
		}
		switch {
		case p == nil:
			return m.wake(ctx, c)
		case p.Annotations[annHibernating] != "":
			// Another call is hibernating it, or was and died: this one
			// joins it (the same snapshot record, followed, not run
			// again; the same writes), so that the use waits for the
			// hibernation's end and not for a dead replica's stall; then
			// wakes it.
			if gone, dead, _, ready := podState(p); !gone && !dead && ready {
				if _, err := m.hibernatePod(ctx, p, "finishing a hibernation under way"); err != nil {
					return nil, nil, err
				}
				// Read our writes: the cache must not show the Pod as
				// still hibernating, or this would join it again.
				m.awaitCached(ctx, id, func(q *corev1.Pod) bool { return q.UID != p.UID || q.Annotations[annDeleting] != "" })
				continue
			}
			if err := m.awaitChange(ctx, ch, deadline, "sandbox %s is being hibernated", id); err != nil {
				return nil, nil, err
			}
			continue
		}
		p, err = m.awaitReady(ctx, p)
		if err != nil {
			return nil, nil, err
		}
		if p.Annotations[annWaking] != "" {
			return m.finishWakeInfo(ctx, p) // a wake another call left
		}
		return p, nil, nil
	}
}

// awaitChange waits until ch (m.changed(), taken before the caller's
// reads) is closed by a change of the cache, or until deadline (then
// ErrUnavailable saying what, from format and args).
func (m *Manager) awaitChange(ctx context.Context, ch <-chan struct{}, deadline time.Time, format string, args ...any) error {
	wait := time.Until(deadline)
	if wait <= 0 {
		return core.Errorf(core.ErrUnavailable, format+" for longer than expected; try again", args...)
	}
	timer := time.NewTimer(min(wait, time.Second)) // the leader's chores may act without a change we see
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-m.closed:
		return errClosing
	case <-timer.C:
	case <-ch:
	}
	return nil
}

// hibernatePod hibernates the sandbox of ready Pod p (the steps above)
// and returns its claim, as hibernated. why is for logs and webhooks.
func (m *Manager) hibernatePod(ctx context.Context, p *corev1.Pod, why string) (*corev1.PersistentVolumeClaim, error) {
	id := p.Labels[labelSandboxID]
	log := m.log.With("sandbox_id", id, "tenant", p.Annotations[annTenant], "user_id", p.Annotations[annUserID])
	start := time.Now()
	ctx = context.WithoutCancel(ctx) // once begun, it ends: the log is sealed
	if p.Annotations[annWaking] != "" {
		// A wake left unfinished: finished first, so that the claim's
		// record is the last hibernation's until this one writes its own.
		var err error
		if p, err = m.finishWake(ctx, p); err != nil {
			return nil, err
		}
	}
	snapID := "sbx-snapshot-" + uidKey(p)
	if p.Annotations[annHibernating] == "" {
		mark := snapID + " " + time.Now().UTC().Format(time.RFC3339)
		q, err := m.patchPod(ctx, id, map[string]string{annHibernating: mark})
		if err != nil {
			return nil, apiError("mark the sandbox hibernating", err)
		}
		if q.UID != p.UID {
			return nil, core.Errorf(core.ErrUnavailable, "sandbox %s: its pod changed while it was being hibernated; try again", id)
		}
		// The claim's record is taken from the Pod as the mark left it:
		// every write before the mark is in it (a network policy updated
		// since p was read), and a network update after it sees the mark
		// and goes to the claim (UpdateNetworkPolicy).
		p = q
	}
	rec := ioproto.Record{Type: ioproto.KindSnapshot, CommandID: snapID, Snapshot: "snap-" + uidKey(p), TimeoutMS: snapshotTimeout.Milliseconds()}
	res, err := m.runHib(ctx, p, rec, snapshotTimeout+10*time.Second)
	hr := hibRecord{Level: ioproto.LevelFiles, TakenAt: time.Now().UTC()}
	switch {
	case err != nil:
		hr.Reason = err.Error()
	case res.Level != ioproto.LevelGlobals:
		hr.Reason = cmp.Or(res.Reason, "the sandbox did not save its globals")
	default:
		hr.Level, hr.File, hr.Bytes = ioproto.LevelGlobals, rec.Snapshot, max(res.Bytes, 0)
		if len(res.Lost) > 0 {
			names := make([]string, 0, len(res.Lost))
			for _, l := range res.Lost {
				names = append(names, l.Name)
			}
			hr.Reason = core.Truncate("not kept: "+strings.Join(names, ", "), 1024)
		}
	}
	hr.Reason = core.Truncate(hr.Reason, 1024)
	if err != nil {
		log.Warn("the snapshot of the globals failed; hibernating with files only", "error", err)
	}
	if c, err := m.cfg.Client.CoreV1().PersistentVolumeClaims(m.cfg.Namespace).Get(ctx, podName(id), metav1.GetOptions{}); err == nil && c.Annotations[annHibernated] != "" {
		// Another call finished this hibernation meanwhile (it ran the
		// same snapshot record): its record stands; only the Pod may be
		// left to drop.
		if _, err := m.dropPod(ctx, p, hibernatedMark); err != nil {
			return nil, apiError("delete the hibernated sandbox's pod", err)
		}
		return c, nil
	}
	hr.HibernatedAt = time.Now().UTC()
	recJSON, _ := json.Marshal(hr)
	ann := annotationsAny(recordAnnotations(p.Annotations))
	ann[annLastActive] = m.lastActive(p).UTC().Format(time.RFC3339Nano)
	envJSON, _ := json.Marshal(envOf(p))
	ann[annEnv] = string(envJSON)
	ann[annImage] = imageOf(p)
	ann[annHibernated] = string(recJSON)
	c, err := m.patchClaim(ctx, id, claimLabels(p), ann)
	if err != nil {
		return nil, apiError("record the hibernation on the sandbox's volume claim", err)
	}
	dropped, err := m.dropPod(ctx, p, hibernatedMark)
	if err != nil {
		return nil, apiError("delete the hibernated sandbox's pod", err)
	}
	if !dropped {
		return c, nil // another call finished this hibernation first
	}
	m.publish(p, core.LifecycleHibernated, why)
	log.Info("sandbox hibernated", "reason", why, "level", hr.Level, "snapshot_bytes", hr.Bytes, "level_reason", hr.Reason, "took", time.Since(start))
	return c, nil
}

// wake wakes the hibernated sandbox of claim c: a Pod on the same claim,
// then the restore record.
func (m *Manager) wake(ctx context.Context, c *corev1.PersistentVolumeClaim) (*corev1.Pod, *core.WakeInfo, error) {
	id := c.Labels[labelSandboxID]
	a := c.Annotations
	if err := m.checkCaps(a[annTenant]); err != nil {
		return nil, nil, fmt.Errorf("sandbox %s stays hibernated: %w", id, err)
	}
	s := podSpec{id: id, tenant: a[annTenant], userID: a[annUserID], now: time.Now(), image: a[annImage], waking: a[annHibernated]}
	_ = json.Unmarshal([]byte(a[annLimits]), &s.limits)
	_ = json.Unmarshal([]byte(a[annEnv]), &s.env)
	_ = json.Unmarshal([]byte(a[annMetadata]), &s.meta)
	if d, err := time.ParseDuration(a[annIdleTimeout]); err == nil && d > 0 {
		s.idleTTL = d
	}
	s.volumes = m.keptMounts(decodeMounts(a[annVolumes]))
	s.network = m.wakeNetRecord(ctx, c)
	pod := buildPod(&m.cfg, s) // the io sidecar runs the same image
	for k, v := range recordAnnotations(a) {
		pod.Annotations[k] = v
	}
	pod.Annotations[annLastActive] = s.now.UTC().Format(time.RFC3339Nano)
	if s.network != nil {
		pod.Annotations[annNetwork] = s.network.encode()
	}
	if len(s.volumes) > 0 {
		pod.Annotations[annVolumes] = encodeMounts(mountsOf(s.volumes)) // those still there
	} else {
		delete(pod.Annotations, annVolumes)
	}
	deadline := time.Now().Add(goneWait)
	for {
		ch := m.changed()
		p, err := m.cfg.Client.CoreV1().Pods(m.cfg.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		if err == nil {
			if p, err = m.syncWake(ctx, p, a); err != nil {
				return nil, nil, err
			}
			p, err = m.awaitReady(ctx, p)
			if err != nil {
				return nil, nil, err
			}
			return m.finishWakeInfo(ctx, p)
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, nil, apiError("create the pod that wakes the sandbox", err)
		}
		// The hibernated Pod's object is still going, or another replica
		// is waking the sandbox: wait for the one, adopt the other.
		q, err := m.podFromAPI(ctx, id)
		if err != nil {
			return nil, nil, err
		}
		if q != nil && q.Annotations[annDeleting] == "" {
			if q, err = m.awaitReady(ctx, q); err != nil {
				return nil, nil, err
			}
			return m.finishWakeInfo(ctx, q)
		}
		if err := m.awaitChange(ctx, ch, deadline, "the pod of hibernated sandbox %s is still being deleted", id); err != nil {
			return nil, nil, err
		}
	}
}

// syncWake gives Pod p, just made by a wake from its claim's annotations
// used, what a write to the claim changed after the wake read it (the
// write then found no Pod yet, UpdateNetworkPolicy and SetTimeout): a
// newer network record, another idle timeout. It returns p as written.
func (m *Manager) syncWake(ctx context.Context, p *corev1.Pod, used map[string]string) (*corev1.Pod, error) {
	id := p.Labels[labelSandboxID]
	for range maxAcquireRounds {
		c, err := m.cfg.Client.CoreV1().PersistentVolumeClaims(m.cfg.Namespace).Get(ctx, podName(id), metav1.GetOptions{})
		if err != nil {
			return nil, apiError("read the sandbox's volume claim", err)
		}
		ann := map[string]string{}
		if have, want := parseNetRecord(p.Annotations[annNetwork]), parseNetRecord(c.Annotations[annNetwork]); have != nil && want != nil && want.Generation > have.Generation {
			ann[annNetwork] = want.encode()
		}
		if d := c.Annotations[annIdleTimeout]; d != used[annIdleTimeout] && d != p.Annotations[annIdleTimeout] {
			ann[annIdleTimeout] = d
		}
		if len(ann) == 0 {
			return p, nil
		}
		b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": p.ResourceVersion, "annotations": ann}})
		q, err := m.cfg.Client.CoreV1().Pods(m.cfg.Namespace).Patch(ctx, p.Name, types.MergePatchType, b, metav1.PatchOptions{})
		switch {
		case err == nil:
			return q, nil
		case !apierrors.IsConflict(err):
			return nil, apiError("write the claim's changes to the woken pod", err)
		}
		if p, err = m.podFromAPI(ctx, id); err != nil {
			return nil, err
		}
		if p == nil {
			return nil, core.Errorf(core.ErrUnavailable, "the pod waking sandbox %s is gone; try again", id)
		}
	}
	return nil, core.Errorf(core.ErrUnavailable, "gave up writing the claim's changes to the woken pod of sandbox %s after %d conflicting writes; try again", id, maxAcquireRounds)
}

// finishWake runs ready Pod p's restore record, if its wake has not
// finished, and returns p as woken.
func (m *Manager) finishWake(ctx context.Context, p *corev1.Pod) (*corev1.Pod, error) {
	p, _, err := m.finishWakeInfo(ctx, p)
	return p, err
}

// finishWakeInfo is finishWake, with the wake's outcome.
func (m *Manager) finishWakeInfo(ctx context.Context, p *corev1.Pod) (*corev1.Pod, *core.WakeInfo, error) {
	id := p.Labels[labelSandboxID]
	from := p.Annotations[annWaking]
	if from == "" {
		return p, nil, nil
	}
	ctx = context.WithoutCancel(ctx) // once begun, it ends
	hr, _ := parseHibRecord(from)
	w, err := m.restoreState(ctx, p, hr)
	if err != nil {
		return nil, nil, err
	}
	w.Time = time.Now().UTC()
	wJSON, _ := json.Marshal(w)
	if hr.FromSnapshot == "" {
		if _, err := m.patchClaim(ctx, id, nil, map[string]any{annHibernated: nil, annEnv: nil, annImage: nil}); err != nil && !apierrors.IsNotFound(err) {
			return nil, nil, apiError("record the wake on the sandbox's volume claim", err)
		}
	}
	q, won, err := m.endWake(ctx, p, from, string(wJSON))
	if err != nil {
		return nil, nil, err
	}
	m.touch(id, q)
	m.awaitCached(ctx, id, func(c *corev1.Pod) bool { return c.Annotations[annWaking] == "" })
	if !won {
		// Another call finished this wake first (the same restore record,
		// followed): its outcome is the one recorded, and it published it.
		if theirs := lastWakeOf(q); theirs != nil {
			w = theirs
		}
		return q, w, nil
	}
	if hr.FromSnapshot != "" {
		m.log.Info("sandbox started from a snapshot", "sandbox_id", id, "snapshot_id", hr.FromSnapshot, "level", w.Level,
			"restored", len(w.Restored), "lost", len(w.Lost), "reason", w.Reason)
		return q, w, nil
	}
	m.publish(q, core.LifecycleWoken, w.Reason)
	m.log.Info("sandbox woken", "sandbox_id", id, "level", w.Level, "restored", len(w.Restored), "lost", len(w.Lost), "reason", w.Reason)
	return q, w, nil
}

// restoreState brings ready Pod p's saved state back, as hr records it: a
// hibernation's globals in its /io, or a snapshot's archive, imported
// first. It says how the state came back; an error means the Pod is dead
// or going, and the wake not finished.
func (m *Manager) restoreState(ctx context.Context, p *corev1.Pod, hr hibRecord) (*core.WakeInfo, error) {
	kept, what := "the hibernation kept files only", "the wake"
	if hr.FromSnapshot != "" {
		kept, what = "the snapshot kept files only", "the start from a snapshot"
		if err := m.importSnapshot(ctx, p, hr); err != nil {
			if errors.Is(err, context.Canceled) || core.ClassOf(err) == core.ErrFailedPrecondition {
				return nil, err
			}
			return &core.WakeInfo{Level: ioproto.LevelFiles, Reason: "the snapshot could not be copied into the sandbox: " + err.Error()}, nil
		}
		if hr.Level != ioproto.LevelGlobals || hr.File == "" {
			// Nothing to load, and nothing to tell the driver: the sandbox
			// is new, its first command finds empty globals.
			return &core.WakeInfo{Level: ioproto.LevelFiles, Reason: core.JoinReasons(kept, hr.Reason)}, nil
		}
	}
	level := ioproto.LevelFiles
	if hr.Level == ioproto.LevelGlobals && hr.File != "" {
		level = ioproto.LevelGlobals
	}
	rec := ioproto.Record{Type: ioproto.KindRestore, CommandID: "sbx-restore-" + uidKey(p), Level: level, TimeoutMS: restoreTimeout.Milliseconds()}
	if level == ioproto.LevelGlobals {
		rec.Snapshot = hr.File
	}
	res, err := m.runHib(ctx, p, rec, restoreTimeout+30*time.Second)
	w := core.WakeFromEvent(res)
	if err != nil {
		if errors.Is(err, context.Canceled) || core.ClassOf(err) == core.ErrFailedPrecondition {
			return nil, err
		}
		w = &core.WakeInfo{Level: ioproto.LevelFiles, Reason: what + " could not restore the state: " + err.Error()}
	}
	if hr.Reason != "" && w.Level == ioproto.LevelFiles {
		w.Reason = core.JoinReasons(kept+": "+hr.Reason, w.Reason)
	}
	return w, nil
}

// lastWakeOf is how Pod p's sandbox last came back from hibernation, as
// recorded on it; nil if it never hibernated (or the record is unreadable).
func lastWakeOf(p *corev1.Pod) *core.WakeInfo {
	var w core.WakeInfo
	if s := p.Annotations[annLastWake]; s == "" || json.Unmarshal([]byte(s), &w) != nil {
		return nil
	}
	return &w
}

// endWake records the end of Pod p's wake from hibernation record from
// (its annWaking) with outcome wJSON, if no other call has: the write is
// conditional on the Pod's resourceVersion, so of several calls finishing
// one wake (replicas, the leader's chores) exactly one wins and publishes
// "woken". It returns the Pod as it is after the wake, and whether this
// call's write ended it.
func (m *Manager) endWake(ctx context.Context, p *corev1.Pod, from, wJSON string) (*corev1.Pod, bool, error) {
	id := p.Labels[labelSandboxID]
	for range 10 {
		cur, err := m.podFromAPI(ctx, id)
		if err != nil {
			return nil, false, err
		}
		if cur == nil || cur.UID != p.UID {
			return nil, false, core.SandboxNotFound(id)
		}
		if cur.Annotations[annWaking] != from {
			return cur, false, nil
		}
		b, _ := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": cur.ResourceVersion,
			"annotations":     map[string]any{annWaking: nil, annLastWake: wJSON},
		}})
		q, err := m.cfg.Client.CoreV1().Pods(m.cfg.Namespace).Patch(ctx, p.Name, types.MergePatchType, b, metav1.PatchOptions{})
		switch {
		case err == nil:
			return q, true, nil
		case apierrors.IsConflict(err):
			continue // another write came first: read it
		default:
			return nil, false, apiError("record the wake on the sandbox's pod", err)
		}
	}
	return nil, false, core.Errorf(core.ErrUnavailable, "sandbox %s: its pod changed too often to record its wake; try again", id)
}

// runHib runs a snapshot or restore record in ready Pod p's sandbox, once
// (Run: a record sent again is followed, not appended), and returns its
// sanitised outcome.
func (m *Manager) runHib(ctx context.Context, p *corev1.Pod, rec ioproto.Record, wait time.Duration) (*ioproto.HibResult, error) {
	id := p.Labels[labelSandboxID]
	conn, err := m.io(ctx, p)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var snap *ioproto.HibResult
	err = conn.Run(wctx, rec, func(bool) {}, func(e ioproto.Event) error {
		if e.Type == ioproto.EventDone {
			snap = e.Snapshot
		}
		return nil
	})
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		err = m.ioError(id, rec.CommandID, err)
	}
	return core.HibOutcome(rec.Type, wait, snap, err)
}

// dropPod removes Pod p without ending its sandbox: marked (gone for
// callers, why says what became of it), its finalizer dropped, deleted.
// Its claim and its user's binding stay.
// It reports whether this call dropped it (false: it was gone, or
// another call had marked it so already).
func (m *Manager) dropPod(ctx context.Context, p *corev1.Pod, why string) (bool, error) {
	fresh, err := m.podFromAPI(ctx, p.Labels[labelSandboxID])
	switch {
	case err != nil:
		return false, err
	case fresh == nil || fresh.UID != p.UID:
		return false, nil
	case fresh.Annotations[annDeleting] == why:
		if len(fresh.Finalizers) == 0 && fresh.DeletionTimestamp != nil {
			return false, nil
		}
		_, err := m.markGone(ctx, fresh, why, "") // finish what the other call began
		return false, err
	}
	return m.markGone(ctx, fresh, why, "")
}
