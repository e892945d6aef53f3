package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/sandboxd/sandboxd/internal/nettest"
	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/egress"
	"github.com/sandboxd/sandboxd/orchestrator/labels"
)

// TestIntegrationWarmPoolNetwork: with real containers and the egress
// package's gateway, under runc and runsc, requests with network are
// served by the pool with network (issue 43), each claim shaped to its
// own policy:
//
//   - a request without network gets the sealed pool's sandbox, which
//     reaches no test host, by name or address;
//   - a request with an allow-list and a header rule gets the plumbed
//     pool sandbox: it reaches the allowed host by name, not another by
//     name or address (which sees no connection), and the rule's header
//     arrives over HTTPS intercepted with its own CA;
//   - the next tenant's claim (the pool refilled) gets its own policy,
//     CA and env, none of the first's.
func TestIntegrationWarmPoolNetwork(t *testing.T) {
	testenv.NeedDocker(t)
	for _, rt := range netRuntimes(t) {
		t.Run(rt, func(t *testing.T) { testWarmPoolNetwork(t, rt) })
	}
}

// awaitPools waits, up to two minutes (gVisor boots slowly on a loaded
// host), until both server pools hold a ready sandbox.
func awaitPools(t *testing.T, m *validated) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for m.pool.size() < 1 || m.netPool.size() < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("after 2m the pools hold %d sealed and %d networked sandboxes; want one each", m.pool.size(), m.netPool.size())
		}
		time.Sleep(20 * time.Millisecond) // polling the pools, bounded by the deadline
	}
}

