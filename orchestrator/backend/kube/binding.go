package kube

import (
	"context"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// A user's binding is a Lease named after userHash(tenant, user) whose
// holder is the user's current sandbox. Creating it is how replicas agree
// on one sandbox per user without a lock service: the API server lets one
// create succeed, and a replacement moves it with a conditional update.
const (
	bindingPrefix = "sbu-"
	// annReplacedID and annReplacedReason on a binding name the sandbox the
	// current one replaced, and why it died.
	annReplacedID     = "sandboxd.io/replaced-sandbox-id"
	annReplacedReason = "sandboxd.io/replaced-reason"
)

func bindingName(key string) string { return bindingPrefix + key }

// maxAcquireRounds bounds the retries of an Acquire that keeps losing
// races to other replicas (each loss means another replica made progress).
const maxAcquireRounds = 8

// Acquire returns the user's current sandbox, creating one (from the warm
// pool when the options allow) if the user has none or theirs is dead, as
// the Docker backend's Acquire does. Replicas racing for one user agree
// through the user's binding: the loser adopts the winner's sandbox and
// deletes the Pod it made.
func (m *Manager) Acquire(ctx context.Context, userID string, opts core.Options) (core.AcquireResult, error) {
	return m.acquire(ctx, userID, opts, false)
}

// acquire is Acquire; fork lets opts.FromSnapshot name a fork's hidden
// snapshot.
func (m *Manager) acquire(ctx context.Context, userID string, opts core.Options, fork bool) (core.AcquireResult, error) {
	caller := core.CallerOf(ctx)
	if err := m.checkOpen(); err != nil {
		return core.AcquireResult{}, err
	}
	if err := m.refuseOptions(opts); err != nil {
		return core.AcquireResult{}, err
	}
	var image, waking string
	var vols []podVolume
	if opts.FromSnapshot != "" {
		from, err := m.fromSnapshot(ctx, opts.FromSnapshot, fork)
		if err != nil {
			return core.AcquireResult{}, err
		}
		image, waking = from.image, from.waking
		if len(opts.Volumes) == 0 {
			vols = m.keptMounts(from.volumes) // the snapshot's sandbox's, those still there
		}
		if opts, err = m.startOptions(from, opts); err != nil {
			return core.AcquireResult{}, err
		}
	}
	network, err := m.networkOf(opts)
	if err != nil {
		return core.AcquireResult{}, err
	}
	if len(opts.Volumes) > 0 {
		var err error
		if vols, err = m.resolveMounts(ctx, opts.Volumes); err != nil {
			return core.AcquireResult{}, err
		}
	}
	key := userHash(caller.Tenant, userID)
	start := time.Now()
	for round := 0; round < maxAcquireRounds; round++ {
		lease, err := m.currentBinding(ctx, key)
		if err != nil {
			return core.AcquireResult{}, err
		}
		var replacedID, replacedReason string
		if lease != nil {
			id := ptr.Deref(lease.Spec.HolderIdentity, "")
			cur, err := m.currentSandbox(ctx, id)
			if err != nil {
				return core.AcquireResult{}, err
			}
			switch {
			case cur.pod != nil:
				m.touch(id, cur.pod)
				m.cfg.Metrics.Acquired(core.AcquireExisting, time.Since(start))
				return core.AcquireResult{Sandbox: m.describe(ctx, cur.pod), Woke: cur.woke}, nil
			case cur.dead:
				replacedID, replacedReason = id, cur.reason
			}
			// Otherwise sandboxd removed it (expiry, DeleteSandbox): a new
			// sandbox, with nothing to report, as under Docker.
		}
		p, kind, err := m.newSandboxPod(ctx, caller.Tenant, userID, opts, image, waking, vols, network)
		if err != nil {
			return core.AcquireResult{}, err
		}
		id := p.Labels[labelSandboxID]
		if err := m.bind(ctx, key, lease, id, replacedID, replacedReason, caller.Tenant, userID); err != nil {
			// Another replica bound the user first: ours goes, theirs is
			// adopted in the next round.
			m.removePod(context.WithoutCancel(ctx), p, "lost the race for its user to another replica")
			if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
				continue
			}
			return core.AcquireResult{}, apiError("bind the user's sandbox", err)
		}
		if replacedID != "" {
			m.retire(context.WithoutCancel(ctx), replacedID, replacedReason)
		}
		p, err = m.awaitReady(ctx, p)
		if err != nil {
			return core.AcquireResult{}, err
		}
		var woke *core.WakeInfo
		if waking != "" {
			// Its snapshot's state, before anything else runs in it.
			if p, woke, err = m.finishWakeInfo(ctx, p); err != nil {
				return core.AcquireResult{}, err
			}
		}
		m.touch(id, p)
		log := m.log.With("sandbox_id", id, "tenant", caller.Tenant, "user_id", userID, "kind", kind)
		if replacedID != "" {
			log.Info("sandbox created, replacing a dead one", "replaced_id", replacedID, "replaced_reason", replacedReason)
		} else {
			log.Info("sandbox created")
		}
		m.publish(p, core.LifecycleCreated, "")
		m.cfg.Metrics.Acquired(kind, time.Since(start))
		// A new sandbox (or a pool Pod just claimed) has run nothing: its
		// health is not read on the way.
		return core.AcquireResult{Sandbox: m.sandboxOf(p), Created: true, ReplacedID: replacedID, ReplacedReason: replacedReason, Woke: woke}, nil
	}
	return core.AcquireResult{}, core.Errorf(core.ErrUnavailable, "gave up acquiring a sandbox for user %s after losing %d races to other replicas; try again", userID, maxAcquireRounds)
}

