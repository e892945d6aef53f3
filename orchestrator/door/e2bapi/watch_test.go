package e2bapi

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/door/e2bapi/envdproto/filesystem"
	"github.com/sandboxd/sandboxd/orchestrator/door/e2bapi/envdproto/filesystem/filesystemconnect"
)

// watchManager holds every WatchDirectory until its request ends,
// counted per sandbox, per caller's tenant and on the server against caps
// as the Docker backend counts them, and refused with the domain's errors.
type watchManager struct {
	fakeManager
	caps  core.Caps
	usage core.Usage
}

func (w *watchManager) WatchDirectory(ctx context.Context, id, p string, recursive bool, fn func(core.WatchUpdate) error) error {
	tenant := core.CallerOf(ctx).Tenant
	if scope, ok := w.usage.Take(w.caps, id, tenant, 1); !ok {
		who := map[core.Scope]string{core.ScopeSandbox: id, core.ScopeTenant: tenant}[scope]
		return core.WatchesCapReached(scope, who, w.caps.Of(scope))
	}
	defer w.usage.Release(id, tenant, 1)
	if err := fn(core.WatchUpdate{}); err != nil {
		return err
	}
	<-ctx.Done()
	return ctx.Err()
}

// TestWatchDirTenantCap is issue 22's scenario through the E2B door: a
// tenant at its cap of watches gets resource_exhausted naming its own cap
// (the SDK's error carries the message), and another tenant's watchDir
// still starts.
func TestWatchDirTenantCap(t *testing.T) {
	s, fm := newTestServer(t)
	wm := &watchManager{fakeManager: *fm, caps: core.Caps{PerSandbox: 1, PerTenant: 2, Server: 4}}
	s.m = wm
	ids := map[string]string{"a1": "sb-aaaaaaaaaaaaaaaaaaa2", "a2": "sb-aaaaaaaaaaaaaaaaaaa3", "a3": "sb-aaaaaaaaaaaaaaaaaaa4", "b1": "sb-bbbbbbbbbbbbbbbbbbb2"}
	for name, id := range ids {
		tenant := map[byte]string{'a': "acme", 'b': "beta"}[name[0]]
		wm.sandboxes[id] = core.Sandbox{ID: id, Tenant: tenant, State: core.StateRunning}
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	client := filesystemconnect.NewFilesystemClient(srv.Client(), srv.URL)
	watch := func(name string) error {
		t.Helper()
		ctx, cancel := context.WithCancel(t.Context())
		req := connect.NewRequest(&filesystem.WatchDirRequest{Path: "/home/user"})
		req.Header().Set("E2b-Sandbox-Id", ids[name])
		req.Header().Set("E2b-Sandbox-Port", EnvdPort)
		req.Header().Set("X-Access-Token", s.accessToken(ids[name]))
		stream, err := client.WatchDir(ctx, req)
		if err != nil {
			cancel()
			return err
		}
		if !stream.Receive() {
			cancel()
			return stream.Err()
		}
		if stream.Msg().GetStart() == nil {
			t.Fatalf("first message of %s's watch: %v; want the start event", name, stream.Msg())
		}
		t.Cleanup(func() { cancel(); stream.Close() })
		return nil
	}
	refused := func(name, msg string) {
		t.Helper()
		err := watch(name)
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeResourceExhausted || !strings.Contains(ce.Message(), msg) {
			t.Errorf("%s's watch: %v; want resource_exhausted naming %q", name, err, msg)
		}
	}

	if err := watch("a1"); err != nil {
		t.Fatal(err)
	}
	refused("a1", "sandbox "+ids["a1"]+" has reached its cap of 1 watches in progress (sandboxd --max-watches-per-sandbox)")
	if err := watch("a2"); err != nil {
		t.Fatal(err)
	}
	refused("a3", "tenant acme has reached its cap of 2 watches in progress over all its sandboxes (sandboxd --max-watches-per-tenant)")
	if err := watch("b1"); err != nil {
		t.Errorf("tenant beta's watchDir with acme at its cap: %v", err)
	}
}
