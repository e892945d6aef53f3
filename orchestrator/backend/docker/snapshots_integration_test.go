package docker

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// stdoutOf runs code in a sandbox and returns its stdout; it fails t
// unless the command ends ok.
func stdoutOf(t *testing.T, m *validated, id, code string) string {
	t.Helper()
	var out string
	evs := runCommand(t, m, id, core.ExecRequest{Code: code})
	for _, e := range evs {
		if e.Type == ioproto.EventStdout {
			out += e.Text
		}
	}
	if d := lastDone(t, evs); d.Status != ioproto.StatusOK {
		t.Fatalf("%q in %s: %+v (stdout %q)", code, id, d, out)
	}
	return out
}

// TestIntegrationNamedSnapshots: a snapshot keeps a running sandbox's
// globals and /workspace while it keeps running; three sandboxes made from
// it each start with both, and are independent of the source and of each
// other; another tenant can neither see, use nor delete it; the snapshot
// survives the source's deletion and a restart of sandboxd; a deleted one
// is gone; a second snapshot of the same name is refused.
func TestIntegrationNamedSnapshots(t *testing.T) {
	m, _, cfg := integrationManager(t)
	ctxA, ctxB := as(t, "tenant-a", false), as(t, "tenant-b", false)
	src, err := m.Acquire(ctxA, "alice", core.Options{Metadata: map[string]string{"team": "data"}})
	if err != nil {
		t.Fatal(err)
	}
	id := src.Sandbox.ID
	stdoutOf(t, m, id, "import numpy as np\nx = 41\narr = np.arange(5)\nopen('/workspace/notes.txt', 'w').write('kept')\nprint('ok')")

	snap, err := m.CreateSnapshot(ctxA, id, "before-refactor")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Level != ioproto.LevelGlobals || snap.Tenant != "tenant-a" || snap.SandboxID != id || snap.Bytes <= 0 || !core.IsSnapshotID(snap.ID) {
		t.Fatalf("snapshot %+v", snap)
	}
	t.Logf("snapshot: %d bytes on disk", snap.Bytes)
	// The source kept running, its state untouched.
	if got := stdoutOf(t, m, id, "x += 1\nprint(x, open('/workspace/notes.txt').read())"); got != "42 kept\n" {
		t.Fatalf("the source after the snapshot: %q", got)
	}
	if _, err := m.CreateSnapshot(ctxA, id, "before-refactor"); !errors.Is(err, core.ErrAlreadyExists) {
		t.Errorf("a second snapshot of the same name: %v; want ALREADY_EXISTS", err)
	}

	// Another tenant: not listed, not usable, not deletable.
	if l, err := m.ListSnapshots(ctxB, core.SnapshotFilter{}); err != nil || len(l) != 0 {
		t.Errorf("tenant-b lists %v, %v", l, err)
	}
	if _, err := m.Acquire(ctxB, "bob", core.Options{FromSnapshot: snap.ID}); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("tenant-b acquiring from tenant-a's snapshot: %v; want NOT_FOUND", err)
	}
	if err := m.DeleteSnapshot(ctxB, snap.ID); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("tenant-b deleting tenant-a's snapshot: %v; want NOT_FOUND", err)
	}

	// The source goes; three sandboxes from the snapshot (by name and ID).
	if err := m.Delete(ctxA, id); err != nil {
		t.Fatal(err)
	}
	var from []string
	for i, ref := range []string{"before-refactor", snap.ID, snap.ID} {
		res, err := m.Acquire(ctxA, fmt.Sprintf("from-%d", i), core.Options{FromSnapshot: ref})
		if err != nil {
			t.Fatal(err)
		}
		if w := res.Woke; !res.Created || w == nil || w.Level != ioproto.LevelGlobals || !strings.Contains(strings.Join(w.Restored, ","), "x") {
			t.Fatalf("acquire from the snapshot: created %v, woke %+v", res.Created, res.Woke)
		}
		from = append(from, res.Sandbox.ID)
	}
	for i, sid := range from {
		if got := stdoutOf(t, m, sid, "print(x, list(arr), open('/workspace/notes.txt').read())"); got != "41 [0, 1, 2, 3, 4] kept\n" {
			t.Errorf("sandbox %d from the snapshot: %q", i, got)
		}
	}
	// Independent: a change in one is seen by no other.
	stdoutOf(t, m, from[0], "x = 0\nopen('/workspace/notes.txt', 'w').write('changed')\nprint()")
	if got := stdoutOf(t, m, from[1], "print(x, open('/workspace/notes.txt').read())"); got != "41 kept\n" {
		t.Errorf("another sandbox after the first changed: %q", got)
	}

	// Kept across a restart of sandboxd; gone once deleted.
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m2, err := newValidated(t.Context(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	l, err := m2.ListSnapshots(ctxA, core.SnapshotFilter{})
	if err != nil || len(l) != 1 || l[0].ID != snap.ID || l[0].Name != "before-refactor" {
		t.Fatalf("after a restart: %+v, %v", l, err)
	}
	if err := m2.DeleteSnapshot(ctxA, "before-refactor"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(cfg.StateDir, snapshotsDir, snap.ID)); !os.IsNotExist(err) {
		t.Errorf("the deleted snapshot's files: %v", err)
	}
	if _, err := m2.Acquire(ctxA, "late", core.Options{FromSnapshot: snap.ID}); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("acquire from a deleted snapshot: %v; want NOT_FOUND", err)
	}
}

