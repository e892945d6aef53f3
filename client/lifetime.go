package client

import (
	"context"
	"fmt"
	"maps"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// WithMetadata labels a new sandbox with the caller's own key-value pairs (a
// session, a project), returned in every Sandbox and selectable with
// ListFilter.Metadata. At most 64 entries, keys of 1-64 characters from
// [A-Za-z0-9._:/-], values of at most 512 bytes, 16 KiB in all: anything
// else is ErrInvalidArgument. A sandbox from the warm pool gets it too; an
// existing sandbox keeps the metadata it was created with.
func WithMetadata(md map[string]string) AcquireOption {
	md = maps.Clone(md)
	return func(o *sandboxv1.SandboxOptions) { o.Metadata = md }
}

// WithIdleTimeout gives a new sandbox its own idle timeout instead of
// sandboxd's --idle-ttl: it is removed this long after its last use. From
// one second to sandboxd's --max-idle-ttl (24h unless configured), else
// ErrInvalidArgument. Change it later with SetTimeout.
func WithIdleTimeout(d time.Duration) AcquireOption {
	return func(o *sandboxv1.SandboxOptions) { o.IdleTimeout = durationpb.New(d) }
}

// WithOnIdle sets what a new sandbox's idle timeout does to it instead of
// sandboxd's --on-idle: hibernate it (its state kept, woken by the next
// use) or delete it. Like every option it applies only when the sandbox is
// created.
func WithOnIdle(a sandboxv1.IdleAction) AcquireOption {
	return func(o *sandboxv1.SandboxOptions) { o.OnIdle = a }
}

// SetTimeout sets a sandbox's idle timeout, extending or shortening its
// life: the call counts as use, so the sandbox now expires d from now
// (capped by sandboxd's --max-lifetime), and each later use restarts d.
// ErrInvalidArgument outside one second to sandboxd's --max-idle-ttl (the
// message names the bound), ErrNotFound when the sandbox is gone or
// another tenant's. Acquiring the sandbox again keeps the timeout. It
// returns the sandbox with its new idle_timeout and expires_at.
func (c *Client) SetTimeout(ctx context.Context, sandboxID string, d time.Duration) (*sandboxv1.Sandbox, error) {
	r, err := c.api.SetSandboxTimeout(ctx, &sandboxv1.SetSandboxTimeoutRequest{SandboxId: sandboxID, Timeout: durationpb.New(d)})
	if err != nil {
		return nil, fmt.Errorf("setting the timeout of sandbox %s: %w", sandboxID, fromGRPC(err))
	}
	return r.GetSandbox(), nil
}
