package docker

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// awaitPoolWithin waits until m's pool holds n ready sandboxes; real
// containers take a while to start on a busy machine.
func awaitPoolWithin(t testing.TB, m *validated, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for m.pool.size() != n {
		if time.Now().After(deadline) {
			t.Fatalf("warm pool holds %d sandboxes after %v; want %d", m.pool.size(), within, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestIntegrationWarmPool(t *testing.T) {
	m1, c, cfg := integrationManager(t, func(c *Config) { c.WarmPool = 2 })
	ctx := t.Context()
	awaitPoolWithin(t, m1, 2, 2*time.Minute)
	pooled := poolIDs(m1)

	start := time.Now()
	res, err := m1.Acquire(core.WithCaller(ctx, core.Caller{Tenant: "acme"}), "alice", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Created || !slices.Contains(pooled, res.Sandbox.ID) {
		t.Fatalf("Acquire = %+v; want one of the pool's sandboxes %v", res, pooled)
	}
	info, err := c.ContainerInspect(ctx, res.Sandbox.ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	created, err := time.Parse(time.RFC3339Nano, info.Created)
	if err != nil || !created.Before(start) || !info.State.Running {
		t.Errorf("claimed container created at %v (running %v); the Acquire began at %v", created, info.State.Running, start)
	}
	if out := mustRunOK(t, m1, res.Sandbox.ID, "python", "print('claimed')"); out != "claimed\n" {
		t.Errorf("claimed sandbox runs code: %q", out)
	}
	awaitPoolWithin(t, m1, 2, 2*time.Minute)
	refilled := poolIDs(m1)
	if slices.Contains(refilled, res.Sandbox.ID) {
		t.Errorf("the claimed sandbox is still in the pool")
	}

	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}
	m2, err := newValidated(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if got := poolIDs(m2); !slices.Equal(got, refilled) {
		t.Errorf("after restart the pool holds %v; want the same sandboxes %v", got, refilled)
	}
	again, err := m2.Acquire(core.WithCaller(ctx, core.Caller{Tenant: "acme"}), "alice", core.Options{})
	if err != nil || again.Created || again.Sandbox.ID != res.Sandbox.ID {
		t.Errorf("after restart alice gets %+v, %v; want her claimed sandbox", again, err)
	}
	// Another tenant's alice is a new user: she gets an adopted pool sandbox.
	other, err := m2.Acquire(core.WithCaller(ctx, core.Caller{Tenant: "beta"}), "alice", core.Options{})
	if err != nil || !slices.Contains(refilled, other.Sandbox.ID) {
		t.Errorf("beta's alice gets %+v, %v; want an adopted pool sandbox", other, err)
	}
}

// BenchmarkIntegrationWarmAcquire measures a new user's first result with a
// warm pool: Acquire (a claim) plus a first command's round trip. The pool
// is refilled outside the timer.
func BenchmarkIntegrationWarmAcquire(b *testing.B) {
	c, img := realDocker(b)
	cfg := Config{Policy: core.Policy{Image: img, Runtime: os.Getenv("SANDBOX_RUNTIME"), WarmPool: 1}, StateDir: b.TempDir(), Logger: slog.New(slog.DiscardHandler)}
	m, err := newValidated(b.Context(), cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		m.Close()
		removeTestContainers(b, c, cfg.StateDir)
	}()
	b.StopTimer()
	for i := range b.N {
		awaitPoolWithin(b, m, 1, 2*time.Minute)
		b.StartTimer()
		res, err := m.Acquire(b.Context(), fmt.Sprintf("bench-%d", i), core.Options{})
		if err != nil {
			b.Fatal(err)
		}
		id, err := m.Submit(b.Context(), core.ExecRequest{SandboxID: res.Sandbox.ID, Code: "1 + 1"})
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Follow(b.Context(), res.Sandbox.ID, id, 0, func(core.Event) error { return nil }); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := m.Delete(b.Context(), res.Sandbox.ID); err != nil {
			b.Fatal(err)
		}
	}
}

// hostCgroupValue reads file of the container's cgroup of controller on
// the host (Docker's cgroupfs driver under cgroup v1), where it is the
// same under runc and runsc.
func hostCgroupValue(t *testing.T, controller, containerID, file string) string {
	t.Helper()
	dirs := []string{"/sys/fs/cgroup/" + controller + "/docker/" + containerID}
	if controller == "cpu" {
		dirs = append(dirs, "/sys/fs/cgroup/cpu,cpuacct/docker/"+containerID)
	}
	for _, dir := range dirs {
		if b, err := os.ReadFile(filepath.Join(dir, file)); err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	t.Fatalf("%s of container %s's %s cgroup is not where Docker's cgroupfs driver puts it under cgroup v1", file, containerID, controller)
	return ""
}

// TestIntegrationWarmPoolShapedLimits: a request for its own limits of
// memory, CPUs and processes gets a pool sandbox, whose cgroups the claim
// changed in place, and the new limits hold: an allocation past the
// memory asked for is killed.
func TestIntegrationWarmPoolShapedLimits(t *testing.T) {
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		t.Skip("reads cgroup v1's files; this host has cgroup v2")
	}
	rec := newRecordingMetrics()
	m, _, _ := integrationManager(t, func(c *Config) { c.WarmPool, c.Metrics = 1, rec })
	awaitPoolWithin(t, m, 1, 2*time.Minute)
	pooled := poolIDs(m)
	want := core.Limits{MemoryBytes: 256 << 20, NanoCPUs: 500_000_000, PidsLimit: 200}
	res, err := m.Acquire(t.Context(), "it-shaped", core.Options{Limits: want})
	if err != nil {
		t.Fatal(err)
	}
	sb := res.Sandbox
	if m.cfg.Runtime == core.RuntimeGVisor {
		// runsc cannot change a running sandbox's limits: created cold,
		// counted as such.
		rec.mu.Lock()
		misses := rec.misses[core.PoolMissLimits]
		rec.mu.Unlock()
		if sb.ID == pooled[0] || misses != 1 {
			t.Errorf("under gVisor a request for other limits got %s (the pool's %s), %d misses for limits; want a cold sandbox, one miss", sb.ID, pooled[0], misses)
		}
	} else if sb.ID != pooled[0] {
		t.Fatalf("a request for other limits got %s; want the pool's sandbox %s", sb.ID, pooled[0])
	}
	id := sb.ContainerID
	for _, c := range []struct{ controller, file, want string }{
		{"memory", "memory.limit_in_bytes", strconv.FormatInt(want.MemoryBytes, 10)},
		{"memory", "memory.memsw.limit_in_bytes", strconv.FormatInt(want.MemoryBytes, 10)},
		{"pids", "pids.max", strconv.FormatInt(want.PidsLimit, 10)},
		{"cpu", "cpu.cfs_quota_us", strconv.Itoa(atoi(t, hostCgroupValue(t, "cpu", id, "cpu.cfs_period_us")) / 2)},
	} {
		if c.file == "memory.memsw.limit_in_bytes" {
			if _, err := os.Stat("/sys/fs/cgroup/memory/docker/" + id + "/" + c.file); err != nil {
				continue // swap accounting off in this kernel
			}
		}
		if got := hostCgroupValue(t, c.controller, id, c.file); got != c.want {
			t.Errorf("%s = %s; want %s", c.file, got, c.want)
		}
	}
	mustRunOK(t, m, sb.ID, "python", "kept = 1")
	evs := runCommand(t, m, sb.ID, core.ExecRequest{Code: "hog = b'x' * (512 << 20)"})
	if d := lastDone(t, evs); d.Status != "killed" || !d.StateLost {
		t.Errorf("512 MiB in a sandbox claimed with 256 MiB ended %s (state lost %v): %s; want killed", d.Status, d.StateLost, d.Reason)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// envSeen is code per language printing SBX_A and SBX_B as the sandbox's
// processes see them, and what each prints for want.
func checkEnvSeen(t *testing.T, m *validated, sandboxID, a, b, when string) {
	t.Helper()
	want := a + "|" + b + "\n"
	for _, c := range []struct{ lang, code string }{
		{"python", "import os\nprint(os.environ.get('SBX_A', '') + '|' + os.environ.get('SBX_B', ''))"},
		{"python", "import subprocess\nprint(subprocess.run(['sh', '-c', 'echo \"$SBX_A|$SBX_B\"'], capture_output=True, text=True).stdout, end='')"},
		{"bash", `echo "$SBX_A|$SBX_B"`},
		{"javascript", "console.log((process.env.SBX_A || '') + '|' + (process.env.SBX_B || ''))"},
		{"r", `cat(paste0(Sys.getenv("SBX_A"), "|", Sys.getenv("SBX_B")), "\n", sep = "")`},
	} {
		if got := mustRunOK(t, m, sandboxID, c.lang, c.code); got != want {
			t.Errorf("%s: %s sees %q; want %q", when, c.lang, got, want)
		}
	}
}

// TestIntegrationWarmPoolShapedEnv: a request with env takes a pool
// sandbox, and every language, every process, every later kernel and the
// sandbox after a restart of its container and after a wake see the
// variables; a command's own env still overrides them for itself. The
// next tenant's claim, from the same pool, sees none of them. Under runc
// and runsc.
func TestIntegrationWarmPoolShapedEnv(t *testing.T) {
	testenv.NeedDocker(t)
	for _, rt := range netRuntimes(t) {
		t.Run(rt, func(t *testing.T) { testWarmPoolShapedEnv(t, rt) })
	}
}

func testWarmPoolShapedEnv(t *testing.T, runtime string) {
	m, c, _ := integrationManager(t, func(c *Config) {
		c.WarmPool, c.Runtime = 1, runtime
		if runtime == core.RuntimeGVisor {
			c.DefaultLimits.PidsLimit = 256
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	awaitPoolWithin(t, m, 1, 2*time.Minute)
	pooled := poolIDs(m)
	acme := core.WithCaller(ctx, core.Caller{Tenant: "acme"})
	res, err := m.Acquire(acme, "env-alice", core.Options{Env: map[string]string{"SBX_A": "alpha", "SBX_B": "two words"}})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Sandbox.ID
	if id != pooled[0] {
		t.Fatalf("a request with env got %s; want the pool's sandbox %s", id, pooled[0])
	}
	checkEnvSeen(t, m, id, "alpha", "two words", "after the claim")
	if got := mustRunOK(t, m, id, "python", "import os\nprint(os.environ['SBX_A'])"); got != "alpha\n" {
		t.Errorf("before the override: %q", got)
	}
	evs := runCommand(t, m, id, core.ExecRequest{Language: "bash", Code: `echo "$SBX_A"`, Env: map[string]string{"SBX_A": "once"}})
	if got := textOf(evs); got != "once\n" {
		t.Errorf("a command's own env: %q; want once", got)
	}
	checkEnvSeen(t, m, id, "alpha", "two words", "after a command's own env")

	// The driver crashes and Docker's restart policy restarts the
	// container, which starts over on the log: the env record again.
	crashDriver(t, ctx, c, res.Sandbox.ContainerID)
	checkEnvSeen(t, m, id, "alpha", "two words", "after a restart of the container")
	if _, err := m.Hibernate(acme, id); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Wake(acme, id); err != nil {
		t.Fatal(err)
	}
	checkEnvSeen(t, m, id, "alpha", "two words", "after a wake")

	// Another tenant's claim: another pool sandbox, none of acme's env.
	awaitPoolWithin(t, m, 1, 2*time.Minute)
	beta := core.WithCaller(ctx, core.Caller{Tenant: "beta"})
	other, err := m.Acquire(beta, "env-bob", core.Options{Env: map[string]string{"SBX_B": "bob's"}})
	if err != nil {
		t.Fatal(err)
	}
	if other.Sandbox.ID == id {
		t.Fatal("one pool sandbox served two claims")
	}
	checkEnvSeen(t, m, other.Sandbox.ID, "", "bob's", "the next tenant's claim")
}

// TestIntegrationFastWakeEnv: a sandbox created with env (cold, its
// container's env) wakes fast in a pool container that started without
// it, and keeps it: the wake gives the carrier's driver an env record.
func TestIntegrationFastWakeEnv(t *testing.T) {
	if rt := os.Getenv("SANDBOX_RUNTIME"); !runtimeIsRunc(rt) {
		t.Skipf("fast wake is runc's only (runtime %q)", rt)
	}
	m1, _, cfg := integrationManager(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	res, err := m1.Acquire(ctx, "fw-env", core.Options{Env: map[string]string{"SBX_A": "cold", "SBX_B": "made"}})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Sandbox.ID
	mustRunOK(t, m1, id, "python", "x = 41")
	if _, err := m1.Hibernate(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}
	cfg.WarmPool = 1
	m2, err := newValidated(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	awaitPoolWithin(t, m2, 1, 2*time.Minute)
	pool := poolContainers(m2)
	if _, _, err := m2.Wake(ctx, id); err != nil {
		t.Fatal(err)
	}
	got, err := m2.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(slices.Collect(maps.Values(pool)), got.ContainerID) {
		t.Fatalf("woken in container %s, not in the pool's %v: not a fast wake", got.ContainerID, pool)
	}
	checkEnvSeen(t, m2, id, "cold", "made", "after a fast wake")
	if out := mustRunOK(t, m2, id, "python", "print(x + 1)"); out != "42\n" {
		t.Errorf("globals after the fast wake: %q", out)
	}
}
