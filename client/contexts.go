package client

import (
	"context"
	"fmt"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// DefaultContext is the ID of every sandbox's default context, where
// commands without Command.ContextID run.
const DefaultContext = "default"

// CreateContext creates an independent interpreter in a sandbox, with its
// own globals, language (one of the Language constants; empty means python) and
// working directory cwd (relative to /workspace, empty for /workspace; it
// must exist). Run a command in it with Command.ContextID. Commands of one
// context queue; different contexts run in parallel. ErrResourceExhausted
// past 16 contexts, ErrFailedPrecondition when cwd is not a directory.
func (c *Client) CreateContext(ctx context.Context, sandboxID, language, cwd string) (*sandboxv1.Context, error) {
	r, err := c.api.CreateContext(ctx, &sandboxv1.CreateContextRequest{SandboxId: sandboxID, Language: language, Cwd: cwd})
	if err != nil {
		return nil, fmt.Errorf("creating a context in sandbox %s: %w", sandboxID, fromGRPC(err))
	}
	return r.GetContext(), nil
}

// ListContexts lists a sandbox's contexts, the default one first.
func (c *Client) ListContexts(ctx context.Context, sandboxID string) ([]*sandboxv1.Context, error) {
	r, err := c.api.ListContexts(ctx, &sandboxv1.ListContextsRequest{SandboxId: sandboxID})
	if err != nil {
		return nil, fmt.Errorf("listing the contexts of sandbox %s: %w", sandboxID, fromGRPC(err))
	}
	return r.GetContexts(), nil
}

// RestartContext gives a context fresh globals (same ID); a command running
// in it ends. ErrNotFound for an unknown context.
func (c *Client) RestartContext(ctx context.Context, sandboxID, contextID string) error {
	if _, err := c.api.RestartContext(ctx, &sandboxv1.RestartContextRequest{SandboxId: sandboxID, ContextId: contextID}); err != nil {
		return fmt.Errorf("restarting context %s of sandbox %s: %w", contextID, sandboxID, fromGRPC(err))
	}
	return nil
}

// DeleteContext ends a context; its queued commands end without running.
// ErrNotFound for an unknown context; the default context cannot be
// deleted (ErrFailedPrecondition).
func (c *Client) DeleteContext(ctx context.Context, sandboxID, contextID string) error {
	if _, err := c.api.DeleteContext(ctx, &sandboxv1.DeleteContextRequest{SandboxId: sandboxID, ContextId: contextID}); err != nil {
		return fmt.Errorf("deleting context %s of sandbox %s: %w", contextID, sandboxID, fromGRPC(err))
	}
	return nil
}
