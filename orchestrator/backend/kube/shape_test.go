package kube

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// shapeSidecar is hibSidecar with Append: it records the records appended
// and, at each, what the API server then said of the Pod it serves (its
// shaping mark) and of its user's binding; fail, when set, refuses them.
type shapeSidecar struct {
	hibSidecar
	log *appendLog
}

type appendLog struct {
	e    *hibEnv
	mu   sync.Mutex
	fail error
	got  []appended
	// refuse makes the stand-in kubelet answer resizes with an
	// Infeasible PodResizePending.
	refuse bool
}

type appended struct {
	addr    string
	rec     ioproto.Record
	shaping bool // the Pod was marked shaping when the record came
	bound   bool // alice's binding existed when the record came
}

func (s *shapeSidecar) Append(ctx context.Context, rec ioproto.Record) (bool, error) {
	l := s.log
	l.mu.Lock()
	fail := l.fail
	l.mu.Unlock()
	if fail != nil {
		return false, fail
	}
	a := appended{addr: s.pod, rec: rec}
	host, _, _ := net.SplitHostPort(s.pod)
	list, err := l.e.cs.CoreV1().Pods(l.e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, err
	}
	for _, p := range list.Items {
		if p.Status.PodIP == host {
			a.shaping = p.Annotations[annShaping] != ""
		}
	}
	_, err = l.e.cs.CoordinationV1().Leases(l.e.ns).Get(ctx, bindingName(userHash("acme", "alice")), metav1.GetOptions{})
	a.bound = err == nil
	l.mu.Lock()
	l.got = append(l.got, a)
	l.mu.Unlock()
	return true, nil
}

func (l *appendLog) records() []appended {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]appended(nil), l.got...)
}

// newShapeEnv is newHibEnv with a warm pool of one and shapeSidecars,
// counting what the replica reports.
func newShapeEnv(t *testing.T) (*hibEnv, *appendLog, *countingMetrics) {
	t.Helper()
	counted := &countingMetrics{}
	l := &appendLog{}
	e := newHibEnv(t, func(c *Config) {
		c.WarmPool = 1
		c.Metrics = counted
		c.DialIO = func(_ context.Context, addr, _ string) (IOConn, error) {
			return &shapeSidecar{hibSidecar: hibSidecar{env: l.e, pod: addr}, log: l}, nil
		}
	})
	l.e = e
	kctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.resizer(kctx) }()
	t.Cleanup(func() { stop(); <-done })
	return e, l, counted
}

