package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Claim, then shape, as on Docker (backend/docker/shape.go). A warm-pool
// Pod is made before anyone asks for it, with the server's defaults. A
// claim gives it what the request asks for that a running Pod can take:
//
//   - the owner, metadata, idle timeout and on-idle action (annotations,
//     in the claim's update);
//   - limits of memory and CPUs, by an in-place resize of its sandbox
//     container (the Pod's resize subresource, on by default since
//     Kubernetes 1.33), waited for until its kubelet reports them in force
//     (resize); the process limit is only recorded: it is the node's
//     (podPidsLimit);
//   - env, by an env record in its command log (ioproto/PROTOCOL.md,
//     *Sandbox environment*), appended through its io sidecar as commands
//     are: the driver sets the variables for itself, every kernel and
//     every later process, and again whenever it starts over on the log
//     (a restart of its container, a wake). The env is also on the Pod
//     (annEnv), which envOf merges over the container's, so a hibernation,
//     a fork's or a snapshot's options see the sandbox's whole env.
//
// What a running Pod cannot take starts a Pod of its own, counted by reason
// (core.PoolMiss, sandboxd_warm_pool_misses_total): network (the io
// sidecar's arguments are fixed when its Pod is made); volumes (so are a
// Pod's volumes); a start from a snapshot of another image; another
// /workspace size (an emptyDir's or a claim's); other limits of memory or
// CPUs under a runtime class (its runtime may not update a running
// container: gVisor's runsc cannot); env naming a variable of the
// driver's own (ioproto.IsDriverEnv: only a container's creation sets
// those).
//
// A claim that shapes commits in two steps. The claim's update carries the
// env, the limits and annShaping: from then on the Pod is never a pool Pod
// again, and no one is shown it (visible, List: NotFound) while the mark
// is there. The Pod is resized, the env record appended, then the mark
// removed by a second update, conditional on its value; only then is the
// Pod bound to its user and returned. A Pod found marked for longer than shapingStale (its replica
// died between the two updates, or could not remove it) is removed by the
// leader (removeHalfShaped): its Acquire never returned it, and a retry
// gets another sandbox. So no Pod is handed out without its env and
// limits, and none is left in the pool with a tenant's. A shaping that
// fails (a sidecar that does not answer, a resize the kubelet defers or
// refuses, shapeTimeout) removes the Pod (core.PoolMissShaping) and the
// request gets a Pod of its own, as without a pool.

// annShaping, on a claimed pool Pod, is when its claim began shaping it:
// the Pod is nobody's to use until the mark is gone.
const annShaping = "sandboxd.io/shaping"

// shapeTimeout bounds a claim's shaping: a claim is meant to take
// milliseconds, and a Pod of its own is the fallback.
const shapeTimeout = 10 * time.Second

// shapingStale is how long a Pod may show annShaping before the leader
// removes it: well past shapeTimeout and a replica's last write.
const shapingStale = time.Minute

// poolMiss says why a new sandbox of options r (with a start from a
// snapshot's image, its volumes and its network) cannot be a claimed
// warm-pool Pod, "" when it can.
func (m *Manager) poolMiss(r core.Options, image string, vols []podVolume, network *core.NetworkPolicy) core.PoolMiss {
	switch {
	case network != nil:
		return core.PoolMissNetwork
	case len(vols) > 0:
		return core.PoolMissVolumes
	case image != "" && image != m.cfg.Image:
		return core.PoolMissSnapshot
	case r.Limits.DiskBytes != m.cfg.DefaultLimits.DiskBytes:
		return core.PoolMissDisk
	case !sameCgroupLimits(r.Limits, m.cfg.DefaultLimits) && m.cfg.RuntimeClass != "":
		// A runtime class's runtime may not change a running
		// container's limits (gVisor's runsc cannot), and its resize
		// would never end.
		return core.PoolMissLimits
	case !shapeableEnv(r.Env):
		return core.PoolMissEnv
	}
	return ""
}

// sameCgroupLimits reports whether a and b set the same limits of memory
// and CPUs, the Pod's resources (the process limit is the node's: the
// kubelet's podPidsLimit; the disk is a volume's size).
func sameCgroupLimits(a, b core.Limits) bool {
	return a.MemoryBytes == b.MemoryBytes && a.NanoCPUs == b.NanoCPUs
}

