package kube

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/cmdlog"
	"github.com/sandboxd/sandboxd/orchestrator/backend/kube/iosidecar"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// statusSidecar is a sandbox's io sidecar as far as health goes: its
// Status answers what status says (the zero DriverStatus if nil), and it
// counts the calls.
type statusSidecar struct {
	IOConn // nil: the other calls are not made
	calls  atomic.Int32
	mu     sync.Mutex
	status func(ctx context.Context) (ioproto.DriverStatus, error)
}

func (s *statusSidecar) DriverStatus(ctx context.Context) (ioproto.DriverStatus, error) {
	s.calls.Add(1)
	s.mu.Lock()
	f := s.status
	s.mu.Unlock()
	if f == nil {
		return ioproto.DriverStatus{Version: 1, Health: ioproto.HealthOK}, nil
	}
	return f(ctx)
}

func (s *statusSidecar) set(f func(ctx context.Context) (ioproto.DriverStatus, error)) {
	s.mu.Lock()
	s.status = f
	s.mu.Unlock()
}

func (s *statusSidecar) Close() error { return nil }

// says is a Status answering ds.
func says(ds ioproto.DriverStatus) func(context.Context) (ioproto.DriverStatus, error) {
	return func(context.Context) (ioproto.DriverStatus, error) { return ds, nil }
}

// hangs is a Status that never answers (until its context ends).
func hangs(ctx context.Context) (ioproto.DriverStatus, error) {
	<-ctx.Done()
	return ioproto.DriverStatus{}, ctx.Err()
}

// healthEnv is a Manager over a hand-filled Pod cache whose sidecars are
// statusSidecars, by Pod IP.
type healthEnv struct {
	m     *Manager
	store cache.Indexer
	logs  *syncBuffer
	mu    sync.Mutex
	cars  map[string]*statusSidecar
	n     int
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func newHealthEnv(t *testing.T) *healthEnv {
	e := &healthEnv{
		store: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}),
		logs:  &syncBuffer{}, cars: map[string]*statusSidecar{},
	}
	e.m = &Manager{
		cfg: Config{Policy: core.Policy{Image: "sandbox:test"}, Namespace: "health-test", IOTokenSecret: "io-token", IOToken: testToken,
			DialIO: func(_ context.Context, addr, _ string) (IOConn, error) {
				host, _, _ := net.SplitHostPort(addr)
				e.mu.Lock()
				defer e.mu.Unlock()
				if c := e.cars[host]; c != nil {
					return c, nil
				}
				return nil, fmt.Errorf("no sidecar at %s", addr)
			}},
		log:  slog.New(slog.NewTextHandler(e.logs, nil)),
		pods: corelisters.NewPodLister(e.store),
		ch:   make(chan struct{}), active: map[string]*activity{}, conns: map[string]*ioEntry{},
		creating: map[string]time.Time{}, closed: make(chan struct{}), health: newHealthCache(),
	}
	e.m.cfg.fillDefaults()
	t.Cleanup(e.m.health.close)
	return e
}

// sandbox adds a running, ready sandbox of tenant acme and returns its
// ID and sidecar.
func (e *healthEnv) sandbox(t *testing.T) (string, *statusSidecar) {
	t.Helper()
	e.mu.Lock()
	e.n++
	n := e.n
	ip := fmt.Sprintf("198.18.%d.%d", n/250, n%250+1)
	car := &statusSidecar{}
	e.cars[ip] = car
	e.mu.Unlock()
	id := fmt.Sprintf("sb-health%011d", n)
	p := buildPod(&e.m.cfg, podSpec{id: id, tenant: "acme", userID: fmt.Sprintf("user-%d", n), now: time.Now()})
	p.UID = types.UID(fmt.Sprintf("uid-%d", n))
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if err := e.store.Add(p); err != nil {
		t.Fatal(err)
	}
	return id, car
}

func (e *healthEnv) ctx(t *testing.T) context.Context {
	return core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
}

func (e *healthEnv) get(t *testing.T, id string) (core.Sandbox, time.Duration) {
	t.Helper()
	start := time.Now()
	sb, err := e.m.Get(e.ctx(t), id)
	if err != nil {
		t.Fatalf("Get %s: %v", id, err)
	}
	return sb, time.Since(start)
}

// expire makes every kept read stale, as healthFresh passing would.
func (e *healthEnv) expire() { e.m.health.reasons.DeleteAll() }