func testWarmPoolNetwork(t *testing.T, runtime string) {
	in := nettest.New(t, nettest.Options{Hosts: []string{"allowed.test", "other.test", "api.test"}})
	m, _, _ := integrationManager(t, netTestConfig(t, nil), func(c *Config) {
		c.NewGateway = nil // the egress package's (applyDefaults)
		c.Runtime = runtime
		c.Egress = egress.Config{Resolver: in.Resolver(), RootCAs: in.RootCAs}
		c.WarmPool, c.WarmPoolNetwork = 1, 1
		if runtime == core.RuntimeGVisor {
			c.DefaultLimits.PidsLimit = 256
		}
	})
	awaitPools(t, m)

	probe := func(id, path string) string {
		t.Helper()
		return mustRunOK(t, m, id, "python", fmt.Sprintf(`
import os, urllib.request
def get(url):
    try:
        return urllib.request.urlopen(url, timeout=10).read().decode().strip()
    except Exception as e:
        return "refused: %%s" %% type(e).__name__
print("env", os.environ.get("POOL_ENV"))
print("allowed", get("http://allowed.test/"))
print("allowed by address", get("http://%s/"))
print("other by name", get("http://other.test/"))
print("other by address", get("http://%s/"))
print("rule", get("https://api.test%s"))
print("ca", open("/etc/sandboxd/ca.pem").read().strip().splitlines()[1] if os.path.exists("/etc/sandboxd/ca.pem") else "none")
`, in.Hosts["allowed.test"].Addr, in.Hosts["other.test"].Addr, path))
	}

	// Without network: the sealed pool's sandbox reaches nothing.
	sealedID := poolIDs(m)[0]
	before := in.Hosts["allowed.test"].AllAccepts() + in.Hosts["other.test"].AllAccepts()
	res, err := m.Acquire(as(t, "acme", false), "sealed", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sandbox.ID != sealedID || res.Sandbox.Network {
		t.Fatalf("a request without network got %s (network %v); want the sealed pool's %s", res.Sandbox.ID, res.Sandbox.Network, sealedID)
	}
	out := probe(res.Sandbox.ID, "/sealed")
	for _, l := range []string{"allowed refused", "allowed by address refused", "other by name refused", "other by address refused", "rule refused", "ca none"} {
		if !strings.Contains(out, l) {
			t.Errorf("the sealed claim (%s): %q lacks %q", runtime, out, l)
		}
	}
	if n := in.Hosts["allowed.test"].AllAccepts() + in.Hosts["other.test"].AllAccepts(); n != before {
		t.Errorf("the test hosts accepted %d connections from a sealed claim", n-before)
	}

	// Two tenants' claims with network in a row, each its own.
	b := make([]byte, 8)
	rand.Read(b)
	secret := "sbxsecret-" + hex.EncodeToString(b)
	var cas []string
	for i, c := range []struct {
		tenant, allow, deny, env string
	}{
		{"acme", "allowed.test", "other.test", "first"},
		{"globex", "other.test", "allowed.test", "second"},
	} {
		if i > 0 {
			awaitPools(t, m)
		}
		plumbed := idsOf(m.netPool)[0]
		otherBefore := in.Hosts[c.deny].AllAccepts()
		start := time.Now()
		opts := core.Options{Network: true, Env: map[string]string{"POOL_ENV": c.env},
			NetworkPolicy: &core.NetworkPolicy{AllowOut: []string{c.allow}, DenyOut: []string{"0.0.0.0/0"}}}
		if i == 0 {
			opts.NetworkPolicy.AllowOut = append(opts.NetworkPolicy.AllowOut, "api.test")
			opts.NetworkPolicy.Rules = map[string]core.NetworkRule{"api.test": {Headers: map[string]string{"X-Api-Key": secret}}}
		}
		res, err := m.Acquire(as(t, c.tenant, false), "user", opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: a claim with network (%s) in %v", c.tenant, runtime, time.Since(start).Round(time.Microsecond))
		if res.Sandbox.ID != plumbed || !res.Sandbox.Network {
			t.Fatalf("%s's request with network got %s (network %v); want the plumbed pool sandbox %s", c.tenant, res.Sandbox.ID, res.Sandbox.Network, plumbed)
		}
		path := "/" + c.tenant
		out := probe(res.Sandbox.ID, path)
		t.Logf("%s (%s):\n%s", c.tenant, runtime, out)
		allowedLine, deniedName, deniedAddr := "allowed hello from allowed.test", "other by name refused", "other by address refused"
		if c.allow == "other.test" {
			allowedLine, deniedName, deniedAddr = "other by name hello from other.test", "allowed refused", "allowed by address refused"
		}
		for _, want := range []string{"env " + c.env + "\n", allowedLine, deniedName, deniedAddr} {
			if !strings.Contains(out, want) {
				t.Errorf("%s (%s): %q lacks %q", c.tenant, runtime, out, want)
			}
		}
		if n := in.Hosts[c.deny].AllAccepts(); n != otherBefore {
			t.Errorf("%s reached %s: %d connections", c.tenant, c.deny, n-otherBefore)
		}
		var injected bool
		for _, req := range in.Hosts["api.test"].Requests() {
			injected = injected || (req.Path == path && req.TLS && req.Header.Get("X-Api-Key") == secret)
		}
		if want := i == 0; injected != want {
			t.Errorf("%s: api.test saw the rule's header over HTTPS: %v; want %v (%q)", c.tenant, injected, want, out)
		}
		_, ca, _ := strings.Cut(out, "\nca ")
		if ca == "" || strings.HasPrefix(ca, "none") || slices.Contains(cas, ca) {
			t.Errorf("%s: the sandbox's CA %q is missing or another claim's", c.tenant, ca)
		}
		cas = append(cas, ca)
	}
}

// TestIntegrationFastWakeNetwork: under runc, with the egress package's
// gateway, a networked sandbox (an allow-list, a header rule, env) wakes
// in a container of the pool with network (carrier_net.go), keeping its
// globals, its address, its CA and its policy: the allowed host answers
// by name, another host does not, and the rule's header arrives over
// HTTPS intercepted with the sandbox's own CA. It keeps them across a
// restart of sandboxd; a fork of it starts in the pool with network too,
// with the same. Hibernation and deletion leave no holder and no mount.
func TestIntegrationFastWakeNetwork(t *testing.T) {
	testenv.NeedDocker(t)
	if rt := os.Getenv("SANDBOX_RUNTIME"); !runtimeIsRunc(rt) {
		t.Skipf("fast wake is runc's only (runtime %q)", rt)
	}
	in := nettest.New(t, nettest.Options{Hosts: []string{"allowed.test", "other.test", "api.test"}})
	m, c, cfg := integrationManager(t, netTestConfig(t, nil), func(c *Config) {
		c.NewGateway = nil // the egress package's (applyDefaults)
		c.Egress = egress.Config{Resolver: in.Resolver(), RootCAs: in.RootCAs}
		c.WarmPool, c.WarmPoolNetwork = 1, 1
	})
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	awaitPools(t, m)
	b := make([]byte, 8)
	rand.Read(b)
	secret := "sbxsecret-" + hex.EncodeToString(b)
	res, err := m.Acquire(ctx, "fwn", core.Options{Network: true, Env: map[string]string{"POOL_ENV": "kept"},
		NetworkPolicy: &core.NetworkPolicy{AllowOut: []string{"allowed.test", "api.test"}, DenyOut: []string{"0.0.0.0/0"},
			Rules: map[string]core.NetworkRule{"api.test": {Headers: map[string]string{"X-Api-Key": secret}}}}})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Sandbox.ID
	addr := m.addrOf(t, id)
	mustRunOK(t, m, id, "python", "import numpy as np, pandas as pd\nx = 41\ndf = pd.DataFrame({'a': np.arange(4)})\nopen('/workspace/f.txt', 'w').write('once')")
	caOf := func(id string) string {
		return mustRunOK(t, m, id, "bash", "cat /etc/sandboxd/ca.pem")
	}
	ca := caOf(id)

	// check runs the state and network probe in sandbox id, as request
	// path.
	check := func(what, id, path string) {
		t.Helper()
		otherBefore := in.Hosts["other.test"].AllAccepts()
		out := mustRunOK(t, m, id, "python", fmt.Sprintf(`
import os, urllib.request
def get(url):
    try:
        return urllib.request.urlopen(url, timeout=10).read().decode().strip()
    except Exception as e:
        return "refused: %%s" %% type(e).__name__
print("state", x + 1, int(df.a.sum()), open('/workspace/f.txt').read())
print("env", os.environ.get("POOL_ENV"))
print("allowed", get("http://allowed.test/"))
print("other by name", get("http://other.test/"))
print("other by address", get("http://%s/"))
print("rule", get("https://api.test%s"))
`, in.Hosts["other.test"].Addr, path))
		t.Logf("%s:\n%s", what, out)
		for _, want := range []string{"state 42 6 once\n", "env kept\n", "allowed hello from allowed.test\n", "other by name refused", "other by address refused", "rule hello from api.test\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: %q lacks %q", what, out, want)
			}
		}
		if n := in.Hosts["other.test"].AllAccepts(); n != otherBefore {
			t.Errorf("%s reached other.test: %d connections", what, n-otherBefore)
		}
		var injected bool
		for _, req := range in.Hosts["api.test"].Requests() {
			injected = injected || (req.Path == path && req.TLS && req.Header.Get("X-Api-Key") == secret)
		}
		if !injected {
			t.Errorf("%s: api.test saw no request to %s with the rule's header", what, path)
		}
	}

	if _, err := m.Hibernate(ctx, id); err != nil {
		t.Fatal(err)
	}
	if w, _ := wakeInPool(t, ctx, m, m.netPool, id); w == nil || w.Level != ioproto.LevelGlobals {
		t.Fatalf("wake %+v; want level globals", w)
	}
	if a := m.addrOf(t, id); a != addr {
		t.Errorf("the woken sandbox's address is %s; want its own %s", a, addr)
	}
	if got := caOf(id); got != ca {
		t.Errorf("the woken sandbox's CA is not its own")
	}
	check("the fast-woken sandbox", id, "/woken")

	// sandboxd restarts: the sandbox keeps its network in its carrier.
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m, err = newValidated(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	check("after a restart of sandboxd", id, "/restarted")

	// A fork starts in the pool with network, with the source's options.
	awaitPools(t, m)
	pool := containersOfPool(m.netPool)
	rs, err := m.Fork(ctx, id, core.ForkRequest{Count: 1, UserIDs: []string{"fwn-fork"}})
	if err != nil || len(rs) != 1 || rs[0].Err != nil {
		t.Fatalf("fork: %+v, %v", rs, err)
	}
	fork := rs[0].Sandbox
	if !slices.Contains(slices.Collect(maps.Values(pool)), fork.ContainerID) || !fork.Network {
		t.Errorf("the fork runs in %s (network %v), not in the pool with network's %v", fork.ContainerID, fork.Network, pool)
	}
	if caOf(fork.ID) == ca {
		t.Errorf("the fork has its source's CA; want its own")
	}
	check("the fork", fork.ID, "/fork")
	check("the source after the fork", id, "/source")

	for _, sid := range []string{id, fork.ID} {
		if _, err := m.Hibernate(ctx, sid); err != nil {
			t.Fatal(err)
		}
		if err := m.Delete(ctx, sid); err != nil {
			t.Fatal(err)
		}
	}
	list, err := c.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", labels.NetHolder+"=true"),
		filters.Arg("label", labels.StateDir+"="+cfg.StateDir))})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 { // the pool's own
		var names []string
		for _, h := range list {
			names = append(names, h.Names...)
		}
		t.Errorf("network holders left: %v; want only the pool's", names)
	}
	for _, d := range []string{sandboxDir(cfg.StateDir, id), sandboxDir(cfg.StateDir, fork.ID)} {
		if ms := mountsUnder(t, d); len(ms) > 0 {
			t.Errorf("mounts left under %s: %v", d, ms)
		}
	}
}
