package docker

import (
	"errors"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/iolog"
)

// sandbox is the Manager's handle on one sandbox: its identity, its
// lifecycle state, its metadata file (meta.json) and its io/ directory;
// the registry, the warm pool and the Manager hold pointers to it, and
// state changes with rules (death, removal) go through its methods. The
// identity fields are
// fixed once the sandbox is registered (a warm-pool sandbox gets its tenant,
// user and creation time when it is claimed, before that); the rest is
// guarded by mu.
//
// Lock order, where locks nest (outermost first; a lock may be taken while
// holding only locks to its left):
//
//	a user's lock (Manager.userLocks) → registry.mu → sandbox.mu
//	the io/ directory's append lock (iolog.Dir: HoldAppends, Append's
//	    ready callback) → sandbox.mu
//	sandbox.metaMu → sandbox.mu
//
// sandbox.mu is innermost: nothing is locked while it is held. warmPool.mu,
// volumes.mu, templates.mu, a template build's tplRun.mu and
// iolog.Watcher's lock are leaves, never held while taking another (and
// no Docker call is made under templates.mu).
//
// The rule that keeps one sandbox from stalling the others: no lock that a
// caller of another sandbox can need (registry.mu, a user's lock) is ever
// held while waiting on something a sandbox controls, and no lock is held
// while reading sandbox-controlled data. Everything under io/ is written by
// the sandbox (a forged 16 TiB command log, a FIFO, an events file that
// never ends); iolog reads it with no lock held (the log is loaded outside
// the append lock), bounded, and stoppable by the caller's context and by
// Delete (iolog.Dir.Close). registry.mu therefore never nests the append
// lock: a removal is claimed under registry.mu with sandbox.mu alone
// (markRemoving), and waits for an append in progress (a bounded write)
// only after registry.mu is released (claimRemoval).
type sandbox struct {
	id     string
	tenant string // empty while in the warm pool
	userID string // empty while in the warm pool
	dir    string // host directory: meta.json, io/, workspace/
	// containerID changes when the sandbox hibernates ("") and wakes;
	// guarded by mu from registration on (currentContainer).
	containerID string
	image       string
	runtime     string
	limits      core.Limits
	network     bool
	createdAt   time.Time
	// metadata is the caller's labels; fixed like the identity fields (a
	// warm-pool sandbox gets them when claimed). Never modified in place.
	metadata map[string]string
	// volumes are its named volumes' mounts, by volume ID; fixed at
	// creation.
	volumes []core.VolumeMount
	// template and templateVersion say which template version's image it
	// runs ("" and 0: the server's image); fixed at creation.
	template        string
	templateVersion int

	mu      sync.Mutex
	pool    bool // waiting, unclaimed, in the warm pool
	shaping bool // claimed from the pool, not yet shaped (shape.go)
	// volsMounted: its volumes were mounted into its running container
	// (meta.VolumesMounted, shape_volumes.go).
	volsMounted bool
	state       core.State
	reason      string
	lastActive  time.Time
	idleTTL     time.Duration // the sandbox's own idle TTL; 0 = the server's (registry.idleOf)
	onIdle      string        // the sandbox's own Options.OnIdle; "" = Config.OnIdle (Manager.onIdleOf)
	dirty       bool          // lastActive or state not yet written to meta.json
	removing    bool          // destroy has begun: meta.json must not be rewritten
	gone        bool          // destroyed: every handle to it is stale
	deadCh      chan struct{} // closed when the sandbox dies, to wake followers
	goneCh      chan struct{} // closed when the sandbox is destroyed

	// metaMu serialises meta.json writes so an older snapshot never
	// overwrites a newer one.
	metaMu sync.Mutex

	// io is the sandbox's io/ directory: the command log (io/stdin) with
	// its index of command IDs, and the commands' events.
	io *iolog.Dir

	health ioHealth // its driver's health in /io/driver.json, as last read (health.go)

	// env is the caller's Options.Env, for a woken sandbox's new container.
	env map[string]string
	// hib (mu) is the hibernation state machine, persisted in meta.json.
	hib hibMeta
	// netPolicy (mu) is a networked sandbox's egress policy, in full
	// (secrets included: never shown to callers, see snapshot); nil
	// without network. UpdateNetworkPolicy replaces it, never modifying
	// it in place.
	netPolicy *core.NetworkPolicy
	// net (mu) is a networked sandbox's address and holder (network.go);
	// nil for a sandbox without network.
	net *netMeta
	// carrier (mu) is the warm-pool sandbox whose container carries this
	// one since a fast wake (carrier.go); nil otherwise.
	carrier *carrierMeta
}

