package docker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxd/sandboxd/orchestrator/labels"
)

// reconcile rebuilds the registry at start-up from the sandbox directories
// and one ContainerList, and cleans up what does not add up:
//
//   - a directory without a valid meta.json (an interrupted create or
//     delete) is removed, and so is its container if it has one;
//   - a container of ours that no meta.json names is an orphan: removed;
//   - a sandbox whose idle TTL or lifetime ran out while sandboxd was down
//     is removed at once;
//   - a sandbox whose container is gone or stopped is kept as dead, with the
//     reason, so its user learns what happened;
//   - every other sandbox is registered with the TTL it had left;
//   - an unclaimed warm-pool sandbox goes back to the pool if it is alive
//     and the pool has room, and is removed otherwise.
//
// Volumes that are not mounted (the host rebooted) are mounted again; a
// container that runs without them (Docker restarted it at boot, before
// sandboxd was back) is restarted so that it sees them, which its driver
// reports as lost Python state.
//
// Each user's newest sandbox becomes their current one.
func (m *Manager) reconcile(ctx context.Context) error {
	containers, err := m.listManaged(ctx)
	if err != nil {
		return err
	}
	root := filepath.Join(m.cfg.StateDir, sandboxesDir)
	entries, err := os.ReadDir(root)
	if err != nil {
		return fmt.Errorf("read state directory: %w", err)
	}

	claimed := make(map[string]bool)
	byUser := make(map[userKey][]*sandbox)
	type pooledEntry struct {
		sb     *sandbox
		remove func(why string) error
	}
	var pooled []pooledEntry
	var expired, dead, orphanDirs int
	var idleSoon []*sandbox
	for _, e := range entries {
		name := e.Name()
		if core.ValidateSandboxID(name) != nil || !e.IsDir() {
			m.log.Warn("ignoring unexpected entry in the state directory", "path", filepath.Join(root, name))
			continue
		}
		dir := filepath.Join(root, name)
		log := m.log.With("sandbox_id", name)
		md, err := readMeta(dir)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				log.Warn("unreadable sandbox metadata", "error", err)
			}
			log.Info("removing sandbox directory without metadata (interrupted create or delete)", "dir", dir)
			orphanDirs++
			if err := removeSandboxDir(dir); err != nil {
				log.Error("remove orphan sandbox directory", "error", err)
			}
			continue // its container, if any, is unclaimed and removed below
		}
		c, hasContainer := containers[md.ContainerID]
		claimed[md.ContainerID] = true
		sb := newSandbox(dir, md)
		log = log.With("tenant", md.Tenant, "user_id", md.UserID)

		removeAll := func() error {
			if hasContainer {
				if err := m.removeContainer(ctx, md.ContainerID); err != nil {
					return err
				}
			}
			if err := removeSandboxDir(dir); err != nil {
				log.Error("remove sandbox directory", "error", err)
			}
			return nil
		}
		remove := func(why string) error {
			log.Info("removing sandbox: "+why, "pool", md.Pool)
			return removeAll()
		}
		if md.Pool {
			if !hasContainer || !summaryAlive(c.State) {
				if err := remove("warm-pool sandbox whose container is gone or stopped"); err != nil {
					return err
				}
				continue
			}
			pooled = append(pooled, pooledEntry{sb, remove})
			continue
		}

		if err := m.recoverHibernation(ctx, sb, hasContainer && summaryAlive(c.State), hasContainer); err != nil {
			return err
		}
		sb.mu.Lock()
		exp := m.reg.deadlineLocked(sb)
		hibernateSoon := m.onIdleOf(sb) == core.OnIdleHibernate && sb.state == core.StateRunning &&
			(m.cfg.MaxLifetime == 0 || time.Now().Before(sb.createdAt.Add(m.cfg.MaxLifetime)))
		sb.mu.Unlock()
		if !time.Now().Before(exp) && hibernateSoon {
			// Idle while sandboxd was down: hibernated by the expiry loop
			// once registered, not removed.
			idleSoon = append(idleSoon, sb)
		} else if !time.Now().Before(exp) {
			log.Info("removing sandbox that expired while sandboxd was down", "expired_at", exp)
			expired++
			if err := removeAll(); err != nil {
				return err
			}
			continue
		}

		if err := m.refreshListed(ctx, sb, c, hasContainer); err != nil {
			return err
		}
		// Dead sandboxes' volumes are mounted too: their files can still be
		// downloaded until they expire.
		if err := m.remount(ctx, sb, log); err != nil {
			return err
		}
		if st, _ := sb.status(); st == core.StateDead {
			dead++
		}
		byUser[sb.key()] = append(byUser[sb.key()], sb)
	}

	// The oldest pool sandboxes go back to the pool, in their order; those
	// beyond its size (sandboxd restarted with a smaller --warm-pool) go.
	slices.SortFunc(pooled, func(a, b pooledEntry) int { return a.sb.createdAt.Compare(b.sb.createdAt) })
	for i, p := range pooled {
		if i >= m.cfg.WarmPool {
			if err := p.remove("warm-pool sandbox beyond the pool's size"); err != nil {
				return err
			}
			continue
		}
		if err := m.remount(ctx, p.sb, m.log.With("sandbox_id", p.sb.id)); err != nil {
			return err
		}
		m.pool.add(p.sb)
	}

	var orphans int
	for id, c := range containers {
		if claimed[id] {
			continue
		}
		orphans++
		m.log.Info("removing orphan container (no sandbox metadata)", "container_id", id,
			"sandbox_id", c.Labels[labels.SandboxID], "user_id", c.Labels[labels.UserID])
		if err := m.removeContainer(ctx, id); err != nil {
			return err
		}
	}

	restored := 0
	for _, sbs := range byUser {
		// Newest first: it is the user's current sandbox (there is one per
		// user unless a dead one awaits expiry).
		slices.SortFunc(sbs, func(a, b *sandbox) int { return cmp.Compare(b.createdAt.UnixNano(), a.createdAt.UnixNano()) })
		for i, sb := range sbs {
			if slices.Contains(idleSoon, sb) {
				m.reg.addFor(sb, i == 0, time.Second)
				restored++
			} else if m.reg.add(sb, i == 0) {
				restored++
			}
		}
	}
	for r, n := range map[core.ReconcileResult]int{core.ReconcileAdopted: restored, core.ReconcileDead: dead, core.ReconcileExpired: expired,
		core.ReconcileOrphanDir: orphanDirs, core.ReconcileOrphanContainer: orphans} {
		m.cfg.Metrics.Reconciled(r, n)
	}
	m.log.Info("reconciled sandboxes with docker", "restored", restored, "dead", dead, "warm_pool", m.pool.size(),
		"removed_expired", expired, "removed_orphan_dirs", orphanDirs, "removed_orphan_containers", orphans)
	return nil
}

