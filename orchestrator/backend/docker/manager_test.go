package docker

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/labels"
)

const testImage = "sandboxd-sandbox:test"

// testConfig is a Config for unit tests in a fresh state directory.
func testConfig(t *testing.T) Config {
	t.Helper()
	return Config{
		Policy:        core.Policy{Image: testImage},
		StateDir:      t.TempDir(),
		NoDiskVolumes: true,
		Logger:        slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
		netKernel:     newFakeKernel(),
	}
}

// newTestManager starts a Manager over fd, closed when the test ends, and
// serves it as sandboxd does (validated).
func newTestManager(t *testing.T, cfg Config, fd *fakeDocker) *validated {
	t.Helper()
	m, err := New(t.Context(), cfg, fd)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return validate(m)
}

func acquire(t *testing.T, m *validated, user string) core.AcquireResult {
	t.Helper()
	res, err := m.Acquire(t.Context(), user, core.Options{})
	if err != nil {
		t.Fatalf("Acquire(%s): %v", user, err)
	}
	return res
}

// awaitRemoval waits until the fake engine removes container id.
func awaitRemoval(t *testing.T, fd *fakeDocker, id string, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case got := <-fd.removed:
			if got == id {
				return
			}
		case <-deadline:
			t.Fatalf("container %s was not removed within %v", id[:12], within)
		}
	}
}

// awaitState waits until Get reports state for the sandbox. The monitor
// learns of deaths through events delivered asynchronously, so callers that
// do not inspect (Submit, List's cache) need this; it retries on a short
// tick and fails with what it saw last.
func awaitDead(t *testing.T, m *validated, id string) core.Sandbox {
	t.Helper()
	sb := m.reg.get(id)
	if sb == nil {
		t.Fatalf("sandbox %s is not registered", id)
	}
	select {
	case <-sb.deadCh:
	case <-time.After(5 * time.Second):
		t.Fatalf("sandbox %s was not marked dead within 5s", id)
	}
	return m.snapshot(sb)
}

func wantClass(t *testing.T, err, class error, msgPart string) {
	t.Helper()
	if !errors.Is(err, class) {
		t.Fatalf("error = %v (%T), want class %v", err, err, class)
	}
	if msgPart != "" && !strings.Contains(err.Error(), msgPart) {
		t.Fatalf("error %q does not mention %q", err, msgPart)
	}
}

func TestValidateIDs(t *testing.T) {
	for _, id := range []string{"u", "alice@example.com", "A.b_c-9", strings.Repeat("x", 128)} {
		if err := core.ValidateUserID(id); err != nil {
			t.Errorf("ValidateUserID(%q) = %v, want nil", id, err)
		}
	}
	for _, id := range []string{"", strings.Repeat("x", 129), "a b", "a/b", "ü", "a\x00"} {
		if err := core.ValidateUserID(id); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("ValidateUserID(%q) = %v, want ErrInvalidArgument", id, err)
		}
	}
	for range 100 {
		if id := core.NewSandboxID(); core.ValidateSandboxID(id) != nil {
			t.Fatalf("generated ID %q does not validate: %v", id, core.ValidateSandboxID(id))
		}
	}
	for _, id := range []string{"", "sb-", "sb-ABCDEFGHIJKLMNOPQRST", "sb-aaaaaaaaaaaaaaaaaaaa/", "../etc", "sb-aaaaaaaaaaaaaaaaaaa1"} {
		if err := core.ValidateSandboxID(id); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("ValidateSandboxID(%q) = %v, want ErrInvalidArgument", id, err)
		}
	}
}

