package kube

import (
	"errors"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPoolClaimBehindTheCache: a replica's cache may still show a warm-pool
// Pod as unclaimed for a moment after a replica claimed it. Neither a
// lookup nor the leader may act on that stale copy: the claimant's first
// call right after its Acquire finds its sandbox (CI's bench once got
// NotFound there), and the leader trimming the pool does not remove a Pod
// a user now holds. The API server is real; the cache is a hand-filled
// store, so that it lags exactly as far as the test says.
func TestPoolClaimBehindTheCache(t *testing.T) {
	const ns = "pool-test"
	m, cs, store := storeManager(t, ns)
	ctx := t.Context()

	// poolPod creates a ready warm-pool Pod (the status a kubelet would
	// write) and puts what the API server answered into the cache.
	poolPod := func() *corev1.Pod {
		t.Helper()
		p, err := cs.CoreV1().Pods(ns).Create(ctx, buildPod(&m.cfg, podSpec{id: core.NewSandboxID(), pool: true}), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "198.18.0.2",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		if p, err = cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := store.Add(p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fromAPI := func(p *corev1.Pod) *corev1.Pod {
		t.Helper()
		q, err := cs.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("pod %s: %v", p.Name, err)
		}
		return q
	}

	stale := poolPod()
	id := stale.Labels[labelSandboxID]
	claimed := m.claim(ctx, podSpec{tenant: "acme", userID: "alice", now: time.Now()})
	if claimed == nil || claimed.Labels[labelSandboxID] != id {
		t.Fatalf("claim took %v; want the pool's only pod %s", claimed, stale.Name)
	}
	// The cache still holds the pool copy: nothing updated the store.

	alice := core.WithCaller(ctx, core.Caller{Tenant: "acme"})
	if p, err := m.visible(alice, id); err != nil {
		t.Errorf("the claimant's first lookup, the cache not showing the claim yet: %v; want its sandbox", err)
	} else if p.Labels[labelPool] != "false" || p.Annotations[annUserID] != "alice" {
		t.Errorf("the lookup answered the pool copy (labels %v); want the claimed pod", p.Labels)
	}
	if _, err := m.visible(core.WithCaller(ctx, core.Caller{Tenant: "other"}), id); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("another tenant's lookup of the claimed sandbox: %v; want NotFound", err)
	}

	// The leader, with a pool of size 0 and the stale copy, sees a
	// surplus pod: it must not remove the claimed one.
	m.refillPool(ctx)
	if q, err := cs.CoreV1().Pods(ns).Get(ctx, stale.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("the leader removed a claimed pod on its stale copy: %v", err)
	} else if q.Annotations[annDeleting] != "" || q.DeletionTimestamp != nil {
		t.Errorf("the leader began removing a claimed pod on its stale copy (deleting %q)", q.Annotations[annDeleting])
	}

	// An unclaimed pool pod in a cache that is up to date is still a
	// surplus, and goes; and a lookup of it by ID, past the cache, is
	// NotFound, as for any pool sandbox.
	store.Update(fromAPI(stale))
	surplus := poolPod()
	if _, err := m.visible(alice, surplus.Labels[labelSandboxID]); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("lookup of an unclaimed pool sandbox: %v; want NotFound", err)
	}
	m.refillPool(ctx)
	q, err := cs.CoreV1().Pods(ns).Get(ctx, surplus.Name, metav1.GetOptions{})
	if err == nil && q.Annotations[annDeleting] == "" && q.DeletionTimestamp == nil {
		t.Errorf("the leader left a surplus pool pod (warm pool 0): %s", q.Name)
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// TestRefillAfterAClaimItNeverSaw: a pool Pod claimed before the leader's
// loop saw it in the pool (the claim came within the loop's pause) is
// shown by the cache as a user's Pod: it no longer counts as a pool Pod
// being created, and the pool is refilled at once, not a minute later
// (TestStartFromSnapshotTakesAPoolPod found it waiting).
func TestRefillAfterAClaimItNeverSaw(t *testing.T) {
	const ns = "pool-refill-test"
	m, cs, store := storeManager(t, ns)
	ctx := t.Context()
	m.cfg.WarmPool = 1
	p, err := cs.CoreV1().Pods(ns).Create(ctx, buildPod(&m.cfg, podSpec{id: core.NewSandboxID(), pool: true}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m.creating[p.Name] = time.Now() // the leader created it
	p.Labels[labelPool] = "false"   // and the cache first shows it claimed
	if err := store.Add(p); err != nil {
		t.Fatal(err)
	}
	m.refillPool(ctx)
	if _, counted := m.creating[p.Name]; counted {
		t.Fatalf("the claimed pod %s still counts as a pool pod being created", p.Name)
	}
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labelPool + "=true"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.Items); n != 2 { // the one created above, whose label the API server kept, and the refill
		t.Fatalf("%d pool pods in the API server after the refill; want a new one beside the first", n)
	}
}
