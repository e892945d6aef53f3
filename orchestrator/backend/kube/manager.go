package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	coordlisters "k8s.io/client-go/listers/coordination/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Manager is the Kubernetes backend's domain: the methods of
// orchestrator/door/grpcapi's Manager over sandbox Pods. It is safe for
// concurrent use, and any number of replicas may run at once.
//
// Lock order: Manager.mu and Manager.chMu are leaves, and so is the
// health cache's (health.go), never held with Manager.mu; no lock is held
// during a call to the API server or to a sidecar.
type Manager struct {
	cfg Config
	log *slog.Logger

	factory informers.SharedInformerFactory
	pods    corelisters.PodLister
	leases  coordlisters.LeaseLister
	// pvcs lists the sandboxes' state volumes (claim.go) and the named
	// volumes' claims (volumes.go); nil without Config.StorageClass and
	// Config.VolumeClass.
	pvcs corelisters.PersistentVolumeClaimLister

	// chMu guards ch, which is closed (and replaced) whenever the cache
	// changes: waiters for a Pod's readiness or death select on it.
	chMu sync.Mutex
	ch   chan struct{}

	mu sync.Mutex
	// active is this replica's last-activity record of sandboxes it served
	// (activity.go).
	active map[string]*activity
	// conns are the open connections to io sidecars, by Pod UID.
	conns map[string]*ioEntry
	// egressDone is, by Pod UID, the policy this replica last gave the
	// Pod's egress gateway (egressKey, network.go).
	egressDone map[string]string
	// egressReads are, by sandbox ID, the networked sandboxes' egress
	// counters as the leader last read them (egress_metrics.go).
	egressReads map[string]egressRead
	// watchCalls and watchDirs count this replica's WatchDirectory calls
	// in progress and the directories their sidecars watch, against
	// Policy.WatchCaps (watch.go).
	watchCalls, watchDirs core.Usage
	// leader is true while this replica leads.
	leader bool
	// creating counts warm-pool Pods this replica created that the cache
	// has not shown yet (pool.go).
	creating map[string]time.Time
	// hibernating are the sandboxes this replica's leader is hibernating
	// (chores.go).
	hibernating map[string]bool

	// health is what this replica last read of its sandboxes' health
	// (health.go).
	health *healthCache
	// stats reads the kubelets for per-sandbox metrics (nil without
	// Config.KubeletTransport).
	stats *kubeletStats
	// snaps is the snapshot directory (snapshots.go); nil without
	// Config.SnapshotDir.
	snaps *snapStore

	stop   context.CancelFunc
	done   sync.WaitGroup
	closed chan struct{}
}

