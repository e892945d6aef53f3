package kube

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPodState checks the reasons a user reads when a Pod dies: each cause
// the issue lists is reported, in words, and a recorded reason wins over
// whatever the Pod's status says later.
func TestPodState(t *testing.T) {
	running := func() *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: containerSandbox, Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{corev1.ResourceMemory: *resourceQuantity("512Mi")}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7",
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		}
	}
	now := metav1.NewTime(time.Now())
	for _, tc := range []struct {
		name   string
		mutate func(p *corev1.Pod)
		dead   bool
		gone   bool
		ready  bool
		reason string
	}{
		{name: "running", mutate: func(*corev1.Pod) {}, ready: true},
		{name: "starting", mutate: func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }},
		{name: "pending", mutate: func(p *corev1.Pod) { p.Status.Phase, p.Status.PodIP = corev1.PodPending, "" }},
		{name: "deleted behind our back", mutate: func(p *corev1.Pod) { p.DeletionTimestamp = &now }, dead: true, reason: "deleted outside sandboxd"},
		{name: "node lost", mutate: func(p *corev1.Pod) {
			p.DeletionTimestamp, p.Spec.NodeName = &now, "node-b"
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
				Reason: reasonDeletionByTaintManager, Message: "Taint manager: deleting due to NoExecute taint"})
		}, dead: true, reason: "its pod's node node-b was lost"},
		{name: "drained", mutate: func(p *corev1.Pod) {
			p.DeletionTimestamp = &now
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
				Reason: reasonEvictionByEvictionAPI})
		}, dead: true, reason: "evicted through the Eviction API"},
		{name: "evicted by the kubelet, before the terminal phase", mutate: func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodSucceeded
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
				Reason: corev1.PodReasonTerminationByKubelet, Message: `Usage of EmptyDir volume "workspace" exceeds the limit "64Mi". `})
		}, dead: true, reason: `evicted: Usage of EmptyDir volume "workspace" exceeds the limit "64Mi"`},
		{name: "stopped by its node", mutate: func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }, dead: true, reason: "stopped by its node (evicted"},
		{name: "deleted by sandboxd", mutate: func(p *corev1.Pod) { p.DeletionTimestamp = &now; p.Annotations[annDeleting] = "x" }, gone: true},
		{name: "evicted", mutate: func(p *corev1.Pod) {
			p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, "Evicted", "The node was low on resource: memory."
		}, dead: true, reason: "evicted: The node was low on resource: memory."},
		{name: "phase unknown", mutate: func(p *corev1.Pod) { p.Status.Phase = corev1.PodUnknown }, dead: true, reason: "stopped reporting"},
		{name: "OOM-killed, restarted", mutate: func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: containerSandbox, RestartCount: 1,
				State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}}}}
		}, dead: true, reason: "OOM-killed: it ran out of memory (limit 512Mi)"},
		{name: "driver crashed and restarted", mutate: func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: containerSandbox, RestartCount: 1,
				State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 2}}}}
		}, ready: true},
		{name: "recorded reason wins", mutate: func(p *corev1.Pod) {
			p.Annotations[annDeadReason] = "its sandbox container was OOM-killed"
			p.DeletionTimestamp = &now
		}, dead: true, reason: "OOM-killed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := running()
			tc.mutate(p)
			gone, dead, reason, ready := podState(p)
			if gone != tc.gone || dead != tc.dead || ready != tc.ready {
				t.Fatalf("podState = gone %v, dead %v (%q), ready %v; want gone %v, dead %v, ready %v", gone, dead, reason, ready, tc.gone, tc.dead, tc.ready)
			}
			if !strings.Contains(reason, tc.reason) {
				t.Errorf("reason %q does not say %q", reason, tc.reason)
			}
		})
	}
}

