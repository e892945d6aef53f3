// Package client is the Go client of sandboxd: it acquires a user's
// sandbox, checks that a remembered sandbox still exists, and runs commands
// with crash-safe resumption (by command ID, never running a command twice).
// It talks to sandboxd only through the public gRPC API in proto/sandbox/v1.
package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// ErrGone means the sandbox no longer exists or its container died: the
// Python variables and files built in it are lost.
var ErrGone = errors.New("sandbox is gone")

// ErrCommandLost means the sandbox exists but the command's output can no
// longer be read (sandboxd pruned it).
var ErrCommandLost = errors.New("command output is no longer available")

// Client is a connection to sandboxd.
type Client struct {
	conn *grpc.ClientConn
	api  sandboxv1.SandboxServiceClient
	// retryFor bounds how long a broken stream is retried while sandboxd
	// restarts.
	retryFor time.Duration
}

// Dial connects to sandboxd at addr (host:port). A non-empty token is sent
// with every call as "authorization: Bearer <token>". The connection is
// made lazily; a sandboxd that is down shows up as errors from the calls.
func Dial(addr, token string) (*Client, error) { return dial(addr, token) }

// dial is Dial with extra options (tests dial an in-memory listener).
func dial(addr, token string, extra ...grpc.DialOption) (*Client, error) {
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(sandboxv1.MaxMessageSize)),
	}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(token)))
	}
	conn, err := grpc.NewClient(addr, append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("sandboxd address %q: %w", addr, err)
	}
	return &Client{conn: conn, api: sandboxv1.NewSandboxServiceClient(conn), retryFor: 2 * time.Minute}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// bearer sends a token as gRPC metadata. sandboxd is normally reached over
// loopback without TLS, so transport security is not required.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

// Acquired is the outcome of Acquire.
type Acquired struct {
	// ID is the user's running sandbox.
	ID string
	// Created is true when the sandbox is new (no earlier state exists).
	Created bool
	// ReplacedID is the user's previous sandbox when it had died.
	ReplacedID string
	// ReplacedReason says why the previous sandbox died.
	ReplacedReason string
}

// Acquire returns the user's sandbox, creating one if needed.
func (c *Client) Acquire(ctx context.Context, userID string) (Acquired, error) {
	r, err := c.api.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: userID})
	if err != nil {
		return Acquired{}, fmt.Errorf("acquiring a sandbox for user %s: %w", userID, rpcError(err))
	}
	return Acquired{ID: r.GetSandbox().GetSandboxId(), Created: r.GetCreated(), ReplacedID: r.GetReplacedSandboxId(), ReplacedReason: r.GetReplacedReason()}, nil
}

// Check returns nil when the sandbox exists and runs, an error wrapping
// ErrGone (with the reason) when it was removed or died, and another error
// when sandboxd cannot tell.
func (c *Client) Check(ctx context.Context, sandboxID string) error {
	r, err := c.api.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: sandboxID})
	switch status.Code(err) {
	case codes.OK:
	case codes.NotFound:
		return fmt.Errorf("%w: sandbox %s no longer exists (expired or deleted)", ErrGone, sandboxID)
	default:
		return fmt.Errorf("looking up sandbox %s: %w", sandboxID, rpcError(err))
	}
	if st := r.GetSandbox().GetState(); st != sandboxv1.SandboxState_SANDBOX_STATE_RUNNING {
		return fmt.Errorf("%w: sandbox %s is dead: %s", ErrGone, sandboxID, r.GetSandbox().GetStateReason())
	}
	return nil
}

// Interrupt asks sandboxd to interrupt a command (SIGINT, globals kept).
func (c *Client) Interrupt(ctx context.Context, sandboxID, commandID string) error {
	_, err := c.api.InterruptCommand(ctx, &sandboxv1.InterruptCommandRequest{SandboxId: sandboxID, CommandId: commandID})
	if err != nil {
		return fmt.Errorf("interrupting command %s: %w", commandID, rpcError(err))
	}
	return nil
}

// rpcError keeps a gRPC error's message without the "rpc error: code = X
// desc =" noise, and the code for errors.Is-style checks by callers via
// status.Code.
func rpcError(err error) error {
	if s, ok := status.FromError(err); ok {
		return &rpcErr{code: s.Code(), msg: s.Message(), err: err}
	}
	return err
}

type rpcErr struct {
	code codes.Code
	msg  string
	err  error
}

func (e *rpcErr) Error() string { return fmt.Sprintf("%s (%s)", e.msg, e.code) }

// GRPCStatus lets status.Code see through the wrapping.
func (e *rpcErr) GRPCStatus() *status.Status { return status.New(e.code, e.msg) }
