package grpcapitest

import (
	"context"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// SetTimeout calls SetTimeoutFunc. The timeout's bounds depend on the
// server's configuration, which the fake does not have: only the ID is
// validated.
func (m *Manager) SetTimeout(ctx context.Context, sandboxID string, d time.Duration) (core.Sandbox, error) {
	if err := m.record("SetTimeout", core.ValidateSandboxID(sandboxID)); err != nil {
		return core.Sandbox{}, err
	}
	if m.SetTimeoutFunc == nil {
		return core.Sandbox{}, ErrNotScripted
	}
	return m.SetTimeoutFunc(ctx, sandboxID, d)
}
