package orchestrator

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"sync"
	"time"

	"github.com/jellydator/ttlcache/v3"

	"github.com/sandboxd/sandboxd/orchestrator/iolog"
)

// sandbox is the Manager's in-memory record of one sandbox. The identity
// fields are fixed once the sandbox is registered (a warm-pool sandbox gets
// its tenant, user and creation time when it is claimed, before that); the
// rest is guarded by mu.
type sandbox struct {
	id          string
	tenant      string // empty while in the warm pool
	userID      string // empty while in the warm pool
	dir         string // host directory: meta.json, io/, workspace/
	containerID string
	image       string
	runtime     string
	limits      Limits
	network     bool
	createdAt   time.Time

	mu         sync.Mutex
	pool       bool // waiting, unclaimed, in the warm pool
	state      State
	reason     string
	lastActive time.Time
	dirty      bool          // lastActive or state not yet written to meta.json
	removing   bool          // destroy has begun: meta.json must not be rewritten
	gone       bool          // destroyed: every handle to it is stale
	deadCh     chan struct{} // closed when the sandbox dies, to wake followers
	goneCh     chan struct{} // closed when the sandbox is destroyed

	// metaMu serialises meta.json writes so an older snapshot never
	// overwrites a newer one.
	metaMu sync.Mutex

	// io is the sandbox's io/ directory: the command log (io/stdin) with
	// its index of command IDs, and the commands' events.
	io *iolog.Dir
}

// newSandbox builds the record for metadata m in directory dir.
func newSandbox(dir string, m meta) *sandbox {
	sb := &sandbox{
		id:          m.ID,
		tenant:      m.Tenant,
		userID:      m.UserID,
		pool:        m.Pool,
		dir:         dir,
		containerID: m.ContainerID,
		image:       m.Image,
		runtime:     m.Runtime,
		limits:      m.Limits,
		network:     m.Network,
		createdAt:   m.CreatedAt,
		state:       StateRunning,
		lastActive:  m.LastActiveAt,
		deadCh:      make(chan struct{}),
		goneCh:      make(chan struct{}),
	}
	if sb.lastActive.IsZero() {
		sb.lastActive = m.CreatedAt
	}
	if m.State == StateDead {
		sb.state, sb.reason = StateDead, m.StateReason
		close(sb.deadCh)
	}
	sb.io = iolog.New(filepath.Join(dir, ioDir))
	return sb
}

// metaLocked returns the sandbox's meta.json content. Call with mu held.
func (sb *sandbox) metaLocked() meta {
	return meta{
		ID:           sb.id,
		Tenant:       sb.tenant,
		UserID:       sb.userID,
		Pool:         sb.pool,
		Network:      sb.network,
		ContainerID:  sb.containerID,
		Image:        sb.image,
		Runtime:      sb.runtime,
		Limits:       sb.limits,
		CreatedAt:    sb.createdAt,
		LastActiveAt: sb.lastActive,
		State:        sb.state,
		StateReason:  sb.reason,
	}
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
	if sb.state == StateDead || sb.removing {
		return false
	}
	sb.state, sb.reason, sb.dirty = StateDead, reason, true
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

// status returns the state and, for a dead sandbox, the reason.
func (sb *sandbox) status() (State, string) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.state, sb.reason
}

// deadError is the error for an operation that needs a live sandbox.
func (sb *sandbox) deadError() error {
	_, reason := sb.status()
	return preconditionf("sandbox %s is dead: %s; acquire a new one", sb.id, reason)
}

// registry holds the live sandboxes: a ttlcache keyed by sandbox ID whose
// item TTLs implement idle expiry and the maximum lifetime, plus each user's
// current sandbox. Unclaimed warm-pool sandboxes are not in it (see
// pool.go): they belong to nobody, so no caller can see them, and they do
// not expire.
//
// An item's TTL is always the time left until the sandbox's expiry: the
// earlier of last activity + idle TTL and creation + max lifetime. Refreshing
// a sandbox therefore re-sets its item with a new TTL rather than using
// ttlcache's touch-on-hit (which would extend by the item's previous TTL, not
// the idle TTL, for items restored after a restart or capped by the
// lifetime).
type registry struct {
	idleTTL     time.Duration
	maxLifetime time.Duration
	cache       *ttlcache.Cache[string, *sandbox]

	// mu orders lookups-then-sets in touch against removals, and guards
	// current.
	mu      sync.Mutex
	current map[userKey]*sandbox // the user's current sandbox
}

// userKey names a user: user IDs are unique within a tenant only.
type userKey struct {
	tenant, user string
}

// String is the key's form for keyed locks: '/' occurs in neither part.
func (k userKey) String() string { return k.tenant + "/" + k.user }

