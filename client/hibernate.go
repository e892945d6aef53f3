package client

import (
	"context"
	"fmt"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// Hibernate hibernates a running sandbox now: its Python globals are saved
// inside it, its container is removed (no memory used) and its files and
// snapshot stay on disk. Its next use wakes it. A hibernated sandbox is
// returned as it is; a dead one is ErrFailedPrecondition.
func (c *Client) Hibernate(ctx context.Context, sandboxID string) (*sandboxv1.Sandbox, error) {
	r, err := c.api.HibernateSandbox(ctx, &sandboxv1.HibernateSandboxRequest{SandboxId: sandboxID})
	if err != nil {
		return nil, fmt.Errorf("hibernating sandbox %s: %w", sandboxID, fromGRPC(err))
	}
	return r.GetSandbox(), nil
}

// Wake wakes a hibernated sandbox now and says how its state came back
// (nil when it was running already).
func (c *Client) Wake(ctx context.Context, sandboxID string) (*sandboxv1.Sandbox, *sandboxv1.WakeInfo, error) {
	r, err := c.api.WakeSandbox(ctx, &sandboxv1.WakeSandboxRequest{SandboxId: sandboxID})
	if err != nil {
		return nil, nil, fmt.Errorf("waking sandbox %s: %w", sandboxID, fromGRPC(err))
	}
	return r.GetSandbox(), r.GetWoke(), nil
}
