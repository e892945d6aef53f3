package main

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
)

// startNetServer serves the real API over fake, on a server that gives
// sandboxes network.
func startNetServer(t *testing.T, fake *coretest.Manager) string {
	t.Helper()
	return startServerOver(t, coretest.ValidatedWith(fake, coretest.NetworkPolicy()))
}

const ctlSecret = "Bearer sk-ctl-secret"

func TestNetStatusTable(t *testing.T) {
	fake := &coretest.Manager{NetworkStatusFunc: func(_ context.Context, id string) (core.NetworkStatus, error) {
		return core.NetworkStatus{
			Policy: core.NetworkPolicy{AllowOut: []string{"pypi.org", "files.pythonhosted.org"}, DenyOut: []string{"0.0.0.0/0"},
				Rules: map[string]core.NetworkRule{"api.example.com": {Headers: map[string]string{"Authorization": ctlSecret, "X-Org": "o"}}}},
			Counters: core.NetworkCounters{BytesOut: 1200, BytesIn: 34000, ConnsAllowed: 12, ConnsDenied: 2, ConnsOpen: 1, DNSAllowed: 20, DNSDenied: 1, RuleRequests: 3, DenialsDropped: 5},
			Denials: []core.NetworkDenial{
				{Time: t0, Kind: "dns", Name: "evil.example", Reason: "denied by deny_out 0.0.0.0/0"},
				{Time: t0.Add(time.Second), Kind: "tcp", Name: "x\x1b[31mred", Addr: netip.MustParseAddrPort("203.0.113.9:443"), Reason: "denied by deny_out 0.0.0.0/0"},
				{Time: t0.Add(2 * time.Second), Kind: "tcp", Addr: netip.MustParseAddrPort("10.0.0.5:80"), Reason: "private (RFC 1918) address 10.0.0.5"},
			},
		}, nil
	}}
	addr := startNetServer(t, fake)
	r := runCLI(t, nil, addr, "", "net", sbA)
	if r.code != exitOK {
		t.Fatalf("net: exit %d, stderr %q", r.code, r.stderr)
	}
	want := `POLICY
  allow_out:       pypi.org files.pythonhosted.org
  deny_out:        0.0.0.0/0
  rules:           api.example.com (Authorization, X-Org)
  public traffic:  no: port URLs need the traffic token

COUNTERS (since the sandbox's network was last attached)
  bytes:          out 1200, in 34000
  connections:    allowed 12, denied 2, open 1, refused at cap 0
  dns queries:    allowed 20, denied 1, rate-limited 0
  rule requests:  3

RECENT DENIALS (3, oldest first; 5 older ones forgotten)
TIME                 KIND  NAME            ADDRESS          REASON
2026-11-21 07:30:00  dns   evil.example    -                denied by deny_out 0.0.0.0/0
2026-11-21 07:30:01  tcp   "x\x1b[31mred"  203.0.113.9:443  denied by deny_out 0.0.0.0/0
2026-11-21 07:30:02  tcp   -               10.0.0.5:80      private (RFC 1918) address 10.0.0.5
`
	if r.stdout != want {
		t.Errorf("net printed:\n%s\nwant:\n%s", r.stdout, want)
	}
	if strings.Contains(r.stdout, "sk-ctl") {
		t.Error("net printed the secret")
	}
	j := runCLI(t, nil, addr, "", "net", sbA, "-o", "json")
	var got map[string]any
	if j.code != exitOK || json.Unmarshal([]byte(j.stdout), &got) != nil || got["counters"].(map[string]any)["bytes_in"] != "34000" {
		t.Errorf("net -o json: exit %d, %s", j.code, j.stdout)
	}
	if strings.Contains(j.stdout, "sk-ctl") {
		t.Error("net -o json printed the secret")
	}

	sealed := startServer(t, &coretest.Manager{})
	r = runCLI(t, nil, sealed, "", "net", sbA)
	if r.code != exitFailure {
		t.Errorf("net on a server without networking: exit %d", r.code)
	}
	oneLine(t, r.stderr, "networking is not enabled on this server")
	if r := runCLI(t, nil, addr, "", "net"); r.code != exitUsage {
		t.Errorf("net without a sandbox: exit %d", r.code)
	}
}

