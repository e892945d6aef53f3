package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	corev1 "k8s.io/api/core/v1"

	"github.com/sandboxd/sandboxd/internal/kubetest/node"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// oomLimit is the memory limit of the sandboxes the OOM scenarios fill.
const oomLimit = 256 << 20

// allocatePython is Python that allocates and touches n chunks of chunkMiB
// each, then prints how much it holds ("ALLOCATED <MiB> MiB").
func allocatePython(n, chunkMiB int64) string {
	return fmt.Sprintf(`chunks = []
for _ in range(%d):
    b = bytearray(%d << 20)
    for i in range(0, len(b), 4096):
        b[i] = 1
    chunks.append(b)
print(f"ALLOCATED {len(chunks) * %d} MiB", flush=True)
`, n, chunkMiB, chunkMiB)
}

// allocateTwiceTheLimit allocates twice oomLimit: a line the kernel must
// never let it print.
var allocateTwiceTheLimit = allocatePython(2*oomLimit/(16<<20), 16)

// On a real node the kernel's OOM killer, not a test hook, enforces the
// sandbox's memory limit (the cgroup the kubelet and containerd made from
// the Pod's limits). Under cgroup v1, this machine's, it kills one process,
// the one with the highest score: the interpreter allocating past the
// limit. The command ends KILLED with its state lost and a reason that
// names memory; the sandbox lives on with a fresh interpreter (the Pod and
// its containers are not restarted: the io sidecar has a limit of its
// own), and another user's sandbox keeps its globals. (On cgroup v2 a
// kubelet from 1.32 kills the whole container instead, memory.oom.group;
// that is the OOM-killed death of DeadPods.)
func kubeOOMCommand(t *testing.T, k *kubeEnv) {
	ctx := e2eCtx(t)
	d := k.replica(t, "oom-a")
	c, _ := d.client(t)
	other := acquire(t, ctx, c, "oom-bystander").GetSandbox().GetSandboxId()
	defer deleteQuietly(c, other)
	mustOK(t, execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: other, Code: "x = 42"}), "x = 42")
	r, err := c.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: "oom-user", Options: &sandboxv1.SandboxOptions{
		Limits: &sandboxv1.ResourceLimits{MemoryBytes: oomLimit}}})
	if err != nil {
		t.Fatalf("AcquireSandbox: %v", err)
	}
	id := r.GetSandbox().GetSandboxId()
	defer deleteQuietly(c, id)
	mustOK(t, execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: "x = 1"}), "x = 1")

	o, err := runCollect(ctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: allocateTwiceTheLimit, Timeout: durationpb.New(2 * time.Minute)})
	if err != nil {
		t.Fatalf("allocating twice the limit: %v", err)
	}
	if strings.Contains(o.stdout, "ALLOCATED") {
		t.Fatalf("the sandbox allocated twice its %d MiB limit: %q", oomLimit>>20, o.stdout)
	}
	if o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_KILLED || !o.done.GetStateLost() || !strings.Contains(o.done.GetReason(), "memory") {
		t.Errorf("allocating past the limit: done %v, errors %v; want KILLED, state lost, a reason naming memory", o.done, o.errs)
	}
	t.Logf("the OOM-killed command: %s (%s)", o.done.GetStatus(), o.done.GetReason())

	o = execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: "x"})
	if len(o.errs) != 1 || o.errs[0].GetEname() != "NameError" {
		t.Errorf("x after the OOM kill: %v %v; want NameError (a fresh interpreter)", o.results, o.errs)
	}
	mustOK(t, execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: "y = 2"}), "y = 2 after the OOM kill")
	g, err := c.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: id})
	if err != nil || g.GetSandbox().GetState() == sandboxv1.SandboxState_SANDBOX_STATE_DEAD {
		t.Errorf("the sandbox after its command's OOM kill: %v, %v; want it alive", g.GetSandbox(), err)
	}
	p := k.podOf(t, ctx, id)
	for _, s := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if s.RestartCount != 0 {
			t.Errorf("container %s of the sandbox's pod restarted %d times (%s); want an OOM kill of the interpreter alone", s.Name, s.RestartCount, containerStateOf(s))
		}
	}
	if o := execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: other, Code: "x"}); len(o.results) != 1 || o.results[0]["text/plain"] != "42" {
		t.Errorf("the other user's sandbox after the OOM kill: %v %v; want its x, 42", o.results, o.errs)
	}
}

