package grpcapi

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sandboxd/sandboxd/orchestrator/audit"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
	"github.com/sandboxd/sandboxd/orchestrator/door/tokens"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// newAuditEnv serves fake behind the audit decorator and the validating
// layer, as sandboxd does, with the test tokens and the trail readable.
func newAuditEnv(t *testing.T, fake *fakeManager) *testEnv {
	t.Helper()
	toks, err := tokens.Parse(strings.NewReader(testTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	l, err := audit.Open(audit.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	v := coretest.Validated(fake)
	m := &coretest.ValidatedManager{Manager: audit.Audited(v.Manager, l), Fake: fake}
	return newTestEnvWith(t, fake, m, WithTokens(toks), WithAudit(l))
}

// TestListAuditEvents: calls through the door are recorded with the
// token's tenant and name; an admin reads every tenant's, a user only its
// own, and a user asking for another tenant's is refused.
func TestListAuditEvents(t *testing.T) {
	fake := &fakeManager{
		AcquireFunc: func(ctx context.Context, userID string, _ core.Options) (core.AcquireResult, error) {
			id := sb1
			if core.CallerOf(ctx).Tenant == "beta" {
				id = sb2
			}
			return core.AcquireResult{Sandbox: core.Sandbox{ID: id, UserID: userID, State: core.StateRunning}}, nil
		},
		DeleteFunc: func(context.Context, string) error { return nil },
		GetFunc:    func(context.Context, string) (core.Sandbox, error) { return core.Sandbox{ID: sb1}, nil },
	}
	env := newAuditEnv(t, fake)
	ctx := testCtx(t)
	acme, beta, admin := withToken(ctx, tokAcme), withToken(ctx, tokBeta), withToken(ctx, tokAdmin)
	mustOK := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mustOK(env.client.AcquireSandbox(acme, &sandboxv1.AcquireSandboxRequest{UserId: "alice"}))
	mustOK(env.client.AcquireSandbox(beta, &sandboxv1.AcquireSandboxRequest{UserId: "bob"}))
	mustOK(env.client.GetSandbox(acme, &sandboxv1.GetSandboxRequest{SandboxId: sb1})) // a read: not recorded
	mustOK(env.client.DeleteSandbox(acme, &sandboxv1.DeleteSandboxRequest{SandboxId: sb1}))

	list := func(ctx context.Context, req *sandboxv1.ListAuditEventsRequest) string {
		t.Helper()
		resp, err := env.client.ListAuditEvents(ctx, req)
		if err != nil {
			t.Fatalf("ListAuditEvents(%v): %v", req, err)
		}
		var got []string
		for _, e := range resp.GetEvents() {
			got = append(got, e.GetTenant()+"/"+e.GetTokenName()+"/"+e.GetAction()+"/"+e.GetSandboxId()+"/"+e.GetUserId()+"/"+e.GetOutcome())
		}
		return strings.Join(got, " ")
	}
	fa, fb := tokens.Fingerprint(tokAcme), tokens.Fingerprint(tokBeta)
	for _, tc := range []struct {
		name string
		ctx  context.Context
		req  *sandboxv1.ListAuditEventsRequest
		want string
	}{
		{"admin, all", admin, &sandboxv1.ListAuditEventsRequest{},
			"acme/" + fa + "/acquire/" + sb1 + "/alice/ok beta/" + fb + "/acquire/" + sb2 + "/bob/ok acme/" + fa + "/delete/" + sb1 + "//ok"},
		{"admin, beta", admin, &sandboxv1.ListAuditEventsRequest{Tenant: "beta"}, "beta/" + fb + "/acquire/" + sb2 + "/bob/ok"},
		{"admin, action", admin, &sandboxv1.ListAuditEventsRequest{Action: "delete"}, "acme/" + fa + "/delete/" + sb1 + "//ok"},
		{"acme", acme, &sandboxv1.ListAuditEventsRequest{},
			"acme/" + fa + "/acquire/" + sb1 + "/alice/ok acme/" + fa + "/delete/" + sb1 + "//ok"},
		{"acme, sandbox", acme, &sandboxv1.ListAuditEventsRequest{SandboxId: sb2}, ""},
		{"beta", beta, &sandboxv1.ListAuditEventsRequest{Tenant: "beta"}, "beta/" + fb + "/acquire/" + sb2 + "/bob/ok"},
		{"admin, until the start", admin, &sandboxv1.ListAuditEventsRequest{Until: timestamppb.New(timestamppb.Now().AsTime().Add(-3600e9))}, ""},
	} {
		if got := list(tc.ctx, tc.req); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}

	_, err := env.client.ListAuditEvents(acme, &sandboxv1.ListAuditEventsRequest{Tenant: "beta"})
	wantStatus(t, err, codes.PermissionDenied, "a user token reads only its own tenant's audit events")
	_, err = env.client.ListAuditEvents(admin, &sandboxv1.ListAuditEventsRequest{Action: "launch"})
	wantStatus(t, err, codes.InvalidArgument, `action "launch" is not one of acquire`)
	_, err = env.client.ListAuditEvents(admin, &sandboxv1.ListAuditEventsRequest{PageToken: "x"})
	wantStatus(t, err, codes.InvalidArgument, "page_token is not one this server returned")
	_, err = env.client.ListAuditEvents(admin, &sandboxv1.ListAuditEventsRequest{Since: &timestamppb.Timestamp{Nanos: -1}})
	wantStatus(t, err, codes.InvalidArgument, "since is not a valid timestamp")
	_, err = env.client.ListAuditEvents(acme, nil)
	if err != nil {
		t.Errorf("an empty request: %v", err)
	}
}

// TestListAuditEventsOff: without WithAudit the RPC says the trail is off.
func TestListAuditEventsOff(t *testing.T) {
	env := newTestEnv(t, &fakeManager{})
	_, err := env.client.ListAuditEvents(testCtx(t), &sandboxv1.ListAuditEventsRequest{})
	wantStatus(t, err, codes.FailedPrecondition, "the audit trail is off")
}

// TestAuditEventTemplate: a template call's record carries its template,
// made valid UTF-8 (a refused request's reference is recorded as sent).
func TestAuditEventTemplate(t *testing.T) {
	e := auditEventToProto(audit.Event{Action: audit.ActionBuildTemplate, Template: "tools\xff"})
	if e.GetAction() != "build_template" || e.GetTemplate() != "tools\uFFFD" {
		t.Errorf("record = %v", e)
	}
}
