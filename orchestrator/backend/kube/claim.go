package kube

import (
	"cmp"
	"context"
	"encoding/json"
	"maps"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// A sandbox's state volume. With Config.StorageClass, each sandbox has a
// PersistentVolumeClaim of its own, named as its Pod (podName), holding
// its /io (the command log, the outputs, the hibernation snapshot) and its
// /workspace as two subPaths. It outlives the Pod: hibernation deletes the
// Pod and keeps the claim, which then carries the sandbox's record (the
// Pod's annotations, and annHibernated); a wake creates a Pod that mounts
// it again. Without a storage class, /io and /workspace are emptyDirs and
// the backend does not hibernate.
const (
	volumeState = "state"
	subPathIO   = "io"
	subPathWS   = "workspace"

	// annHibernated, on a claim, is the hibernation's record (hibRecord,
	// JSON): the sandbox is hibernated while it is there.
	annHibernated = "sandboxd.io/hibernated"
	// annEnv, on a hibernated sandbox's claim, is its env (JSON), for the
	// Pod that wakes it. On a Pod, it is the env a warm-pool Pod was given
	// after its claim, by an env record (shape.go): envOf merges it over
	// the container's.
	annEnv = "sandboxd.io/env"
	// annImage, on a hibernated sandbox's claim, is its sandbox
	// container's image: it wakes in the image it was created with (its
	// snapshot was made by that image's Python), as on Docker.
	annImage = "sandboxd.io/image"
	// annOnIdle is a sandbox's own on-idle action (Options.OnIdle).
	annOnIdle = "sandboxd.io/on-idle"
	// annHibernating, on a Pod, names the snapshot record of the
	// hibernation under way: from then on the sandbox takes no command
	// (its sidecar's log is sealed) and any replica, or the leader, may
	// finish it.
	annHibernating = "sandboxd.io/hibernating"
	// annWaking, on a Pod, is the hibRecord it wakes from, until its
	// restore record has run: any replica may finish the wake.
	annWaking = "sandboxd.io/waking"
	// annLastWake, on a Pod, is how its state came back (core.WakeInfo,
	// JSON).
	annLastWake = "sandboxd.io/last-wake"

	// orphanClaimAge is how old a claim with neither a Pod nor a
	// hibernation must be before the leader deletes it (a Pod create that
	// failed after its claim's, a removal cut short).
	orphanClaimAge = 2 * time.Minute
)

// hibRecord is what a hibernated sandbox keeps of its hibernation.
type hibRecord struct {
	// Level is ioproto.LevelGlobals or LevelFiles; File the snapshot's
	// name in /io/hibernate (level globals).
	Level  string `json:"level"`
	File   string `json:"file,omitempty"`
	Bytes  int64  `json:"bytes,omitempty"`
	Reason string `json:"reason,omitempty"`
	// TakenAt is when the snapshot was taken, HibernatedAt when the Pod
	// went.
	TakenAt      time.Time `json:"taken_at"`
	HibernatedAt time.Time `json:"hibernated_at"`
	// FromSnapshot, on a new sandbox's Pod (annWaking), names the snapshot
	// it starts from (snapshots.go): its archive is imported before the
	// restore record.
	FromSnapshot string `json:"from_snapshot,omitempty"`
}

func parseHibRecord(s string) (hibRecord, bool) {
	var r hibRecord
	if s == "" || json.Unmarshal([]byte(s), &r) != nil {
		return hibRecord{}, false
	}
	return r, true
}

// claims reports whether sandboxes get state volumes (and hibernate).
func (m *Manager) claims() bool { return m.cfg.StorageClass != "" }

// buildClaim returns the state volume's claim for sandbox s: room for its
// disk limit and its /io.
func buildClaim(cfg *Config, s podSpec) *corev1.PersistentVolumeClaim {
	size := max(s.limits.DiskBytes, 0) + cfg.IODiskBytes
	size = max(size, 1<<30)
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: podName(s.id), Namespace: cfg.Namespace,
			Labels: map[string]string{labelManaged: managedBy, labelSandboxID: s.id},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(cfg.StorageClass),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: *resource.NewQuantity(size, resource.BinarySI)}},
		},
	}
}