func TestAcquireCreatesSandbox(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	cfg.Runtime = "runsc"
	m := newTestManager(t, cfg, fd)

	res, err := m.Acquire(t.Context(), "alice", core.Options{Env: map[string]string{"B": "2", "A": "1"}, Limits: core.Limits{MemoryBytes: 512 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	sb := res.Sandbox
	if !res.Created || res.ReplacedID != "" || sb.State != core.StateRunning || sb.UserID != "alice" {
		t.Fatalf("Acquire = %+v", res)
	}
	if want := sb.LastActiveAt.Add(core.DefaultIdleTTL); !sb.ExpiresAt.Equal(want) {
		t.Errorf("ExpiresAt = %v, want %v", sb.ExpiresAt, want)
	}
	c := fd.container(sb.ContainerID)
	if c == nil {
		t.Fatal("no container")
	}
	dir := filepath.Join(m.cfg.StateDir, "sandboxes", sb.ID)
	checks := []struct {
		what      string
		got, want any
	}{
		{"name", c.name, "sandboxd-" + sb.ID},
		{"label managed", c.cfg.Labels[labels.Managed], "true"},
		{"label sandbox", c.cfg.Labels[labels.SandboxID], sb.ID},
		{"label user", c.cfg.Labels[labels.UserID], "alice"},
		{"label created", c.cfg.Labels[labels.CreatedAt], sb.CreatedAt.UTC().Format(time.RFC3339)},
		{"label state dir", c.cfg.Labels[labels.StateDir], m.cfg.StateDir},
		{"user", c.cfg.User, "1000:1000"},
		{"env", strings.Join(c.cfg.Env, ","), "A=1,B=2"},
		{"image", c.cfg.Image, testImage},
		{"binds", strings.Join(c.host.Binds, ","), dir + "/io:/io:rw," + dir + "/workspace:/workspace:rw"},
		{"network", string(c.host.NetworkMode), "none"},
		{"memory", c.host.Memory, int64(512 << 20)},
		{"swap", c.host.MemorySwap, int64(512 << 20)},
		{"cpus", c.host.NanoCPUs, int64(1e9)},
		{"pids", *c.host.PidsLimit, int64(256)},
		{"readonly", c.host.ReadonlyRootfs, true},
		{"tmpfs", c.host.Tmpfs["/tmp"], "rw,nosuid,nodev,size=256m"},
		{"capdrop", strings.Join(c.host.CapDrop, ","), "ALL"},
		{"secopt", strings.Join(c.host.SecurityOpt, ","), "no-new-privileges"},
		{"init", *c.host.Init, true},
		{"restart", c.host.RestartPolicy.Name, container.RestartPolicyUnlessStopped},
		{"runtime", c.host.Runtime, "runsc"},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.what, ch.got, ch.want)
		}
	}
	for _, p := range []string{"io", "io/out", "workspace"} {
		st, err := os.Stat(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 1000 || sys.Gid != 1000 {
			t.Errorf("%s owned by %d:%d, want 1000:1000", p, sys.Uid, sys.Gid)
		}
	}
	st, err := os.Stat(filepath.Join(dir, "io", "stdin"))
	if err != nil || st.Mode().Perm() != 0o644 || st.Size() != 0 {
		t.Errorf("io/stdin: %v %v", st, err)
	}
	md, err := readMeta(dir)
	if err != nil || md.ContainerID != sb.ContainerID || md.UserID != "alice" || md.Limits.MemoryBytes != 512<<20 {
		t.Errorf("meta = %+v, %v", md, err)
	}

	// The same user gets the same sandbox, and its TTL restarts.
	again := acquire(t, m, "alice")
	if again.Created || again.Sandbox.ID != sb.ID || !again.Sandbox.LastActiveAt.After(sb.LastActiveAt) {
		t.Errorf("second Acquire = %+v, want the same sandbox, refreshed", again)
	}
	if fd.createCount() != 1 {
		t.Errorf("containers created = %d, want 1", fd.createCount())
	}
}

func TestAcquireConcurrentOneSandbox(t *testing.T) {
	fd := newFakeDocker(testImage)
	m := newTestManager(t, testConfig(t), fd)
	const n = 20
	ids := make(chan string, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			res, err := m.Acquire(t.Context(), "bob", core.Options{})
			if err != nil {
				t.Error(err)
				return
			}
			ids <- res.Sandbox.ID
		})
	}
	wg.Wait()
	close(ids)
	first := ""
	for id := range ids {
		if first == "" {
			first = id
		} else if id != first {
			t.Errorf("got sandboxes %s and %s for one user", first, id)
		}
	}
	if fd.createCount() != 1 {
		t.Errorf("containers created = %d, want 1", fd.createCount())
	}
}

