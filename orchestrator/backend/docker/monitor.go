package docker

import (
	"context"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"

	"github.com/sandboxd/sandboxd/orchestrator/labels"
)

// How sandboxd learns that a container died, cheaply and promptly:
//
//   - The monitor follows Docker's event stream, filtered to sandboxd's
//     containers and to die/destroy events. A die is confirmed with one
//     inspect (the restart policy may already be restarting the container,
//     which is not a death). This is what keeps Submit and Follow, which
//     only read the in-memory state, up to date without a Docker call each.
//   - Get inspects the container (one cheap call), Acquire too before it
//     hands out the user's current sandbox, so they are right even if the
//     event stream lags or is reconnecting.
//   - List, and the monitor after each reconnect, compare the registry with
//     one ContainerList.
//   - Where a running sandbox's state is brought up to date (refresh,
//     refreshListed), its health is read too from /io/driver.json when that
//     file changed (health.go); never on a command's path.

// managedFilter selects the containers this Manager owns: sandboxd's label
// and this state directory's (another sandboxd on the same engine with
// another StateDir has its own).
func (m *Manager) managedFilter() filters.Args {
	return filters.NewArgs(
		filters.Arg("label", labels.Managed+"=true"),
		filters.Arg("label", labels.StateDir+"="+m.cfg.StateDir),
	)
}

// markDead records a death once, logs it and persists it at once (not at the
// next flush): a death must survive a crash of sandboxd.
func (m *Manager) markDead(sb *sandbox, reason string) {
	if !sb.markDead(reason) {
		return
	}
	m.log.Warn("sandbox died", "sandbox_id", sb.id, "user_id", sb.userID, "container_id", sb.currentContainer(), "reason", reason)
	if err := sb.persist(false); err != nil {
		m.log.Error("persist sandbox metadata", "sandbox_id", sb.id, "error", err)
	}
	m.publish(sb, core.LifecycleDied, reason)
	sb.signalDead()
}

// refresh inspects a live sandbox's container and records its death if it is
// not running, or else reads its health if that changed (health.go). A dead
// sandbox stays dead without asking Docker.
func (m *Manager) refresh(ctx context.Context, sb *sandbox) error {
	if st, _ := sb.status(); st == core.StateDead || sb.asleep() {
		return nil
	}
	info, err := m.docker.ContainerInspect(ctx, sb.currentContainer())
	if err != nil {
		if isDockerNotFound(err) {
			m.markDead(sb, reasonRemoved)
			return nil
		}
		return dockerError("inspect container", err)
	}
	if alive, reason := containerAlive(info.State); !alive {
		m.markDead(sb, reason)
	} else {
		m.refreshHealth(sb)
	}
	return nil
}

// refreshAll brings every live sandbox's state up to date with one
// ContainerList (plus an inspect for each container found stopped, to learn
// its exit code).
func (m *Manager) refreshAll(ctx context.Context) error {
	// Snapshot the registry before listing: a sandbox registered later has a
	// container the list may not show yet, and must not be declared removed.
	sbs := m.reg.all()
	holders := make(map[*sandbox]string) // as before the list: a holder made since is not in it
	for _, sb := range sbs {
		if h := sb.holder(); h != "" && !sb.asleep() {
			holders[sb] = h
		}
	}
	byID, err := m.listManaged(ctx)
	if err != nil {
		return err
	}
	for _, sb := range sbs {
		c, listed := byID[sb.currentContainer()]
		if err := m.refreshListed(ctx, sb, c, listed); err != nil {
			return err
		}
		if holder := holders[sb]; holder != "" && holder == sb.holder() && !sb.asleep() {
			if h, ok := byID[holder]; !ok {
				m.markDead(sb, reasonHolderRemoved)
			} else if !summaryAlive(h.State) {
				m.markDead(sb, "its network holder container is "+string(h.State))
			}
		}
	}
	return nil
}

// refreshListed brings a live sandbox's state up to date from its
// container's entry in a ContainerList (listed=false: it has none): a
// container that is gone means death, one that is not running is
// inspected (refresh) to learn why; a running one's health is read if it
// changed (health.go). A dead sandbox stays dead.
func (m *Manager) refreshListed(ctx context.Context, sb *sandbox, c container.Summary, listed bool) error {
	if st, _ := sb.status(); st == core.StateDead || sb.asleep() {
		return nil
	}
	switch {
	case !listed:
		m.markDead(sb, reasonRemoved)
	case !summaryAlive(c.State):
		return m.refresh(ctx, sb)
	default:
		m.refreshHealth(sb)
	}
	return nil
}

// monitor follows Docker's events until ctx ends, reconnecting with backoff
// when the stream breaks (engine restart, ...). After each reconnect it
// re-lists the containers, since events may have been missed meanwhile.
func (m *Manager) monitor(ctx context.Context, since time.Time) {
	retry := newBackoff(time.Second, 30*time.Second)
	for {
		started := time.Now()
		err := m.followEvents(ctx, since)
		if ctx.Err() != nil {
			return
		}
		// Ask for a replay from just before the break: handling an event
		// twice is harmless, missing one is not.
		since = time.Now().Add(-time.Second)
		if time.Since(started) > time.Minute {
			retry.reset()
		}
		m.log.Warn("docker event stream broke; reconnecting", "error", err, "retry_in", retry.delay())
		if !retry.wait(ctx) {
			return
		}
		if err := m.refreshAll(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn("resynchronise container states", "error", err)
		}
	}
}

