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
	// the command instead of running it again.
	ID string
	// Language is "python" or "bash".
	Language string
	// Code is the source.
	Code string
	// Timeout is the command's limit; 0 means sandboxd's default.
	Timeout time.Duration
}

// Run sends cmd and calls fn for each of its events, in order and without
// duplicates, until the command is done; it returns the collected outcome.
//
// With resume, the command may already have been sent (by an earlier process
// that crashed): its stream is resumed by ID with StreamCommand, and the
// command is sent only if sandboxd has never seen it. Either way it never
// runs twice. A stream broken by a sandboxd restart is resumed after the
// last event received.
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
		if execute {
			req := &sandboxv1.ExecuteRequest{SandboxId: cmd.SandboxID, CommandId: cmd.ID, Language: cmd.Language, Code: cmd.Code}
			if cmd.Timeout > 0 {
				req.Timeout = durationpb.New(cmd.Timeout)
			}
			stream, err = c.api.Execute(ctx, req)
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
			if last == 0 && !retriedExecute {
				// The command never reached sandboxd (a crash or a broken
				// connection came first): send it. Execute is idempotent by
				// command ID, so this is safe even if it did arrive meanwhile.
				retriedExecute, execute = true, true
				continue
			}
			return out, fmt.Errorf("%w: command %s in sandbox %s: %v", ErrCommandLost, cmd.ID, cmd.SandboxID, rpcError(err))
		case codes.FailedPrecondition:
			if cerr := c.Check(ctx, cmd.SandboxID); errors.Is(cerr, ErrGone) {
				return out, cerr
			}
			return out, fmt.Errorf("command %s: %w", cmd.ID, rpcError(err))
		case codes.Unavailable, codes.Aborted:
			// sandboxd restarting, or a broken connection: resume after the
			// last event received, for a while.
			if deadline.IsZero() {
				deadline = time.Now().Add(c.retryFor)
			}
			if time.Now().After(deadline) {
				return out, fmt.Errorf("command %s: sandboxd unreachable for %v: %w", cmd.ID, c.retryFor, rpcError(err))
			}
			select {
			case <-ctx.Done():
				return out, ctx.Err()
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
		default:
			return out, fmt.Errorf("command %s: %w", cmd.ID, rpcError(err))
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
