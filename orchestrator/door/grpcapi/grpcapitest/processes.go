package grpcapitest

import (
	"context"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// ProcessManager is Manager with the interactive-command calls
// (grpcapi.ProcessManager) scripted too. A plain Manager lacks them, and
// the API answers them UNIMPLEMENTED.
type ProcessManager struct {
	*Manager
	SendStdinFunc    func(ctx context.Context, sandboxID, commandID string, data []byte) error
	CloseStdinFunc   func(ctx context.Context, sandboxID, commandID string) error
	ResizePtyFunc    func(ctx context.Context, sandboxID, commandID string, size core.PtySize) error
	ListCommandsFunc func(ctx context.Context, sandboxID string, pageSize int, pageToken string) (core.CommandPage, error)
}

// SendStdin calls SendStdinFunc.
func (m *ProcessManager) SendStdin(ctx context.Context, sandboxID, commandID string, data []byte) error {
	if err := m.record("SendStdin", commandIDs(sandboxID, commandID)); err != nil {
		return err
	}
	if m.SendStdinFunc == nil {
		return ErrNotScripted
	}
	return m.SendStdinFunc(ctx, sandboxID, commandID, data)
}

// CloseStdin calls CloseStdinFunc.
func (m *ProcessManager) CloseStdin(ctx context.Context, sandboxID, commandID string) error {
	if err := m.record("CloseStdin", commandIDs(sandboxID, commandID)); err != nil {
		return err
	}
	if m.CloseStdinFunc == nil {
		return ErrNotScripted
	}
	return m.CloseStdinFunc(ctx, sandboxID, commandID)
}

// ResizePty calls ResizePtyFunc.
func (m *ProcessManager) ResizePty(ctx context.Context, sandboxID, commandID string, size core.PtySize) error {
	if err := m.record("ResizePty", commandIDs(sandboxID, commandID)); err != nil {
		return err
	}
	if m.ResizePtyFunc == nil {
		return ErrNotScripted
	}
	return m.ResizePtyFunc(ctx, sandboxID, commandID, size)
}

// ListCommands calls ListCommandsFunc.
func (m *ProcessManager) ListCommands(ctx context.Context, sandboxID string, pageSize int, pageToken string) (core.CommandPage, error) {
	if err := m.record("ListCommands", core.ValidateSandboxID(sandboxID)); err != nil {
		return core.CommandPage{}, err
	}
	if m.ListCommandsFunc == nil {
		return core.CommandPage{}, ErrNotScripted
	}
	return m.ListCommandsFunc(ctx, sandboxID, pageSize, pageToken)
}
