package docker

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/ioproto"
)

// The warm pool keeps Config.WarmPool sandboxes created and started, with
// no owner, so that a new user's first Acquire skips container creation and
// start-up (hundreds of milliseconds) and pays only for a claim: one
// inspect and one meta.json write.
//
// What can be claimed: a pool sandbox has the server's default limits, no
// env and no network, because those are fixed when a container is created.
// A request that asks for anything else gets a sandbox created for it (a
// cold start), as it would without a pool. Everything user-specific that can
// change on a running container is applied at the claim: the tenant, user
// ID, creation and activity times, recorded in meta.json and the registry.
// The container's labels cannot change; they keep saying sandboxd.pool=true
// without a tenant or user, and meta.json is the authority.
//
// Pool sandboxes are not in the registry, so no caller sees them and idle
// expiry does not apply to them. They count against Config.MaxSandboxes.
// The pool refills in the background, one sandbox at a time, after each
// claim, after a pool sandbox dies, and at start-up; failures (image
// missing, Docker down) are retried with backoff. Pool sandboxes outlive
// sandboxd like any other: reconcile adopts them from their meta.json (and
// removes those beyond the configured size).

// Refill backoff after a failed creation.
const (
	poolRetryMin = time.Second
	poolRetryMax = time.Minute
)

// A pool sandbox is ready once its Python interpreter is: the driver starts
// one at boot, which takes a few hundred milliseconds (longer on a busy
// host), and a claim right after the container started would wait for it.
// The pool runs an empty Python command (warmupCommandID) and adds the
// sandbox once that command is done. The command stays in the log like any
// other; a user's own command with this ID would be taken for it, so the ID
// is long and says whose it is.
//
// A pool that carries fast wakes (carrier.go) also imports the image's data
// stack in that command (preloadCode), so that the kernel a woken sandbox
// inherits unpickles numpy and pandas objects without importing them first.
// The names are deleted again: a claimed sandbox's globals are a fresh
// kernel's, only its sys.modules holds more.
const (
	warmupCommandID = "sandboxd-pool-warmup"
	warmupTimeout   = 2 * time.Minute
	warmupPoll      = 10 * time.Millisecond
	preloadCode     = "import importlib as _sbx_il\n" +
		"for _sbx_m in ('dill', 'numpy', 'pandas'):\n" +
		"    try:\n" +
		"        _sbx_il.import_module(_sbx_m)\n" +
		"    except Exception:\n" +
		"        pass\n" +
		"del _sbx_il, _sbx_m\n"
)

// warmPool holds the started, unclaimed sandboxes.
type warmPool struct {
	mu      sync.Mutex
	ready   []*sandbox // oldest first: claimed first
	filling int        // creations in flight
	wake    chan struct{}
	// want is how many a server's pool keeps (Config.WarmPool,
	// Config.WarmPoolNetwork; a template's pool has its own size).
	want int
	// network: its sandboxes have their network plumbing, sealed by the
	// gateway until a claim with network (shape.go).
	network bool
}

func newWarmPool(want int, network bool) *warmPool {
	return &warmPool{wake: make(chan struct{}, 1), want: want, network: network}
}

// signal asks the refill loop to look at the pool.
func (p *warmPool) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// take removes and returns the oldest ready sandbox, or nil.
func (p *warmPool) take() *sandbox {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ready) == 0 {
		return nil
	}
	sb := p.ready[0]
	p.ready = p.ready[1:]
	return sb
}

// putBack returns a sandbox taken but not used to the front of the pool.
func (p *warmPool) putBack(sb *sandbox) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ready = append([]*sandbox{sb}, p.ready...)
}

// add puts a new sandbox at the back of the pool.
func (p *warmPool) add(sb *sandbox) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ready = append(p.ready, sb)
}

// remove takes the sandbox with this ID out of the pool, if it is there.
func (p *warmPool) remove(id string) *sandbox {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, sb := range p.ready {
		if sb.id == id {
			p.ready = append(p.ready[:i:i], p.ready[i+1:]...)
			return sb
		}
	}
	return nil
}

// has reports whether the sandbox with this ID is ready in the pool.
func (p *warmPool) has(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, sb := range p.ready {
		if sb.id == id {
			return true
		}
	}
	return false
}

// count is the number of pool sandboxes, ready or being created.
func (p *warmPool) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready) + p.filling
}