// TestIntegrationFork: five forks of a running sandbox each have its
// globals and /workspace; the source keeps running, untouched; forks are
// independent of the source and of each other; a user with a live
// sandbox gets no fork, and the others still do; no snapshot is left.
func TestIntegrationFork(t *testing.T) {
	m, _, cfg := integrationManager(t)
	ctx := as(t, "tenant-a", false)
	src, err := m.Acquire(ctx, "explorer", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	id := src.Sandbox.ID
	stdoutOf(t, m, id, "branch = 'root'\nimport os\nos.makedirs('/workspace/d', exist_ok=True)\nopen('/workspace/d/f', 'w').write('root')\nprint()")
	busy, err := m.Acquire(ctx, "busy", core.Options{})
	if err != nil {
		t.Fatal(err)
	}

	users := []string{"b1", "b2", "busy", "b3", "b4"}
	rs, err := m.Fork(ctx, id, core.ForkRequest{Count: len(users), UserIDs: users})
	if err != nil {
		t.Fatal(err)
	}
	var forks []string
	for i, r := range rs {
		if users[i] == "busy" {
			if !errors.Is(r.Err, core.ErrAlreadyExists) {
				t.Errorf("fork for a user with a live sandbox: %+v; want ALREADY_EXISTS", r)
			}
			continue
		}
		if r.Err != nil || r.Woke == nil || r.Woke.Level != ioproto.LevelGlobals || r.Sandbox.UserID != users[i] {
			t.Fatalf("fork %d: %+v", i, r)
		}
		forks = append(forks, r.Sandbox.ID)
	}
	for i, f := range forks {
		stdoutOf(t, m, f, fmt.Sprintf("branch = 'fork-%d'\nopen('/workspace/d/f', 'w').write(branch)\nprint()", i))
	}
	for i, f := range forks {
		if got := stdoutOf(t, m, f, "print(branch, open('/workspace/d/f').read())"); got != fmt.Sprintf("fork-%d fork-%d\n", i, i) {
			t.Errorf("fork %d: %q", i, got)
		}
	}
	if got := stdoutOf(t, m, id, "print(branch, open('/workspace/d/f').read())"); got != "root root\n" {
		t.Errorf("the source after its forks changed: %q", got)
	}
	if got := stdoutOf(t, m, busy.Sandbox.ID, "print('untouched')"); got != "untouched\n" {
		t.Errorf("busy's own sandbox: %q", got)
	}
	if l, _ := m.ListSnapshots(ctx, core.SnapshotFilter{}); len(l) != 0 {
		t.Errorf("a fork left snapshots listed: %+v", l)
	}
	if ents, _ := os.ReadDir(filepath.Join(cfg.StateDir, snapshotsDir)); len(ents) != 0 {
		t.Errorf("a fork left %d entries in the snapshots directory", len(ents))
	}
}

// TestIntegrationSnapshotBudget: a snapshot that would pass the tenant's
// share is refused, RESOURCE_EXHAUSTED naming the budget, and leaves
// nothing behind.
func TestIntegrationSnapshotBudget(t *testing.T) {
	m, _, cfg := integrationManager(t, func(c *Config) { c.SnapshotDiskBudgetPerTenant = 1 << 20 })
	ctx := as(t, "tenant-a", false)
	res, err := m.Acquire(ctx, "alice", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	stdoutOf(t, m, res.Sandbox.ID, "big = bytes(3_000_000)\nprint()")
	_, err = m.CreateSnapshot(ctx, res.Sandbox.ID, "too-big")
	if !errors.Is(err, core.ErrResourceExhausted) || !strings.Contains(err.Error(), "--snapshot-disk-budget-per-tenant") {
		t.Fatalf("a snapshot past the tenant's budget: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(cfg.StateDir, snapshotsDir)); len(ents) != 0 {
		t.Errorf("a refused snapshot left %d entries", len(ents))
	}
}

// TestIntegrationForkInPool: with a warm pool, forks and a start from a
// named snapshot run in pool containers (carried, as a fast wake is), with
// the source's globals (numpy and pandas objects), files, env and limits,
// each on its own; with the pool empty, the rest start containers of
// their own, the same. The source keeps running, untouched.
func TestIntegrationForkInPool(t *testing.T) {
	if rt := os.Getenv("SANDBOX_RUNTIME"); !runtimeIsRunc(rt) {
		t.Skipf("fast wake, and so a start in a pool container, is runc's only (runtime %q)", rt)
	}
	rec := newRecordingMetrics()
	m, _, _ := integrationManager(t, func(c *Config) { c.WarmPool, c.Metrics = 2, rec })
	ctx := as(t, "tenant-a", false)
	awaitPoolWithin(t, m, 2, 2*time.Minute)
	limits := core.Limits{MemoryBytes: 384 << 20, NanoCPUs: 500_000_000, PidsLimit: 200}
	src, err := m.Acquire(ctx, "explorer", core.Options{Env: map[string]string{"SBX_A": "src"}, Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	id := src.Sandbox.ID
	stdoutOf(t, m, id, "import numpy as np, pandas as pd\ndf = pd.DataFrame({'a': np.arange(4)})\nbranch = 'root'\nopen('/workspace/f', 'w').write('root')\nprint()")
	awaitPoolWithin(t, m, 2, 2*time.Minute)
	pool := poolContainers(m)
	inPool := func(cid string) bool { return slices.Contains(slices.Collect(maps.Values(pool)), cid) }

	rs, err := m.Fork(ctx, id, core.ForkRequest{Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	carried := 0
	for i, r := range rs {
		if r.Err != nil || r.Woke == nil || r.Woke.Level != ioproto.LevelGlobals {
			t.Fatalf("fork %d: %+v", i, r)
		}
		f := r.Sandbox.ID
		if inPool(r.Sandbox.ContainerID) {
			carried++
		}
		if got := stdoutOf(t, m, f, "import os\nprint(branch, int(df.a.sum()), open('/workspace/f').read(), os.environ.get('SBX_A'))"); got != "root 6 root src\n" {
			t.Errorf("fork %d (in a pool container: %v): %q", i, inPool(r.Sandbox.ContainerID), got)
		}
		if r.Sandbox.Limits.MemoryBytes != limits.MemoryBytes {
			t.Errorf("fork %d's limits: %+v; want the source's %+v", i, r.Sandbox.Limits, limits)
		}
		if _, err := os.Stat("/sys/fs/cgroup/memory"); err == nil {
			if v := hostCgroupValue(t, "memory", r.Sandbox.ContainerID, "memory.limit_in_bytes"); v != strconv.FormatInt(limits.MemoryBytes, 10) {
				t.Errorf("fork %d's container has a memory limit of %s; want %d", i, v, limits.MemoryBytes)
			}
		}
		stdoutOf(t, m, f, fmt.Sprintf("branch = 'fork-%d'\nopen('/workspace/f', 'w').write(branch)\nprint()", i))
	}
	// The pool held two: two forks ran in it, the third in its own
	// container (the pool refills in the background).
	if carried < 1 || carried > 2 {
		t.Errorf("%d of 3 forks ran in pool containers; want the pool's (1 or 2, as its refill raced)", carried)
	}
	if got := stdoutOf(t, m, id, "print(branch, open('/workspace/f').read())"); got != "root root\n" {
		t.Errorf("the source after its forks: %q", got)
	}

	// A start from a named snapshot, in a pool container.
	snap, err := m.CreateSnapshot(ctx, id, "base")
	if err != nil {
		t.Fatal(err)
	}
	awaitPoolWithin(t, m, 2, 2*time.Minute)
	pool = poolContainers(m)
	res, err := m.Acquire(ctx, "from-snap", core.Options{FromSnapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	if !inPool(res.Sandbox.ContainerID) {
		t.Errorf("the start from a snapshot ran in container %s, not in the pool's %v", res.Sandbox.ContainerID, pool)
	}
	if res.Woke == nil || res.Woke.Level != ioproto.LevelGlobals {
		t.Errorf("the start from a snapshot reports %+v; want level globals", res.Woke)
	}
	if got := stdoutOf(t, m, res.Sandbox.ID, "print(branch, int(df.a.sum()))"); got != "root 6\n" {
		t.Errorf("after the start from a snapshot: %q", got)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if n := slices.Index(rec.acquires, core.AcquireWarmPool); n < 0 {
		t.Errorf("no acquire counted as warm_pool: %v", rec.acquires)
	}
}
