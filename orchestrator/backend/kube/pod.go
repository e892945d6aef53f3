package kube

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// Labels, annotations and the finalizer sandboxd puts on its objects. Labels
// are what selectors need; everything else is an annotation.
const (
	labelManaged   = "app.kubernetes.io/managed-by"
	managedBy      = "sandboxd"
	labelSandboxID = "sandboxd.io/sandbox-id"
	labelPool      = "sandboxd.io/pool"
	// labelUser is userHash(tenant, user): user IDs may hold characters
	// that label values may not ('@').
	labelUser = "sandboxd.io/user"

	annTenant      = "sandboxd.io/tenant"
	annUserID      = "sandboxd.io/user-id"
	annCreatedAt   = "sandboxd.io/created-at"
	annLastActive  = "sandboxd.io/last-active"
	annIdleTimeout = "sandboxd.io/idle-timeout"
	annLimits      = "sandboxd.io/limits"
	annMetadata    = "sandboxd.io/metadata"
	// annDeadReason records why the sandbox died, once, so that every
	// replica reports the same reason after the kubelet has torn the Pod's
	// containers down.
	annDeadReason = "sandboxd.io/dead-reason"
	// annDeleting marks a Pod sandboxd itself is deleting: it is gone for
	// callers, not dead.
	annDeleting = "sandboxd.io/deleting"

	// finalizer keeps a Pod deleted behind sandboxd's back until its death
	// has been reported (or has expired).
	finalizer = "sandboxd.io/report-death"

	// Containers and volumes of a sandbox Pod.
	containerSandbox = "sandbox"
	containerIO      = "io"
	volumeIO         = "io"
	volumeWorkspace  = "workspace"
	volumeTmp        = "tmp"

	// sidecarBinary is the io sidecar in the sandbox image.
	sidecarBinary = "/usr/local/bin/sandbox-iosidecar"
	// tokenEnv carries the shared token to the sidecar.
	tokenEnv = "SANDBOXD_IO_TOKEN"
	// tokenKey is the key of the token in its Secret.
	tokenKey = "token"
	// sidecarMemoryLimit is the io sidecar's memory limit, and
	// sidecarGoMemLimit its Go runtime's soft limit (GOMEMLIMIT), three
	// quarters of it: room for what the runtime does not count.
	sidecarMemoryLimit = "256Mi"
	sidecarGoMemLimit  = "192MiB"
)

// sandboxUID is the sandbox container's user, as in the image and under the
// Docker backend.
const sandboxUID = 1000

// podName is the Pod of sandbox id: "sbx-" and the ID's random part.
func podName(id string) string { return "sbx-" + strings.TrimPrefix(id, "sb-") }

// userHash identifies (tenant, user) in label values and object names.
func userHash(tenant, user string) string {
	h := sha256.Sum256([]byte(tenant + "\x00" + user))
	return hex.EncodeToString(h[:16])
}

// podSpec is what a new sandbox Pod looks like: the security posture in one
// place, as containerSpec is for Docker. A warm-pool Pod has no owner yet.
type podSpec struct {
	id      string
	pool    bool
	tenant  string
	userID  string
	limits  core.Limits
	env     map[string]string
	meta    map[string]string
	idleTTL time.Duration
	onIdle  string
	now     time.Time
	// image is the sandbox image ("": Config.Image): a woken sandbox's,
	// or its snapshot's.
	image string
	// waking is annWaking's value for a sandbox that starts from saved
	// state (a hibernation's record, or one naming a snapshot).
	waking string
	// volumes are the named volumes it mounts (volumes.go).
	volumes []podVolume
	// network is a networked sandbox's policy (network.go); nil without.
	network *netRecord
}

