package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
)

// Acquire returns the user's current sandbox, creating one if the user has
// none. Concurrent calls for one user are serialised, so they all get the
// same sandbox.
//
// If the current sandbox is dead (its container exited or was removed), a
// new one is created and the result says so: Created, ReplacedID and
// ReplacedReason tell the caller that the Python state is gone, never a
// silent swap. The dead sandbox stays visible (StateDead, with its reason)
// until it expires or is deleted.
//
// opts apply only when a sandbox is created; they are validated in any case.
func (m *Manager) Acquire(ctx context.Context, userID string, opts Options) (AcquireResult, error) {
	if err := m.checkOpen(); err != nil {
		return AcquireResult{}, err
	}
	if err := ValidateUserID(userID); err != nil {
		return AcquireResult{}, err
	}
	if err := validateEnv(opts.Env); err != nil {
		return AcquireResult{}, err
	}
	limits, err := resolveLimits(opts.Limits, m.cfg.DefaultLimits, m.cfg.MaxLimits)
	if err != nil {
		return AcquireResult{}, err
	}

	unlock, err := m.userLocks.lock(ctx, userID)
	if err != nil {
		return AcquireResult{}, err
	}
	defer unlock()

	var replaced *sandbox
	if cur := m.reg.currentOf(userID); cur != nil {
		if err := m.refresh(ctx, cur); err != nil {
			return AcquireResult{}, err
		}
		if st, _ := cur.status(); st == StateRunning && m.reg.touch(cur) {
			return AcquireResult{Sandbox: m.snapshot(cur)}, nil
		}
		replaced = cur
	}
	if m.cfg.MaxSandboxes > 0 && m.reg.countRunning() >= m.cfg.MaxSandboxes {
		return AcquireResult{}, exhaustedf("the server runs its maximum of %d sandboxes; try again later", m.cfg.MaxSandboxes)
	}
	sb, err := m.create(ctx, userID, limits, opts.Env)
	if err != nil {
		return AcquireResult{}, err
	}
	res := AcquireResult{Sandbox: m.snapshot(sb), Created: true}
	log := m.log.With("sandbox_id", sb.id, "user_id", userID)
	if replaced != nil {
		_, reason := replaced.status()
		res.ReplacedID, res.ReplacedReason = replaced.id, reason
		log.Info("sandbox created, replacing a dead one", "replaced_id", replaced.id, "replaced_reason", reason)
	} else {
		log.Info("sandbox created")
	}
	return res, nil
}

// create makes a new sandbox for userID and registers it as the user's
// current one. Order matters for crash safety: directories, container,
// start, and meta.json last; anything interrupted before meta.json is
// written is debris that reconcile removes.
func (m *Manager) create(ctx context.Context, userID string, limits Limits, env map[string]string) (*sandbox, error) {
	if err := m.checkImage(ctx); err != nil {
		return nil, err
	}
	id := newSandboxID()
	now := time.Now().UTC()
	sb := newSandbox(sandboxDir(m.cfg.StateDir, id), meta{
		ID:           id,
		UserID:       userID,
		Image:        m.cfg.Image,
		Runtime:      m.cfg.Runtime,
		Limits:       limits,
		CreatedAt:    now,
		LastActiveAt: now,
	})
	log := m.log.With("sandbox_id", id, "user_id", userID)

	// Cleanup must happen even when the caller has given up.
	cleanup := func(containerID string) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
		defer cancel()
		if containerID != "" {
			if err := m.docker.ContainerRemove(cctx, containerID, container.RemoveOptions{Force: true}); err != nil && !isDockerNotFound(err) {
				log.Error("remove container of a failed creation", "container_id", containerID, "error", err)
			}
		}
		if err := os.RemoveAll(sb.dir); err != nil {
			log.Error("remove directory of a failed creation", "dir", sb.dir, "error", err)
		}
	}

	if err := prepareDirs(sb.dir); err != nil {
		cleanup("")
		return nil, fmt.Errorf("prepare sandbox directories: %w", err)
	}
	cfg, hostCfg := containerSpec(sb, m.cfg.Runtime, m.cfg.StateDir, env)
	resp, err := m.docker.ContainerCreate(ctx, cfg, hostCfg, nil, nil, containerNamePrefix+id)
	if err != nil {
		cleanup("")
		switch {
		case isDockerNotFound(err):
			// The image vanished since checkImage.
			return nil, m.imageMissing()
		case cerrdefs.IsInvalidArgument(err):
			// Docker refused the spec: e.g. an unknown runtime, or more CPUs
			// than the host has. A server setup problem, not the request's.
			return nil, preconditionf("docker refused to create the sandbox container: %v", err)
		}
		return nil, dockerError("create container", err)
	}
	sb.containerID = resp.ID
	for _, w := range resp.Warnings {
		log.Warn("docker warning on container create", "warning", w)
	}
	if err := m.docker.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		cleanup(resp.ID)
		if cerrdefs.IsInvalidArgument(err) || cerrdefs.IsUnknown(err) || cerrdefs.IsInternal(err) {
			// The engine failed to start it (e.g. the runtime is broken).
			return nil, preconditionf("docker could not start the sandbox container: %v", err)
		}
		return nil, dockerError("start container", err)
	}
	sb.mu.Lock()
	md := sb.metaLocked()
	sb.mu.Unlock()
	if err := writeMeta(sb.dir, md); err != nil {
		cleanup(resp.ID)
		return nil, fmt.Errorf("write sandbox metadata: %w", err)
	}
	if !m.reg.add(sb, true) {
		// Only possible with an absurdly short IdleTTL.
		cleanup(resp.ID)
		return nil, errors.New("new sandbox expired before it was registered")
	}
	return sb, nil
}

// checkImage makes sure the sandbox image exists, so a missing image is
// reported as such rather than as a confusing create failure.
func (m *Manager) checkImage(ctx context.Context) error {
	_, err := m.docker.ImageInspect(ctx, m.cfg.Image)
	switch {
	case err == nil:
		return nil
	case isDockerNotFound(err):
		return m.imageMissing()
	}
	return dockerError("inspect image", err)
}

func (m *Manager) imageMissing() error {
	return preconditionf("sandbox image %q is not present; build it with \"make image\"", m.cfg.Image)
}

// isDockerNotFound reports whether a Docker API error means "no such
// object". Errors already classified by us are not Docker's.
func isDockerNotFound(err error) bool {
	return err != nil && !isClassified(err) && cerrdefs.IsNotFound(err)
}