// newSandbox builds the record for metadata m in directory dir.
func newSandbox(dir string, m meta) *sandbox {
	sb := &sandbox{
		id:          m.ID,
		tenant:      m.Tenant,
		userID:      m.UserID,
		pool:        m.Pool,
		shaping:     m.Shaping,
		volsMounted: m.VolumesMounted,
		dir:         dir,
		containerID: m.ContainerID,
		image:       m.Image,
		runtime:     m.Runtime,
		limits:      m.Limits,
		network:     m.Network,
		createdAt:   m.CreatedAt,
		state:       core.StateRunning,
		lastActive:  m.LastActiveAt,
		metadata:    m.Metadata,
		volumes:     mountsFromMeta(m.Volumes),
		template:    m.Template,
		idleTTL:     max(m.IdleTTL, 0),
		onIdle:      m.OnIdle,
		env:         m.Env,
		deadCh:      make(chan struct{}),
		goneCh:      make(chan struct{}),
	}
	sb.templateVersion = m.TemplateVersion
	if sb.lastActive.IsZero() {
		sb.lastActive = m.CreatedAt
	}
	if m.State == core.StateDead {
		sb.state, sb.reason = core.StateDead, m.StateReason
		close(sb.deadCh)
	}
	if m.Hib != nil {
		sb.hib = *m.Hib
	}
	if m.Network {
		sb.netPolicy = m.NetworkPolicy.policy()
		if sb.netPolicy == nil {
			sb.netPolicy = &core.NetworkPolicy{} // what network meant before policies
		}
	}
	if m.Net != nil {
		n := *m.Net
		sb.net = &n
	}
	if m.State == core.StateHibernated {
		sb.state = core.StateHibernated
	}
	if m.Carrier != nil {
		c := *m.Carrier
		sb.carrier = &c
	}
	sb.io = iolog.New(filepath.Join(dir, ioDir))
	return sb
}

// metaLocked returns the sandbox's meta.json content. Call with mu held.
func (sb *sandbox) metaLocked() meta {
	return meta{
		ID:             sb.id,
		Tenant:         sb.tenant,
		UserID:         sb.userID,
		Pool:           sb.pool,
		Shaping:        sb.shaping,
		VolumesMounted: sb.volsMounted,
		Network:        sb.network,
		ContainerID:    sb.containerID,
		Image:          sb.image,
		Runtime:        sb.runtime,
		Limits:         sb.limits,
		CreatedAt:      sb.createdAt,
		LastActiveAt:   sb.lastActive,
		State:          sb.state,
		StateReason:    sb.reason,
		Metadata:       sb.metadata,
		IdleTTL:        sb.idleTTL,
		OnIdle:         sb.onIdle,
		Env:            sb.env,
		Hib:            sb.hib.forMeta(),
		NetworkPolicy:  policyToMeta(sb.netPolicy),
		Net:            sb.netForMeta(),
		Carrier:        sb.carrierForMeta(),
		Volumes:        mountsToMeta(sb.volumes),
		// The template version its image is: kept across a restart, for
		// its snapshots and forks, and for the templates' clean-up.
		Template:        sb.template,
		TemplateVersion: sb.templateVersion,
	}
}

// options returns the options sb was made with, as they stand now (its
// network policy and idle TTL as last set), in full: the policy's header
// values are secrets, so they are never shown to a caller. A snapshot
// records them, and its forks are made with them (snapshots.go). Every
// field of core.Options is set but FromSnapshot, which is sb's state
// rather than an option of it: TestSandboxOptionsCarryEveryField fails
// on a field added to core.Options and not carried here.
func (sb *sandbox) options() core.Options {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	o := core.Options{
		Limits:      sb.limits,
		Env:         maps.Clone(sb.env),
		Network:     sb.network,
		Metadata:    maps.Clone(sb.metadata),
		IdleTimeout: sb.idleTTL,
		OnIdle:      sb.onIdle,
		Volumes:     slices.Clone(sb.volumes),
		Template:    sb.template,
	}
	if sb.network && sb.netPolicy != nil {
		p := sb.netPolicy.Clone()
		o.NetworkPolicy = &p
	}
	return o
}

