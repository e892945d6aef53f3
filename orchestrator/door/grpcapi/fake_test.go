package grpcapi

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// fakeManager is the scriptable domain shared with other packages' tests.
type fakeManager = coretest.Manager

// Well-formed sandbox IDs for tests (the domain's validator checks the form).
const (
	sb1    = "sb-aaaaaaaaaaaaaaaaaaaa"
	sb2    = "sb-bbbbbbbbbbbbbbbbbbbb"
	sbGone = "sb-zzzzzzzzzzzzzzzzzzzz"
)

// syncBuffer is a log sink safe for the server's goroutines, which tests
// can wait on.
type syncBuffer struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	notify chan struct{} // gets a token after each write
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.notify == nil {
		b.notify = make(chan struct{}, 1)
	}
	select {
	case b.notify <- struct{}{}:
	default:
	}
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor blocks until the log contains s, failing t after 10 seconds.
func (b *syncBuffer) waitFor(t *testing.T, s string) {
	t.Helper()
	b.mu.Lock()
	if b.notify == nil {
		b.notify = make(chan struct{}, 1)
	}
	notify := b.notify
	b.mu.Unlock()
	deadline := time.After(10 * time.Second)
	for !strings.Contains(b.String(), s) {
		select {
		case <-notify:
		case <-deadline:
			t.Fatalf("log did not show %q within 10s; log:\n%s", s, b.String())
		}
	}
}

// testEnv is a server over a fake domain, reachable through an in-memory
// connection.
type testEnv struct {
	fake   *fakeManager
	server *Server
	conn   *grpc.ClientConn
	client sandboxv1.SandboxServiceClient
	log    *syncBuffer
}

func newTestEnv(t *testing.T, fake *fakeManager, opts ...Option) *testEnv {
	t.Helper()
	return newTestEnvWith(t, fake, coretest.Validated(fake), opts...)
}

// newNetTestEnv is newTestEnv on a server that gives sandboxes network.
func newNetTestEnv(t *testing.T, fake *fakeManager, opts ...Option) *testEnv {
	t.Helper()
	return newTestEnvWith(t, fake, coretest.ValidatedWith(fake, coretest.NetworkPolicy()), opts...)
}

// newTestEnvWith serves m, fake behind the validating layer.
func newTestEnvWith(t *testing.T, fake *fakeManager, m *coretest.ValidatedManager, opts ...Option) *testEnv {
	t.Helper()
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv := NewServer(m, logger, opts...)
	lis := bufconn.Listen(1 << 20)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()

	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(sandboxv1.MaxMessageSize)),
	)
	if err != nil {
		t.Fatalf("dial bufconn: %v", err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		select {
		case <-served:
		case <-time.After(10 * time.Second):
			t.Errorf("server did not stop within 10s")
		}
	})
	return &testEnv{fake: fake, server: srv, conn: conn, client: sandboxv1.NewSandboxServiceClient(conn), log: logs}
}

// ctx bounds every call so a hung server fails the test instead of the run.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
