package kubelet_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/sandboxd/sandboxd/internal/kubetest"
	"github.com/sandboxd/sandboxd/internal/kubetest/kubelet"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// podWait bounds each wait for a Pod to reach a state; a Pod starts in a
// second or two, a deletion takes its (1 s) grace period.
const podWait = 60 * time.Second

const (
	ns     = "kubelet-test"
	secret = "s3cret-token-0123456789"
)

// env is what the subtests share: one API server and one kubelet, since
// starting the API server takes seconds.
type env struct {
	cs       kubernetes.Interface
	docker   *client.Client
	k        *kubelet.Kubelet
	img      string
	stateDir string
}

// TestKubelet runs Pods shaped like the Kubernetes backend's sandbox Pods
// (issue 11's contract) on a real API server and Docker, and checks what
// the backend's end-to-end tests rely on.
func TestKubelet(t *testing.T) {
	img := testenv.NeedDocker(t)
	cfg := kubetest.Start(t)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	docker, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { docker.Close() })
	stateDir := t.TempDir()
	k := kubelet.StartForTest(t, kubelet.Config{RestConfig: cfg, Docker: docker, StateDir: stateDir})
	e := &env{cs: cs, docker: docker, k: k, img: img, stateDir: stateDir}

	ctx := t.Context()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "io-token"},
		Data:       map[string][]byte{"token": []byte(secret)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	node, err := cs.CoreV1().Nodes().Get(ctx, kubelet.DefaultNodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the kubelet registered no node %s: %v", kubelet.DefaultNodeName, err)
	}
	if !nodeReady(node) || len(node.Spec.Taints) > 0 || node.Status.Capacity.Cpu().IsZero() {
		t.Fatalf("node %s: taints %v, capacity %v, conditions %+v; want Ready, untainted, with capacity", node.Name, node.Spec.Taints, node.Status.Capacity, node.Status.Conditions)
	}

	t.Run("SandboxPod", e.testSandboxPod)
	t.Run("NeverRestartFails", e.testNeverRestart)
	t.Run("InitContainersInOrder", e.testInitOrder)
	t.Run("RealOOM", e.testRealOOM)
	t.Run("Finalizer", e.testFinalizer)
	t.Run("SidecarRestartAndEviction", e.testSidecarAndEviction)
	// Last: it stops the kubelet.
	t.Run("StopRemovesContainers", e.testStop)
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// sandboxPod is shaped like the contract's Pod: an io native sidecar
// (here python's http.server on 7070, listening after half a second, so a
// probe that does not really probe would let the main container start too
// early) and a sandbox main container that fails unless it reaches the
// sidecar over localhost at its start.
func (e *env) sandboxPod(name string) *corev1.Pod {
	always := corev1.ContainerRestartPolicyAlways
	grace := int64(1)
	f, tr := false, true
	root, user := int64(0), int64(1000)
	probe := func(port intstr.IntOrString) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: port}}, PeriodSeconds: 1, FailureThreshold: 30}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app.kubernetes.io/managed-by": "sandboxd"}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  &f,
			EnableServiceLinks:            &f,
			Volumes: []corev1.Volume{
				{Name: "io", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr(resource.MustParse("1Gi"))}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
			},
			InitContainers: []corev1.Container{{
				Name:          "io",
				Image:         e.img,
				RestartPolicy: &always,
				Command:       []string{"sh", "-c", "sleep 0.5; exec python3 -m http.server 7070 --directory /io"},
				Env: []corev1.EnvVar{{
					Name:      "SANDBOXD_IO_TOKEN",
					ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "io-token"}, Key: "token"}},
				}},
				Ports:          []corev1.ContainerPort{{ContainerPort: 7070, Name: "io"}},
				StartupProbe:   probe(intstr.FromInt32(7070)),
				ReadinessProbe: probe(intstr.FromString("io")),
				SecurityContext: &corev1.SecurityContext{
					RunAsUser: &root, RunAsNonRoot: &f, ReadOnlyRootFilesystem: &tr, AllowPrivilegeEscalation: &f,
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"CHOWN", "DAC_OVERRIDE", "FOWNER"}},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "io", MountPath: "/io"}, {Name: "workspace", MountPath: "/workspace"}},
			}},
			Containers: []corev1.Container{{
				Name:    "sandbox",
				Image:   e.img,
				Command: []string{"sh", "-c"},
				// $(GREETING) is the kubelet's expansion, not the shell's
				// command substitution.
				Args: []string{`python3 -c 'import urllib.request; urllib.request.urlopen("http://127.0.0.1:7070/")' && echo $(GREETING) > /workspace/started && touch /tmp/x && exec sleep infinity`},
				Env: []corev1.EnvVar{
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
					{Name: "GREETING", Value: "hi-$(POD_NAME)"},
				},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
					corev1.ResourceMemory: resource.MustParse("256Mi"),
					corev1.ResourceCPU:    resource.MustParse("500m"),
				}},
				SecurityContext: &corev1.SecurityContext{
					RunAsUser: &user, RunAsGroup: &user, RunAsNonRoot: &tr, ReadOnlyRootFilesystem: &tr, AllowPrivilegeEscalation: &f,
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "io", MountPath: "/io"}, {Name: "workspace", MountPath: "/workspace"}, {Name: "tmp", MountPath: "/tmp"}},
			}},
		},
	}
}