// buildPod returns the Pod for s under cfg.
func buildPod(cfg *Config, s podSpec) *corev1.Pod {
	lbl := map[string]string{
		labelManaged:   managedBy,
		labelSandboxID: s.id,
		labelPool:      strconv.FormatBool(s.pool),
	}
	ann := map[string]string{}
	if !s.pool {
		lbl[labelUser] = userHash(s.tenant, s.userID)
		maps.Copy(ann, ownerAnnotations(s))
	}
	limitsJSON, _ := json.Marshal(s.limits)
	ann[annLimits] = string(limitsJSON)

	env := make([]corev1.EnvVar, 0, len(s.env))
	for _, k := range slices.Sorted(maps.Keys(s.env)) {
		env = append(env, corev1.EnvVar{Name: k, Value: s.env[k]})
	}
	req, res := sandboxResources(cfg, s.limits)
	workspace := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
	if s.limits.DiskBytes > 0 {
		workspace.EmptyDir.SizeLimit = resource.NewQuantity(s.limits.DiskBytes, resource.BinarySI)
	}
	ioSize := resource.NewQuantity(cfg.IODiskBytes, resource.BinarySI)
	tmpSize := resource.NewQuantity(256<<20, resource.BinarySI)
	mounts := []corev1.VolumeMount{{Name: volumeIO, MountPath: "/io"}, {Name: volumeWorkspace, MountPath: "/workspace"}}
	volumes := []corev1.Volume{
		{Name: volumeIO, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ioSize}}},
		{Name: volumeWorkspace, VolumeSource: workspace},
	}
	if cfg.StorageClass != "" {
		// The state volume (claim.go): both directories on the sandbox's
		// own claim, which outlives the Pod.
		mounts = []corev1.VolumeMount{
			{Name: volumeState, MountPath: "/io", SubPath: subPathIO},
			{Name: volumeState, MountPath: "/workspace", SubPath: subPathWS},
		}
		volumes = []corev1.Volume{{Name: volumeState, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: podName(s.id)}}}}
	}
	volumes = append(volumes, corev1.Volume{Name: volumeTmp, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: tmpSize}}})
	sidecarArgs := []string{fmt.Sprintf("--listen=:%d", cfg.IOPort), "--io=/io", "--workspace=/workspace"}
	sandboxMounts := append(slices.Clone(mounts), corev1.VolumeMount{Name: volumeTmp, MountPath: "/tmp"})
	sidecarMounts := mounts
	if len(s.volumes) > 0 {
		vols, inSandbox, inSidecar, used := volumePodParts(s.volumes)
		volumes = append(volumes, vols...)
		sandboxMounts = append(sandboxMounts, inSandbox...)
		sidecarMounts = append(slices.Clone(mounts), inSidecar...)
		sidecarArgs = append(sidecarArgs, "--volumes="+volumesDir)
		maps.Copy(lbl, used)
		ann[annVolumes] = encodeMounts(mountsOf(s.volumes))
	}
	// The io sidecar is a native sidecar: it starts (and prepares the /io
	// layout) before the driver, and stops after it.
	always := corev1.ContainerRestartPolicyAlways
	port := intstrPort(cfg.IOPort)
	sidecar := sidecarContainer(cfg, cmp.Or(s.image, cfg.Image), sidecarArgs, sidecarMounts)
	sidecar.RestartPolicy = &always
	sidecar.StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: port}}, PeriodSeconds: 1, FailureThreshold: 60}
	sidecar.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: port}}, PeriodSeconds: 5}
	spec := basePodSpec(cfg)
	spec.Volumes = volumes
	spec.InitContainers = []corev1.Container{sidecar}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: podName(s.id), Namespace: cfg.Namespace,
			Labels: lbl, Annotations: ann, Finalizers: []string{finalizer},
		},
		Spec: spec,
	}
	defer func() {
		if s.network != nil {
			podNetwork(pod, s.network)
		}
	}()
	pod.Spec.Containers = []corev1.Container{{
		Name:         containerSandbox,
		Image:        cmp.Or(s.image, cfg.Image),
		Env:          env,
		VolumeMounts: sandboxMounts,
		Resources:    corev1.ResourceRequirements{Requests: req, Limits: res},
		SecurityContext: &corev1.SecurityContext{
			RunAsUser: ptr.To[int64](sandboxUID), RunAsGroup: ptr.To[int64](sandboxUID), RunAsNonRoot: ptr.To(true),
			ReadOnlyRootFilesystem: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}}
	return pod
}

