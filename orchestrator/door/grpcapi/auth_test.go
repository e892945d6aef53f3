package grpcapi

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/door/tokens"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// Tokens used by the tests below.
const (
	tokAcme  = "acme-user-token-0123456789"
	tokBeta  = "beta-user-token-0123456789"
	tokAdmin = "ops-admin-token-0123456789"
)

const testTokenFile = `# sandboxd tokens
` + tokAcme + ` acme user

` + tokBeta + `   beta   user
  ` + tokAdmin + ` ops admin
`

// callerRecorder scripts the fake domain to record the caller each call
// carried.
type callerRecorder struct {
	mu      sync.Mutex
	callers []core.Caller
}

func (r *callerRecorder) record(ctx context.Context) {
	c, ok := core.CallerFrom(ctx)
	if !ok {
		c = core.Caller{Tenant: "<none>"}
	}
	r.mu.Lock()
	r.callers = append(r.callers, c)
	r.mu.Unlock()
}

func (r *callerRecorder) last(t *testing.T) core.Caller {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.callers) == 0 {
		t.Fatal("no call reached the domain")
	}
	return r.callers[len(r.callers)-1]
}

func (r *callerRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.callers)
}

func recordingFake(r *callerRecorder) *fakeManager {
	return &fakeManager{
		ListFunc: func(ctx context.Context, _ core.ListFilter) ([]core.Sandbox, error) {
			r.record(ctx)
			return nil, nil
		},
		FollowFunc: func(ctx context.Context, _, _ string, _ int64, _ func(core.Event) error) error {
			r.record(ctx)
			return nil
		},
	}
}

func withToken(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

func TestAuthRequiresValidToken(t *testing.T) {
	toks, err := tokens.Parse(strings.NewReader(testTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	rec := &callerRecorder{}
	env := newTestEnv(t, recordingFake(rec), WithTokens(toks))
	ctx := testCtx(t)

	stream := func(ctx context.Context) error {
		s, err := env.client.StreamCommand(ctx, &sandboxv1.StreamCommandRequest{SandboxId: sb1, CommandId: "c1"})
		if err != nil {
			return err
		}
		_, err = s.Recv()
		if err == io.EOF {
			return nil
		}
		return err
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"no token", ctx, "this server requires a token"},
		{"wrong token", withToken(ctx, "not-a-valid-token-at-all"), "the token is not valid on this server"},
		{"not bearer", metadata.AppendToOutgoingContext(ctx, "authorization", "Basic "+tokAcme), "this server requires a token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := env.client.ListSandboxes(tc.ctx, &sandboxv1.ListSandboxesRequest{})
			wantStatus(t, err, codes.Unauthenticated, tc.want)
			wantStatus(t, stream(tc.ctx), codes.Unauthenticated, tc.want)
			refl, err := reflectionpb.NewServerReflectionClient(env.conn).ServerReflectionInfo(tc.ctx)
			if err == nil {
				err = refl.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
				// A stream the server already ended answers Send with io.EOF;
				// its status comes from Recv.
				if err == nil || errors.Is(err, io.EOF) {
					_, err = refl.Recv()
				}
			}
			wantStatus(t, err, codes.Unauthenticated, tc.want)
		})
	}
	if n := rec.count(); n != 0 {
		t.Fatalf("%d unauthenticated calls reached the domain", n)
	}

	// Health stays open: probes carry no token.
	env.server.SetServing(true)
	resp, err := healthpb.NewHealthClient(env.conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health without a token = %v, %v; want SERVING", resp, err)
	}

	// Valid tokens reach the domain as their tenant and role, for unary and
	// streaming calls alike.
	for tok, want := range map[string]core.Caller{
		tokAcme:  {Tenant: "acme", Name: tokens.Fingerprint(tokAcme)},
		tokAdmin: {Tenant: "ops", Admin: true, Name: tokens.Fingerprint(tokAdmin)},
	} {
		if _, err := env.client.ListSandboxes(withToken(ctx, tok), &sandboxv1.ListSandboxesRequest{}); err != nil {
			t.Fatalf("ListSandboxes with a valid token: %v", err)
		}
		if got := rec.last(t); got != want {
			t.Errorf("unary call with token of %s reached the domain as %+v; want %+v", want.Tenant, got, want)
		}
		if err := stream(withToken(ctx, tok)); err != nil {
			t.Fatalf("StreamCommand with a valid token: %v", err)
		}
		if got := rec.last(t); got != want {
			t.Errorf("stream with token of %s reached the domain as %+v; want %+v", want.Tenant, got, want)
		}
	}
}

func TestNoTokensMeansDefaultAdmin(t *testing.T) {
	rec := &callerRecorder{}
	env := newTestEnv(t, recordingFake(rec))
	// A token is ignored (not an error) on a server without tokens.
	for _, ctx := range []context.Context{testCtx(t), withToken(testCtx(t), "whatever-token-123456")} {
		if _, err := env.client.ListSandboxes(ctx, &sandboxv1.ListSandboxesRequest{}); err != nil {
			t.Fatalf("ListSandboxes: %v", err)
		}
		if got := rec.last(t); got != core.DefaultCaller {
			t.Errorf("caller = %+v; want %+v", got, core.DefaultCaller)
		}
	}
}

func TestListTenantFilter(t *testing.T) {
	var got core.ListFilter
	env := newTestEnv(t, &fakeManager{ListFunc: func(_ context.Context, f core.ListFilter) ([]core.Sandbox, error) {
		got = f
		return []core.Sandbox{{ID: sb1, Tenant: "acme", UserID: "alice", State: core.StateRunning, Network: true}}, nil
	}})
	ctx := testCtx(t)
	resp, err := env.client.ListSandboxes(ctx, &sandboxv1.ListSandboxesRequest{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Tenant != "acme" {
		t.Errorf("filter reached the domain as %+v", got)
	}
	if sb := resp.GetSandboxes()[0]; sb.GetTenant() != "acme" || !sb.GetNetwork() {
		t.Errorf("sandbox = %v; want tenant acme with network", sb)
	}
	_, err = env.client.ListSandboxes(ctx, &sandboxv1.ListSandboxesRequest{Tenant: "a b"})
	wantStatus(t, err, codes.InvalidArgument, "tenant name")
}

// wantStatus fails t unless err is a status with code whose message contains msg.
func wantStatus(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	st, _ := status.FromError(err)
	if err == nil || st.Code() != code || !strings.Contains(st.Message(), msg) {
		t.Errorf("error = %v; want %v containing %q", err, code, msg)
	}
}
