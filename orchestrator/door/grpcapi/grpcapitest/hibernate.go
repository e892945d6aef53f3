package grpcapitest

import (
	"context"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Hibernate calls HibernateFunc; only the ID is validated.
func (m *Manager) Hibernate(ctx context.Context, sandboxID string) (core.Sandbox, error) {
	if err := m.record("Hibernate", core.ValidateSandboxID(sandboxID)); err != nil {
		return core.Sandbox{}, err
	}
	if m.HibernateFunc == nil {
		return core.Sandbox{}, ErrNotScripted
	}
	return m.HibernateFunc(ctx, sandboxID)
}

// Wake calls WakeFunc; only the ID is validated.
func (m *Manager) Wake(ctx context.Context, sandboxID string) (core.Sandbox, *core.WakeInfo, error) {
	if err := m.record("Wake", core.ValidateSandboxID(sandboxID)); err != nil {
		return core.Sandbox{}, nil, err
	}
	if m.WakeFunc == nil {
		return core.Sandbox{}, nil, ErrNotScripted
	}
	return m.WakeFunc(ctx, sandboxID)
}