// createPod creates sandbox s's Pod, and first its claim when sandboxes
// have state volumes (a Pod whose claim is missing would not start). A
// failed Pod create deletes the claim; a crash between the two leaves a
// claim the leader deletes (gcClaims).
func (m *Manager) createPod(ctx context.Context, s podSpec, pod *corev1.Pod) (*corev1.Pod, error) {
	if m.claims() {
		_, err := m.cfg.Client.CoreV1().PersistentVolumeClaims(m.cfg.Namespace).Create(ctx, buildClaim(&m.cfg, s), metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
	}
	p, err := m.cfg.Client.CoreV1().Pods(m.cfg.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil && m.claims() && !apierrors.IsAlreadyExists(err) {
		m.deleteClaim(context.WithoutCancel(ctx), s.id)
	}
	return p, err
}

// claimOf returns sandbox id's claim from the cache, or from the API server
// when the cache has not seen it; nil when there is none.
func (m *Manager) claimOf(ctx context.Context, id string) (*corev1.PersistentVolumeClaim, error) {
	if !m.claims() {
		return nil, nil
	}
	c, err := m.pvcs.PersistentVolumeClaims(m.cfg.Namespace).Get(podName(id))
	if err == nil {
		return c, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, err
	}
	c, err = m.cfg.Client.CoreV1().PersistentVolumeClaims(m.cfg.Namespace).Get(ctx, podName(id), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, apiError("get the sandbox's volume claim", err)
	}
	if c.Labels[labelManaged] != managedBy || c.Labels[labelSandboxID] != id {
		return nil, nil
	}
	return c, nil
}

// hibernatedClaims lists the cached claims of hibernated sandboxes.
func (m *Manager) hibernatedClaims() []*corev1.PersistentVolumeClaim {
	if !m.claims() {
		return nil
	}
	cs, _ := m.pvcs.PersistentVolumeClaims(m.cfg.Namespace).List(labels.Everything())
	out := cs[:0:0]
	for _, c := range cs {
		if c.Annotations[annHibernated] != "" && c.DeletionTimestamp == nil {
			out = append(out, c)
		}
	}
	return out
}

// deleteClaim deletes sandbox id's claim (and with it, by the storage
// class's reclaim policy, its /io and /workspace).
func (m *Manager) deleteClaim(ctx context.Context, id string) {
	if !m.claims() {
		return
	}
	err := m.cfg.Client.CoreV1().PersistentVolumeClaims(m.cfg.Namespace).Delete(ctx, podName(id), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		m.log.Warn("deleting a sandbox's volume claim", "sandbox_id", id, "error", err)
	}
}

// patchClaim merge-patches sandbox id's claim's labels and annotations; a
// nil value removes the key.
func (m *Manager) patchClaim(ctx context.Context, id string, lbl map[string]any, ann map[string]any) (*corev1.PersistentVolumeClaim, error) {
	meta := map[string]any{}
	if len(lbl) > 0 {
		meta["labels"] = lbl
	}
	if len(ann) > 0 {
		meta["annotations"] = ann
	}
	b, _ := json.Marshal(map[string]any{"metadata": meta})
	return m.cfg.Client.CoreV1().PersistentVolumeClaims(m.cfg.Namespace).Patch(ctx, podName(id), types.MergePatchType, b, metav1.PatchOptions{})
}

// sandboxOfClaim describes the hibernated sandbox whose claim is c: the
// record its Pod's annotations held, copied at the hibernation.
func (m *Manager) sandboxOfClaim(c *corev1.PersistentVolumeClaim) core.Sandbox {
	a := c.Annotations
	rec, _ := parseHibRecord(a[annHibernated])
	sb := core.Sandbox{
		ID:           c.Labels[labelSandboxID],
		Tenant:       a[annTenant],
		UserID:       a[annUserID],
		State:        core.StateHibernated,
		CreatedAt:    parseTime(a[annCreatedAt]),
		LastActiveAt: parseTime(a[annLastActive]),
		Image:        cmp.Or(a[annImage], m.cfg.Image),
		IdleTimeout:  m.cfg.IdleTTL,
		OnIdle:       m.onIdleOf(a),
		HibernatedAt: rec.HibernatedAt,
		Snapshot:     &core.SnapshotInfo{Level: rec.Level, Bytes: rec.Bytes, TakenAt: rec.TakenAt, Reason: rec.Reason},
	}
	if d, err := time.ParseDuration(a[annIdleTimeout]); err == nil && d > 0 {
		sb.IdleTimeout = d
	}
	if sb.CreatedAt.IsZero() {
		sb.CreatedAt = c.CreationTimestamp.Time
	}
	sb.ExpiresAt = rec.HibernatedAt.Add(m.cfg.HibernatedTTL)
	_ = json.Unmarshal([]byte(a[annLimits]), &sb.Limits)
	sb.Volumes = decodeMounts(a[annVolumes])
	networkOfPod(&sb, a)
	if s := a[annMetadata]; s != "" {
		_ = json.Unmarshal([]byte(s), &sb.Metadata)
	}
	return sb
}

// onIdleOf is what the idle TTL does to the sandbox whose annotations are
// a: its own on-idle action, else the server's; delete when sandboxes
// have no state volume to hibernate to.
func (m *Manager) onIdleOf(a map[string]string) string {
	if !m.claims() {
		return core.OnIdleDelete
	}
	if v := a[annOnIdle]; v == core.OnIdleHibernate || v == core.OnIdleDelete {
		return v
	}
	return m.cfg.OnIdle
}

// recordAnnotations are the annotations of Pod p that make its sandbox's
// record, copied to its claim at hibernation and back to the Pod that
// wakes it.
func recordAnnotations(a map[string]string) map[string]string {
	out := map[string]string{}
	for _, k := range []string{annTenant, annUserID, annCreatedAt, annLastActive, annIdleTimeout, annLimits, annMetadata, annOnIdle, annVolumes, annNetwork} {
		if v, ok := a[k]; ok {
			out[k] = v
		}
	}
	return out
}

// imageOf is the sandbox container's image in Pod p.
func imageOf(p *corev1.Pod) string {
	for _, c := range p.Spec.Containers {
		if c.Name == containerSandbox {
			return c.Image
		}
	}
	return ""
}

// envOf is the env of Pod p's sandbox: its container's, with the env
// its claim gave a warm-pool Pod by an env record (annEnv, shape.go) set
// over it, as the driver sets it.
func envOf(p *corev1.Pod) map[string]string {
	env := map[string]string{}
	for _, c := range p.Spec.Containers {
		if c.Name != containerSandbox {
			continue
		}
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				env[e.Name] = e.Value
			}
		}
	}
	if s := p.Annotations[annEnv]; s != "" {
		var claimed map[string]string
		_ = json.Unmarshal([]byte(s), &claimed)
		maps.Copy(env, claimed)
	}
	return env
}

