package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/backend/docker"
	"github.com/sandboxd/sandboxd/orchestrator/labels"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// TestE2EFastWakeCrash kills sandboxd (SIGKILL, from its test hooks) at
// every step of a fast wake, the wake that borrows a warm-pool container
// (orchestrator/backend/docker/carrier.go), restarts it, and checks what
// the hibernation crash test checks (TestE2EHibernateCrash): the sandbox
// is running or hibernated, its files are there, and its globals are back
// or reported lost. And no pool sandbox is left half borrowed: only the
// carrier a sandbox's meta.json names shows that sandbox's volumes. runc
// only: gVisor sandboxes never wake fast.
func TestE2EFastWakeCrash(t *testing.T) {
	env := needE2E(t)
	if env.runtime != "" && env.runtime != "runc" {
		t.Skipf("fast wake is runc's only (runtime %q)", env.runtime)
	}
	env = env.withRuntime(t, "runc")
	crashing := env.withCrashHooks(t)
	steps := append(slices.Clone(docker.WakeSteps[:1]), docker.FastWakeSteps...)
	steps = append(steps, docker.WakeSteps[1:]...)
	pool := []string{"--warm-pool", "1"}
	for i, step := range steps {
		t.Run(strings.ReplaceAll(step, ":", "-"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			user := "fw-crash-" + strconv.Itoa(i)
			d := env.start(t, pool...)
			c, _ := d.client(t)
			sbID := acquire(t, ctx, c, user).GetSandbox().GetSandboxId()
			execOut(t, ctx, c, sbID, "set", "import pandas as pd\nx = 41\ndf = pd.DataFrame({'a': [1, 2]})\nopen('/workspace/f.txt', 'w').write('file kept')")
			if _, err := c.HibernateSandbox(ctx, &sandboxv1.HibernateSandboxRequest{SandboxId: sbID}); err != nil {
				t.Fatalf("HibernateSandbox: %v", err)
			}
			// The pool holds a ready sandbox for the wake: the acquire took
			// the first one or none, and the refill logs each it adds.
			if !pollUntil(2*time.Minute, func() bool {
				return strings.Count(d.logs.String(), "warm pool: sandbox ready") >= 1 && poolReady(d.logs.String())
			}) {
				t.Fatal("the warm pool had no ready sandbox within 2 minutes")
			}
			d.stop(t)
			d = crashing.startEnv(t, []string{"SANDBOXD_TEST_CRASH_AT=" + step}, pool...)
			c, _ = d.client(t)
			_, err := c.WakeSandbox(ctx, &sandboxv1.WakeSandboxRequest{SandboxId: sbID})
			awaitCrash(t, d, step, err)

			d = env.start(t, pool...)
			c, _ = d.client(t)
			checkNoHalfBorrowed(t, env.stateDir)
			checkAfterCrash(t, ctx, c, sbID, step, "print(open('/workspace/f.txt').read())\nprint(x, df.a.sum())", "file kept\n41 3\n")
			if _, err := c.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: sbID}); err != nil {
				t.Fatalf("DeleteSandbox: %v", err)
			}
			d.stop(t)
			checkNoHalfBorrowed(t, env.stateDir)
		})
	}
}

// poolReady reports whether the log's last warm-pool event is a sandbox
// made ready (not one claimed after it).
func poolReady(log string) bool {
	return strings.LastIndex(log, "warm pool: sandbox ready") > strings.LastIndex(log, "warm-pool sandbox claimed")
}

// poolLogged matches what sandboxd logs of its pool's size: at start
// (reconcile adopts the pool sandboxes an earlier run left) and each time
// a sandbox is made ready.
var poolLogged = regexp.MustCompile(`(?:"reconciled sandboxes with docker".* warm_pool|"warm pool: sandbox ready".* ready)=(\d+)`)

// poolHolds is the pool's size as the log last said it (0 before it did).
func poolHolds(log string) int {
	ms := poolLogged.FindAllStringSubmatch(log, -1)
	if len(ms) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(ms[len(ms)-1][1])
	return n
}

