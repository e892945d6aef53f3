package docker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/egress"
)

// everyOption is a sandbox's options with every field of core.Options set
// but FromSnapshot (the sandbox's state, not an option of it); vols and
// template fill Volumes and Template. requireEveryOption fails the test
// when a field is added to core.Options and not set here, so that the
// tests below check that the new option is carried too.
func everyOption(t *testing.T, vols []core.VolumeMount, template string) core.Options {
	t.Helper()
	o := core.Options{
		Limits: core.Limits{MemoryBytes: 768 << 20, NanoCPUs: 5e8, PidsLimit: 200, DiskBytes: 64 << 20},
		Env:    map[string]string{"FORK_ENV": "carried", "OTHER": "two"},
		// Network is implied by the policy; set both, as resolved.
		Network: true,
		NetworkPolicy: &core.NetworkPolicy{AllowOut: []string{"allowed.test", "api.test"}, DenyOut: []string{"0.0.0.0/0"},
			Rules:              map[string]core.NetworkRule{"api.test": {Headers: map[string]string{"X-Api-Key": "s3cret"}}},
			AllowPublicTraffic: true},
		Metadata:    map[string]string{"team": "data"},
		IdleTimeout: 17 * time.Minute,
		OnIdle:      core.OnIdleHibernate,
		Volumes:     vols,
		Template:    template,
	}
	requireEveryOption(t, o, "Volumes", "Template")
	return o
}

// requireEveryOption fails t unless every field of o is set but
// FromSnapshot and those named in unset.
func requireEveryOption(t *testing.T, o core.Options, unset ...string) {
	t.Helper()
	v := reflect.ValueOf(o)
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		if name == "FromSnapshot" || slices.Contains(unset, name) {
			continue
		}
		if v.Field(i).IsZero() {
			t.Fatalf("core.Options.%s is not set by everyOption: set it, so that the tests check that forks and snapshots carry it", name)
		}
	}
}

// compareOptions reports each field of core.Options (but those in skip)
// whose value in got differs from want's.
func compareOptions(t *testing.T, what string, got, want core.Options, skip ...string) {
	t.Helper()
	g, w := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := range g.NumField() {
		name := g.Type().Field(i).Name
		if slices.Contains(skip, name) {
			continue
		}
		if !reflect.DeepEqual(g.Field(i).Interface(), w.Field(i).Interface()) {
			t.Errorf("%s: %s is %+v; want %+v", what, name, g.Field(i).Interface(), w.Field(i).Interface())
		}
	}
}

