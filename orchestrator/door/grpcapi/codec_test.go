package grpcapi

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// TestFloodedRequestsAreNotBuilt: a request whose lists or maps hold more
// elements than any valid one (a 4 MiB Execute of 300,000 env names, an
// Acquire with as many in its options) is refused INVALID_ARGUMENT before
// it is built, so eight at once cost the server about their bytes, not
// ~50 MB each; nothing reaches the domain. (Before, each was built and
// then refused by the domain's 256-variable rule.)
func TestFloodedRequestsAreNotBuilt(t *testing.T) {
	env := newTestEnv(t, &fakeManager{})
	ctx := testCtx(t)
	flood := make(map[string]string, 300_000)
	for i := range 300_000 {
		flood[fmt.Sprintf("k%d", i)] = ""
	}
	exec := &sandboxv1.ExecuteRequest{SandboxId: sb1, Code: "1", Env: flood}
	acq := &sandboxv1.AcquireSandboxRequest{UserId: "alice", Options: &sandboxv1.SandboxOptions{Env: flood}}

	refused := func(err error) {
		t.Helper()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "more than 4096 elements") {
			t.Errorf("flooded request: %v; want INVALID_ARGUMENT naming the bound", err)
		}
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			stream, err := env.client.Execute(ctx, exec)
			if err == nil {
				_, err = stream.Recv()
			}
			if err == io.EOF {
				err = nil
			}
			refused(err)
		})
		wg.Go(func() {
			_, err := env.client.AcquireSandbox(ctx, acq)
			refused(err)
		})
	}
	wg.Wait()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	// Client and server share the process: the client marshals each
	// request (its 300,000 entries) and the server reads it; measured
	// about 200 MiB for the 8. Built, the server's 8 maps added about 400
	// MiB more (620 MiB measured).
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 350<<20 {
		t.Errorf("8 flooded requests allocated %d MiB in the process; want under 350", alloc>>20)
	}
	if calls := env.fake.Calls(); len(calls) != 0 {
		t.Errorf("flooded requests reached the domain: %v", calls)
	}
	// The connection stays usable for a request within the bounds.
	if _, err := env.client.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: "alice"}); status.Code(err) == codes.InvalidArgument {
		t.Errorf("a plain request after the floods: %v", err)
	}
}
