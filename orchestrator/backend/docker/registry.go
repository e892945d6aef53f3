package docker

import (
	"context"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/jellydator/ttlcache/v3"
)

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
//
// The registry's state is its own: the cache and mu are used only by its
// methods. Where its lock nests with others, see the lock order on sandbox.
type registry struct {
	idleTTL     time.Duration
	maxLifetime time.Duration
	// maxIdleTTL caps a sandbox's own idle TTL (Config.MaxIdleTTL), also one
	// persisted under a larger maximum before a restart; 0 = no cap.
	maxIdleTTL time.Duration
	// hibernatedTTL is how long a hibernated sandbox is kept (Config.HibernatedTTL).
	hibernatedTTL time.Duration
	cache         *ttlcache.Cache[string, *sandbox]

	// mu orders lookups-then-sets in touch against removals (claim), and
	// guards current.
	mu      sync.Mutex
	current map[userKey]*sandbox // the user's current sandbox

	loopDone     chan struct{} // closed when the cache's expiry loop returns
	stopEviction func()        // unsubscribes the expiry handler, waiting for running ones
}

// userKey names a user: user IDs are unique within a tenant only.
type userKey struct {
	tenant, user string
}

// String is the key's form for keyed locks: '/' occurs in neither part.
func (k userKey) String() string { return k.tenant + "/" + k.user }

func newRegistry(idleTTL, maxLifetime time.Duration) *registry {
	return &registry{
		idleTTL:     idleTTL,
		maxLifetime: maxLifetime,
		cache: ttlcache.New(
			ttlcache.WithDisableTouchOnHit[string, *sandbox](),
		),
		current:  make(map[userKey]*sandbox),
		loopDone: make(chan struct{}),
	}
}

// start runs the expiry loop: onExpired is called, in a goroutine of its
// own, for each sandbox whose TTL ran out. (Deletions are evictions too,
// but Delete has already done the work, so they call nothing.)
func (r *registry) start(onExpired func(*sandbox)) {
	r.stopEviction = r.cache.OnEviction(func(_ context.Context, reason ttlcache.EvictionReason, item *ttlcache.Item[string, *sandbox]) {
		if reason == ttlcache.EvictionReasonExpired {
			onExpired(item.Value())
		}
	})
	go func() {
		defer close(r.loopDone)
		r.cache.Start()
	}()
}

// stop ends the expiry loop and waits for the onExpired calls in progress.
// Cache.Stop returns at once if the loop's goroutine has not begun yet (and
// the loop would then run forever), so it is repeated until the goroutine
// has ended.
func (r *registry) stop() {
	for done := false; !done; {
		r.cache.Stop()
		select {
		case <-r.loopDone:
			done = true
		case <-time.After(10 * time.Millisecond):
		}
	}
	r.stopEviction()
}

// idleOf returns the idle TTL in force for a sandbox whose own is own (0 =
// the server's).
func (r *registry) idleOf(own time.Duration) time.Duration {
	switch {
	case own <= 0:
		return r.idleTTL
	case r.maxIdleTTL > 0 && own > r.maxIdleTTL:
		return r.maxIdleTTL
	}
	return own
}

// expiry returns when a sandbox last active at lastActive, created at
// created, with its own idle TTL own (0 = the server's), expires.
func (r *registry) expiry(created, lastActive time.Time, own time.Duration) time.Time {
	exp := lastActive.Add(r.idleOf(own))
	if r.maxLifetime > 0 {
		if end := created.Add(r.maxLifetime); end.Before(exp) {
			exp = end
		}
	}
	return exp
}

// deadlineLocked is when sb expires: a running (or dead) one by expiry, a
// hibernated one hibernatedTTL after its hibernation. sb.mu is held.
func (r *registry) deadlineLocked(sb *sandbox) time.Time {
	return r.deadline(sb.state, sb.hib.HibernatedAt, sb.createdAt, sb.lastActive, sb.idleTTL)
}

// deadline is deadlineLocked for a sandbox in state, hibernated at
// hibernatedAt (if it is), created at created, last active at lastActive,
// with its own idle TTL own (0 = the server's).
func (r *registry) deadline(state core.State, hibernatedAt, created, lastActive time.Time, own time.Duration) time.Time {
	if state == core.StateHibernated {
		return hibernatedAt.Add(r.hibernatedTTL)
	}
	return r.expiry(created, lastActive, own)
}

// add registers sb with the TTL left from its last activity. It reports
// false, registering nothing, when sb has already expired.
func (r *registry) add(sb *sandbox, makeCurrent bool) bool {
	sb.mu.Lock()
	ttl := time.Until(r.deadlineLocked(sb))
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

// addFor registers sb for ttl, whatever its deadline says.
func (r *registry) addFor(sb *sandbox, makeCurrent bool, ttl time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cache.Set(sb.id, sb, ttl)
	if makeCurrent {
		r.current[sb.key()] = sb
	}
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
func (r *registry) touch(sb *sandbox) bool { return r.touchWith(sb, 0) }

// touchWith is touch that first sets sb's own idle TTL to idle, when idle is
// positive (SetTimeout), so the new TTL counts from now.
func (r *registry) touchWith(sb *sandbox, idle time.Duration) bool {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	// Under r.mu, nothing removes sb between this check and the Set below;
	// expiry by the cache's own loop can still race, which the eviction
	// handler resolves (see claim with expired=true).
	if r.get(sb.id) != sb {
		return false
	}
	sb.mu.Lock()
	sb.lastActive, sb.dirty = now, true
	if idle > 0 {
		sb.idleTTL = idle
	}
	ttl := r.deadlineLocked(sb).Sub(now)
	sb.mu.Unlock()
	if ttl <= 0 {
		return false // the maximum lifetime is over; the cache expires it
	}
	r.cache.Set(sb.id, sb, ttl)
	return true
}

// claim runs mark (which marks sb as being removed) with the registry
// locked, so that touch cannot re-register sb between the check and the
// mark. For an expiry (expired=true) it reports false without calling mark
// when sb is registered again: it was used just as it expired, and lives.
func (r *registry) claim(sb *sandbox, expired bool, mark func() bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if expired {
		if it := r.cache.Get(sb.id); it != nil && it.Value() == sb {
			return false
		}
	}
	return mark()
}

// reset re-registers sb with the TTL its state gives it now (after a
// hibernation or a wake), unless it was removed meanwhile.
func (r *registry) reset(sb *sandbox) {
	sb.mu.Lock()
	ttl := time.Until(r.deadlineLocked(sb))
	gone := sb.gone || sb.removing
	sb.mu.Unlock()
	if gone {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cache.Set(sb.id, sb, max(ttl, time.Millisecond))
}

// holdExpired keeps an expired sb registered for d while its expiry is
// handled other than by removal (a hibernation), so callers still find
// it. It reports false when sb was registered again meanwhile (used just
// as it expired): then there is nothing to do.
func (r *registry) holdExpired(sb *sandbox, d time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if it := r.cache.Get(sb.id); it != nil && it.Value() == sb {
		return false
	}
	r.cache.Set(sb.id, sb, d)
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
		if st, _ := sb.status(); st == core.StateRunning {
			all++
			if sb.tenant == tenant {
				ofTenant++
			}
		}
	}
	return all, ofTenant
}
