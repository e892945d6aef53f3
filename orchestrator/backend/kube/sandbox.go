package kube

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// Get describes a sandbox the caller may see, from the cache, with its
// health as its sidecar says (health.go: kept for a while, and waited for
// a bounded time).
func (m *Manager) Get(ctx context.Context, sandboxID string) (core.Sandbox, error) {
	p, c, err := m.lookup(ctx, sandboxID)
	switch {
	case err != nil:
		return core.Sandbox{}, err
	case p == nil:
		return m.sandboxOfClaim(c), nil
	}
	return m.describe(ctx, p), nil
}

// List describes the sandboxes the caller may see that match f, in
// core.CompareSandboxes order, with their health: kept reads, and the
// stale ones read at once, waited for a bounded time in all (health.go).
func (m *Manager) List(ctx context.Context, f core.ListFilter) ([]core.Sandbox, error) {
	if err := m.checkOpen(); err != nil {
		return nil, err
	}
	caller := core.CallerOf(ctx)
	var out []core.Sandbox
	var pods []*corev1.Pod
	for _, p := range m.userPods() {
		if gone, _, _, _ := podState(p); gone || p.Annotations[annShaping] != "" || !caller.Sees(p.Annotations[annTenant]) {
			continue // a Pod being shaped is no one's yet (shape.go)
		}
		sb := m.sandboxOf(p)
		if (f.Tenant != "" && sb.Tenant != f.Tenant) || (f.UserID != "" && sb.UserID != f.UserID) ||
			(f.State != "" && sb.State != f.State) || !core.HasMetadata(sb.Metadata, f.Metadata) {
			continue
		}
		out = append(out, sb)
		pods = append(pods, p)
	}
	m.describeAll(ctx, pods, out)
	for _, c := range m.hibernatedClaims() {
		if !caller.Sees(c.Annotations[annTenant]) {
			continue
		}
		if p, err := m.pods.Pods(m.cfg.Namespace).Get(c.Name); err == nil {
			if gone, _, _, _ := podState(p); !gone {
				continue // waking: its Pod says so
			}
		}
		sb := m.sandboxOfClaim(c)
		if (f.Tenant != "" && sb.Tenant != f.Tenant) || (f.UserID != "" && sb.UserID != f.UserID) ||
			(f.State != "" && sb.State != f.State) || !core.HasMetadata(sb.Metadata, f.Metadata) {
			continue
		}
		out = append(out, sb)
	}
	slices.SortFunc(out, core.CompareSandboxes)
	return out, nil
}

// Delete removes a sandbox: its Pod (and with it /io and /workspace) and,
// if it is its user's current one, the user's binding.
func (m *Manager) Delete(ctx context.Context, sandboxID string) error {
	p, c, err := m.lookup(ctx, sandboxID)
	if err != nil {
		return err
	}
	if p == nil {
		m.removeHibernated(ctx, c, "deleted by request")
		m.publishClaim(c, core.LifecycleKilled, "deleted on request")
		return nil
	}
	if err := m.removePod(ctx, p, "deleted by request"); err != nil {
		return apiError("delete the sandbox pod", err)
	}
	m.publish(p, core.LifecycleKilled, "deleted on request")
	return nil
}

