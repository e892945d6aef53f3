package grpcapitest

import (
	"context"

	"github.com/sandboxd/sandboxd/orchestrator"
)

// Hibernate calls HibernateFunc; only the ID is validated.
func (m *Manager) Hibernate(ctx context.Context, sandboxID string) (orchestrator.Sandbox, error) {
	if err := m.record("Hibernate", orchestrator.ValidateSandboxID(sandboxID)); err != nil {
		return orchestrator.Sandbox{}, err
	}
	if m.HibernateFunc == nil {
		return orchestrator.Sandbox{}, ErrNotScripted
	}
	return m.HibernateFunc(ctx, sandboxID)
}

// Wake calls WakeFunc; only the ID is validated.
func (m *Manager) Wake(ctx context.Context, sandboxID string) (orchestrator.Sandbox, *orchestrator.WakeInfo, error) {
	if err := m.record("Wake", orchestrator.ValidateSandboxID(sandboxID)); err != nil {
		return orchestrator.Sandbox{}, nil, err
	}
	if m.WakeFunc == nil {
		return orchestrator.Sandbox{}, nil, ErrNotScripted
	}
	return m.WakeFunc(ctx, sandboxID)
}
