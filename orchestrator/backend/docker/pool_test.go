package docker

import (
	"slices"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/orchestrator/labels"
)

// awaitPool waits until m's warm pool holds n ready sandboxes.
func awaitPool(t *testing.T, m *validated, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for m.pool.size() != n {
		if time.Now().After(deadline) {
			t.Fatalf("warm pool holds %d sandboxes after 10s; want %d", m.pool.size(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// poolIDs returns the IDs of the pool's ready sandboxes.
func poolIDs(m *validated) []string {
	m.pool.mu.Lock()
	defer m.pool.mu.Unlock()
	var ids []string
	for _, sb := range m.pool.ready {
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

func TestWarmPoolColdForOptions(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	cfg.WarmPool = 1
	m := newTestManager(t, cfg, fd)
	awaitPool(t, m, 1)
	ready := poolIDs(m)
	for user, opts := range map[string]core.Options{
		"env":    {Env: map[string]string{"K": "v"}},
		"memory": {Limits: core.Limits{MemoryBytes: 512 << 20}},
	} {
		res, err := m.Acquire(t.Context(), user, opts)
		if err != nil {
			t.Fatal(err)
		}
		if res.Sandbox.ID == ready[0] || !slices.Equal(poolIDs(m), ready) {
			t.Errorf("user asking for %s got pool sandbox %s (pool now %v)", user, res.Sandbox.ID, poolIDs(m))
		}
	}
	// Default limits given explicitly are still the defaults: the pool fits.
	res, err := m.Acquire(t.Context(), "explicit", core.Options{Limits: m.cfg.DefaultLimits})
	if err != nil || res.Sandbox.ID != ready[0] {
		t.Errorf("explicit default limits got %+v, %v; want pool sandbox %s", res, err, ready[0])
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
	if m.poolHasRoom() {
		t.Errorf("the pool may grow beyond the cap")
	}
	_, err = m.Acquire(t.Context(), "third", core.Options{})
	wantClass(t, err, core.ErrResourceExhausted, "maximum of 2 sandboxes")

	cfg = testConfig(t)
	cfg.WarmPool, cfg.MaxSandboxes = 3, 2
	_, err = New(t.Context(), cfg, fd)
	wantClass(t, err, core.ErrInvalidArgument, "warm pool of 3 exceeds MaxSandboxes 2")
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