// TestHealthFromTheSidecar: Get and List show what a running sandbox's
// driver says through its sidecar, read once for repeated calls, and
// follow its changes once the kept read is stale; the changes are
// logged.
func TestHealthFromTheSidecar(t *testing.T) {
	e := newHealthEnv(t)
	id, car := e.sandbox(t)
	if sb, _ := e.get(t, id); sb.HealthReason != "" || sb.State != core.StateRunning {
		t.Errorf("a healthy sandbox: state %s, HealthReason %q", sb.State, sb.HealthReason)
	}
	e.expire()
	reason := "/io is full: 10 KiB free, a command needs at least 1 MiB"
	car.set(says(ioproto.DriverStatus{Version: 1, Health: ioproto.HealthIOFull, HealthReason: reason}))
	before := car.calls.Load()
	for i := range 2 {
		if sb, _ := e.get(t, id); sb.HealthReason != reason || sb.State != core.StateRunning {
			t.Errorf("Get %d of an unhealthy sandbox: state %s, HealthReason %q; want running with %q", i, sb.State, sb.HealthReason, reason)
		}
	}
	l, err := e.m.List(e.ctx(t), core.ListFilter{})
	if err != nil || len(l) != 1 || l[0].HealthReason != reason {
		t.Errorf("List = %+v, %v; want the sandbox with its reason", l, err)
	}
	if n := car.calls.Load() - before; n != 1 {
		t.Errorf("two Gets and a List made %d Status calls; want 1 (the read is kept)", n)
	}
	if !strings.Contains(e.logs.String(), "sandbox unhealthy") {
		t.Errorf("no log of the sandbox becoming unhealthy: %s", e.logs)
	}

	// Healthy again, once the kept read is stale.
	car.set(nil)
	if sb, _ := e.get(t, id); sb.HealthReason != reason {
		t.Errorf("within healthFresh: HealthReason %q; want the kept %q", sb.HealthReason, reason)
	}
	e.expire()
	if sb, _ := e.get(t, id); sb.HealthReason != "" {
		t.Errorf("healthy again: HealthReason %q", sb.HealthReason)
	}
	if !strings.Contains(e.logs.String(), "sandbox healthy again") {
		t.Errorf("no log of the sandbox becoming healthy: %s", e.logs)
	}

	// A sidecar answering an error says nothing.
	e.expire()
	car.set(func(context.Context) (ioproto.DriverStatus, error) {
		return ioproto.DriverStatus{}, &iosidecar.Error{Message: "the driver has not written its status yet"}
	})
	if sb, _ := e.get(t, id); sb.HealthReason != "" {
		t.Errorf("no status: HealthReason %q", sb.HealthReason)
	}

	// A dead sandbox has no health, and its sidecar is not asked.
	e.expire()
	car.set(says(ioproto.DriverStatus{Health: ioproto.HealthIOFull, HealthReason: reason}))
	p, err := e.m.pods.Pods(e.m.cfg.Namespace).Get(podName(id))
	if err != nil {
		t.Fatal(err)
	}
	dead := p.DeepCopy()
	dead.Annotations[annDeadReason] = "its pod failed"
	e.store.Update(dead)
	before = car.calls.Load()
	if sb, _ := e.get(t, id); sb.State != core.StateDead || sb.HealthReason != "" {
		t.Errorf("dead: state %s, HealthReason %q; want dead with none", sb.State, sb.HealthReason)
	}
	if n := car.calls.Load() - before; n != 0 {
		t.Errorf("a dead sandbox's sidecar was asked %d times", n)
	}

	// A Pod that goes takes its entry with it.
	e.store.Update(p)
	e.get(t, id)
	if e.m.health.reasons.Get(string(p.UID)) == nil {
		t.Fatal("no entry kept for a running sandbox")
	}
	e.store.Delete(p)
	e.m.forgetPod(p)
	if e.m.health.reasons.Get(string(p.UID)) != nil {
		t.Error("the entry of a gone Pod is kept")
	}
}