func ptr[T any](v T) *T { return &v }

func (e *env) testSandboxPod(t *testing.T) {
	ctx := t.Context()
	created, err := e.cs.CoreV1().Pods(ns).Create(ctx, e.sandboxPod("sbx-a"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := e.waitPod(t, "sbx-a", "Running and Ready", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && podCondition(p, corev1.PodReady)
	})
	if pod.Spec.NodeName != kubelet.DefaultNodeName {
		t.Errorf("spec.nodeName = %q, want %q (bound by the kubelet's scheduler)", pod.Spec.NodeName, kubelet.DefaultNodeName)
	}
	for _, c := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady} {
		if !podCondition(pod, c) {
			t.Errorf("condition %s is not True: %+v", c, pod.Status.Conditions)
		}
	}
	ip, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil || !netip.MustParsePrefix("127.0.0.0/24").Contains(ip) || ip.As4()[3] < 10 {
		t.Fatalf("podIP %q, want 127.0.0.N with N >= 10", pod.Status.PodIP)
	}
	if got := e.k.PodIP(ns, "sbx-a"); got != pod.Status.PodIP {
		t.Errorf("PodIP() = %q, status says %q", got, pod.Status.PodIP)
	}
	if pod.Status.HostIP != "127.0.0.1" || len(pod.Status.PodIPs) != 1 {
		t.Errorf("hostIP %q, podIPs %v", pod.Status.HostIP, pod.Status.PodIPs)
	}
	ioSt := initStatus(pod, "io")
	if ioSt == nil || !ioSt.Ready || ioSt.Started == nil || !*ioSt.Started || ioSt.State.Running == nil {
		t.Fatalf("io sidecar status %+v, want running, started and ready", ioSt)
	}
	sb := ctrStatus(pod, "sandbox")
	// A restart would mean it started before the sidecar listened.
	if sb == nil || !sb.Ready || sb.State.Running == nil || sb.RestartCount != 0 {
		t.Fatalf("sandbox container status %+v, want running and ready, never restarted", sb)
	}

	// The host reaches the Pod at podIP:port (an HTTP answer, since
	// Docker's proxy accepts any connection on a published port).
	resp, err := http.Get("http://" + pod.Status.PodIP + ":7070/")
	if err != nil {
		t.Fatalf("GET the sidecar at the pod IP: %v", err)
	}
	body, _ := readBody(resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET the sidecar at the pod IP: %s %s", resp.Status, body)
	}

	// The main container reached the sidecar over localhost, expanded
	// $(GREETING), and wrote through the shared volume to the host.
	e.waitStarted(t, created)

	// The secret reaches the sidecar's environment.
	ioID := e.k.ContainerID(ns, "sbx-a", "io")
	out, err := exec.CommandContext(ctx, "docker", "exec", ioID, "printenv", "SANDBOXD_IO_TOKEN").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != secret {
		t.Fatalf("docker exec printenv SANDBOXD_IO_TOKEN in the io container: %q, %v", out, err)
	}
	// The security context and limits reach Docker.
	sbID := e.k.ContainerID(ns, "sbx-a", "sandbox")
	ins, err := e.docker.ContainerInspect(ctx, sbID)
	if err != nil {
		t.Fatal(err)
	}
	hc := ins.HostConfig
	if ins.Config.User != "1000:1000" || !hc.ReadonlyRootfs || hc.Memory != 256<<20 || hc.MemorySwap != 256<<20 || hc.NanoCPUs != 500_000_000 ||
		!slices.Contains(hc.CapDrop, "ALL") || !slices.Contains(hc.SecurityOpt, "no-new-privileges") || !strings.HasPrefix(string(hc.NetworkMode), "container:") {
		t.Errorf("sandbox container: user %q, readonly %v, memory %d/%d, nanocpus %d, capdrop %v, securityopt %v, network %s",
			ins.Config.User, hc.ReadonlyRootfs, hc.Memory, hc.MemorySwap, hc.NanoCPUs, hc.CapDrop, hc.SecurityOpt, hc.NetworkMode)
	}
	if !slices.Contains(ins.Config.Env, "POD_IP="+pod.Status.PodIP) {
		t.Errorf("sandbox env %v lacks POD_IP=%s", ins.Config.Env, pod.Status.PodIP)
	}

	// A crash: restarted, with the end of the first run in lastState.
	if err := e.k.KillContainer(ns, "sbx-a", "sandbox", false); err != nil {
		t.Fatal(err)
	}
	pod = e.waitPod(t, "sbx-a", "sandbox restarted once and Ready", func(p *corev1.Pod) bool {
		s := ctrStatus(p, "sandbox")
		return s != nil && s.RestartCount == 1 && s.Ready && podCondition(p, corev1.PodReady)
	})
	last := ctrStatus(pod, "sandbox").LastTerminationState.Terminated
	if last == nil || last.Reason != "Error" || last.ExitCode != 137 {
		t.Fatalf("lastState after a kill: %+v, want terminated Error 137", last)
	}
	if id := e.k.ContainerID(ns, "sbx-a", "sandbox"); id == sbID || id == "" {
		t.Errorf("container ID after restart %q, before %q: want a new container", id, sbID)
	}

	// An OOM kill, simulated.
	if err := e.k.KillContainer(ns, "sbx-a", "sandbox", true); err != nil {
		t.Fatal(err)
	}
	pod = e.waitPod(t, "sbx-a", "sandbox restarted after an OOM kill", func(p *corev1.Pod) bool {
		s := ctrStatus(p, "sandbox")
		return s != nil && s.RestartCount == 2 && s.State.Running != nil
	})
	last = ctrStatus(pod, "sandbox").LastTerminationState.Terminated
	if last == nil || last.Reason != "OOMKilled" || last.ExitCode != 137 {
		t.Fatalf("lastState after an OOM kill: %+v, want terminated OOMKilled 137", last)
	}

	// A second Pod gets its own IP.
	if _, err := e.cs.CoreV1().Pods(ns).Create(ctx, e.sandboxPod("sbx-b"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	podB := e.waitPod(t, "sbx-b", "Running and Ready", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && podCondition(p, corev1.PodReady)
	})
	if podB.Status.PodIP == "" || podB.Status.PodIP == pod.Status.PodIP {
		t.Fatalf("second pod's IP %q, first's %q: want two different IPs", podB.Status.PodIP, pod.Status.PodIP)
	}

	// Deletion: containers, directories and the object go (both Pods at
	// once: each takes its grace period).
	for _, name := range []string{"sbx-a", "sbx-b"} {
		if err := e.cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.waitGone(t, "sbx-a")
	e.checkCleaned(t, created)
	if ip := e.k.PodIP(ns, "sbx-a"); ip != "" {
		t.Errorf("PodIP of a deleted pod = %q, want none", ip)
	}
	e.waitGone(t, "sbx-b")
	e.checkCleaned(t, podB)
}

// testNeverRestart: a container that fails under restartPolicy Never
// fails its Pod, with its exit code.
func (e *env) testNeverRestart(t *testing.T) {
	grace := int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "never", Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			Containers:                    []corev1.Container{{Name: "main", Image: e.img, Command: []string{"sh", "-c", "exit 3"}}},
		},
	}
	if _, err := e.cs.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := e.waitPod(t, "never", "phase Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	s := ctrStatus(p, "main")
	if s == nil || s.State.Terminated == nil || s.State.Terminated.ExitCode != 3 || s.State.Terminated.Reason != "Error" || s.RestartCount != 0 {
		t.Fatalf("main container status %+v, want terminated Error 3, no restart", s)
	}
	if err := e.cs.CoreV1().Pods(ns).Delete(t.Context(), "never", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitGone(t, "never")
}

// testInitOrder: regular init containers run one after the other, to
// completion, before the main container; a Pod whose containers all
// succeed under OnFailure ends Succeeded.
func (e *env) testInitOrder(t *testing.T) {
	grace := int64(1)
	mount := []corev1.VolumeMount{{Name: "w", MountPath: "/w"}}
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "kubelet-test-runc"}, Handler: "runc"}
	if _, err := e.cs.NodeV1().RuntimeClasses().Create(t.Context(), rc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "inits", Namespace: ns},
		Spec: corev1.PodSpec{
			RuntimeClassName:              &rc.Name,
			RestartPolicy:                 corev1.RestartPolicyOnFailure,
			TerminationGracePeriodSeconds: &grace,
			Volumes:                       []corev1.Volume{{Name: "w", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			InitContainers: []corev1.Container{
				{Name: "first", Image: e.img, Command: []string{"sh", "-c", "sleep 0.3; echo first >> /w/order"}, VolumeMounts: mount},
				{Name: "second", Image: e.img, Command: []string{"sh", "-c", "echo second >> /w/order"}, VolumeMounts: mount},
			},
			Containers: []corev1.Container{{Name: "main", Image: e.img, Command: []string{"sh", "-c", "echo main >> /w/order"}, VolumeMounts: mount}},
		},
	}
	created, err := e.cs.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := e.waitPod(t, "inits", "phase Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	b, err := os.ReadFile(filepath.Join(e.stateDir, string(created.UID), "w", "order"))
	if err != nil || string(b) != "first\nsecond\nmain\n" {
		t.Fatalf("order of the containers' runs: %q, %v; want first, second, main", b, err)
	}
	for _, name := range []string{"first", "second"} {
		s := initStatus(p, name)
		if s == nil || s.State.Terminated == nil || s.State.Terminated.Reason != "Completed" || !s.Ready {
			t.Errorf("init container %s: %+v, want terminated Completed and ready", name, s)
		}
	}
	ins, err := e.docker.ContainerInspect(t.Context(), e.k.ContainerID(ns, "inits", "main"))
	if err != nil {
		t.Fatal(err)
	}
	if ins.HostConfig.Runtime != "runc" {
		t.Errorf("main container's runtime %q, want the RuntimeClass's handler runc", ins.HostConfig.Runtime)
	}
	if err := e.cs.CoreV1().Pods(ns).Delete(t.Context(), "inits", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitGone(t, "inits")
	e.waitCleaned(t, created)
}

// testRealOOM: a container over its memory limit is reported OOMKilled.
func (e *env) testRealOOM(t *testing.T) {
	grace := int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "oom", Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name:  "main",
				Image: e.img,
				// The shell survives the kill of its child python on its
				// own; the kubelet kills the whole container.
				Command:   []string{"sh", "-c", `python3 -c 'b = bytearray(512 << 20)'; sleep infinity`},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}},
			}},
		},
	}
	if _, err := e.cs.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := e.waitPod(t, "oom", "main container terminated", func(p *corev1.Pod) bool {
		s := ctrStatus(p, "main")
		return s != nil && s.State.Terminated != nil
	})
	if s := ctrStatus(p, "main").State.Terminated; s.Reason != "OOMKilled" || s.ExitCode != 137 {
		t.Fatalf("main container terminated %+v, want OOMKilled 137", s)
	}
	if err := e.cs.CoreV1().Pods(ns).Delete(t.Context(), "oom", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitGone(t, "oom")
}

