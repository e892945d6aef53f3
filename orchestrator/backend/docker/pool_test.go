package docker

import (
	"encoding/json"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/orchestrator/labels"
)

// awaitPool waits until m's warm pool holds n ready sandboxes.
func awaitPool(t *testing.T, m *validated, n int) {
	t.Helper()
	awaitPoolOf(t, m.pool, n)
}

// awaitPoolOf waits until pool p holds n ready sandboxes.
func awaitPoolOf(t *testing.T, p *warmPool, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for p.size() != n {
		if time.Now().After(deadline) {
			t.Fatalf("warm pool (network %v) holds %d sandboxes after 10s; want %d", p.network, p.size(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// poolIDs returns the IDs of the pool's ready sandboxes.
func poolIDs(m *validated) []string { return idsOf(m.pool) }

// idsOf returns the IDs of pool p's ready sandboxes.
func idsOf(p *warmPool) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ids []string
	for _, sb := range p.ready {
		ids = append(ids, sb.id)
	}
	return ids
}

func TestWarmPoolClaimAndRefill(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	cfg.WarmPool = 2
	m := newTestManager(t, cfg, fd)
	awaitPool(t, m, 2)
	if n := fd.createCount(); n != 2 {
		t.Fatalf("%d containers created for a pool of 2", n)
	}
	pooled := poolIDs(m)
	for _, id := range pooled {
		c := fd.container(m.pool.ready[slices.Index(pooled, id)].containerID)
		if c.cfg.Labels[labels.Pool] != "true" || c.cfg.Labels[labels.UserID] != "" || c.cfg.Labels[labels.Tenant] != "" {
			t.Errorf("pool container labels = %v", c.cfg.Labels)
		}
	}
	// Unclaimed pool sandboxes are nobody's: not even an admin lists them.
	if list, _ := m.List(t.Context(), core.ListFilter{}); len(list) != 0 {
		t.Errorf("List shows pool sandboxes: %+v", list)
	}

	before := time.Now()
	res, err := m.Acquire(as(t, "acme", false), "alice", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Created || res.Sandbox.ID != pooled[0] {
		t.Fatalf("Acquire = %+v; want the oldest pool sandbox %s, created", res, pooled[0])
	}
	if res.Sandbox.Tenant != "acme" || res.Sandbox.UserID != "alice" || res.Sandbox.CreatedAt.Before(before) {
		t.Errorf("claimed sandbox = %+v; want acme's alice, created at the claim", res.Sandbox)
	}
	md, err := readMeta(sandboxDir(m.cfg.StateDir, res.Sandbox.ID))
	if err != nil || md.Pool || md.Tenant != "acme" || md.UserID != "alice" {
		t.Errorf("meta.json after the claim = %+v, %v", md, err)
	}
	if again := acquire(t, m, "bob"); again.Sandbox.ID != pooled[1] {
		t.Errorf("second new user got %s; want the other pool sandbox %s", again.Sandbox.ID, pooled[1])
	}
	awaitPool(t, m, 2)
	if n := fd.createCount(); n != 4 {
		t.Errorf("%d containers created; want 4 (2 claimed, 2 refilled)", n)
	}

}

// poolOfOne is a Manager over a fake engine with a warm pool of one,
// ready, and the metrics it reports.
func poolOfOne(t *testing.T) (*fakeDocker, *recordingMetrics, Config, *validated) {
	t.Helper()
	fd := newFakeDocker(testImage)
	rec := newRecordingMetrics()
	cfg := testConfig(t)
	cfg.WarmPool = 1
	cfg.Metrics = rec
	m := newTestManager(t, cfg, fd)
	awaitPool(t, m, 1)
	return fd, rec, cfg, m
}

// TestWarmPoolColdForOptions: what a started container cannot take goes
// to a cold create, the pool untouched, and each is counted by its reason.
func TestWarmPoolColdForOptions(t *testing.T) {
	fd, rec, _, m := poolOfOne(t)
	ready := poolIDs(m)
	for _, tc := range []struct {
		user string
		opts core.Options
		miss core.PoolMiss
	}{
		{"driver-env", core.Options{Env: map[string]string{"SANDBOX_MAX_OUTPUT": "4096"}}, core.PoolMissEnv},
	} {
		res, err := m.Acquire(t.Context(), tc.user, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		if res.Sandbox.ID == ready[0] || !slices.Equal(poolIDs(m), ready) {
			t.Errorf("user asking for %s got pool sandbox %s (pool now %v)", tc.user, res.Sandbox.ID, poolIDs(m))
		}
		rec.mu.Lock()
		if n := rec.misses[tc.miss]; n != 1 {
			t.Errorf("%s: %d misses counted as %q; want 1 (%v)", tc.user, n, tc.miss, rec.misses)
		}
		rec.mu.Unlock()
	}
	// Default limits given explicitly are still the defaults: the pool fits.
	res, err := m.Acquire(t.Context(), "explicit", core.Options{Limits: m.cfg.DefaultLimits})
	if err != nil || res.Sandbox.ID != ready[0] {
		t.Errorf("explicit default limits got %+v, %v; want pool sandbox %s", res, err, ready[0])
	}
	if n := fd.updates; n != 0 {
		t.Errorf("%d container updates for default limits; want none", n)
	}
}

// TestPoolMissReasons: each option a started container cannot take has
// its reason; what it can take (limits of cgroups, metadata, timeouts)
// has none.
func TestPoolMissReasons(t *testing.T) {
	def := core.Limits{MemoryBytes: 1 << 30, NanoCPUs: 1e9, PidsLimit: 256, DiskBytes: 1 << 30}
	m := &Manager{cfg: Config{Policy: core.Policy{DefaultLimits: def}}}
	base := sandboxSpec{limits: def}
	with := func(f func(*sandboxSpec)) sandboxSpec { s := base; f(&s); return s }
	for _, tc := range []struct {
		name string
		spec sandboxSpec
		want core.PoolMiss
	}{
		{"defaults", base, ""},
		{"cgroup limits", with(func(s *sandboxSpec) { s.limits.MemoryBytes, s.limits.NanoCPUs, s.limits.PidsLimit = 2<<30, 2e9, 64 }), ""},
		{"metadata and timeouts", with(func(s *sandboxSpec) {
			s.metadata, s.idleTTL, s.onIdle = map[string]string{"a": "b"}, time.Hour, core.OnIdleDelete
		}), ""},
		{"network", with(func(s *sandboxSpec) { s.network = true }), ""}, // the pool with network (poolFor)
		{"network and a template", with(func(s *sandboxSpec) { s.network, s.image = true, "sha256:t" }), core.PoolMissNetwork},
		{"network from a snapshot", with(func(s *sandboxSpec) { s.network, s.from = true, &snapFile{} }), core.PoolMissNetwork},
		{"volumes", with(func(s *sandboxSpec) { s.volumes = []core.VolumeMount{{Volume: "vol-x", Path: "/data"}} }), core.PoolMissVolumes},
		{"snapshot", with(func(s *sandboxSpec) { s.from = &snapFile{} }), core.PoolMissSnapshot},
		{"disk", with(func(s *sandboxSpec) { s.limits.DiskBytes = 2 << 30 }), core.PoolMissDisk},
		{"env", with(func(s *sandboxSpec) { s.env = map[string]string{"K": "v"} }), ""},
		{"driver env", with(func(s *sandboxSpec) { s.env = map[string]string{"K": "v", "SANDBOX_POOL_DRIVER": "1"} }), core.PoolMissEnv},
	} {
		if got := m.poolMiss(tc.spec); got != tc.want {
			t.Errorf("%s: %q; want %q", tc.name, got, tc.want)
		}
	}
	gvisor := &Manager{cfg: Config{Policy: core.Policy{DefaultLimits: def, Runtime: core.RuntimeGVisor}}}
	if got := gvisor.poolMiss(with(func(s *sandboxSpec) { s.limits.MemoryBytes = 2 << 30 })); got != core.PoolMissLimits {
		t.Errorf("other limits under gVisor: %q; want %q", got, core.PoolMissLimits)
	}
}

// TestWarmPoolShapesLimits: a request for other limits of memory, CPUs and
// processes is a claim, the container's cgroups changed in place, and
// meta.json records the sandbox shaped with them.
func TestWarmPoolShapesLimits(t *testing.T) {
	fd, rec, cfg, m := poolOfOne(t)
	ready := poolIDs(m)
	want := core.Limits{MemoryBytes: 512 << 20, NanoCPUs: 5e8, PidsLimit: 100, DiskBytes: m.cfg.DefaultLimits.DiskBytes}
	res, err := m.Acquire(t.Context(), "alice", core.Options{Limits: want})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sandbox.ID != ready[0] {
		t.Fatalf("got %s; want the pool sandbox %s", res.Sandbox.ID, ready[0])
	}
	if res.Sandbox.Limits != want {
		t.Errorf("the claimed sandbox's limits are %+v; want %+v", res.Sandbox.Limits, want)
	}
	c := fd.container(res.Sandbox.ContainerID)
	if r := c.host.Resources; r.Memory != want.MemoryBytes || r.MemorySwap != want.MemoryBytes || r.NanoCPUs != want.NanoCPUs || r.PidsLimit == nil || *r.PidsLimit != want.PidsLimit {
		t.Errorf("the container's resources are %+v; want memory (and swap) %d, CPUs %d, pids %d", r, want.MemoryBytes, want.NanoCPUs, want.PidsLimit)
	}
	md, err := readMeta(filepath.Join(cfg.StateDir, sandboxesDir, res.Sandbox.ID))
	if err != nil || md.Shaping || md.Pool || md.Limits != want {
		t.Errorf("meta.json after the claim: shaping %v, pool %v, limits %+v, %v; want shaped with %+v", md.Shaping, md.Pool, md.Limits, err, want)
	}
	if got, err := m.Get(t.Context(), res.Sandbox.ID); err != nil || got.Limits != want {
		t.Errorf("Get: %+v, %v", got.Limits, err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.misses) != 0 {
		t.Errorf("misses counted: %v", rec.misses)
	}
}

// TestWarmPoolShapesEnv: a request with env takes a pool sandbox, whose
// log gets an env record with the variables before anything else the user
// sends, and meta.json keeps them (for its wakes and forks).
func TestWarmPoolShapesEnv(t *testing.T) {
	_, _, cfg, m := poolOfOne(t)
	ready := poolIDs(m)
	env := map[string]string{"API_URL": "http://api.test", "MODE": "x y"}
	res, err := m.Acquire(t.Context(), "alice", core.Options{Env: env})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sandbox.ID != ready[0] {
		t.Fatalf("got %s; want the pool sandbox %s", res.Sandbox.ID, ready[0])
	}
	dir := filepath.Join(cfg.StateDir, sandboxesDir, res.Sandbox.ID)
	md, err := readMeta(dir)
	if err != nil || md.Shaping || !maps.Equal(md.Env, env) {
		t.Errorf("meta.json: shaping %v, env %v, %v; want shaped with %v", md.Shaping, md.Env, err, env)
	}
	b, err := os.ReadFile(filepath.Join(dir, ioDir, ioproto.StdinFile))
	if err != nil {
		t.Fatal(err)
	}
	var last ioproto.Record
	for line := range strings.Lines(string(b)) {
		if err := json.Unmarshal([]byte(line), &last); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
	}
	if last.Type != ioproto.KindEnv || !maps.Equal(last.Env, env) || !strings.HasPrefix(last.CommandID, ioproto.EnvRecordIDPrefix) {
		t.Errorf("the log's last record is %+v; want an env record with %v", last, env)
	}
}

// TestWarmPoolShapingFails: a claimed sandbox that cannot take the limits
// is discarded, never handed out, and the request is created cold.
func TestWarmPoolShapingFails(t *testing.T) {
	fd, rec, cfg, m := poolOfOne(t)
	ready := poolIDs(m)
	pmd, err := readMeta(filepath.Join(cfg.StateDir, sandboxesDir, ready[0]))
	if err != nil {
		t.Fatal(err)
	}
	fd.mu.Lock()
	fd.updateErr = errors.New("cgroup write refused")
	fd.mu.Unlock()
	want := core.Limits{MemoryBytes: 512 << 20, NanoCPUs: m.cfg.DefaultLimits.NanoCPUs, PidsLimit: m.cfg.DefaultLimits.PidsLimit, DiskBytes: m.cfg.DefaultLimits.DiskBytes}
	res, err := m.Acquire(t.Context(), "alice", core.Options{Limits: want})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sandbox.ID == ready[0] {
		t.Fatalf("the pool sandbox whose shaping failed was handed out")
	}
	if c := fd.container(res.Sandbox.ContainerID); c.host.Resources.Memory != want.MemoryBytes {
		t.Errorf("the cold sandbox's memory is %d; want %d", c.host.Resources.Memory, want.MemoryBytes)
	}
	select {
	case id := <-fd.removed:
		if id != pmd.ContainerID {
			t.Errorf("removed container %s; want the failed pool sandbox's", id)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("the pool sandbox whose shaping failed was not removed")
	}
	if _, err := os.Stat(filepath.Join(cfg.StateDir, sandboxesDir, ready[0])); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("its directory: %v; want removed", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.misses[core.PoolMissShaping] != 1 {
		t.Errorf("misses: %v; want one shaping_failed", rec.misses)
	}
}

// TestReconcileRemovesHalfShaped: a sandbox sandboxd was shaping when it
// stopped (meta.json says so) is removed at the next start: its Acquire
// never returned it, and it must never go back to the pool.
func TestReconcileRemovesHalfShaped(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	cfg.WarmPool = 1
	m1, err := newValidated(t.Context(), cfg, fd)
	if err != nil {
		t.Fatal(err)
	}
	awaitPool(t, m1, 1)
	id := poolIDs(m1)[0]
	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}
	// What a kill -9 between the claim's two writes leaves: the sandbox
	// the user's, its shaping not recorded done.
	dir := filepath.Join(cfg.StateDir, sandboxesDir, id)
	md, err := readMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	md.Pool, md.Shaping, md.Tenant, md.UserID = false, true, "default", "alice"
	if err := writeMeta(dir, md); err != nil {
		t.Fatal(err)
	}
	cid := md.ContainerID
	rec := newRecordingMetrics()
	cfg.Metrics = rec
	m2 := newTestManager(t, cfg, fd)
	if fd.container(cid) != nil {
		t.Errorf("the half-shaped sandbox's container is still there")
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("its directory: %v; want removed", err)
	}
	if slices.Contains(poolIDs(m2), id) {
		t.Errorf("the half-shaped sandbox went back to the pool")
	}
	if _, err := m2.Get(t.Context(), id); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("Get of the half-shaped sandbox: %v; want NotFound", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.reconciled[core.ReconcileHalfShaped] != 1 {
		t.Errorf("reconciled: %v; want one half_shaped", rec.reconciled)
	}
}

func TestWarmPoolSurvivesRestart(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	cfg.WarmPool = 3
	m1, err := newValidated(t.Context(), cfg, fd)
	if err != nil {
		t.Fatal(err)
	}
	awaitPool(t, m1, 3)
	claimed := acquire(t, m1, "alice").Sandbox
	awaitPool(t, m1, 3)
	pooled := poolIDs(m1)
	creates := fd.createCount()
	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}

	cfg.WarmPool = 2 // restarted with a smaller pool
	m2 := newTestManager(t, cfg, fd)
	if got := poolIDs(m2); len(got) != 2 || !slices.Contains(pooled, got[0]) || !slices.Contains(pooled, got[1]) {
		t.Errorf("after restart the pool holds %v; want 2 of %v", got, pooled)
	}
	if n := fd.createCount(); n != creates {
		t.Errorf("restart created %d containers; want none", n-creates)
	}
	// The third one, beyond the new size, was removed.
	select {
	case id := <-fd.removed:
		if fd.container(id) != nil {
			t.Errorf("removed container %s still exists", id)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("the pool sandbox beyond the new size was not removed")
	}
	got, err := m2.Acquire(t.Context(), "alice", core.Options{})
	if err != nil || got.Created || got.Sandbox.ID != claimed.ID {
		t.Errorf("after restart alice gets %+v, %v; want her claimed sandbox %s", got, err, claimed.ID)
	}
}

func TestWarmPoolDeathRefills(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	cfg.WarmPool = 1
	m := newTestManager(t, cfg, fd)
	awaitPool(t, m, 1)
	doomed := m.pool.ready[0]
	fd.exit(doomed.containerID, 137, true)
	awaitRemoval(t, fd, doomed.containerID, 5*time.Second)
	awaitPool(t, m, 1)
	if poolIDs(m)[0] == doomed.id {
		t.Fatal("the dead pool sandbox is still in the pool")
	}

	// A death the monitor has not seen yet is caught by the claim's inspect.
	doomed = m.pool.ready[0]
	fd.mu.Lock()
	fd.containers[doomed.containerID].st.Running = false
	fd.containers[doomed.containerID].st.Status = "exited"
	fd.mu.Unlock()
	res := acquire(t, m, "u")
	if res.Sandbox.ID == doomed.id {
		t.Errorf("a dead pool sandbox was handed out")
	}
}

func TestWarmPoolUnderMaxSandboxes(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	cfg.WarmPool, cfg.MaxSandboxes = 2, 2
	m := newTestManager(t, cfg, fd)
	awaitPool(t, m, 2)
	// A request the pool cannot serve makes room by removing a pool sandbox.
	res, err := m.Acquire(t.Context(), "env", core.Options{Env: map[string]string{"K": "v"}})
	if err != nil {
		t.Fatalf("Acquire at the cap with a full pool: %v", err)
	}
	if slices.Contains(poolIDs(m), res.Sandbox.ID) || m.pool.size() != 1 {
		t.Errorf("pool after making room = %v", poolIDs(m))
	}
	acquire(t, m, "pooled")
	// Now two users hold the two sandboxes the cap allows: the pool has no
	// room, and the next user is refused.
	if m.poolHasRoom(m.pool) {
		t.Errorf("the pool may grow beyond the cap")
	}
	_, err = m.Acquire(t.Context(), "third", core.Options{})
	wantClass(t, err, core.ErrResourceExhausted, "maximum of 2 sandboxes")

	cfg = testConfig(t)
	cfg.WarmPool, cfg.MaxSandboxes = 3, 2
	_, err = New(t.Context(), cfg, fd)
	wantClass(t, err, core.ErrInvalidArgument, "warm pools of 3 exceed MaxSandboxes 2")
}

func TestWarmPoolOutlivesClose(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	cfg.WarmPool = 2
	m, err := newValidated(t.Context(), cfg, fd)
	if err != nil {
		t.Fatal(err)
	}
	awaitPool(t, m, 2)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	for _, sb := range m.pool.ready {
		if c := fd.container(sb.containerID); c == nil || !c.st.Running {
			t.Errorf("Close stopped pool sandbox %s", sb.id)
		}
	}
}
