package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// Command is one command to run in a sandbox.
type Command struct {
	// SandboxID is the sandbox to run in.
	SandboxID string
	// ID is the command's idempotency key, chosen (and stored) by the caller
	// before the command is sent, so that after a crash the same ID resumes
	// the command instead of running it again. Empty lets sandboxd choose
	// one (Event.CommandID), which Run cannot resume. The same ID with
	// another Code, Language, Env or ContextID is refused with
	// ErrAlreadyExists (naming the command) rather than replayed.
	ID string
	// Language is one of the Language constants (python, bash, javascript,
	// typescript, r); empty means python.
	Language string
	// Code is the source.
	Code string
	// Timeout is the command's limit; 0 means sandboxd's default.
	Timeout time.Duration
	// Stdin keeps a bash command's input open for Process.SendStdin
	// (processes.go); without it the command reads EOF at once.
	Stdin bool
	// Pty, when set, runs a bash command on a terminal of that size.
	Pty *PtySize
	// Env sets environment variables for this command only, overriding the
	// sandbox's while it runs (at most 256 variables, 128 KiB in all).
	Env map[string]string
	// ContextID selects the context to run in (CreateContext); empty
	// means the sandbox's default context.
	ContextID string
}

func (cmd Command) request() *sandboxv1.ExecuteRequest {
	req := &sandboxv1.ExecuteRequest{SandboxId: cmd.SandboxID, CommandId: cmd.ID, Language: cmd.Language, Code: cmd.Code, Env: cmd.Env, ContextId: cmd.ContextID}
	if cmd.Timeout > 0 {
		req.Timeout = durationpb.New(cmd.Timeout)
	}
	req.Stdin = cmd.Stdin
	if cmd.Pty != nil {
		req.Pty = &sandboxv1.PtySize{Rows: cmd.Pty.Rows, Cols: cmd.Pty.Cols}
	}
	return req
}

// Run sends cmd and calls fn (if not nil) for each of its events, in order
// and without duplicates, until the command is done; it returns the
// collected outcome.
//
// With resume, the command may already have been sent (by an earlier process
// that crashed): its stream is resumed by ID with StreamCommand, and the
// command is sent only if sandboxd has never seen it. Either way it never
// runs twice. A stream broken by a dropped connection or a sandboxd restart
// is resumed after the last event received, for up to two minutes.
//
// Errors wrap ErrGone when the sandbox was removed or died, and
// ErrCommandLost when the output was pruned; on such errors the outcome
// holds what arrived before.
func (c *Client) Run(ctx context.Context, cmd Command, resume bool, fn func(Event)) (*Outcome, error) {
	out := &Outcome{}
	var last int64          // the last event received
	execute := !resume      // the next attempt sends Execute, not StreamCommand
	retriedExecute := false // Execute was sent because sandboxd did not know the command
	var deadline time.Time
	backoff := 100 * time.Millisecond
	for {
		var stream grpc.ServerStreamingClient[sandboxv1.ExecuteEvent]
		var err error
		sent := execute
		if execute {
			stream, err = c.api.Execute(ctx, cmd.request())
		} else {
			stream, err = c.api.StreamCommand(ctx, &sandboxv1.StreamCommandRequest{SandboxId: cmd.SandboxID, CommandId: cmd.ID, AfterSeq: last})
		}
		execute = false
		if err == nil {
			if err = c.drain(stream, &last, out, fn); err == nil {
				return out, nil
			}
		}
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		switch status.Code(err) {
		case codes.NotFound:
			// The sandbox, or the command, is unknown. Which one?
			if cerr := c.Check(ctx, cmd.SandboxID); cerr != nil {
				return out, cerr
			}
			if sent && cmd.ContextID != "" {
				// Execute itself refused: the context does not exist.
				return out, fmt.Errorf("command %s: %w", cmd.ID, fromGRPC(err))
			}
			if last == 0 && !retriedExecute {
				// The command never reached sandboxd (a crash or a broken
				// connection came first): send it. Execute is idempotent by
				// command ID, so this is safe even if it did arrive meanwhile.
				retriedExecute, execute = true, true
				continue
			}
			return out, fmt.Errorf("%w: command %s in sandbox %s: %v", ErrCommandLost, cmd.ID, cmd.SandboxID, fromGRPC(err))
		case codes.FailedPrecondition:
			if cerr := c.Check(ctx, cmd.SandboxID); errors.Is(cerr, ErrGone) {
				return out, cerr
			}
			return out, fmt.Errorf("command %s: %w", cmd.ID, fromGRPC(err))
		case codes.Unavailable, codes.Aborted:
			// sandboxd restarting, or a broken connection: resume after the
			// last event received, for a while.
			if deadline.IsZero() {
				deadline = time.Now().Add(c.retryFor)
			}
			if time.Now().After(deadline) {
				return out, fmt.Errorf("command %s: sandboxd unreachable for %v: %w", cmd.ID, c.retryFor, fromGRPC(err))
			}
			select {
			case <-ctx.Done():
				return out, ctx.Err()
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
		default:
			return out, fmt.Errorf("command %s: %w", cmd.ID, fromGRPC(err))
		}
	}
}

// errNoDone is a stream that ended without its done event.
var errNoDone = status.Error(codes.Unavailable, "stream ended before the command's done event")

// drain reads a stream until done, skipping events at or before *last.
func (c *Client) drain(stream grpc.ServerStreamingClient[sandboxv1.ExecuteEvent], last *int64, out *Outcome, fn func(Event)) error {
	for {
		pe, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return errNoDone
		}
		if err != nil {
			return err
		}
		if pe.GetSeq() <= *last {
			continue
		}
		*last = pe.GetSeq()
		ev, ok := fromProto(pe)
		if !ok {
			continue
		}
		out.add(ev)
		if fn != nil {
			fn(ev)
		}
		if ev.Kind == KindDone {
			return nil
		}
	}
}

