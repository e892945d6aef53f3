package client

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// WithFromSnapshot starts a new sandbox from a named snapshot (its ID or
// name): /workspace copied, the globals restored before Acquire returns
// (Acquired.Woke says how).
func WithFromSnapshot(ref string) AcquireOption {
	return func(o *sandboxv1.SandboxOptions) { o.FromSnapshot = ref }
}

// CreateSnapshot saves a running sandbox's globals and /workspace as a
// snapshot of its tenant, with an optional name; the sandbox keeps running.
func (c *Client) CreateSnapshot(ctx context.Context, sandboxID, name string) (*sandboxv1.Snapshot, error) {
	r, err := c.api.CreateSnapshot(ctx, &sandboxv1.CreateSnapshotRequest{SandboxId: sandboxID, Name: name})
	if err != nil {
		return nil, fmt.Errorf("snapshotting sandbox %s: %w", sandboxID, fromGRPC(err))
	}
	return r.GetSnapshot(), nil
}

// ListSnapshots lists the caller's snapshots, newest first; sandboxID,
// when set, keeps one sandbox's.
func (c *Client) ListSnapshots(ctx context.Context, sandboxID string) ([]*sandboxv1.Snapshot, error) {
	r, err := c.api.ListSnapshots(ctx, &sandboxv1.ListSnapshotsRequest{SandboxId: sandboxID})
	if err != nil {
		return nil, fmt.Errorf("listing snapshots: %w", fromGRPC(err))
	}
	return r.GetSnapshots(), nil
}

// DeleteSnapshot deletes a snapshot by ID or name.
func (c *Client) DeleteSnapshot(ctx context.Context, ref string) error {
	if _, err := c.api.DeleteSnapshot(ctx, &sandboxv1.DeleteSnapshotRequest{Snapshot: ref}); err != nil {
		return fmt.Errorf("deleting snapshot %s: %w", ref, fromGRPC(err))
	}
	return nil
}

// Fork is one fork's outcome: its sandbox and how the source's state came
// back in it, or Err.
type Fork struct {
	Sandbox *sandboxv1.Sandbox
	Woke    *sandboxv1.WakeInfo
	Err     error
}

// ForkSandbox makes count copies of a running sandbox, for the users
// given (one per fork) or generated ones; each fork succeeds or fails on
// its own. opts apply to the forks (default: the source's).
func (c *Client) ForkSandbox(ctx context.Context, sandboxID string, count int, userIDs []string, opts ...AcquireOption) ([]Fork, error) {
	req := &sandboxv1.ForkSandboxRequest{SandboxId: sandboxID, Count: int32(count), UserIds: userIDs}
	if len(opts) > 0 {
		req.Options = &sandboxv1.SandboxOptions{}
		for _, opt := range opts {
			opt(req.Options)
		}
	}
	r, err := c.api.ForkSandbox(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("forking sandbox %s: %w", sandboxID, fromGRPC(err))
	}
	out := make([]Fork, 0, len(r.GetResults()))
	for _, res := range r.GetResults() {
		if code := codes.Code(res.GetErrorCode()); code != codes.OK {
			out = append(out, Fork{Err: fromGRPC(status.Error(code, res.GetErrorMessage()))})
			continue
		}
		out = append(out, Fork{Sandbox: res.GetSandbox(), Woke: res.GetWoke()})
	}
	return out, nil
}
