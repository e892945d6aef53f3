package kubetest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// eventWait bounds every wait for the API server or the informer; each
// normally takes milliseconds.
const eventWait = 30 * time.Second

// TestAPIServer starts a real API server and does what the Kubernetes
// backend will rely on: create a Namespace and a Pod with client-go, see the
// Pod's creation and a status update through an informer's watch, and
// validate objects with a server-side apply dry run that stores nothing.
func TestAPIServer(t *testing.T) {
	start := time.Now()
	cfg := Start(t)
	t.Logf("envtest: kube-apiserver and etcd up in %v (assets %s)", time.Since(start).Round(time.Millisecond), AssetsDir())

	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	ctx := t.Context()

	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("server version: %v", err)
	}
	t.Logf("server version %s", v.GitVersion)
	if os.Getenv("KUBEBUILDER_ASSETS") == "" && v.GitVersion != "v"+K8sVersion {
		t.Errorf("API server from the default cache reports %s, want v%s", v.GitVersion, K8sVersion)
	}

	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: "kubetest"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}

	// The informer is synced before the Pod exists, so the Pod can only
	// arrive through the watch, not the initial list.
	type podEvent struct {
		pod     *corev1.Pod
		initial bool
	}
	// Sends never block the informer (which would hang its shutdown): the
	// test causes two events, far fewer than the buffers hold.
	adds := make(chan podEvent, 16)
	updates := make(chan *corev1.Pod, 16)
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns.Name))
	podInformer := factory.Core().V1().Pods().Informer()
	if _, err := podInformer.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if p, ok := obj.(*corev1.Pod); ok {
				select {
				case adds <- podEvent{p, initial}:
				default:
				}
			}
		},
		UpdateFunc: func(_, obj any) {
			if p, ok := obj.(*corev1.Pod); ok {
				select {
				case updates <- p:
				default:
				}
			}
		},
	}); err != nil {
		t.Fatalf("add event handler: %v", err)
	}
	factory.Start(ctx.Done())
	// ctx is cancelled before cleanups run, which stops the informer;
	// Shutdown waits for it, before Start's cleanup stops the API server.
	t.Cleanup(factory.Shutdown)
	syncCtx, cancel := context.WithTimeout(ctx, eventWait)
	defer cancel()
	for typ, ok := range factory.WaitForCacheSync(syncCtx.Done()) {
		if !ok {
			t.Fatalf("informer for %v did not sync within %v", typ, eventWait)
		}
	}

	created, err := cs.CoreV1().Pods(ns.Name).Create(ctx, testPod("sandbox-1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	select {
	case ev := <-adds:
		if ev.pod.UID != created.UID || ev.pod.Name != "sandbox-1" {
			t.Fatalf("informer saw pod %s (uid %s), want sandbox-1 (uid %s)", ev.pod.Name, ev.pod.UID, created.UID)
		}
		if ev.initial {
			t.Fatalf("pod sandbox-1 came in the informer's initial list, not through the watch")
		}
		if ev.pod.Labels["app.kubernetes.io/name"] != "sandbox" {
			t.Fatalf("informer's pod has labels %v, want the created ones", ev.pod.Labels)
		}
	case <-time.After(eventWait):
		t.Fatalf("informer did not see pod sandbox-1 created within %v", eventWait)
	}

	// A status update through the status subresource, as a kubelet does,
	// reaches the informer too.
	running := created.DeepCopy()
	running.Status.Phase = corev1.PodRunning
	if _, err := cs.CoreV1().Pods(ns.Name).UpdateStatus(ctx, running, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update pod status: %v", err)
	}
	select {
	case p := <-updates:
		if p.Status.Phase != corev1.PodRunning {
			t.Fatalf("informer saw pod update with phase %q, want Running", p.Status.Phase)
		}
	case <-time.After(eventWait):
		t.Fatalf("informer did not see pod sandbox-1's status update within %v", eventWait)
	}

	// Server-side apply, dry run: the server validates and defaults the
	// object and answers as if it had stored it, but stores nothing.
	dryRun := metav1.ApplyOptions{FieldManager: "sandboxd-kubetest", DryRun: []string{metav1.DryRunAll}, Force: true}
	applied, err := cs.CoreV1().Pods(ns.Name).Apply(ctx, applyPod("sandbox-dry", ns.Name, "sandbox"), dryRun)
	if err != nil {
		t.Fatalf("server-side apply dry run of a valid pod: %v", err)
	}
	if applied.Name != "sandbox-dry" || len(applied.Spec.Containers) != 1 || applied.Spec.Containers[0].Image != "sandboxd-sandbox:test" {
		t.Fatalf("dry-run apply returned %s with containers %+v", applied.Name, applied.Spec.Containers)
	}
	if applied.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		t.Fatalf("dry-run apply returned restartPolicy %q, want the server's default Always", applied.Spec.RestartPolicy)
	}
	if !managedBy(applied, "sandboxd-kubetest") {
		t.Fatalf("dry-run apply returned managedFields %+v without manager sandboxd-kubetest", applied.ManagedFields)
	}
	if _, err := cs.CoreV1().Pods(ns.Name).Get(ctx, "sandbox-dry", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after a dry-run apply, get pod sandbox-dry = %v, want NotFound (nothing stored)", err)
	}
	// Validation runs in a dry run: a Pod with an invalid container name
	// is rejected as a real apply would be.
	_, err = cs.CoreV1().Pods(ns.Name).Apply(ctx, applyPod("sandbox-bad", ns.Name, "Not_A_DNS_Label"), dryRun)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "Not_A_DNS_Label") {
		t.Fatalf("dry-run apply of a pod with an invalid container name: err = %v, want Invalid naming the name", err)
	}
}

func testPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: map[string]string{"app.kubernetes.io/name": "sandbox"},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "sandbox", Image: "sandboxd-sandbox:test"}},
		},
	}
}

func applyPod(name, namespace, container string) *corev1ac.PodApplyConfiguration {
	return corev1ac.Pod(name, namespace).
		WithLabels(map[string]string{"app.kubernetes.io/name": "sandbox"}).
		WithSpec(corev1ac.PodSpec().
			WithContainers(corev1ac.Container().WithName(container).WithImage("sandboxd-sandbox:test")))
}

func managedBy(p *corev1.Pod, manager string) bool {
	for _, mf := range p.ManagedFields {
		if mf.Manager == manager && mf.Operation == metav1.ManagedFieldsOperationApply {
			return true
		}
	}
	return false
}

// TestAssetsDir checks where Start looks for the binaries: KUBEBUILDER_ASSETS
// first, else the cache directory scripts/envtest-assets.sh fills, for the
// version the script builds by default.
func TestAssetsDir(t *testing.T) {
	script, err := os.ReadFile(filepath.Join("..", "..", "scripts", "envtest-assets.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^K8S_VERSION=\$\{K8S_VERSION:-([0-9.]+)\}$`).FindSubmatch(script)
	if m == nil {
		t.Fatal("scripts/envtest-assets.sh has no K8S_VERSION=${K8S_VERSION:-x.y.z} line")
	}
	if string(m[1]) != K8sVersion {
		t.Fatalf("scripts/envtest-assets.sh builds Kubernetes %s, K8sVersion is %s: keep them equal", m[1], K8sVersion)
	}

	t.Setenv("KUBEBUILDER_ASSETS", "/opt/assets")
	if got := AssetsDir(); got != "/opt/assets" {
		t.Errorf("with KUBEBUILDER_ASSETS set, AssetsDir() = %q", got)
	}
	t.Setenv("KUBEBUILDER_ASSETS", "")
	t.Setenv("SANDBOXD_CACHE", "/var/cache/x")
	if got, want := AssetsDir(), "/var/cache/x/envtest/k8s-"+K8sVersion; got != want {
		t.Errorf("with SANDBOXD_CACHE set, AssetsDir() = %q, want %q", got, want)
	}
	t.Setenv("SANDBOXD_CACHE", "")
	t.Setenv("HOME", "/home/u")
	if got, want := AssetsDir(), "/home/u/.cache/sandboxd/envtest/k8s-"+K8sVersion; got != want {
		t.Errorf("by default, AssetsDir() = %q, want %q", got, want)
	}
}

func TestTailBuffer(t *testing.T) {
	w := &tailBuffer{max: 8}
	if got := w.String(); got != "(none)" {
		t.Errorf("empty: %q", got)
	}
	w.Write([]byte("hello "))
	w.Write([]byte("world"))
	if got := w.String(); got != "lo world" {
		t.Errorf("got %q, want the last 8 bytes %q", got, "lo world")
	}
}

// TestNotInProductionBinaries keeps envtest, this package and its test
// kubelet (which start processes from a test cache and containers) out of
// every binary under cmd/ that ships: they are for tests only. The one
// exception is cmd/sandbox-bench, the benchmark, a developer tool run from
// the repository that measures the Kubernetes backend on a local API server
// and the test kubelet (docs/benchmarks-history.md).
func TestNotInProductionBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list; skipped in -short mode")
	}
	// go test puts its own go first on PATH.
	out, err := exec.Command("go", "list", "github.com/sandboxd/sandboxd/cmd/...").Output()
	if err != nil {
		t.Fatalf("go list ./cmd/...: %v", err)
	}
	var shipped []string
	for cmd := range strings.FieldsSeq(string(out)) {
		if cmd != "github.com/sandboxd/sandboxd/cmd/sandbox-bench" {
			shipped = append(shipped, cmd)
		}
	}
	if len(shipped) < 5 {
		t.Fatalf("go list ./cmd/... found only %v", shipped)
	}
	out, err = exec.Command("go", append([]string{"list", "-deps", "-f", "{{.ImportPath}}"}, shipped...)...).Output()
	if err != nil {
		t.Fatalf("go list -deps %v: %v", shipped, err)
	}
	for pkg := range strings.FieldsSeq(string(out)) {
		if strings.HasPrefix(pkg, "sigs.k8s.io/controller-runtime/pkg/envtest") || strings.HasPrefix(pkg, "github.com/sandboxd/sandboxd/internal/kubetest") {
			t.Errorf("a binary under cmd/ depends on %s, which is test-only", pkg)
		}
	}
}