// TestSandboxOptionsCarryEveryField: every option a sandbox was made
// with is in its record (sandbox.options), survives its meta.json (a
// restart of sandboxd: the template was dropped there) and its
// snapshot's snapshot.json, and is what its forks are made with, field
// by field over core.Options, so that an option added later is not
// forgotten by forks again (issue 43: network, policy and env were).
func TestSandboxOptionsCarryEveryField(t *testing.T) {
	fd := newFakeDocker(testImage, "sha256:tplimage")
	cfg := testConfig(t)
	cfg.AllowNetwork, cfg.NewGateway = true, func(egress.Config) Gateway { return newPolicyGateway() }
	m := newTestManager(t, cfg, fd)
	ctx := as(t, "acme", false)
	// A volume and a template version cannot be made with a fake engine
	// and no disk volumes: the record gets them as Acquire resolves them
	// (by ID).
	vols := []core.VolumeMount{{Volume: core.NewVolumeID(), Path: "/mnt/data", ReadOnly: true}}
	tpl := core.NewTemplateID()
	want := everyOption(t, vols, tpl)
	asked := want
	asked.Volumes, asked.Template = nil, ""
	res, err := m.Acquire(ctx, "src", asked)
	if err != nil {
		t.Fatal(err)
	}
	sb := m.reg.get(res.Sandbox.ID)
	sb.mu.Lock()
	sb.volumes, sb.template, sb.templateVersion, sb.image = vols, tpl, 3, "sha256:tplimage"
	sb.mu.Unlock()
	pol := m.Policy()
	if want, err = pol.ResolveOptions(want); err != nil {
		t.Fatal(err)
	}

	got := sb.options()
	compareOptions(t, "the sandbox's record", got, want)

	sb.mu.Lock()
	md := sb.metaLocked()
	sb.mu.Unlock()
	b, _ := json.Marshal(md)
	var back meta
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	compareOptions(t, "the record read back from meta.json", newSandbox(sb.dir, back).options(), got)

	f := snapFileOf(sb)
	b, _ = json.Marshal(f)
	var fb snapFile
	if err := json.Unmarshal(b, &fb); err != nil {
		t.Fatal(err)
	}
	fork, err := forkOptions(pol, fb)
	if err != nil {
		t.Fatal(err)
	}
	// The template is the snapshot's image (the version the source ran),
	// not the template's latest: Acquire takes f.Image when the option
	// is empty.
	compareOptions(t, "a fork's options", fork, got, "Template")
	if fork.Template != "" || fb.Template != tpl || fb.TemplateVersion != 3 || fb.Image != "sha256:tplimage" {
		t.Errorf("a fork's template %q; the snapshot's %q version %d image %q", fork.Template, fb.Template, fb.TemplateVersion, fb.Image)
	}
	// A start from the snapshot asking for nothing gets its env and
	// network; one asking for its own keeps them.
	start := fb.startOptions(core.Options{})
	if !reflect.DeepEqual(start.Env, want.Env) || !start.Network || !reflect.DeepEqual(start.NetworkPolicy, want.NetworkPolicy) {
		t.Errorf("a start from the snapshot: env %v, network %v, policy %+v", start.Env, start.Network, start.NetworkPolicy)
	}
	own := fb.startOptions(core.Options{Env: map[string]string{"MINE": "1"}, Network: true, NetworkPolicy: &core.NetworkPolicy{AllowOut: []string{"pypi.org"}}})
	if !reflect.DeepEqual(own.Env, map[string]string{"MINE": "1"}) || !reflect.DeepEqual(own.NetworkPolicy.AllowOut, []string{"pypi.org"}) || own.NetworkPolicy.Rules != nil {
		t.Errorf("a start from the snapshot with its own env and policy: %+v, %+v", own.Env, own.NetworkPolicy)
	}

	// A server that no longer allows network refuses the fork, saying why.
	closed := m.Policy()
	closed.AllowNetwork = false
	if _, err := forkOptions(closed, fb); err == nil || !strings.Contains(err.Error(), "network") {
		t.Errorf("forkOptions on a server without network: %v", err)
	}
}

// policyGateway is an egress gateway that records the policy each
// sandbox is attached with, and serves nothing.
type policyGateway struct {
	*observingGateway
	mu       sync.Mutex
	policies map[string]*core.CompiledPolicy
	cas      map[string]*egress.CA
}

func newPolicyGateway() *policyGateway {
	return &policyGateway{observingGateway: newObservingGateway(), policies: map[string]*core.CompiledPolicy{}, cas: map[string]*egress.CA{}}
}

func (g *policyGateway) Attach(id string, src netip.Addr, p *core.CompiledPolicy, ca *egress.CA) {
	g.mu.Lock()
	g.policies[id], g.cas[id] = p, ca
	g.mu.Unlock()
	g.observingGateway.Attach(id, src, p, ca)
}

func (g *policyGateway) Update(id string, p *core.CompiledPolicy) {
	g.mu.Lock()
	g.policies[id] = p
	g.mu.Unlock()
	g.observingGateway.Update(id, p)
}

func (g *policyGateway) policy(id string) (*core.CompiledPolicy, *egress.CA) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.policies[id], g.cas[id]
}

