package kube

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A sandbox whose Pod is still starting is not expired, however short its
// idle TTL: its acquire is waiting for it. On a loaded node a start took
// longer than a 2 s and a 4 s TTL, the leader removed the Pod as idle, and
// the acquire that made it answered NOT_FOUND (TestKube/Webhooks and
// TestKube/IdleTTLAcrossReplicaRestart in a CI run). Once ready, or dead,
// or past StartTimeout, the usual rules hold.
func TestStartingIsNotExpired(t *testing.T) {
	m := &Manager{}
	m.cfg.fillDefaults()
	now := time.Now()
	pod := func(age time.Duration, phase corev1.PodPhase, ready bool, ann map[string]string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(now.Add(-age)), Annotations: ann}}
		p.Status.Phase = phase
		if phase == corev1.PodRunning {
			p.Status.PodIP = "198.18.0.2"
			st := corev1.ConditionFalse
			if ready {
				st = corev1.ConditionTrue
			}
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
		}
		return p
	}
	for _, c := range []struct {
		what string
		p    *corev1.Pod
		want bool
	}{
		{"pending, made 10 s ago", pod(10*time.Second, corev1.PodPending, false, nil), true},
		{"running, not yet ready, made 30 s ago", pod(30*time.Second, corev1.PodRunning, false, nil), true},
		{"ready", pod(10*time.Second, corev1.PodRunning, true, nil), false},
		{"pending past StartTimeout", pod(m.cfg.StartTimeout+time.Second, corev1.PodPending, false, nil), false},
		{"dead while starting", pod(10*time.Second, corev1.PodPending, false, map[string]string{annDeadReason: "its pod was evicted"}), false},
		{"being removed", pod(10*time.Second, corev1.PodPending, false, map[string]string{annDeleting: "idle TTL expired"}), false},
	} {
		if got := m.starting(c.p, now); got != c.want {
			t.Errorf("%s: starting = %v; want %v", c.what, got, c.want)
		}
	}
}
