package kube

import (
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/sandboxd/sandboxd/internal/kubetest"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// storeManager is a Manager on a real API server (envtest), in namespace
// ns, whose Pod cache is a hand-filled store: it lags exactly as far as
// the test says. No informer, leader election or chore runs.
func storeManager(t *testing.T, ns string) (*Manager, kubernetes.Interface, cache.Indexer) {
	t.Helper()
	rc := kubetest.Start(t)
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	store := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	m := &Manager{
		cfg: Config{Policy: core.Policy{Image: "sandbox:test"}, Client: cs, Namespace: ns, IOTokenSecret: "io-token", IOToken: "0123456789abcdef"},
		log: slog.New(slog.DiscardHandler), pods: corelisters.NewPodLister(store),
		ch: make(chan struct{}), active: map[string]*activity{}, conns: map[string]*ioEntry{},
		creating: map[string]time.Time{}, closed: make(chan struct{}), health: newHealthCache(),
	}
	m.cfg.fillDefaults()
	return m, cs, store
}