// shapeableEnv reports whether an env record can carry env: it names no
// variable the driver reads for itself (ioproto.IsDriverEnv).
func shapeableEnv(env map[string]string) bool {
	for k := range env {
		if ioproto.IsDriverEnv(k) {
			return false
		}
	}
	return true
}

// claimShaped claims a ready pool Pod for s (claim) and shapes it: the
// Pod, shaped and no longer marked, or nil when the pool had none or the
// shaping failed (counted; the Pod removed).
func (m *Manager) claimShaped(ctx context.Context, s podSpec) *corev1.Pod {
	p := m.claim(ctx, s)
	if p == nil {
		if m.cfg.WarmPool > 0 {
			m.cfg.Metrics.PoolMissed(core.PoolMissEmpty)
		}
		return nil
	}
	if p.Annotations[annShaping] == "" {
		return p
	}
	q, err := m.shape(ctx, p, s)
	if err != nil {
		id := p.Labels[labelSandboxID]
		m.log.Warn("shape a claimed warm-pool sandbox; creating one instead", "sandbox_id", id, "error", err)
		m.cfg.Metrics.PoolMissed(core.PoolMissShaping)
		// Still marked (or already going): no one uses it meanwhile, and
		// the leader removes it if this fails too.
		if err := m.removePod(context.WithoutCancel(ctx), p, "its shaping failed: "+truncate(err.Error(), 512)); err != nil {
			m.log.Warn("removing a warm-pool sandbox whose shaping failed; the leader removes it", "sandbox_id", id, "error", err)
		}
		return nil
	}
	return q
}

// shape gives claimed Pod p the limits of s (resize) and its env (an env
// record appended through its io sidecar), then removes p's annShaping:
// the Pod as that update left it.
func (m *Manager) shape(ctx context.Context, p *corev1.Pod, s podSpec) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, shapeTimeout)
	defer cancel()
	id := p.Labels[labelSandboxID]
	if err := m.resize(ctx, p, s.limits); err != nil {
		return nil, err
	}
	if len(s.env) > 0 {
		conn, err := m.io(ctx, p)
		if err != nil {
			return nil, err
		}
		rec := ioproto.EnvRecord(ioproto.EnvRecordIDPrefix+randomSuffix(), maps.Clone(s.env))
		if _, err := conn.Append(ctx, rec); err != nil {
			return nil, fmt.Errorf("append the env record: %w", m.ioError(id, rec.CommandID, err))
		}
	}
	return m.clearShaping(ctx, p)
}

// resize gives claimed Pod p's sandbox container the resources of limits
// l through the Pod's resize subresource (in-place resize, on by default
// since Kubernetes 1.33), and waits until its kubelet reports them in
// force. A resize the kubelet defers (no room on the node yet) or finds
// infeasible fails at once: a Pod of its own may be scheduled where there
// is room.
func (m *Manager) resize(ctx context.Context, p *corev1.Pod, l core.Limits) error {
	req, res := sandboxResources(&m.cfg, l)
	pods := m.cfg.Client.CoreV1().Pods(m.cfg.Namespace)
	q := p
	for attempt := 0; ; attempt++ {
		r := q.DeepCopy()
		c := sandboxContainerOf(r)
		if c == nil {
			return errors.New("its pod has no sandbox container")
		}
		if sameResources(c.Resources.Limits, res) && sameResources(c.Resources.Requests, req) {
			if q == p {
				return nil // nothing to change
			}
			break // changed by this call's earlier attempt
		}
		c.Resources.Requests, c.Resources.Limits = req, res
		_, err := pods.UpdateResize(ctx, r.Name, r, metav1.UpdateOptions{})
		if err == nil {
			break
		}
		if !apierrors.IsConflict(err) || attempt == 2 {
			return fmt.Errorf("resize its pod: %w", err)
		}
		if q, err = pods.Get(ctx, p.Name, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("resize its pod: %w", err)
		}
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		ch := m.changed() // before the read: a change after it ends the wait
		if q, err := m.pods.Pods(m.cfg.Namespace).Get(p.Name); err == nil {
			if why := resizeRefused(q); why != "" {
				return fmt.Errorf("its node did not resize its pod: %s", why)
			}
			if resized(q, res) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("its node did not resize its pod in time: %w", ctx.Err())
		case <-ch:
		case <-tick.C:
		}
	}
}

