// Package kubelet is a test kubelet: it runs the Pods of a Kubernetes API
// server (internal/kubetest's envtest one) on this machine's Docker engine,
// so that the Kubernetes backend's end-to-end tests see Pods start, get an
// IP, become Ready, restart, get OOM-killed and go away as on a cluster.
//
// It is also the scheduler: a Pod without spec.nodeName whose nodeSelector
// matches its Node is bound to it. Each Pod is modelled on a real one: a
// "pause" container on Docker's default bridge network holds the Pod's
// network namespace and publishes every containerPort on the Pod IP
// (127.0.0.N:port -> port, N from 10 up), and the Pod's containers join that
// namespace, so they talk over localhost and the host reaches a Pod at
// podIP:port. Volumes are host directories under Config.StateDir (tmpfs for
// emptyDir medium Memory); init containers, native sidecars with tcpSocket
// and httpGet probes, restart policies, OOM kills (with cgroup v2's
// memory.oom.group semantics: the whole container dies) and graceful
// deletion behave as the kubelet's do, and the Pod's status says so.
//
// Tests reach a Pod at podIP:port for its declared containerPorts only,
// from the host only (Pods reach each other through their bridge
// addresses, if at all). Helpers let them act on it as a node would:
// Kubelet.KillContainer (a crash, or an OOM kill, deterministically) and
// Kubelet.Evict; Kubelet.PodIP and Kubelet.ContainerID find its parts.
//
// What it leaves out: exec probes (they pass), liveness probes, image pull
// policies (a missing image is pulled once), Services, resources and
// taints in scheduling, emptyDir sizeLimit (not enforced) and sharing of
// a medium Memory emptyDir between containers (each container mounts its
// own tmpfs). A RuntimeClass's handler runs the containers, not the pause
// container: a runtime that brings its own network (runsc with
// --network=none) cuts the Pod off from its IP.
//
// This package is test-only; production code must not import it.
package kubelet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Labels on every Docker container the kubelet creates. LabelNode names the
// Node; LabelInstance the Kubelet value, so that two kubelets with the same
// node name (two test binaries at once) never touch each other's containers.
const (
	LabelNode      = "sandboxd.test.kubelet"
	LabelInstance  = "sandboxd.test.kubelet.instance"
	LabelPodUID    = "sandboxd.test.kubelet.pod-uid"
	LabelPodNS     = "sandboxd.test.kubelet.pod-namespace"
	LabelPodName   = "sandboxd.test.kubelet.pod-name"
	LabelContainer = "sandboxd.test.kubelet.container"
	LabelRole      = "sandboxd.test.kubelet.role" // pause, init, sidecar or main
	// LabelPID is the kubelet's process: Start removes the containers
	// of kubelets whose process is gone (a test binary killed before its
	// cleanup), which would otherwise hold their Pod IPs' ports.
	LabelPID = "sandboxd.test.kubelet.pid"
)

// DefaultNodeName is the Node a kubelet registers when Config.NodeName is
// empty.
const DefaultNodeName = "testnode-1"

// maxGrace caps a Pod's termination grace period: tests should not wait
// 30 seconds for a container that ignores SIGTERM.
const maxGrace = 10 * time.Second

// Config configures a Kubelet.
type Config struct {
	// RestConfig reaches the API server (kubetest.Start's admin config).
	RestConfig *rest.Config
	// Docker is the engine Pods run on; nil means a client from the
	// environment (DOCKER_HOST), closed by Stop.
	Docker *client.Client
	// NodeName is the Node registered and scheduled to; default
	// DefaultNodeName.
	NodeName string
	// NodeLabels are added to the Node's labels (kubernetes.io/hostname,
	// kubernetes.io/os and kubernetes.io/arch are always there), for
	// tests of nodeSelector.
	NodeLabels map[string]string
	// StateDir holds the Pods' volumes, <StateDir>/<pod UID>/<volume>;
	// required (a test's t.TempDir()).
	StateDir string
	// IPBase is the first Pod IP; Pods get IPs from it up to .254 of its
	// /24. Default 127.0.0.10. An IP is held with a lock file under
	// os.TempDir() while a Pod uses it, so kubelets in several test
	// binaries never hand out the same one.
	IPBase netip.Addr
	// Logger receives the kubelet's logs; default: discarded.
	Logger *slog.Logger
}