// SetTimeout sets a sandbox's own idle TTL and counts as a use. Like a
// network policy update, it is not lost to a hibernation or a wake racing
// it (UpdateNetworkPolicy says how): written to a Pod only if it has not
// changed since it was read unmarked, a marked Pod's hibernation helped to
// its end first; written to a hibernated sandbox's claim, then to the Pod
// a wake made meanwhile, if one did (the wake, syncWake, looks the other
// way).
func (m *Manager) SetTimeout(ctx context.Context, sandboxID string, d time.Duration) (core.Sandbox, error) {
	for range maxAcquireRounds {
		p, c, err := m.lookup(ctx, sandboxID)
		if err != nil {
			return core.Sandbox{}, err
		}
		now := time.Now()
		if p == nil {
			// A hibernated sandbox keeps it for its wake.
			c, err = m.patchClaim(ctx, sandboxID, nil, map[string]any{annIdleTimeout: d.String(), annLastActive: now.UTC().Format(time.RFC3339Nano)})
			if err != nil {
				return core.Sandbox{}, apiError("set the idle timeout", err)
			}
			woken, err := m.podFromAPI(ctx, sandboxID)
			if err != nil {
				return core.Sandbox{}, err
			}
			if woken == nil || woken.Annotations[annDeleting] != "" {
				return m.sandboxOfClaim(c), nil
			}
			// A wake made a Pod from the claim before this write: the Pod
			// takes it too.
		}
		// From the API server, to write it only as read.
		fresh, err := m.podFromAPI(ctx, sandboxID)
		if err != nil {
			return core.Sandbox{}, err
		}
		if fresh == nil {
			continue
		}
		if fresh.Annotations[annHibernating] != "" {
			if _, err := m.hibernatePod(ctx, fresh, "finishing a hibernation under way"); err != nil {
				return core.Sandbox{}, err
			}
			m.awaitCached(ctx, sandboxID, func(q *corev1.Pod) bool { return q.UID != fresh.UID || q.Annotations[annDeleting] != "" })
			continue
		}
		// Written at once, with the last activity: a caller that extended
		// the timeout must not lose it to a replica's crash.
		b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": fresh.ResourceVersion,
			"annotations": map[string]string{annIdleTimeout: d.String(), annLastActive: now.UTC().Format(time.RFC3339Nano)}}})
		q, err := m.cfg.Client.CoreV1().Pods(m.cfg.Namespace).Patch(ctx, fresh.Name, types.MergePatchType, b, metav1.PatchOptions{})
		switch {
		case apierrors.IsConflict(err):
			continue
		case apierrors.IsNotFound(err):
			continue // hibernated or deleted meanwhile: looked up again
		case err != nil:
			return core.Sandbox{}, apiError("set the idle timeout", err)
		}
		m.touch(sandboxID, q)
		m.log.Info("sandbox idle timeout set", "sandbox_id", sandboxID, "idle_timeout", d)
		// Read your writes: the caller's next Get through this replica
		// reads the informer's cache, which must show the new timeout by
		// then.
		m.awaitCached(ctx, sandboxID, func(q *corev1.Pod) bool { return q.Annotations[annIdleTimeout] == d.String() })
		sb := m.sandboxOf(q)
		if sb.State == core.StateRunning && hasHealth(q) {
			sb.HealthReason, _ = m.cachedHealth(q) // what is known; no read
		}
		return sb, nil
	}
	return core.Sandbox{}, core.Errorf(core.ErrUnavailable, "gave up setting the idle timeout of sandbox %s after %d conflicting writes; try again", sandboxID, maxAcquireRounds)
}

// sandboxOf describes the sandbox of Pod p.
func (m *Manager) sandboxOf(p *corev1.Pod) core.Sandbox {
	_, dead, reason, _ := podState(p)
	sb := core.Sandbox{
		ID:           p.Labels[labelSandboxID],
		Tenant:       p.Annotations[annTenant],
		UserID:       p.Annotations[annUserID],
		State:        core.StateRunning,
		CreatedAt:    parseTime(p.Annotations[annCreatedAt]),
		LastActiveAt: m.lastActive(p),
		Image:        m.cfg.Image,
		ContainerID:  p.Name,
		IdleTimeout:  m.idleTTLOf(p),
		OnIdle:       m.onIdleOf(p.Annotations),
	}
	sb.LastWake = lastWakeOf(p)
	if dead {
		sb.State, sb.StateReason = core.StateDead, reason
	}
	if sb.CreatedAt.IsZero() {
		sb.CreatedAt = p.CreationTimestamp.Time
	}
	sb.ExpiresAt = sb.LastActiveAt.Add(sb.IdleTimeout)
	if m.cfg.MaxLifetime > 0 {
		if end := sb.CreatedAt.Add(m.cfg.MaxLifetime); end.Before(sb.ExpiresAt) {
			sb.ExpiresAt = end
		}
	}
	_ = json.Unmarshal([]byte(p.Annotations[annLimits]), &sb.Limits)
	sb.Volumes = decodeMounts(p.Annotations[annVolumes])
	networkOfPod(&sb, p.Annotations)
	if s := p.Annotations[annMetadata]; s != "" {
		_ = json.Unmarshal([]byte(s), &sb.Metadata)
	}
	for _, c := range p.Spec.Containers {
		if c.Name == containerSandbox && c.Image != "" {
			sb.Image = c.Image
		}
	}
	return sb
}