// New starts a Manager: informers on the namespace's sandbox Pods and
// bindings (it returns once their caches are filled), the leader election,
// and the leader's chores.
func New(ctx context.Context, cfg Config) (*Manager, error) {
	if err := cfg.applyDefaults(); err != nil {
		return nil, err
	}
	if cfg.Identity == "" {
		host, _ := os.Hostname()
		cfg.Identity = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if cfg.DialIO == nil {
		cfg.DialIO = dialSidecar
	}
	m := &Manager{
		cfg: cfg, log: cfg.Logger.With("backend", "kubernetes"),
		ch: make(chan struct{}), active: map[string]*activity{}, conns: map[string]*ioEntry{}, egressDone: map[string]string{},
		creating: map[string]time.Time{}, hibernating: map[string]bool{}, closed: make(chan struct{}), health: newHealthCache(),
	}
	if cfg.KubeletTransport != nil {
		m.stats = newKubeletStats(cfg.KubeletTransport, cfg.KubeletPort)
	}
	if cfg.SnapshotDir != "" {
		if st, err := os.Stat(cfg.SnapshotDir); err != nil || !st.IsDir() {
			return nil, core.Invalidf("config: the snapshot directory %s is not a directory: %v", cfg.SnapshotDir, err)
		}
		m.snaps = &snapStore{dir: cfg.SnapshotDir}
	}
	// The API server must answer before anything else: a wrong kubeconfig
	// or missing RBAC fails the start with a clear message.
	if _, err := cfg.Client.CoreV1().Pods(cfg.Namespace).List(ctx, metav1.ListOptions{Limit: 1, LabelSelector: labelManaged + "=" + managedBy}); err != nil {
		return nil, core.Errorf(core.ErrUnavailable, "kubernetes: listing pods in namespace %s: %w", cfg.Namespace, err)
	}
	m.factory = informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0,
		informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = labelManaged + "=" + managedBy }))
	podInf := m.factory.Core().V1().Pods()
	leaseInf := m.factory.Coordination().V1().Leases()
	m.pods, m.leases = podInf.Lister(), leaseInf.Lister()
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { m.notify() },
		UpdateFunc: func(any, any) { m.notify() },
		DeleteFunc: func(obj any) { m.forgetPod(obj); m.notify() },
	}
	if _, err := podInf.Informer().AddEventHandler(handler); err != nil {
		return nil, err
	}
	if _, err := leaseInf.Informer().AddEventHandler(handler); err != nil {
		return nil, err
	}
	if cfg.StorageClass != "" || cfg.VolumeClass != "" {
		pvcInf := m.factory.Core().V1().PersistentVolumeClaims()
		m.pvcs = pvcInf.Lister()
		if _, err := pvcInf.Informer().AddEventHandler(handler); err != nil {
			return nil, err
		}
	}
	runCtx, cancel := context.WithCancel(context.Background())
	m.stop = cancel
	m.factory.Start(runCtx.Done())
	syncCtx, cancelSync := context.WithTimeout(ctx, time.Minute)
	defer cancelSync()
	for typ, ok := range m.factory.WaitForCacheSync(syncCtx.Done()) {
		if !ok {
			cancel()
			m.factory.Shutdown()
			return nil, core.Errorf(core.ErrUnavailable, "kubernetes: the %v cache did not sync", typ)
		}
	}
	m.done.Add(2)
	go func() { defer m.done.Done(); m.elect(runCtx) }()
	go func() { defer m.done.Done(); m.flushLoop(runCtx) }()
	m.log.Info("kubernetes backend started", "namespace", cfg.Namespace, "image", cfg.Image, "identity", cfg.Identity,
		"runtime_class", cfg.RuntimeClass, "warm_pool", cfg.WarmPool)
	return m, nil
}

// Policy is the policy this Manager applies, its defaults filled in: what
// core.Validating in front of it must enforce.
func (m *Manager) Policy() core.Policy { return m.cfg.Policy }

// Close stops the replica: its informers, its chores and its connections.
// Sandboxes keep running; the last activities are written first.
func (m *Manager) Close() error {
	select {
	case <-m.closed:
		return nil
	default:
	}
	close(m.closed)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	m.flush(ctx, true)
	cancel()
	m.stop()
	m.done.Wait()
	m.health.close()
	m.factory.Shutdown()
	m.mu.Lock()
	for uid, e := range m.conns {
		e.conn.Close()
		delete(m.conns, uid)
	}
	m.mu.Unlock()
	return nil
}

// elect runs the leader election until ctx ends; the leader runs the
// chores (chores.go).
func (m *Manager) elect(ctx context.Context) {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: "sandboxd-leader", Namespace: m.cfg.Namespace},
		Client:     m.cfg.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: m.cfg.Identity},
	}
	ld := m.cfg.LeaseDuration
	for ctx.Err() == nil {
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: ld, RenewDeadline: ld * 2 / 3, RetryPeriod: max(ld/8, 200*time.Millisecond),
			ReleaseOnCancel: true,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					m.setLeader(true)
					m.log.Info("leading: running the warm pool, expiry and death records")
					if m.cfg.EgressCNI {
						go m.egressLoop(ctx) // ends with ctx, as chores
					}
					m.chores(ctx)
				},
				OnStoppedLeading: func() { m.setLeader(false) },
			},
		})
	}
}

func (m *Manager) setLeader(b bool) {
	m.mu.Lock()
	m.leader = b
	m.mu.Unlock()
}

