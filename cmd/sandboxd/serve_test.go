package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// startServe runs serve over fake on a loopback port and returns a client
// connection and the channel serve's result arrives on.
func startServe(t *testing.T, ctx context.Context, fake *coretest.Manager, grace time.Duration) (*grpc.ClientConn, <-chan error) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, func() {}, lis, coretest.Validated(fake), grace, slog.New(slog.DiscardHandler))
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, done
}

func waitDone(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return within 10s of shutdown")
		return nil
	}
}

func TestServeShutsDownAndClosesManager(t *testing.T) {
	fake := &coretest.Manager{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn, done := startServe(t, ctx, fake, 5*time.Second)
	testenv.WaitServing(t, conn)

	cancel() // what SIGTERM does
	if err := waitDone(t, done); err != nil {
		t.Errorf("serve returned %v, want nil", err)
	}
	if calls := fake.Calls(); !slices.Equal(calls, []string{"Close"}) {
		t.Errorf("manager calls = %v, want exactly one Close", calls)
	}
}

// TestServeForcesStopAfterGrace: an Execute stream that never ends must not
// hold shutdown hostage.
func TestServeForcesStopAfterGrace(t *testing.T) {
	following := make(chan struct{})
	fake := &coretest.Manager{
		FollowFunc: func(ctx context.Context, _, _ string, _ int64, _ func(core.Event) error) error {
			close(following)
			<-ctx.Done()
			return ctx.Err()
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn, done := startServe(t, ctx, fake, 50*time.Millisecond)
	testenv.WaitServing(t, conn)

	callCtx, callCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer callCancel()
	stream, err := sandboxv1.NewSandboxServiceClient(conn).StreamCommand(callCtx,
		&sandboxv1.StreamCommandRequest{SandboxId: "sb-aaaaaaaaaaaaaaaaaaaa", CommandId: "c1"})
	if err != nil {
		t.Fatalf("StreamCommand: %v", err)
	}
	select {
	case <-following:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream never reached the domain")
	}

	cancel()
	if err := waitDone(t, done); err != nil {
		t.Errorf("serve returned %v, want nil", err)
	}
	_, err = stream.Recv()
	if err == io.EOF || status.Code(err) == codes.OK {
		t.Errorf("stream ended with %v; want it cut off with an error", err)
	}
	if calls := fake.Calls(); calls[len(calls)-1] != "Close" {
		t.Errorf("manager calls = %v, want Close last", calls)
	}
}
