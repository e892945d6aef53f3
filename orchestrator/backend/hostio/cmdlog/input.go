package cmdlog

import (
	"context"
	"errors"
	"fmt"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/iolog"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Input travels as records in the command log (ioproto/PROTOCOL.md,
// "Standard input and terminals"), so it shares the log's bounds
// (iolog.MaxLogBytes): a 64 KiB chunk costs about 87 KiB of log, so a
// sandbox's log holds about 12,000 full chunks, and small keystrokes about
// 100 bytes each.

// Why a command refused input, as AppendInput says it. They carry no
// sandbox ID: the log's host may not know it (the io sidecar does not);
// InputError words them for the caller, on whichever side knows it.
var (
	// ErrNoTerminal: a resize for a command started without a pty.
	ErrNoTerminal = errors.New("the command has no terminal")
	// ErrNoInput: input for a command started without stdin or a pty.
	ErrNoInput = errors.New("the command's input is closed")
	// ErrFinished: input for a command that has finished.
	ErrFinished = errors.New("the command has finished")
)

// StdinRecord is SendStdin's record: data for command commandID, at most
// core.MaxStdinChunk bytes (more is INVALID_ARGUMENT, before any sandbox
// is looked at).
func StdinRecord(commandID string, data []byte) (ioproto.Record, error) {
	if len(data) > core.MaxStdinChunk {
		return ioproto.Record{}, core.Invalidf("stdin data is %d bytes; the limit is %d per call", len(data), core.MaxStdinChunk)
	}
	return ioproto.StdinRecord(commandID, data), nil
}

// CloseRecord is CloseStdin's record: end of input after what was sent.
func CloseRecord(commandID string) ioproto.Record {
	return ioproto.Record{Type: ioproto.KindStdinClose, CommandID: commandID}
}

// ResizeRecord is ResizePty's record.
func ResizeRecord(commandID string, size core.PtySize) ioproto.Record {
	return ioproto.Record{Type: ioproto.KindResize, CommandID: commandID, Pty: ioproto.PtySize{Rows: int(size.Rows), Cols: int(size.Cols)}}
}

// IsInput reports whether rec acts on a command's input, and so must pass
// AppendInput's checks.
func IsInput(rec ioproto.Record) bool {
	switch rec.Type {
	case ioproto.KindStdin, ioproto.KindStdinClose, ioproto.KindResize:
		return true
	}
	return false
}

// AppendInput appends input record rec (IsInput) to d once its command
// is found to take it: the command is in the log (else
// iolog.ErrUnknownCommand), was started with stdin or a pty (ErrNoInput),
// with a pty for a resize (ErrNoTerminal), and has not finished
// (ErrFinished). appendable is iolog.Dir.AppendContext's check (nil: none).
// Data that races with the command's end is dropped by the driver. Other
// errors are iolog's, as they are.
func AppendInput(ctx context.Context, d *iolog.Dir, rec ioproto.Record, appendable func() error) error {
	if !IsInput(rec) {
		return fmt.Errorf("%w: a %q record is not input", ioproto.ErrMalformed, rec.Type)
	}
	e, ok, err := d.Command(ctx, rec.CommandID)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("command %s: %w", rec.CommandID, iolog.ErrUnknownCommand)
	}
	switch {
	case rec.Type == ioproto.KindResize && !e.Pty:
		return fmt.Errorf("command %s: %w", rec.CommandID, ErrNoTerminal)
	case !e.Stdin:
		return fmt.Errorf("command %s: %w", rec.CommandID, ErrNoInput)
	}
	prog, err := d.Progress(ctx, []iolog.CommandEntry{e})
	if err != nil {
		return err
	}
	if prog[0].Phase == iolog.PhaseFinished {
		return fmt.Errorf("command %s: %w", rec.CommandID, ErrFinished)
	}
	_, err = d.AppendContext(ctx, rec, appendable)
	return err
}

// InputError words AppendInput's refusals for command commandID of
// sandbox sandboxID as both backends answer them; nil for any other
// error, which stays its backend's to say.
func InputError(sandboxID, commandID string, err error) error {
	switch {
	case errors.Is(err, ErrNoTerminal):
		return core.Preconditionf("command %s in sandbox %s was not started with a terminal (ExecuteRequest.pty); it cannot be resized", commandID, sandboxID)
	case errors.Is(err, ErrNoInput):
		return core.Preconditionf("command %s in sandbox %s was not started with stdin (ExecuteRequest.stdin or pty); its input is closed", commandID, sandboxID)
	case errors.Is(err, ErrFinished):
		return core.Preconditionf("command %s in sandbox %s has finished; it takes no more input", commandID, sandboxID)
	case errors.Is(err, iolog.ErrUnknownCommand):
		return core.CommandNotFound(commandID, sandboxID)
	}
	return nil
}