// key is sb's user.
func (sb *sandbox) key() userKey { return userKey{sb.tenant, sb.userID} }

func newRegistry(idleTTL, maxLifetime time.Duration) *registry {
	return &registry{
		idleTTL:     idleTTL,
		maxLifetime: maxLifetime,
		cache: ttlcache.New(
			ttlcache.WithDisableTouchOnHit[string, *sandbox](),
		),
		current: make(map[userKey]*sandbox),
	}
}

// expiry returns when a sandbox last active at lastActive and created at
// created expires.
func (r *registry) expiry(created, lastActive time.Time) time.Time {
	exp := lastActive.Add(r.idleTTL)
	if r.maxLifetime > 0 {
		if end := created.Add(r.maxLifetime); end.Before(exp) {
			exp = end
		}
	}
	return exp
}

// add registers sb with the TTL left from its last activity. It reports
// false, registering nothing, when sb has already expired.
func (r *registry) add(sb *sandbox, makeCurrent bool) bool {
	sb.mu.Lock()
	ttl := time.Until(r.expiry(sb.createdAt, sb.lastActive))
	sb.mu.Unlock()
	if ttl <= 0 {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cache.Set(sb.id, sb, ttl)
	if makeCurrent {
		r.current[sb.key()] = sb
	}
	return true
}

// get returns the registered sandbox id, or nil when there is none (never
// existed, expired, destroyed).
func (r *registry) get(id string) *sandbox {
	item := r.cache.Get(id)
	if item == nil {
		return nil
	}
	sb := item.Value()
	sb.mu.Lock()
	gone := sb.gone || sb.removing
	sb.mu.Unlock()
	if gone {
		return nil
	}
	return sb
}

// touch records activity on sb now and restarts its idle TTL. It reports
// false when sb is no longer registered (expired or destroyed meanwhile).
func (r *registry) touch(sb *sandbox) bool {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	// Under r.mu, nothing removes sb between this check and the Set below;
	// expiry by the cache's own loop can still race, which the eviction
	// handler resolves (see Manager.onEvicted).
	if r.get(sb.id) != sb {
		return false
	}
	sb.mu.Lock()
	sb.lastActive, sb.dirty = now, true
	ttl := r.expiry(sb.createdAt, now).Sub(now)
	sb.mu.Unlock()
	if ttl <= 0 {
		return false // the maximum lifetime is over; the cache expires it
	}
	r.cache.Set(sb.id, sb, ttl)
	return true
}

// rearm keeps sb registered for d more, used to retry a removal that failed.
func (r *registry) rearm(sb *sandbox, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cache.Set(sb.id, sb, d)
}

// remove unregisters sb (if it is still the item under its ID) and clears it
// as its user's current sandbox.
func (r *registry) remove(sb *sandbox) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if item := r.cache.Get(sb.id); item != nil && item.Value() == sb {
		r.cache.Delete(sb.id)
	}
	if r.current[sb.key()] == sb {
		delete(r.current, sb.key())
	}
}

// currentOf returns the user's current sandbox, or nil.
func (r *registry) currentOf(user userKey) *sandbox {
	r.mu.Lock()
	sb := r.current[user]
	r.mu.Unlock()
	if sb == nil || r.get(sb.id) != sb {
		return nil
	}
	return sb
}

// all returns every registered sandbox.
func (r *registry) all() []*sandbox {
	items := r.cache.Items()
	out := make([]*sandbox, 0, len(items))
	for _, it := range items {
		if sb := it.Value(); r.get(sb.id) == sb {
			out = append(out, sb)
		}
	}
	return out
}

// countRunning returns the number of registered sandboxes that are alive,
// and how many of them belong to tenant.
func (r *registry) countRunning(tenant string) (all, ofTenant int) {
	for _, sb := range r.all() {
		if st, _ := sb.status(); st == StateRunning {
			all++
			if sb.tenant == tenant {
				ofTenant++
			}
		}
	}
	return all, ofTenant
}

// keyedMutex is a set of mutexes by key (user ID) that exist only while
// in use, so it does not grow with the number of users ever seen. Waiting
// respects the caller's context: creating a sandbox can take seconds.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyedLock
}

type keyedLock struct {
	ch   chan struct{} // holds a token while locked
	refs int
}

// lock acquires key's mutex and returns its unlock function.
func (k *keyedMutex) lock(ctx context.Context, key string) (func(), error) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = make(map[string]*keyedLock)
	}
	l := k.locks[key]
	if l == nil {
		l = &keyedLock{ch: make(chan struct{}, 1)}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()

	release := func() {
		k.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}