// sandboxResources are the sandbox container's requests and limits for
// limits l under cfg: memory and CPUs (the process limit is the node's).
func sandboxResources(cfg *Config, l core.Limits) (req, res corev1.ResourceList) {
	res = corev1.ResourceList{
		corev1.ResourceMemory: *resource.NewQuantity(l.MemoryBytes, resource.BinarySI),
		corev1.ResourceCPU:    *resource.NewMilliQuantity(l.NanoCPUs/1e6, resource.DecimalSI),
	}
	req = res
	if r := cfg.CPURequest; r > 0 && r < 1 {
		req = maps.Clone(res)
		req[corev1.ResourceCPU] = *resource.NewMilliQuantity(max(1, int64(float64(l.NanoCPUs/1e6)*cfg.CPURequest)), resource.DecimalSI)
	}
	return req, res
}

// basePodSpec is what every Pod sandboxd makes has, a sandbox's or a
// volume server's: no service-account token or service links, the
// runtime's default seccomp filter (as Docker applies to every container:
// the kubelet applies none unless told), the configured placement and
// runtime class.
func basePodSpec(cfg *Config) corev1.PodSpec {
	return corev1.PodSpec{
		RestartPolicy:                 corev1.RestartPolicyAlways,
		AutomountServiceAccountToken:  ptr.To(false),
		EnableServiceLinks:            ptr.To(false),
		TerminationGracePeriodSeconds: ptr.To[int64](5),
		SecurityContext:               &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		NodeSelector:                  cfg.NodeSelector,
		Tolerations:                   tolerations(cfg),
		RuntimeClassName:              runtimeClass(cfg),
	}
}

// sidecarContainer is the io sidecar's container, in a sandbox Pod or a
// volume server Pod: image's sidecar binary with args, its token from the
// Secret, its port, its resources and posture (sidecarSecurity).
func sidecarContainer(cfg *Config, image string, args []string, mounts []corev1.VolumeMount) corev1.Container {
	return corev1.Container{
		Name:    containerIO,
		Image:   image,
		Command: []string{sidecarBinary},
		Args:    args,
		Env: []corev1.EnvVar{{Name: tokenEnv, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: cfg.IOTokenSecret}, Key: tokenKey}}},
			// The Go runtime collects before the heap reaches the limit
			// below instead of at twice the live heap: an event with its
			// artifacts read back holds about 140 MiB while it is sent
			// (iosidecar's encodeEvent), which without a memory limit grew
			// past 256 MiB and the kernel killed the sidecar.
			{Name: "GOMEMLIMIT", Value: sidecarGoMemLimit}},
		Ports:        []corev1.ContainerPort{{Name: "io", ContainerPort: int32(cfg.IOPort), Protocol: corev1.ProtocolTCP}},
		VolumeMounts: mounts,
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("16Mi"), corev1.ResourceCPU: resource.MustParse("10m")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(sidecarMemoryLimit)},
		},
		SecurityContext: sidecarSecurity(),
	}
}

// sidecarSecurity is the io sidecar's posture: root for chown (files it
// writes belong to the sandbox user) and to read what the sandbox user
// locked itself out of; nothing else.
func sidecarSecurity() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsUser: ptr.To[int64](0), RunAsNonRoot: ptr.To(false),
		ReadOnlyRootFilesystem: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"CHOWN", "DAC_OVERRIDE", "FOWNER"}},
	}
}

// runtimeClass is the Pods' runtimeClassName: nil for the cluster's
// default.
func runtimeClass(cfg *Config) *string {
	if cfg.RuntimeClass == "" {
		return nil
	}
	return ptr.To(cfg.RuntimeClass)
}

// nodeLostTaints are the taints the node lifecycle controller puts on a
// node that stopped reporting (unreachable) or reports NotReady.
var nodeLostTaints = []string{corev1.TaintNodeUnreachable, corev1.TaintNodeNotReady}

// tolerations are a sandbox Pod's: the configured ones, and, unless they
// say otherwise, toleration of a lost node's NoExecute taints for
// cfg.NodeLostAfter, after which the taint manager deletes the Pod and
// its sandbox is reported dead with its node named (deletedBecause). The
// cluster's default (the DefaultTolerationSeconds admission plugin's) is
// 300s.
func tolerations(cfg *Config) []corev1.Toleration {
	out := slices.Clone(cfg.Tolerations)
	for _, key := range nodeLostTaints {
		if slices.ContainsFunc(out, func(t corev1.Toleration) bool {
			return t.Key == key || (t.Key == "" && t.Operator == corev1.TolerationOpExists)
		}) {
			continue
		}
		out = append(out, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute,
			TolerationSeconds: ptr.To(int64(cmp.Or(cfg.NodeLostAfter, DefaultNodeLostAfter) / time.Second))})
	}
	return out
}