// removePod deletes sandbox Pod p for good: marked as being deleted (so it
// is gone for callers at once), its finalizer dropped, then deleted; and
// its user's binding, if it names p, deleted too. why is logged.
func (m *Manager) removePod(ctx context.Context, p *corev1.Pod, why string) error {
	return m.remove(ctx, p, why, "")
}

// removePooled removes warm-pool Pod p only if it is unchanged since p was
// read (its resourceVersion is the patch's precondition): the leader judges
// the pool from its cache, which may not show yet that a replica claimed p
// for a user, and a claimed Pod must never be taken from its user. It
// reports whether p is gone; a Conflict (p changed) is left for the next
// look at the pool.
func (m *Manager) removePooled(ctx context.Context, p *corev1.Pod, why string) bool {
	err := m.remove(ctx, p, why, p.ResourceVersion)
	switch {
	case err == nil:
		return true
	case apierrors.IsConflict(err):
		m.log.Debug("warm-pool pod changed before its removal; left for the next look", "pod", p.Name, "why", why)
	case ctx.Err() == nil:
		m.log.Warn("removing a warm-pool pod", "pod", p.Name, "why", why, "error", err)
	}
	return false
}

// remove is removePod, conditional on resourceVersion when it is not "".
func (m *Manager) remove(ctx context.Context, p *corev1.Pod, why, resourceVersion string) error {
	id := p.Labels[labelSandboxID]
	if found, err := m.markGone(ctx, p, why, resourceVersion); err != nil || !found {
		return err
	}
	m.deleteClaim(ctx, id)
	if key := p.Labels[labelUser]; key != "" {
		if l := m.binding(key); l != nil && ptr.Deref(l.Spec.HolderIdentity, "") == id {
			m.deleteBinding(ctx, l.Name, l.ResourceVersion)
		}
	}
	m.log.Info("sandbox removed", "sandbox_id", id, "why", why)
	return nil
}

// markGone marks Pod p as going (annDeleting: why; gone for callers at
// once), drops its finalizer and deletes it, conditional on
// resourceVersion when it is not ""; found is false when p was already
// gone.
func (m *Manager) markGone(ctx context.Context, p *corev1.Pod, why, resourceVersion string) (found bool, err error) {
	meta := map[string]any{
		"annotations": map[string]string{annDeleting: why},
		"finalizers":  nil,
	}
	if resourceVersion != "" {
		meta["resourceVersion"] = resourceVersion
	}
	patch, _ := json.Marshal(map[string]any{"metadata": meta})
	_, err = m.cfg.Client.CoreV1().Pods(m.cfg.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	m.forgetPod(p)
	var grace *int64
	if why == hibernatedMark {
		// Its state is saved and its log sealed: nothing in it needs the
		// Pod's 5 s, and a wake waits for the Pod's object to go.
		grace = ptr.To[int64](1)
	}
	m.deletePodWithin(ctx, p, grace)
	return true, nil
}

// removeHibernated deletes hibernated sandbox c for good: its claim and,
// if it is its user's current one, the user's binding.
func (m *Manager) removeHibernated(ctx context.Context, c *corev1.PersistentVolumeClaim, why string) {
	id := c.Labels[labelSandboxID]
	m.deleteClaim(ctx, id)
	if key := c.Labels[labelUser]; key != "" {
		if l := m.binding(key); l != nil && ptr.Deref(l.Spec.HolderIdentity, "") == id {
			m.deleteBinding(ctx, l.Name, l.ResourceVersion)
		}
	}
	m.log.Info("hibernated sandbox removed", "sandbox_id", id, "why", why)
}

// publishClaim is publish for a hibernated sandbox.
func (m *Manager) publishClaim(c *corev1.PersistentVolumeClaim, kind core.LifecycleKind, reason string) {
	sb := m.sandboxOfClaim(c)
	m.cfg.Lifecycle.Publish(core.LifecycleEvent{
		Kind: kind, Time: time.Now().UTC(), Tenant: sb.Tenant, UserID: sb.UserID,
		SandboxID: sb.ID, Metadata: sb.Metadata, Reason: reason,
	})
}

// finishRemoval completes a removal that a replica began and did not end
// (it crashed between the two writes).
func (m *Manager) finishRemoval(ctx context.Context, p *corev1.Pod) {
	if p.Annotations[annDeleting] == hibernatedMark {
		// Its sandbox lives on, hibernated: only the Pod goes.
		if len(p.Finalizers) > 0 || p.DeletionTimestamp == nil {
			_, _ = m.markGone(ctx, p, hibernatedMark, "")
		}
		return
	}
	if len(p.Finalizers) > 0 || p.DeletionTimestamp == nil {
		_ = m.removePod(ctx, p, p.Annotations[annDeleting])
	}
}

// deletePod asks for Pod p's deletion (its finalizer, if still there,
// keeps the object).
func (m *Manager) deletePod(ctx context.Context, p *corev1.Pod) { m.deletePodWithin(ctx, p, nil) }

// deletePodWithin is deletePod with the containers' grace period (nil:
// the Pod's own).
func (m *Manager) deletePodWithin(ctx context.Context, p *corev1.Pod, grace *int64) {
	err := m.cfg.Client.CoreV1().Pods(m.cfg.Namespace).Delete(ctx, p.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(p.UID)}, GracePeriodSeconds: grace})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
		m.log.Warn("deleting a sandbox pod", "pod", p.Name, "error", err)
	}
}