// checkNoHalfBorrowed fails if a directory under stateDir that is neither
// a sandbox (no meta.json) nor the carrier a sandbox's meta.json names
// shows a sandbox's volume: a pool sandbox left half borrowed. (A directory
// without meta.json may be the warm pool's refill in progress.)
func checkNoHalfBorrowed(t *testing.T, stateDir string) {
	t.Helper()
	root := filepath.Join(stateDir, "sandboxes")
	dirs, _ := filepath.Glob(filepath.Join(root, "*"))
	carriers := map[string]bool{}
	volumes := map[string]os.FileInfo{}
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "meta.json"))
		if err != nil {
			continue
		}
		var md struct {
			Carrier *struct {
				ID string `json:"id"`
			} `json:"carrier"`
		}
		if json.Unmarshal(b, &md) == nil && md.Carrier != nil {
			carriers[md.Carrier.ID] = true
		}
		for _, v := range []string{"io", "workspace"} {
			if st, err := os.Stat(filepath.Join(d, v)); err == nil {
				volumes[filepath.Join(d, v)] = st
			}
		}
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "meta.json")); err == nil || carriers[filepath.Base(d)] {
			continue
		}
		for _, v := range []string{"io", "workspace"} {
			st, err := os.Stat(filepath.Join(d, v))
			if err != nil {
				continue
			}
			for p, vst := range volumes {
				if os.SameFile(st, vst) {
					t.Errorf("%s, no sandbox's carrier, shows %s: half borrowed", filepath.Join(d, v), p)
				}
			}
		}
	}
}

