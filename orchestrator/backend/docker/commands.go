package docker

import (
	"context"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/cmdlog"
)

// Interactive commands: standard input and terminals for bash commands,
// and the listing of a sandbox's commands. The rules are cmdlog's, which
// the Kubernetes backend's io sidecar runs too; input travels as records
// in the command log and shares its bounds (cmdlog's input.go).

// SendStdin appends data for command commandID's standard input (see
// ioproto.MaxStdinChunk). The command must have been started with stdin or
// a pty and not be finished (ErrFailedPrecondition); unknown commands are
// ErrNotFound. Data that races with the command's end is dropped by the
// driver.
func (m *Manager) SendStdin(ctx context.Context, sandboxID, commandID string, data []byte) error {
	rec, err := cmdlog.StdinRecord(commandID, data)
	if err != nil {
		return err
	}
	return m.appendInput(ctx, sandboxID, commandID, rec)
}

// CloseStdin ends command commandID's standard input after the data sent
// before. Errors as SendStdin's.
func (m *Manager) CloseStdin(ctx context.Context, sandboxID, commandID string) error {
	return m.appendInput(ctx, sandboxID, commandID, cmdlog.CloseRecord(commandID))
}

// ResizePty resizes command commandID's terminal. The command must have
// been started with a pty and not be finished (ErrFailedPrecondition).
func (m *Manager) ResizePty(ctx context.Context, sandboxID, commandID string, size core.PtySize) error {
	return m.appendInput(ctx, sandboxID, commandID, cmdlog.ResizeRecord(commandID, size))
}

// appendInput appends rec once the command is found to take it
// (cmdlog.AppendInput).
func (m *Manager) appendInput(ctx context.Context, sandboxID, commandID string, rec ioproto.Record) error {
	sb, err := m.use(ctx, sandboxID)
	if err != nil {
		return err
	}
	err = cmdlog.AppendInput(ctx, sb.io, rec, func() error { return m.appendable(sb) })
	if err == nil {
		return nil
	}
	if ierr := cmdlog.InputError(sb.id, commandID, err); ierr != nil {
		return ierr
	}
	return m.appendError(sb, err)
}

// ListCommands lists a sandbox's commands, newest first, pageSize at a time
// (0: DefaultCommandPage; at most MaxCommandPage), by cmdlog's rules, which
// the Kubernetes backend's io sidecar applies too.
func (m *Manager) ListCommands(ctx context.Context, sandboxID string, pageSize int, pageToken string) (core.CommandPage, error) {
	page, err := cmdlog.ParsePage(pageSize, pageToken)
	if err != nil {
		return core.CommandPage{}, err
	}
	sb, err := m.use(ctx, sandboxID)
	if err != nil {
		return core.CommandPage{}, err
	}
	list, err := cmdlog.List(ctx, sb.io, page)
	if err != nil {
		return core.CommandPage{}, m.appendError(sb, err)
	}
	return list, nil
}
