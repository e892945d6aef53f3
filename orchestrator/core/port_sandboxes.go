package core

import (
	"context"
	"time"
)

// Sandboxes is the sandboxes' lifecycle: every backend has it. A sandbox
// is one user's, found by its ID within the caller's tenant. Hibernation
// (Hibernate, Wake, Options.OnIdle) may still be Unsupported where a
// backend's configuration cannot keep a sandbox's state while it does not
// run.
type Sandboxes interface {
	// Acquire returns the user's current sandbox, creating one (or waking
	// a hibernated one) if needed; concurrent calls for one user yield one
	// sandbox. opts apply only to a new sandbox.
	Acquire(ctx context.Context, userID string, opts Options) (AcquireResult, error)

	Get(ctx context.Context, sandboxID string) (Sandbox, error)
	List(ctx context.Context, f ListFilter) ([]Sandbox, error)
	Delete(ctx context.Context, sandboxID string) error

	// SetTimeout sets a sandbox's own idle TTL, counted from now.
	SetTimeout(ctx context.Context, sandboxID string, d time.Duration) (Sandbox, error)

	Hibernate(ctx context.Context, sandboxID string) (Sandbox, error)
	Wake(ctx context.Context, sandboxID string) (Sandbox, *WakeInfo, error)
}