// Kubelet runs the Pods bound to its Node; see the package doc.
type Kubelet struct {
	cfg      Config
	cs       kubernetes.Interface
	docker   *client.Client
	ownsDock bool
	log      *slog.Logger
	instance string
	ips      *ipAllocator
	ncpu     int // the Docker machine's CPUs

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // workers, the event loop
	stop   sync.Once

	factories []informers.SharedInformerFactory

	mu      sync.Mutex
	workers map[types.UID]*podWorker
	all     []*podWorker // every worker ever started, for Stop
}

// Start registers the Node, starts scheduling and running Pods, and
// returns once the informers have synced. ctx bounds the start only; Stop
// ends the kubelet.
func Start(ctx context.Context, cfg Config) (*Kubelet, error) {
	if cfg.RestConfig == nil {
		return nil, errors.New("kubelet: Config.RestConfig is required")
	}
	if cfg.StateDir == "" {
		return nil, errors.New("kubelet: Config.StateDir is required")
	}
	if cfg.NodeName == "" {
		cfg.NodeName = DefaultNodeName
	}
	if !cfg.IPBase.IsValid() {
		cfg.IPBase = netip.AddrFrom4([4]byte{127, 0, 0, 10})
	}
	if !cfg.IPBase.Is4() {
		return nil, fmt.Errorf("kubelet: Config.IPBase %v is not an IPv4 address", cfg.IPBase)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cs, err := kubernetes.NewForConfig(cfg.RestConfig)
	if err != nil {
		return nil, fmt.Errorf("kubelet: client: %w", err)
	}
	ips, err := newIPAllocator(cfg.IPBase)
	if err != nil {
		return nil, err
	}
	var inst [6]byte
	_, _ = rand.Read(inst[:])
	k := &Kubelet{
		cfg:      cfg,
		cs:       cs,
		docker:   cfg.Docker,
		log:      cfg.Logger.With("node", cfg.NodeName),
		instance: hex.EncodeToString(inst[:]),
		ips:      ips,
		workers:  map[types.UID]*podWorker{},
	}
	if k.docker == nil {
		k.docker, err = client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			return nil, fmt.Errorf("kubelet: docker client: %w", err)
		}
		k.ownsDock = true
	}
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("kubelet: %w", err)
	}
	k.ctx, k.cancel = context.WithCancel(context.Background())

	k.removeOrphans(ctx)
	if err := k.registerNode(ctx); err != nil {
		k.Stop()
		return nil, err
	}
	// The Docker event stream is subscribed to before any container
	// exists, so no exit is missed.
	if err := k.startEvents(ctx); err != nil {
		k.Stop()
		return nil, err
	}
	if err := k.startInformers(ctx); err != nil {
		k.Stop()
		return nil, err
	}
	k.log.Info("test kubelet started", "instance", k.instance, "stateDir", cfg.StateDir)
	return k, nil
}

// StartForTest starts a kubelet for t and stops it when t ends (after the
// API server's cleanup has been registered, it runs before it). A start
// failure fails t. cfg.StateDir defaults to a t.TempDir(), cfg.Logger to
// one writing to t's output.
func StartForTest(t testing.TB, cfg Config) *Kubelet {
	t.Helper()
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("starting the test kubelet: %v", err)
	}
	t.Cleanup(k.Stop)
	return k
}

// NodeName is the name of the kubelet's Node.
func (k *Kubelet) NodeName() string { return k.cfg.NodeName }

