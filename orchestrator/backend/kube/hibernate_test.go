package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/sandboxd/sandboxd/internal/kubetest"
	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// hibSidecar is a sandbox's io sidecar as far as hibernation goes: it
// answers snapshot and restore records as the driver would, and records
// what it was sent. It stands in for the real sidecar, whose log sealing
// is iosidecar's test; here the backend's steps are under test.
type hibSidecar struct {
	IOConn // other calls are not made by these tests
	env    *hibEnv
	pod    string
}

func (s *hibSidecar) Run(_ context.Context, rec ioproto.Record, submitted func(bool), fn func(ioproto.Event) error) error {
	s.env.mu.Lock()
	s.env.sent = append(s.env.sent, sentRecord{pod: s.pod, rec: rec})
	s.env.mu.Unlock()
	submitted(true)
	res := &ioproto.HibResult{Level: ioproto.LevelGlobals, Bytes: 4242, Names: []string{"x"}}
	if rec.Type == ioproto.KindRestore && rec.Level == ioproto.LevelFiles {
		res = &ioproto.HibResult{Level: ioproto.LevelFiles, Reason: "files only"}
	}
	if err := fn(ioproto.Event{Seq: 1, Type: ioproto.EventStarted, CommandID: rec.CommandID}); err != nil {
		return err
	}
	return fn(ioproto.Event{Seq: 2, Type: ioproto.EventDone, CommandID: rec.CommandID, Status: ioproto.StatusOK, Snapshot: res})
}

func (s *hibSidecar) Close() error { return nil }

// DriverStatus is the health read's: a driver with nothing to report.
func (s *hibSidecar) DriverStatus(context.Context) (ioproto.DriverStatus, error) {
	return ioproto.DriverStatus{}, nil
}

type sentRecord struct {
	pod string
	rec ioproto.Record
}

// hibEnv is a replica with a storage class on a real API server (envtest),
// whose Pods a stand-in kubelet marks running and ready (envtest has no
// node), and whose sidecars are hibSidecars.
type hibEnv struct {
	m  *Manager
	cs kubernetes.Interface
	ns string

	mu   sync.Mutex
	sent []sentRecord
}

// newHibEnv starts it; each of with adjusts the replica's Config.
func newHibEnv(t *testing.T, with ...func(*Config)) *hibEnv {
	t.Helper()
	rc := kubetest.Start(t)
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	e := &hibEnv{cs: cs, ns: "hib-test"}
	ctx := t.Context()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.kubelet(kctx, t.Logf) }()
	t.Cleanup(func() { stop(); <-done })
	cfg := Config{
		Policy: core.Policy{Image: "sandbox:test", IdleTTL: time.Hour, OnIdle: core.OnIdleHibernate, HibernatedTTL: time.Hour,
			DefaultLimits: core.Limits{MemoryBytes: 256 << 20, NanoCPUs: 5e8, DiskBytes: 1 << 30}},
		Client: cs, Namespace: e.ns, IOTokenSecret: "io-token", IOToken: testToken,
		StorageClass: "local", LeaseDuration: time.Second, StartTimeout: 30 * time.Second,
		Logger: slog.New(slog.DiscardHandler),
		DialIO: func(_ context.Context, addr, _ string) (IOConn, error) {
			return &hibSidecar{env: e, pod: addr}, nil
		},
	}
	for _, f := range with {
		f(&cfg)
	}
	e.m, err = New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.m.Close() })
	return e
}

