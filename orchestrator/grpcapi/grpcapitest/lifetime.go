package grpcapitest

import (
	"context"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator"
)

// SetTimeout calls SetTimeoutFunc. The timeout's bounds depend on the
// server's configuration, which the fake does not have: only the ID is
// validated.
func (m *Manager) SetTimeout(ctx context.Context, sandboxID string, d time.Duration) (orchestrator.Sandbox, error) {
	if err := m.record("SetTimeout", orchestrator.ValidateSandboxID(sandboxID)); err != nil {
		return orchestrator.Sandbox{}, err
	}
	if m.SetTimeoutFunc == nil {
		return orchestrator.Sandbox{}, ErrNotScripted
	}
	return m.SetTimeoutFunc(ctx, sandboxID, d)
}
