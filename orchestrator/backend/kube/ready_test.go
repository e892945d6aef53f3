package kube

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// TestAwaitReadyAfterTheLastChange: a Pod that became ready between the
// caller's read and the wait, with no change of the cache after it (it was
// the namespace's only Pod), is seen ready, not waited on until the start
// timeout. CI saw that lost change fail an Acquire after 30 s.
func TestAwaitReadyAfterTheLastChange(t *testing.T) {
	m, _, store := storeManager(t, "ready-test")
	m.cfg.StartTimeout = 20 * time.Second
	ready := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podName("sb-ready"), Namespace: "ready-test", UID: "u-1",
			Labels: map[string]string{labelManaged: managedBy, labelSandboxID: "sb-ready"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "198.18.0.1",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	if err := store.Add(ready); err != nil {
		t.Fatal(err)
	}
	stale := ready.DeepCopy()
	stale.Status = corev1.PodStatus{Phase: corev1.PodPending}
	p, err := m.awaitReady(t.Context(), stale) // no change will be notified
	if err != nil {
		t.Fatalf("awaitReady of a ready Pod read while pending: %v", err)
	}
	if p.UID != stale.UID || p.Status.Phase != corev1.PodRunning {
		t.Fatalf("awaitReady = pod %s in phase %s; want pod %s running", p.UID, p.Status.Phase, stale.UID)
	}
}

// TestAwaitReadyTimeoutSaysWhy: a Pod the scheduler cannot place fails
// its start with UNAVAILABLE ("try again": the node may come back, the
// cluster may grow) and the scheduler's words.
func TestAwaitReadyTimeoutSaysWhy(t *testing.T) {
	m, _, store := storeManager(t, "ready-test")
	m.cfg.StartTimeout = 2 * time.Second
	const why = "0/2 nodes are available: 1 node(s) had volume node affinity conflict, 1 node(s) were unschedulable."
	pending := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podName("sb-pending"), Namespace: "ready-test", UID: "u-2",
			Labels: map[string]string{labelManaged: managedBy, labelSandboxID: "sb-pending"}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: why}}},
	}
	if err := store.Add(pending); err != nil {
		t.Fatal(err)
	}
	_, err := m.awaitReady(t.Context(), pending)
	if core.ClassOf(err) != core.ErrUnavailable || !strings.Contains(err.Error(), "not scheduled: "+why) {
		t.Fatalf("awaitReady of an unschedulable Pod = %v; want UNAVAILABLE with the scheduler's message", err)
	}
}

// TestAwaitReadyImageNeverPull: a Pod whose image is not on its node, under
// pull policy Never, fails its caller at once (UNAVAILABLE, the kubelet's
// words), not after the start timeout: no wait brings the image.
func TestAwaitReadyImageNeverPull(t *testing.T) {
	m, _, store := storeManager(t, "ready-test")
	m.cfg.StartTimeout = 10 * time.Minute // a wait would outlast the test's timeout
	const why = `Container image "sandbox:v9" is not present with pull policy of Never`
	pending := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podName("sb-noimage"), Namespace: "ready-test", UID: "u-3",
			Labels: map[string]string{labelManaged: managedBy, labelSandboxID: "sb-noimage"}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{{Name: containerIO,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull", Message: why}}}}},
	}
	if err := store.Add(pending); err != nil {
		t.Fatal(err)
	}
	_, err := m.awaitReady(t.Context(), pending)
	if core.ClassOf(err) != core.ErrUnavailable || !strings.Contains(err.Error(), "ErrImageNeverPull: "+why) || !strings.Contains(err.Error(), "cannot start") {
		t.Fatalf("awaitReady of a Pod whose image is never pulled = %v; want UNAVAILABLE at once, with the kubelet's message", err)
	}
}

// TestAwaitReadyPastAStaleCache: a wake's new Pod is awaited while the
// cache still shows the hibernated Pod it replaced (the wake waited only
// for the API server to drop it): that old Pod does not make the sandbox
// "not found"; the API server's answer is followed.
func TestAwaitReadyPastAStaleCache(t *testing.T) {
	m, cs, store := storeManager(t, "ready-test")
	m.cfg.StartTimeout = 20 * time.Second
	labels := map[string]string{labelManaged: managedBy, labelSandboxID: "sb-woken"}
	old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: podName("sb-woken"), Namespace: "ready-test", UID: "u-old",
		Labels: labels, Annotations: map[string]string{annDeleting: hibernatedMark}}}
	if err := store.Add(old); err != nil {
		t.Fatal(err)
	}
	created, err := cs.CoreV1().Pods("ready-test").Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podName("sb-woken"), Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: containerSandbox, Image: "sandbox:test"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := created.DeepCopy()
	ready.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "198.18.0.2",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if _, err := cs.CoreV1().Pods("ready-test").UpdateStatus(t.Context(), ready, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := m.awaitReady(t.Context(), created) // created: as Create answered, pending
	if err != nil {
		t.Fatalf("awaitReady of a new Pod while the cache shows the old one: %v", err)
	}
	if p.UID != created.UID || p.Status.Phase != corev1.PodRunning {
		t.Fatalf("awaitReady = pod %s in phase %s; want pod %s running", p.UID, p.Status.Phase, created.UID)
	}
}
