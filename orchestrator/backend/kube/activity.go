package kube

import (
	"context"
	"encoding/json"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Last activity. A sandbox's idle TTL counts from its last use, which any
// replica may see; the time is written back to the Pod (annotation
// last-active) so that it survives the replica, and it is throttled: a
// replica writes a sandbox's time at most once per write interval (the
// smaller of Config.ActivityWriteInterval and a fifth of the sandbox's
// idle TTL), always including a trailing write after the last use. The
// leader expires a sandbox only once its annotated time plus its TTL plus
// that interval has passed, so a use another replica has not written yet
// never lets its sandbox expire; a sandbox thus lives up to one interval
// longer than its TTL (expiryGrace), never shorter.

// activity is one sandbox's last use as this replica knows it.
type activity struct {
	last    time.Time // last use seen here
	written time.Time // last value this replica wrote (or saw on the Pod)
	wrote   time.Time // when it wrote it
	every   time.Duration
}

// touch records a use of sandbox id (Pod p) now.
func (m *Manager) touch(id string, p *corev1.Pod) {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.active[id]
	if a == nil {
		a = &activity{written: parseTime(p.Annotations[annLastActive])}
		m.active[id] = a
	}
	a.last = now
	a.every = m.writeInterval(p)
}

// writeInterval is the throttle of Pod p's last-activity writes.
func (m *Manager) writeInterval(p *corev1.Pod) time.Duration {
	return max(min(m.cfg.ActivityWriteInterval, m.idleTTLOf(p)/5), 100*time.Millisecond)
}

// lastActive is sandbox p's last use: the later of its annotation and
// this replica's record.
func (m *Manager) lastActive(p *corev1.Pod) time.Time {
	t := parseTime(p.Annotations[annLastActive])
	m.mu.Lock()
	if a := m.active[p.Labels[labelSandboxID]]; a != nil && a.last.After(t) {
		t = a.last
	}
	m.mu.Unlock()
	if t.IsZero() {
		t = p.CreationTimestamp.Time
	}
	return t
}

// idleTTLOf is sandbox p's idle TTL: its own, else the server's.
func (m *Manager) idleTTLOf(p *corev1.Pod) time.Duration {
	if d, err := time.ParseDuration(p.Annotations[annIdleTimeout]); err == nil && d > 0 {
		return d
	}
	return m.cfg.IdleTTL
}

// flushTick is how often due last activities are written.
const flushTick = 100 * time.Millisecond

// flushLoop writes due last activities until ctx ends.
func (m *Manager) flushLoop(ctx context.Context) {
	t := time.NewTicker(flushTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.flush(ctx, false)
		}
	}
}

// flush writes the last activities that are due (all newer ones with
// force), each as a merge patch of the one annotation.
func (m *Manager) flush(ctx context.Context, force bool) {
	type write struct {
		id string
		at time.Time
	}
	var due []write
	now := time.Now()
	m.mu.Lock()
	for id, a := range m.active {
		if a.last.After(a.written) && (force || now.Sub(a.wrote) >= a.every) {
			due = append(due, write{id, a.last})
			a.written, a.wrote = a.last, now
		}
	}
	m.mu.Unlock()
	for _, w := range due {
		if err := m.patchAnnotations(ctx, w.id, map[string]string{annLastActive: w.at.UTC().Format(time.RFC3339Nano)}); err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
			m.log.Warn("writing a sandbox's last activity", "sandbox_id", w.id, "error", err)
			m.mu.Lock()
			if a := m.active[w.id]; a != nil {
				a.written = time.Time{} // try again at the next tick
			}
			m.mu.Unlock()
		}
	}
}

// patchAnnotations sets annotations on sandbox id's Pod (a JSON merge
// patch: the other annotations are untouched, and no resourceVersion is
// needed).
func (m *Manager) patchAnnotations(ctx context.Context, id string, ann map[string]string) error {
	_, err := m.patchPod(ctx, id, ann)
	return err
}

// patchPod is patchAnnotations, returning the Pod as the write left it.
func (m *Manager) patchPod(ctx context.Context, id string, ann map[string]string) (*corev1.Pod, error) {
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	return m.cfg.Client.CoreV1().Pods(m.cfg.Namespace).Patch(ctx, podName(id), types.MergePatchType, b, metav1.PatchOptions{})
}

// expiryGrace is how long past its idle TTL the leader waits before it
// expires sandbox p: a use that another replica saw is on the Pod within
// one write interval and a flush tick of it.
func (m *Manager) expiryGrace(p *corev1.Pod) time.Duration {
	return m.writeInterval(p) + 2*flushTick
}