// TestPendingWhy checks what a user reads when a sandbox's Pod does not
// become ready in time: the scheduler's and the kubelet's words, bounded,
// never what the sandbox's containers wrote.
func TestPendingWhy(t *testing.T) {
	long := strings.Repeat("x", 1000)
	for _, tc := range []struct {
		name   string
		status corev1.PodStatus
		want   string
		never  bool // cannotStart says so
	}{
		{name: "new", want: "is not yet scheduled"},
		{name: "unschedulable", status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
			Message: "0/2 nodes are available: 1 node(s) had volume node affinity conflict, 1 node(s) were unschedulable."}}},
			want: "is Pending: not scheduled: 0/2 nodes are available: 1 node(s) had volume node affinity conflict, 1 node(s) were unschedulable."},
		{name: "image missing", status: corev1.PodStatus{Phase: corev1.PodPending,
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}},
			InitContainerStatuses: []corev1.ContainerStatus{{Name: containerIO, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
				Reason: "ErrImageNeverPull", Message: `Container image "sandbox:v9" is not present with pull policy of Never`}}}}},
			want:  `is Pending: container ` + containerIO + ` is waiting: ErrImageNeverPull: Container image "sandbox:v9" is not present with pull policy of Never`,
			never: true},
		{name: "pull failing", status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: containerSandbox,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image"}}}}},
			want: "is Pending: container sandbox is waiting: ImagePullBackOff: Back-off pulling image"},
		{name: "creating", status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: containerSandbox,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}},
			want: "is Pending"},
		{name: "crashing, its termination message not quoted", status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: containerSandbox,
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 10s restarting failed container"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", Message: "written by the sandbox"}}}}},
			want: "is Running: container sandbox is waiting: CrashLoopBackOff: back-off 10s restarting failed container"},
		{name: "bounded", status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Message: long}}},
			want: "is Pending: not scheduled: " + long[:256] + "…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pendingWhy(&corev1.Pod{Status: tc.status}); got != tc.want {
				t.Errorf("pendingWhy = %q; want %q", got, tc.want)
			}
			if got := cannotStart(&corev1.Pod{Status: tc.status}); (got != "") != tc.never || (got != "" && got != tc.want) {
				t.Errorf("cannotStart = %q; want %q", got, map[bool]string{true: tc.want}[tc.never])
			}
		})
	}
}

// TestBuildPodPosture checks the security posture of a sandbox Pod, the
// Kubernetes twin of the Docker backend's containerSpec: what a reviewer
// and a cluster's admission policies rely on.
func TestBuildPodPosture(t *testing.T) {
	cfg := Config{Policy: core.Policy{Image: "img:1", IODiskBytes: 64 << 20}, Namespace: "ns", IOTokenSecret: "tok", IOPort: 7070, RuntimeClass: "gvisor"}
	lim := core.Limits{MemoryBytes: 512 << 20, NanoCPUs: 5e8, PidsLimit: 256, DiskBytes: 1 << 30}
	p := buildPod(&cfg, podSpec{id: "sb-abcdefghijklmnopqrst", tenant: "t", userID: "alice@example.com", limits: lim,
		env: map[string]string{"B": "2", "A": "1"}, now: time.Unix(1700000000, 0)})
	if p.Name != "sbx-abcdefghijklmnopqrst" || p.Namespace != "ns" {
		t.Errorf("pod %s/%s", p.Namespace, p.Name)
	}
	if p.Labels[labelUser] != userHash("t", "alice@example.com") || p.Labels[labelPool] != "false" {
		t.Errorf("labels %v", p.Labels)
	}
	if p.Annotations[annUserID] != "alice@example.com" || p.Annotations[annTenant] != "t" {
		t.Errorf("annotations %v", p.Annotations)
	}
	if len(p.Finalizers) != 1 || p.Finalizers[0] != finalizer {
		t.Errorf("finalizers %v", p.Finalizers)
	}
	s := p.Spec
	if s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken {
		t.Error("the service account token is mounted")
	}
	if s.RuntimeClassName == nil || *s.RuntimeClassName != "gvisor" {
		t.Error("runtime class not set")
	}
	if len(s.Containers) != 1 || len(s.InitContainers) != 1 {
		t.Fatalf("%d containers, %d init containers", len(s.Containers), len(s.InitContainers))
	}
	sb, io := s.Containers[0], s.InitContainers[0]
	sc := sb.SecurityContext
	if *sc.RunAsUser != sandboxUID || !*sc.RunAsNonRoot || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation ||
		len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) != 0 {
		t.Errorf("sandbox container's security context: %+v", sc)
	}
	if got := sb.Resources.Limits[corev1.ResourceMemory]; got.Value() != 512<<20 {
		t.Errorf("memory limit %v", got.String())
	}
	if got := sb.Resources.Limits[corev1.ResourceCPU]; got.MilliValue() != 500 {
		t.Errorf("cpu limit %v", got.String())
	}
	if len(sb.Env) != 2 || sb.Env[0].Name != "A" {
		t.Errorf("env not sorted: %v", sb.Env)
	}
	if io.RestartPolicy == nil || *io.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Error("the io sidecar is not a native sidecar")
	}
	if io.Env[0].ValueFrom == nil || io.Env[0].ValueFrom.SecretKeyRef.Name != "tok" {
		t.Errorf("the io sidecar's token does not come from the Secret: %+v", io.Env)
	}
	if !slices.ContainsFunc(io.Env, func(e corev1.EnvVar) bool { return e.Name == "GOMEMLIMIT" && e.Value == "192MiB" }) {
		t.Errorf("the io sidecar's Go runtime has no memory limit under its container's: %+v", io.Env)
	}
	if add := io.SecurityContext.Capabilities.Add; len(add) != 3 {
		t.Errorf("the io sidecar's capabilities: %v", add)
	}
	for _, v := range s.Volumes {
		if v.Name == volumeWorkspace && (v.EmptyDir == nil || v.EmptyDir.SizeLimit.Value() != 1<<30) {
			t.Errorf("workspace volume not bounded by the disk limit: %+v", v)
		}
	}
	if got, lim := sb.Resources.Requests[corev1.ResourceCPU], sb.Resources.Limits[corev1.ResourceCPU]; got.Cmp(lim) != 0 {
		t.Errorf("cpu request %v, limit %v: want them equal by default (Guaranteed QoS)", got.String(), lim.String())
	}
	lost := map[string]int64{}
	for _, tol := range s.Tolerations {
		if tol.Effect == corev1.TaintEffectNoExecute && tol.TolerationSeconds != nil {
			lost[tol.Key] = *tol.TolerationSeconds
		}
	}
	if lost[corev1.TaintNodeUnreachable] != 300 || lost[corev1.TaintNodeNotReady] != 300 {
		t.Errorf("a lost node's taints are tolerated for %v; want 300s each by default", lost)
	}
	pool := buildPod(&cfg, podSpec{id: "sb-bbbbbbbbbbbbbbbbbbbb", pool: true, limits: lim})
	if pool.Labels[labelPool] != "true" || pool.Labels[labelUser] != "" || pool.Annotations[annUserID] != "" {
		t.Errorf("pool pod has an owner: %v %v", pool.Labels, pool.Annotations)
	}
}

