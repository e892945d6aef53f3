package docker

import (
	"cmp"
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/ioproto"
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
// (0: DefaultCommandPage; at most MaxCommandPage). pageToken is a previous
// page's NextPageToken: the log position to continue below, which stays
// valid because the log only grows. Each listed command costs a bounded
// read of its events file's head and tail (iolog.Progress).
func (m *Manager) ListCommands(ctx context.Context, sandboxID string, pageSize int, pageToken string) (core.CommandPage, error) {
	switch {
	case pageSize < 0 || pageSize > core.MaxCommandPage:
		return core.CommandPage{}, core.Invalidf("page_size %d is outside 0-%d", pageSize, core.MaxCommandPage)
	case pageSize == 0:
		pageSize = core.DefaultCommandPage
	}
	before := 0
	if pageToken != "" {
		n, err := strconv.Atoi(pageToken)
		if err != nil || n < 1 || n > iolog.MaxLogRecords {
			return core.CommandPage{}, core.Invalidf("page_token %q is not one this server made", core.Truncate(pageToken, 32))
		}
		before = n
	}
	sb, err := m.use(ctx, sandboxID)
	if err != nil {
		return core.CommandPage{}, err
	}
	entries, total, err := sb.io.Commands(ctx, before, pageSize)
	if err != nil {
		return core.CommandPage{}, m.appendError(sb, err)
	}
	prog, err := sb.io.Progress(ctx, entries)
	if err != nil {
		return core.CommandPage{}, m.appendError(sb, err)
	}
	page := core.CommandPage{Total: total, Commands: make([]core.CommandInfo, len(entries))}
	for i, e := range entries {
		p := prog[i]
		info := core.CommandInfo{ID: e.ID, Language: e.Language, ContextID: cmp.Or(e.ContextID, ioproto.DefaultContext), Phase: core.CommandPhase(p.Phase), StartedAt: p.StartedAt,
			OutputAvailable: p.OutputAvailable, Stdin: e.Stdin, Pty: e.Pty}
		if d := p.Done; d != nil {
			info.Status, info.FinishedAt, info.ExitCode = d.Status, d.Time, d.ExitCode
			info.Duration = time.Duration(max(d.DurationMS, 0)) * time.Millisecond
		}
		page.Commands[i] = info
	}
	if n := len(entries); n > 0 && entries[n-1].Index > 0 {
		page.NextPageToken = strconv.Itoa(entries[n-1].Index)
	}
	return page, nil
}
