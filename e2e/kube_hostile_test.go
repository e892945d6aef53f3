package e2e

// The hostile-/io suite (hostile_test.go) on the Kubernetes backend: the
// same cases, through a replica whose sandboxes' /io is read by each Pod's
// io sidecar. What differs is how sandboxd is started (a replica, restarted
// on the same address after a SIGKILL), what is left after a deletion (the
// Pod on the API server, its containers on the node) and what is checked
// of the Pods: the attacked Pod's io sidecar does not crash-loop, and the
// other user's Pod is untouched.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// kubeSidecar is the io sidecar's container name in a sandbox Pod
// (orchestrator/backend/kube/pod.go, a native sidecar: an init container).
const kubeSidecar = "io"

// kubeHostile is the hostile-/io suite's Kubernetes backend; name names
// the run in the summary.
func kubeHostile(k *kubeEnv, name string) *hostileBackend {
	// The io sidecar's container of each attacked sandbox before the
	// attack: the Pod's status may not yet count a restart the node made.
	var (
		mu       sync.Mutex
		sidecars = map[string]string{}
	)
	return &hostileBackend{
		name:  name,
		start: func(t *testing.T, extra ...string) *daemon { return k.replica(t, "hostile-a", extra...) },
		skip: func(c string) string {
			switch c {
			case "io-full/fill":
				// The kubelet enforces an emptyDir's sizeLimit by evicting
				// the Pod, not by ENOSPC: /io filled to ENOSPC would fill
				// the node's disk first.
				return "/io is an emptyDir whose sizeLimit the kubelet enforces by eviction, not ENOSPC: writing until ENOSPC fills the node's disk"
			}
			return ""
		},
		// The Pod goes once its containers have stopped (its termination
		// grace period is 5 s) and the replica has removed its finalizer.
		// The kubelet's teardown, after the deletion sandboxd bounds.
		cleanWithin: kubeTeardownWithin,
		beforeDelete: func(hc *hostileCase, sb string) func(context.Context) []string {
			mu.Lock()
			first := sidecars[sb]
			mu.Unlock()
			return kubeBeforeDelete(k, hc, sb, first)
		},
		afterCase: func(hc *hostileCase) { kubeOthersUntouched(k, hc) },
		acquired: func(hc *hostileCase, sb string) {
			ctx, cancel := context.WithTimeout(hc.ctx, 30*time.Second)
			defer cancel()
			pod := "sbx-" + strings.TrimPrefix(sb, "sb-")
			var id string
			if !pollUntil(30*time.Second, func() bool { id = k.nodes.containerID(ctx, pod, kubeSidecar); return id != "" }) {
				hc.t.Fatalf("no node runs the io sidecar of pod %s", pod)
			}
			mu.Lock()
			sidecars[sb] = id
			mu.Unlock()
		},
	}
}

