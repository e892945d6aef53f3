package client

import (
	"context"
	"fmt"

	"google.golang.org/grpc"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// PtySize is a terminal's size in character cells (1-4096 each).
type PtySize struct {
	Rows, Cols uint32
}

// MaxStdinChunk is the most data one SendStdin call takes; Process.Write
// splits larger writes.
const MaxStdinChunk = 64 << 10

// commandIDHeader is the header sandboxd's Execute sends once the command
// is in the sandbox's log (grpcapi.CommandIDHeader).
const commandIDHeader = "sandboxd-command-id"

// Process is a command started with Start: its input can be written while
// its events are read with Wait.
type Process struct {
	c         *Client
	SandboxID string
	// ID is the command's ID (the caller's, or the one sandboxd chose).
	ID     string
	stream grpc.ServerStreamingClient[sandboxv1.ExecuteEvent]
	last   int64
}

// Start sends cmd and returns once sandboxd has queued it, so that
// SendStdin, CloseStdin and Resize may follow at once (sending input to a
// command not yet queued would be NOT_FOUND). Read its events with Wait;
// cancelling ctx abandons the stream, not the command. Set cmd.Stdin or
// cmd.Pty for a command that reads input.
func (c *Client) Start(ctx context.Context, cmd Command) (*Process, error) {
	s, err := c.api.Execute(ctx, cmd.request())
	if err != nil {
		return nil, fmt.Errorf("starting command: %w", fromGRPC(err))
	}
	md, err := s.Header()
	if err != nil {
		return nil, fmt.Errorf("starting command: %w", fromGRPC(err))
	}
	id := cmd.ID
	if v := md.Get(commandIDHeader); len(v) == 1 {
		id = v[0]
	}
	if id == "" {
		// An older sandboxd, or Execute failed: the error is the stream's.
		if _, err := s.Recv(); err != nil {
			return nil, fmt.Errorf("starting command: %w", fromGRPC(err))
		}
		return nil, fmt.Errorf("starting command: sandboxd did not say the command's ID; set Command.ID")
	}
	return &Process{c: c, SandboxID: cmd.SandboxID, ID: id, stream: s}, nil
}

// Wait reads the command's events until done, calling fn (if not nil) for
// each, and returns the outcome. A broken stream is returned as an error;
// Client.Run with resume continues such a command by ID.
func (p *Process) Wait(fn func(Event)) (*Outcome, error) {
	out := &Outcome{}
	if err := p.c.drain(p.stream, &p.last, out, fn); err != nil {
		return out, fmt.Errorf("command %s: %w", p.ID, fromGRPC(err))
	}
	return out, nil
}

// Write sends data to the command's input, in MaxStdinChunk calls of
// SendStdin (io.Writer).
func (p *Process) Write(data []byte) (int, error) {
	n := 0
	for len(data) > 0 {
		k := min(len(data), MaxStdinChunk)
		if err := p.c.SendStdin(context.Background(), p.SandboxID, p.ID, data[:k]); err != nil {
			return n, err
		}
		n += k
		data = data[k:]
	}
	return n, nil
}

// SendStdin sends data to the command's input.
func (p *Process) SendStdin(ctx context.Context, data []byte) error {
	return p.c.SendStdin(ctx, p.SandboxID, p.ID, data)
}

// CloseStdin ends the command's input.
func (p *Process) CloseStdin(ctx context.Context) error {
	return p.c.CloseStdin(ctx, p.SandboxID, p.ID)
}

// Resize changes the command's terminal size.
func (p *Process) Resize(ctx context.Context, size PtySize) error {
	return p.c.ResizePty(ctx, p.SandboxID, p.ID, size)
}

// SendStdin writes data (at most MaxStdinChunk bytes) to the input of a
// command started with Stdin or Pty. ErrNotFound for an unknown command;
// ErrFailedPrecondition for one started without input, or finished.
func (c *Client) SendStdin(ctx context.Context, sandboxID, commandID string, data []byte) error {
	_, err := c.api.SendStdin(ctx, &sandboxv1.SendStdinRequest{SandboxId: sandboxID, CommandId: commandID, Data: data})
	if err != nil {
		return fmt.Errorf("sending input to command %s: %w", commandID, fromGRPC(err))
	}
	return nil
}

// CloseStdin ends a command's input after the data sent before: EOF on a
// pipe, the EOF character (Ctrl-D) on a terminal. Errors as SendStdin's.
func (c *Client) CloseStdin(ctx context.Context, sandboxID, commandID string) error {
	_, err := c.api.CloseStdin(ctx, &sandboxv1.CloseStdinRequest{SandboxId: sandboxID, CommandId: commandID})
	if err != nil {
		return fmt.Errorf("closing the input of command %s: %w", commandID, fromGRPC(err))
	}
	return nil
}

// ResizePty changes the terminal size of a command started with Pty.
// ErrFailedPrecondition for a command without a terminal, or finished.
func (c *Client) ResizePty(ctx context.Context, sandboxID, commandID string, size PtySize) error {
	_, err := c.api.ResizePty(ctx, &sandboxv1.ResizePtyRequest{SandboxId: sandboxID, CommandId: commandID,
		Size: &sandboxv1.PtySize{Rows: size.Rows, Cols: size.Cols}})
	if err != nil {
		return fmt.Errorf("resizing the terminal of command %s: %w", commandID, fromGRPC(err))
	}
	return nil
}

// ListCommands returns one page of a sandbox's commands, newest first:
// pageSize 0 means sandboxd's default (50; at most 200), pageToken ""
// starts from the newest. next is "" on the last page.
func (c *Client) ListCommands(ctx context.Context, sandboxID string, pageSize int, pageToken string) (cmds []*sandboxv1.CommandInfo, next string, err error) {
	r, err := c.api.ListCommands(ctx, &sandboxv1.ListCommandsRequest{SandboxId: sandboxID, PageSize: int32(pageSize), PageToken: pageToken})
	if err != nil {
		return nil, "", fmt.Errorf("listing the commands of sandbox %s: %w", sandboxID, fromGRPC(err))
	}
	return r.GetCommands(), r.GetNextPageToken(), nil
}