// TestE2EFastWakeDefaults starts sandboxd as make run does, with no pool or
// wake flag, and checks that the defaults deliver what docs/hibernation.md promises
// of them: a warm pool of two fills by itself, a new user's first acquire
// is a claim from it, and a hibernated sandbox (numpy and pandas in its
// globals) wakes in a started pool container, with its globals and files.
// Then --warm-pool 0 turns it off: the pool's sandboxes are removed at the
// restart, and a new user's acquire starts a container. make run's runtime
// is the engine's default, runc.
func TestE2EFastWakeDefaults(t *testing.T) {
	env := needE2E(t)
	if env.runtime != "" && env.runtime != "runc" {
		t.Skipf("make run's defaults are runc's (runtime %q)", env.runtime)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	d := env.startDefaults(t, "--metrics-listen", "127.0.0.1:0")
	url := metricsURLs(t, d)[0]
	metric := func(name string, labels ...string) float64 { return value(scrape(t, ctx, url), name, labels...) }
	awaitPool := func(n float64) {
		t.Helper()
		if !pollUntil(3*time.Minute, func() bool { return metric("sandboxd_warm_pool_size") >= n }) {
			t.Fatalf("the default warm pool had %v ready sandboxes after 3 minutes, want %v", metric("sandboxd_warm_pool_size"), n)
		}
	}
	awaitPool(2)

	c, _ := d.client(t)
	sbID := acquire(t, ctx, c, "defaults-user").GetSandbox().GetSandboxId()
	if got := metric("sandboxd_acquires_total", "kind", "warm_pool"); got != 1 {
		t.Fatalf("%v acquires from the warm pool, want 1: a new user's first acquire was not a claim", got)
	}
	const setup = "import numpy as np, pandas as pd\nx = 41\ndf = pd.DataFrame({'a': np.arange(3)})\nopen('/workspace/f.txt', 'w').write('file kept')"
	if o, _ := execOut(t, ctx, c, sbID, "set", setup); o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_OK {
		t.Fatalf("setup: %+v %v", o.done, o.errs)
	}
	if _, err := c.HibernateSandbox(ctx, &sandboxv1.HibernateSandboxRequest{SandboxId: sbID}); err != nil {
		t.Fatalf("HibernateSandbox: %v", err)
	}
	awaitPool(1)
	got, started := execOut(t, ctx, c, sbID, "check", "print(open('/workspace/f.txt').read(), x, int(df.a.sum()))")
	if got.stdout != "file kept 41 3\n" || started.GetWake() == nil {
		t.Fatalf("after the wake: stdout %q, wake %v; want the file, x and df back after a wake", got.stdout, started.GetWake())
	}
	// A fast-woken sandbox runs in the pool sandbox's container, which
	// Docker lists under the pool sandbox's ID, not its own.
	if own := dockerLines(t, ctx, "ps", "-aq", "--filter", "label="+labels.SandboxID+"="+sbID); len(own) != 0 {
		t.Fatalf("the woken sandbox runs in a container of its own (%v): with the defaults the wake did not borrow the pool's", own)
	}
	d.stop(t)

	d = env.startDefaults(t, "--warm-pool", "0", "--metrics-listen", "127.0.0.1:0")
	url = metricsURLs(t, d)[0]
	pool := func() []string {
		return dockerLines(t, ctx, "ps", "-aq", "--filter", "label="+labels.StateDir+"="+env.stateDir, "--filter", "label="+labels.Pool+"=true")
	}
	// The one still carrying the woken sandbox is that sandbox's now.
	if !pollUntil(time.Minute, func() bool { return len(pool()) <= 1 }) {
		t.Fatalf("with --warm-pool 0 the pool's sandboxes were not removed within a minute: %v", pool())
	}
	c, _ = d.client(t)
	acquire(t, ctx, c, "no-pool-user")
	if cold, pooled := metric("sandboxd_acquires_total", "kind", "cold"), metric("sandboxd_acquires_total", "kind", "warm_pool"); cold != 1 || pooled != 0 {
		t.Fatalf("with --warm-pool 0: %v cold and %v pooled acquires, want 1 and 0", cold, pooled)
	}
	if got, _ := execOut(t, ctx, c, sbID, "check-again", "print(x)"); got.stdout != "41\n" {
		t.Fatalf("the woken sandbox after the restart: %q", got.stdout)
	}
}

// TestE2EClaimShapeCrash kills sandboxd (SIGKILL, from its test hooks) at
// each step of a claim that shapes a warm-pool sandbox to its request
// (orchestrator/backend/docker/shape.go: limits and env), restarts it,
// and checks that no half-shaped sandbox is handed out and no pool
// sandbox keeps the shaping: the user has no sandbox (the Acquire never
// returned one) and the next Acquire gets one with every option; another
// user's claim of a default sandbox has the server's memory limit and
// none of the env. runc only: under gVisor a request for its own limits
// is created cold.
func TestE2EClaimShapeCrash(t *testing.T) {
	env := needE2E(t)
	if env.runtime != "" && env.runtime != "runc" {
		t.Skipf("runc's: gVisor's runsc cannot change a running sandbox's limits, so such a request is created cold (runtime %q)", env.runtime)
	}
	env = env.withRuntime(t, "runc")
	crashing := env.withCrashHooks(t)
	// One pool sandbox, without fast wake's imports: the claim is what is
	// tested, and the pool's warm-ups are the suite's load.
	pool := []string{"--warm-pool", "1", "--fast-wake=false"}
	const memory = 384 << 20
	opts := &sandboxv1.SandboxOptions{
		Limits: &sandboxv1.ResourceLimits{MemoryBytes: memory},
		Env:    map[string]string{"SHAPED": "tenant-a"},
	}
	probe := "import os\nprint(os.environ.get('SHAPED', '-'), open('/sys/fs/cgroup/memory/memory.limit_in_bytes').read().strip() if os.path.exists('/sys/fs/cgroup/memory/memory.limit_in_bytes') else 'v2')"
	for i, step := range docker.ClaimSteps {
		t.Run(strings.ReplaceAll(step, ":", "-"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			user := "claim-crash-" + strconv.Itoa(i)
			d := crashing.startEnv(t, []string{"SANDBOXD_TEST_CRASH_AT=" + step}, pool...)
			if !pollUntil(2*time.Minute, func() bool { return poolHolds(d.logs.String()) >= 1 }) {
				t.Fatal("the warm pool had no ready sandbox within 2 minutes")
			}
			c, _ := d.client(t)
			_, err := c.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: user, Options: opts})
			awaitCrash(t, d, step, err)

			d = env.start(t, pool...)
			c, _ = d.client(t)
			if !strings.Contains(d.logs.String(), "claimed but not yet shaped") {
				t.Errorf("the restart did not report the half-shaped sandbox it removed")
			}
			// Another user's default sandbox first, no trace of the shaping: it
			// takes the oldest pool sandbox, which a shaping gone back to the
			// pool would be.
			other := acquire(t, ctx, c, user+"-other").GetSandbox()
			if o, _ := execOut(t, ctx, c, other.GetSandboxId(), "probe", probe); o.stdout != "- "+strconv.Itoa(512<<20)+"\n" && o.stdout != "- v2\n" {
				t.Errorf("another user's default sandbox sees %q; want no env and the default 512 MiB (startEnv's)", o.stdout)
			}
			ls, err := c.ListSandboxes(ctx, &sandboxv1.ListSandboxesRequest{UserId: user})
			if err != nil {
				t.Fatal(err)
			}
			if n := len(ls.GetSandboxes()); n != 0 {
				t.Fatalf("after the crash at %s the user has %d sandboxes (%v); want none: the Acquire never returned one", step, n, ls.GetSandboxes())
			}
			got, err := c.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: user, Options: opts})
			if err != nil {
				t.Fatal(err)
			}
			id := got.GetSandbox().GetSandboxId()
			if m := got.GetSandbox().GetLimits().GetMemoryBytes(); m != memory {
				t.Errorf("the new sandbox's memory is %d; want %d", m, memory)
			}
			if o, _ := execOut(t, ctx, c, id, "probe", probe); o.stdout != "tenant-a "+strconv.Itoa(memory)+"\n" && o.stdout != "tenant-a v2\n" {
				t.Errorf("the shaped sandbox sees %q", o.stdout)
			}
			for _, sb := range []string{id, other.GetSandboxId()} {
				if _, err := c.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: sb}); err != nil {
					t.Fatalf("DeleteSandbox: %v", err)
				}
			}
			d.stop(t)
		})
	}
}