// notify wakes everyone waiting for a change of the cache.
func (m *Manager) notify() {
	m.chMu.Lock()
	close(m.ch)
	m.ch = make(chan struct{})
	m.chMu.Unlock()
}

// changed returns a channel closed at the next change of the cache.
func (m *Manager) changed() <-chan struct{} {
	m.chMu.Lock()
	defer m.chMu.Unlock()
	return m.ch
}

// forgetPod drops what this replica keeps for a Pod that is gone.
func (m *Manager) forgetPod(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	m.mu.Lock()
	if e := m.conns[string(p.UID)]; e != nil {
		e.conn.Close()
		delete(m.conns, string(p.UID))
	}
	delete(m.active, p.Labels[labelSandboxID])
	delete(m.egressDone, string(p.UID))
	m.mu.Unlock()
	m.health.forget(string(p.UID))
}

// pod returns sandbox id's Pod from the cache, or from the API server when
// the cache has not seen it yet (another replica just created it); nil
// when it does not exist.
func (m *Manager) pod(ctx context.Context, id string) (*corev1.Pod, error) {
	p, err := m.pods.Pods(m.cfg.Namespace).Get(podName(id))
	if err == nil {
		return p, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, err
	}
	return m.podFromAPI(ctx, id)
}

// podFromAPI reads sandbox id's Pod from the API server, past the cache;
// nil when it does not exist.
func (m *Manager) podFromAPI(ctx context.Context, id string) (*corev1.Pod, error) {
	p, err := m.cfg.Client.CoreV1().Pods(m.cfg.Namespace).Get(ctx, podName(id), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, apiError("get pod", err)
	}
	if p.Labels[labelManaged] != managedBy || p.Labels[labelSandboxID] != id {
		return nil, nil // a Pod of that name that is not ours
	}
	return p, nil
}

// visible returns sandbox id's Pod when the caller in ctx may see it.
// A sandbox sandboxd is deleting, a pool Pod (one being shaped after its
// claim too) and another tenant's sandbox are ErrNotFound.
func (m *Manager) visible(ctx context.Context, id string) (*corev1.Pod, error) {
	if err := m.checkOpen(); err != nil {
		return nil, err
	}
	p, err := m.pod(ctx, id)
	if err == nil && p != nil && (p.Labels[labelPool] == "true" || p.Annotations[annShaping] != "") {
		// The cache may not show a claim yet, or the end of its shaping
		// (shape.go): the claimant's first call follows its Acquire by
		// milliseconds, and this replica's informer (or, through another
		// replica, theirs) can lag behind that. The API server decides;
		// only a caller naming a pool sandbox's ID pays the extra read,
		// and only a claimant knows one.
		p, err = m.podFromAPI(ctx, id)
	}
	if err != nil {
		return nil, err
	}
	if p == nil || p.Labels[labelPool] == "true" || p.Annotations[annShaping] != "" || !core.CallerOf(ctx).Sees(p.Annotations[annTenant]) {
		return nil, core.SandboxNotFound(id)
	}
	if gone, _, _, _ := podState(p); gone {
		return nil, core.SandboxNotFound(id)
	}
	return p, nil
}

// lookup returns sandbox id when the caller in ctx may see it: its Pod,
// or, when it is hibernated, its claim (then p is nil). A sandbox
// sandboxd is deleting, a pool Pod and another tenant's sandbox are
// ErrNotFound.
func (m *Manager) lookup(ctx context.Context, id string) (p *corev1.Pod, c *corev1.PersistentVolumeClaim, err error) {
	p, err = m.visible(ctx, id)
	if err == nil || !m.claims() || core.ClassOf(err) != core.ErrNotFound {
		return p, nil, err
	}
	c, cerr := m.claimOf(ctx, id)
	if cerr != nil {
		return nil, nil, cerr
	}
	if c == nil || c.Annotations[annHibernated] == "" || c.DeletionTimestamp != nil || !core.CallerOf(ctx).Sees(c.Annotations[annTenant]) {
		return nil, nil, err
	}
	return nil, c, nil
}

