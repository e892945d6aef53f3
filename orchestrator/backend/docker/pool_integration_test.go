package docker

import (
	"fmt"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// awaitPoolWithin waits until m's pool holds n ready sandboxes; real
// containers take a while to start on a busy machine.
func awaitPoolWithin(t testing.TB, m *validated, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for m.pool.size() != n {
		if time.Now().After(deadline) {
			t.Fatalf("warm pool holds %d sandboxes after %v; want %d", m.pool.size(), within, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestIntegrationWarmPool(t *testing.T) {
	m1, c, cfg := integrationManager(t, func(c *Config) { c.WarmPool = 2 })
	ctx := t.Context()
	awaitPoolWithin(t, m1, 2, 2*time.Minute)
	pooled := poolIDs(m1)

	start := time.Now()
	res, err := m1.Acquire(core.WithCaller(ctx, core.Caller{Tenant: "acme"}), "alice", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Created || !slices.Contains(pooled, res.Sandbox.ID) {
		t.Fatalf("Acquire = %+v; want one of the pool's sandboxes %v", res, pooled)
	}
	info, err := c.ContainerInspect(ctx, res.Sandbox.ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	created, err := time.Parse(time.RFC3339Nano, info.Created)
	if err != nil || !created.Before(start) || !info.State.Running {
		t.Errorf("claimed container created at %v (running %v); the Acquire began at %v", created, info.State.Running, start)
	}
	if out := mustRunOK(t, m1, res.Sandbox.ID, "python", "print('claimed')"); out != "claimed\n" {
		t.Errorf("claimed sandbox runs code: %q", out)
	}
	awaitPoolWithin(t, m1, 2, 2*time.Minute)
	refilled := poolIDs(m1)
	if slices.Contains(refilled, res.Sandbox.ID) {
		t.Errorf("the claimed sandbox is still in the pool")
	}

	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}
	m2, err := newValidated(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if got := poolIDs(m2); !slices.Equal(got, refilled) {
		t.Errorf("after restart the pool holds %v; want the same sandboxes %v", got, refilled)
	}
	again, err := m2.Acquire(core.WithCaller(ctx, core.Caller{Tenant: "acme"}), "alice", core.Options{})
	if err != nil || again.Created || again.Sandbox.ID != res.Sandbox.ID {
		t.Errorf("after restart alice gets %+v, %v; want her claimed sandbox", again, err)
	}
	// Another tenant's alice is a new user: she gets an adopted pool sandbox.
	other, err := m2.Acquire(core.WithCaller(ctx, core.Caller{Tenant: "beta"}), "alice", core.Options{})
	if err != nil || !slices.Contains(refilled, other.Sandbox.ID) {
		t.Errorf("beta's alice gets %+v, %v; want an adopted pool sandbox", other, err)
	}
}

// BenchmarkIntegrationWarmAcquire measures a new user's first result with a
// warm pool: Acquire (a claim) plus a first command's round trip. The pool
// is refilled outside the timer.
func BenchmarkIntegrationWarmAcquire(b *testing.B) {
	c, img := realDocker(b)
	cfg := Config{Policy: core.Policy{Image: img, Runtime: os.Getenv("SANDBOX_RUNTIME"), WarmPool: 1}, StateDir: b.TempDir(), Logger: slog.New(slog.DiscardHandler)}
	m, err := newValidated(b.Context(), cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		m.Close()
		removeTestContainers(b, c, cfg.StateDir)
	}()
	b.StopTimer()
	for i := range b.N {
		awaitPoolWithin(b, m, 1, 2*time.Minute)
		b.StartTimer()
		res, err := m.Acquire(b.Context(), fmt.Sprintf("bench-%d", i), core.Options{})
		if err != nil {
			b.Fatal(err)
		}
		id, err := m.Submit(b.Context(), core.ExecRequest{SandboxID: res.Sandbox.ID, Code: "1 + 1"})
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Follow(b.Context(), res.Sandbox.ID, id, 0, func(core.Event) error { return nil }); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := m.Delete(b.Context(), res.Sandbox.ID); err != nil {
			b.Fatal(err)
		}
	}
}