// TestE2EFastWakeForkCrash kills sandboxd at each step of a fork that
// runs in a warm-pool container (carried as a fast wake is: the carrier
// recorded, the volumes stacked, the restore registered), restarts it,
// and checks that the fork has the source's files and globals or says it
// lost them, the source is untouched, and no pool sandbox is left half
// borrowed. runc only: gVisor sandboxes never run in pool containers.
func TestE2EFastWakeForkCrash(t *testing.T) {
	env := needE2E(t)
	if env.runtime != "" && env.runtime != "runc" {
		t.Skipf("fast wake is runc's only (runtime %q)", env.runtime)
	}
	env = env.withRuntime(t, "runc")
	crashing := env.withCrashHooks(t)
	pool := []string{"--warm-pool", "1"}
	steps := append(slices.Clone(docker.FastWakeSteps), "restore:registered")
	for i, step := range steps {
		t.Run(strings.ReplaceAll(step, ":", "-"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			d := crashing.startEnv(t, []string{"SANDBOXD_TEST_CRASH_AT=" + step}, pool...)
			c, _ := d.client(t)
			src := acquire(t, ctx, c, "pool-fork-src-"+strconv.Itoa(i)).GetSandbox().GetSandboxId()
			execOut(t, ctx, c, src, "set", "x = 41\nopen('/workspace/f.txt', 'w').write('file kept')")
			if !pollUntil(2*time.Minute, func() bool { return poolReady(d.logs.String()) }) {
				t.Fatal("the warm pool had no ready sandbox within 2 minutes")
			}
			forkUser := "pool-fork-" + strconv.Itoa(i)
			_, err := c.ForkSandbox(ctx, &sandboxv1.ForkSandboxRequest{SandboxId: src, Count: 1, UserIds: []string{forkUser}})
			awaitCrash(t, d, step, err)

			d = env.start(t, pool...)
			c, _ = d.client(t)
			checkNoHalfBorrowed(t, env.stateDir)
			if o, _ := execOut(t, ctx, c, src, "get", "print(x, open('/workspace/f.txt').read())"); o.stdout != "41 file kept\n" {
				t.Fatalf("the source after the crash at %s: %q %v", step, o.stdout, o.errs)
			}
			fork := acquire(t, ctx, c, forkUser).GetSandbox()
			out, started := execOut(t, ctx, c, fork.GetSandboxId(), "get", "print(open('/workspace/f.txt').read())\nprint(x)")
			t.Logf("the fork after the crash at %s: wake %v, output %q", step, started.GetWake(), out.stdout)
			switch {
			case out.stdout == "file kept\n41\n":
			case strings.HasPrefix(out.stdout, "file kept\n") && (out.done.GetStateLost() || started.GetWake().GetLevel() == "files"):
				// Globals lost, and said so; the files kept.
			default:
				t.Fatalf("the fork after the crash at %s: output %q, done %+v, wake %v", step, out.stdout, out.done, started.GetWake())
			}
			d.stop(t)
			checkNoHalfBorrowed(t, env.stateDir)
		})
	}
}
