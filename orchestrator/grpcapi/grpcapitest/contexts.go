package grpcapitest

import (
	"context"

	"github.com/sandboxd/sandboxd/orchestrator"
)

// CreateContext calls CreateContextFunc.
func (m *Manager) CreateContext(ctx context.Context, sandboxID, language, cwd string) (orchestrator.ContextInfo, error) {
	if err := m.record("CreateContext", orchestrator.ValidateSandboxID(sandboxID)); err != nil {
		return orchestrator.ContextInfo{}, err
	}
	if m.CreateContextFunc == nil {
		return orchestrator.ContextInfo{}, ErrNotScripted
	}
	return m.CreateContextFunc(ctx, sandboxID, language, cwd)
}

// ListContexts calls ListContextsFunc.
func (m *Manager) ListContexts(ctx context.Context, sandboxID string) ([]orchestrator.ContextInfo, error) {
	if err := m.record("ListContexts", orchestrator.ValidateSandboxID(sandboxID)); err != nil {
		return nil, err
	}
	if m.ListContextsFunc == nil {
		return nil, ErrNotScripted
	}
	return m.ListContextsFunc(ctx, sandboxID)
}

// RestartContext calls RestartContextFunc.
func (m *Manager) RestartContext(ctx context.Context, sandboxID, contextID string) error {
	if err := m.record("RestartContext", orchestrator.ValidateSandboxID(sandboxID)); err != nil {
		return err
	}
	if m.RestartContextFunc == nil {
		return ErrNotScripted
	}
	return m.RestartContextFunc(ctx, sandboxID, contextID)
}

// DeleteContext calls DeleteContextFunc.
func (m *Manager) DeleteContext(ctx context.Context, sandboxID, contextID string) error {
	if err := m.record("DeleteContext", orchestrator.ValidateSandboxID(sandboxID)); err != nil {
		return err
	}
	if m.DeleteContextFunc == nil {
		return ErrNotScripted
	}
	return m.DeleteContextFunc(ctx, sandboxID, contextID)
}