// current is what became of a user's bound sandbox: alive and ready
// (pod), dead (with the reason), or neither (removed by sandboxd: a Pod
// deleted behind its back keeps its finalizer, so a missing Pod is one
// sandboxd removed).
type current struct {
	pod    *corev1.Pod
	dead   bool
	reason string
	// woke is the wake's outcome when this acquire woke it.
	woke *core.WakeInfo
}

// currentSandbox looks at sandbox id, waiting while it starts.
func (m *Manager) currentSandbox(ctx context.Context, id string) (current, error) {
	p, err := m.pod(ctx, id)
	if err != nil {
		return current{}, err
	}
	gone, dead, reason := p == nil, false, ""
	if p != nil {
		gone, dead, reason, _ = podState(p)
	}
	switch {
	case gone && m.claims():
		// Hibernated (or being hibernated, or woken): awake says which.
		c, err := m.claimOf(ctx, id)
		if err != nil || c == nil || (c.Annotations[annHibernated] == "" && (p == nil || p.Annotations[annDeleting] != hibernatedMark)) {
			return current{}, err
		}
		q, w, err := m.awake(ctx, id)
		switch core.ClassOf(err) {
		case nil:
			return current{pod: q, woke: w}, nil
		case core.ErrNotFound:
			return current{}, nil
		}
		return current{}, err
	case gone:
		return current{}, nil
	case dead:
		return current{dead: true, reason: reason}, nil
	}
	if p.Annotations[annHibernating] != "" || p.Annotations[annWaking] != "" {
		q, w, err := m.awake(ctx, id)
		if err != nil {
			return current{}, err
		}
		return current{pod: q, woke: w}, nil
	}
	ready, err := m.awaitReady(ctx, p)
	switch core.ClassOf(err) {
	case nil:
		return current{pod: ready}, nil
	case core.ErrNotFound:
		return current{}, nil
	case core.ErrFailedPrecondition: // it died while starting
		if q, _ := m.pod(ctx, id); q != nil {
			p = q
		}
		_, _, reason, _ = podState(p)
		return current{dead: true, reason: reason}, nil
	}
	return current{}, err
}