// TestBuildPodScheduling checks what a cluster's scheduler sees of a
// sandbox Pod under the settings that change it: a CPU request below the
// limit (--kube-cpu-request), memory requested whole, and the toleration
// of a lost node's taints (--kube-node-lost-after), which configured
// tolerations for the same taint replace.
func TestBuildPodScheduling(t *testing.T) {
	lim := core.Limits{MemoryBytes: 512 << 20, NanoCPUs: 5e8}
	cfg := Config{Policy: core.Policy{Image: "img:1"}, CPURequest: 0.1, NodeLostAfter: 20 * time.Second,
		Tolerations: []corev1.Toleration{{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}}
	cfg.fillDefaults()
	p := buildPod(&cfg, podSpec{id: "sb-abcdefghijklmnopqrst", limits: lim})
	sb := p.Spec.Containers[0]
	if got := sb.Resources.Requests[corev1.ResourceCPU]; got.MilliValue() != 50 {
		t.Errorf("cpu request %v; want 50m (a tenth of 500m)", got.String())
	}
	if got := sb.Resources.Limits[corev1.ResourceCPU]; got.MilliValue() != 500 {
		t.Errorf("cpu limit %v; want 500m", got.String())
	}
	if got := sb.Resources.Requests[corev1.ResourceMemory]; got.Value() != 512<<20 {
		t.Errorf("memory request %v; want the whole limit", got.String())
	}
	var unreachable, notReady []corev1.Toleration
	for _, tol := range p.Spec.Tolerations {
		switch tol.Key {
		case corev1.TaintNodeUnreachable:
			unreachable = append(unreachable, tol)
		case corev1.TaintNodeNotReady:
			notReady = append(notReady, tol)
		}
	}
	if len(unreachable) != 1 || unreachable[0].TolerationSeconds == nil || *unreachable[0].TolerationSeconds != 20 {
		t.Errorf("unreachable tolerations %+v; want one for 20s", unreachable)
	}
	if len(notReady) != 1 || notReady[0].TolerationSeconds != nil {
		t.Errorf("not-ready tolerations %+v; want only the configured one (for ever)", notReady)
	}
}

func resourceQuantity(s string) *resource.Quantity { q := resource.MustParse(s); return &q }
