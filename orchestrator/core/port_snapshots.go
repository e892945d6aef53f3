package core

import (
	"context"
)

// Snapshots is named snapshots of a running sandbox's state (snapshot.go)
// and forks, copies of a sandbox's state started at once. A start from a
// snapshot is an Acquire with Options.FromSnapshot.
type Snapshots interface {
	// CreateSnapshot saves a running sandbox's state (globals as a
	// hibernation saves them, and /workspace) as a named snapshot of its
	// tenant, kept until DeleteSnapshot (snapshot.go). The sandbox keeps
	// running.
	CreateSnapshot(ctx context.Context, sandboxID, name string) (Snapshot, error)

	// ListSnapshots lists the snapshots the caller may see, newest first.
	ListSnapshots(ctx context.Context, f SnapshotFilter) ([]Snapshot, error)

	// DeleteSnapshot deletes a snapshot by ID or name.
	DeleteSnapshot(ctx context.Context, ref string) error

	// Fork makes req.Count new sandboxes with a copy of the source's state;
	// each succeeds or fails on its own (ForkResult.Err).
	Fork(ctx context.Context, sandboxID string, req ForkRequest) ([]ForkResult, error)
}