// gcClaims deletes claims that belong to no sandbox: neither a Pod nor a
// hibernation holds them, and they are older than orphanClaimAge (read
// back from the API server first: the cache may not show a new Pod yet).
func (m *Manager) gcClaims(ctx context.Context) { m.gcClaimsAt(ctx, time.Now()) }

// gcClaimsAt is gcClaims at time now.
func (m *Manager) gcClaimsAt(ctx context.Context, now time.Time) {
	if !m.claims() {
		return
	}
	cs, _ := m.pvcs.PersistentVolumeClaims(m.cfg.Namespace).List(labels.Everything())
	for _, c := range cs {
		if c.Labels[labelSandboxID] == "" || c.Annotations[annHibernated] != "" || c.DeletionTimestamp != nil || now.Sub(c.CreationTimestamp.Time) < orphanClaimAge {
			continue // not a sandbox's (a volume's), or held
		}
		id := c.Labels[labelSandboxID]
		if _, err := m.pods.Pods(m.cfg.Namespace).Get(podName(id)); err == nil {
			continue
		}
		if p, err := m.podFromAPI(ctx, id); err != nil || p != nil {
			continue
		}
		m.log.Info("deleting a volume claim no sandbox holds", "sandbox_id", id)
		m.deleteClaim(ctx, id)
	}
}

// claimLabels are the label values a claim of a hibernated sandbox keeps
// (List and the bindings find it by them).
func claimLabels(p *corev1.Pod) map[string]any {
	out := map[string]any{labelPool: "false"}
	if u := p.Labels[labelUser]; u != "" {
		out[labelUser] = u
	}
	for k, v := range p.Labels {
		if strings.HasPrefix(k, volumeUseLabel("")) {
			out[k] = v // a hibernated sandbox still mounts its volumes
		}
	}
	return out
}

// annotationsAny turns string annotations into a merge patch's values.
func annotationsAny(a map[string]string) map[string]any {
	out := make(map[string]any, len(a))
	for k, v := range a {
		out[k] = v
	}
	return out
}
