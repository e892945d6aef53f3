package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/nettest"
	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/egress"
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
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
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
		plumbed := netPoolIDs(m)[0]
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
	_ = ctx
}
