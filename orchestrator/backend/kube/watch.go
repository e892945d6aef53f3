package kube

import (
	"context"
	"errors"
	"fmt"

	"github.com/sandboxd/sandboxd/orchestrator/backend/kube/iosidecar"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// WatchDirectory reports changes under a directory of the sandbox's
// workspace to fn, as the Docker backend's WatchDirectory does: the watch
// is the same code (orchestrator/backend/hostio/wswatch), run by the sandbox's io
// sidecar, which sees /workspace, and its updates stream here, checked and
// bounded by the iosidecar.Client. The same caps apply
// (core.Policy.WatchCaps), counted by this replica: the calls in progress,
// and the directories the sidecar says each call watches, per sandbox,
// per tenant (the sandbox's) and on the server; MaxWatchDirsPerCall goes
// to the sidecar with the call. A replica cannot see the others' watches,
// so with n replicas a sandbox or tenant may hold up to n times its caps.
// The sandbox's deletion or death ends the watch with ErrNotFound.
func (m *Manager) WatchDirectory(ctx context.Context, sandboxID, rel string, recursive bool, fn func(core.WatchUpdate) error) error {
	p, err := m.live(ctx, sandboxID)
	if err != nil {
		return err
	}
	show := core.DisplayPath(rel)
	callCaps, dirCaps := m.cfg.WatchCaps()
	tenant := p.Annotations[annTenant]
	if scope, ok := m.watchCalls.Take(callCaps, sandboxID, tenant, 1); !ok {
		return fmt.Errorf("watch %s: %w", show, core.WatchesCapReached(scope, capHolder(scope, sandboxID, tenant), callCaps.Of(scope)))
	}
	defer m.watchCalls.Release(sandboxID, tenant, 1)
	c, err := m.io(ctx, p)
	if err != nil {
		return err
	}
	m.touch(sandboxID, p)
	held := 0 // directories taken against dirCaps
	defer func() { m.watchDirs.Release(sandboxID, tenant, held) }()
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		m.endWithSandbox(wctx, sandboxID, cancel)
	}()
	err = c.WatchDirectory(wctx, rel, recursive, m.cfg.MaxWatchDirsPerCall, func(u iosidecar.WatchUpdate) error {
		switch {
		case u.Dirs > held:
			if scope, ok := m.watchDirs.Take(dirCaps, sandboxID, tenant, u.Dirs-held); !ok {
				return fmt.Errorf("watch %s: %w", show, core.WatchDirsCapReached(scope, capHolder(scope, sandboxID, tenant), dirCaps.Of(scope)))
			}
		case u.Dirs < held:
			m.watchDirs.Release(sandboxID, tenant, held-u.Dirs)
		}
		held = u.Dirs
		return fn(u.WatchUpdate)
	})
	cancel(nil)
	<-watched
	var sidecarErr *iosidecar.Error
	switch cause := context.Cause(wctx); {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case cause != nil && core.ClassOf(cause) != nil:
		return cause // the sandbox died or was deleted, or this replica closes
	case errors.As(err, &sidecarErr):
		return m.ioError(sandboxID, "", err)
	}
	return err // fn's, or a cap's
}

// endWithSandbox ends a watch (through cancel) when its sandbox dies or
// is deleted, or this replica closes, until ctx ends.
func (m *Manager) endWithSandbox(ctx context.Context, id string, cancel context.CancelCauseFunc) {
	for {
		ch := m.changed()
		p, err := m.pod(ctx, id)
		if err != nil {
			if ctx.Err() == nil {
				cancel(err)
			}
			return
		}
		if p == nil {
			cancel(core.SandboxNotFound(id))
			return
		}
		if gone, dead, _, _ := podState(p); gone || dead {
			cancel(core.SandboxNotFound(id))
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-m.closed:
			cancel(errClosing)
			return
		case <-ch:
		}
	}
}

// capHolder names who holds the cap at scope: the sandbox, its tenant, or
// nobody (the server's).
func capHolder(scope core.Scope, sandboxID, tenant string) string {
	switch scope {
	case core.ScopeSandbox:
		return sandboxID
	case core.ScopeTenant:
		return tenant
	}
	return ""
}
