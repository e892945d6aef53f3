package docker

import (
	"errors"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/egress"
)

// TestWarmPoolWithNetwork: a request with network claims a sandbox of the
// pool with network, whose plumbing was made before and whose policy was
// sealed until the claim set the request's; a request without network
// never gets one; a restart removes the pool's sandboxes and it refills.
func TestWarmPoolWithNetwork(t *testing.T) {
	fd := newFakeDocker(testImage)
	k := newFakeKernel()
	rec := newRecordingMetrics()
	cfg := testConfig(t)
	gw := newPolicyGateway()
	cfg.AllowNetwork, cfg.netKernel, cfg.Metrics = true, k, rec
	cfg.NewGateway = func(egress.Config) Gateway { return gw }
	cfg.WarmPool, cfg.WarmPoolNetwork = 1, 1
	m := newTestManager(t, cfg, fd)
	awaitPool(t, m, 1)
	awaitPoolOf(t, m.netPool, 1)
	sealed, plumbed := poolIDs(m), idsOf(m.netPool)
	if k.linkCount() != 1 || fd.containerNamed(holderNamePrefix+plumbed[0]) == nil {
		t.Fatalf("the pool with network has %d links, holder %v; want its plumbing made", k.linkCount(), fd.containerNamed(holderNamePrefix+plumbed[0]))
	}
	if p, ca := gw.policy(plumbed[0]); p == nil || ca == nil || p.JudgeName("pkg.test") == core.VerdictAllowed || p.JudgeAddr(netip.MustParseAddr("198.18.0.1")).Allows() {
		t.Errorf("an unclaimed pool sandbox is attached with policy %+v, CA %v; want one that refuses everything", p, ca)
	}

	// Without network: the sealed pool's, never a plumbed one.
	res, err := m.Acquire(t.Context(), "sealed", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sandbox.ID != sealed[0] || res.Sandbox.Network {
		t.Errorf("a request without network got %s (network %v); want the sealed pool's %s", res.Sandbox.ID, res.Sandbox.Network, sealed[0])
	}

	// A policy the server refuses is refused as for a cold create, before
	// anything is claimed.
	_, err = m.Acquire(t.Context(), "refused", core.Options{Network: true, NetworkPolicy: &core.NetworkPolicy{AllowOut: []string{"not a destination"}}})
	if !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), "not a destination") {
		t.Errorf("a policy out of the server's bounds: %v; want InvalidArgument naming the entry", err)
	}
	if ids := idsOf(m.netPool); !slices.Equal(ids, plumbed) {
		t.Errorf("the refused request changed the pool with network: %v, was %v", ids, plumbed)
	}

	policy := core.NetworkPolicy{AllowOut: []string{"pkg.test"}, DenyOut: []string{"0.0.0.0/0"},
		Rules: map[string]core.NetworkRule{"api.test": {Headers: map[string]string{"Authorization": "Bearer s3cret"}}}}
	res, err = m.Acquire(t.Context(), "net", core.Options{Network: true, NetworkPolicy: &policy, Env: map[string]string{"K": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sandbox.ID != plumbed[0] || !res.Sandbox.Network {
		t.Fatalf("a request with network got %s (network %v); want the plumbed pool sandbox %s", res.Sandbox.ID, res.Sandbox.Network, plumbed[0])
	}
	st, err := m.NetworkStatus(t.Context(), res.Sandbox.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.Policy.AllowOut, policy.AllowOut) || !slices.Equal(st.Policy.DenyOut, policy.DenyOut) || len(st.Policy.Rules) != 1 {
		t.Errorf("the claimed sandbox's policy is %+v; want %+v", st.Policy, policy.Redacted())
	}
	if p, _ := gw.policy(plumbed[0]); p.JudgeName("pkg.test") != core.VerdictAllowed || p.JudgeName("other.test") == core.VerdictAllowed || p.JudgeAddr(netip.MustParseAddr("198.18.0.1")).Allows() {
		t.Errorf("after the claim the gateway's policy does not allow pkg.test only")
	}
	if _, ok := func() (map[string]string, bool) { p, _ := gw.policy(plumbed[0]); return p.Rule("api.test") }(); !ok {
		t.Errorf("after the claim the gateway has no header rule for api.test")
	}
	md, err := readMeta(sandboxDir(cfg.StateDir, res.Sandbox.ID))
	if err != nil || md.Shaping || md.Pool || !md.Network || md.NetworkPolicy == nil || md.Net == nil || md.Net.Holder == "" {
		t.Errorf("meta.json after the claim: %+v, %v; want shaped, with network, policy and holder", md, err)
	}
	rec.mu.Lock()
	if len(rec.misses) != 0 {
		t.Errorf("misses counted: %v", rec.misses)
	}
	rec.mu.Unlock()
	awaitPoolOf(t, m.netPool, 1)

	// A restart removes the unclaimed one (its pool refills with sandboxes
	// this sandboxd plumbed and attached) and keeps the claimed one.
	again := idsOf(m.netPool)
	if err := m.Manager.Close(); err != nil {
		t.Fatal(err)
	}
	m2 := newTestManager(t, cfg, fd)
	awaitPoolOf(t, m2.netPool, 1)
	if ids := idsOf(m2.netPool); ids[0] == again[0] {
		t.Errorf("the pool with network kept %s across a restart; want it made again", ids[0])
	}
	if fd.containerNamed(holderNamePrefix+again[0]) != nil {
		t.Errorf("the removed pool sandbox's holder is still there")
	}
	if got, err := m2.Get(t.Context(), res.Sandbox.ID); err != nil || !got.Network {
		t.Errorf("the claimed sandbox after a restart: %+v, %v", got, err)
	}
}

// TestReconcileRemovesHalfShapedNetwork: a sandbox of the pool with
// network claimed but not recorded shaped when sandboxd stopped (a kill -9
// between the claim's two writes, its policy maybe applied) is removed at
// the next start, holder, veth and address with it, whatever policy its
// meta.json holds; never handed out, never back in the pool.
func TestReconcileRemovesHalfShapedNetwork(t *testing.T) {
	fd := newFakeDocker(testImage)
	k := newFakeKernel()
	cfg := testConfig(t)
	cfg.AllowNetwork, cfg.netKernel, cfg.WarmPoolNetwork = true, k, 1
	m1, err := newValidated(t.Context(), cfg, fd)
	if err != nil {
		t.Fatal(err)
	}
	awaitPoolOf(t, m1.netPool, 1)
	id := idsOf(m1.netPool)[0]
	addr := m1.netPool.ready[0].net.Addr
	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cfg.StateDir, sandboxesDir, id)
	md, err := readMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	md.Pool, md.Shaping, md.Tenant, md.UserID = false, true, "default", "alice"
	md.NetworkPolicy = policyToMeta(&core.NetworkPolicy{}) // everything, had it been handed out
	if err := writeMeta(dir, md); err != nil {
		t.Fatal(err)
	}
	m2 := newTestManager(t, cfg, fd)
	if fd.containerNamed(holderNamePrefix+id) != nil || fd.container(md.ContainerID) != nil {
		t.Errorf("the half-shaped sandbox's holder or container is still there")
	}
	k.mu.Lock()
	_, ok := k.links[m2.net.names.link(id)]
	k.mu.Unlock()
	if ok {
		t.Errorf("its veth is still there")
	}
	if _, err := m2.Get(t.Context(), id); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("Get of the half-shaped sandbox: %v; want NotFound", err)
	}
	awaitPoolOf(t, m2.netPool, 1)
	if slices.Contains(idsOf(m2.netPool), id) {
		t.Errorf("the half-shaped sandbox went back to the pool")
	}
	m2.net.pool.mu.Lock()
	holder := m2.net.pool.used[addr]
	m2.net.pool.mu.Unlock()
	if holder == id {
		t.Errorf("its address %s is still its", addr)
	}
}

// TestWarmPoolHolderDeath: a sandbox of the pool with network whose
// holder dies leaves the pool, its container and holder removed, and the
// pool refills; it is never claimed without its network.
func TestWarmPoolHolderDeath(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	cfg.AllowNetwork, cfg.netKernel, cfg.WarmPoolNetwork = true, newFakeKernel(), 1
	m := newTestManager(t, cfg, fd)
	awaitPoolOf(t, m.netPool, 1)
	doomed := m.netPool.ready[0]
	fd.exit(doomed.holder(), 137, false)
	awaitRemoval(t, fd, doomed.containerID, 5*time.Second)
	awaitPoolOf(t, m.netPool, 1)
	if idsOf(m.netPool)[0] == doomed.id {
		t.Fatal("the pool sandbox whose holder died is still in the pool")
	}
}
