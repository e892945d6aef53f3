package main

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/audit"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
	"github.com/sandboxd/sandboxd/orchestrator/door/grpcapi"
	"github.com/sandboxd/sandboxd/orchestrator/door/tokens"
)

// TestAudit: sandboxctl audit prints the trail with its filters, as a
// table and as JSON, and a user token sees its own tenant's only.
func TestAudit(t *testing.T) {
	const (
		sb      = "sb-aaaaaaaaaaaaaaaaaaaa"
		acmeTok = "acme-user-token-0123456789"
		opsTok  = "ops-admin-token-0123456789"
	)
	toks, err := tokens.Parse(strings.NewReader(acmeTok + " acme user ci-bot\n" + opsTok + " ops admin\n"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := audit.Open(audit.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	fake := &coretest.Manager{
		AcquireFunc: func(context.Context, string, core.Options) (core.AcquireResult, error) {
			return core.AcquireResult{Sandbox: core.Sandbox{ID: sb}}, nil
		},
		DeleteFunc: func(context.Context, string) error { return core.NotFoundf("sandbox %s not found", sb) },
	}
	m := audit.Audited(coretest.Validated(fake), l)
	m.Acquire(core.WithCaller(t.Context(), core.Caller{Tenant: "ops", Admin: true, Name: tokens.Fingerprint(opsTok)}), "root", core.Options{})
	m.Acquire(core.WithCaller(t.Context(), core.Caller{Tenant: "acme", Name: "ci-bot"}), "alice", core.Options{})
	m.Delete(core.WithCaller(t.Context(), core.Caller{Tenant: "acme", Name: "ci-bot"}), sb)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpcapi.NewServer(coretest.Validated(fake), nil, grpcapi.WithTokens(toks), grpcapi.WithAudit(l))
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	addr := lis.Addr().String()
	runCLI := func(t *testing.T, _ context.Context, addr, token string, args ...string) result {
		t.Helper()
		return runCLIEnv(t, nil, append([]string{"--addr", addr, "--token", token}, args...)...)
	}

	r := runCLI(t, nil, addr, acmeTok, "audit")
	if r.code != exitOK {
		t.Fatalf("audit: exit %d, stderr %q", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "TIME") ||
		!strings.Contains(lines[1], "acme    ci-bot  acquire  "+sb+"  user=alice") ||
		!strings.Contains(lines[2], `delete   `+sb+`  error="sandbox `+sb+` not found"  not_found`) {
		t.Errorf("audit as acme printed:\n%s", r.stdout)
	}
	if r := runCLI(t, nil, addr, acmeTok, "audit", "--tenant", "ops"); r.code != exitFailure || !strings.Contains(r.stderr, "only its own tenant's") {
		t.Errorf("acme asking for ops' events: exit %d, stderr %q", r.code, r.stderr)
	}

	r = runCLI(t, nil, addr, opsTok, "audit", "--action", "acquire", "--limit", "1", "-o", "json")
	var got []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); r.code != exitOK || err != nil || len(got) != 1 ||
		got[0]["tenant"] != "acme" || got[0]["token_name"] != "ci-bot" || got[0]["user_id"] != "alice" {
		t.Errorf("audit --action acquire --limit 1 -o json as admin: exit %d, %q (%v)", r.code, r.stdout, err)
	}
	if r := runCLI(t, nil, addr, opsTok, "audit", "--since", time.Now().Add(time.Hour).Format(time.RFC3339)); r.code != exitOK || r.stdout != "No audit events match.\n" {
		t.Errorf("audit --since in an hour: exit %d, %q", r.code, r.stdout)
	}
	for _, args := range [][]string{{"audit", "--since", "yesterday"}, {"audit", "extra"}, {"audit", "--limit", "-1"}} {
		if r := runCLI(t, nil, addr, opsTok, args...); r.code != exitUsage {
			t.Errorf("%v: exit %d; want a usage error", args, r.code)
		}
	}
}