// SamplePod returns the Pod a warm-pool sandbox gets under cfg (its zero
// fields defaulted) with a fixed sandbox ID: the exact spec sandboxd
// creates, for checking it against a cluster's admission policies before
// deploying (deploy/kubernetes's test does, against Pod Security).
func SamplePod(cfg Config) *corev1.Pod {
	cfg.fillDefaults()
	return buildPod(&cfg, podSpec{id: "sb-aaaaaaaaaaaaaaaaaaaa", pool: true, limits: cfg.DefaultLimits})
}

// ownerAnnotations are the annotations of a sandbox given to a user (at
// creation, or when claimed from the pool).
func ownerAnnotations(s podSpec) map[string]string {
	ann := map[string]string{
		annTenant:     s.tenant,
		annUserID:     s.userID,
		annCreatedAt:  s.now.UTC().Format(time.RFC3339Nano),
		annLastActive: s.now.UTC().Format(time.RFC3339Nano),
	}
	if s.idleTTL > 0 {
		ann[annIdleTimeout] = s.idleTTL.String()
	}
	if s.onIdle != "" {
		ann[annOnIdle] = s.onIdle
	}
	if len(s.meta) > 0 {
		b, _ := json.Marshal(s.meta)
		ann[annMetadata] = string(b)
	}
	if s.waking != "" {
		ann[annWaking] = s.waking
	}
	return ann
}

// podState is what a Pod says about its sandbox: gone (being deleted by
// sandboxd), dead with a reason, or alive; ready when alive and its io
// sidecar and driver are up.
func podState(p *corev1.Pod) (gone, dead bool, reason string, ready bool) {
	if p.Annotations[annDeleting] != "" {
		return true, false, "", false
	}
	if r := p.Annotations[annDeadReason]; r != "" {
		return false, true, r, false
	}
	if r := deathOf(p); r != "" {
		return false, true, r, false
	}
	if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
		return false, false, "", false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return false, false, "", c.Status == corev1.ConditionTrue
		}
	}
	return false, false, "", false
}

// neverStarts names the kubelet's waiting reasons that no wait cures: the
// image is not on the node and its pull policy forbids pulling it
// (ErrImageNeverPull), or its name is invalid. A Pod waiting for one is
// not waited for until the start timeout: its caller is told at once.
// The kubelet keeps retrying, so the sandbox starts once the operator
// puts the image on the node. Pull errors (ErrImagePull,
// ImagePullBackOff) may pass and are waited for.
var neverStarts = map[string]bool{"ErrImageNeverPull": true, "InvalidImageName": true}

// cannotStart says why Pod p cannot start without an operator's help
// (neverStarts), in pendingWhy's words, or "" when it may yet start.
func cannotStart(p *corev1.Pod) string {
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, cs := range list {
			if w := cs.State.Waiting; w != nil && neverStarts[w.Reason] {
				return pendingWhy(p)
			}
		}
	}
	return ""
}

// pendingWhy says what a Pod that is not ready waits for, from what the
// scheduler and the kubelet wrote (never from what its containers wrote:
// termination messages are the sandbox's), bounded: "is Pending: not
// scheduled: 0/2 nodes are available: ...", "is Pending: container
// sandbox is waiting: ErrImageNeverPull: ...", or "is Running".
func pendingWhy(p *corev1.Pod) string {
	why := "is " + string(p.Status.Phase)
	if p.Status.Phase == "" {
		why = "is not yet scheduled"
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return why + ": not scheduled: " + truncate(strings.TrimSpace(cmp.Or(c.Message, c.Reason)), 256)
		}
	}
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, cs := range list {
			w := cs.State.Waiting
			if w == nil || w.Reason == "" || w.Reason == "ContainerCreating" || w.Reason == "PodInitializing" {
				continue
			}
			why += ": container " + truncate(cs.Name, 64) + " is waiting: " + truncate(w.Reason, 64)
			if m := strings.TrimSpace(w.Message); m != "" {
				why += ": " + truncate(m, 256)
			}
			return why
		}
	}
	return why
}