func TestAcquireValidation(t *testing.T) {
	fd := newFakeDocker(testImage)
	m := newTestManager(t, testConfig(t), fd)
	ctx := t.Context()
	_, err := m.Acquire(ctx, "bad user", core.Options{})
	wantClass(t, err, core.ErrInvalidArgument, "user ID")
	_, err = m.Acquire(ctx, "u", core.Options{Limits: core.Limits{MemoryBytes: 1 << 40}})
	wantClass(t, err, core.ErrInvalidArgument, "memory_bytes")
	_, err = m.Acquire(ctx, "u", core.Options{Limits: core.Limits{PidsLimit: -1}})
	wantClass(t, err, core.ErrInvalidArgument, "pids_limit")
	_, err = m.Acquire(ctx, "u", core.Options{Env: map[string]string{"A=B": "x"}})
	wantClass(t, err, core.ErrInvalidArgument, "env")
	if fd.createCount() != 0 {
		t.Error("a container was created for an invalid request")
	}
}

func TestAcquireImageMissing(t *testing.T) {
	fd := newFakeDocker() // no image
	m := newTestManager(t, testConfig(t), fd)
	_, err := m.Acquire(t.Context(), "u", core.Options{})
	wantClass(t, err, core.ErrFailedPrecondition, `sandbox image "`+testImage+`" is not present; build it with "make image"`)
	entries, _ := os.ReadDir(filepath.Join(m.cfg.StateDir, "sandboxes"))
	if len(entries) != 0 {
		t.Errorf("state directory not cleaned up: %v", entries)
	}
}

func TestDockerUnavailable(t *testing.T) {
	fd := newFakeDocker(testImage)
	fd.setUnreachable(true)
	_, err := New(t.Context(), testConfig(t), fd)
	wantClass(t, err, core.ErrUnavailable, "docker")

	fd.setUnreachable(false)
	m := newTestManager(t, testConfig(t), fd)
	res := acquire(t, m, "u")
	fd.setUnreachable(true)
	_, err = m.Acquire(t.Context(), "u2", core.Options{})
	wantClass(t, err, core.ErrUnavailable, "")
	_, err = m.Get(t.Context(), res.Sandbox.ID)
	wantClass(t, err, core.ErrUnavailable, "")
	err = m.Delete(t.Context(), res.Sandbox.ID)
	wantClass(t, err, core.ErrUnavailable, "")
	fd.setUnreachable(false)
	// The failed Delete left the sandbox intact, metadata included.
	if _, err := m.Get(t.Context(), res.Sandbox.ID); err != nil {
		t.Fatalf("Get after failed Delete: %v", err)
	}
	if _, err := readMeta(filepath.Join(m.cfg.StateDir, "sandboxes", res.Sandbox.ID)); err != nil {
		t.Fatalf("metadata after failed Delete: %v", err)
	}
}