// TestHealthHostileSidecar: a sidecar that never answers costs a Get at
// most healthWait (and the next Gets nothing while the failure is kept);
// one answering an oversized reason that is not UTF-8 gets a bounded,
// valid one through; neither is an error of the call.
func TestHealthHostileSidecar(t *testing.T) {
	e := newHealthEnv(t)
	id, car := e.sandbox(t)
	car.set(hangs)
	sb, took := e.get(t, id)
	if sb.HealthReason != "" || took > healthWait+500*time.Millisecond {
		t.Errorf("a hanging sidecar: Get took %v, HealthReason %q; want none within about %v", took, sb.HealthReason, healthWait)
	}
	// The read gives up at its own timeout, which the Get did not wait
	// for; once it has, the failure is kept and the next Get asks nothing.
	uid := fmt.Sprintf("uid-%d", e.n)
	if !waitFor(5*time.Second, func() bool { return e.m.health.reasons.Get(uid) != nil }) {
		t.Fatal("the hanging read's failure was not kept within 5 s")
	}
	before := car.calls.Load()
	e.get(t, id)
	if n := car.calls.Load() - before; n != 0 {
		t.Errorf("the Get after a hanging sidecar's timeout asked it %d times; want the failure kept", n)
	}
	if !strings.Contains(e.logs.String(), "its io sidecar did not answer") {
		t.Errorf("no log of the sidecar not answering: %s", e.logs)
	}

	e.expire()
	car.set(says(ioproto.DriverStatus{Health: ioproto.HealthIOFull, HealthReason: "bad \xff\xfe \xc3\x28 " + strings.Repeat("A", 1<<20)}))
	sb, _ = e.get(t, id)
	if len(sb.HealthReason) > cmdlog.MaxHealthReason+len("…") || !utf8.ValidString(sb.HealthReason) || !strings.HasPrefix(sb.HealthReason, "bad \uFFFD") {
		t.Errorf("an oversized reason that is not UTF-8: %d bytes, valid UTF-8 %v: %.40q", len(sb.HealthReason), utf8.ValidString(sb.HealthReason), sb.HealthReason)
	}
	e.expire()
	car.set(says(ioproto.DriverStatus{Health: strings.Repeat("\xff", 1<<16)}))
	if sb, _ = e.get(t, id); len(sb.HealthReason) > 200 || !utf8.ValidString(sb.HealthReason) {
		t.Errorf("an oversized health that is not UTF-8: %d bytes, valid UTF-8 %v", len(sb.HealthReason), utf8.ValidString(sb.HealthReason))
	}
}

// TestHealthListBounded: List of 100 sandboxes, most of whose sidecars
// hang, answers within about healthWait each time, with no reasons for
// those; the reads go on behind the answers (healthParallel at a time), so
// the sandboxes whose sidecars answer show their reasons within a few
// Lists. (The bounds are shortened here: the test would otherwise wait
// for 100 hanging calls of healthCallTimeout, healthParallel at a time.)
func TestHealthListBounded(t *testing.T) {
	e := newHealthEnv(t)
	e.m.health.callTimeout, e.m.health.wait = 200*time.Millisecond, 300*time.Millisecond
	const n = 100
	var sick []string
	for i := range n {
		id, car := e.sandbox(t)
		switch {
		case i%25 == 0:
			car.set(says(ioproto.DriverStatus{Health: ioproto.HealthIOFull, HealthReason: "full " + id}))
			sick = append(sick, id)
		default:
			car.set(hangs)
		}
	}
	var got map[string]string
	// The hanging calls end healthParallel at a time: n/healthParallel
	// rounds of callTimeout bring every read in.
	rounds := 0
	for deadline := time.Now().Add(time.Duration(n/healthParallel+4) * e.m.health.callTimeout * 2); ; rounds++ {
		start := time.Now()
		l, err := e.m.List(e.ctx(t), core.ListFilter{})
		took := time.Since(start)
		if err != nil || len(l) != n {
			t.Fatalf("List round %d: %d sandboxes, %v", rounds, len(l), err)
		}
		if took > e.m.health.wait+500*time.Millisecond {
			t.Errorf("List round %d of %d sandboxes, most of whose sidecars hang, took %v; want about %v", rounds, n, took, e.m.health.wait)
		}
		got = map[string]string{}
		for _, sb := range l {
			if sb.HealthReason != "" {
				got[sb.ID] = sb.HealthReason
			}
		}
		if len(got) == len(sick) || time.Now().After(deadline) {
			break
		}
	}
	for _, id := range sick {
		if got[id] != "full "+id {
			t.Errorf("after %d Lists: sandbox %s's reason %q; want %q", rounds+1, id, got[id], "full "+id)
		}
	}
	if len(got) != len(sick) {
		t.Errorf("after %d Lists: %d reasons; want %d", rounds+1, len(got), len(sick))
	}
	t.Logf("every reason in after %d Lists", rounds+1)
}

// waitFor polls cond every 10 ms until it holds or d has passed, and says
// whether it held.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}