// deathOf returns why the sandbox of Pod p is dead, from the Pod's own
// status, or "" while it lives.
func deathOf(p *corev1.Pod) string {
	if p.DeletionTimestamp != nil {
		return deletedBecause(p)
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name != containerSandbox {
			continue
		}
		for _, st := range []corev1.ContainerState{cs.State, cs.LastTerminationState} {
			if t := st.Terminated; t != nil && t.Reason == "OOMKilled" {
				return "its sandbox container was OOM-killed: it ran out of memory (limit " + memoryLimitOf(p) + ")"
			}
		}
	}
	if why, ok := disruption(p); ok {
		return why
	}
	switch {
	case p.Status.Reason == "Evicted":
		return "its pod was evicted: " + truncate(strings.TrimSpace(p.Status.Message), 256)
	case p.Status.Reason == "NodeLost":
		return "its pod's node was lost"
	case p.Status.Phase == corev1.PodFailed:
		why := "its pod failed"
		if p.Status.Reason != "" {
			why += ": " + truncate(p.Status.Reason, 64)
		}
		if p.Status.Message != "" {
			why += ": " + truncate(p.Status.Message, 256)
		}
		return why
	case p.Status.Phase == corev1.PodSucceeded:
		// A sandbox Pod restarts its containers always: only its node
		// ends it so. A real kubelet (1.37) that evicts a Pod whose
		// containers exit 0 on SIGTERM reports it so, without the
		// eviction's reason (that is in its Evicted event).
		return stoppedByNode
	case p.Status.Phase == corev1.PodUnknown:
		return "its pod's node stopped reporting (phase Unknown)"
	}
	return ""
}

// stoppedByNode is the death of a sandbox Pod that its node ended with
// its containers exiting 0: an eviction whose reason is only in the Pod's
// Evicted event (which the leader reads: evictionMessage), or a node
// shutdown.
const stoppedByNode = "its pod was stopped by its node (evicted, or the node shut down): its containers were terminated"

// The DisruptionTarget reasons of the taint manager and of the Eviction
// API, which k8s.io/api does not name (the controllers' own packages do).
const (
	reasonDeletionByTaintManager = "DeletionByTaintManager"
	reasonEvictionByEvictionAPI  = "EvictionByEvictionAPI"
)

// deletedBecause says why Pod p, deleted by someone other than sandboxd,
// was: the cluster's components say so in its DisruptionTarget condition.
func deletedBecause(p *corev1.Pod) string {
	if why, ok := disruption(p); ok {
		return why
	}
	return "its pod was deleted outside sandboxd"
}

// disruption is what Pod p's DisruptionTarget condition says ended it,
// if it has one. The taint manager's deletion is how a lost node's Pods
// go (the node's NoExecute "unreachable" or "not-ready" taint, once the
// Pod's toleration of it has run out: Config.NodeLostAfter); the kubelet's
// termination is an eviction (node pressure, an emptyDir past its
// sizeLimit) or a node shutdown, and comes before the Pod's terminal
// phase, which alone would read as its containers having exited.
func disruption(p *corev1.Pod) (string, bool) {
	for _, c := range p.Status.Conditions {
		if c.Type != corev1.DisruptionTarget || c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Reason {
		case reasonDeletionByTaintManager:
			return "its pod's node " + truncate(p.Spec.NodeName, 253) + " was lost or tainted NoExecute (it stopped reporting, or was drained): the pod was deleted by the taint manager", true
		case reasonEvictionByEvictionAPI:
			return "its pod was evicted through the Eviction API (a drain or an autoscaler)", true
		case corev1.PodReasonPreemptionByScheduler:
			return "its pod was preempted by the scheduler for a pod of higher priority", true
		case corev1.PodReasonTerminationByKubelet:
			return "its pod was evicted: " + truncate(strings.TrimSpace(c.Message), 256), true
		}
	}
	return "", false
}

// memoryLimitOf is the sandbox container's memory limit, for messages.
func memoryLimitOf(p *corev1.Pod) string {
	for _, c := range p.Spec.Containers {
		if c.Name == containerSandbox {
			if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
				return q.String()
			}
		}
	}
	return "unknown"
}

// truncate bounds text taken from the API server for messages, cutting at
// a rune's start.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// parseTime reads a time annotation; zero when absent or malformed.
func parseTime(s string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}

// intstrPort is port as a probe's target.
func intstrPort(port int) intstr.IntOrString { return intstr.FromInt32(int32(port)) }
