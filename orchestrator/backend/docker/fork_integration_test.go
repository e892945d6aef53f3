package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/nettest"
	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/egress"
)

// TestIntegrationForkOptions: with real containers and the egress
// package's gateway, under runc and runsc, a fork of a networked sandbox
// with env and an allow-list with a header rule (issue 43: the fork came
// back without network and without env), and a sandbox started from a
// named snapshot of it without options of its own, each
//
//   - sees the env in Python (os.environ) and in a shell command;
//   - reaches the allowed test host by name (its DNS through the gateway)
//     and not another test host, which sees no connection;
//   - trusts its own CA: an HTTPS request to the host with a header rule
//     is intercepted and arrives with the rule's header.
func TestIntegrationForkOptions(t *testing.T) {
	testenv.NeedDocker(t)
	for _, rt := range netRuntimes(t) {
		t.Run(rt, func(t *testing.T) { testForkOptions(t, rt) })
	}
}

func testForkOptions(t *testing.T, runtime string) {
	in := nettest.New(t, nettest.Options{Hosts: []string{"allowed.test", "other.test", "api.test"}})
	m, _, _ := integrationManager(t, netTestConfig(t, nil), func(c *Config) {
		c.NewGateway = nil // the egress package's (applyDefaults)
		c.Runtime = runtime
		c.Egress = egress.Config{Resolver: in.Resolver(), RootCAs: in.RootCAs}
		if runtime == core.RuntimeGVisor {
			c.DefaultLimits.PidsLimit = 256
		}
	})
	ctx, cancel := context.WithTimeout(as(t, "acme", false), 5*time.Minute)
	defer cancel()
	b := make([]byte, 8)
	rand.Read(b)
	secret, value := "sbxsecret-"+hex.EncodeToString(b), "carried-"+runtime
	src, err := m.Acquire(ctx, "src", core.Options{
		Env: map[string]string{"FORK_ENV": value},
		NetworkPolicy: &core.NetworkPolicy{AllowOut: []string{"allowed.test", "api.test"}, DenyOut: []string{"0.0.0.0/0"},
			Rules: map[string]core.NetworkRule{"api.test": {Headers: map[string]string{"X-Api-Key": secret}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	stdoutOf(t, m, src.Sandbox.ID, "state = 'kept'\nprint()")

	start := time.Now()
	rs, err := m.Fork(ctx, src.Sandbox.ID, core.ForkRequest{Count: 1, UserIDs: []string{"forked"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Err != nil {
		t.Fatalf("fork: %+v", rs)
	}
	t.Logf("fork (%s) in %v", runtime, time.Since(start).Round(time.Millisecond))
	if s := rs[0].Sandbox; !s.Network || s.NetworkPolicy == nil || len(s.NetworkPolicy.AllowOut) != 2 {
		t.Errorf("the fork says network %v, policy %+v; want the source's", s.Network, s.NetworkPolicy)
	}
	snap, err := m.CreateSnapshot(ctx, src.Sandbox.ID, "networked")
	if err != nil {
		t.Fatal(err)
	}
	fromSnap, err := m.Acquire(ctx, "from-snapshot", core.Options{FromSnapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct{ what, id, path string }{
		{"the fork", rs[0].Sandbox.ID, "/fork"},
		{"the sandbox from the snapshot", fromSnap.Sandbox.ID, "/from-snapshot"},
	} {
		t.Run(strings.TrimPrefix(c.path, "/"), func(t *testing.T) {
			otherBefore := in.Hosts["other.test"].AllAccepts()
			out := mustRunOK(t, m, c.id, "python", fmt.Sprintf(`
import os, socket, urllib.request
print("state", state)
print("env", os.environ.get("FORK_ENV"))
def get(url):
    try:
        return urllib.request.urlopen(url, timeout=10).read().decode().strip()
    except Exception as e:
        return "refused: %%s" %% type(e).__name__
print("allowed", get("http://allowed.test/"))
print("other by name", get("http://other.test/"))
print("other by address", get("http://%s/"))
print("rule", get("https://api.test%s"))
`, in.Hosts["other.test"].Addr, c.path))
			t.Logf("%s (%s):\n%s", c.what, runtime, out)
			for _, want := range []string{"state kept\n", "env " + value + "\n", "allowed hello from allowed.test\n", "rule hello from api.test\n"} {
				if !strings.Contains(out, want) {
					t.Errorf("%s: %q lacks %q", c.what, out, want)
				}
			}
			if !strings.Contains(out, "other by name refused") || !strings.Contains(out, "other by address refused") {
				t.Errorf("%s reached other.test: %q", c.what, out)
			}
			if n := in.Hosts["other.test"].AllAccepts(); n != otherBefore {
				t.Errorf("other.test accepted %d connections from %s", n-otherBefore, c.what)
			}
			if sh := mustRunOK(t, m, c.id, "bash", `echo "shell $FORK_ENV"`); !strings.Contains(sh, "shell "+value) {
				t.Errorf("%s: a shell command sees %q", c.what, sh)
			}
			var injected bool
			for _, req := range in.Hosts["api.test"].Requests() {
				injected = injected || (req.Path == c.path && req.TLS && req.Header.Get("X-Api-Key") == secret)
			}
			if !injected {
				t.Errorf("api.test saw no request to %s with the rule's header from %s", c.path, c.what)
			}
		})
	}
}