// answerSnapshots stands in for the drivers of the fake engine's
// sandboxes under stateDir (there is none behind a fake container): each
// snapshot record appended to a sandbox's command log is answered with a
// done event that kept no globals (level files), until ctx ends.
func answerSnapshots(ctx context.Context, t *testing.T, stateDir string) {
	answered := map[string]bool{}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		dirs, _ := filepath.Glob(filepath.Join(stateDir, sandboxesDir, "*", ioDir))
		for _, io := range dirs {
			b, err := os.ReadFile(filepath.Join(io, ioproto.StdinFile))
			if err != nil {
				continue
			}
			sc := bufio.NewScanner(bytes.NewReader(b))
			sc.Buffer(nil, ioproto.MaxRecordLen+1)
			for sc.Scan() {
				rec, _, err := ioproto.ParseRecord(sc.Bytes())
				if err != nil || rec.Type != ioproto.KindSnapshot || answered[io+rec.CommandID] {
					continue
				}
				answered[io+rec.CommandID] = true
				line, err := ioproto.EncodeEvent(&ioproto.Event{Seq: 1, Type: ioproto.EventDone, Status: ioproto.StatusOK})
				if err == nil {
					err = os.WriteFile(filepath.Join(io, ioproto.OutDir, ioproto.EventsFileName(rec.CommandID)), line, 0o644)
				}
				if err != nil {
					t.Errorf("answer the snapshot record %s: %v", rec.CommandID, err)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// forkTestManager is a Manager over a fake engine with disk volumes
// (snapshots need them), network (a gateway recording policies), and a
// stand-in driver answering snapshot records.
func forkTestManager(t *testing.T) (*validated, *fakeDocker, *policyGateway, Config) {
	t.Helper()
	needVolumes(t)
	fd := newFakeDocker(testImage)
	gw := newPolicyGateway()
	cfg := testConfig(t)
	cfg.NoDiskVolumes = false
	cfg.IODiskBytes, cfg.DefaultLimits.DiskBytes = 16<<20, 32<<20
	cfg.AllowNetwork, cfg.NewGateway = true, func(egress.Config) Gateway { return gw }
	cfg.recheck = 20 * time.Millisecond
	t.Cleanup(func() { unmountAll(t, cfg.StateDir) })
	m := newTestManager(t, cfg, fd)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); answerSnapshots(ctx, t, cfg.StateDir) }()
	t.Cleanup(func() { cancel(); <-done })
	return m, fd, gw, cfg
}

// sandboxContainer is the fake engine's container of sandbox id.
func sandboxContainer(t *testing.T, fd *fakeDocker, id string) *fakeContainer {
	t.Helper()
	c := fd.containerNamed(containerNamePrefix + id)
	if c == nil {
		t.Fatalf("no container for sandbox %s", id)
	}
	return c
}

// TestForkCarriesOptions: a fork (the backend's Fork, over a fake engine)
// is made with every option of its source, one subtest per option: its
// env in its container, its network (a holder, the container in its
// namespace, the gateway attaching it with the source's allow and deny
// lists and its own CA) and header rules, limits, metadata and timeouts,
// volumes; a sandbox started from a named snapshot without options of
// its own gets the snapshot's env and network. On the code of issue 43
// the fork had no env and no network.
func TestForkCarriesOptions(t *testing.T) {
	m, fd, gw, _ := forkTestManager(t)
	ctx := as(t, "acme", false)
	vol, err := m.CreateVolume(ctx, "data", 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	opts := everyOption(t, []core.VolumeMount{{Volume: vol.ID, Path: "/mnt/data"}}, "")
	opts.Limits.DiskBytes = 32 << 20
	src, err := m.Acquire(ctx, "src", opts)
	if err != nil {
		t.Fatal(err)
	}
	srcSB := m.reg.get(src.Sandbox.ID)
	want := srcSB.options()
	rs, err := m.Fork(ctx, src.Sandbox.ID, core.ForkRequest{Count: 1, UserIDs: []string{"forked"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Err != nil {
		t.Fatalf("fork: %+v", rs)
	}
	id := rs[0].Sandbox.ID
	sb := m.reg.get(id)
	got := sb.options()
	c := sandboxContainer(t, fd, id)

	t.Run("every option", func(t *testing.T) {
		compareOptions(t, "the fork's record", got, want)
	})
	t.Run("env", func(t *testing.T) {
		for k, v := range opts.Env {
			if !slices.Contains(c.cfg.Env, k+"="+v) {
				t.Errorf("the fork's container env %v lacks %s=%s", c.cfg.Env, k, v)
			}
		}
	})
	t.Run("network", func(t *testing.T) {
		if !rs[0].Sandbox.Network || rs[0].Sandbox.NetworkPolicy == nil {
			t.Fatalf("the fork says network %v, policy %+v", rs[0].Sandbox.Network, rs[0].Sandbox.NetworkPolicy)
		}
		holder := fd.containerNamed(holderNamePrefix + id)
		if holder == nil || string(c.host.NetworkMode) != "container:"+holder.id {
			t.Fatalf("the fork's holder %v, network mode %q", holder, c.host.NetworkMode)
		}
		p, ca := gw.policy(id)
		if p == nil || ca == nil {
			t.Fatalf("the gateway attached the fork with policy %v, CA %v", p, ca)
		}
		if p.JudgeName("allowed.test") != core.VerdictAllowed || p.JudgeName("other.test") == core.VerdictAllowed {
			t.Errorf("the fork's policy: allowed.test %v, other.test %v", p.JudgeName("allowed.test"), p.JudgeName("other.test"))
		}
		if srcCA := func() *egress.CA { _, ca := gw.policy(src.Sandbox.ID); return ca }(); srcCA == ca {
			t.Errorf("the fork has its source's CA")
		}
	})
	t.Run("header rules", func(t *testing.T) {
		p, _ := gw.policy(id)
		if p == nil {
			t.Fatal("the gateway has no policy for the fork")
		}
		if h, ok := p.Rule("api.test"); !ok || h["X-Api-Key"] != "s3cret" {
			t.Errorf("the fork's rule for api.test: %v, %v", h, ok)
		}
		// Never shown to a caller.
		if r := rs[0].Sandbox.NetworkPolicy; r == nil || r.Rules["api.test"].Headers["X-Api-Key"] == "s3cret" {
			t.Errorf("the fork's policy as shown: %+v", r)
		}
	})
	t.Run("limits", func(t *testing.T) {
		if got.Limits != want.Limits || c.host.Memory != want.Limits.MemoryBytes || c.host.NanoCPUs != want.Limits.NanoCPUs {
			t.Errorf("the fork's limits %+v (container memory %d, CPUs %d); want %+v", got.Limits, c.host.Memory, c.host.NanoCPUs, want.Limits)
		}
	})
	t.Run("metadata and timeouts", func(t *testing.T) {
		s := rs[0].Sandbox
		if !reflect.DeepEqual(s.Metadata, opts.Metadata) || s.IdleTimeout != opts.IdleTimeout || s.OnIdle != opts.OnIdle {
			t.Errorf("the fork: metadata %v, idle timeout %v, on idle %q", s.Metadata, s.IdleTimeout, s.OnIdle)
		}
	})
	t.Run("volumes", func(t *testing.T) {
		if !reflect.DeepEqual(rs[0].Sandbox.Volumes, want.Volumes) {
			t.Errorf("the fork's volumes %+v; want %+v", rs[0].Sandbox.Volumes, want.Volumes)
		}
	})
	t.Run("named snapshot", func(t *testing.T) {
		snap, err := m.CreateSnapshot(ctx, src.Sandbox.ID, "with-options")
		if err != nil {
			t.Fatal(err)
		}
		res, err := m.Acquire(ctx, "from-snap", core.Options{FromSnapshot: snap.ID})
		if err != nil {
			t.Fatal(err)
		}
		o := m.reg.get(res.Sandbox.ID).options()
		if !reflect.DeepEqual(o.Env, want.Env) || !reflect.DeepEqual(o.NetworkPolicy, want.NetworkPolicy) || !res.Sandbox.Network {
			t.Errorf("a start from the snapshot: env %v, network %v, policy %+v", o.Env, res.Sandbox.Network, o.NetworkPolicy)
		}
		if p, _ := gw.policy(res.Sandbox.ID); p == nil {
			t.Errorf("the gateway has no policy for the sandbox started from the snapshot")
		}
		own, err := m.Acquire(ctx, "own", core.Options{FromSnapshot: snap.ID, Env: map[string]string{"MINE": "1"}})
		if err != nil {
			t.Fatal(err)
		}
		if o := m.reg.get(own.Sandbox.ID).options(); !reflect.DeepEqual(o.Env, map[string]string{"MINE": "1"}) {
			t.Errorf("a start from the snapshot with env of its own: %v", o.Env)
		}
	})
}