// carried reports whether sb runs in a warm-pool container that carries
// it (carrier.go).
func (sb *sandbox) carried() bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.carrier != nil
}

// carrierForMeta copies sb.carrier for meta.json. Call with mu held.
func (sb *sandbox) carrierForMeta() *carrierMeta {
	if sb.carrier == nil {
		return nil
	}
	c := *sb.carrier
	return &c
}

// netForMeta copies sb.net for meta.json. Call with mu held.
func (sb *sandbox) netForMeta() *netMeta {
	if sb.net == nil {
		return nil
	}
	n := *sb.net
	return &n
}

// persist writes meta.json if anything changed since the last write (or
// always, with force). It does nothing once destruction has begun, so a
// late write cannot resurrect a deleted sandbox's metadata.
func (sb *sandbox) persist(force bool) error {
	sb.metaMu.Lock()
	defer sb.metaMu.Unlock()
	sb.mu.Lock()
	if sb.removing || (!sb.dirty && !force) {
		sb.mu.Unlock()
		return nil
	}
	m := sb.metaLocked()
	sb.dirty = false
	sb.mu.Unlock()
	if err := writeMeta(sb.dir, m); err != nil {
		// Try again at the next flush, unless the directory is gone (removed
		// behind our back): retrying every second would only flood the log.
		if !errors.Is(err, fs.ErrNotExist) {
			sb.mu.Lock()
			sb.dirty = true
			sb.mu.Unlock()
		}
		return err
	}
	return nil
}

// markDead records the sandbox's death. It reports false when the sandbox was
// already dead or is being destroyed (death during our own removal is not
// news). Death is final: a container that comes back later (an operator's
// `docker start`) does not revive the sandbox, because callers have already
// been told its state is lost. The caller persists the death and then calls
// signalDead.
func (sb *sandbox) markDead(reason string) bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.state == core.StateDead || sb.state == core.StateHibernated || sb.hib.Phase != "" || sb.removing {
		return false // a hibernation removes the container on purpose
	}
	sb.state, sb.reason, sb.dirty = core.StateDead, reason, true
	return true
}

// signalDead wakes everyone waiting on the sandbox's death.
func (sb *sandbox) signalDead() {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if !isClosed(sb.deadCh) {
		close(sb.deadCh)
	}
}

// currentContainer returns the sandbox's container ID ("" while hibernated).
func (sb *sandbox) currentContainer() string {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.containerID
}

// status returns the state and, for a dead sandbox, the reason.
func (sb *sandbox) status() (core.State, string) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.state, sb.reason
}

// deadError is the error for an operation that needs a live sandbox.
func (sb *sandbox) deadError() error {
	_, reason := sb.status()
	return core.SandboxDead(sb.id, reason)
}

// key is sb's user.
func (sb *sandbox) key() userKey { return userKey{sb.tenant, sb.userID} }

// markRemoving claims sb for removal: no other removal, append or metadata
// write happens from now on (an append checks removing with appends held,
// in its ready callback). It reports false when a removal already has sb.
// It takes sandbox.mu only, so the registry may call it with its lock held;
// the caller then waits for an append already past its check with
// sb.io.HoldAppends, after releasing the registry.
func (sb *sandbox) markRemoving() bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.removing || sb.gone {
		return false
	}
	sb.removing = true
	return true
}

// unmarkRemoving undoes markRemoving after a removal failed.
func (sb *sandbox) unmarkRemoving() {
	sb.mu.Lock()
	sb.removing = false
	sb.mu.Unlock()
}

// markGone records that sb is destroyed, waking its followers.
func (sb *sandbox) markGone() {
	sb.mu.Lock()
	sb.gone = true
	close(sb.goneCh)
	sb.mu.Unlock()
}

// reasonOrUnknown returns the reason a dead sandbox died.
func (sb *sandbox) reasonOrUnknown() string {
	if _, r := sb.status(); r != "" {
		return r
	}
	return "unknown reason"
}