// Stream is one command's events as they arrive, without Run's resumption:
// for callers that show a stream as it is and let a person decide what to
// do when it breaks (sandboxctl), or that measure it (sandbox-bench).
type Stream struct {
	s grpc.ServerStreamingClient[sandboxv1.ExecuteEvent]
}

// Recv returns the next event; io.EOF after the last one (normally the done
// event). Event kinds this client does not know (from a newer sandboxd) are
// skipped. Cancel the context the stream was opened with to abandon it.
func (s *Stream) Recv() (Event, error) {
	for {
		pe, err := s.s.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return Event{}, io.EOF
			}
			return Event{}, fromGRPC(err)
		}
		if ev, ok := fromProto(pe); ok {
			return ev, nil
		}
	}
}

// Execute sends cmd once and returns its stream. Like sandboxd's Execute it
// is idempotent by cmd.ID: a known ID with the same request runs nothing
// and replays that command's events; a known ID with a different request
// fails with ErrAlreadyExists (on the stream's first Recv). Ending the
// stream early does not stop the command.
func (c *Client) Execute(ctx context.Context, cmd Command) (*Stream, error) {
	s, err := c.api.Execute(ctx, cmd.request())
	if err != nil {
		return nil, fromGRPC(err)
	}
	return &Stream{s: s}, nil
}

// StreamCommand follows a command that was sent earlier, from the event
// after afterSeq (0: from the start), until it is done. ErrNotFound (from
// Recv) when the command is unknown or its output was pruned.
func (c *Client) StreamCommand(ctx context.Context, sandboxID, commandID string, afterSeq int64) (*Stream, error) {
	s, err := c.api.StreamCommand(ctx, &sandboxv1.StreamCommandRequest{SandboxId: sandboxID, CommandId: commandID, AfterSeq: afterSeq})
	if err != nil {
		return nil, fromGRPC(err)
	}
	return &Stream{s: s}, nil
}

// Interrupt asks sandboxd to interrupt a command, like Ctrl-C: Python gets
// KeyboardInterrupt and keeps its variables; a command that ignores it is
// killed 2 seconds later. The outcome arrives on the command's stream.
// Interrupting a finished command succeeds and does nothing.
func (c *Client) Interrupt(ctx context.Context, sandboxID, commandID string) error {
	_, err := c.api.InterruptCommand(ctx, &sandboxv1.InterruptCommandRequest{SandboxId: sandboxID, CommandId: commandID})
	if err != nil {
		return fmt.Errorf("interrupting command %s: %w", commandID, fromGRPC(err))
	}
	return nil
}