// size is the number of ready pool sandboxes.
func (p *warmPool) size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready)
}

// poolFor returns the warm pool whose sandboxes can be shaped to spec
// (shape.go), or why none can: "" when no pool is kept for spec's image.
func (m *Manager) poolFor(spec sandboxSpec) (*warmPool, core.PoolMiss) {
	var pool *warmPool
	switch {
	case spec.image == "" && spec.network && spec.from == nil:
		// Sandboxes with network come from the pool whose sandboxes have
		// their plumbing (shape.go); a start from a snapshot with network
		// starts its own.
		if m.netPool.want > 0 {
			pool = m.netPool
		} else if m.pooling() {
			return nil, core.PoolMissNetwork
		}
	case spec.image == "" && m.cfg.WarmPool > 0:
		pool = m.pool
	case spec.image != "":
		if p := m.templatePoolFor(spec); p != nil {
			pool = p.warmPool
		} else if m.pooling() {
			return nil, core.PoolMissTemplate
		}
	}
	if pool == nil {
		return nil, ""
	}
	if miss := m.poolMiss(spec); miss != "" {
		return nil, miss
	}
	if spec.from != nil {
		// Not a claim: create starts it in a pool container
		// (startCarried).
		return nil, ""
	}
	return pool, ""
}

// claimFrom gives spec's user a ready sandbox of pool (the server's, or a
// template's), shaped to spec (shape.go), or returns nil when the pool has
// none alive or the shaping failed (each counted as a miss). Dead pool
// sandboxes met on the way are removed. The caller holds the user's lock.
func (m *Manager) claimFrom(ctx context.Context, pool *warmPool, spec sandboxSpec) (*sandbox, error) {
	user := spec.user
	// Refill once the claim is over: a claimed sandbox is counted against
	// MaxSandboxes only once it is registered.
	defer pool.signal()
	// Counted as a creation meanwhile, so the refill never sees a claimed
	// sandbox in neither the pool nor the registry.
	m.creating.Add(1)
	defer m.creating.Add(-1)
	for {
		sb, err := m.takeLiveFrom(ctx, pool)
		if sb == nil || err != nil {
			if sb == nil && err == nil {
				m.cfg.Metrics.PoolMissed(core.PoolMissEmpty)
			}
			return nil, err
		}
		if sb.image != cmp.Or(spec.image, m.cfg.Image) {
			// A template's pool sandbox of a version just replaced.
			m.discard(ctx, sb, "warm-pool sandbox", "its template moved on")
			continue
		}
		shaping := m.needsShaping(sb, spec)
		now := time.Now().UTC()
		sb.mu.Lock()
		sb.tenant, sb.userID, sb.pool, sb.shaping = user.tenant, user.user, false, shaping
		// The sandbox is the user's from now on: its age and idle time
		// count from the claim, not from when the pool made it.
		sb.createdAt, sb.lastActive = now, now
		// The caller's labels and timeout go with the claim (lifetime.go).
		sb.metadata, sb.idleTTL, sb.onIdle = spec.metadata, spec.idleTTL, spec.onIdle
		sb.mu.Unlock()
		// meta.json is the commit point of the claim: written, a restart
		// restores the sandbox as the user's.
		if err := sb.persist(true); err != nil {
			m.log.Error("record the claim of a warm-pool sandbox; creating one instead", "sandbox_id", sb.id, "error", err)
			m.discardPooled(ctx, sb, "its claim could not be recorded")
			return nil, nil
		}
		if shaping {
			if err := m.shapeClaimed(ctx, sb, spec); err != nil {
				m.log.Warn("shape a claimed warm-pool sandbox; creating one instead", "sandbox_id", sb.id, "error", err)
				m.cfg.Metrics.PoolMissed(core.PoolMissShaping)
				m.discardPooled(ctx, sb, "its shaping failed: "+err.Error())
				return nil, nil
			}
		}
		if !m.reg.add(sb, true) {
			m.discardCreated(ctx, sb)
			return nil, nil
		}
		m.log.Debug("warm-pool sandbox claimed", "sandbox_id", sb.id, "tenant", user.tenant, "user_id", user.user)
		return sb, nil
	}
}