// sandboxContainerOf is Pod p's sandbox container, nil if it has none.
func sandboxContainerOf(p *corev1.Pod) *corev1.Container {
	for i := range p.Spec.Containers {
		if p.Spec.Containers[i].Name == containerSandbox {
			return &p.Spec.Containers[i]
		}
	}
	return nil
}

// sameResources reports whether a and b hold the same memory and CPU.
func sameResources(a, b corev1.ResourceList) bool {
	for _, k := range []corev1.ResourceName{corev1.ResourceMemory, corev1.ResourceCPU} {
		x, okA := a[k]
		y, okB := b[k]
		if okA != okB || x.Cmp(y) != 0 {
			return false
		}
	}
	return true
}

// resized reports whether Pod p's kubelet reports its sandbox container's
// limits as res, no resize of it pending or under way.
func resized(p *corev1.Pod, res corev1.ResourceList) bool {
	for _, c := range p.Status.Conditions {
		if (c.Type == corev1.PodResizeInProgress || c.Type == corev1.PodResizePending) && c.Status == corev1.ConditionTrue {
			return false
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == containerSandbox {
			return cs.Resources != nil && sameResources(cs.Resources.Limits, res)
		}
	}
	return false
}

// resizeRefused says why Pod p's kubelet holds its resize back (deferred:
// no room on the node yet; infeasible), "" when it does not.
func resizeRefused(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodResizePending && c.Status == corev1.ConditionTrue {
			return truncate(strings.TrimSpace(c.Reason+": "+c.Message), 256)
		}
	}
	return ""
}

// clearShaping removes Pod p's annShaping if it still holds the value p
// has (a JSON patch's test: no other claim's mark is removed), and fails
// if the Pod is being removed (the leader found it stale).
func (m *Manager) clearShaping(ctx context.Context, p *corev1.Pod) (*corev1.Pod, error) {
	path := "/metadata/annotations/" + jsonPointerEscape(annShaping)
	patch, _ := json.Marshal([]map[string]any{
		{"op": "test", "path": path, "value": p.Annotations[annShaping]},
		{"op": "remove", "path": path},
	})
	q, err := m.cfg.Client.CoreV1().Pods(m.cfg.Namespace).Patch(ctx, p.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, errors.New("its pod was deleted while it was shaped")
	case err != nil:
		return nil, fmt.Errorf("record the sandbox shaped: %w", err)
	case q.Annotations[annDeleting] != "" || q.DeletionTimestamp != nil:
		return nil, errors.New("its pod was removed while it was shaped")
	}
	return q, nil
}

// jsonPointerEscape escapes s as one token of a JSON pointer (RFC 6901).
func jsonPointerEscape(s string) string {
	out := make([]byte, 0, len(s)+4)
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '~':
			out = append(out, '~', '0')
		case '/':
			out = append(out, '~', '1')
		default:
			out = append(out, s[i])
		}
	}
	return string(out)
}

// shapingStaleAt reports whether Pod p has been marked annShaping for
// longer than shapingStale at now: its claim's replica is not finishing
// it.
func shapingStaleAt(p *corev1.Pod, now time.Time) bool {
	v := p.Annotations[annShaping]
	if v == "" {
		return false
	}
	at := parseTime(v)
	if at.IsZero() {
		at = p.CreationTimestamp.Time
	}
	return now.Sub(at) > shapingStale
}

// removeHalfShaped (leader) removes Pod p, found marked annShaping for
// longer than shapingStale, if it still is (read back first, and removed
// only as read: its claimant may just have finished).
func (m *Manager) removeHalfShaped(ctx context.Context, p *corev1.Pod, now time.Time) {
	fresh, err := m.podFromAPI(ctx, p.Labels[labelSandboxID])
	if err != nil || fresh == nil || !shapingStaleAt(fresh, now) || fresh.Annotations[annDeleting] != "" {
		return
	}
	err = m.remove(ctx, fresh, "claimed from the warm pool but never shaped (its replica stopped)", fresh.ResourceVersion)
	if err != nil && !apierrors.IsConflict(err) && ctx.Err() == nil {
		m.log.Warn("removing a half-shaped warm-pool sandbox", "sandbox_id", p.Labels[labelSandboxID], "error", err)
	}
}
