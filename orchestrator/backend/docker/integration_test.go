package docker

// Integration tests against the real Docker engine and the real sandbox
// image (SANDBOX_IMAGE, default sandboxd-sandbox:latest). They skip when
// either is missing, except in CI (CI=true), where that is a failure.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/sandboxd/sandboxd/internal/sandboxdproc"
	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/orchestrator/labels"
)

// realDocker returns a client for the engine and the image to test with;
// testenv decides whether a missing engine or image skips or fails.
func realDocker(t testing.TB) (*client.Client, string) {
	t.Helper()
	img := testenv.NeedDocker(t)
	c, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		testenv.Unavailable(t, "docker client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c, img
}

// integrationManager starts a Manager on the real engine in a fresh state
// directory, with the configuration changes given; every container it
// creates is removed when the test ends, whatever happened.
func integrationManager(t *testing.T, configure ...func(*Config)) (*validated, *client.Client, Config) {
	t.Helper()
	c, img := realDocker(t)
	cfg := Config{
		Policy:   core.Policy{Image: img, Runtime: os.Getenv("SANDBOX_RUNTIME")},
		StateDir: t.TempDir(),
		Logger:   slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	for _, f := range configure {
		f(&cfg)
	}
	t.Cleanup(func() { removeTestContainers(t, c, cfg.StateDir) })
	m, err := New(t.Context(), cfg, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return validate(m), c, m.cfg
}

func removeTestContainers(t testing.TB, c *client.Client, stateDir string) {
	abs, _ := filepath.Abs(stateDir)
	// Two minutes for all of them: under make test's shards a run once
	// left two containers of TestIntegrationForkBombContained (and their
	// loop mounts) behind, which 30 s may not have been enough to remove.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	list, err := c.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", labels.StateDir+"="+abs))})
	if err != nil {
		t.Logf("cleanup: list containers: %v", err)
		return
	}
	for _, ct := range list {
		if err := c.ContainerRemove(ctx, ct.ID, container.RemoveOptions{Force: true}); err != nil {
			t.Logf("cleanup: remove %s: %v", ct.ID[:12], err)
		}
	}
	// The templates the test built, and their step cache.
	if err := sandboxdproc.RemoveImages(ctx, abs); err != nil {
		t.Logf("cleanup: %v", err)
	}
	unmountAll(t, abs)
}

// unmountAll unmounts the volumes of every sandbox under stateDir, so that
// removing the test's directory neither fails on mount points nor leaves
// loop devices behind.
func unmountAll(t testing.TB, stateDir string) {
	dirs, _ := filepath.Glob(filepath.Join(stateDir, sandboxesDir, "*"))
	for _, d := range dirs {
		if err := unmountVolumes(d); err != nil {
			t.Logf("cleanup: %v", err)
		}
	}
	vols, _ := filepath.Glob(filepath.Join(stateDir, volumesDir, "*", volDataDir))
	for _, d := range vols {
		if err := unmountStack(d); err != nil {
			t.Logf("cleanup: %v", err)
		}
	}
}

func TestIntegrationLifecycle(t *testing.T) {
	m, c, cfg := integrationManager(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	res, err := m.Acquire(ctx, "it-user", core.Options{Env: map[string]string{"FOO": "bar"}})
	if err != nil {
		t.Fatal(err)
	}
	sb := res.Sandbox
	info, err := c.ContainerInspect(ctx, sb.ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	hc := info.HostConfig
	for what, ok := range map[string]bool{
		"running":                     info.State.Running,
		"name":                        info.Name == "/sandboxd-"+sb.ID,
		"label managed":               info.Config.Labels[labels.Managed] == "true",
		"label sandbox id":            info.Config.Labels[labels.SandboxID] == sb.ID,
		"label user id":               info.Config.Labels[labels.UserID] == "it-user",
		"label created-at":            info.Config.Labels[labels.CreatedAt] != "",
		"user 1000:1000":              info.Config.User == "1000:1000",
		"env":                         strings.Contains(strings.Join(info.Config.Env, " "), "FOO=bar"),
		"network none":                hc.NetworkMode == "none",
		"read-only rootfs":            hc.ReadonlyRootfs,
		"tmpfs /tmp":                  hc.Tmpfs["/tmp"] == tmpfsOptions,
		"cap drop ALL":                len(hc.CapDrop) == 1 && hc.CapDrop[0] == "ALL",
		"no-new-privileges":           len(hc.SecurityOpt) == 1 && hc.SecurityOpt[0] == "no-new-privileges",
		"init":                        hc.Init != nil && *hc.Init,
		"memory = memory+swap":        hc.Memory > 0 && hc.MemorySwap == hc.Memory,
		"cpus":                        hc.NanoCPUs == cfg.DefaultLimits.NanoCPUs,
		"pids":                        hc.PidsLimit != nil && *hc.PidsLimit == cfg.DefaultLimits.PidsLimit,
		"restart policy":              hc.RestartPolicy.Name == restartPolicy,
		"two binds (/io, /workspace)": len(hc.Binds) == 2,
	} {
		if !ok {
			t.Errorf("container spec: %s is wrong: %+v", what, hc)
		}
	}
	if again, err := m.Acquire(ctx, "it-user", core.Options{}); err != nil || again.Created || again.Sandbox.ID != sb.ID {
		t.Fatalf("second Acquire = %+v, %v", again, err)
	}

	// An operator stops the container: the sandbox is dead, visibly.
	timeout := 1
	if err := c.ContainerStop(ctx, sb.ContainerID, container.StopOptions{Timeout: &timeout}); err != nil {
		t.Fatal(err)
	}
	got, err := m.Get(ctx, sb.ID)
	if err != nil || got.State != core.StateDead || !strings.Contains(got.StateReason, "exited with code") {
		t.Fatalf("Get after docker stop = %+v, %v", got, err)
	}
	repl, err := m.Acquire(ctx, "it-user", core.Options{})
	if err != nil || !repl.Created || repl.ReplacedID != sb.ID || repl.ReplacedReason != got.StateReason {
		t.Fatalf("Acquire after death = %+v, %v", repl, err)
	}

	// Someone removes the replacement's container behind sandboxd's back.
	if err := c.ContainerRemove(ctx, repl.Sandbox.ContainerID, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	got, err = m.Get(ctx, repl.Sandbox.ID)
	if err != nil || got.State != core.StateDead || got.StateReason != reasonRemoved {
		t.Fatalf("Get after docker rm = %+v, %v", got, err)
	}

	for _, id := range []string{sb.ID, repl.Sandbox.ID} {
		if err := m.Delete(ctx, id); err != nil {
			t.Fatalf("Delete(%s): %v", id, err)
		}
		if _, err := os.Stat(filepath.Join(cfg.StateDir, "sandboxes", id)); !os.IsNotExist(err) {
			t.Errorf("directory of %s left: %v", id, err)
		}
	}
	if _, err := c.ContainerInspect(ctx, sb.ContainerID); err == nil {
		t.Error("container still exists after Delete")
	}
}

func TestIntegrationImageMissing(t *testing.T) {
	c, _ := realDocker(t)
	_ = c
	cfg := Config{Policy: core.Policy{Image: "sandboxd-no-such-image:never"}, StateDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)}
	m, err := newValidated(t.Context(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	_, err = m.Acquire(t.Context(), "u", core.Options{})
	wantClass(t, err, core.ErrFailedPrecondition, `build it with "make image"`)
}

// runCommand submits code and follows it to the end, returning its events.
func runCommand(t *testing.T, m *validated, sandboxID string, req core.ExecRequest) []core.Event {
	t.Helper()
	req.SandboxID = sandboxID
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	id, err := m.Submit(ctx, req)
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	var evs []core.Event
	if err := m.Follow(ctx, sandboxID, id, 0, func(e core.Event) error { evs = append(evs, e); return nil }); err != nil {
		t.Fatalf("Follow(%s): %v (events so far: %+v)", id, err, evs)
	}
	return evs
}

func lastDone(t *testing.T, evs []core.Event) core.Event {
	t.Helper()
	if len(evs) == 0 || evs[len(evs)-1].Type != "done" {
		t.Fatalf("no done event: %+v", evs)
	}
	return evs[len(evs)-1]
}

func TestIntegrationExec(t *testing.T) {
	m, _, cfg := integrationManager(t)
	ctx := t.Context()
	res, err := m.Acquire(ctx, "it-exec", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sb := res.Sandbox

	evs := runCommand(t, m, sb.ID, core.ExecRequest{CommandID: "set-x", Code: "x = 21"})
	if d := lastDone(t, evs); d.Status != "ok" {
		t.Fatalf("x = 21: %+v", evs)
	}
	evs = runCommand(t, m, sb.ID, core.ExecRequest{CommandID: "double-x", Code: "x * 2"})
	var result string
	for _, e := range evs {
		if e.Type == "result" {
			result = e.Data["text/plain"]
		}
	}
	if result != "42" || lastDone(t, evs).Status != "ok" {
		t.Fatalf("x * 2 gave %q: %+v", result, evs)
	}

	// Idempotent: the same ID again runs nothing new and replays the same output.
	again := runCommand(t, m, sb.ID, core.ExecRequest{CommandID: "double-x", Code: "x * 2"})
	if len(again) != len(evs) {
		t.Fatalf("replayed %d events, want %d", len(again), len(evs))
	}
	if n := countLines(t, filepath.Join(cfg.StateDir, "sandboxes", sb.ID, "io", "stdin")); n != 2 {
		t.Errorf("stdin has %d records, want 2", n)
	}

	// Streaming: output arrives while the command still runs.
	ctx2, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	id, err := m.Submit(ctx2, core.ExecRequest{SandboxID: sb.ID, Language: "bash", Code: "for i in 1 2 3; do echo line$i; sleep 0.3; done"})
	if err != nil {
		t.Fatal(err)
	}
	var stdout strings.Builder
	var firstOut, done time.Time
	err = m.Follow(ctx2, sb.ID, id, 0, func(e core.Event) error {
		switch e.Type {
		case "stdout":
			if firstOut.IsZero() {
				firstOut = time.Now()
			}
			stdout.WriteString(e.Text)
		case "done":
			done = time.Now()
			if e.Status != "ok" {
				return fmt.Errorf("bash loop ended %s: %s", e.Status, e.Reason)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if stdout.String() != "line1\nline2\nline3\n" {
		t.Errorf("stdout = %q", stdout.String())
	}
	if firstOut.IsZero() || done.Sub(firstOut) < 400*time.Millisecond {
		t.Errorf("output was not streamed: first stdout %v before done", done.Sub(firstOut))
	}

	// Files go both ways, and the sandbox user can modify uploaded ones.
	if _, err := m.Upload(ctx, sb.ID, "in/data.txt", strings.NewReader("from host")); err != nil {
		t.Fatal(err)
	}
	evs = runCommand(t, m, sb.ID, core.ExecRequest{Code: `
import os
s = open("/workspace/in/data.txt").read()
open("/workspace/in/data.txt", "a").write(" + sandbox")
open("/workspace/out.txt", "w").write(s.upper())
os.symlink("/etc/passwd", "/workspace/evil")
`})
	if d := lastDone(t, evs); d.Status != "ok" {
		t.Fatalf("file command: %+v", evs)
	}
	rc, _, err := m.Download(ctx, sb.ID, "/workspace/out.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "FROM HOST" {
		t.Errorf("out.txt = %q", b)
	}
	rc, _, err = m.Download(ctx, sb.ID, "in/data.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(rc)
	rc.Close()
	if string(b) != "from host + sandbox" {
		t.Errorf("in/data.txt = %q", b)
	}
	_, _, err = m.Download(ctx, sb.ID, "evil")
	wantClass(t, err, core.ErrInvalidArgument, "path escapes /workspace")
}

func TestIntegrationInterrupt(t *testing.T) {
	m, _, _ := integrationManager(t)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	res, err := m.Acquire(ctx, "it-intr", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sb := res.Sandbox
	id, err := m.Submit(ctx, core.ExecRequest{SandboxID: sb.ID, Code: "import time\nprint('sleeping', flush=True)\ntime.sleep(60)"})
	if err != nil {
		t.Fatal(err)
	}
	var status string
	err = m.Follow(ctx, sb.ID, id, 0, func(e core.Event) error {
		switch e.Type {
		case "stdout":
			if err := m.Interrupt(ctx, sb.ID, id); err != nil {
				return err
			}
		case "done":
			status = e.Status
		}
		return nil
	})
	if err != nil || status != "interrupted" {
		t.Fatalf("Follow = %v, done status %q; want interrupted", err, status)
	}
	// The globals survive an interrupt.
	evs := runCommand(t, m, sb.ID, core.ExecRequest{Code: "1 + 1"})
	if lastDone(t, evs).Status != "ok" {
		t.Errorf("command after interrupt: %+v", evs)
	}
}

func TestIntegrationRestart(t *testing.T) {
	m1, c, cfg := integrationManager(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	res, err := m1.Acquire(ctx, "it-restart", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sb := res.Sandbox
	runCommand(t, m1, sb.ID, core.ExecRequest{CommandID: "keep", Code: "kept = 'still here'"})
	id, err := m1.Submit(ctx, core.ExecRequest{SandboxID: sb.ID, CommandID: "slow", Language: "bash", Code: "sleep 1; echo finished"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}
	info, err := c.ContainerInspect(ctx, sb.ContainerID)
	if err != nil || !info.State.Running {
		t.Fatalf("container after Close: running=%v, %v", info.State != nil && info.State.Running, err)
	}

	m2, err := newValidated(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if again, err := m2.Acquire(ctx, "it-restart", core.Options{}); err != nil || again.Created || again.Sandbox.ID != sb.ID {
		t.Fatalf("Acquire after restart = %+v, %v", again, err)
	}
	// The command submitted before the restart is followed to its end.
	var out string
	if err := m2.Follow(ctx, sb.ID, id, 0, func(e core.Event) error { out += e.Text; return nil }); err != nil {
		t.Fatal(err)
	}
	if out != "finished\n" {
		t.Errorf("output across restart = %q", out)
	}
	// Python state survived too: the sandbox is the same.
	evs := runCommand(t, m2, sb.ID, core.ExecRequest{Code: "kept"})
	if evs[len(evs)-2].Data["text/plain"] != "'still here'" {
		t.Errorf("state after restart: %+v", evs)
	}
	if err := m2.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
}

func TestIntegrationDriverCrashRestarts(t *testing.T) {
	m, c, _ := integrationManager(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	res, err := m.Acquire(ctx, "it-crash", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sb := res.Sandbox
	// Sandboxed code kills the driver (same user): the container's init
	// exits, Docker restarts the container (restart policy), and the new
	// driver closes the interrupted command as killed, with state lost.
	evs := runCommand(t, m, sb.ID, core.ExecRequest{Language: "bash", Code: "kill -KILL $(pgrep -x sandbox-driver); sleep 30"})
	d := lastDone(t, evs)
	if d.Status != "killed" || !d.StateLost {
		t.Fatalf("done after the driver crash = %+v", d)
	}
	info, err := c.ContainerInspect(ctx, sb.ContainerID)
	if err != nil || info.RestartCount < 1 {
		t.Fatalf("container restart count = %d, %v; want a restart", info.RestartCount, err)
	}
	// The restart is not a death.
	got, err := m.Get(ctx, sb.ID)
	if err != nil || got.State != core.StateRunning {
		t.Fatalf("Get after the driver crash = %+v, %v", got, err)
	}
	evs = runCommand(t, m, sb.ID, core.ExecRequest{Code: "6 * 7"})
	if lastDone(t, evs).Status != "ok" {
		t.Fatalf("command after restart: %+v", evs)
	}
}

func TestIntegrationDeathFromEvents(t *testing.T) {
	m, c, _ := integrationManager(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	res, err := m.Acquire(ctx, "it-events", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sb := res.Sandbox
	// A follower waits on a command that will never finish.
	id, err := m.Submit(ctx, core.ExecRequest{SandboxID: sb.ID, Code: "import time; time.sleep(60)"})
	if err != nil {
		t.Fatal(err)
	}
	follow := make(chan error, 1)
	go func() { follow <- m.Follow(ctx, sb.ID, id, 0, func(core.Event) error { return nil }) }()
	timeout := 1
	if err := c.ContainerStop(ctx, sb.ContainerID, container.StopOptions{Timeout: &timeout}); err != nil {
		t.Fatal(err)
	}
	// No Get: the event monitor alone must notice.
	got := awaitDead(t, m, sb.ID)
	if !strings.Contains(got.StateReason, "exited with code") {
		t.Errorf("reason = %q", got.StateReason)
	}
	select {
	case err := <-follow:
		wantClass(t, err, core.ErrFailedPrecondition, "died before command")
	case <-time.After(10 * time.Second):
		t.Fatal("Follow did not return after the sandbox died")
	}
	_, err = m.Submit(ctx, core.ExecRequest{SandboxID: sb.ID, Code: "1"})
	wantClass(t, err, core.ErrFailedPrecondition, "is dead")
}

// BenchmarkIntegrationRoundTrip measures a warm command's round trip through
// the /io protocol: Submit plus Follow to done, for "x * 2".
func BenchmarkIntegrationRoundTrip(b *testing.B) {
	c, img := realDocker(b)
	cfg := Config{Policy: core.Policy{Image: img, Runtime: os.Getenv("SANDBOX_RUNTIME")}, StateDir: b.TempDir(), Logger: slog.New(slog.DiscardHandler)}
	m, err := newValidated(b.Context(), cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		m.Close()
		removeTestContainers(b, c, cfg.StateDir)
	}()
	res, err := m.Acquire(b.Context(), "bench", core.Options{})
	if err != nil {
		b.Fatal(err)
	}
	run := func(code string) {
		id, err := m.Submit(b.Context(), core.ExecRequest{SandboxID: res.Sandbox.ID, Code: code})
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Follow(b.Context(), res.Sandbox.ID, id, 0, func(core.Event) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
	run("x = 21") // warm up: the kernel starts with the first command
	b.ResetTimer()
	for b.Loop() {
		run("x * 2")
	}
}

// crashDriver kills the sandbox driver in container id and waits, at most
// a minute, until Docker's restart policy has restarted the container
// and it runs again; it returns the container as then inspected.
func crashDriver(t *testing.T, ctx context.Context, c *client.Client, id string) container.InspectResponse {
	t.Helper()
	before, err := c.ContainerInspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	// The exec's own process dies with the container it killed the
	// driver of, and under gVisor docker exec may then never return:
	// bounded on its own, its outcome is the restart below.
	ectx, ecancel := context.WithTimeout(ctx, 20*time.Second)
	if out, err := exec.CommandContext(ectx, "docker", "exec", id, "pkill", "-KILL", "-x", "sandbox-driver").CombinedOutput(); err != nil {
		t.Logf("docker exec pkill: %v: %s", err, out)
	}
	ecancel()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) { // polling the engine, bounded
		info, err := c.ContainerInspect(ctx, id)
		if err == nil && info.RestartCount > before.RestartCount && info.State.Running && !info.State.Restarting && info.State.StartedAt != before.State.StartedAt {
			return info
		}
		if time.Now().After(deadline) {
			state := "not inspected"
			if err == nil {
				state = fmt.Sprintf("%+v", *info.State)
			}
			t.Fatalf("the container did not restart within a minute: %s, %v", state, err)
		}
	}
}
