package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// Stateless is code to run once with RunStateless.
type Stateless struct {
	// Language is one of the Language constants; empty means python.
	Language string
	// Code is the source.
	Code string
	// Timeout is the command's limit; 0 means sandboxd's default.
	Timeout time.Duration
}

// RunStateless runs run.Code once in a sandbox of its own, made with opts
// (from sandboxd's warm pool, shaped to them, when it can) and deleted when
// the command is done or ctx ends: no user and no state are involved. It
// calls fn (if not nil) for each event, in order, and returns the collected
// outcome. Nothing is kept, so a broken stream cannot be resumed: the error
// says so, and the outcome holds what arrived before.
func (c *Client) RunStateless(ctx context.Context, run Stateless, fn func(Event), opts ...AcquireOption) (*Outcome, error) {
	req := &sandboxv1.RunStatelessRequest{Language: run.Language, Code: run.Code}
	if run.Timeout > 0 {
		req.Timeout = durationpb.New(run.Timeout)
	}
	if len(opts) > 0 {
		req.Options = &sandboxv1.SandboxOptions{}
		for _, opt := range opts {
			opt(req.Options)
		}
	}
	out := &Outcome{}
	stream, err := c.api.RunStateless(ctx, req)
	if err != nil {
		return out, fmt.Errorf("stateless run: %w", fromGRPC(err))
	}
	var last int64
	if err := c.drain(stream, &last, out, fn); err != nil {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		if errors.Is(err, errNoDone) {
			return out, fmt.Errorf("stateless run: the stream ended before the command did (its sandbox is gone: nothing to resume)")
		}
		return out, fmt.Errorf("stateless run: %w", fromGRPC(err))
	}
	return out, nil
}
