package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// Hibernation on the real nodes (orchestrator/backend/kube/hibernate.go):
// replicas with --kube-storage-class give each sandbox a claim of the
// cluster's local volumes for its /io and /workspace. Hibernating deletes
// the Pod and keeps the claim; any use through any replica wakes it in a
// new Pod on the same claim (the real scheduler places it on the volume's
// node), with the globals restored as on Docker (hibSetup, hibCheck). The
// leader hibernates an idle sandbox; deleting a hibernated sandbox deletes
// its claim.
func kubeHibernation(t *testing.T, k *kubeEnv) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	class := "--kube-storage-class=" + k.cluster.StorageClass
	metricsFlags := []string{"--metrics-listen", "127.0.0.1:0"}
	a, b := k.replica(t, "hib-a", append(metricsFlags, class)...), k.replica(t, "hib-b", append(metricsFlags, class)...)
	// Each replica's /metrics; the sandboxes by state are the leader's
	// alone, so their sum over the replicas counts each sandbox once.
	urls := metricsURLs(t, a, b)
	sandboxesIn := func(state string) float64 {
		var n float64
		for _, u := range urls {
			n += value(scrape(t, ctx, u), "sandboxd_sandboxes", "state", state)
		}
		return n
	}
	ca, _ := a.client(t)
	cb, _ := b.client(t)
	claims := k.cs.CoreV1().PersistentVolumeClaims(kubeNamespace)
	podGone := func(id string) {
		t.Helper()
		name := "sbx-" + strings.TrimPrefix(id, "sb-")
		if !pollUntil(time.Minute, func() bool {
			_, err := k.cs.CoreV1().Pods(kubeNamespace).Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}) {
			t.Fatalf("the pod of hibernated sandbox %s is still there after a minute", id)
		}
	}

	sbID := acquire(t, ctx, ca, "kube-hib").GetSandbox().GetSandboxId()
	defer deleteQuietly(ca, sbID)
	if o, _ := execOut(t, ctx, ca, sbID, "setup", hibSetup); o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_OK {
		t.Fatalf("setup: %+v %v", o.done, o.errs)
	}
	want, _ := execOut(t, ctx, ca, sbID, "check-0", hibCheck)
	if want.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_OK || want.stdout == "" {
		t.Fatalf("check: %+v %v", want.done, want.errs)
	}
	claimName := "sbx-" + strings.TrimPrefix(sbID, "sb-")
	if c, err := claims.Get(ctx, claimName, metav1.GetOptions{}); err != nil || c.Spec.VolumeName == "" {
		t.Fatalf("the sandbox's claim %s: %v (bound to %q)", claimName, err, c.Spec.VolumeName)
	}

	// A command running when the hibernation is asked for ends first (the
	// snapshot queues behind it), and its caller gets all of it.
	slow, err := ca.Execute(ctx, &sandboxv1.ExecuteRequest{SandboxId: sbID, CommandId: "slow", Code: "import time; time.sleep(2); print('slept')"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := slow.Recv(); err != nil {
		t.Fatalf("the slow command's first event: %v", err)
	}
	slowDone := make(chan outcome, 1)
	go func() {
		evs, err := recvEvents(slow)
		if err != nil {
			t.Errorf("the slow command's stream across the hibernation: %v", err)
		}
		slowDone <- outcomeOf(evs)
	}()
	hib, err := ca.HibernateSandbox(ctx, &sandboxv1.HibernateSandboxRequest{SandboxId: sbID})
	if err != nil {
		t.Fatalf("HibernateSandbox: %v", err)
	}
	if o := <-slowDone; o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_OK || o.stdout != "slept\n" {
		t.Fatalf("a command running at the hibernation: %+v, stdout %q", o.done, o.stdout)
	}
	if sb := hib.GetSandbox(); sb.GetState() != sandboxv1.SandboxState_SANDBOX_STATE_HIBERNATED || sb.GetSnapshot().GetLevel() != "globals" || sb.GetSnapshot().GetSizeBytes() <= 0 {
		t.Fatalf("hibernated sandbox: %v", sb)
	}
	podGone(sbID)
	if !pollUntil(30*time.Second, func() bool { return sandboxesIn("hibernated") == 1 }) {
		t.Fatalf("sandboxd_sandboxes{state=hibernated} summed over the replicas = %v; want 1", sandboxesIn("hibernated"))
	}
	// Every replica sees it hibernated; looking does not wake it.
	checkHibernatedSeen(t, ctx, ca, k.sandboxctl, a.addr, sbID)
	checkHibernatedSeen(t, ctx, cb, k.sandboxctl, b.addr, sbID)

	// A command through the other replica wakes it, in a new Pod on the
	// same claim; its started event says how the state came back.
	got, started := execOut(t, ctx, cb, sbID, "check-1", hibCheck)
	checkWoken(t, started, got, want)
	if o, st := execOut(t, ctx, ca, sbID, "after-wake", "open('/workspace/kept.txt').read()"); st.GetWake() != nil || len(o.results) == 0 || o.results[0]["text/plain"] != "'on disk'" {
		t.Fatalf("second command after the wake: wake %v, result %v", st.GetWake(), o.results)
	}
	g, err := ca.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: sbID})
	if err != nil || g.GetSandbox().GetLastWake().GetLevel() != "globals" {
		t.Fatalf("GetSandbox after the wake: last_wake %v, %v", g.GetSandbox().GetLastWake(), err)
	}
	// A command from before the hibernation still replays: /io is kept.
	s, err := ca.StreamCommand(ctx, &sandboxv1.StreamCommandRequest{SandboxId: sbID, CommandId: "check-0"})
	if err != nil {
		t.Fatal(err)
	}
	if o := drain(t, s); o.stdout != want.stdout {
		t.Fatalf("StreamCommand of a command from before the hibernation: %q", o.stdout)
	}

	// Hibernated through one replica, woken by the user's acquire through
	// the other.
	if _, err := cb.HibernateSandbox(ctx, &sandboxv1.HibernateSandboxRequest{SandboxId: sbID}); err != nil {
		t.Fatalf("HibernateSandbox again: %v", err)
	}
	acq := acquire(t, ctx, ca, "kube-hib")
	if acq.GetCreated() || acq.GetSandbox().GetSandboxId() != sbID || acq.GetWoke().GetLevel() != "globals" {
		t.Fatalf("AcquireSandbox of the hibernated sandbox = %v", acq)
	}
	if got, _ := execOut(t, ctx, ca, sbID, "check-2", hibCheck); got.stdout != want.stdout {
		t.Fatalf("globals after the second wake:\n%s\nwant\n%s", got.stdout, want.stdout)
	}

	// Idle: the leader hibernates it (on-idle hibernate, the default).
	if _, err := ca.SetSandboxTimeout(ctx, &sandboxv1.SetSandboxTimeoutRequest{SandboxId: sbID, Timeout: durationpb.New(3 * time.Second)}); err != nil {
		t.Fatalf("SetSandboxTimeout: %v", err)
	}
	if !pollUntil(2*time.Minute, func() bool {
		g, err := cb.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: sbID})
		return err == nil && g.GetSandbox().GetState() == sandboxv1.SandboxState_SANDBOX_STATE_HIBERNATED
	}) {
		t.Fatal("the idle sandbox was not hibernated within 2 minutes of its 3 s idle timeout")
	}
	podGone(sbID)

	// Deleting a hibernated sandbox deletes its claim (the PV is then
	// recycled by the cluster's reclaim).
	if _, err := cb.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: sbID}); err != nil {
		t.Fatalf("DeleteSandbox of a hibernated sandbox: %v", err)
	}
	if !pollUntil(time.Minute, func() bool {
		_, err := claims.Get(ctx, claimName, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}) {
		t.Fatalf("claim %s still there a minute after its sandbox was deleted", claimName)
	}
	if _, err := ca.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: sbID}); err == nil {
		t.Fatal("GetSandbox of a deleted hibernated sandbox succeeded")
	}
}
