package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Volumes after the start. A sandbox's named volumes are bound into its
// container when the container is created (volumeBinds). A warm-pool
// sandbox's container was created before anyone asked, and a carrier's
// (carrier.go) for another sandbox, so a claim with volumes, and a fast
// wake or a start from a snapshot of a sandbox with volumes, mount them
// into the running container instead (mountin_linux.go: the volume's
// directory cloned and attached at its path in the container's mount
// namespace, read-only when asked), under runc, where a container sees
// mounts made after it started.
//
// Such mounts are not in the container's configuration: a restart of the
// container (its driver crashed, Docker's restart policy) comes back
// without them. So the sandbox's meta.json says VolumesMounted, and
// sandboxd mounts them again when it sees the container start (monitor.go)
// and at its own start (reconcile); and a mounts record in the sandbox's
// log (ioproto/PROTOCOL.md, *Mounts after start*), appended once they are
// mounted, makes the driver run no later command, after any restart, until
// they are there again: no command writes into the container's own file
// system where its volume should be. A container made for the sandbox
// itself (a cold wake) gets them from its configuration, as any other.

// A sandbox's root file system is read-only, so the mount point of a
// volume mounted later cannot be made in it: a pool sandbox's container
// has, at each directory under which volumes are mounted
// (core.VolumeMountRoots: /mnt, /data), a directory of its own on the
// host (<sandbox dir>/mountpoints/<name>), root's, where the mount points
// are made. The host side is a plain directory, never a mount: what is
// mounted on it is in the container's namespace alone, and goes with the
// container.
const mountPointsDir = "mountpoints"

// poolMountPoints makes pool sandbox dir's mount-point directories and
// binds them into its container's spec host (see above).
func poolMountPoints(dir string, host *container.HostConfig) error {
	for _, root := range core.VolumeMountRoots() {
		src := filepath.Join(dir, mountPointsDir, filepath.Base(root))
		if err := os.MkdirAll(src, 0o755); err != nil {
			return fmt.Errorf("make the mount-point directory for %s: %w", root, err)
		}
		host.Binds = append(host.Binds, src+":"+root+":rw")
	}
	return nil
}

// volumeMounts is what mounting vols into a container means on this host:
// their directories (those of volumes that still exist) and paths.
func (m *Manager) volumeMounts(vols []core.VolumeMount) []hostMount {
	var ms []hostMount
	for _, vm := range vols {
		if !m.vols.exists(vm.Volume) {
			continue
		}
		ms = append(ms, hostMount{src: volumeDataDir(m.cfg.StateDir, vm.Volume), dst: vm.Path, ro: vm.ReadOnly})
	}
	return ms
}

// mountVolumes mounts vols into sb's running container containerID,
// records sb's volumes as mounted so, and appends the mounts record naming
// their paths to sb's log. The caller persists sb.
func (m *Manager) mountVolumes(ctx context.Context, sb *sandbox, containerID string, vols []core.VolumeMount) error {
	ms := m.volumeMounts(vols)
	if len(ms) == 0 {
		return nil
	}
	pid, err := m.pidOf(ctx, containerID)
	if err != nil {
		return err
	}
	if err := m.cfg.mountKernel.inject(pid, ms); err != nil {
		return fmt.Errorf("mount the sandbox's volumes: %w", err)
	}
	sb.mu.Lock()
	sb.volsMounted, sb.dirty = true, true
	sb.mu.Unlock()
	paths := make([]string, len(ms))
	for i, hm := range ms {
		paths[i] = hm.dst
	}
	if _, err := sb.io.AppendMounts(ctx, paths, nil); err != nil {
		return fmt.Errorf("append the mounts record: %w", err)
	}
	return nil
}

// remountVolumes mounts again those of sb's mounted volumes (VolumesMounted)
// that its running container lacks: after a restart of the container, or
// of the host. Nothing for a sandbox whose container was made with them.
func (m *Manager) remountVolumes(ctx context.Context, sb *sandbox) error {
	sb.mu.Lock()
	mounted, cid := sb.volsMounted, sb.containerID
	vols := slices.Clone(sb.volumes)
	sb.mu.Unlock()
	if !mounted || cid == "" {
		return nil
	}
	ms := m.volumeMounts(vols)
	if len(ms) == 0 {
		return nil
	}
	pid, err := m.pidOf(ctx, cid)
	if err != nil {
		return err
	}
	dsts := make([]string, len(ms))
	for i, hm := range ms {
		dsts[i] = hm.dst
	}
	missing, err := m.cfg.mountKernel.missing(pid, dsts)
	if err != nil || len(missing) == 0 {
		return err
	}
	var again []hostMount
	for _, hm := range ms {
		if slices.Contains(missing, hm.dst) {
			again = append(again, hm)
		}
	}
	if err := m.cfg.mountKernel.inject(pid, again); err != nil {
		return fmt.Errorf("mount the sandbox's volumes again: %w", err)
	}
	m.log.Info("the sandbox's volumes were mounted again into its container", "sandbox_id", sb.id, "paths", missing)
	return nil
}

// restateMounts appends, to the log of a sandbox whose volumes were
// mounted after its start, a mounts record naming those of its volumes
// that still exist: the driver waits for those alone from then on (a
// volume deleted by force is not coming back).
func (m *Manager) restateMounts(ctx context.Context, sb *sandbox) {
	sb.mu.Lock()
	mounted := sb.volsMounted
	vols := slices.Clone(sb.volumes)
	sb.mu.Unlock()
	if !mounted {
		return
	}
	paths := []string{}
	for _, hm := range m.volumeMounts(vols) {
		paths = append(paths, hm.dst)
	}
	if _, err := sb.io.AppendMounts(ctx, paths, nil); err != nil {
		m.log.Error("tell a sandbox's driver its volume was deleted; after a restart its commands wait a minute for it", "sandbox_id", sb.id, "error", err)
	}
}

// ensureVolumes is remountVolumes for a running sandbox found at start-up
// or seen starting: a sandbox whose volumes cannot be mounted again is
// dead, saying why (its driver would otherwise wait for them, then run its
// commands without them). A container that is not running (restarting
// again) is left to its next start.
func (m *Manager) ensureVolumes(ctx context.Context, sb *sandbox) {
	if st, _ := sb.status(); st != core.StateRunning || sb.asleep() {
		return
	}
	err := m.remountVolumes(ctx, sb)
	switch {
	case err == nil, errors.Is(err, errNoProcess), ctx.Err() != nil:
		return
	case errors.Is(err, core.ErrUnavailable), errors.Is(err, core.ErrNotFound):
		// The engine unreachable, or the container gone (its own event
		// says so): not the mount's failure. The driver waits; the next
		// start (or sandboxd's) tries again.
		m.log.Warn("could not look at the sandbox's container to mount its volumes again", "sandbox_id", sb.id, "error", err)
		return
	}
	m.log.Error("the sandbox's volumes could not be mounted again into its container", "sandbox_id", sb.id, "error", err)
	m.markDead(sb, core.Truncate("its volumes could not be mounted again into its restarted container: "+err.Error(), 512))
}

// pidOf is the process ID of running container id.
func (m *Manager) pidOf(ctx context.Context, id string) (int, error) {
	info, err := m.docker.ContainerInspect(ctx, id)
	if err != nil {
		return 0, dockerError("inspect container", err)
	}
	if info.State == nil || !info.State.Running || info.State.Pid <= 0 {
		return 0, fmt.Errorf("container %s: %w", id, errNoProcess)
	}
	return info.State.Pid, nil
}