func TestNetSet(t *testing.T) {
	var got core.NetworkPolicy
	fake := &coretest.Manager{UpdateNetworkPolicyFunc: func(_ context.Context, id string, p core.NetworkPolicy) (core.Sandbox, error) {
		got = p
		r := p.Redacted()
		return core.Sandbox{ID: id, Network: true, NetworkPolicy: &r}, nil
	}}
	addr := startNetServer(t, fake)
	r := runCLI(t, nil, addr, "", "net", "set", sbA, "--deny", "0.0.0.0/0", "--allow", "pypi.org", "--allow", "api.example.com",
		"--rule", "api.example.com:Authorization="+ctlSecret, "--rule", "api.example.com:X-Org=a=b", "--public")
	if r.code != exitOK {
		t.Fatalf("net set: exit %d, stderr %q", r.code, r.stderr)
	}
	want := core.NetworkPolicy{AllowOut: []string{"pypi.org", "api.example.com"}, DenyOut: []string{"0.0.0.0/0"}, AllowPublicTraffic: true,
		Rules: map[string]core.NetworkRule{"api.example.com": {Headers: map[string]string{"Authorization": ctlSecret, "X-Org": "a=b"}}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the domain got %+v\nwant %+v", got, want)
	}
	wantOut := `allow_out:       pypi.org api.example.com
deny_out:        0.0.0.0/0
rules:           api.example.com (Authorization, X-Org)
public traffic:  yes: port URLs answer without a token
`
	if r.stdout != wantOut || strings.Contains(r.stdout+r.stderr, "sk-ctl") {
		t.Errorf("net set printed:\n%s\nwant:\n%s", r.stdout, wantOut)
	}

	// A policy file (here stdin), which the flags add to: secrets stay out
	// of the command line.
	file := filepath.Join(t.TempDir(), "policy.json")
	body := `{"allow_out": ["api.example.com"], "rules": {"api.example.com": {"headers": {"Authorization": "` + ctlSecret + `"}}}}`
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--policy-file", file}, {"--policy-file", "-"}} {
		got = core.NetworkPolicy{}
		r = runCLI(t, nil, addr, body, append([]string{"net", "set", sbA, "--deny", "0.0.0.0/0"}, args...)...)
		want := core.NetworkPolicy{AllowOut: []string{"api.example.com"}, DenyOut: []string{"0.0.0.0/0"},
			Rules: map[string]core.NetworkRule{"api.example.com": {Headers: map[string]string{"Authorization": ctlSecret}}}}
		if r.code != exitOK || !reflect.DeepEqual(got, want) {
			t.Errorf("net set %v: exit %d (%q), the domain got %+v", args, r.code, r.stderr, got)
		}
	}

	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"net", "set", sbA, "--rule", "no-colon"}, exitUsage, "DOMAIN:HEADER=VALUE"},
		{[]string{"net", "set", sbA, "--rule", "api.com:NoValue"}, exitUsage, "DOMAIN:HEADER=VALUE"},
		{[]string{"net", "set", sbA, "--policy-file", "/nonexistent/p.json"}, exitUsage, "--policy-file"},
		{[]string{"net", "set"}, exitUsage, "want SANDBOX_ID"},
		{[]string{"net", "set", sbA, "--allow", "bad_name.com"}, exitFailure, `"bad_name.com"`},
		{[]string{"net", "set", sbA, "--allow", "10.0.0.0/8"}, exitFailure, "--egress-allow-private"},
	} {
		r := runCLI(t, nil, addr, "", c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("%v: exit %d, stderr %q; want %d with %s", c.args, r.code, r.stderr, c.code, c.msg)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"allow_out": "not a list"}`), 0o600)
	if r := runCLI(t, nil, addr, "", "net", "set", sbA, "--policy-file", bad); r.code != exitUsage || !strings.Contains(r.stderr, "not a NetworkPolicy") {
		t.Errorf("a malformed policy file: exit %d, %q", r.code, r.stderr)
	}
}

func TestNetHost(t *testing.T) {
	fake := &coretest.Manager{GetHostFunc: func(_ context.Context, id string, port int) (core.HostInfo, error) {
		if port == 9000 {
			return core.HostInfo{URL: "https://9000-" + id + ".example.test/"}, nil
		}
		return core.HostInfo{URL: "https://8080-" + id + ".example.test/", TokenRequired: true, Token: "tok123", TokenHeader: "sandboxd-traffic-token"}, nil
	}}
	addr := startNetServer(t, fake)
	r := runCLI(t, nil, addr, "", "net", "host", sbA, "8080")
	if want := "https://8080-" + sbA + ".example.test/\nsandboxd-traffic-token: tok123\n"; r.code != exitOK || r.stdout != want {
		t.Errorf("net host: exit %d, %q; want %q", r.code, r.stdout, want)
	}
	r = runCLI(t, nil, addr, "", "net", "host", sbA, "9000")
	if want := "https://9000-" + sbA + ".example.test/\n"; r.code != exitOK || r.stdout != want {
		t.Errorf("net host (public): exit %d, %q", r.code, r.stdout)
	}
	for _, port := range []string{"0", "70000", "http"} {
		if r := runCLI(t, nil, addr, "", "net", "host", sbA, port); r.code != exitUsage {
			t.Errorf("net host %s: exit %d", port, r.code)
		}
	}
}

func TestExecNetworkOptions(t *testing.T) {
	var got []core.Options
	created := true
	fake := &coretest.Manager{
		AcquireFunc: func(_ context.Context, user string, opts core.Options) (core.AcquireResult, error) {
			got = append(got, opts)
			return core.AcquireResult{Sandbox: core.Sandbox{ID: sbA, UserID: user, State: core.StateRunning}, Created: created}, nil
		},
		SubmitFunc: func(_ context.Context, req core.ExecRequest) (string, error) { return req.CommandID, nil },
		FollowFunc: func(_ context.Context, _, cid string, _ int64, fn func(core.Event) error) error {
			return fn(core.Event{Seq: 1, Type: ioproto.EventDone, Status: ioproto.StatusOK})
		},
	}
	addr := startNetServer(t, fake)
	r := runCLI(t, nil, addr, "", "exec", "--user", "alice", "--deny", "0.0.0.0/0", "--allow", "pypi.org", "1")
	if r.code != exitOK || len(got) != 1 || !got[0].Network || got[0].NetworkPolicy == nil ||
		!reflect.DeepEqual(got[0].NetworkPolicy.AllowOut, []string{"pypi.org"}) || !reflect.DeepEqual(got[0].NetworkPolicy.DenyOut, []string{"0.0.0.0/0"}) {
		t.Fatalf("exec with a policy: exit %d (%q), acquired with %+v", r.code, r.stderr, got)
	}
	r = runCLI(t, nil, addr, "", "exec", "--user", "alice", "--network", "1")
	if r.code != exitOK || len(got) != 2 || !got[1].Network || got[1].NetworkPolicy == nil || len(got[1].NetworkPolicy.AllowOut) != 0 {
		t.Errorf("exec --network: exit %d, acquired with %+v", r.code, got[1:])
	}
	r = runCLI(t, nil, addr, "", "exec", "--user", "alice", "1")
	if len(got) != 3 || got[2].Network {
		t.Errorf("exec without network flags acquired with %+v", got[2:])
	}
	created = false
	r = runCLI(t, nil, addr, "", "exec", "--user", "alice", "--allow", "pypi.org", "1")
	if r.code != exitOK || !strings.Contains(r.stderr, "exists already and keeps the network it was created with") {
		t.Errorf("exec with a policy for an existing sandbox: exit %d, stderr %q", r.code, r.stderr)
	}
	for _, args := range [][]string{
		{"exec", "--sandbox", sbA, "--allow", "pypi.org", "1"},
		{"exec", "--user", "alice", "--policy-file", "-", "-"},
	} {
		if r := runCLI(t, nil, addr, "", args...); r.code != exitUsage {
			t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
}
