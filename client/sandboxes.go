package client

import (
	"context"
	"errors"
	"fmt"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// Acquired is the outcome of Acquire: the sandbox, and whether the state the
// caller may have built in an earlier one is lost.
type Acquired struct {
	// ID is the user's running sandbox.
	ID string
	// Created is true when the sandbox is new (no earlier state exists).
	Created bool
	// StateLost is true when the user's previous sandbox had died and was
	// replaced: the variables and files built in it are gone.
	StateLost bool
	// ReplacedID is the user's previous sandbox when it had died.
	ReplacedID string
	// ReplacedReason says why the previous sandbox died.
	ReplacedReason string
	// Sandbox describes the sandbox as sandboxd reported it.
	Sandbox *sandboxv1.Sandbox
	// Woke says how the state came back when this call woke a hibernated
	// sandbox or started one from a snapshot (WithFromSnapshot).
	Woke *sandboxv1.WakeInfo
}

// Limits are a new sandbox's resource limits; zero fields take sandboxd's
// defaults, and values above its maximums are ErrInvalidArgument.
type Limits struct {
	// MemoryBytes caps RAM (there is no swap).
	MemoryBytes int64
	// NanoCPUs caps CPU time in billionths of a CPU (1e9 is one core).
	NanoCPUs int64
	// PidsLimit caps processes and threads.
	PidsLimit int64
	// DiskBytes caps what /workspace can hold.
	DiskBytes int64
}

// AcquireOption sets up the sandbox Acquire creates. Options apply only
// when a sandbox is created: an existing sandbox keeps its settings.
type AcquireOption func(*sandboxv1.SandboxOptions)

// WithLimits asks for resource limits other than sandboxd's defaults.
func WithLimits(l Limits) AcquireOption {
	return func(o *sandboxv1.SandboxOptions) {
		o.Limits = &sandboxv1.ResourceLimits{MemoryBytes: l.MemoryBytes, NanoCpus: l.NanoCPUs, PidsLimit: l.PidsLimit, DiskBytes: l.DiskBytes}
	}
}

// WithEnv sets environment variables in every process of the sandbox. A
// sandbox from the warm pool gets them after its claim, before any command
// of the caller's, as if it had been created with them.
func WithEnv(env map[string]string) AcquireOption {
	return func(o *sandboxv1.SandboxOptions) { o.Env = env }
}

// WithNetwork gives the sandbox outbound network access under sandboxd's
// default egress policy (WithNetworkPolicy gives it one of its own);
// sandboxd refuses it (ErrInvalidArgument) unless started with
// --allow-network.
func WithNetwork() AcquireOption {
	return func(o *sandboxv1.SandboxOptions) { o.Network = true }
}

// Acquire returns the user's sandbox, creating one if needed: a user has at
// most one sandbox (per tenant, which the token decides). ErrResourceExhausted
// when sandboxd's cap on sandboxes is reached.
func (c *Client) Acquire(ctx context.Context, userID string, opts ...AcquireOption) (Acquired, error) {
	req := &sandboxv1.AcquireSandboxRequest{UserId: userID}
	if len(opts) > 0 {
		req.Options = &sandboxv1.SandboxOptions{}
		for _, opt := range opts {
			opt(req.Options)
		}
	}
	r, err := c.api.AcquireSandbox(ctx, req)
	if err != nil {
		return Acquired{}, fmt.Errorf("acquiring a sandbox for user %s: %w", userID, fromGRPC(err))
	}
	return Acquired{
		ID:             r.GetSandbox().GetSandboxId(),
		Created:        r.GetCreated(),
		StateLost:      r.GetStateLost(),
		ReplacedID:     r.GetReplacedSandboxId(),
		ReplacedReason: r.GetReplacedReason(),
		Sandbox:        r.GetSandbox(),
		Woke:           r.GetWoke(),
	}, nil
}

// Get describes one sandbox, including a dead one that has not been removed
// yet; ErrNotFound when it does not exist. Check is simpler when all the
// caller wants to know is whether the sandbox is still usable.
func (c *Client) Get(ctx context.Context, sandboxID string) (*sandboxv1.Sandbox, error) {
	r, err := c.api.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: sandboxID})
	if err != nil {
		return nil, fmt.Errorf("getting sandbox %s: %w", sandboxID, fromGRPC(err))
	}
	return r.GetSandbox(), nil
}

// ListFilter selects sandboxes; empty fields match all.
type ListFilter struct {
	// UserID, when set, selects that user's sandboxes.
	UserID string
	// Tenant, when set, selects that tenant's sandboxes (only an admin
	// token sees other tenants).
	Tenant string
	// State, when not SANDBOX_STATE_UNSPECIFIED, selects that state.
	State sandboxv1.SandboxState
	// Metadata, when set, selects sandboxes whose metadata (WithMetadata)
	// has every one of these pairs.
	Metadata map[string]string
}

// List lists the sandboxes the token can see that match f, oldest first.
func (c *Client) List(ctx context.Context, f ListFilter) ([]*sandboxv1.Sandbox, error) {
	r, err := c.api.ListSandboxes(ctx, &sandboxv1.ListSandboxesRequest{UserId: f.UserID, Tenant: f.Tenant, State: f.State, Metadata: f.Metadata})
	if err != nil {
		return nil, fmt.Errorf("listing sandboxes: %w", fromGRPC(err))
	}
	return r.GetSandboxes(), nil
}

// Delete stops and removes a sandbox with its workspace and command
// history. ErrNotFound when it does not exist, so that a retried delete can
// tell "already gone" apart from success.
func (c *Client) Delete(ctx context.Context, sandboxID string) error {
	if _, err := c.api.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: sandboxID}); err != nil {
		return fmt.Errorf("deleting sandbox %s: %w", sandboxID, fromGRPC(err))
	}
	return nil
}

// Check returns nil when the sandbox exists and runs, an error wrapping
// ErrGone (with the reason) when it was removed or died, and another error
// when sandboxd cannot tell. It is how a caller that remembered a sandbox
// ID learns whether the state built in it survived.
func (c *Client) Check(ctx context.Context, sandboxID string) error {
	r, err := c.api.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: sandboxID})
	err = fromGRPC(err)
	switch {
	case err == nil:
	case errors.Is(err, ErrNotFound):
		return fmt.Errorf("%w: sandbox %s no longer exists (expired or deleted)", ErrGone, sandboxID)
	default:
		return fmt.Errorf("looking up sandbox %s: %w", sandboxID, err)
	}
	if st := r.GetSandbox().GetState(); st != sandboxv1.SandboxState_SANDBOX_STATE_RUNNING {
		return fmt.Errorf("%w: sandbox %s is dead: %s", ErrGone, sandboxID, r.GetSandbox().GetStateReason())
	}
	return nil
}
