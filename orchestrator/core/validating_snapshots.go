package core

import (
	"context"
)

// validatingSnapshots is Validating's wrapper of a Snapshots port.
type validatingSnapshots struct {
	*validator
	m Snapshots
}

func (v validatingSnapshots) CreateSnapshot(ctx context.Context, sandboxID, name string) (Snapshot, error) {
	if err := ids(sandboxID); err != nil {
		return Snapshot{}, err
	}
	if err := ValidateSnapshotName(name); err != nil {
		return Snapshot{}, err
	}
	return v.m.CreateSnapshot(ctx, sandboxID, name)
}

func (v validatingSnapshots) ListSnapshots(ctx context.Context, f SnapshotFilter) ([]Snapshot, error) {
	if f.SandboxID != "" {
		if err := ids(f.SandboxID); err != nil {
			return nil, err
		}
	}
	if f.Tenant != "" {
		if err := ValidateTenant(f.Tenant); err != nil {
			return nil, err
		}
		if c := CallerOf(ctx); !c.Admin && f.Tenant != c.Tenant {
			return nil, Invalidf("only an admin may list another tenant's snapshots")
		}
	}
	return v.m.ListSnapshots(ctx, f)
}

func (v validatingSnapshots) DeleteSnapshot(ctx context.Context, ref string) error {
	if err := ValidateSnapshotRef(ref); err != nil {
		return err
	}
	return v.m.DeleteSnapshot(ctx, ref)
}

func (v validatingSnapshots) Fork(ctx context.Context, sandboxID string, req ForkRequest) ([]ForkResult, error) {
	if err := ids(sandboxID); err != nil {
		return nil, err
	}
	if req.Count < 1 || req.Count > MaxForks {
		return nil, Invalidf("fork count %d: want 1 to %d", req.Count, MaxForks)
	}
	if len(req.UserIDs) != 0 && len(req.UserIDs) != req.Count {
		return nil, Invalidf("fork: %d user IDs for %d forks; give one per fork or none", len(req.UserIDs), req.Count)
	}
	seen := map[string]bool{}
	for _, u := range req.UserIDs {
		if err := ValidateUserID(u); err != nil {
			return nil, err
		}
		if seen[u] {
			return nil, Invalidf("fork: user %q is named twice", u)
		}
		seen[u] = true
	}
	if req.Options != nil {
		if req.Options.FromSnapshot != "" {
			return nil, Invalidf("fork: options.from_snapshot does not apply (the fork's state is the source's)")
		}
		opts, err := v.p.ResolveOptions(*req.Options)
		if err != nil {
			return nil, err
		}
		req.Options = &opts
	}
	return v.m.Fork(ctx, sandboxID, req)
}
