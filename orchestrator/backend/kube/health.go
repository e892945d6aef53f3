package kube

import (
	"context"
	"sync"
	"time"

	"github.com/jellydator/ttlcache/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/cmdlog"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// A sandbox's health is what its driver says in /io/driver.json, as
// cmdlog.HealthReason reads it on both backends. Here /io is inside the
// Pod: sandboxd asks the Pod's io sidecar (its Status call, which reads the
// file through iolog's bounded read; the client bounds and checks the
// answer). Everything the sidecar answers is the sandbox's, hence hostile,
// and a sidecar may be slow or never answer: a read is bounded by
// healthCallTimeout, and one that fails says nothing (the sandbox is
// reported healthy, and the failure logged), never an error of the call
// that wanted it.
//
// The reason read is kept per Pod (by UID) for healthFresh, failures
// included, so repeated Gets cost one call per Pod and per healthFresh.
// Get, and Acquire's answer for an existing sandbox, wait up to healthWait
// for a read of a stale Pod; List starts the reads of all its stale Pods
// at once (at most healthParallel calls in flight on this replica) and
// waits up to healthWait for them all, whatever their number; a read not
// done by then says nothing for that answer, and finishes for the next
// one. Reads run on the replica's own context, not the caller's: what
// they read serves everyone. Only running, ready Pods are asked; a dead
// or gone sandbox has no health, and a Pod's entry goes with it
// (forgetPod).
const (
	// healthFresh is how long a read (or a failure to read) is used.
	healthFresh = 5 * time.Second
	// healthCallTimeout bounds one Status call to a sidecar.
	healthCallTimeout = time.Second
	// healthWait bounds how long Get, Acquire and List wait for reads.
	healthWait = time.Second
	// healthParallel bounds the Status calls in flight on a replica.
	healthParallel = 8
	// healthCapacity bounds the Pods kept (a backstop: entries go with
	// their Pods).
	healthCapacity = 1 << 16
)

// healthCache is a replica's knowledge of its sandboxes' health.
//
// mu is held only around the maps, the cache (ttlcache's lock) and a read
// of the Pod cache (the lister's); it is never held with Manager.mu.
type healthCache struct {
	// reasons: Pod UID → its reason, while fresh.
	reasons *ttlcache.Cache[string, string]
	// slots bounds the calls in flight (healthParallel).
	slots chan struct{}
	// callTimeout and wait are healthCallTimeout and healthWait (shorter
	// in tests).
	callTimeout, wait time.Duration
	// ctx is the reads' context, cancelled when the replica closes.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu sync.Mutex
	// reading: Pod UID → closed when its read in flight ends.
	reading map[string]chan struct{}
	// reported: Pod UID → the reason its driver last gave when not
	// healthy, for logging changes.
	reported map[string]string
	stopped  bool
}

func newHealthCache() *healthCache {
	ctx, cancel := context.WithCancel(context.Background())
	return &healthCache{
		reasons: ttlcache.New(ttlcache.WithTTL[string, string](healthFresh), ttlcache.WithCapacity[string, string](healthCapacity),
			ttlcache.WithDisableTouchOnHit[string, string]()),
		slots: make(chan struct{}, healthParallel), callTimeout: healthCallTimeout, wait: healthWait,
		ctx: ctx, cancel: cancel,
		reading: map[string]chan struct{}{}, reported: map[string]string{},
	}
}

// close cancels the reads in flight and waits for them to end.
func (h *healthCache) close() {
	h.mu.Lock()
	h.stopped = true
	h.mu.Unlock()
	h.cancel()
	h.wg.Wait()
}

// forget drops Pod uid's entry.
func (h *healthCache) forget(uid string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	h.reasons.Delete(uid)
	delete(h.reported, uid)
	h.mu.Unlock()
}

// hasHealth says whether Pod p's sandbox can report its health: running,
// with its sidecar and driver up.
func hasHealth(p *corev1.Pod) bool {
	gone, dead, _, ready := podState(p)
	return !gone && !dead && ready
}

// describe is sandboxOf(p) with its health, waiting up to healthWait (or
// until ctx ends) for a read if the one kept is stale.
func (m *Manager) describe(ctx context.Context, p *corev1.Pod) core.Sandbox {
	sb := m.sandboxOf(p)
	if sb.State != core.StateRunning || !hasHealth(p) {
		return sb
	}
	if r, ok := m.cachedHealth(p); ok {
		sb.HealthReason = r
		return sb
	}
	m.awaitHealth(ctx, []<-chan struct{}{m.readHealth(p)})
	sb.HealthReason, _ = m.cachedHealth(p)
	return sb
}

// describeAll fills in the health of the running sandboxes in sbs (whose
// Pods are pods, in the same order), reading the stale ones at once and
// waiting up to healthWait in all.
func (m *Manager) describeAll(ctx context.Context, pods []*corev1.Pod, sbs []core.Sandbox) {
	var reads []<-chan struct{}
	for i, p := range pods {
		if sbs[i].State != core.StateRunning || !hasHealth(p) {
			continue
		}
		if _, ok := m.cachedHealth(p); !ok {
			reads = append(reads, m.readHealth(p))
		}
	}
	m.awaitHealth(ctx, reads)
	for i, p := range pods {
		if sbs[i].State == core.StateRunning && hasHealth(p) {
			sbs[i].HealthReason, _ = m.cachedHealth(p)
		}
	}
}

// awaitHealth waits for reads to end, up to healthWait or ctx's end.
func (m *Manager) awaitHealth(ctx context.Context, reads []<-chan struct{}) {
	if len(reads) == 0 {
		return
	}
	t := time.NewTimer(m.health.wait)
	defer t.Stop()
	for _, done := range reads {
		select {
		case <-done:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// cachedHealth is Pod p's reason while fresh.
func (m *Manager) cachedHealth(p *corev1.Pod) (string, bool) {
	if it := m.health.reasons.Get(string(p.UID)); it != nil {
		return it.Value(), true
	}
	return "", false
}

// closedChan is a read that never started.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// readHealth starts a read of Pod p's health unless one is in flight, and
// returns a channel closed when it ends.
func (m *Manager) readHealth(p *corev1.Pod) <-chan struct{} {
	h, uid := m.health, string(p.UID)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return closedChan
	}
	if done := h.reading[uid]; done != nil {
		return done
	}
	done := make(chan struct{})
	h.reading[uid] = done
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		defer func() {
			h.mu.Lock()
			delete(h.reading, uid)
			h.mu.Unlock()
			close(done)
		}()
		select {
		case h.slots <- struct{}{}:
		case <-h.ctx.Done():
			return
		}
		reason, ok := m.askHealth(p)
		<-h.slots
		if h.ctx.Err() == nil {
			m.keepHealth(p, reason, ok)
		}
	}()
	return done
}

// askHealth asks Pod p's sidecar for its driver's status, within
// healthCallTimeout. ok is false when it did not answer (the failure is
// logged); the reason is then "".
func (m *Manager) askHealth(p *corev1.Pod) (reason string, ok bool) {
	ctx, cancel := context.WithTimeout(m.health.ctx, m.health.callTimeout)
	defer cancel()
	c, err := m.io(ctx, p)
	if err == nil {
		ds, derr := c.DriverStatus(ctx)
		if derr == nil {
			return cmdlog.HealthReason(ds), true
		}
		err = derr
	}
	switch {
	case core.ClassOf(err) == core.ErrNotFound:
		return "", true // the driver has not written its status (yet): nothing to say
	case m.health.ctx.Err() != nil:
		return "", false // the replica closes
	}
	m.log.Warn("ignoring the sandbox's driver status: its io sidecar did not answer it", "sandbox_id", p.Labels[labelSandboxID],
		"timeout", m.health.callTimeout, "error", err)
	return "", false
}

// keepHealth keeps what a read of Pod p's health found, if the Pod is
// still there, and logs a change of what its driver says.
func (m *Manager) keepHealth(p *corev1.Pod, reason string, answered bool) {
	h, uid, id := m.health, string(p.UID), p.Labels[labelSandboxID]
	h.mu.Lock()
	defer h.mu.Unlock()
	// A Pod the informer has dropped has had its entry forgotten: one is
	// not made again. (The informer updates its cache before it calls
	// forgetPod, which takes h.mu.)
	if q, err := m.pods.Pods(p.Namespace).Get(p.Name); err != nil || q.UID != p.UID {
		return
	}
	h.reasons.Set(uid, reason, ttlcache.DefaultTTL)
	if !answered {
		return
	}
	switch old := h.reported[uid]; {
	case reason == old:
	case reason != "":
		m.log.Warn("sandbox unhealthy", "sandbox_id", id, "reason", reason)
		h.reported[uid] = reason
	default:
		m.log.Info("sandbox healthy again", "sandbox_id", id)
		delete(h.reported, uid)
	}
}