// kubelet marks the namespace's new Pods running and ready, each with an
// address of its own (the sidecar's "pod" in sentRecord), kept across
// retries of a failed status update, until ctx ends.
func (e *hibEnv) kubelet(ctx context.Context, logf func(string, ...any)) {
	ips := map[types.UID]string{}
	for ctx.Err() == nil {
		list, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil && ctx.Err() == nil {
			logf("stand-in kubelet: listing pods: %v", err)
		}
		if err == nil {
			for i := range list.Items {
				p := &list.Items[i]
				if p.Status.Phase == corev1.PodRunning || p.DeletionTimestamp != nil {
					continue
				}
				ip, ok := ips[p.UID]
				if !ok {
					n := len(ips) + 1
					ip = fmt.Sprintf("198.18.%d.%d", n/250, n%250+1)
					ips[p.UID] = ip
				}
				p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
					Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
				if _, err := e.cs.CoreV1().Pods(e.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil {
					logf("stand-in kubelet: marking pod %s running (retried): %v", p.Name, err)
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (e *hibEnv) records() []sentRecord {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]sentRecord(nil), e.sent...)
}

func (e *hibEnv) pod(t *testing.T, id string) *corev1.Pod {
	t.Helper()
	p, err := e.cs.CoreV1().Pods(e.ns).Get(t.Context(), podName(id), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the pod of %s: %v", id, err)
	}
	return p
}

func (e *hibEnv) claim(t *testing.T, id string) *corev1.PersistentVolumeClaim {
	t.Helper()
	c, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(t.Context(), podName(id), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the claim of %s: %v", id, err)
	}
	return c
}

// claimDeleted reports whether sandbox id's claim is deleted: gone, or
// held only by the API server's pvc-protection finalizer (no controller
// runs here to drop it).
func (e *hibEnv) claimDeleted(t *testing.T, id string) bool {
	t.Helper()
	c, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(t.Context(), podName(id), metav1.GetOptions{})
	return apierrors.IsNotFound(err) || (err == nil && c.DeletionTimestamp != nil)
}

// awaitState waits (bounded) until Get says sandbox id is in state.
func (e *hibEnv) awaitState(t *testing.T, ctx context.Context, id string, state core.State) core.Sandbox {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		sb, err := e.m.Get(ctx, id)
		if err == nil && sb.State == state {
			return sb
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s not %s within 30 s: %+v, %v", id, state, sb, err)
		}
		select {
		case <-e.m.changed():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestHibernateAndWake: a sandbox's Pod mounts a claim of its own; a
// hibernation runs one snapshot record named after the Pod's UID, records
// the sandbox on the claim and deletes the Pod; the sandbox is then
// hibernated for Get, List and Delete's purposes; an Acquire by its user
// wakes it in a new Pod on the same claim with one restore record of that
// snapshot, and clears the claim's record.
func TestHibernateAndWake(t *testing.T) {
	e := newHibEnv(t)
	ctx := core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
	r, err := e.m.Acquire(ctx, "alice", core.Options{Limits: e.m.cfg.DefaultLimits, Metadata: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	id := r.Sandbox.ID
	first := e.pod(t, id)
	if vs := first.Spec.Volumes; len(vs) == 0 || vs[0].PersistentVolumeClaim == nil || vs[0].PersistentVolumeClaim.ClaimName != podName(id) {
		t.Fatalf("pod volumes %+v; want the sandbox's claim first", vs)
	}
	if c := e.claim(t, id); *c.Spec.StorageClassName != "local" || c.Annotations[annHibernated] != "" {
		t.Fatalf("claim %+v; want class local, not hibernated", c)
	}

	sb, err := e.m.Hibernate(ctx, id)
	if err != nil {
		t.Fatalf("Hibernate: %v", err)
	}
	if sb.State != core.StateHibernated || sb.Snapshot == nil || sb.Snapshot.Level != ioproto.LevelGlobals || sb.Snapshot.Bytes != 4242 ||
		sb.Metadata["k"] != "v" || sb.UserID != "alice" || sb.HibernatedAt.IsZero() {
		t.Fatalf("hibernated sandbox %+v (snapshot %+v)", sb, sb.Snapshot)
	}
	recs := e.records()
	if len(recs) != 1 || recs[0].rec.Type != ioproto.KindSnapshot || recs[0].rec.CommandID != "sbx-snapshot-"+uidKey(first) {
		t.Fatalf("records sent %+v; want one snapshot named after pod UID %s", recs, first.UID)
	}
	if _, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, podName(id), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the hibernated sandbox's pod: %v; want it deleted", err)
	}
	e.awaitState(t, ctx, id, core.StateHibernated)
	if list, err := e.m.List(ctx, core.ListFilter{State: core.StateHibernated}); err != nil || len(list) != 1 || list[0].ID != id {
		t.Fatalf("List(hibernated) = %+v, %v", list, err)
	}
	if _, err := e.m.Get(core.WithCaller(t.Context(), core.Caller{Tenant: "other"}), id); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("Get by another tenant: %v; want not found", err)
	}
	// Hibernating it again changes nothing.
	if sb, err := e.m.Hibernate(ctx, id); err != nil || sb.State != core.StateHibernated || len(e.records()) != 1 {
		t.Fatalf("Hibernate of a hibernated sandbox: %+v, %v (records %d)", sb, err, len(e.records()))
	}

	// The server moved to a new image meanwhile: the sandbox wakes in its
	// own, whose Python made its snapshot.
	e.m.cfg.Image = "sandbox:newer"
	r, err = e.m.Acquire(ctx, "alice", core.Options{Limits: e.m.cfg.DefaultLimits})
	if err != nil {
		t.Fatalf("Acquire of the hibernated sandbox: %v", err)
	}
	if r.Created || r.Sandbox.ID != id || r.Woke == nil || r.Woke.Level != ioproto.LevelGlobals || r.Sandbox.State != core.StateRunning {
		t.Fatalf("Acquire = %+v (woke %+v); want the same sandbox, woken at level globals", r, r.Woke)
	}
	second := e.pod(t, id)
	recs = e.records()
	if second.UID == first.UID || len(recs) != 2 || recs[1].rec.Type != ioproto.KindRestore ||
		recs[1].rec.CommandID != "sbx-restore-"+uidKey(second) || recs[1].rec.Snapshot != "snap-"+uidKey(first) || recs[1].rec.Level != ioproto.LevelGlobals {
		t.Fatalf("after the wake: records %+v; want a restore named after the new pod %s of snapshot snap-%s", recs, second.UID, uidKey(first))
	}
	if c := e.claim(t, id); c.Annotations[annHibernated] != "" || c.Annotations[annEnv] != "" {
		t.Fatalf("claim after the wake keeps the hibernation: %v", c.Annotations)
	}
	if second.Annotations[annWaking] != "" || second.Annotations[annMetadata] != first.Annotations[annMetadata] ||
		second.Annotations[annCreatedAt] != first.Annotations[annCreatedAt] {
		t.Fatalf("woken pod's annotations %v; want the record of %v, the wake finished", second.Annotations, first.Annotations)
	}
	for _, c := range append(second.Spec.InitContainers, second.Spec.Containers...) {
		if c.Image != "sandbox:test" {
			t.Errorf("woken pod's container %s runs %s; want the sandbox's own image sandbox:test", c.Name, c.Image)
		}
	}
	var w core.WakeInfo
	if err := json.Unmarshal([]byte(second.Annotations[annLastWake]), &w); err != nil || w.Level != ioproto.LevelGlobals {
		t.Fatalf("last wake on the pod: %q, %v", second.Annotations[annLastWake], err)
	}

	// Deleting a hibernated sandbox deletes its claim and the binding.
	if _, err := e.m.Hibernate(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Delete(ctx, id); err != nil {
		t.Fatalf("Delete of a hibernated sandbox: %v", err)
	}
	if !e.claimDeleted(t, id) {
		t.Fatal("claim after Delete: still there; want it deleted")
	}
	if _, err := e.cs.CoordinationV1().Leases(e.ns).Get(ctx, bindingName(userHash("acme", "alice")), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("binding after Delete: %v; want it deleted", err)
	}
}

// TestHibernationFinishedByTheLeader: a replica that died after it marked
// a Pod hibernating (the log sealed) leaves the sandbox in that state; the
// leader finishes the hibernation with the same snapshot record, and a
// Pod whose wake a replica left half done is finished by the next use.
func TestHibernationFinishedByTheLeader(t *testing.T) {
	e := newHibEnv(t)
	ctx := core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
	r, err := e.m.Acquire(ctx, "bob", core.Options{Limits: e.m.cfg.DefaultLimits})
	if err != nil {
		t.Fatal(err)
	}
	id := r.Sandbox.ID
	p := e.pod(t, id)
	stale := time.Now().Add(-hibernationStall - time.Minute).UTC().Format(time.RFC3339)
	if err := e.m.patchAnnotations(ctx, id, map[string]string{annHibernating: "sbx-snapshot-" + uidKey(p) + " " + stale}); err != nil {
		t.Fatal(err)
	}
	sb := e.awaitState(t, ctx, id, core.StateHibernated)
	if sb.Snapshot == nil || sb.Snapshot.Level != ioproto.LevelGlobals {
		t.Fatalf("hibernation finished by the leader: %+v", sb.Snapshot)
	}
	if recs := e.records(); len(recs) != 1 || recs[0].rec.CommandID != "sbx-snapshot-"+uidKey(p) {
		t.Fatalf("records %+v; want the snapshot the dead replica named", recs)
	}

	// A wake left after its Pod was created: the next use finishes it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, podName(id), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hibernated pod is still there after 30 s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c := e.claim(t, id)
	s := podSpec{id: id, tenant: "acme", userID: "bob", limits: e.m.cfg.DefaultLimits, now: time.Now()}
	pod := buildPod(&e.m.cfg, s)
	for k, v := range recordAnnotations(c.Annotations) {
		pod.Annotations[k] = v
	}
	pod.Annotations[annWaking] = c.Annotations[annHibernated]
	if _, err := e.cs.CoreV1().Pods(e.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sb, w, err := e.m.Wake(ctx, id)
	if err != nil || sb.State != core.StateRunning || w == nil || w.Level != ioproto.LevelGlobals {
		t.Fatalf("Wake of a half-woken sandbox = %+v, %+v, %v", sb, w, err)
	}
	if recs := e.records(); len(recs) != 2 || recs[1].rec.Type != ioproto.KindRestore {
		t.Fatalf("records %+v; want the snapshot, then one restore", recs)
	}
	if c := e.claim(t, id); c.Annotations[annHibernated] != "" {
		t.Fatalf("claim still hibernated after the wake: %v", c.Annotations)
	}
	// Waking it again is nothing.
	if _, w, err := e.m.Wake(ctx, id); err != nil || w != nil || len(e.records()) != 2 {
		t.Fatalf("Wake of a running sandbox: %+v, %v, records %d", w, err, len(e.records()))
	}
}

// TestOrphanClaims: a claim that no Pod and no hibernation holds (a Pod
// create that failed after its claim's, a removal cut short) is deleted
// once it is orphanClaimAge old; one with a Pod, or hibernated, stays.
func TestOrphanClaims(t *testing.T) {
	e := newHibEnv(t)
	ctx := t.Context()
	mk := func(id string, ann map[string]string) {
		c := buildClaim(&e.m.cfg, podSpec{id: id})
		c.Annotations = ann
		if _, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mk("sb-orphanaaaaaaaaaaaaa", nil)
	mk("sb-hibernatedaaaaaaaa", map[string]string{annHibernated: `{"level":"files"}`})
	deadline := time.Now().Add(30 * time.Second)
	for {
		cs, _ := e.m.pvcs.PersistentVolumeClaims(e.ns).List(labels.Everything())
		if len(cs) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the cache did not show the claims")
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.m.gcClaimsAt(ctx, time.Now())
	if _, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx, podName("sb-orphanaaaaaaaaaaaaa"), metav1.GetOptions{}); err != nil {
		t.Fatalf("a new claim without its Pod yet: %v; want it kept", err)
	}
	e.m.gcClaimsAt(ctx, time.Now().Add(orphanClaimAge+time.Second))
	if !e.claimDeleted(t, "sb-orphanaaaaaaaaaaaaa") {
		t.Error("orphan claim: still there; want it deleted")
	}
	if _, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx, podName("sb-hibernatedaaaaaaaa"), metav1.GetOptions{}); err != nil {
		t.Errorf("hibernated sandbox's claim: %v; want it kept", err)
	}
}

// TestGaugesAndCounters: the leader reports the namespace's sandboxes by
// tenant and state, hibernated ones from their claims, and each acquire
// is counted by kind.
func TestGaugesAndCounters(t *testing.T) {
	e := newHibEnv(t)
	counted := &countingMetrics{}
	e.m.cfg.Metrics = counted
	ctx := core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
	var ids []string
	for _, u := range []string{"u1", "u2"} {
		r, err := e.m.Acquire(ctx, u, core.Options{Limits: e.m.cfg.DefaultLimits})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.Sandbox.ID)
	}
	if _, err := e.m.Hibernate(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	e.awaitState(t, ctx, ids[1], core.StateHibernated)
	if _, err := e.m.Acquire(ctx, "u1", core.Options{Limits: e.m.cfg.DefaultLimits}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !e.m.Reporting() {
		if time.Now().After(deadline) {
			t.Fatal("the only replica did not lead within 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	want := []core.SandboxCount{{Tenant: "acme", State: core.StateHibernated, N: 1}, {Tenant: "acme", State: core.StateRunning, N: 1}}
	if got := e.m.SandboxCounts(); !slices.Equal(got, want) {
		t.Errorf("SandboxCounts = %+v; want %+v", got, want)
	}
	if n := e.m.PoolSize(); n != 0 {
		t.Errorf("PoolSize = %d without a pool", n)
	}
	counted.mu.Lock()
	defer counted.mu.Unlock()
	if counted.acquired[core.AcquireCold] != 2 || counted.acquired[core.AcquireExisting] != 1 {
		t.Errorf("acquires counted %v; want 2 cold, 1 existing", counted.acquired)
	}
}

// countingMetrics counts what a Manager reports.
type countingMetrics struct {
	core.NoMetrics
	mu       sync.Mutex
	acquired map[core.AcquireKind]int
	missed   map[core.PoolMiss]int
}

func (c *countingMetrics) PoolMissed(reason core.PoolMiss) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.missed == nil {
		c.missed = map[core.PoolMiss]int{}
	}
	c.missed[reason]++
}

func (c *countingMetrics) Acquired(kind core.AcquireKind, _ time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.acquired == nil {
		c.acquired = map[core.AcquireKind]int{}
	}
	c.acquired[kind]++
}

// TestUseJoinsAHibernationUnderWay: a use of a sandbox whose hibernation
// another replica began (and may have died in) does not wait for the
// leader: it finishes the hibernation itself, with the same snapshot
// record, then wakes the sandbox.
func TestUseJoinsAHibernationUnderWay(t *testing.T) {
	e := newHibEnv(t)
	ctx := core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
	r, err := e.m.Acquire(ctx, "carol", core.Options{Limits: e.m.cfg.DefaultLimits})
	if err != nil {
		t.Fatal(err)
	}
	id := r.Sandbox.ID
	p := e.pod(t, id)
	fresh := time.Now().UTC().Format(time.RFC3339) // not stale: the leader leaves it
	if err := e.m.patchAnnotations(ctx, id, map[string]string{annHibernating: "sbx-snapshot-" + uidKey(p) + " " + fresh}); err != nil {
		t.Fatal(err)
	}
	e.m.awaitCached(ctx, id, func(q *corev1.Pod) bool { return q.Annotations[annHibernating] != "" })
	sb, w, err := e.m.Wake(ctx, id)
	if err != nil || sb.State != core.StateRunning || w == nil || w.Level != ioproto.LevelGlobals {
		t.Fatalf("Wake of a sandbox being hibernated = %+v, %+v, %v; want it hibernated, then woken", sb, w, err)
	}
	recs := e.records()
	if len(recs) != 2 || recs[0].rec.CommandID != "sbx-snapshot-"+uidKey(p) || recs[1].rec.Type != ioproto.KindRestore || recs[1].rec.Snapshot != "snap-"+uidKey(p) {
		t.Fatalf("records %+v; want the snapshot the other replica named, then its restore", recs)
	}
	if q := e.pod(t, id); q.UID == p.UID {
		t.Fatal("the sandbox still runs in the pod that was being hibernated")
	}
}

// TestOneWokenPerWake: of several calls finishing one wake at once (two
// replicas' uses, the leader's chores), exactly one records its end and
// publishes "woken"; the others answer the recorded outcome.
func TestOneWokenPerWake(t *testing.T) {
	sink := &eventCounter{}
	e := newHibEnv(t, func(c *Config) { c.Lifecycle = sink })
	ctx := core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
	r, err := e.m.Acquire(ctx, "erin", core.Options{Limits: e.m.cfg.DefaultLimits})
	if err != nil {
		t.Fatal(err)
	}
	id := r.Sandbox.ID
	rec, _ := json.Marshal(hibRecord{Level: ioproto.LevelGlobals, File: "snap-x", TakenAt: time.Now().UTC(), HibernatedAt: time.Now().UTC()})
	if err := e.m.patchAnnotations(ctx, id, map[string]string{annWaking: string(rec)}); err != nil {
		t.Fatal(err)
	}
	p := e.pod(t, id)
	const callers = 3
	var wg sync.WaitGroup
	infos := make([]*core.WakeInfo, callers)
	errs := make([]error, callers)
	for i := range callers {
		wg.Go(func() { _, infos[i], errs[i] = e.m.finishWakeInfo(ctx, p) })
	}
	wg.Wait()
	for i := range callers {
		if errs[i] != nil || infos[i] == nil || infos[i].Level != ioproto.LevelGlobals {
			t.Errorf("call %d finishing the wake: %+v, %v; want it woken at level globals", i, infos[i], errs[i])
		}
	}
	if n := sink.count(core.LifecycleWoken); n != 1 {
		t.Errorf("%d woken events for one wake; want 1", n)
	}
	if q := e.pod(t, id); q.Annotations[annWaking] != "" || q.Annotations[annLastWake] == "" {
		t.Errorf("pod after the wake: waking %q, last wake %q; want the wake ended and recorded", q.Annotations[annWaking], q.Annotations[annLastWake])
	}
}

// eventCounter counts lifecycle events by kind.
type eventCounter struct {
	mu sync.Mutex
	n  map[core.LifecycleKind]int
}

func (c *eventCounter) Publish(e core.LifecycleEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[core.LifecycleKind]int{}
	}
	c.n[e.Kind]++
}

func (c *eventCounter) count(k core.LifecycleKind) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[k]
}