func TestDeadSandboxIsReplacedVisibly(t *testing.T) {
	fd := newFakeDocker(testImage)
	m := newTestManager(t, testConfig(t), fd)
	first := acquire(t, m, "carol").Sandbox

	fd.exit(first.ContainerID, 137, true)
	// Get inspects, so it sees the death even before the event arrives.
	got, err := m.Get(t.Context(), first.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != core.StateDead || !strings.Contains(got.StateReason, "exited with code 137") || !strings.Contains(got.StateReason, "OOM") {
		t.Fatalf("Get after exit = %+v", got)
	}
	_, err = m.Submit(t.Context(), core.ExecRequest{SandboxID: first.ID, Code: "1"})
	wantClass(t, err, core.ErrFailedPrecondition, "is dead: container exited with code 137")

	res := acquire(t, m, "carol")
	if !res.Created || res.ReplacedID != first.ID || res.ReplacedReason != got.StateReason || res.Sandbox.ID == first.ID {
		t.Fatalf("Acquire after death = %+v", res)
	}
	old, err := m.Get(t.Context(), first.ID)
	if err != nil || old.State != core.StateDead {
		t.Fatalf("dead sandbox no longer visible: %+v, %v", old, err)
	}
	all, err := m.List(t.Context(), core.ListFilter{UserID: "carol"})
	if err != nil || len(all) != 2 || all[0].ID != first.ID || all[1].ID != res.Sandbox.ID {
		t.Fatalf("List = %+v, %v", all, err)
	}
	dead, _ := m.List(t.Context(), core.ListFilter{State: core.StateDead})
	if len(dead) != 1 || dead[0].ID != first.ID {
		t.Fatalf("List(dead) = %+v", dead)
	}
	// The next Acquire returns the replacement, without another replacement.
	if again := acquire(t, m, "carol"); again.Created || again.Sandbox.ID != res.Sandbox.ID {
		t.Fatalf("third Acquire = %+v", again)
	}
}

func TestDeathLearnedFromEvents(t *testing.T) {
	fd := newFakeDocker(testImage)
	m := newTestManager(t, testConfig(t), fd)
	sb := acquire(t, m, "dave").Sandbox
	fd.exit(sb.ContainerID, 1, false)
	got := awaitDead(t, m, sb.ID)
	if got.StateReason != "container exited with code 1" {
		t.Errorf("reason = %q", got.StateReason)
	}
	// Persisted at once: a restart keeps the reason.
	md, err := readMeta(filepath.Join(m.cfg.StateDir, "sandboxes", sb.ID))
	if err != nil || md.State != core.StateDead || md.StateReason != got.StateReason {
		t.Errorf("meta after death = %+v, %v", md, err)
	}
}

func TestRemovedContainerIsDead(t *testing.T) {
	fd := newFakeDocker(testImage)
	m := newTestManager(t, testConfig(t), fd)
	a := acquire(t, m, "a").Sandbox
	b := acquire(t, m, "b").Sandbox
	fd.vanish(a.ContainerID) // no event: Get must find out by itself
	got, err := m.Get(t.Context(), a.ID)
	if err != nil || got.State != core.StateDead || got.StateReason != reasonRemoved {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	fd.vanish(b.ContainerID) // no event: List must find out by itself
	list, err := m.List(t.Context(), core.ListFilter{UserID: "b"})
	if err != nil || len(list) != 1 || list[0].State != core.StateDead || list[0].StateReason != reasonRemoved {
		t.Fatalf("List = %+v, %v", list, err)
	}
}

func TestDelete(t *testing.T) {
	fd := newFakeDocker(testImage)
	m := newTestManager(t, testConfig(t), fd)
	sb := acquire(t, m, "erin").Sandbox
	if err := m.Delete(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if fd.container(sb.ContainerID) != nil {
		t.Error("container still exists")
	}
	if _, err := os.Stat(filepath.Join(m.cfg.StateDir, "sandboxes", sb.ID)); !os.IsNotExist(err) {
		t.Errorf("directory still exists: %v", err)
	}
	_, err := m.Get(t.Context(), sb.ID)
	wantClass(t, err, core.ErrNotFound, sb.ID)
	wantClass(t, m.Delete(t.Context(), sb.ID), core.ErrNotFound, "")
	wantClass(t, m.Delete(t.Context(), "nonsense"), core.ErrInvalidArgument, "")
	// The user gets a fresh sandbox, not a "replacement": it was deleted on purpose.
	if res := acquire(t, m, "erin"); !res.Created || res.ReplacedID != "" {
		t.Errorf("Acquire after Delete = %+v", res)
	}
}

func TestIdleExpiry(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	cfg.IdleTTL = 300 * time.Millisecond
	m := newTestManager(t, cfg, fd)
	sb := acquire(t, m, "frank").Sandbox
	awaitRemoval(t, fd, sb.ContainerID, 5*time.Second)
	// Removal finishes with the directory; wait for the commit point.
	dir := filepath.Join(m.cfg.StateDir, "sandboxes", sb.ID)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(dir); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("sandbox directory not removed after expiry")
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, err := m.Get(t.Context(), sb.ID)
	wantClass(t, err, core.ErrNotFound, "")
}

func TestMaxLifetime(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	cfg.MaxLifetime = 300 * time.Millisecond
	m := newTestManager(t, cfg, fd)
	sb := acquire(t, m, "gina").Sandbox
	if want := sb.CreatedAt.Add(cfg.MaxLifetime); !sb.ExpiresAt.Equal(want) {
		t.Errorf("ExpiresAt = %v, want the lifetime's end %v", sb.ExpiresAt, want)
	}
	// Activity does not extend the lifetime.
	if got, err := m.Get(t.Context(), sb.ID); err != nil || !got.ExpiresAt.Equal(sb.ExpiresAt) {
		t.Errorf("Get = %+v, %v; ExpiresAt must stay", got, err)
	}
	awaitRemoval(t, fd, sb.ContainerID, 5*time.Second)
}

func TestTouchRefreshesTTL(t *testing.T) {
	fd := newFakeDocker(testImage)
	m := newTestManager(t, testConfig(t), fd)
	sb := acquire(t, m, "hank").Sandbox
	prev := sb.ExpiresAt
	ops := map[string]func() error{
		"SetTimeout": func() error { _, err := m.SetTimeout(t.Context(), sb.ID, time.Hour); return err },
		"Submit": func() error {
			_, err := m.Submit(t.Context(), core.ExecRequest{SandboxID: sb.ID, CommandID: "c1"})
			return err
		},
		"Interrupt": func() error { return m.Interrupt(t.Context(), sb.ID, "c1") },
		"ListFiles": func() error { _, err := m.ListFiles(t.Context(), sb.ID, ""); return err },
	}
	for _, name := range []string{"Submit", "Interrupt", "SetTimeout", "ListFiles"} {
		if err := ops[name](); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		item := m.reg.cache.Get(sb.ID)
		cur := m.snapshot(m.reg.get(sb.ID)).ExpiresAt
		if !cur.After(prev) {
			t.Errorf("%s did not refresh the TTL: %v, before %v", name, cur, prev)
		}
		if d := item.ExpiresAt().Sub(cur); d < -5*time.Millisecond || d > 5*time.Millisecond {
			t.Errorf("%s: cache expiry %v disagrees with the sandbox's %v", name, item.ExpiresAt(), cur)
		}
		prev = cur
	}
	// Looking is not using: neither List nor Get counts as use, so a
	// client polling a sandbox does not keep it alive.
	if _, err := m.List(t.Context(), core.ListFilter{}); err != nil {
		t.Fatal(err)
	}
	if cur := m.snapshot(m.reg.get(sb.ID)).ExpiresAt; !cur.Equal(prev) {
		t.Errorf("List refreshed the TTL")
	}
	if _, err := m.Get(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if cur := m.snapshot(m.reg.get(sb.ID)).ExpiresAt; !cur.Equal(prev) {
		t.Errorf("Get refreshed the TTL")
	}
}

func TestMaxSandboxes(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	cfg.MaxSandboxes = 1
	m := newTestManager(t, cfg, fd)
	acquire(t, m, "a")
	_, err := m.Acquire(t.Context(), "b", core.Options{})
	wantClass(t, err, core.ErrResourceExhausted, "maximum of 1")
}

func TestRestartRebuildsRegistry(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	m1, err := newValidated(t.Context(), cfg, fd)
	if err != nil {
		t.Fatal(err)
	}
	alive := acquire(t, m1, "ivan").Sandbox
	doomed := acquire(t, m1, "judy").Sandbox
	if _, err := m1.Submit(t.Context(), core.ExecRequest{SandboxID: alive.ID, CommandID: "before-restart", Code: "x = 1"}); err != nil {
		t.Fatal(err)
	}
	fd.exit(doomed.ContainerID, 2, false)
	awaitDead(t, m1, doomed.ID)
	aliveBefore := m1.snapshot(m1.reg.get(alive.ID))
	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}
	if fd.container(alive.ContainerID) == nil || !fd.container(alive.ContainerID).st.Running {
		t.Fatal("Close stopped or removed a container")
	}

	m2 := newTestManager(t, cfg, fd)
	got, err := m2.Get(t.Context(), alive.ID)
	if err != nil || got.State != core.StateRunning {
		t.Fatalf("after restart Get = %+v, %v", got, err)
	}
	// The idle TTL continues from the persisted last activity (Get only
	// looks, so it shows the restored value).
	restored := m2.reg.get(alive.ID)
	if restored == nil || got.CreatedAt.Sub(aliveBefore.CreatedAt).Abs() > time.Microsecond ||
		!got.LastActiveAt.Equal(aliveBefore.LastActiveAt) || !got.ExpiresAt.Equal(aliveBefore.ExpiresAt) {
		t.Errorf("restored sandbox = %+v, before restart %+v", got, aliveBefore)
	}
	res := acquire(t, m2, "ivan")
	if res.Created || res.Sandbox.ID != alive.ID {
		t.Errorf("Acquire after restart = %+v, want the same sandbox", res)
	}
	// The log index is rebuilt from disk: a retried submit is not appended.
	if id, err := m2.Submit(t.Context(), core.ExecRequest{SandboxID: alive.ID, CommandID: "before-restart", Code: "x = 1"}); err != nil || id != "before-restart" {
		t.Fatalf("Submit after restart = %q, %v", id, err)
	}
	if n := countLines(t, filepath.Join(cfg.StateDir, "sandboxes", alive.ID, "io", "stdin")); n != 1 {
		t.Errorf("stdin has %d lines, want 1", n)
	}
	d, err := m2.Get(t.Context(), doomed.ID)
	if err != nil || d.State != core.StateDead || d.StateReason != "container exited with code 2" {
		t.Fatalf("dead sandbox after restart = %+v, %v", d, err)
	}
	res = acquire(t, m2, "judy")
	if !res.Created || res.ReplacedID != doomed.ID {
		t.Errorf("Acquire for a user whose sandbox died before the restart = %+v", res)
	}
}

func TestRestartRemainingTTL(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	cfg.IdleTTL = time.Hour
	m1, err := newValidated(t.Context(), cfg, fd)
	if err != nil {
		t.Fatal(err)
	}
	sb := acquire(t, m1, "kim").Sandbox
	m1.Close()
	// Pretend the sandbox was last used 59 minutes and 59.7 seconds ago.
	dir := filepath.Join(cfg.StateDir, "sandboxes", sb.ID)
	md, err := readMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	md.LastActiveAt = time.Now().Add(-time.Hour + 300*time.Millisecond)
	if err := writeMeta(dir, md); err != nil {
		t.Fatal(err)
	}
	m2 := newTestManager(t, cfg, fd)
	if m2.reg.get(sb.ID) == nil {
		t.Fatal("sandbox not restored")
	}
	// No call touches it: it expires with the TTL it had left, not a new hour.
	awaitRemoval(t, fd, sb.ContainerID, 5*time.Second)
}

func TestReconcileCleansUp(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	cfg.IdleTTL = time.Hour
	m1, err := newValidated(t.Context(), cfg, fd)
	if err != nil {
		t.Fatal(err)
	}
	expired := acquire(t, m1, "expired").Sandbox
	gone := acquire(t, m1, "gone").Sandbox
	keep := acquire(t, m1, "keep").Sandbox
	noMeta := acquire(t, m1, "nometa").Sandbox
	m1.Close()
	root := filepath.Join(cfg.StateDir, "sandboxes")

	// Expired while sandboxd was down.
	md, _ := readMeta(filepath.Join(root, expired.ID))
	md.LastActiveAt = time.Now().Add(-2 * time.Hour)
	writeMeta(filepath.Join(root, expired.ID), md)
	// Container removed while sandboxd was down.
	fd.vanish(gone.ContainerID)
	// Interrupted delete: metadata gone, container still there.
	os.Remove(filepath.Join(root, noMeta.ID, metaFile))
	// Orphan container of ours, and one of another sandboxd (not ours to touch).
	orphan := fd.addContainer("sandboxd-orphan", map[string]string{labels.Managed: "true", labels.StateDir: cfg.StateDir, labels.SandboxID: core.NewSandboxID()})
	foreign := fd.addContainer("sandboxd-foreign", map[string]string{labels.Managed: "true", labels.StateDir: "/elsewhere", labels.SandboxID: core.NewSandboxID()})
	// Debris of an interrupted create: a directory without metadata.
	debris := filepath.Join(root, core.NewSandboxID())
	os.MkdirAll(filepath.Join(debris, "io"), 0o755)

	m2 := newTestManager(t, cfg, fd)
	for _, c := range []struct {
		name string
		id   string
		want bool
	}{{"expired", expired.ContainerID, false}, {"nometa", noMeta.ContainerID, false}, {"orphan", orphan, false}, {"foreign", foreign, true}, {"keep", keep.ContainerID, true}} {
		if got := fd.container(c.id) != nil; got != c.want {
			t.Errorf("container %s exists = %v, want %v", c.name, got, c.want)
		}
	}
	for _, d := range []string{filepath.Join(root, expired.ID), filepath.Join(root, noMeta.ID), debris} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s not removed: %v", d, err)
		}
	}
	_, err = m2.Get(t.Context(), expired.ID)
	wantClass(t, err, core.ErrNotFound, "")
	g, err := m2.Get(t.Context(), gone.ID)
	if err != nil || g.State != core.StateDead || g.StateReason != reasonRemoved {
		t.Errorf("sandbox whose container vanished = %+v, %v", g, err)
	}
	if k, err := m2.Get(t.Context(), keep.ID); err != nil || k.State != core.StateRunning {
		t.Errorf("kept sandbox = %+v, %v", k, err)
	}
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	fd := newFakeDocker(testImage)
	m, err := newValidated(t.Context(), testConfig(t), fd)
	if err != nil {
		t.Fatal(err)
	}
	acquire(t, m, "u")
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	_, err = m.Acquire(context.Background(), "u", core.Options{})
	wantClass(t, err, core.ErrUnavailable, "shutting down")
	// The subscription ends asynchronously once Close cancelled it.
	deadline := time.After(5 * time.Second)
	for {
		fd.mu.Lock()
		subs := len(fd.subs)
		fd.mu.Unlock()
		if subs == 0 {
			return
		}
		select {
		case <-fd.unsubscribed:
		case <-deadline:
			t.Fatalf("event subscriptions left open 5s after Close: %d", subs)
		}
	}
}

// countLines counts complete lines in a file.
func countLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// records parses every record of a sandbox's stdin.
func records(t *testing.T, m *validated, sandboxID string) []ioproto.Record {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(m.cfg.StateDir, "sandboxes", sandboxID, "io", "stdin"))
	if err != nil {
		t.Fatal(err)
	}
	var out []ioproto.Record
	for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if l == "" {
			continue
		}
		r, _, err := ioproto.ParseRecord([]byte(l))
		if err != nil {
			t.Fatalf("bad record %q: %v", l, err)
		}
		out = append(out, r)
	}
	return out
}

func TestRealClientUnreachable(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no-docker.sock"))
	_, err := New(t.Context(), testConfig(t), nil)
	wantClass(t, err, core.ErrUnavailable, "docker engine is unreachable")
}

func TestStateDirLocked(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	newTestManager(t, cfg, fd)
	_, err := New(t.Context(), cfg, fd)
	wantClass(t, err, core.ErrFailedPrecondition, "in use by another sandboxd")
}
