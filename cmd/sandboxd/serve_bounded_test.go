package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// TestServeShutdownEndsWithinItsTimeout: a call stuck where its context
// cannot reach, and a manager whose Close waits for it, do not hold
// shutdown past --shutdown-timeout (it once took 26 s of a 5 s timeout,
// until SIGKILL): serve returns in time, saying the manager did not
// close.
func TestServeShutdownEndsWithinItsTimeout(t *testing.T) {
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	acquiring := make(chan struct{})
	fake := &coretest.Manager{
		AcquireFunc: func(context.Context, string, core.Options) (core.AcquireResult, error) {
			close(acquiring)
			<-stuck // deaf to its context, as a thread blocked in open(2) on a FIFO was
			return core.AcquireResult{}, nil
		},
		CloseFunc: func() error {
			<-stuck // waits for the stuck call
			return nil
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const grace = 500 * time.Millisecond
	conn, done := startServe(t, ctx, fake, grace)
	testenv.WaitServing(t, conn)

	callCtx, callCancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer callCancel()
	go sandboxv1.NewSandboxServiceClient(conn).AcquireSandbox(callCtx, &sandboxv1.AcquireSandboxRequest{UserId: "u"})
	select {
	case <-acquiring:
	case <-time.After(10 * time.Second):
		t.Fatal("the call never reached the domain")
	}

	start := time.Now()
	cancel() // what SIGTERM does
	err := waitDone(t, done)
	took := time.Since(start)
	if took > grace+time.Second {
		t.Errorf("shutdown took %v with a timeout of %v", took, grace)
	}
	if err == nil || !strings.Contains(err.Error(), "did not finish within the shutdown timeout") {
		t.Errorf("serve returned %v; want the manager's close reported unfinished", err)
	}
	t.Logf("shutdown took %v (timeout %v)", took.Round(time.Millisecond), grace)
}
