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
// and one ContainerList, and cleans up what does not add up. It works in
// three steps: survey (read the state directory and list the containers),
// plan (planReconcile, a pure function: one typed decision per directory
// entry, the orphan containers, each user's current sandbox), apply. The
// decisions (dirAction), in the order they are considered:
//
//	not a sandbox directory               ignored, logged
//	the carrier of a sandbox (carrier.go) kept for that sandbox, which
//	                                      releases it unless it runs in it
//	no valid meta.json                    removed: an interrupted create or
//	                                      delete (its container, named by no
//	                                      meta.json, is an orphan)
//	warm-pool sandbox, container gone     removed
//	  or stopped
//	warm-pool sandbox                     back to the pool, oldest first; those
//	                                      beyond the pool's size (sandboxd
//	                                      restarted with a smaller --warm-pool)
//	                                      removed; a template's pool sandbox
//	                                      or one with network removed (its
//	                                      pool refills itself)
//	idle TTL, lifetime or hibernated TTL  removed at once; but a running one
//	  over while sandboxd was down        whose --on-idle is hibernate and
//	                                      whose lifetime is not over is
//	                                      registered to hibernate at once
//	every other sandbox                   registered with the TTL it has
//	                                      left; dead, with the reason, if its
//	                                      container is gone or stopped
//
// Before any of the last three, a hibernation or wake sandboxd was in when
// it stopped is finished or undone (hibRecovery, hibernate_recover.go), and
// the TTLs are judged on the state that leaves. A container of ours that no
// meta.json names is an orphan: removed. Each user's newest registered
// sandbox becomes their current one.
//
// Volumes that are not mounted (the host rebooted) are mounted again; a
// container that runs without them (Docker restarted it at boot, before
// sandboxd was back) is restarted so that it sees them, which its driver
// reports as lost Python state.
func (m *Manager) reconcile(ctx context.Context) error {
	containers, err := m.listManaged(ctx)
	if err != nil {
		return err
	}
	entries, err := m.survey(containers)
	if err != nil {
		return err
	}
	plan := planReconcile(entries, containers, reconcilePolicy{
		now: time.Now(), reg: m.reg, onIdle: m.cfg.OnIdle, maxLifetime: m.cfg.MaxLifetime, warmPool: m.cfg.WarmPool,
	})
	return m.applyReconcile(ctx, plan)
}

// stateEntry is what reconcile finds for one entry of the state directory
// before it acts.
type stateEntry struct {
	name string
	dir  string
	// isSandboxDir: the name is a sandbox ID and the entry a directory.
	isSandboxDir bool
	// sb is the sandbox meta.json describes; nil when the file is missing
	// or invalid (metaErr) or the entry is no sandbox directory.
	sb      *sandbox
	metaErr error
	// containerID is the container meta.json names ("" for a hibernated
	// sandbox without a checkpoint); listed says Docker has it, as c.
	containerID string
	listed      bool
	c           container.Summary
}

