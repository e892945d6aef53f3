package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// Tokens of TestE2ETenants.
const (
	e2eAcme  = "acme-user-token-e2e-0123456789"
	e2eBeta  = "beta-user-token-e2e-0123456789"
	e2eAdmin = "ops-admin-token-e2e-0123456789"
)

func bearer(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// wantCode fails t unless err has code and its message is msg (exactly,
// when exact) or contains it.
func wantCode(t *testing.T, what string, err error, code codes.Code, msg string, exact bool) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != code || (exact && st.Message() != msg) || (!exact && !strings.Contains(st.Message(), msg)) {
		t.Errorf("%s: %v; want %v with message %q", what, err, code, msg)
	}
}

// TestE2ETenants runs the real sandboxd with tokens: one tenant cannot see,
// run code in or delete another's sandbox (NOT_FOUND, exactly as for an ID
// that does not exist), user IDs are per tenant, the admin sees everyone,
// and all of it holds across a restart.
func TestE2ETenants(t *testing.T) {
	env := needE2E(t)
	runTenants(t, env, func(args ...string) *daemon { return env.start(t, args...) })
}

// runTenants is TestE2ETenants on daemons start makes, on either backend:
// the second start is the restart.
func runTenants(t *testing.T, env *e2eEnv, start func(args ...string) *daemon) {
	ctx := e2eCtx(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	file := "# e2e\n" + e2eAcme + " acme user\n" + e2eBeta + " beta user\n" + e2eAdmin + " ops admin\n"
	if err := os.WriteFile(tokens, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	d := start("--auth-tokens", tokens)
	c, conn := d.client(t)
	acme, beta, admin := bearer(ctx, e2eAcme), bearer(ctx, e2eBeta), bearer(ctx, e2eAdmin)

	_, err := c.ListSandboxes(ctx, &sandboxv1.ListSandboxesRequest{})
	wantCode(t, "ListSandboxes without a token", err, codes.Unauthenticated, "requires a token", false)
	if resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health without a token: %v, %v", resp, err)
	}

	a := acquire(t, acme, c, "alice").GetSandbox()
	t.Cleanup(func() { deleteQuietly(c, a.GetSandboxId()) })
	if a.GetTenant() != "acme" {
		t.Errorf("acme's sandbox has tenant %q", a.GetTenant())
	}
	mustOK(t, execute(t, acme, c, &sandboxv1.ExecuteRequest{SandboxId: a.GetSandboxId(), Code: "secret = 'acme'"}), "acme's command")

	// What beta gets for acme's sandbox is what it gets for an unknown ID.
	unknown := "sb-zzzzzzzzzzzzzzzzzzzz"
	_, err = c.GetSandbox(beta, &sandboxv1.GetSandboxRequest{SandboxId: unknown})
	wantMsg := strings.ReplaceAll(status.Convert(err).Message(), unknown, a.GetSandboxId())
	_, err = c.GetSandbox(beta, &sandboxv1.GetSandboxRequest{SandboxId: a.GetSandboxId()})
	wantCode(t, "beta's GetSandbox", err, codes.NotFound, wantMsg, true)
	s, err := c.Execute(beta, &sandboxv1.ExecuteRequest{SandboxId: a.GetSandboxId(), Code: "print(secret)"})
	if err == nil {
		_, err = s.Recv()
	}
	wantCode(t, "beta's Execute", err, codes.NotFound, wantMsg, true)
	_, err = c.ListFiles(beta, &sandboxv1.ListFilesRequest{SandboxId: a.GetSandboxId()})
	wantCode(t, "beta's ListFiles", err, codes.NotFound, wantMsg, true)
	_, err = c.DeleteSandbox(beta, &sandboxv1.DeleteSandboxRequest{SandboxId: a.GetSandboxId()})
	wantCode(t, "beta's DeleteSandbox", err, codes.NotFound, wantMsg, true)

	// Beta's alice is another user.
	b := acquire(t, beta, c, "alice")
	t.Cleanup(func() { deleteQuietly(c, b.GetSandbox().GetSandboxId()) })
	if !b.GetCreated() || b.GetSandbox().GetSandboxId() == a.GetSandboxId() {
		t.Fatalf("beta's alice got %v; want a new sandbox", b)
	}
	o := execute(t, beta, c, &sandboxv1.ExecuteRequest{SandboxId: b.GetSandbox().GetSandboxId(), Code: "'secret' in globals()"})
	if len(o.results) != 1 || o.results[0]["text/plain"] != "False" {
		t.Errorf("beta's alice sees acme's globals: %+v", o.results)
	}

	// The admin, through sandboxctl, sees both tenants; a user token only its own.
	out, stderr, code := env.ctl(t, ctx, d.addr, "--token", e2eAdmin, "list")
	if code != 0 || !strings.Contains(out, a.GetSandboxId()) || !strings.Contains(out, b.GetSandbox().GetSandboxId()) {
		t.Errorf("admin list: exit %d, stderr %q:\n%s", code, stderr, out)
	}
	out, _, code = env.ctl(t, ctx, d.addr, "--token", e2eAcme, "list")
	if code != 0 || !strings.Contains(out, a.GetSandboxId()) || strings.Contains(out, b.GetSandbox().GetSandboxId()) {
		t.Errorf("acme list: exit %d:\n%s", code, out)
	}
	if _, stderr, code := env.ctl(t, ctx, d.addr, "list"); code != 1 || !strings.Contains(stderr, "requires a token") {
		t.Errorf("sandboxctl without a token: exit %d, stderr %q", code, stderr)
	}

	// Tenants survive a restart (meta.json), and the admin can delete.
	d.stop(t)
	d = start("--auth-tokens", tokens)
	c, _ = d.client(t)
	_, err = c.GetSandbox(beta, &sandboxv1.GetSandboxRequest{SandboxId: a.GetSandboxId()})
	wantCode(t, "beta's GetSandbox after restart", err, codes.NotFound, wantMsg, true)
	again := acquire(t, acme, c, "alice")
	if again.GetCreated() || again.GetSandbox().GetSandboxId() != a.GetSandboxId() {
		t.Errorf("acme's alice after restart: %v", again)
	}
	if _, err := c.DeleteSandbox(admin, &sandboxv1.DeleteSandboxRequest{SandboxId: a.GetSandboxId()}); err != nil {
		t.Errorf("admin delete: %v", err)
	}
}
