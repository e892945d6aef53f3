package core_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
)

// TestValidatingSnapshotsAndForks: the shape of snapshot and fork requests
// is checked once, in front of every backend; nothing malformed reaches
// it, and a fork's options are resolved as an acquire's are.
func TestValidatingSnapshotsAndForks(t *testing.T) {
	var forks []core.ForkRequest
	fake := &coretest.Manager{
		CreateSnapshotFunc: func(context.Context, string, string) (core.Snapshot, error) { return core.Snapshot{}, nil },
		DeleteSnapshotFunc: func(context.Context, string) error { return nil },
		ListSnapshotsFunc:  func(context.Context, core.SnapshotFilter) ([]core.Snapshot, error) { return nil, nil },
		ForkFunc: func(_ context.Context, _ string, r core.ForkRequest) ([]core.ForkResult, error) {
			forks = append(forks, r)
			return nil, nil
		},
		AcquireFunc: func(context.Context, string, core.Options) (core.AcquireResult, error) {
			return core.AcquireResult{}, nil
		},
	}
	m := core.Validating(fake, core.DefaultPolicy())
	ctx := core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
	for _, name := range []string{"", "before-refactor", "v1.2_final"} {
		if _, err := m.CreateSnapshot(ctx, sb, name); err != nil {
			t.Errorf("CreateSnapshot(name %q): %v", name, err)
		}
	}
	if _, err := m.ListSnapshots(ctx, core.SnapshotFilter{Tenant: "acme"}); err != nil {
		t.Errorf("listing one's own tenant: %v", err)
	}
	if err := m.DeleteSnapshot(ctx, "snap-aaaaaaaaaaaaaaaaaaaa"); err != nil {
		t.Errorf("DeleteSnapshot by ID: %v", err)
	}
	if _, err := m.Fork(ctx, sb, core.ForkRequest{Count: 2, UserIDs: []string{"a", "b"}, Options: &core.Options{}}); err != nil {
		t.Errorf("Fork: %v", err)
	}
	if len(forks) != 1 || forks[0].Options.Limits.MemoryBytes == 0 {
		t.Errorf("a fork's options reached the backend unresolved: %+v", forks)
	}
	before := len(fake.Calls())
	for name, err := range map[string]error{
		"name with a space":        func() error { _, err := m.CreateSnapshot(ctx, sb, "a b"); return err }(),
		"name too long":            func() error { _, err := m.CreateSnapshot(ctx, sb, strings.Repeat("n", 65)); return err }(),
		"bad sandbox":              func() error { _, err := m.CreateSnapshot(ctx, "nope", ""); return err }(),
		"empty ref":                m.DeleteSnapshot(ctx, ""),
		"another tenant's listing": func() error { _, err := m.ListSnapshots(ctx, core.SnapshotFilter{Tenant: "beta"}); return err }(),
		"zero forks":               func() error { _, err := m.Fork(ctx, sb, core.ForkRequest{}); return err }(),
		"21 forks":                 func() error { _, err := m.Fork(ctx, sb, core.ForkRequest{Count: 21}); return err }(),
		"users not one per fork": func() error {
			_, err := m.Fork(ctx, sb, core.ForkRequest{Count: 3, UserIDs: []string{"a"}})
			return err
		}(),
		"a user twice": func() error {
			_, err := m.Fork(ctx, sb, core.ForkRequest{Count: 2, UserIDs: []string{"a", "a"}})
			return err
		}(),
		"a fork from a snapshot": func() error {
			_, err := m.Fork(ctx, sb, core.ForkRequest{Count: 1, Options: &core.Options{FromSnapshot: "x"}})
			return err
		}(),
		"acquire from a bad ref": func() error { _, err := m.Acquire(ctx, "u", core.Options{FromSnapshot: "a/b"}); return err }(),
	} {
		if !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("%s: %v; want INVALID_ARGUMENT", name, err)
		}
	}
	if n := len(fake.Calls()) - before; n != 0 {
		t.Errorf("%d malformed requests reached the backend", n)
	}
}
