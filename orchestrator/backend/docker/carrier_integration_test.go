package docker

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/moby/sys/mountinfo"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// poolContainers returns the container IDs of m's ready pool sandboxes by
// pool sandbox ID.
func poolContainers(m *validated) map[string]string { return containersOfPool(m.pool) }

// containersOfPool returns the container IDs of pool p's ready sandboxes
// by pool sandbox ID.
func containersOfPool(p *warmPool) map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]string{}
	for _, sb := range p.ready {
		out[sb.id] = sb.currentContainer()
	}
	return out
}

// fastWakeManager is integrationManager with a warm pool of one, for the
// fast-wake tests, which are runc's only (gVisor sandboxes wake in a new
// container).
func fastWakeManager(t *testing.T) (*validated, *client.Client, Config) {
	t.Helper()
	if rt := os.Getenv("SANDBOX_RUNTIME"); !runtimeIsRunc(rt) {
		t.Skipf("fast wake is runc's only (runtime %q)", rt)
	}
	return integrationManager(t, func(c *Config) { c.WarmPool = 1 })
}

// mountsUnder lists the mount points under dir.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range ms {
		out = append(out, m.Mountpoint)
	}
	slices.Sort(out)
	return out
}

// TestIntegrationFastWake: with a warm pool, a hibernated sandbox wakes in
// a pool container that was already running (its carrier) and keeps
// everything an ordinary wake keeps: its ID, globals (numpy and pandas
// objects among them), /workspace, its command log (a command ID is not
// run twice). The carrier survives a restart of its container (the
// stacked volumes are seen again) and of sandboxd, goes away with the
// next hibernation, and a second wake is fast again; deleting the sandbox
// leaves no mount behind.
func TestIntegrationFastWake(t *testing.T) {
	m, c, cfg := fastWakeManager(t)
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	awaitPoolWithin(t, m, 1, 2*time.Minute)
	res, err := m.Acquire(ctx, "fw-alice", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Sandbox.ID
	setReq := core.ExecRequest{CommandID: "set", Code: "import numpy as np, pandas as pd\n" +
		"x = 41\ndf = pd.DataFrame({'a': np.arange(4)})\n" +
		"open('/workspace/f.txt', 'a').write('once\\n')"}
	set := runCommand(t, m, id, setReq)
	if d := lastDone(t, set); d.Status != ioproto.StatusOK {
		t.Fatalf("set: %+v", set)
	}

	wakeFast := func(round int) string {
		t.Helper()
		if _, err := m.Hibernate(ctx, id); err != nil {
			t.Fatalf("round %d: Hibernate: %v", round, err)
		}
		awaitPoolWithin(t, m, 1, 2*time.Minute)
		pool := poolContainers(m)
		_, w, err := m.Wake(ctx, id)
		if err != nil {
			t.Fatalf("round %d: Wake: %v", round, err)
		}
		if w == nil || w.Level != ioproto.LevelGlobals {
			t.Fatalf("round %d: wake %+v; want level globals", round, w)
		}
		got, err := m.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var carrier string
		for pid, cid := range pool {
			if cid == got.ContainerID {
				carrier = pid
			}
		}
		if carrier == "" {
			t.Fatalf("round %d: woken in container %s, not in the pool's %v: not a fast wake", round, got.ContainerID, pool)
		}
		if _, err := os.Stat(filepath.Join(cfg.StateDir, sandboxesDir, carrier, metaFile)); !os.IsNotExist(err) {
			t.Errorf("round %d: the carrier %s still has a meta.json (%v): it is no sandbox any more", round, carrier, err)
		}
		out := mustRunOK(t, m, id, "python", "import os\nprint(x + 1, int(df.a.sum()), os.getcwd(), open('f.txt').read().strip())")
		if out != "42 6 /workspace once\n" {
			t.Fatalf("round %d: after the fast wake: %q", round, out)
		}
		return carrier
	}

	carrier := wakeFast(1)
	// A command ID runs once: resent after the fast wake, it replays.
	again := runCommand(t, m, id, setReq)
	if d := lastDone(t, again); d.Status != ioproto.StatusOK {
		t.Fatalf("set again: %+v", again)
	}
	if out := mustRunOK(t, m, id, "bash", "cat /workspace/f.txt"); out != "once\n" {
		t.Fatalf("the command ran twice across the fast wake: %q", out)
	}

	// The driver crashes and Docker's restart policy restarts the carrier's
	// container: it comes back on the sandbox's volumes, not the pool
	// sandbox's.
	got, _ := m.Get(ctx, id)
	crashDriver(t, ctx, c, got.ContainerID)
	if out := mustRunOK(t, m, id, "bash", "cat /workspace/f.txt; ls /io/out | grep -c '^set\\.'"); out != "once\n1\n" {
		t.Fatalf("after a restart of the carrier's container: %q", out)
	}

	// sandboxd restarts: the sandbox runs on in its carrier.
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m, err = newValidated(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if g, err := m.Get(ctx, id); err != nil || g.State != core.StateRunning || g.ContainerID != got.ContainerID {
		t.Fatalf("after a restart of sandboxd: %+v, %v; want it running in %s", g, err, got.ContainerID)
	}
	// The container's restart lost the globals.
	mustRunOK(t, m, id, "python", "import numpy as np, pandas as pd\nx = 41\ndf = pd.DataFrame({'a': np.arange(4)})")

	second := wakeFast(2)
	if second == carrier {
		t.Fatalf("the second wake reused carrier %s", carrier)
	}
	if _, err := os.Stat(sandboxDir(cfg.StateDir, carrier)); !os.IsNotExist(err) {
		t.Errorf("the first carrier's directory outlived the hibernation: %v", err)
	}
	if _, err := c.ContainerInspect(ctx, got.ContainerID); err == nil {
		t.Errorf("the first carrier's container outlived the hibernation")
	}

	if err := m.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{sandboxDir(cfg.StateDir, id), sandboxDir(cfg.StateDir, second)} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s outlived the deletion: %v", d, err)
		}
		if ms := mountsUnder(t, d); len(ms) > 0 {
			t.Errorf("mounts left under %s: %v", d, ms)
		}
	}
}