// survey reads the state directory: one stateEntry per entry, with the
// container its meta.json names, from containers.
func (m *Manager) survey(containers map[string]container.Summary) ([]stateEntry, error) {
	root := filepath.Join(m.cfg.StateDir, sandboxesDir)
	dirents, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("read state directory: %w", err)
	}
	entries := make([]stateEntry, 0, len(dirents))
	for _, d := range dirents {
		e := stateEntry{name: d.Name(), dir: filepath.Join(root, d.Name())}
		e.isSandboxDir = core.ValidateSandboxID(e.name) == nil && d.IsDir()
		if e.isSandboxDir {
			md, err := readMeta(e.dir)
			if err != nil {
				e.metaErr = err
			} else {
				e.sb = newSandbox(e.dir, md)
				e.containerID = md.ContainerID
				e.c, e.listed = containers[md.ContainerID]
			}
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// dirAction is what reconcile does with one entry of the state directory
// (see reconcile for the rules).
type dirAction int

const (
	actIgnore           dirAction = iota // not a sandbox directory: left alone
	actRemoveDebris                      // no valid meta.json: the directory removed
	actRemovePoolDead                    // a warm-pool sandbox whose container is gone or stopped: removed
	actRemovePoolExcess                  // a warm-pool sandbox beyond the pool's size: removed
	actReturnToPool                      // a warm-pool sandbox: back to the pool
	actRemoveExpired                     // expired while sandboxd was down: removed
	actHibernateSoon                     // idle while sandboxd was down: registered to hibernate at once
	actAdopt                             // registered with the TTL it has left
	actCarrier                           // a fast-woken sandbox's carrier: its sandbox decides
	actRemoveHalfShaped                  // claimed from the warm pool, not shaped: removed (shape.go)
)

var dirActionNames = [...]string{"ignore", "remove-debris", "remove-pool-dead", "remove-pool-excess", "return-to-pool", "remove-expired", "hibernate-soon", "adopt", "carrier", "remove-half-shaped"}

func (a dirAction) String() string { return dirActionNames[a] }

// dirDecision is the plan for one entry of the state directory.
type dirDecision struct {
	action dirAction
	// recover is the interrupted hibernation or wake to finish or undo
	// first (a sandbox not in the warm pool).
	recover hibRecovery
	// current: the user's newest registered sandbox (actAdopt,
	// actHibernateSoon).
	current bool
}

// reconcilePolicy is what the plan depends on besides the survey.
type reconcilePolicy struct {
	now         time.Time
	reg         *registry // the deadlines: idle TTLs, lifetime, hibernated TTL
	onIdle      string    // Config.OnIdle
	maxLifetime time.Duration
	warmPool    int // Config.WarmPool
}

// reconcilePlan is reconcile's plan: a decision per entry of the state
// directory, in the survey's order, and the orphan containers.
type reconcilePlan struct {
	entries   []stateEntry
	decisions []dirDecision
	// pool indexes the entries going back to the warm pool, oldest first.
	pool    []int
	orphans []container.Summary // by ID
}

// planReconcile decides what reconcile does; it reads nothing but its
// arguments and changes nothing.
func planReconcile(entries []stateEntry, containers map[string]container.Summary, p reconcilePolicy) reconcilePlan {
	plan := reconcilePlan{entries: entries, decisions: make([]dirDecision, len(entries))}
	claimed := make(map[string]bool)
	byUser := make(map[userKey][]int)
	// Carriers named by a sandbox belong to it, whatever their own
	// meta.json (removed, or left by a crash) says.
	carried := make(map[string]bool)
	for _, e := range entries {
		if e.sb != nil && !e.sb.pool && e.sb.carrier != nil {
			carried[e.sb.carrier.ID] = true
			claimed[e.sb.carrier.ContainerID] = true
		}
	}
	for i, e := range entries {
		d := classifyEntry(e, p)
		if e.isSandboxDir && carried[e.name] {
			d = dirDecision{action: actCarrier}
		}
		plan.decisions[i] = d
		if e.sb != nil && d.action != actCarrier {
			claimed[e.containerID] = true
			if n := e.sb.net; n != nil && n.Holder != "" {
				claimed[n.Holder] = true // its network holder (network.go)
			}
		}
		switch d.action {
		case actReturnToPool:
			plan.pool = append(plan.pool, i)
		case actAdopt, actHibernateSoon:
			byUser[e.sb.key()] = append(byUser[e.sb.key()], i)
		}
	}
	// The oldest pool sandboxes go back to the pool, in their order.
	slices.SortStableFunc(plan.pool, func(a, b int) int { return entries[a].sb.createdAt.Compare(entries[b].sb.createdAt) })
	if len(plan.pool) > p.warmPool {
		for _, i := range plan.pool[max(p.warmPool, 0):] {
			plan.decisions[i].action = actRemovePoolExcess
		}
		plan.pool = plan.pool[:max(p.warmPool, 0)]
	}
	for id, c := range containers {
		if !claimed[id] {
			plan.orphans = append(plan.orphans, c)
		}
	}
	slices.SortFunc(plan.orphans, func(a, b container.Summary) int { return cmp.Compare(a.ID, b.ID) })
	// Newest first: the user's current sandbox (there is one per user
	// unless a dead one awaits expiry).
	for _, idx := range byUser {
		newest := slices.MaxFunc(idx, func(a, b int) int { return entries[a].sb.createdAt.Compare(entries[b].sb.createdAt) })
		plan.decisions[newest].current = true
	}
	return plan
}

// classifyEntry decides about one entry of the state directory, but for
// the warm pool's size (planReconcile).
func classifyEntry(e stateEntry, p reconcilePolicy) dirDecision {
	switch {
	case !e.isSandboxDir:
		return dirDecision{action: actIgnore}
	case e.sb == nil:
		return dirDecision{action: actRemoveDebris}
	}
	alive := e.listed && summaryAlive(e.c.State)
	sb := e.sb
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.pool {
		if !alive {
			return dirDecision{action: actRemovePoolDead}
		}
		if sb.template != "" || sb.network {
			// A template's pool (template_pool.go) refills itself with
			// the template's current version after the start; the pool
			// with network (shape.go) refills itself too, with sandboxes
			// plumbed and attached by this sandboxd.
			return dirDecision{action: actRemovePoolExcess}
		}
		return dirDecision{action: actReturnToPool}
	}
	if sb.shaping {
		// Its claim's Acquire never returned it (shape.go).
		return dirDecision{action: actRemoveHalfShaped}
	}
	rec := classifyRecovery(sb.state, sb.hib, alive)
	state, hibernatedAt := sb.state, sb.hib.HibernatedAt
	if rec == recoverFinishHibernation {
		state, hibernatedAt = core.StateHibernated, p.now
	}
	if p.now.Before(p.reg.deadline(state, hibernatedAt, sb.createdAt, sb.lastActive, sb.idleTTL)) {
		return dirDecision{action: actAdopt, recover: rec}
	}
	lifetimeLeft := p.maxLifetime == 0 || p.now.Before(sb.createdAt.Add(p.maxLifetime))
	if cmp.Or(sb.onIdle, p.onIdle) == core.OnIdleHibernate && state == core.StateRunning && lifetimeLeft {
		return dirDecision{action: actHibernateSoon, recover: rec}
	}
	return dirDecision{action: actRemoveExpired, recover: rec}
}

// applyReconcile carries out plan.
func (m *Manager) applyReconcile(ctx context.Context, plan reconcilePlan) error {
	var expired, dead, orphanDirs, halfShaped int
	for i, e := range plan.entries {
		d := plan.decisions[i]
		log := m.log.With("sandbox_id", e.name)
		switch d.action {
		case actIgnore:
			m.log.Warn("ignoring unexpected entry in the state directory", "path", e.dir)
			continue
		case actRemoveDebris:
			if !errors.Is(e.metaErr, fs.ErrNotExist) {
				log.Warn("unreadable sandbox metadata", "error", e.metaErr)
			}
			log.Info("removing sandbox directory without metadata (interrupted create or delete)", "dir", e.dir)
			orphanDirs++
			if err := removeSandboxDir(e.dir); err != nil {
				log.Error("remove orphan sandbox directory", "error", err)
			}
			continue
		case actRemovePoolDead:
			if err := m.removeEntry(ctx, e, log, "warm-pool sandbox whose container is gone or stopped"); err != nil {
				return err
			}
			continue
		case actRemovePoolExcess, actReturnToPool:
			continue // below, in the pool's order
		case actCarrier:
			continue // its sandbox's (reconcileCarrier)
		case actRemoveHalfShaped:
			halfShaped++
			if err := m.removeEntry(ctx, e, log.With("tenant", e.sb.tenant, "user_id", e.sb.userID),
				"warm-pool sandbox claimed but not yet shaped to its request when sandboxd stopped: the Acquire never returned it"); err != nil {
				return err
			}
			continue
		}
		sb := e.sb
		log = log.With("tenant", sb.tenant, "user_id", sb.userID)
		if err := m.recoverHibernation(ctx, sb, d.recover, e.listed); err != nil {
			return err
		}
		if d.action == actRemoveExpired {
			sb.mu.Lock()
			exp := m.reg.deadlineLocked(sb)
			sb.mu.Unlock()
			log.Info("removing sandbox that expired while sandboxd was down", "expired_at", exp)
			expired++
			if err := m.removeEntry(ctx, e, log, ""); err != nil {
				return err
			}
			m.publish(sb, core.LifecycleExpired, fmt.Sprintf("expired at %s, while sandboxd was down", exp.UTC().Format(time.RFC3339)))
			continue
		}
		if err := m.refreshListed(ctx, sb, e.c, e.listed); err != nil {
			return err
		}
		if err := m.reconcileCarrier(ctx, sb); err != nil {
			return err
		}
		// Dead sandboxes' volumes are mounted too: their files can still be
		// downloaded until they expire.
		if err := m.remount(ctx, sb, log); err != nil {
			return err
		}
		if sb.net != nil {
			if err := m.reattachNet(ctx, sb, m.reserveNet(sb)); err != nil {
				return err
			}
		}
		m.ensureVolumes(ctx, sb)
		if st, _ := sb.status(); st == core.StateDead {
			dead++
		}
	}

	for i, e := range plan.entries {
		if plan.decisions[i].action == actRemovePoolExcess {
			if err := m.removeEntry(ctx, e, m.log.With("sandbox_id", e.name), "warm-pool sandbox beyond the pool's size"); err != nil {
				return err
			}
		}
	}
	for _, i := range plan.pool {
		sb := plan.entries[i].sb
		if m.fastWakeOn() && plan.entries[i].c.Labels[labels.Carrier] != "true" {
			// Made while fast wake was off: it could not carry a wake.
			if err := m.removeEntry(ctx, plan.entries[i], m.log.With("sandbox_id", sb.id), "warm-pool sandbox that cannot carry a fast wake"); err != nil {
				return err
			}
			continue
		}
		if m.mountsLater && !isDir(filepath.Join(sb.dir, mountPointsDir)) {
			// Made by a sandboxd before volumes were mounted after a
			// claim: no directories for their mount points.
			if err := m.removeEntry(ctx, plan.entries[i], m.log.With("sandbox_id", sb.id), "warm-pool sandbox that cannot take volumes after its claim"); err != nil {
				return err
			}
			continue
		}
		if err := m.remount(ctx, sb, m.log.With("sandbox_id", sb.id)); err != nil {
			return err
		}
		if m.fastWakeOn() && hasVolume(sb.dir, ioDir) && hasVolume(sb.dir, workspaceDir) {
			// A remount (after a reboot) is private; a carrier's must be
			// shared (carrier.go). Harmless when it already is.
			if err := makeShared(sb.dir); err != nil {
				return err
			}
		}
		m.pool.add(sb)
	}

	for _, c := range plan.orphans {
		m.log.Info("removing orphan container (no sandbox metadata)", "container_id", c.ID,
			"sandbox_id", c.Labels[labels.SandboxID], "user_id", c.Labels[labels.UserID])
		if err := m.removeContainer(ctx, c.ID); err != nil {
			return err
		}
	}

	restored := 0
	for i, e := range plan.entries {
		switch d := plan.decisions[i]; d.action {
		case actHibernateSoon:
			m.reg.addFor(e.sb, d.current, time.Second)
			restored++
		case actAdopt:
			if m.reg.add(e.sb, d.current) {
				restored++
			}
		}
	}
	orphans := len(plan.orphans)
	for r, n := range map[core.ReconcileResult]int{core.ReconcileAdopted: restored, core.ReconcileDead: dead, core.ReconcileExpired: expired,
		core.ReconcileOrphanDir: orphanDirs, core.ReconcileOrphanContainer: orphans, core.ReconcileHalfShaped: halfShaped} {
		m.cfg.Metrics.Reconciled(r, n)
	}
	m.log.Info("reconciled sandboxes with docker", "restored", restored, "dead", dead, "warm_pool", m.pool.size(),
		"removed_expired", expired, "removed_half_shaped", halfShaped, "removed_orphan_dirs", orphanDirs, "removed_orphan_containers", orphans)
	return nil
}

// removeEntry removes a sandbox reconcile does not keep: its container, if
// Docker has it, and its directory. why, if given, is logged.
func (m *Manager) removeEntry(ctx context.Context, e stateEntry, log *slog.Logger, why string) error {
	if why != "" {
		log.Info("removing sandbox: "+why, "pool", e.sb.pool)
	}
	if e.listed {
		if err := m.removeContainer(ctx, e.containerID); err != nil {
			return err
		}
	}
	if e.sb != nil {
		m.removeNet(ctx, e.sb)
		m.dropCarrier(ctx, e.sb) // before its directory: it holds its volumes
	}
	if err := removeSandboxDir(e.dir); err != nil {
		log.Error("remove sandbox directory", "error", err)
	}
	return nil
}

// remount mounts sb's volumes if they are not, and restarts its container
// if it was running without them.
func (m *Manager) remount(ctx context.Context, sb *sandbox, log *slog.Logger) error {
	remounted, err := ensureMounted(ctx, sb.dir)
	if err != nil {
		return fmt.Errorf("mount the volumes of sandbox %s: %w", sb.id, err)
	}
	restacked, err := m.restack(ctx, sb)
	if err != nil {
		return fmt.Errorf("stack the volumes of sandbox %s on its carrier: %w", sb.id, err)
	}
	if !remounted && !restacked {
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