// remount mounts sb's volumes if they are not, and restarts its container
// if it was running without them.
func (m *Manager) remount(ctx context.Context, sb *sandbox, log *slog.Logger) error {
	remounted, err := ensureMounted(ctx, sb.dir)
	if err != nil {
		return fmt.Errorf("mount the volumes of sandbox %s: %w", sb.id, err)
	}
	if !remounted {
		return nil
	}
	if st, _ := sb.status(); st == core.StateDead || st == core.StateHibernated {
		log.Info("remounted the volumes of a sandbox without a running container", "state", st)
		return nil
	}
	log.Warn("sandbox volumes were not mounted (host reboot?); remounted them and restarting the container, which loses its Python state")
	if err := m.docker.ContainerRestart(ctx, sb.containerID, container.StopOptions{}); err != nil {
		if isDockerNotFound(err) {
			m.markDead(sb, reasonRemoved)
			return nil
		}
		return dockerError("restart container", err)
	}
	return nil
}

// removeContainer force-removes a container; one already gone is fine.
func (m *Manager) removeContainer(ctx context.Context, id string) error {
	err := m.docker.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !isDockerNotFound(err) {
		return dockerError("remove container", err)
	}
	return nil
}

// listManaged returns this Manager's containers, running or not, by ID.
func (m *Manager) listManaged(ctx context.Context) (map[string]container.Summary, error) {
	list, err := m.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: m.managedFilter()})
	if err != nil {
		return nil, dockerError("list containers", err)
	}
	byID := make(map[string]container.Summary, len(list))
	for _, c := range list {
		byID[c.ID] = c
	}
	return byID, nil
}