// live returns sandbox id's Pod once it is ready, for an operation that
// needs its sidecar: waiting (bounded by StartTimeout) while it starts,
// waking it when it is hibernated (as any use does), ErrFailedPrecondition
// when it is dead.
func (m *Manager) live(ctx context.Context, id string) (*corev1.Pod, error) {
	p, _, err := m.awake(ctx, id) // also finishes a start from a snapshot
	return p, err
}

// awaitReady waits until Pod p is ready, following its updates through the
// cache. The change channel is taken before each read of the Pod, so that
// a change between the read and the wait is not lost; the caller's p was
// read before this call, so a change in between is caught by a re-read
// each second (the Pod may be the namespace's only object: no later
// change would come).
func (m *Manager) awaitReady(ctx context.Context, p *corev1.Pod) (*corev1.Pod, error) {
	id := p.Labels[labelSandboxID]
	timer := time.NewTimer(m.cfg.StartTimeout)
	defer timer.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	ch := m.changed()
	for {
		gone, dead, reason, ready := podState(p)
		switch {
		case gone:
			return nil, core.SandboxNotFound(id)
		case dead:
			return nil, deadError(id, reason)
		case ready:
			// A networked sandbox's gateway gets its policy before the
			// Pod is used: a Pod that cannot confine it is ended here.
			if err := m.applyEgress(ctx, p); err != nil {
				return nil, err
			}
			return p, nil
		}
		if why := cannotStart(p); why != "" {
			return nil, core.Errorf(core.ErrUnavailable, "sandbox %s cannot start until its image is on the node (pod %s %s); the kubelet retries: try again once the image is there", id, p.Name, why)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-m.closed:
			return nil, errClosing
		case <-timer.C:
			return nil, core.Errorf(core.ErrUnavailable, "sandbox %s did not become ready within %v (pod %s %s); try again later", id, m.cfg.StartTimeout, p.Name, pendingWhy(p))
		case <-ch:
		case <-tick.C:
		}
		ch = m.changed()
		q, err := m.pod(ctx, id)
		if err == nil && q != nil && p.UID != "" && q.UID != p.UID {
			// The cache still shows the Pod p replaced (a wake waits
			// only for the API server to drop the old one): ask it.
			q, err = m.podFromAPI(ctx, id)
		}
		if err != nil {
			return nil, err
		}
		if q == nil {
			return nil, core.SandboxNotFound(id)
		}
		p = q
	}
}

var errClosing = core.ShuttingDown()

func (m *Manager) checkOpen() error {
	select {
	case <-m.closed:
		return errClosing
	default:
		return nil
	}
}

// deadError is the error for an operation that needs a live sandbox.
func deadError(id, reason string) error {
	return core.SandboxDead(id, reason)
}

// apiError classifies an error of the API server for op.
func apiError(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case core.IsClassified(err):
		return err
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return core.Errorf(core.ErrInvalidArgument, "kubernetes rejected %s: %w", op, err)
	case apierrors.IsForbidden(err):
		return core.Errorf(core.ErrFailedPrecondition, "kubernetes refused %s (check sandboxd's Role): %w", op, err)
	case apierrors.IsNotFound(err):
		return core.Errorf(core.ErrNotFound, "kubernetes %s: %w", op, err)
	case apierrors.IsAlreadyExists(err), apierrors.IsConflict(err):
		return core.Errorf(core.ErrFailedPrecondition, "kubernetes %s: %w", op, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	return core.Errorf(core.ErrUnavailable, "kubernetes %s failed: %w", op, err)
}

// userPods lists the cached Pods of sandboxes given to users.
func (m *Manager) userPods() []*corev1.Pod {
	ps, _ := m.pods.Pods(m.cfg.Namespace).List(labels.SelectorFromSet(labels.Set{labelPool: "false"}))
	return ps
}

// binding returns the cached Lease naming (tenant, user)'s sandbox.
func (m *Manager) binding(key string) *coordinationv1.Lease {
	l, err := m.leases.Leases(m.cfg.Namespace).Get(bindingName(key))
	if err != nil {
		return nil
	}
	return l
}
