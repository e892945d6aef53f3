package grpcapitest

import (
	"context"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// CreateContext calls CreateContextFunc.
func (m *Manager) CreateContext(ctx context.Context, sandboxID, language, cwd string) (core.ContextInfo, error) {
	if err := m.record("CreateContext", core.ValidateSandboxID(sandboxID)); err != nil {
		return core.ContextInfo{}, err
	}
	if m.CreateContextFunc == nil {
		return core.ContextInfo{}, ErrNotScripted
	}
	return m.CreateContextFunc(ctx, sandboxID, language, cwd)
}

// ListContexts calls ListContextsFunc.
func (m *Manager) ListContexts(ctx context.Context, sandboxID string) ([]core.ContextInfo, error) {
	if err := m.record("ListContexts", core.ValidateSandboxID(sandboxID)); err != nil {
		return nil, err
	}
	if m.ListContextsFunc == nil {
		return nil, ErrNotScripted
	}
	return m.ListContextsFunc(ctx, sandboxID)
}

// RestartContext calls RestartContextFunc.
func (m *Manager) RestartContext(ctx context.Context, sandboxID, contextID string) error {
	if err := m.record("RestartContext", core.ValidateSandboxID(sandboxID)); err != nil {
		return err
	}
	if m.RestartContextFunc == nil {
		return ErrNotScripted
	}
	return m.RestartContextFunc(ctx, sandboxID, contextID)
}

// DeleteContext calls DeleteContextFunc.
func (m *Manager) DeleteContext(ctx context.Context, sandboxID, contextID string) error {
	if err := m.record("DeleteContext", core.ValidateSandboxID(sandboxID)); err != nil {
		return err
	}
	if m.DeleteContextFunc == nil {
		return ErrNotScripted
	}
	return m.DeleteContextFunc(ctx, sandboxID, contextID)
}