// oomKillSandboxContainer makes the kernel OOM-kill the whole sandbox
// container of sandbox id on a real node (cgroup v1): the command steers
// the OOM killer's choice to the driver, the container's first process,
// by raising its score to the maximum and lowering the interpreter's (a
// process may lower its score back to what its runtime could enforce;
// runc here runs without CAP_SYS_RESOURCE, as docs/kubernetes.md says), then
// allocates past the limit. The driver's death ends the container; the
// runtime reports it OOMKilled, and the kubelet restarts it. What the
// sandbox then is, the caller checks.
func oomKillSandboxContainer(t *testing.T, ctx context.Context, c sandboxv1.SandboxServiceClient, id string) {
	t.Helper()
	code := `def adj(pid):
    with open(f"/proc/{pid}/oom_score_adj") as f:
        return f.read().strip()
before = adj("self")
try:
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("0")
    with open("/proc/1/oom_score_adj", "w") as f:
        f.write("1000")
except OSError as e:
    print(f"NOT STEERED from {before}: {e}", flush=True)
    raise SystemExit(1)
print(f"STEERED {before} -> {adj('self')}, driver {adj(1)}", flush=True)
` + allocateTwiceTheLimit
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	o, err := runCollect(cctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: code, Timeout: durationpb.New(time.Minute)})
	if strings.Contains(o.stdout, "NOT STEERED") {
		t.Fatalf("could not steer the OOM killer to the driver: %q (this test needs a runtime without CAP_SYS_RESOURCE, as this machine's)", o.stdout)
	}
	if strings.Contains(o.stdout, "ALLOCATED") {
		t.Fatalf("the sandbox allocated twice its %d MiB limit: %q", oomLimit>>20, o.stdout)
	}
	t.Logf("the command that filled the container: %q, done %v, stream error %v", o.stdout, o.done, err)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "died before the command finished") {
		t.Errorf("the command whose container was OOM-killed ended with %v; want FAILED_PRECONDITION saying the sandbox died", err)
	}
}

// pressureLimit is the memory limit of the sandbox that puts its node under
// memory pressure, pressureHeld what it allocates and holds, and
// pressureMargin how far below the machine's available memory its node's
// eviction threshold is moved: the sandbox crosses it by 3 GiB, room for
// the rest of the machine freeing memory meanwhile.
const (
	pressureLimit  = 6 << 30
	pressureHeld   = 5 << 30
	pressureMargin = 2 << 30
)

// pressNode puts the node of sandbox id (Pod p) under real memory
// pressure: its kubelet's memory.available threshold is moved to just
// below what the machine has available (node.SetMemoryEviction: the
// signal is the machine's, shared by both nodes), and the sandbox
// allocates and holds pressureHeld. The kubelet's eviction manager evicts
// the Pod (another Pod on the node may go first: none exceeds its memory
// request, so they rank alike). The threshold is put back when the
// subtest ends.
func pressNode(t *testing.T, ctx context.Context, k *kubeEnv, c sandboxv1.SandboxServiceClient, id string, p *corev1.Pod) {
	t.Helper()
	name := p.Spec.NodeName
	avail, err := node.MemoryAvailable()
	if err != nil {
		t.Fatal(err)
	}
	threshold := avail - pressureMargin
	if threshold < 1<<30 {
		t.Fatalf("the machine has %d MiB available; putting a node under memory pressure needs more than %d MiB", avail>>20, (pressureMargin+1<<30)>>20)
	}
	if err := k.cluster.SetMemoryEviction(ctx, name, threshold); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := k.cluster.SetMemoryEviction(context.Background(), name, 0); err != nil {
			t.Errorf("putting node %s's eviction threshold back: %v", name, err)
		}
	})
	t.Logf("node %s evicts below %d MiB available (the machine has %d MiB)", name, threshold>>20, avail>>20)
	code := allocatePython(pressureHeld/(64<<20), 64) + "import time\ntime.sleep(150)\nprint('NOT EVICTED', flush=True)\n"
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	start := time.Now()
	o, err := runCollect(cctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: code, Timeout: durationpb.New(3 * time.Minute)})
	if strings.Contains(o.stdout, "NOT EVICTED") {
		t.Fatalf("the sandbox held %d MiB for 150 s on a node evicting below %d MiB available, and was not evicted", pressureHeld>>20, threshold>>20)
	}
	t.Logf("the command under memory pressure, %v: %q, done %v, stream error %v", time.Since(start).Round(time.Second), o.stdout, o.done, err)
	// The io sidecar goes with the Pod; sandboxd waits a moment for the
	// Pod's status rather than answer "try again".
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "died before the command finished") {
		t.Errorf("the command of the evicted sandbox ended with %v; want FAILED_PRECONDITION saying the sandbox died", err)
	}
}