// testFinalizer: a deleted Pod with a finalizer loses its containers but
// stays until the finalizer goes, as the kube Manager's report-death
// finalizer needs.
func (e *env) testFinalizer(t *testing.T) {
	ctx := t.Context()
	pod := e.sandboxPod("sbx-fin")
	pod.Finalizers = []string{"sandboxd.io/report-death"}
	created, err := e.cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.waitPod(t, "sbx-fin", "Running and Ready", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && podCondition(p, corev1.PodReady)
	})
	if err := e.cs.CoreV1().Pods(ns).Delete(ctx, "sbx-fin", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p := e.waitPod(t, "sbx-fin", "terminal phase after deletion", func(p *corev1.Pod) bool {
		return p.DeletionTimestamp != nil && (p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded)
	})
	if s := ctrStatus(p, "sandbox"); s == nil || s.State.Terminated == nil {
		t.Errorf("sandbox container of the deleted pod: %+v, want terminated", s)
	}
	e.waitCleaned(t, created)
	if _, err := e.cs.CoreV1().Pods(ns).Patch(ctx, "sbx-fin", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("removing the finalizer: %v", err)
	}
	e.waitGone(t, "sbx-fin")
}

// testSidecarAndEviction: a crashed native sidecar restarts on its own
// while the main container runs on; an evicted Pod ends Failed with
// reason Evicted.
func (e *env) testSidecarAndEviction(t *testing.T) {
	ctx := t.Context()
	created, err := e.cs.CoreV1().Pods(ns).Create(ctx, e.sandboxPod("sbx-ev"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.waitPod(t, "sbx-ev", "Running and Ready", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && podCondition(p, corev1.PodReady)
	})
	// Killed before the main container reached it, the sidecar would fail
	// that check and the main container would restart too.
	e.waitStarted(t, created)
	if err := e.k.KillContainer(ns, "sbx-ev", "io", false); err != nil {
		t.Fatal(err)
	}
	p := e.waitPod(t, "sbx-ev", "io sidecar restarted and Ready", func(p *corev1.Pod) bool {
		s := initStatus(p, "io")
		return s != nil && s.RestartCount == 1 && s.Ready && podCondition(p, corev1.PodReady)
	})
	if s := ctrStatus(p, "sandbox"); s.RestartCount != 0 || s.State.Running == nil {
		t.Errorf("sandbox container after a sidecar restart: %+v, want running, never restarted", s)
	}

	if err := e.k.Evict(ns, "sbx-ev", "The node was low on resource: memory."); err != nil {
		t.Fatal(err)
	}
	p = e.waitPod(t, "sbx-ev", "Failed with reason Evicted", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodFailed && p.Status.Reason == "Evicted"
	})
	if s := ctrStatus(p, "sandbox"); s.State.Terminated == nil || s.Ready || podCondition(p, corev1.PodReady) || !podCondition(p, corev1.DisruptionTarget) {
		t.Errorf("evicted pod: sandbox %+v, conditions %+v; want terminated, not ready, DisruptionTarget", s, p.Status.Conditions)
	}
	if err := e.cs.CoreV1().Pods(ns).Delete(ctx, "sbx-ev", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The API server deletes a Failed Pod at once; the kubelet cleans up
	// after.
	e.waitGone(t, "sbx-ev")
	e.waitCleaned(t, created)
}

// testStop: Stop removes the containers of the Pods still running, and a
// second Stop is harmless.
func (e *env) testStop(t *testing.T) {
	created, err := e.cs.CoreV1().Pods(ns).Create(t.Context(), e.sandboxPod("sbx-stop"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.waitPod(t, "sbx-stop", "Running and Ready", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && podCondition(p, corev1.PodReady)
	})
	e.k.Stop()
	e.checkCleaned(t, created)
	e.k.Stop()
}

// waitStarted waits until the sandbox container of sandboxPod wrote
// workspace/started, seen on the host: it reached the sidecar over
// localhost and expanded $(GREETING). Ready means running; the file comes
// a moment later.
func (e *env) waitStarted(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	started := filepath.Join(e.stateDir, string(pod.UID), "workspace", "started")
	deadline := time.Now().Add(podWait)
	for {
		b, err := os.ReadFile(started)
		if err == nil && strings.TrimSpace(string(b)) == "hi-"+pod.Name {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("workspace/started on the host: %q, %v after %v; want hi-%s", b, err, podWait, pod.Name)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitPod polls the Pod until ok, failing t with its last status after
// podWait.
func (e *env) waitPod(t *testing.T, name, what string, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(podWait)
	var last *corev1.Pod
	for time.Now().Before(deadline) {
		p, err := e.cs.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err == nil {
			last = p
			if ok(p) {
				return p
			}
		} else if !apierrors.IsNotFound(err) {
			t.Fatalf("get pod %s: %v", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	st, _ := json.MarshalIndent(last, "", "  ")
	t.Fatalf("pod %s not %s within %v; last seen:\n%s", name, what, podWait, st)
	return nil
}

// waitGone polls until the Pod object is gone.
func (e *env) waitGone(t *testing.T, name string) {
	t.Helper()
	deadline := time.Now().Add(podWait)
	for time.Now().Before(deadline) {
		_, err := e.cs.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("pod %s still exists %v after its deletion", name, podWait)
}

// podContainers lists the Docker containers (pause included) of a Pod.
func (e *env) podContainers(t *testing.T, pod *corev1.Pod) []container.Summary {
	t.Helper()
	list, err := e.docker.ContainerList(context.Background(), container.ListOptions{
		All:     true,
		Filters: filters.NewArgs(filters.Arg("label", kubelet.LabelPodUID+"="+string(pod.UID))),
	})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// checkCleaned fails t unless the Pod's containers and directory are gone.
func (e *env) checkCleaned(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	if list := e.podContainers(t, pod); len(list) > 0 {
		t.Errorf("pod %s deleted but %d of its containers remain: %v", pod.Name, len(list), list[0].Names)
	}
	if _, err := os.Stat(filepath.Join(e.stateDir, string(pod.UID))); !os.IsNotExist(err) {
		t.Errorf("pod %s deleted but its directory remains: %v", pod.Name, err)
	}
}

// waitCleaned polls until the Pod's containers and then its directory are
// gone (the kubelet's teardown removes them in that order, so the
// directory can outlive the containers by a moment), bounded by podWait,
// then checks both.
func (e *env) waitCleaned(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	deadline := time.Now().Add(podWait)
	dirGone := func() bool {
		_, err := os.Stat(filepath.Join(e.stateDir, string(pod.UID)))
		return os.IsNotExist(err)
	}
	for len(e.podContainers(t, pod)) > 0 || !dirGone() {
		if time.Now().After(deadline) {
			break // checkCleaned says which remains
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.checkCleaned(t, pod)
}

func podCondition(p *corev1.Pod, typ corev1.PodConditionType) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == typ {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func initStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range p.Status.InitContainerStatuses {
		if p.Status.InitContainerStatuses[i].Name == name {
			return &p.Status.InitContainerStatuses[i]
		}
	}
	return nil
}

func ctrStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == name {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

func readBody(resp *http.Response) (string, error) {
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