// kubeBeforeDelete checks the attacked sandbox's Pod before its deletion:
// a call through its io sidecar is answered, the sidecar is ready and was
// never restarted (if it was, that is a failure, and GetSandbox must still
// answer promptly); it returns what lists the sandbox's leftovers: the Pod,
// and the sandbox's and the sidecar's containers on the node.
func kubeBeforeDelete(k *kubeEnv, hc *hostileCase, sb, firstSidecar string) func(context.Context) []string {
	t := hc.t
	ctx, cancel := context.WithTimeout(hc.ctx, time.Minute)
	defer cancel()
	name := "sbx-" + strings.TrimPrefix(sb, "sb-")
	// A call through the sidecar first: if the attack killed it, the
	// kubelet has restarted it (and counted that) by the time the call is
	// answered, or the call says the sidecar is unavailable.
	start := time.Now()
	_, lerr := hc.listFiles(sb, "")
	hc.note("ListFiles after the attack: %s in %s", codeOf(lerr), fmtMS(time.Since(start)))
	if c := status.Code(lerr); c == codes.DeadlineExceeded || c == codes.Internal || c == codes.Unknown {
		t.Errorf("ListFiles of the attacked sandbox after the attack: %v; want an answer or a clear status", lerr)
	}
	if status.Code(lerr) == codes.Unavailable {
		// The sidecar is down: it must come back (a restart, counted
		// below), and sandboxd must then reach it.
		back := pollUntil(hostileCallTimeout, func() bool { _, err := hc.listFiles(sb, ""); return err == nil })
		hc.note("ListFiles answered again %v: %s later", back, fmtMS(time.Since(start)))
		if !back {
			t.Errorf("the attacked sandbox's io sidecar was unavailable after the attack (%v) and did not come back within %v", lerr, hostileCallTimeout)
		}
	}
	var p *corev1.Pod
	var sidecar corev1.ContainerStatus
	if !pollUntil(hostilePrompt, func() bool {
		var err error
		if p, err = k.cs.CoreV1().Pods(kubeNamespace).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return false
		}
		for _, s := range p.Status.InitContainerStatuses {
			if s.Name == kubeSidecar {
				sidecar = s
			}
		}
		return sidecar.Ready
	}) {
		if p == nil {
			t.Errorf("the attacked sandbox's pod %s cannot be read", name)
			return func(context.Context) []string { return nil }
		}
		t.Errorf("the attacked pod's io sidecar is not ready %v after the case (%s)", hostilePrompt, containerStateOf(sidecar))
	}
	s := sidecar
	now := k.nodes.containerID(ctx, p.Name, kubeSidecar)
	if now != firstSidecar && s.RestartCount == 0 {
		// The node restarted it; the Pod's status does not say so yet.
		s.RestartCount = 1
	}
	hc.note("io sidecar: %d restarts", s.RestartCount)
	if s.RestartCount > 0 {
		why := containerStateOf(s)
		hc.mu.Lock()
		hc.notes = append(hc.notes, fmt.Sprintf("%s: the attacked pod's io sidecar restarted %d times (%s)", t.Name(), s.RestartCount, why))
		hc.mu.Unlock()
		t.Errorf("the attacked pod's io sidecar restarted %d times during the case (%s); want it to survive what the sandbox writes", s.RestartCount, why)
		// What sandboxd says of it must still be a prompt, clear answer.
		gctx, gcancel := context.WithTimeout(hc.ctx, hostilePrompt)
		g, err := hc.c.GetSandbox(gctx, &sandboxv1.GetSandboxRequest{SandboxId: sb})
		gcancel()
		hc.note("GetSandbox with the sidecar restarted: %s, state %v (%q)", codeOf(err), g.GetSandbox().GetState(), truncateText(g.GetSandbox().GetStateReason(), 120))
		if err != nil {
			t.Errorf("GetSandbox of the sandbox whose io sidecar restarted: %v", err)
		}
	}
	ids := []string{firstSidecar}
	if now != "" && now != firstSidecar {
		ids = append(ids, now)
	}
	if id := k.nodes.containerID(ctx, p.Name, "sandbox"); id != "" {
		ids = append(ids, id)
	}
	return func(ctx context.Context) []string {
		var left []string
		switch _, err := k.cs.CoreV1().Pods(kubeNamespace).Get(ctx, name, metav1.GetOptions{}); {
		case err == nil:
			left = append(left, "pod "+name)
		case !apierrors.IsNotFound(err):
			left = append(left, fmt.Sprintf("pod %s: %v", name, err))
		}
		for _, id := range ids {
			if !k.nodes.containerGone(ctx, id) {
				left = append(left, "container "+id)
			}
		}
		return left
	}
}

// kubeOthersUntouched checks the other user's Pod after a case: still
// there, not being deleted, none of its containers restarted.
func kubeOthersUntouched(k *kubeEnv, hc *hostileCase) {
	ctx, cancel := context.WithTimeout(hc.ctx, time.Minute)
	defer cancel()
	name := "sbx-" + strings.TrimPrefix(hc.victim, "sb-")
	p, err := k.cs.CoreV1().Pods(kubeNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		hc.t.Errorf("the other user's pod %s: %v", name, err)
		return
	}
	if p.DeletionTimestamp != nil {
		hc.t.Errorf("the other user's pod %s is being deleted", name)
	}
	for _, s := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if s.RestartCount != 0 {
			hc.t.Errorf("the other user's container %s restarted %d times (%s)", s.Name, s.RestartCount, containerStateOf(s))
		}
	}
}

// containerStateOf says how a container last ended and what it does now.
func containerStateOf(s corev1.ContainerStatus) string {
	var parts []string
	if t := s.LastTerminationState.Terminated; t != nil {
		parts = append(parts, fmt.Sprintf("last ended %s, exit %d", t.Reason, t.ExitCode))
	}
	if w := s.State.Waiting; w != nil {
		parts = append(parts, "waiting: "+w.Reason)
	}
	if s.State.Running != nil {
		parts = append(parts, "running")
	}
	return strings.Join(parts, "; ")
}
