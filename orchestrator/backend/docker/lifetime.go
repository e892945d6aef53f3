package docker

import (
	"context"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Lifetime control: a sandbox's own idle TTL (Options.IdleTimeout,
// SetTimeout) and the caller's metadata (Options.Metadata, ListFilter).
// Both live in meta.json, so they survive restarts and a warm-pool sandbox
// gets them when claimed (its container's labels cannot change).

// SetTimeout sets a sandbox's own idle TTL to d and counts the call as
// activity, so the sandbox expires d from now (or at the end of its maximum
// lifetime, if sooner) unless used again; each later use restarts d. The
// TTL is persisted at once and survives restarts. Outside MinIdleTimeout to
// Config.MaxIdleTTL is ErrInvalidArgument; another tenant's sandbox is
// ErrNotFound, as everywhere. A dead sandbox may be given a timeout too (it
// stays visible until it expires).
func (m *Manager) SetTimeout(ctx context.Context, sandboxID string, d time.Duration) (core.Sandbox, error) {
	sb, err := m.lookup(ctx, sandboxID)
	if err != nil {
		return core.Sandbox{}, err
	}
	if !m.reg.touchWith(sb, d) {
		return core.Sandbox{}, core.SandboxNotFound(sandboxID)
	}
	// Written now rather than by the next flush: a caller that extended
	// the timeout must not lose it to a crash a moment later.
	if err := sb.persist(false); err != nil {
		m.log.Error("persist sandbox metadata", "sandbox_id", sb.id, "error", err)
	}
	m.log.Info("sandbox idle timeout set", "sandbox_id", sb.id, "tenant", sb.tenant, "user_id", sb.userID, "idle_timeout", d)
	return m.snapshot(sb), nil
}

// lookup finds a sandbox the caller in ctx may see, without refreshing its
// idle TTL (use does both). A malformed ID is ErrInvalidArgument; a sandbox
// that is gone or another tenant's is ErrNotFound.
func (m *Manager) lookup(ctx context.Context, sandboxID string) (*sandbox, error) {
	if err := m.checkOpen(); err != nil {
		return nil, err
	}
	sb := m.reg.get(sandboxID)
	if sb == nil || !core.CallerOf(ctx).Sees(sb.tenant) {
		return nil, core.SandboxNotFound(sandboxID)
	}
	return sb, nil
}