// TestIntegrationFastWakeFallsBack: a sandbox no pool container fits (its
// env sets a variable the driver reads for itself, which only a
// container's creation sets) wakes in a new container, as before fast
// wake.
func TestIntegrationFastWakeFallsBack(t *testing.T) {
	m, _, _ := fastWakeManager(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	res, err := m.Acquire(ctx, "fw-env", core.Options{Env: map[string]string{"FOO": "bar", "SANDBOX_MAX_OUTPUT": "1048576"}})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Sandbox.ID
	mustRunOK(t, m, id, "python", "x = 7")
	if _, err := m.Hibernate(ctx, id); err != nil {
		t.Fatal(err)
	}
	awaitPoolWithin(t, m, 1, 2*time.Minute)
	pool := poolContainers(m)
	if _, w, err := m.Wake(ctx, id); err != nil || w == nil || w.Level != ioproto.LevelGlobals {
		t.Fatalf("Wake: %+v, %v", w, err)
	}
	g, _ := m.Get(ctx, id)
	for _, cid := range pool {
		if cid == g.ContainerID {
			t.Fatalf("a sandbox with env naming a driver variable woke in a pool container")
		}
	}
	if out := mustRunOK(t, m, id, "python", "import os\nprint(x, os.environ['FOO'])"); !strings.HasPrefix(out, "7 bar") {
		t.Fatalf("after the wake: %q", out)
	}
}

// TestIntegrationFastWakeShapedLimits: a sandbox with limits of its own
// (claimed from the pool and shaped) wakes fast too: its carrier takes
// its limits in place, and they hold.
func TestIntegrationFastWakeShapedLimits(t *testing.T) {
	m, _, _ := fastWakeManager(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	awaitPoolWithin(t, m, 1, 2*time.Minute)
	want := core.Limits{MemoryBytes: 384 << 20, NanoCPUs: 500_000_000, PidsLimit: 200}
	res, err := m.Acquire(ctx, "fw-limits", core.Options{Limits: want})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Sandbox.ID
	mustRunOK(t, m, id, "python", "x = 41")
	if _, err := m.Hibernate(ctx, id); err != nil {
		t.Fatal(err)
	}
	_, got := wakeInPool(t, ctx, m, m.pool, id)
	if got.Limits.MemoryBytes != want.MemoryBytes || got.Limits.PidsLimit != want.PidsLimit || got.Limits.NanoCPUs != want.NanoCPUs {
		t.Errorf("limits after the wake: %+v; want %+v", got.Limits, want)
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err == nil {
		if v := hostCgroupValue(t, "memory", got.ContainerID, "memory.limit_in_bytes"); v != strconv.FormatInt(want.MemoryBytes, 10) {
			t.Errorf("the carrier's memory limit is %s; want %d", v, want.MemoryBytes)
		}
		if v := hostCgroupValue(t, "pids", got.ContainerID, "pids.max"); v != strconv.FormatInt(want.PidsLimit, 10) {
			t.Errorf("the carrier's pids limit is %s; want %d", v, want.PidsLimit)
		}
	}
	if out := mustRunOK(t, m, id, "python", "print(x + 1)"); out != "42\n" {
		t.Errorf("after the fast wake: %q", out)
	}
	evs := runCommand(t, m, id, core.ExecRequest{Code: "hog = b'x' * (768 << 20)"})
	if d := lastDone(t, evs); d.Status != "killed" || !d.StateLost {
		t.Errorf("768 MiB in a sandbox of 384 MiB, woken fast, ended %s (state lost %v): %s; want killed", d.Status, d.StateLost, d.Reason)
	}
}

// wakeInPool wakes hibernated sandbox id once pool p holds a ready
// sandbox, and fails unless it woke in one of p's containers (a fast
// wake); it returns the wake's report and the sandbox after it.
func wakeInPool(t *testing.T, ctx context.Context, m *validated, p *warmPool, id string) (*core.WakeInfo, core.Sandbox) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for p.size() < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the pool (network %v) had no ready sandbox within 2 minutes", p.network)
		}
		time.Sleep(20 * time.Millisecond) // polling the pool, bounded by the deadline
	}
	pool := containersOfPool(p)
	start := time.Now()
	_, w, err := m.Wake(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the wake of %s took %v", id, time.Since(start).Round(time.Millisecond))
	got, err := m.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(slices.Collect(maps.Values(pool)), got.ContainerID) {
		t.Fatalf("woken in container %s, not in the pool's %v: not a fast wake", got.ContainerID, pool)
	}
	return w, got
}
