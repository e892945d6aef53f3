package docker

import (
	"context"
	"errors"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/cmdlog"
	"github.com/sandboxd/sandboxd/orchestrator/iolog"
)

// Interactive commands: standard input and terminals for bash commands,
// and the listing of a sandbox's commands. Input travels as records in the
// command log (ioproto/PROTOCOL.md, "Standard input and terminals"), so it
// shares the log's bounds (iolog.MaxLogBytes): a 64 KiB chunk costs about
// 87 KiB of log, so a sandbox's log holds about 12,000 full chunks, and
// small keystrokes about 100 bytes each.

// SendStdin appends data for command commandID's standard input (see
// ioproto.MaxStdinChunk). The command must have been started with stdin or
// a pty and not be finished (ErrFailedPrecondition); unknown commands are
// ErrNotFound. Data that races with the command's end is dropped by the
// driver.
func (m *Manager) SendStdin(ctx context.Context, sandboxID, commandID string, data []byte) error {
	if len(data) > core.MaxStdinChunk {
		return core.Invalidf("stdin data is %d bytes; the limit is %d per call", len(data), core.MaxStdinChunk)
	}
	return m.appendInput(ctx, sandboxID, commandID, false, ioproto.StdinRecord(commandID, data))
}

// CloseStdin ends command commandID's standard input after the data sent
// before. Errors as SendStdin's.
func (m *Manager) CloseStdin(ctx context.Context, sandboxID, commandID string) error {
	return m.appendInput(ctx, sandboxID, commandID, false, ioproto.Record{Type: ioproto.KindStdinClose, CommandID: commandID})
}

// ResizePty resizes command commandID's terminal. The command must have
// been started with a pty and not be finished (ErrFailedPrecondition).
func (m *Manager) ResizePty(ctx context.Context, sandboxID, commandID string, size core.PtySize) error {
	rec := ioproto.Record{Type: ioproto.KindResize, CommandID: commandID, Pty: ioproto.PtySize{Rows: int(size.Rows), Cols: int(size.Cols)}}
	return m.appendInput(ctx, sandboxID, commandID, true, rec)
}

// appendInput checks that the command takes input (a terminal, if pty)
// and is not finished, and appends rec.
func (m *Manager) appendInput(ctx context.Context, sandboxID, commandID string, pty bool, rec ioproto.Record) error {
	sb, err := m.use(ctx, sandboxID)
	if err != nil {
		return err
	}
	e, ok, err := sb.io.Command(ctx, commandID)
	if err != nil {
		return m.appendError(sb, err)
	}
	if !ok {
		return core.CommandNotFound(commandID, sb.id)
	}
	switch {
	case pty && !e.Pty:
		return core.Preconditionf("command %s in sandbox %s was not started with a terminal (ExecuteRequest.pty); it cannot be resized", commandID, sb.id)
	case !e.Stdin:
		return core.Preconditionf("command %s in sandbox %s was not started with stdin (ExecuteRequest.stdin or pty); its input is closed", commandID, sb.id)
	}
	prog, err := sb.io.Progress(ctx, []iolog.CommandEntry{e})
	if err != nil {
		return m.appendError(sb, err)
	}
	if prog[0].Phase == iolog.PhaseFinished {
		return core.Preconditionf("command %s in sandbox %s has finished; it takes no more input", commandID, sb.id)
	}
	_, err = sb.io.AppendContext(ctx, rec, func() error { return m.appendable(sb) })
	if errors.Is(err, iolog.ErrUnknownCommand) {
		return core.CommandNotFound(commandID, sb.id)
	}
	if err != nil {
		return m.appendError(sb, err)
	}
	return nil
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
