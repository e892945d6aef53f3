package kube

import (
	"cmp"
	"context"
	"encoding/json"
	"maps"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// The warm pool: started Pods with no user yet (label pool=true), kept at
// Config.WarmPool by the leader. Any replica claims one for a new user with
// a conditional update of its labels and annotations: the update carries
// the resourceVersion the replica saw, so of two replicas claiming the same
// Pod one gets a Conflict and tries the next. No Pod is claimed twice. A
// claim with env then shapes the Pod before it is handed out (shape.go).

// claim takes a ready pool Pod for the user of s, or returns nil when the
// pool has none to give.
func (m *Manager) claim(ctx context.Context, s podSpec) *corev1.Pod {
	pods := m.cfg.Client.CoreV1().Pods(m.cfg.Namespace)
	for _, p := range m.readyPool() {
		// A Conflict means the Pod changed since the cache saw it: claimed
		// by another replica (then it is no longer in the pool), or only
		// its status updated (then it still is, and the claim is retried
		// on the fresh copy).
		for attempt := 0; p != nil && attempt < 3; attempt++ {
			q := p.DeepCopy()
			q.Labels[labelPool] = "false"
			q.Labels[labelUser] = userHash(s.tenant, s.userID)
			if q.Annotations == nil {
				q.Annotations = map[string]string{}
			}
			maps.Copy(q.Annotations, ownerAnnotations(s))
			if have := limitsOf(p); len(s.env) > 0 || have != s.limits {
				// To be shaped (shape.go): its env and limits, and the
				// mark that keeps it from everyone until they are in
				// force.
				if len(s.env) > 0 {
					envJSON, _ := json.Marshal(s.env)
					q.Annotations[annEnv] = string(envJSON)
				}
				limitsJSON, _ := json.Marshal(s.limits)
				q.Annotations[annLimits] = string(limitsJSON)
				q.Annotations[annShaping] = s.now.UTC().Format(time.RFC3339Nano)
			}
			got, err := pods.Update(ctx, q, metav1.UpdateOptions{})
			switch {
			case err == nil:
				m.log.Debug("warm-pool sandbox claimed", "sandbox_id", got.Labels[labelSandboxID])
				return got
			case apierrors.IsConflict(err):
				p = m.stillPooled(ctx, p.Name)
			case apierrors.IsNotFound(err):
				p = nil
			default:
				m.log.Warn("claiming a warm-pool pod", "pod", p.Name, "error", err)
				return nil
			}
		}
	}
	return nil
}

// stillPooled reads Pod name back from the API server and returns it if it
// is still a ready, unclaimed pool Pod.
func (m *Manager) stillPooled(ctx context.Context, name string) *corev1.Pod {
	p, err := m.cfg.Client.CoreV1().Pods(m.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil || p.Labels[labelPool] != "true" {
		return nil
	}
	if gone, dead, _, ready := podState(p); gone || dead || !ready {
		return nil
	}
	return p
}

// readyPool lists the pool's ready Pods, oldest first.
func (m *Manager) readyPool() []*corev1.Pod {
	ps, _ := m.pods.Pods(m.cfg.Namespace).List(labels.SelectorFromSet(labels.Set{labelPool: "true"}))
	ready := ps[:0:0]
	for _, p := range ps {
		if gone, dead, _, ok := podState(p); ok && !gone && !dead {
			ready = append(ready, p)
		}
	}
	slices.SortFunc(ready, byAge)
	return ready
}

// byAge orders Pods oldest first, then by name: the same order on every
// replica.
func byAge(a, b *corev1.Pod) int {
	return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), cmp.Compare(a.Name, b.Name))
}

// refillPool (leader) creates pool Pods up to Config.WarmPool, and deletes
// the pool's dead Pods and any surplus (the newest first).
func (m *Manager) refillPool(ctx context.Context) {
	ps, _ := m.pods.Pods(m.cfg.Namespace).List(labels.SelectorFromSet(labels.Set{labelPool: "true"}))
	var live []*corev1.Pod
	m.mu.Lock()
	for name, at := range m.creating {
		// Counted until the cache shows it, in the pool or already
		// claimed (a claim can come before this loop sees the Pod: it
		// must not hold the refill back), or a minute without it.
		if _, err := m.pods.Pods(m.cfg.Namespace).Get(name); err == nil || time.Since(at) > time.Minute {
			delete(m.creating, name)
		}
	}
	pending := len(m.creating)
	m.mu.Unlock()
	for _, p := range ps {
		if p.DeletionTimestamp != nil {
			continue
		}
		if _, dead, reason, _ := podState(p); dead {
			m.removePooled(ctx, p, "warm-pool pod died: "+reason)
			continue
		}
		live = append(live, p)
	}
	slices.SortFunc(live, byAge)
	for len(live) > m.cfg.WarmPool {
		m.removePooled(ctx, live[len(live)-1], "warm pool above its size")
		live = live[:len(live)-1]
	}
	for n := len(live) + pending; n < m.cfg.WarmPool; n++ {
		s := podSpec{id: core.NewSandboxID(), pool: true, limits: m.cfg.DefaultLimits}
		p, err := m.createPod(ctx, s, buildPod(&m.cfg, s))
		if err != nil {
			if ctx.Err() == nil {
				m.log.Warn("creating a warm-pool pod", "error", err)
			}
			return
		}
		m.mu.Lock()
		m.creating[p.Name] = time.Now()
		m.mu.Unlock()
		m.cfg.Metrics.PoolRefilled()
	}
}
