package core

import (
	"context"
	"time"
)

// validatingSandboxes is Validating's wrapper of a Sandboxes port.
type validatingSandboxes struct {
	*validator
	m Sandboxes
}

func (v validatingSandboxes) Acquire(ctx context.Context, userID string, opts Options) (AcquireResult, error) {
	if err := ValidateTenant(CallerOf(ctx).Tenant); err != nil {
		return AcquireResult{}, err
	}
	if err := ValidateUserID(userID); err != nil {
		return AcquireResult{}, err
	}
	opts, err := v.p.ResolveOptions(opts)
	if err != nil {
		return AcquireResult{}, err
	}
	return v.m.Acquire(ctx, userID, opts)
}

func (v validatingSandboxes) Get(ctx context.Context, sandboxID string) (Sandbox, error) {
	if err := ids(sandboxID); err != nil {
		return Sandbox{}, err
	}
	return v.m.Get(ctx, sandboxID)
}

func (v validatingSandboxes) List(ctx context.Context, f ListFilter) ([]Sandbox, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return v.m.List(ctx, f)
}

func (v validatingSandboxes) Delete(ctx context.Context, sandboxID string) error {
	if err := ids(sandboxID); err != nil {
		return err
	}
	return v.m.Delete(ctx, sandboxID)
}

func (v validatingSandboxes) SetTimeout(ctx context.Context, sandboxID string, d time.Duration) (Sandbox, error) {
	if err := ids(sandboxID); err != nil {
		return Sandbox{}, err
	}
	if err := v.p.CheckIdleTimeout(d); err != nil {
		return Sandbox{}, err
	}
	return v.m.SetTimeout(ctx, sandboxID, d)
}

func (v validatingSandboxes) Hibernate(ctx context.Context, sandboxID string) (Sandbox, error) {
	if err := ids(sandboxID); err != nil {
		return Sandbox{}, err
	}
	return v.m.Hibernate(ctx, sandboxID)
}

func (v validatingSandboxes) Wake(ctx context.Context, sandboxID string) (Sandbox, *WakeInfo, error) {
	if err := ids(sandboxID); err != nil {
		return Sandbox{}, nil, err
	}
	return v.m.Wake(ctx, sandboxID)
}