// Stop stops scheduling and running Pods and removes every container the
// kubelet created, and its Pods' directories. Pod objects stay in the API
// server as they are. Stop is safe to call more than once.
func (k *Kubelet) Stop() {
	k.stop.Do(func() {
		k.cancel()
		for _, f := range k.factories {
			f.Shutdown()
		}
		k.wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		list, err := k.docker.ContainerList(ctx, container.ListOptions{
			All:     true,
			Filters: filters.NewArgs(filters.Arg("label", LabelInstance+"="+k.instance)),
		})
		if err != nil {
			k.log.Error("listing the kubelet's containers", "err", err)
		}
		var wg sync.WaitGroup
		for _, c := range list {
			wg.Go(func() {
				if err := k.docker.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !client.IsErrNotFound(err) {
					k.log.Error("removing container", "id", c.ID, "err", err)
				}
			})
		}
		wg.Wait()
		k.mu.Lock()
		all := k.all
		k.mu.Unlock()
		for _, w := range all {
			w.mu.Lock()
			w.releaseHost()
			w.mu.Unlock()
		}
		k.ips.close()
		if k.ownsDock {
			_ = k.docker.Close()
		}
	})
}

// PodIP is the IP of the Pod ns/name as the kubelet allocated it, "" when
// the Pod has none (not running here, or not yet).
func (k *Kubelet) PodIP(ns, name string) string {
	w := k.worker(ns, name)
	if w == nil {
		return ""
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.ip.IsValid() {
		return ""
	}
	return w.ip.String()
}

// ContainerID is the Docker ID of the current instance of the container
// (init or regular) of the Pod ns/pod, "" when there is none.
func (k *Kubelet) ContainerID(ns, pod, name string) string {
	w := k.worker(ns, pod)
	if w == nil {
		return ""
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if c := w.ctrs[name]; c != nil {
		return c.id
	}
	return ""
}

// KillContainer kills the container (SIGKILL) as a crash would; with oom
// it is reported as an OOM kill (reason OOMKilled, exit code 137), which
// simulates one deterministically. It returns once the kill is sent; the
// Pod's status tells the rest.
func (k *Kubelet) KillContainer(ns, pod, name string, oom bool) error {
	w := k.worker(ns, pod)
	if w == nil {
		return fmt.Errorf("kubelet: pod %s/%s is not running on node %s", ns, pod, k.cfg.NodeName)
	}
	w.mu.Lock()
	c := w.ctrs[name]
	var id string
	if c != nil {
		id = c.id
		if oom && id != "" {
			c.oomID = id
		}
	}
	w.mu.Unlock()
	if id == "" {
		return fmt.Errorf("kubelet: pod %s/%s has no container %q running", ns, pod, name)
	}
	if err := k.docker.ContainerKill(context.Background(), id, "KILL"); err != nil {
		return fmt.Errorf("kubelet: kill %s/%s/%s: %w", ns, pod, name, err)
	}
	return nil
}

// Evict evicts the Pod ns/name as the kubelet's eviction manager does
// under node pressure: its containers are stopped and it ends Failed with
// status.reason Evicted and the message, and a DisruptionTarget
// condition. The Pod object stays until it is deleted. It returns once
// the eviction is queued; the Pod's status tells the rest.
func (k *Kubelet) Evict(ns, name, message string) error {
	w := k.worker(ns, name)
	if w == nil {
		return fmt.Errorf("kubelet: pod %s/%s is not running on node %s", ns, name, k.cfg.NodeName)
	}
	w.mu.Lock()
	if w.reason == "" {
		w.reason, w.message = "Evicted", message
	}
	w.mu.Unlock()
	w.wake()
	return nil
}

// worker finds the live worker of the Pod ns/name.
func (k *Kubelet) worker(ns, name string) *podWorker {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, w := range k.workers {
		if w.ns == ns && w.name == name && !w.isFinished() {
			return w
		}
	}
	return nil
}

// removeOrphans removes the containers of test kubelets whose process no
// longer exists on this machine.
func (k *Kubelet) removeOrphans(ctx context.Context) {
	list, err := k.docker.ContainerList(ctx, container.ListOptions{
		All:     true,
		Filters: filters.NewArgs(filters.Arg("label", LabelPID)),
	})
	if err != nil {
		k.log.Warn("listing orphaned containers", "err", err)
		return
	}
	for _, c := range list {
		pid, err := strconv.Atoi(c.Labels[LabelPID])
		if err != nil || pid <= 0 || unix.Kill(pid, 0) != unix.ESRCH {
			continue
		}
		k.log.Info("removing the container of a kubelet that is gone", "name", c.Names, "pid", pid)
		if err := k.docker.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !client.IsErrNotFound(err) {
			k.log.Warn("removing orphaned container", "id", c.ID, "err", err)
		}
	}
}

// registerNode creates (or takes over) the Node, Ready, without the
// not-ready taint the API server's admission puts on a new Node.
func (k *Kubelet) registerNode(ctx context.Context) error {
	info, err := k.docker.Info(ctx)
	if err != nil {
		return fmt.Errorf("kubelet: docker info: %w", err)
	}
	k.ncpu = max(info.NCPU, 1)
	lbls := map[string]string{
		"kubernetes.io/hostname": k.cfg.NodeName,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     runtime.GOARCH,
		LabelNode:                "true",
	}
	maps.Copy(lbls, k.cfg.NodeLabels)
	nodes := k.cs.CoreV1().Nodes()
	node, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: k.cfg.NodeName, Labels: lbls}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		node, err = nodes.Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("kubelet: register node %s: %w", k.cfg.NodeName, err)
	}
	if len(node.Spec.Taints) > 0 || !maps.Equal(node.Labels, lbls) {
		node.Spec.Taints = nil
		node.Labels = lbls
		if node, err = nodes.Update(ctx, node, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("kubelet: update node %s: %w", k.cfg.NodeName, err)
		}
	}
	now := metav1.Now()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(int64(k.ncpu), resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(info.MemTotal, resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(110, resource.DecimalSI),
	}
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	node.Status = corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity,
		Phase:       corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory"),
			cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure"),
			cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID"),
			cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady"),
		},
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: hostIP},
			{Type: corev1.NodeHostName, Address: k.cfg.NodeName},
		},
		NodeInfo: corev1.NodeSystemInfo{
			KubeletVersion:          "v0.0.0-sandboxd-test",
			ContainerRuntimeVersion: "docker://" + info.ServerVersion,
			OperatingSystem:         "linux",
			Architecture:            runtime.GOARCH,
			KernelVersion:           info.KernelVersion,
			OSImage:                 info.OperatingSystem,
		},
	}
	if _, err := nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("kubelet: node %s status: %w", k.cfg.NodeName, err)
	}
	return nil
}