// retire ends a replaced sandbox: its death recorded and its Pod deleted,
// keeping its finalizer, so that it stays visible as dead until it expires.
func (m *Manager) retire(ctx context.Context, id, reason string) {
	p, err := m.pod(ctx, id)
	if err != nil || p == nil {
		return
	}
	if p.Annotations[annDeadReason] == "" {
		if err := m.patchAnnotations(ctx, id, map[string]string{annDeadReason: reason}); err != nil && !apierrors.IsNotFound(err) {
			m.log.Warn("recording a replaced sandbox's death", "sandbox_id", id, "error", err)
		}
	}
	if p.DeletionTimestamp == nil {
		m.deletePod(ctx, p)
	}
}

// publish reports a change in p's sandbox's life to the lifecycle sink
// (sandboxd's webhooks), once the API server has it.
func (m *Manager) publish(p *corev1.Pod, kind core.LifecycleKind, reason string) {
	sb := m.sandboxOf(p)
	m.cfg.Lifecycle.Publish(core.LifecycleEvent{
		Kind: kind, Time: time.Now().UTC(), Tenant: sb.Tenant, UserID: sb.UserID,
		SandboxID: sb.ID, Metadata: sb.Metadata, Reason: reason,
	})
}

// publishCommandEnd reports the end of a command read through the
// sidecar, with the ID the Docker backend gives it (one per command).
func (m *Manager) publishCommandEnd(p *corev1.Pod, commandID string, e core.Event) {
	sb := m.sandboxOf(p)
	m.cfg.Lifecycle.Publish(core.LifecycleEvent{
		Kind: core.LifecycleCommandFinished, ID: core.CommandEndEventID(sb.ID, commandID),
		Time: time.Now().UTC(), Tenant: sb.Tenant, UserID: sb.UserID, SandboxID: sb.ID,
		Metadata: sb.Metadata, Command: &core.CommandEnd{CommandID: commandID, Status: e.Status, ExitCode: e.ExitCode},
	})
}

// cacheLag bounds how long a write waits to show in this replica's cache.
const cacheLag = 2 * time.Second

// awaitCached waits, at most cacheLag, until sandbox id's Pod in the
// informer's cache satisfies shows (or is gone): a write this replica made
// is then what its reads answer.
func (m *Manager) awaitCached(ctx context.Context, id string, shows func(*corev1.Pod) bool) {
	cached := func(id string) (*corev1.Pod, bool) {
		p, err := m.pods.Pods(m.cfg.Namespace).Get(podName(id))
		return p, err == nil
	}
	if !m.untilPod(ctx, id, cacheLag, cached, shows) && ctx.Err() == nil && m.checkOpen() == nil {
		m.log.Warn("this replica's cache did not show its own write in time", "sandbox_id", id, "waited", cacheLag)
	}
}

// untilPod waits at most d, following the cache's changes, until check
// holds for sandbox id's Pod as get reads it; a Pod get cannot read ends
// the wait as if check held (there is nothing more to wait for). It
// reports whether check held (false: d passed, ctx ended or the replica
// is closing).
func (m *Manager) untilPod(ctx context.Context, id string, d time.Duration,
	get func(id string) (*corev1.Pod, bool), check func(*corev1.Pod) bool) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		ch := m.changed()
		p, ok := get(id)
		if !ok || check(p) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-m.closed:
			return false
		case <-timer.C:
			return false
		case <-ch:
		}
	}
}
