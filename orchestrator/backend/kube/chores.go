package kube

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// choreInterval is how often the leader looks at every sandbox, besides
// each change of the cache.
const choreInterval = time.Second

// chores runs the leader's duties until ctx ends (leadership lost): the
// warm pool, death records, idle expiry, stale bindings, idle volume
// servers, and what crashed snapshots left. Each is idempotent: a leader that changes in the middle
// of one does no harm.
func (m *Manager) chores(ctx context.Context) {
	t := time.NewTicker(choreInterval)
	defer t.Stop()
	var swept time.Time
	for {
		if m.cfg.WarmPool > 0 {
			m.refillPool(ctx)
		}
		m.recordDeaths(ctx)
		m.expire(ctx)
		if m.cfg.VolumeClass != "" {
			m.stopIdleServers(ctx, time.Now())
		}
		if m.snaps != nil && time.Since(swept) > snapSweepInterval {
			swept = time.Now()
			if n, err := m.snaps.sweep(swept); err != nil || n > 0 {
				m.log.Info("swept the snapshot directory", "removed", n, "error", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.changed():
			// Coalesce bursts of changes (a Pod's status updates).
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

// recordDeaths writes the reason of each newly dead sandbox on its Pod (so
// every replica reports the same one once the kubelet has torn the Pod
// down), then deletes the Pod, keeping its finalizer: the sandbox stays
// visible as dead, using nothing, until it is replaced or expires.
func (m *Manager) recordDeaths(ctx context.Context) {
	for _, p := range m.userPods() {
		if p.Annotations[annDeadReason] != "" || p.Annotations[annDeleting] != "" {
			continue
		}
		reason := deathOf(p)
		if reason == "" {
			continue
		}
		if reason == stoppedByNode {
			msg, wait := m.evictionMessage(ctx, p)
			if wait {
				continue // the kubelet's event may follow the Pod's phase
			}
			if msg != "" {
				reason = "its pod was evicted: " + msg
			}
		}
		id := p.Labels[labelSandboxID]
		if err := m.patchAnnotations(ctx, id, map[string]string{annDeadReason: reason}); err != nil {
			if !apierrors.IsNotFound(err) && ctx.Err() == nil {
				m.log.Warn("recording a sandbox's death", "sandbox_id", id, "error", err)
			}
			continue
		}
		m.log.Warn("sandbox died", "sandbox_id", id, "tenant", p.Annotations[annTenant], "user_id", p.Annotations[annUserID], "reason", reason)
		m.publish(p, core.LifecycleDied, reason)
		if p.DeletionTimestamp == nil {
			m.deletePod(ctx, p)
		}
	}
}

// expire removes the sandboxes whose idle TTL has passed (dead ones too:
// their record has been kept long enough), pool Pods left half shaped
// (shape.go), and bindings left naming no Pod.
func (m *Manager) expire(ctx context.Context) {
	now := time.Now()
	for _, p := range m.userPods() {
		if p.Annotations[annDeleting] != "" {
			m.finishRemoval(ctx, p)
			continue
		}
		if p.Annotations[annShaping] != "" {
			// Claimed from the pool, being shaped (shape.go): its
			// claimant's, or, long marked, left by a replica that stopped.
			if shapingStaleAt(p, now) {
				m.removeHalfShaped(ctx, p, now)
			}
			continue
		}
		ttl := m.idleTTLOf(p)
		deadline := m.lastActive(p).Add(ttl + m.expiryGrace(p))
		if m.cfg.MaxLifetime > 0 {
			if created := parseTime(p.Annotations[annCreatedAt]); !created.IsZero() && now.After(created.Add(m.cfg.MaxLifetime)) {
				m.log.Info("sandbox reached its maximum lifetime", "sandbox_id", p.Labels[labelSandboxID], "max_lifetime", m.cfg.MaxLifetime)
				if m.removePod(ctx, p, "maximum lifetime reached") == nil {
					m.publish(p, core.LifecycleExpired, fmt.Sprintf("maximum lifetime of %v reached", m.cfg.MaxLifetime))
				}
				continue
			}
		}
		if now.Before(deadline) || m.starting(p, now) {
			continue
		}
		// Read it back first: another replica's recent write of the last
		// activity must win over our cached copy.
		fresh, err := m.cfg.Client.CoreV1().Pods(m.cfg.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			continue
		}
		if now.Before(m.lastActive(fresh).Add(ttl + m.expiryGrace(fresh))) {
			continue
		}
		if fresh.Annotations[annHibernating] != "" {
			// Being hibernated (by this pass's hibernateInBackground, or
			// another's): its Pod stops being ready as it goes, which must
			// not make it an expired sandbox; finishHibernations ends a
			// hibernation left half done.
			continue
		}
		if _, dead, _, ready := podState(fresh); !dead && ready && m.onIdleOf(fresh.Annotations) == core.OnIdleHibernate {
			m.hibernateInBackground(ctx, fresh, fmt.Sprintf("idle for %v", ttl))
			continue
		}
		m.log.Info("sandbox expired", "sandbox_id", fresh.Labels[labelSandboxID], "idle_ttl", ttl,
			"tenant", fresh.Annotations[annTenant], "user_id", fresh.Annotations[annUserID])
		if m.removePod(ctx, fresh, "idle TTL expired") == nil {
			m.publish(fresh, core.LifecycleExpired, fmt.Sprintf("idle for %v", ttl))
		}
	}
	m.finishHibernations(ctx)
	m.expireHibernated(ctx)
	m.gcClaims(ctx)
	m.gcBindings(ctx)
}

// starting reports whether Pod p's sandbox is still starting: neither
// ready nor dead nor being removed, and created within StartTimeout. Its
// acquire is waiting for it (awaitReady, bounded by StartTimeout), and
// touches it once it is ready: a start slower than the idle TTL (a loaded
// node, a short TTL) must not expire the sandbox before it has served its
// first caller, who would get NOT_FOUND for the sandbox just made for it.
func (m *Manager) starting(p *corev1.Pod, now time.Time) bool {
	gone, dead, _, ready := podState(p)
	return !gone && !dead && !ready && now.Sub(p.CreationTimestamp.Time) < m.cfg.StartTimeout
}

// hibernateInBackground hibernates Pod p's sandbox on its own goroutine
// (a snapshot takes up to snapshotTimeout), once at a time per sandbox.
func (m *Manager) hibernateInBackground(ctx context.Context, p *corev1.Pod, why string) {
	id := p.Labels[labelSandboxID]
	m.mu.Lock()
	if m.hibernating[id] {
		m.mu.Unlock()
		return
	}
	m.hibernating[id] = true
	m.mu.Unlock()
	m.done.Add(1)
	go func() {
		defer m.done.Done()
		defer func() {
			m.mu.Lock()
			delete(m.hibernating, id)
			m.mu.Unlock()
		}()
		if _, err := m.hibernatePod(ctx, p, why); err != nil && ctx.Err() == nil {
			m.log.Warn("hibernating a sandbox; the leader tries again", "sandbox_id", id, "error", err)
		}
	}()
}

// hibernationStall is how long a hibernation or wake may show on its Pod
// before the leader finishes it: its replica died.
const hibernationStall = snapshotTimeout + time.Minute

// finishHibernations finishes hibernations and wakes whose replica died
// (their Pod still says so well after they began); each step is
// idempotent (hibernate.go).
func (m *Manager) finishHibernations(ctx context.Context) {
	if !m.claims() {
		return
	}
	for _, p := range m.userPods() {
		if p.Annotations[annDeleting] != "" {
			continue
		}
		if _, dead, _, ready := podState(p); dead || !ready {
			continue
		}
		switch {
		case p.Annotations[annHibernating] != "" && time.Since(hibernatingSince(p)) > hibernationStall:
			m.hibernateInBackground(ctx, p, "finishing a hibernation its replica left")
		case p.Annotations[annWaking] != "" && time.Since(p.CreationTimestamp.Time) > hibernationStall:
			if _, err := m.finishWake(ctx, p); err != nil && ctx.Err() == nil {
				m.log.Warn("finishing a wake its replica left", "sandbox_id", p.Labels[labelSandboxID], "error", err)
			}
		}
	}
}

// expireHibernated deletes the hibernated sandboxes kept HibernatedTTL,
// or past MaxLifetime.
func (m *Manager) expireHibernated(ctx context.Context) {
	for _, c := range m.hibernatedClaims() {
		rec, _ := parseHibRecord(c.Annotations[annHibernated])
		why := ""
		switch created := parseTime(c.Annotations[annCreatedAt]); {
		case !rec.HibernatedAt.IsZero() && time.Since(rec.HibernatedAt) >= m.cfg.HibernatedTTL:
			why = fmt.Sprintf("hibernated for %v", m.cfg.HibernatedTTL)
		case m.cfg.MaxLifetime > 0 && !created.IsZero() && time.Since(created) >= m.cfg.MaxLifetime:
			why = fmt.Sprintf("maximum lifetime of %v reached", m.cfg.MaxLifetime)
		default:
			continue
		}
		if _, err := m.pods.Pods(m.cfg.Namespace).Get(c.Name); err == nil {
			continue // being woken
		}
		m.removeHibernated(ctx, c, why)
		m.publishClaim(c, core.LifecycleExpired, why)
	}
}

// gcBindings deletes bindings whose sandbox Pod is gone for good (deleted
// and its record expired), a minute after they last changed.
func (m *Manager) gcBindings(ctx context.Context) {
	ls, _ := m.leases.Leases(m.cfg.Namespace).List(labels.Everything())
	for _, l := range ls {
		if l.Labels[labelUser] == "" {
			continue // the leader election's lease
		}
		id := ptr.Deref(l.Spec.HolderIdentity, "")
		if _, err := m.pods.Pods(m.cfg.Namespace).Get(podName(id)); err == nil {
			continue
		}
		if m.claims() {
			if c, err := m.pvcs.PersistentVolumeClaims(m.cfg.Namespace).Get(podName(id)); err == nil && c.Annotations[annHibernated] != "" {
				continue // hibernated: still the user's
			}
		}
		changed := l.CreationTimestamp.Time
		if l.Spec.AcquireTime != nil && l.Spec.AcquireTime.After(changed) {
			changed = l.Spec.AcquireTime.Time
		}
		if time.Since(changed) < time.Minute {
			continue
		}
		m.deleteBinding(ctx, l.Name, l.ResourceVersion)
	}
}

// deleteBinding deletes a binding if it is still at resourceVersion rv.
func (m *Manager) deleteBinding(ctx context.Context, name, rv string) {
	err := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace).Delete(ctx, name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
		m.log.Warn("deleting a user's binding", "binding", name, "error", err)
	}
}

// evictionWait is how long after its containers ended the leader looks
// for the Evicted event of a Pod its node stopped, before it records the
// death without the eviction's message.
const evictionWait = 5 * time.Second

// evictionMessage is the message of Pod p's Evicted event (the kubelet's
// reason: "Usage of EmptyDir volume … exceeds the limit", "The node was
// low on resource: memory. …"), made valid UTF-8 and cut at 256 bytes, or
// "" when there is none; wait says to look again later: there is none yet
// and p's containers ended less than evictionWait ago. A kubelet that
// evicts a Pod whose containers exit 0 on SIGTERM writes the reason only
// there, not in the Pod's status. One bounded List per call.
func (m *Manager) evictionMessage(ctx context.Context, p *corev1.Pod) (msg string, wait bool) {
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	list, err := m.cfg.Client.CoreV1().Events(p.Namespace).List(lctx, metav1.ListOptions{
		FieldSelector: fields.AndSelectors(
			fields.OneTermEqualSelector("involvedObject.uid", string(p.UID)),
			fields.OneTermEqualSelector("reason", "Evicted")).String(),
		Limit: 10,
	})
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn("reading a stopped pod's events", "pod", p.Name, "error", err)
		}
	} else {
		var newest *corev1.Event
		for i := range list.Items {
			if e := &list.Items[i]; newest == nil || eventTime(e).After(eventTime(newest)) {
				newest = e
			}
		}
		if newest != nil && newest.Message != "" {
			return truncate(strings.ToValidUTF8(strings.TrimSpace(newest.Message), "\uFFFD"), 256), false
		}
	}
	return "", time.Since(endedAt(p)) < evictionWait
}

// eventTime is when event e last happened, as its writer recorded it.
func eventTime(e *corev1.Event) time.Time {
	for _, t := range []time.Time{e.EventTime.Time, e.LastTimestamp.Time, e.FirstTimestamp.Time, e.CreationTimestamp.Time} {
		if !t.IsZero() {
			return t
		}
	}
	return time.Time{}
}

// endedAt is when the last of Pod p's containers ended (zero if none
// says so).
func endedAt(p *corev1.Pod) time.Time {
	var end time.Time
	for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		if t := cs.State.Terminated; t != nil && t.FinishedAt.After(end) {
			end = t.FinishedAt.Time
		}
	}
	return end
}
