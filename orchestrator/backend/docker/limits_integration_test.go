package docker

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Real-engine tests of the limits users rely on: each shows the limit
// holding, the message the command gets, and the sandbox working afterwards.

// textOf concatenates a command's stdout and stderr.
func textOf(evs []core.Event) string {
	var b strings.Builder
	for _, e := range evs {
		b.WriteString(e.Text)
	}
	return b.String()
}

// mustRunOK runs code and fails the test unless it ends OK; it returns the
// output.
func mustRunOK(t *testing.T, m *validated, sandboxID, language, code string) string {
	t.Helper()
	evs := runCommand(t, m, sandboxID, core.ExecRequest{Language: language, Code: code})
	if d := lastDone(t, evs); d.Status != "ok" {
		t.Fatalf("%s %q ended %s (%s): %+v", language, code, d.Status, d.Reason, evs)
	}
	return textOf(evs)
}

func TestIntegrationDiskLimit(t *testing.T) {
	const disk = 64 << 20
	m, _, _ := integrationManager(t, func(c *Config) { c.DefaultLimits.DiskBytes = disk })
	res, err := m.Acquire(t.Context(), "it-disk", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sb := res.Sandbox
	if sb.Limits.DiskBytes != disk {
		t.Errorf("limits in force = %+v; want DiskBytes %d", sb.Limits, disk)
	}
	img := filepath.Join(sandboxDir(m.cfg.StateDir, sb.ID), workspaceImage)

	// bash: dd writes until the volume is full and says why it stopped.
	evs := runCommand(t, m, sb.ID, core.ExecRequest{Language: "bash", Code: "dd if=/dev/zero of=/workspace/big bs=1M count=200"})
	if d := lastDone(t, evs); d.Status != "error" || !strings.Contains(textOf(evs), "No space left on device") {
		t.Fatalf("dd past the limit ended %s: %q", d.Status, textOf(evs))
	}
	// Python: the write raises OSError with ENOSPC.
	evs = runCommand(t, m, sb.ID, core.ExecRequest{Code: "open('/workspace/big2', 'wb').write(b'x' * (100 << 20))"})
	var pyErr *core.Event
	for i := range evs {
		if evs[i].Type == "error" {
			pyErr = &evs[i]
		}
	}
	if pyErr == nil || pyErr.EName != "OSError" || !strings.Contains(pyErr.EValue, "No space left on device") {
		t.Fatalf("Python write past the limit: %+v", evs)
	}
	// While full, an upload is refused for what it is.
	_, err = m.Upload(t.Context(), sb.ID, "up.bin", strings.NewReader(strings.Repeat("u", 1<<20)))
	wantClass(t, err, core.ErrResourceExhausted, "no space left on the sandbox's disk")

	// The host gave the sandbox no more than its limit.
	var st syscall.Stat_t
	if err := syscall.Stat(img, &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != disk || st.Blocks*512 > disk {
		t.Errorf("workspace image: size %d, allocated %d; want both <= %d", st.Size, st.Blocks*512, disk)
	}

	// The sandbox keeps working: delete the files and write again.
	out := mustRunOK(t, m, sb.ID, "bash", "rm /workspace/big /workspace/big2 && dd if=/dev/zero of=/workspace/again bs=1M count=8 2>/dev/null && ls -s --block-size=M /workspace/again")
	if !strings.Contains(out, "8M") {
		t.Errorf("write after freeing space: %q", out)
	}
	if out := mustRunOK(t, m, sb.ID, "python", "print(6 * 7)"); out != "42\n" {
		t.Errorf("python after the disk filled: %q", out)
	}

	// Deleting the sandbox unmounts and removes its volumes.
	if err := m.Delete(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(img); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("workspace image after delete: %v", err)
	}
}

// TestIntegrationVolumesRemountedOnRestart: after a host reboot volumes are
// not mounted; reconcile mounts them again and restarts the container, which
// had started on the bare mount points.
func TestIntegrationVolumesRemountedOnRestart(t *testing.T) {
	m1, c, cfg := integrationManager(t)
	ctx := t.Context()
	res, err := m1.Acquire(ctx, "it-remount", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sb := res.Sandbox
	mustRunOK(t, m1, sb.ID, "bash", "echo kept > /workspace/file")
	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}
	// Simulate the reboot: the volumes go, the container stays up on the
	// bare mount points (it keeps its own view of the old mounts, which is
	// what reconcile must not trust).
	if err := unmountVolumes(sandboxDir(cfg.StateDir, sb.ID)); err != nil {
		t.Fatal(err)
	}
	before, err := c.ContainerInspect(ctx, sb.ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := newValidated(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	after, err := c.ContainerInspect(ctx, sb.ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	if after.State.StartedAt == before.State.StartedAt {
		t.Errorf("the container was not restarted after its volumes were remounted")
	}
	if out := mustRunOK(t, m2, sb.ID, "bash", "cat /workspace/file"); out != "kept\n" {
		t.Errorf("workspace after remount: %q", out)
	}
}

func TestIntegrationMemoryLimit(t *testing.T) {
	m, _, _ := integrationManager(t, func(c *Config) { c.DefaultLimits.MemoryBytes = 256 << 20 })
	res, err := m.Acquire(t.Context(), "it-memory", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sb := res.Sandbox
	mustRunOK(t, m, sb.ID, "python", "kept = 1")
	// b'x' * n touches every page, unlike bytearray(n), which the kernel
	// may leave unbacked.
	evs := runCommand(t, m, sb.ID, core.ExecRequest{Code: "hog = b'x' * (512 << 20)"})
	d := lastDone(t, evs)
	// Under runsc the sandbox's memory is gVisor's own, so the kernel kills
	// the whole sandbox, and the driver can only tell that it restarted.
	reason := "out of memory"
	if m.cfg.Runtime == core.RuntimeGVisor {
		reason = "the sandbox restarted"
	}
	if d.Status != "killed" || !d.StateLost || !strings.Contains(d.Reason, reason) {
		t.Fatalf("allocation past the limit ended %s (state lost %v): %q; want killed, %q", d.Status, d.StateLost, d.Reason, reason)
	}
	// A fresh interpreter serves the next command; the old globals are gone.
	evs = runCommand(t, m, sb.ID, core.ExecRequest{Code: "'kept' in globals()"})
	if lastDone(t, evs).Status != "ok" || evs[len(evs)-2].Data["text/plain"] != "False" {
		t.Errorf("after the OOM kill: %+v", evs)
	}
	if got, err := m.Get(t.Context(), sb.ID); err != nil || got.State != core.StateRunning {
		t.Errorf("sandbox after the OOM kill = %+v, %v; want running", got, err)
	}
}

func TestIntegrationForkBombContained(t *testing.T) {
	m, _, _ := integrationManager(t, func(c *Config) {
		c.DefaultLimits.PidsLimit = 64
		if c.Runtime == core.RuntimeGVisor {
			c.DefaultLimits.PidsLimit = core.MinPidsLimitGVisor
		}
	})
	ctx := t.Context()
	bomb, err := m.Acquire(ctx, "it-bomb", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := m.Acquire(ctx, "it-bystander", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	var bombEvs []core.Event
	go func() {
		defer wg.Done()
		bombEvs = runCommand(t, m, bomb.Sandbox.ID, core.ExecRequest{Language: "bash", Code: ":(){ :|:& };:\nwhile :; do sleep 1; done", Timeout: 5 * time.Second})
	}()
	// The bystander keeps working while the bomb runs (and after).
	for i := range 3 {
		if out := mustRunOK(t, m, other.Sandbox.ID, "bash", "echo alive "+strconv.Itoa(i)); out != "alive "+strconv.Itoa(i)+"\n" {
			t.Errorf("bystander during the bomb: %q", out)
		}
	}
	wg.Wait()
	d := lastDone(t, bombEvs)
	t.Logf("fork bomb ended %s after %dms: %s", d.Status, d.DurationMS, d.Reason)
	if d.Status != "timeout" && d.Status != "killed" {
		t.Errorf("fork bomb ended %s (%s); want timeout", d.Status, d.Reason)
	}
	// The bomb's processes died with it: the sandbox forks again.
	out := mustRunOK(t, m, bomb.Sandbox.ID, "bash", "for i in 1 2 3; do /bin/echo -n $i; done; echo")
	if out != "123\n" {
		t.Errorf("after the fork bomb: %q", out)
	}
}

func TestIntegrationCPULimit(t *testing.T) {
	m, _, _ := integrationManager(t)
	res, err := m.Acquire(t.Context(), "it-cpu", core.Options{Limits: core.Limits{NanoCPUs: 500_000_000}})
	if err != nil {
		t.Fatal(err)
	}
	// The kernel's CFS quota of the container's cgroup is what enforces the
	// limit: half of each period. It is read on the host, where it is the
	// same under runc and runsc (gVisor hides it from the sandbox).
	id := res.Sandbox.ContainerID
	var quota, period []byte
	for _, dir := range []string{"/sys/fs/cgroup/cpu/docker/" + id, "/sys/fs/cgroup/cpu,cpuacct/docker/" + id} {
		if quota, err = os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us")); err == nil {
			period, err = os.ReadFile(filepath.Join(dir, "cpu.cfs_period_us"))
			break
		}
	}
	if quota == nil { // cgroup v2
		for _, f := range []string{"/sys/fs/cgroup/system.slice/docker-" + id + ".scope/cpu.max", "/sys/fs/cgroup/docker/" + id + "/cpu.max"} {
			var b []byte
			if b, err = os.ReadFile(f); err == nil {
				q, p, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
				quota, period = []byte(q), []byte(p)
				break
			}
		}
	}
	if quota == nil || err != nil {
		t.Fatalf("the container's CPU quota is not where Docker's cgroupfs driver puts it: %v", err)
	}
	q, err1 := strconv.Atoi(strings.TrimSpace(string(quota)))
	p, err2 := strconv.Atoi(strings.TrimSpace(string(period)))
	if err1 != nil || err2 != nil || p == 0 || q*2 != p {
		t.Errorf("CPU quota %q per period %q; want half of the period", quota, period)
	}
}

// TestIntegrationNetwork: only a sandbox that asked for network has an
// interface besides loopback (TestIntegrationNetworkPlumbing checks where
// its traffic goes).
func TestIntegrationNetwork(t *testing.T) {
	m, _, _ := integrationManager(t, netTestConfig(t, nil), func(c *Config) {
		if c.Runtime == core.RuntimeGVisor {
			c.DefaultLimits.PidsLimit = 256
		}
	})
	ctx := t.Context()
	none, err := m.Acquire(ctx, "it-nonet", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	withNet, err := m.Acquire(ctx, "it-net", core.Options{Network: true})
	if err != nil {
		t.Fatal(err)
	}
	// Interfaces other than loopback, as the kernel lists them.
	ifaces := "python3 -c \"import socket; print(sorted(n for _, n in socket.if_nameindex() if n != 'lo'))\""
	if out := mustRunOK(t, m, none.Sandbox.ID, "bash", ifaces); out != "[]\n" {
		t.Errorf("sandbox without network has interfaces %q", out)
	}
	if out := mustRunOK(t, m, withNet.Sandbox.ID, "bash", ifaces); !strings.Contains(out, "eth0") {
		t.Errorf("sandbox with network has interfaces %q; want eth0", out)
	}
}