// followEvents handles events until the stream ends and returns why.
func (m *Manager) followEvents(ctx context.Context, since time.Time) error {
	f := m.managedFilter()
	f.Add("type", string(events.ContainerEventType))
	f.Add("event", string(events.ActionDie))
	f.Add("event", string(events.ActionDestroy))
	f.Add("event", string(events.ActionStart)) // gVisor's network (onNetContainerEvent)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the client's stream goroutine
	msgs, errs := m.docker.Events(ctx, events.ListOptions{
		Since:   since.Format(time.RFC3339Nano),
		Filters: f,
	})
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errs:
			return err
		case msg := <-msgs:
			m.handleEvent(ctx, msg)
		}
	}
}

// handleEvent updates a sandbox's state from a container event.
func (m *Manager) handleEvent(ctx context.Context, msg events.Message) {
	// A carrier's container is labelled with its pool sandbox's ID; the
	// sandbox it carries owns its events (carrier.go).
	id := m.carrierOwner(msg.Actor.Attributes[labels.SandboxID])
	if msg.Actor.Attributes[labels.NetHolder] == "true" {
		if !m.handlePoolHolderEvent(ctx, id, msg) {
			m.handleHolderEvent(id, msg)
		}
		return
	}
	if msg.Action == events.ActionStart {
		// A networked sandbox's container under gVisor cares, and one
		// whose volumes were mounted after its start (shape_volumes.go):
		// a restarted container lacks them, and its driver waits for them.
		if sb := m.reg.get(id); sb != nil && !sb.asleep() && sb.currentContainer() == msg.Actor.ID {
			m.onNetContainerEvent(ctx, sb, string(msg.Action), time.Unix(0, msg.TimeNano))
			m.ensureVolumes(ctx, sb)
		}
		return
	}
	if msg.Actor.Attributes[labels.Pool] == "true" && m.handlePoolEvent(ctx, id, msg) {
		return
	}
	sb := m.reg.get(id)
	if sb == nil || sb.asleep() || sb.currentContainer() != msg.Actor.ID {
		return // not (or no longer) one of ours: e.g. our own removal
	}
	if msg.Action == events.ActionDie {
		m.onNetContainerEvent(ctx, sb, string(msg.Action), time.Unix(0, msg.TimeNano))
	}
	switch msg.Action {
	case events.ActionDie:
		// Docker puts a container it is about to restart in state
		// "restarting" before it emits die, so one inspect tells a death
		// from a restart.
		if err := m.refresh(ctx, sb); err != nil && ctx.Err() == nil {
			m.log.Warn("inspect container after die event", "sandbox_id", sb.id, "error", err)
		} else if st, _ := sb.status(); st == core.StateRunning {
			m.log.Info("sandbox container exited and is being restarted by docker; its driver resumes from /io",
				"sandbox_id", sb.id, "user_id", sb.userID, "exit_code", msg.Actor.Attributes["exitCode"])
		}
	case events.ActionDestroy:
		m.markDead(sb, reasonRemoved)
	}
}

// handleHolderEvent handles an event of a networked sandbox's holder: its
// death is the sandbox's (a holder is only `sleep`: it dies when someone
// kills or removes it, and a restarted one has a new, unplumbed network
// namespace). Our own removals (hibernation, deletion) are not deaths.
func (m *Manager) handleHolderEvent(id string, msg events.Message) {
	sb := m.reg.get(id)
	if sb == nil || sb.asleep() {
		return
	}
	sb.mu.Lock()
	ours := sb.net != nil && sb.net.Holder == msg.Actor.ID
	sb.mu.Unlock()
	if !ours {
		return
	}
	switch msg.Action {
	case events.ActionDie:
		m.markDead(sb, "its network holder container exited with code "+cmpReason(msg.Actor.Attributes["exitCode"], "unknown"))
	case events.ActionDestroy:
		m.markDead(sb, reasonHolderRemoved)
	}
}

// handlePoolHolderEvent handles an event of the network holder of a
// sandbox in the pool with network: one that dies or goes takes its
// sandbox's network with it, so the sandbox leaves the pool (and the
// refill replaces it) rather than be claimed without a way out. It
// reports false when the sandbox is not in that pool.
func (m *Manager) handlePoolHolderEvent(ctx context.Context, id string, msg events.Message) bool {
	if msg.Action != events.ActionDie && msg.Action != events.ActionDestroy {
		return m.netPool.has(id)
	}
	sb := m.netPool.remove(id)
	if sb == nil {
		return false
	}
	if sb.holder() != msg.Actor.ID {
		m.netPool.putBack(sb)
		return true
	}
	m.discardPooled(ctx, sb, "its network holder died in the warm pool")
	return true
}

// handlePoolEvent handles an event of an unclaimed warm-pool sandbox: one
// that died leaves the pool (and the refill replaces it). It reports false
// when the sandbox is not in the pool (claimed since, or not ours).
func (m *Manager) handlePoolEvent(ctx context.Context, id string, msg events.Message) bool {
	pool := m.pool
	sb := pool.remove(id)
	if sb == nil {
		pool = m.netPool
		if sb = pool.remove(id); sb == nil {
			return false
		}
	}
	if sb.containerID != msg.Actor.ID {
		pool.putBack(sb)
		return true
	}
	if msg.Action == events.ActionDie {
		err := m.refresh(ctx, sb)
		if st, _ := sb.status(); err != nil || st == core.StateRunning {
			// Restarting (or unknown): it stays in the pool; a claim
			// inspects it again.
			pool.putBack(sb)
			return true
		}
	}
	_, reason := sb.status()
	if msg.Action == events.ActionDestroy {
		reason = reasonRemoved
	}
	m.discardPooled(ctx, sb, "died in the warm pool: "+reason)
	return true
}
