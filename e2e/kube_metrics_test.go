package e2e

import (
	"strings"
	"testing"
	"time"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// Per-sandbox metrics on the real nodes come from the kubelet that runs the
// sandbox's Pod (its Summary API: orchestrator/backend/kube/metrics.go),
// read by the replica with its own credentials, authorised by the kubelet
// through the API server (webhook), over TLS checked against the kubelets'
// CA (--kube-kubelet-ca-file). A sandbox that holds 100 MiB, writes a
// 10 MiB file and keeps a thread busy shows all three within its limits;
// sandboxctl top shows it.
func kubeSandboxMetrics(t *testing.T, k *kubeEnv) {
	ctx := e2eCtx(t)
	d := k.replica(t, "metrics-a")
	c, _ := d.client(t)
	r, err := c.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: "metrics-user", Options: &sandboxv1.SandboxOptions{
		Limits: &sandboxv1.ResourceLimits{MemoryBytes: 512 << 20, DiskBytes: 256 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	id := r.GetSandbox().GetSandboxId()
	defer deleteQuietly(c, id)
	mustOK(t, execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: `import threading
held = bytearray(100 << 20)
for i in range(0, len(held), 4096):
    held[i] = 1
with open("/workspace/blob", "wb") as f:
    f.write(b"x" * (10 << 20))
def burn():
    while True:
        pass
threading.Thread(target=burn, daemon=True).start()`}), "hold, write, burn")

	// The kubelet measures volumes every 5 s here and CPU at its
	// housekeeping interval (10 s): wait for a sample with all three.
	var last *sandboxv1.SandboxMetricsSample
	start := time.Now()
	if !pollUntil(90*time.Second, func() bool {
		m, err := c.GetSandboxMetrics(ctx, &sandboxv1.GetSandboxMetricsRequest{SandboxId: id})
		if err != nil {
			t.Fatalf("GetSandboxMetrics: %v", err)
		}
		if n := len(m.GetSamples()); n > 0 {
			last = m.GetSamples()[n-1]
		}
		return last.GetMemoryUsedBytes() >= 100<<20 && last.GetWorkspace().GetUsedBytes() >= 10<<20 && last.GetCpuUsedCores() > 0.1
	}) {
		t.Fatalf("no sample showed 100 MiB held, a 10 MiB file and a busy thread within 90 s; last %v", last)
	}
	t.Logf("a sample with all three after %v: %v", time.Since(start).Round(time.Second), last)
	if last.GetMemoryLimitBytes() != 512<<20 || last.GetCpuLimitCores() != 0.5 || last.GetWorkspace().GetLimitBytes() != 256<<20 ||
		last.GetMemoryUsedBytes() > last.GetMemoryLimitBytes() || last.GetCpuUsedCores() > 0.6 || last.GetPidsLimit() == 0 {
		t.Errorf("sample %v; want the sandbox's limits (512 MiB, 0.5 CPU, 256 MiB of workspace, its pids limit) and use within them", last)
	}
	// The Pod's process count is the kubelet's to give: these nodes'
	// (containerd 1.6's CRI stats, cgroup v1) give none, and it reads 0.
	t.Logf("processes: %d", last.GetPids())
	if time.Since(last.GetTime().AsTime()) > time.Minute {
		t.Errorf("the sample is from %v; want a current one", last.GetTime().AsTime())
	}
	out, errOut, code := sandboxctlRunner(t, ctx, k.sandboxctl, d.addr)("", "top", "--once", id)
	if code != 0 || !strings.Contains(out, id) {
		t.Errorf("sandboxctl top --once %s: exit %d, %s\n%s", id, code, errOut, out)
	}
	t.Logf("sandboxctl top:\n%s", out)
}
