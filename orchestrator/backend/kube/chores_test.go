package kube

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// TestRecordDeathEvictionMessage: a real kubelet that evicts a Pod whose
// containers exit 0 on SIGTERM reports it Succeeded and writes why only in
// an Evicted event. The leader records the death with the event's message;
// without one it waits a few seconds after the containers ended (the event
// may come after the phase), then records that the node stopped the Pod.
// The API server is real (envtest); the Pods' statuses and the events are
// what a kubelet writes.
func TestRecordDeathEvictionMessage(t *testing.T) {
	const ns = "deaths-test"
	m, cs, store := storeManager(t, ns)
	ctx := t.Context()

	// stopped creates a user's Pod that its node stopped, its containers
	// having ended at ended, with an Evicted event saying msg ("": none).
	stopped := func(user string, ended time.Time, msg string) *corev1.Pod {
		t.Helper()
		p, err := cs.CoreV1().Pods(ns).Create(ctx, buildPod(&m.cfg, podSpec{id: core.NewSandboxID(), tenant: "acme", userID: user, now: time.Now()}), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		done := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", FinishedAt: metav1.NewTime(ended)}}
		p.Status = corev1.PodStatus{Phase: corev1.PodSucceeded,
			InitContainerStatuses: []corev1.ContainerStatus{{Name: containerIO, State: done}},
			ContainerStatuses:     []corev1.ContainerStatus{{Name: containerSandbox, State: done}}}
		if p, err = cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if msg != "" {
			// An older event of another reason, and the eviction.
			for _, e := range []struct{ reason, msg string }{{"Killing", "Stopping container sandbox"}, {"Evicted", msg}} {
				if _, err := cs.CoreV1().Events(ns).Create(ctx, &corev1.Event{
					ObjectMeta:     metav1.ObjectMeta{GenerateName: p.Name + "."},
					InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: p.Name, UID: p.UID},
					Reason:         e.reason, Message: e.msg, Type: corev1.EventTypeWarning,
					FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(),
					Source: corev1.EventSource{Component: "kubelet"},
				}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := store.Add(p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	recorded := func(p *corev1.Pod) string {
		t.Helper()
		q, err := cs.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return q.Annotations[annDeadReason]
	}

	const diskMsg = `Usage of EmptyDir volume "workspace" exceeds the limit "64Mi".`
	evicted := stopped("evicted", time.Now(), diskMsg)
	hostile := stopped("hostile", time.Now(), strings.Repeat("é\xff", 300))
	fresh := stopped("fresh", time.Now(), "")
	old := stopped("old", time.Now().Add(-time.Minute), "")
	m.recordDeaths(ctx)

	if got, want := recorded(evicted), "its pod was evicted: "+diskMsg; got != want {
		t.Errorf("recorded death %q; want %q (the Evicted event's message)", got, want)
	}
	if got := recorded(hostile); len(got) > 300 || !utf8.ValidString(got) || !strings.HasPrefix(got, "its pod was evicted: é\uFFFD") {
		t.Errorf("recorded death %q (%d bytes); want the event's message made valid UTF-8 and cut", got, len(got))
	}
	if got := recorded(fresh); got != "" {
		t.Errorf("a pod stopped just now without an event recorded %q; want nothing yet (its event may follow)", got)
	}
	if got := recorded(old); got != stoppedByNode {
		t.Errorf("a pod stopped a minute ago without an event recorded %q; want %q", got, stoppedByNode)
	}
}