// takeLiveFrom takes pool's oldest ready sandbox whose container still
// runs, removing dead ones met on the way; nil when there is none. An
// inspect that fails puts the sandbox back and returns the error.
func (m *Manager) takeLiveFrom(ctx context.Context, pool *warmPool) (*sandbox, error) {
	for {
		sb := pool.take()
		if sb == nil {
			return nil, nil
		}
		if err := m.refresh(ctx, sb); err != nil {
			pool.putBack(sb)
			return nil, err
		}
		if st, reason := sb.status(); st != core.StateRunning {
			m.discard(ctx, sb, "warm-pool sandbox", "died in the warm pool: "+reason)
			pool.signal()
			continue
		}
		return sb, nil
	}
}

// discardPooled removes a pool sandbox of the server's pools that will
// not be used.
func (m *Manager) discardPooled(ctx context.Context, sb *sandbox, why string) {
	m.discard(ctx, sb, "warm-pool sandbox", why)
	m.serverPoolOf(sb).signal()
}

// serverPoolOf is the server's pool sb was made for: the networked one
// for a sandbox with network.
func (m *Manager) serverPoolOf(sb *sandbox) *warmPool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.network {
		return m.netPool
	}
	return m.pool
}

// pooled is how many sandboxes all warm pools hold or are making: they
// count against MaxSandboxes.
func (m *Manager) pooled() int {
	return m.pool.count() + m.netPool.count() + m.tplPools.count()
}

// poolHasRoom reports whether the server's pool p may grow by one: it is
// below its size, and the sandboxes alive plus the pools stay under
// MaxSandboxes. It reserves the slot (filling) when it says yes.
func (m *Manager) poolHasRoom(p *warmPool) bool {
	all, _ := m.reg.countRunning("")
	all += int(m.creating.Load()) + m.pooled()
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.ready) + p.filling
	if n >= p.want || (m.cfg.MaxSandboxes > 0 && all >= m.cfg.MaxSandboxes) {
		return false
	}
	p.filling++
	return true
}

// refillLoop keeps the server's pool p full until ctx ends: sandboxes are
// created one at a time, whenever the pool is signalled and has room.
func (m *Manager) refillLoop(ctx context.Context, p *warmPool) {
	retry := newBackoff(poolRetryMin, poolRetryMax)
	for {
		for ctx.Err() == nil && m.poolHasRoom(p) {
			sb, err := m.create(ctx, m.poolSpec(p))
			if err == nil {
				if err = m.warmUp(ctx, sb); err != nil {
					m.discardPooled(ctx, sb, "its warm-up failed")
				}
			}
			p.mu.Lock()
			p.filling--
			if err == nil {
				p.ready = append(p.ready, sb)
			}
			p.mu.Unlock()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				m.log.Warn("warm pool: create sandbox; will retry", "error", err, "retry_in", retry.delay())
				if !retry.wait(ctx) {
					return
				}
				continue
			}
			retry.reset()
			m.cfg.Metrics.PoolRefilled()
			m.log.Debug("warm pool: sandbox ready", "sandbox_id", sb.id, "network", p.network, "ready", p.size())
		}
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		}
	}
}

// warmUp runs the warm-up command in a new pool sandbox and waits for its
// done event. No user code has run in the sandbox yet, but the events file
// is read through iolog all the same, as everything under io/ is.
func (m *Manager) warmUp(ctx context.Context, sb *sandbox) error {
	rec := ioproto.Record{
		Type: ioproto.KindExec, CommandID: warmupCommandID, Language: ioproto.LanguagePython,
		TimeoutMS: warmupTimeout.Milliseconds(),
	}
	if m.fastWakeOn() {
		rec.Code = preloadCode
	}
	_, err := sb.io.AppendContext(ctx, rec, nil)
	if err != nil {
		return fmt.Errorf("submit warm-up command: %w", err)
	}
	evs, err := sb.io.EventsContext(ctx, warmupCommandID, 0, m.log.With("sandbox_id", sb.id))
	if err != nil {
		return err
	}
	defer evs.Close()
	ctx, cancel := context.WithTimeout(ctx, warmupTimeout)
	defer cancel()
	tick := time.NewTicker(warmupPoll)
	defer tick.Stop()
	for {
		if done, err := evs.Drain(warmedUp); done || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("warm-up command not done: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// warmedUp fails a warm-up whose command did not end well.
func warmedUp(ev core.Event) error {
	if ev.Type == ioproto.EventDone && ev.Status != ioproto.StatusOK {
		return fmt.Errorf("warm-up command ended %s: %s", ev.Status, ev.Reason)
	}
	return nil
}