// currentBinding reads the user's binding from the cache, or from the API
// server when the cache has none (it may lag another replica's create).
func (m *Manager) currentBinding(ctx context.Context, key string) (*coordinationv1.Lease, error) {
	if l := m.binding(key); l != nil {
		return l, nil
	}
	l, err := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace).Get(ctx, bindingName(key), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, apiError("get the user's binding", err)
	}
	return l, nil
}

// bind makes sandbox id the user's: creates the binding when old is nil,
// else moves old to id, conditional on old's resourceVersion.
func (m *Manager) bind(ctx context.Context, key string, old *coordinationv1.Lease, id, replacedID, replacedReason, tenant, userID string) error {
	leases := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace)
	now := metav1.NewMicroTime(time.Now())
	if old == nil {
		_, err := leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: bindingName(key), Namespace: m.cfg.Namespace,
				Labels:      map[string]string{labelManaged: managedBy, labelUser: key},
				Annotations: map[string]string{annTenant: tenant, annUserID: userID}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(id), AcquireTime: &now},
		}, metav1.CreateOptions{})
		return err
	}
	l := old.DeepCopy()
	l.Spec.HolderIdentity = ptr.To(id)
	l.Spec.AcquireTime = &now
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[annReplacedID] = replacedID
	l.Annotations[annReplacedReason] = truncate(replacedReason, 1024)
	_, err := leases.Update(ctx, l, metav1.UpdateOptions{}) // conditional: l.ResourceVersion
	return err
}

// newSandboxPod gives a user a new sandbox Pod: a claimed warm-pool Pod
// when r (resolved by core.Validating) allows one and the pool has one,
// else a new Pod, after checking the caps. image ("": Config.Image) and
// waking (annWaking) are a start from a snapshot's (fromSnapshot).
func (m *Manager) newSandboxPod(ctx context.Context, tenant, userID string, r core.Options, image, waking string, vols []podVolume, network *core.NetworkPolicy) (*corev1.Pod, core.AcquireKind, error) {
	if err := m.checkCaps(tenant); err != nil {
		return nil, "", err
	}
	s := podSpec{tenant: tenant, userID: userID, limits: r.Limits, env: r.Env, meta: r.Metadata, idleTTL: r.IdleTimeout, onIdle: r.OnIdle, now: time.Now(),
		image: image, waking: waking, volumes: vols}
	// A claimed pool Pod takes what a running Pod can (shape.go); for the
	// rest, a Pod of its own.
	if miss := m.poolMiss(r, image, vols, network); miss == "" {
		if p := m.claimShaped(ctx, s); p != nil {
			return p, core.AcquireWarmPool, nil
		}
	} else if m.cfg.WarmPool > 0 {
		m.cfg.Metrics.PoolMissed(miss)
	}
	s.id = core.NewSandboxID()
	if network != nil {
		var err error
		if s.network, err = m.newNetRecord(s.id, 1, *network); err != nil {
			return nil, "", err
		}
	}
	p, err := m.createPod(ctx, s, buildPod(&m.cfg, s))
	if err != nil {
		return nil, "", apiError("create the sandbox pod", err)
	}
	return p, core.AcquireCold, nil
}

// checkCaps refuses a new sandbox beyond MaxSandboxes or
// MaxSandboxesPerTenant, counting the live ones in the cache.
func (m *Manager) checkCaps(tenant string) error {
	if m.cfg.MaxSandboxes == 0 && m.cfg.MaxSandboxesPerTenant == 0 {
		return nil
	}
	all, ofTenant := 0, 0
	for _, p := range m.userPods() {
		if gone, dead, _, _ := podState(p); gone || dead {
			continue
		}
		all++
		if p.Annotations[annTenant] == tenant {
			ofTenant++
		}
	}
	if c := m.cfg.MaxSandboxesPerTenant; c > 0 && ofTenant >= c {
		return core.TenantCapReached(tenant, c)
	}
	if c := m.cfg.MaxSandboxes; c > 0 && all >= c {
		return core.ServerCapReached(c)
	}
	return nil
}