// resizer is a stand-in kubelet for in-place resizes: it reports each
// running Pod's sandbox container's resources as its spec has them, or,
// with refuse, a resize as infeasible.
func (l *appendLog) resizer(ctx context.Context) {
	for ctx.Err() == nil {
		list, _ := l.e.cs.CoreV1().Pods(l.e.ns).List(ctx, metav1.ListOptions{})
		for i := range list.Items {
			p := &list.Items[i]
			c := sandboxContainerOf(p)
			if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil || c == nil {
				continue
			}
			var have *corev1.ResourceRequirements
			for _, cs := range p.Status.ContainerStatuses {
				if cs.Name == containerSandbox {
					have = cs.Resources
				}
			}
			if have != nil && sameResources(have.Limits, c.Resources.Limits) {
				continue
			}
			l.mu.Lock()
			refuse := l.refuse
			l.mu.Unlock()
			if refuse && have != nil {
				if resizeRefused(p) != "" {
					continue
				}
				p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodResizePending, Status: corev1.ConditionTrue,
					Reason: corev1.PodReasonInfeasible, Message: "Node didn't have enough capacity"})
			} else {
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: containerSandbox, Ready: true,
					State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}, Resources: c.Resources.DeepCopy()}}
			}
			_, _ = l.e.cs.CoreV1().Pods(l.e.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}) // a conflict: the next round
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// awaitPooled waits (bounded) for a ready pool Pod, none of not (claimed
// ones the cache may still show in the pool), and returns its sandbox ID.
func awaitPooled(t *testing.T, e *hibEnv, not ...string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, p := range e.m.readyPool() {
			if id := p.Labels[labelSandboxID]; !slices.Contains(not, id) {
				return id
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ready pool pod within 30 s (leader %v)", e.m.Reporting())
		}
		select {
		case <-e.m.changed():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestClaimTakesEnv: a request with env takes the warm pool's Pod; its env
// record is appended through that Pod's sidecar while the Pod is marked
// shaping and before the user is bound to it (so before Acquire returns);
// the mark is gone once Acquire returns; and the sandbox's env, as the
// backend reads it back (the options a fork gets, a hibernation's record,
// the Pod that wakes it), includes the claimed env.
func TestClaimTakesEnv(t *testing.T) {
	e, l, counted := newShapeEnv(t)
	ctx := core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
	pooled := awaitPooled(t, e)
	env := map[string]string{"GREETING": "hello", "EMPTY": ""}
	r, err := e.m.Acquire(ctx, "alice", core.Options{Limits: e.m.cfg.DefaultLimits, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	id := r.Sandbox.ID
	if id != pooled || !r.Created {
		t.Fatalf("Acquire with env gave %s (created %v); want the pool's pod %s", id, r.Created, pooled)
	}
	recs := l.records()
	p := e.pod(t, id)
	addr := net.JoinHostPort(p.Status.PodIP, strconv.Itoa(e.m.cfg.IOPort))
	if len(recs) != 1 {
		t.Fatalf("%d records appended; want one env record: %+v", len(recs), recs)
	}
	a := recs[0]
	if a.addr != addr || a.rec.Type != ioproto.KindEnv || !maps.Equal(a.rec.Env, env) {
		t.Errorf("appended %+v to %s; want an env record of %v to %s", a.rec, a.addr, env, addr)
	}
	if !a.shaping || a.bound {
		t.Errorf("the env record came with the pod marked shaping %v, alice bound %v; want marked, not yet bound", a.shaping, a.bound)
	}
	if v, ok := p.Annotations[annShaping]; ok {
		t.Errorf("the pod handed out is still marked shaping (%q)", v)
	}
	if got := envOf(p); !maps.Equal(got, env) {
		t.Errorf("envOf(the pod) = %v; want %v", got, env)
	}
	if _, err := e.m.Get(ctx, id); err != nil {
		t.Errorf("Get right after the claim: %v", err)
	}
	o, err := e.m.optionsOf(p)
	if err != nil || !maps.Equal(o.Env, env) {
		t.Errorf("optionsOf (a fork's options) env = %v, %v; want %v", o.Env, err, env)
	}
	counted.mu.Lock()
	if counted.acquired[core.AcquireWarmPool] != 1 || len(counted.missed) != 0 {
		t.Errorf("acquires %v, misses %v; want one from the pool, no miss", counted.acquired, counted.missed)
	}
	counted.mu.Unlock()

	// A hibernation records the whole env; the Pod that wakes the
	// sandbox is made with it.
	if _, err := e.m.Hibernate(ctx, id); err != nil {
		t.Fatal(err)
	}
	e.awaitState(t, ctx, id, core.StateHibernated)
	var onClaim map[string]string
	if err := json.Unmarshal([]byte(e.claim(t, id).Annotations[annEnv]), &onClaim); err != nil || !maps.Equal(onClaim, env) {
		t.Errorf("the hibernated sandbox's claim records env %v (%v); want %v", onClaim, err, env)
	}
	if _, err := e.m.Acquire(ctx, "alice", core.Options{}); err != nil {
		t.Fatal(err)
	}
	woken := e.pod(t, id)
	container := map[string]string{}
	for _, v := range woken.Spec.Containers[0].Env {
		container[v.Name] = v.Value
	}
	if !maps.Equal(container, env) {
		t.Errorf("the woken pod's container env = %v; want %v", container, env)
	}
	if got := envOf(woken); !maps.Equal(got, env) {
		t.Errorf("envOf(the woken pod) = %v; want %v", got, env)
	}
}

// TestClaimTakesLimits: a request for other limits of memory and CPUs
// takes the warm pool's Pod, resized in place, and is handed out once its
// kubelet reports the new limits; a resize the kubelet refuses sends the
// request to a Pod of its own (a failed shaping), the claimed one removed.
func TestClaimTakesLimits(t *testing.T) {
	e, l, counted := newShapeEnv(t)
	ctx := core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
	pooled := awaitPooled(t, e)
	want := e.m.cfg.DefaultLimits
	want.MemoryBytes *= 2
	want.NanoCPUs = 1e9
	want.PidsLimit = 77
	r, err := e.m.Acquire(ctx, "alice", core.Options{Limits: want})
	if err != nil {
		t.Fatal(err)
	}
	if r.Sandbox.ID != pooled || r.Sandbox.Limits != want {
		t.Fatalf("Acquire with other limits gave %s with %+v; want the pool's pod %s with %+v", r.Sandbox.ID, r.Sandbox.Limits, pooled, want)
	}
	p := e.pod(t, pooled)
	_, res := sandboxResources(&e.m.cfg, want)
	if c := sandboxContainerOf(p); !sameResources(c.Resources.Limits, res) || !resized(p, res) {
		t.Errorf("the pod handed out: spec %v, status %+v; want %v in force", c.Resources.Limits, p.Status.ContainerStatuses, res)
	}
	if len(l.records()) != 0 {
		t.Errorf("records appended without env: %+v", l.records())
	}

	other := awaitPooled(t, e, pooled)
	// Its kubelet has reported its resources as they were made (a resize
	// is judged against them).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if q, err := e.m.pods.Pods(e.ns).Get(podName(other)); err == nil && len(q.Status.ContainerStatuses) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stand-in kubelet did not report the resources of %s", other)
		}
	}
	l.mu.Lock()
	l.refuse = true
	l.mu.Unlock()
	r, err = e.m.Acquire(ctx, "bob", core.Options{Limits: want})
	if err != nil {
		t.Fatal(err)
	}
	if r.Sandbox.ID == other {
		t.Fatalf("Acquire handed out the pool pod %s whose resize was refused", other)
	}
	q, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, podName(other), metav1.GetOptions{})
	if err == nil && q.Annotations[annDeleting] == "" && q.DeletionTimestamp == nil {
		t.Errorf("the claimed pod whose resize was refused is left (annotations %v)", q.Annotations)
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	counted.mu.Lock()
	defer counted.mu.Unlock()
	if counted.acquired[core.AcquireWarmPool] != 1 || counted.acquired[core.AcquireCold] != 1 || counted.missed[core.PoolMissShaping] != 1 {
		t.Errorf("acquires %v, misses %v; want alice from the pool, bob cold after a failed shaping", counted.acquired, counted.missed)
	}
}

// TestPoolMissLimitsUnderARuntimeClass: under a runtime class, whose
// runtime may not change a running container's limits, other limits are
// a miss; the process limit alone is not (it is the node's).
func TestPoolMissLimitsUnderARuntimeClass(t *testing.T) {
	m := &Manager{cfg: Config{Policy: core.Policy{Image: "sandbox:test", DefaultLimits: core.Limits{MemoryBytes: 256 << 20, NanoCPUs: 5e8, PidsLimit: 100, DiskBytes: 1 << 30}}}}
	more := m.cfg.DefaultLimits
	more.MemoryBytes *= 2
	pids := m.cfg.DefaultLimits
	pids.PidsLimit = 7
	if miss := m.poolMiss(core.Options{Limits: more}, "", nil, nil); miss != "" {
		t.Errorf("other limits, no runtime class: miss %q; want none", miss)
	}
	m.cfg.RuntimeClass = "gvisor"
	if miss := m.poolMiss(core.Options{Limits: more}, "", nil, nil); miss != core.PoolMissLimits {
		t.Errorf("other limits under a runtime class: miss %q; want %q", miss, core.PoolMissLimits)
	}
	if miss := m.poolMiss(core.Options{Limits: pids}, "", nil, nil); miss != "" {
		t.Errorf("another process limit under a runtime class: miss %q; want none", miss)
	}
}

// TestPoolMissesCounted: what a running Pod cannot take gets a Pod of its
// own, the pool's left for others, each counted by reason: env naming a
// variable the driver reads for itself, another disk size.
func TestPoolMissesCounted(t *testing.T) {
	e, l, counted := newShapeEnv(t)
	ctx := core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
	pooled := awaitPooled(t, e)
	d := e.m.cfg.DefaultLimits
	disk := d
	disk.DiskBytes *= 2
	for i, o := range []core.Options{
		{Limits: d, Env: map[string]string{ioproto.EnvLogLevel: "debug", "OK": "1"}},
		{Limits: disk},
	} {
		r, err := e.m.Acquire(ctx, "user-"+strconv.Itoa(i), o)
		if err != nil {
			t.Fatal(err)
		}
		if r.Sandbox.ID == pooled {
			t.Fatalf("request %d (%+v) took the pool's pod; want a pod of its own", i, o)
		}
	}
	if recs := l.records(); len(recs) != 0 {
		t.Errorf("records appended: %+v; want none", recs)
	}
	if ps := e.m.readyPool(); len(ps) != 1 || ps[0].Labels[labelSandboxID] != pooled {
		t.Errorf("the pool after the misses: %d pods; want %s still there", len(ps), pooled)
	}
	counted.mu.Lock()
	defer counted.mu.Unlock()
	want := map[core.PoolMiss]int{core.PoolMissEnv: 1, core.PoolMissDisk: 1}
	if !maps.Equal(counted.missed, want) || counted.acquired[core.AcquireCold] != 2 {
		t.Errorf("misses %v, acquires %v; want %v, 2 cold", counted.missed, counted.acquired, want)
	}
}

// TestShapingFailureNotHandedOut: when the env record cannot be appended,
// the claimed Pod is removed, never bound or shown, and the request gets a
// Pod of its own (counted as a failed shaping).
func TestShapingFailureNotHandedOut(t *testing.T) {
	e, l, counted := newShapeEnv(t)
	ctx := core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
	pooled := awaitPooled(t, e)
	l.mu.Lock()
	l.fail = errors.New("the sidecar is down")
	l.mu.Unlock()
	r, err := e.m.Acquire(ctx, "alice", core.Options{Limits: e.m.cfg.DefaultLimits, Env: map[string]string{"A": "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Sandbox.ID == pooled {
		t.Fatalf("Acquire handed out the pool pod %s whose env record failed", pooled)
	}
	if envOf(e.pod(t, r.Sandbox.ID))["A"] != "b" {
		t.Errorf("the pod made instead lacks the env")
	}
	if _, err := e.m.Get(ctx, pooled); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("Get of the claimed pod whose shaping failed: %v; want NotFound", err)
	}
	q, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, podName(pooled), metav1.GetOptions{})
	if err == nil && q.Annotations[annDeleting] == "" && q.DeletionTimestamp == nil {
		t.Errorf("the claimed pod whose shaping failed is left (annotations %v)", q.Annotations)
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	counted.mu.Lock()
	defer counted.mu.Unlock()
	if counted.missed[core.PoolMissShaping] != 1 || counted.acquired[core.AcquireCold] != 1 {
		t.Errorf("misses %v, acquires %v; want one failed shaping, one cold", counted.missed, counted.acquired)
	}
}

// TestHalfShapedRemoved: a replica that stopped between a claim and its
// shaping's end leaves a Pod marked shaping, with the env on it and maybe
// without its record. No one is shown it while the mark is there (Get,
// List, its user's next Acquire); the leader removes it once the mark is
// stale, and leaves one being shaped now.
func TestHalfShapedRemoved(t *testing.T) {
	e, _, _ := newShapeEnv(t)
	ctx := core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
	// claimMarked claims the pool's pod as a replica does, marked at
	// `at`, and stops there.
	var claimed []string
	claimMarked := func(user string, at time.Time) string {
		t.Helper()
		pooled := awaitPooled(t, e, claimed...)
		claimed = append(claimed, pooled)
		p := e.m.claim(ctx, podSpec{tenant: "acme", userID: user, env: map[string]string{"A": "b"}, now: at})
		if p == nil || p.Labels[labelSandboxID] != pooled || p.Annotations[annShaping] == "" {
			t.Fatalf("claim: %v; want the pool's pod %s marked shaping", p, pooled)
		}
		return pooled
	}
	stale := claimMarked("bob", time.Now().Add(-2*shapingStale))
	fresh := claimMarked("carol", time.Now())
	for _, id := range []string{stale, fresh} {
		if _, err := e.m.Get(ctx, id); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("Get of half-shaped %s: %v; want NotFound", id, err)
		}
	}
	r, err := e.m.Acquire(ctx, "bob", core.Options{Limits: e.m.cfg.DefaultLimits})
	if err != nil {
		t.Fatal(err)
	}
	if r.Sandbox.ID == stale || r.Sandbox.ID == fresh {
		t.Fatalf("bob's next Acquire got the half-shaped %s", r.Sandbox.ID)
	}
	list, err := e.m.List(ctx, core.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range list {
		if sb.ID == stale || sb.ID == fresh {
			t.Errorf("List shows half-shaped %s", sb.ID)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		q, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, podName(stale), metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && (q.Annotations[annDeleting] != "" || q.DeletionTimestamp != nil)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the leader left the stale half-shaped pod %s (%v)", stale, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	q := e.pod(t, fresh)
	if q.Annotations[annDeleting] != "" || q.DeletionTimestamp != nil {
		t.Errorf("the leader removed %s, marked shaping just now", fresh)
	}
}
