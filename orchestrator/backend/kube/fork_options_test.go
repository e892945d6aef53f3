package kube

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/backend/kube/iosidecar"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// forkSidecar is a snapSidecar (Export, Import) with a netSidecar's
// gateway (SetEgress, logged).
type forkSidecar struct {
	*snapSidecar
	net *netSidecar
}

func (s *forkSidecar) SetEgress(ctx context.Context, p iosidecar.EgressPolicy) (bool, error) {
	return s.net.SetEgress(ctx, p)
}

func (s *forkSidecar) EgressStatus(ctx context.Context) (core.NetworkCounters, []core.NetworkDenial, uint64, error) {
	return s.net.EgressStatus(ctx)
}

// TestKubeForkCarriesOptions: a fork is made with every option of its
// source, field by field over core.Options (but FromSnapshot, its state;
// Template, which this backend has not; and Volumes, which need claims
// and which the snapshot's record carries): its env on its Pod (without
// the CA's, which its network adds again), its network policy with the
// header rules sealed for the fork's own sidecar, limits, metadata and
// timeouts. A fork asked with options of its own keeps them, with the
// source's env and network where it has none. On the code of issue 43
// the fork had no env and no network.
func TestKubeForkCarriesOptions(t *testing.T) {
	log := &egressLog{}
	e := &snapEnv{workspaces: map[string][]byte{}}
	e.hibEnv = newHibEnv(t, func(c *Config) {
		c.AllowNetwork, c.EgressCNI = true, true
		c.EgressCluster = []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}
		c.EgressHosts = map[string][]netip.Addr{"allowed.test": {netip.MustParseAddr("198.18.0.1")}}
		c.SnapshotDir = t.TempDir()
		c.DialIO = func(_ context.Context, addr, _ string) (IOConn, error) {
			s := &snapSidecar{hibSidecar: &hibSidecar{env: e.hibEnv, pod: addr}, env: e}
			return &forkSidecar{snapSidecar: s, net: &netSidecar{hibSidecar: s.hibSidecar, log: log}}, nil
		}
	})
	ctx := core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
	opts := core.Options{
		Limits:  core.Limits{MemoryBytes: 192 << 20, NanoCPUs: 25e7, PidsLimit: 99, DiskBytes: 1 << 30},
		Env:     map[string]string{"FORK_ENV": "carried"},
		Network: true,
		NetworkPolicy: &core.NetworkPolicy{AllowOut: []string{"allowed.test", "api.test"}, DenyOut: []string{"0.0.0.0/0"},
			Rules: map[string]core.NetworkRule{"api.test": {Headers: map[string]string{"X-Api-Key": "s3cret"}}}, AllowPublicTraffic: true},
		Metadata:    map[string]string{"team": "data"},
		IdleTimeout: 17 * time.Minute,
		OnIdle:      core.OnIdleDelete,
	}
	skip := []string{"FromSnapshot", "Template", "Volumes"}
	v := reflect.ValueOf(opts)
	for i := range v.NumField() {
		if name := v.Type().Field(i).Name; !slices.Contains(skip, name) && v.Field(i).IsZero() {
			t.Fatalf("core.Options.%s is not set by this test: set it, so that it checks that forks carry it", name)
		}
	}
	r, err := e.m.Acquire(ctx, "alice", opts)
	if err != nil {
		t.Fatal(err)
	}
	src := r.Sandbox.ID
	want, err := e.m.optionsOf(e.pod(t, src))
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.m.Fork(ctx, src, core.ForkRequest{Count: 1, UserIDs: []string{"f1"}})
	if err != nil || len(res) != 1 || res[0].Err != nil {
		t.Fatalf("Fork: %+v, %v", res, err)
	}
	id := res[0].Sandbox.ID
	p := e.pod(t, id)
	got, err := e.m.optionsOf(p)
	if err != nil {
		t.Fatal(err)
	}
	g, w := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := range g.NumField() {
		name := g.Type().Field(i).Name
		if !slices.Contains(skip, name) && !reflect.DeepEqual(g.Field(i).Interface(), w.Field(i).Interface()) {
			t.Errorf("the fork's %s is %+v; want the source's %+v", name, g.Field(i).Interface(), w.Field(i).Interface())
		}
	}
	if !reflect.DeepEqual(want.Env, opts.Env) || !reflect.DeepEqual(want.NetworkPolicy, opts.NetworkPolicy) {
		t.Errorf("the source's options as read back: env %v, policy %+v", want.Env, want.NetworkPolicy)
	}
	if env := envOf(p); env["FORK_ENV"] != "carried" || env["SSL_CERT_FILE"] == "" {
		t.Errorf("the fork's Pod env %v: want FORK_ENV and the CA's", env)
	}
	// Its sidecar was given the policy, the rules sealed for it.
	var given bool
	for _, s := range log.sets() {
		if s.p.SandboxID != id {
			continue
		}
		rules, err := iosidecar.OpenRules(testToken, id, s.p.SealedRules)
		given = err == nil && rules["api.test"].Headers["X-Api-Key"] == "s3cret" && slices.Equal(s.p.AllowOut, opts.NetworkPolicy.AllowOut)
	}
	if !given {
		t.Errorf("the fork's sidecar was not given the source's policy and rules: %+v", log.sets())
	}
	if np := res[0].Sandbox.NetworkPolicy; !res[0].Sandbox.Network || np == nil || np.Rules["api.test"].Headers["X-Api-Key"] != "" {
		t.Errorf("the fork as shown: network %v, policy %+v", res[0].Sandbox.Network, np)
	}

	// Options of its own: kept, with the source's env and network.
	own := core.Options{Limits: e.m.cfg.DefaultLimits, Metadata: map[string]string{"mine": "1"}}
	res, err = e.m.Fork(ctx, src, core.ForkRequest{Count: 1, UserIDs: []string{"f2"}, Options: &own})
	if err != nil || len(res) != 1 || res[0].Err != nil {
		t.Fatalf("Fork with options: %+v, %v", res, err)
	}
	got, err = e.m.optionsOf(e.pod(t, res[0].Sandbox.ID))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Metadata, own.Metadata) || got.Limits != own.Limits || !reflect.DeepEqual(got.Env, opts.Env) || !reflect.DeepEqual(got.NetworkPolicy, opts.NetworkPolicy) {
		t.Errorf("a fork with options of its own: %+v", got)
	}

	// A named snapshot records them, the header values sealed: a sandbox
	// started from it without env or network of its own gets the
	// snapshot's; one with its own env keeps it.
	snap, err := e.m.CreateSnapshot(ctx, src, "with-options")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(e.m.cfg.SnapshotDir, snap.ID, snapRecordFile))
	if err != nil || !strings.Contains(string(b), "FORK_ENV") || strings.Contains(string(b), "s3cret") {
		t.Errorf("the snapshot's record (%v): %s; want the env, and the header value sealed", err, b)
	}
	r, err = e.m.Acquire(ctx, "from-snap", core.Options{Limits: e.m.cfg.DefaultLimits, FromSnapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	if got, err = e.m.optionsOf(e.pod(t, r.Sandbox.ID)); err != nil || !reflect.DeepEqual(got.Env, opts.Env) || !reflect.DeepEqual(got.NetworkPolicy, opts.NetworkPolicy) {
		t.Errorf("a start from the snapshot: %+v, %v", got, err)
	}
	r, err = e.m.Acquire(ctx, "own-env", core.Options{Limits: e.m.cfg.DefaultLimits, FromSnapshot: snap.ID, Env: map[string]string{"MINE": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	if got, err = e.m.optionsOf(e.pod(t, r.Sandbox.ID)); err != nil || !reflect.DeepEqual(got.Env, map[string]string{"MINE": "1"}) || !got.Network {
		t.Errorf("a start from the snapshot with env of its own: %+v, %v", got, err)
	}
}
