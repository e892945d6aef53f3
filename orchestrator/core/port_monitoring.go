package core

import (
	"context"
	"time"
)

// Monitoring is the samples of each sandbox's resource use, as
// GetSandboxMetrics, sandboxctl top and the E2B door's getMetrics show
// them.
type Monitoring interface {
	// SandboxMetrics returns the samples of the sandbox's resource use
	// taken after since, oldest first: those of the last minutes while it
	// runs, only its last one once it is hibernated or dead. It neither
	// wakes a hibernated sandbox nor counts as a use.
	SandboxMetrics(ctx context.Context, sandboxID string, since time.Time) ([]SandboxMetrics, error)
}