// startInformers starts the scheduler's informer (Pods without a node)
// and the kubelet's (Pods on this node) and waits for them to sync.
func (k *Kubelet) startInformers(ctx context.Context) error {
	newFactory := func(selector string) informers.SharedInformerFactory {
		return informers.NewSharedInformerFactoryWithOptions(k.cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = selector
		}))
	}
	unscheduled := newFactory(fields.OneTermEqualSelector("spec.nodeName", "").String())
	mine := newFactory(fields.OneTermEqualSelector("spec.nodeName", k.cfg.NodeName).String())
	k.factories = []informers.SharedInformerFactory{unscheduled, mine}

	if _, err := unscheduled.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.schedule(obj) },
		UpdateFunc: func(_, obj any) { k.schedule(obj) },
	}); err != nil {
		return fmt.Errorf("kubelet: %w", err)
	}
	if _, err := mine.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.podChanged(obj) },
		UpdateFunc: func(_, obj any) { k.podChanged(obj) },
		DeleteFunc: func(obj any) { k.podDeleted(obj) },
	}); err != nil {
		return fmt.Errorf("kubelet: %w", err)
	}
	for _, f := range k.factories {
		f.Start(k.ctx.Done())
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return fmt.Errorf("kubelet: informer for %v did not sync: %w", typ, context.Cause(ctx))
			}
		}
	}
	return nil
}

