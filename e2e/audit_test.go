package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// TestE2EAudit runs the real sandboxd with named and unnamed tokens of two
// tenants and its E2B door: acquire, execute, write a file, delete through
// gRPC and a timeout change through the E2B door each appear exactly once
// in the audit trail with the caller's tenant and token name, read back
// through ListAuditEvents and sandboxctl audit; the code, the file's
// content and the tokens are nowhere in the log; a user token cannot read
// the other tenant's events.
func TestE2EAudit(t *testing.T) {
	env := needE2E(t)
	runAudit(t, env, env.stateDir, func(args ...string) *daemon { return env.start(t, args...) })
}

// runAudit is TestE2EAudit on a daemon start makes, on either backend,
// whose state directory (and audit log) is stateDir.
func runAudit(t *testing.T, env *e2eEnv, stateDir string, start func(args ...string) *daemon) {
	ctx := e2eCtx(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	// acme's token has a name; beta's is named by its fingerprint.
	file := e2eAcme + " acme user acme-ci\n" + e2eBeta + " beta user\n" + e2eAdmin + " ops admin oncall\n"
	if err := os.WriteFile(tokens, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	d := start("--auth-tokens", tokens, "--e2b-listen", "127.0.0.1:0")
	c, _ := d.client(t)
	acme, beta, admin := bearer(ctx, e2eAcme), bearer(ctx, e2eBeta), bearer(ctx, e2eAdmin)

	const secretCode, secretFile = "x = 'code-secret-4b1d'", "file-secret-77aa"
	a := acquire(t, acme, c, "alice").GetSandbox()
	t.Cleanup(func() { deleteQuietly(c, a.GetSandboxId()) })
	id := a.GetSandboxId()
	mustOK(t, execute(t, acme, c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: secretCode}), "acme's command")
	up, err := c.UploadFile(acme)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*sandboxv1.UploadFileRequest{
		{Payload: &sandboxv1.UploadFileRequest_Header{Header: &sandboxv1.UploadFileHeader{SandboxId: id, Path: "notes.txt"}}},
		{Payload: &sandboxv1.UploadFileRequest_Chunk{Chunk: []byte(secretFile)}},
	} {
		if err := up.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := up.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
	b := acquire(t, beta, c, "bob").GetSandbox()
	t.Cleanup(func() { deleteQuietly(c, b.GetSandboxId()) })

	// One call through the E2B door, as acme with its token as API key.
	m := e2bServingLine.FindStringSubmatch(d.logs.String())
	if m == nil {
		t.Fatalf("sandboxd did not log the E2B address")
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+m[1]+"/sandboxes/"+id+"/timeout", strings.NewReader(`{"timeout": 600}`))
	req.Header.Set("X-API-KEY", e2eAcme)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK {
		t.Fatalf("E2B set timeout: %s", resp.Status)
	}
	if _, err := c.DeleteSandbox(acme, &sandboxv1.DeleteSandboxRequest{SandboxId: id}); err != nil {
		t.Fatal(err)
	}

	// Through the API, as the admin: every call once, as its caller.
	r, err := c.ListAuditEvents(admin, &sandboxv1.ListAuditEventsRequest{PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range r.GetEvents() {
		if e.GetOutcome() != "ok" {
			t.Errorf("event %v did not end ok", e)
		}
		got = append(got, fmt.Sprintf("%s/%s/%s/%s", e.GetTenant(), e.GetTokenName(), e.GetAction(), e.GetSandboxId()))
	}
	bname := "sha256:" // beta's fingerprint; its digits are the token file's business
	want := []string{"acme/acme-ci/acquire/" + id, "acme/acme-ci/execute/" + id, "acme/acme-ci/write_file/" + id,
		"beta/" + bname, "acme/acme-ci/set_timeout/" + id, "acme/acme-ci/delete/" + id}
	if len(got) != len(want) {
		t.Fatalf("audit events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("audit event %d is %s; want %s", i, got[i], want[i])
		}
	}
	if !strings.HasSuffix(got[3], "/acquire/"+b.GetSandboxId()) {
		t.Errorf("beta's acquire recorded as %s", got[3])
	}

	// A user reads its own tenant's only.
	_, err = c.ListAuditEvents(beta, &sandboxv1.ListAuditEventsRequest{Tenant: "acme"})
	wantCode(t, "beta reading acme's events", err, codes.PermissionDenied, "only its own tenant's", false)
	if r, err := c.ListAuditEvents(beta, &sandboxv1.ListAuditEventsRequest{}); err != nil || len(r.GetEvents()) != 1 || r.GetEvents()[0].GetTenant() != "beta" {
		t.Errorf("beta's own events: %v, %v; want its acquire only", r.GetEvents(), err)
	}

	// Through sandboxctl, as acme: its five, filtered by sandbox.
	ctl := sandboxctlRunner(t, ctx, env.sandboxctl, d.addr)
	out, errOut, code := ctl("", "--token", e2eAcme, "audit", "--sandbox", id, "-o", "json")
	var evs []map[string]any
	if err := json.Unmarshal([]byte(out), &evs); code != 0 || err != nil || len(evs) != 5 {
		t.Fatalf("sandboxctl audit: exit %d, %v, stderr %q:\n%s", code, err, errOut, out)
	}
	for _, e := range evs {
		if e["tenant"] != "acme" || e["token_name"] != "acme-ci" {
			t.Errorf("sandboxctl audit: event %v", e)
		}
	}
	if _, errOut, code := ctl("", "--token", e2eAcme, "audit", "--tenant", "beta"); code != 1 || !strings.Contains(errOut, "only its own tenant's") {
		t.Errorf("sandboxctl audit --tenant beta as acme: exit %d, %q", code, errOut)
	}

	// The log on disk holds no secret: neither code, nor content, nor token.
	log, err := os.ReadFile(filepath.Join(stateDir, "audit", "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"code-secret", secretFile, e2eAcme, e2eBeta, e2eAdmin} {
		if strings.Contains(string(log), s) {
			t.Errorf("the audit log holds %q", s)
		}
	}
}