// schedule binds an unscheduled Pod to the node if it fits: default
// scheduler, no scheduling gates, nodeSelector matching the Node's labels.
// Resources and taints are not considered.
func (k *Kubelet) schedule(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil || len(pod.Spec.SchedulingGates) > 0 {
		return
	}
	if s := pod.Spec.SchedulerName; s != "" && s != corev1.DefaultSchedulerName {
		return
	}
	lbls := map[string]string{
		"kubernetes.io/hostname": k.cfg.NodeName,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     runtime.GOARCH,
	}
	maps.Copy(lbls, k.cfg.NodeLabels)
	if !labels.SelectorFromSet(pod.Spec.NodeSelector).Matches(labels.Set(lbls)) {
		k.log.Info("pod does not fit the node's labels, left unscheduled", "pod", pod.Namespace+"/"+pod.Name, "nodeSelector", pod.Spec.NodeSelector)
		return
	}
	err := k.cs.CoreV1().Pods(pod.Namespace).Bind(k.ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: k.cfg.NodeName},
	}, metav1.CreateOptions{})
	switch {
	case err == nil:
		k.log.Info("pod bound", "pod", pod.Namespace+"/"+pod.Name)
	case apierrors.IsConflict(err), apierrors.IsNotFound(err), k.ctx.Err() != nil:
		// Bound elsewhere, or gone.
	default:
		k.log.Error("binding pod", "pod", pod.Namespace+"/"+pod.Name, "err", err)
	}
}

// podChanged hands a Pod on this node to its worker, starting one for a
// Pod not yet running here (unless it is already finished).
func (k *Kubelet) podChanged(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || k.ctx.Err() != nil {
		return
	}
	k.mu.Lock()
	w := k.workers[pod.UID]
	if w == nil {
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			k.mu.Unlock()
			return
		}
		w = newPodWorker(k, pod)
		k.workers[pod.UID] = w
		k.all = append(k.all, w)
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			w.run()
		}()
	}
	k.mu.Unlock()
	w.setPod(pod)
}

// podDeleted tells the worker its Pod object is gone (deleted by force,
// or after the kubelet deleted it).
func (k *Kubelet) podDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	k.mu.Lock()
	w := k.workers[pod.UID]
	delete(k.workers, pod.UID)
	k.mu.Unlock()
	if w != nil {
		w.setGone()
	}
}

// startEvents follows the Docker events of the kubelet's containers (die
// and oom) and hands them to the Pods' workers. A broken stream is resumed
// from the last event seen, which Docker replays.
func (k *Kubelet) startEvents(ctx context.Context) error {
	args := filters.NewArgs(
		filters.Arg("type", string(events.ContainerEventType)),
		filters.Arg("label", LabelInstance+"="+k.instance),
		filters.Arg("event", string(events.ActionDie)),
		filters.Arg("event", string(events.ActionOOM)),
	)
	// Docker sends nothing on subscribe; a ping proves the engine is there.
	if _, err := k.docker.Ping(ctx); err != nil {
		return fmt.Errorf("kubelet: docker: %w", err)
	}
	since := time.Now()
	subscribe := func() (<-chan events.Message, <-chan error) {
		return k.docker.Events(k.ctx, events.ListOptions{
			Filters: args,
			Since:   strconv.FormatInt(since.Unix(), 10) + "." + fmt.Sprintf("%09d", since.Nanosecond()),
		})
	}
	msgs, errs := subscribe()
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		for {
			select {
			case <-k.ctx.Done():
				return
			case m := <-msgs:
				since = time.Unix(0, m.TimeNano)
				k.route(m)
			case err := <-errs:
				if k.ctx.Err() != nil {
					return
				}
				k.log.Warn("docker event stream broke; resubscribing", "err", err)
				select {
				case <-k.ctx.Done():
					return
				case <-time.After(200 * time.Millisecond):
				}
				msgs, errs = subscribe()
			}
		}
	}()
	return nil
}

// route hands a Docker event to the worker of the Pod named in the
// container's labels, which Docker copies into the event.
func (k *Kubelet) route(m events.Message) {
	uid := types.UID(m.Actor.Attributes[LabelPodUID])
	k.mu.Lock()
	w := k.workers[uid]
	k.mu.Unlock()
	if w != nil {
		w.event(m)
	}
}
