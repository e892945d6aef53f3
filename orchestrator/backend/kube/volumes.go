package kube

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/sandboxd/sandboxd/orchestrator/backend/kube/iosidecar"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Named volumes (core/volume.go) on this backend: a PersistentVolumeClaim
// per volume, of Config.VolumeClass, whose request is the volume's size.
//
//   - The claim is named after the volume's tenant and name
//     (volumeClaimName), so the API server itself keeps a name unique in
//     its tenant across replicas: a second CreateVolume of the name is the
//     claim's AlreadyExists. The volume's ID, tenant and name are on the
//     claim (labelVolumeID, annotations), and every replica finds volumes
//     in its cache of claims.
//   - A sandbox that mounts volumes has each claim in its Pod, at the
//     mount's path in the sandbox container (read-only if asked) and at
//     /volumes/<ID> in the io sidecar (iosidecar/volumes.go), and a label
//     per volume (volumeUseLabel) on its Pod and on its own claim, so a
//     hibernated sandbox still counts as mounting it. The mounts are on
//     the Pod (annVolumes) and come back with a wake, a snapshot and a
//     fork, as on Docker; a volume deleted meanwhile is left out.
//   - The files calls reach a volume through the sidecar of a ready Pod
//     that mounts it: a sandbox's, else a volume server Pod started for it
//     (buildVolumeServer: the sidecar alone), which the leader deletes
//     after volumeServerIdle without a call (chores).
//   - DeleteVolume deletes the server Pod and the claim. With force, a
//     sandbox that mounts it keeps it until its Pod ends (the claim's
//     pvc-protection finalizer): the data goes when the last such Pod
//     does, and the name is free once the claim is gone.
//
// What the size means is the storage's: a block-backed class (most CSI
// drivers) makes each claim a file system of its size, and writes past it
// fail with ENOSPC as on Docker; a class of directories (local volumes,
// most NFS) does not enforce it. Under ReadWriteOnce every Pod that
// mounts a volume runs on the node that holds it; ReadWriteMany
// (Config.VolumeAccessMode) lets them spread.

// Labels and annotations of volumes.
const (
	// labelVolumeID is a volume claim's volume ID; a volume server Pod's
	// is labelVolumeServer.
	labelVolumeID     = "sandboxd.io/volume-id"
	labelVolumeServer = "sandboxd.io/volume-server"
	// labelVolumeTenant is userHash(tenant, "") of a volume's tenant.
	labelVolumeTenant = "sandboxd.io/volume-tenant"
	annVolumeName     = "sandboxd.io/volume-name"
	// annVolumeUsed is the bytes the volume's files took when a replica
	// last asked a sidecar (GetVolume while no Pod serves it).
	annVolumeUsed = "sandboxd.io/volume-used-bytes"
	// annVolumes is a sandbox Pod's (and its hibernated claim's) mounts,
	// as JSON.
	annVolumes = "sandboxd.io/volumes"
	// annServerUsed is when a volume server Pod last served a call.
	annServerUsed = "sandboxd.io/last-used"

	// volumesDir is where the io sidecar mounts a Pod's volumes.
	volumesDir = "/volumes"
	// volumeServerIdle is how long a volume server Pod stays without a
	// call; serverUseWrite how often its last use is written.
	volumeServerIdle = 2 * time.Minute
	serverUseWrite   = 20 * time.Second
)

// volumeUseLabel is the label a Pod (and a hibernated sandbox's claim)
// carries for each volume it mounts.
func volumeUseLabel(id string) string { return "volume.sandboxd.io/" + id }

// volumeClaimName is the claim of tenant's volume name.
func volumeClaimName(tenant, name string) string {
	h := sha256.Sum256([]byte(tenant + "\x00" + name))
	return "sbxvol-" + hex.EncodeToString(h[:16])
}

// volumeServerName is the Pod that serves volume id's files.
func volumeServerName(id string) string { return "sbxvs-" + strings.TrimPrefix(id, "vol-") }

// volumesOn fails when this replica has no class for volumes' claims.
func (m *Manager) volumesOn() error {
	if m.cfg.VolumeClass == "" {
		return core.Unsupported(backendName, featVolumes+" without --kube-volume-class or --kube-storage-class (a claim of that class per volume)")
	}
	return nil
}

// awaitClaimCached waits, at most cacheLag, until this replica's cache
// has claim name: ListVolumes reads the cache, and a volume its caller
// just created must be in the list (the E2B SDK's Volume.list right after
// Volume.create missed it on a loaded node).
func (m *Manager) awaitClaimCached(ctx context.Context, name string) {
	if m.pvcs == nil {
		return
	}
	timer := time.NewTimer(cacheLag)
	defer timer.Stop()
	for {
		ch := m.changed()
		if _, err := m.pvcs.PersistentVolumeClaims(m.cfg.Namespace).Get(name); err == nil {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		case <-timer.C:
			m.log.Warn("this replica's cache did not show the volume's claim in time", "claim", name, "waited", cacheLag)
			return
		}
	}
}

// volumeClaims lists the cached claims of volumes (not being deleted).
func (m *Manager) volumeClaims() []*corev1.PersistentVolumeClaim {
	if m.pvcs == nil {
		return nil
	}
	req, _ := labels.NewRequirement(labelVolumeID, selection.Exists, nil)
	cs, _ := m.pvcs.PersistentVolumeClaims(m.cfg.Namespace).List(labels.NewSelector().Add(*req))
	out := cs[:0:0]
	for _, c := range cs {
		if c.DeletionTimestamp == nil && core.IsVolumeID(c.Labels[labelVolumeID]) {
			out = append(out, c)
		}
	}
	return out
}

// findVolume resolves ref (an ID, or a name of the caller's tenant; an
// admin's name must be unique across tenants) to its claim.
func (m *Manager) findVolume(c core.Caller, ref string) (*corev1.PersistentVolumeClaim, error) {
	if err := m.volumesOn(); err != nil {
		return nil, err
	}
	var found []*corev1.PersistentVolumeClaim
	for _, pvc := range m.volumeClaims() {
		t := pvc.Annotations[annTenant]
		if !c.Sees(t) {
			continue
		}
		if core.IsVolumeID(ref) && pvc.Labels[labelVolumeID] == ref {
			return pvc, nil
		}
		if !core.IsVolumeID(ref) && pvc.Annotations[annVolumeName] == ref {
			found = append(found, pvc)
		}
	}
	if core.IsVolumeID(ref) {
		return nil, core.VolumeNotFound(ref)
	}
	if err := core.VolumeNamed(ref, len(found)); err != nil {
		return nil, err
	}
	return found[0], nil
}

// volumeMountedBy lists the sandboxes, running or hibernated, that mount
// volume id, in ID order.
func (m *Manager) volumeMountedBy(id string) []string {
	sel := labels.SelectorFromSet(labels.Set{volumeUseLabel(id): "true"})
	var by []string
	ps, _ := m.pods.Pods(m.cfg.Namespace).List(sel)
	for _, p := range ps {
		if gone, dead, _, _ := podState(p); gone || dead || p.Labels[labelPool] != "false" {
			continue
		}
		by = append(by, p.Labels[labelSandboxID])
	}
	if m.claims() {
		cs, _ := m.pvcs.PersistentVolumeClaims(m.cfg.Namespace).List(sel)
		for _, c := range cs {
			if c.Annotations[annHibernated] != "" && c.DeletionTimestamp == nil {
				by = append(by, c.Labels[labelSandboxID])
			}
		}
	}
	slices.Sort(by)
	return slices.Compact(by)
}

// usageWait bounds how long describing volumes waits for their serving
// Pods' usage answers, all together; usageParallel how many it asks at
// once.
const (
	usageWait     = 2 * time.Second
	usageParallel = 8
)

// describeVolumes describes cs's volumes. Their used bytes are a serving
// Pod's answer when one is ready and answers within usageWait (all
// together: a sidecar that hangs costs the call usageWait, whatever the
// number of volumes), else the last one recorded on the claim.
func (m *Manager) describeVolumes(ctx context.Context, cs []*corev1.PersistentVolumeClaim) []core.Volume {
	out := make([]core.Volume, len(cs))
	uctx, cancel := context.WithTimeout(ctx, usageWait)
	defer cancel()
	slots := make(chan struct{}, usageParallel)
	var wg sync.WaitGroup
	for i, c := range cs {
		id := c.Labels[labelVolumeID]
		size := c.Spec.Resources.Requests[corev1.ResourceStorage]
		out[i] = core.Volume{ID: id, Name: c.Annotations[annVolumeName], Tenant: c.Annotations[annTenant],
			SizeBytes: size.Value(), CreatedAt: c.CreationTimestamp.UTC(), MountedBy: m.volumeMountedBy(id)}
		out[i].UsedBytes, _ = strconv.ParseInt(c.Annotations[annVolumeUsed], 10, 64)
		p := m.servingPod(id)
		if p == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case slots <- struct{}{}:
				defer func() { <-slots }()
			case <-uctx.Done():
				return
			}
			conn, err := m.io(uctx, p)
			if err != nil {
				return
			}
			if used, _, err := conn.Volume(id).Usage(uctx); err == nil {
				out[i].UsedBytes = used
				// Recorded within the caller's call (not its usage wait,
				// which may end just as the answer came), bounded.
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				m.recordUsed(rctx, c, used)
			}
		}()
	}
	wg.Wait()
	return out
}

// recordUsed writes a volume's used bytes on its claim, when they changed.
func (m *Manager) recordUsed(ctx context.Context, c *corev1.PersistentVolumeClaim, used int64) {
	s := strconv.FormatInt(used, 10)
	if c.Annotations[annVolumeUsed] == s {
		return
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{annVolumeUsed: s}}})
	if _, err := m.cfg.Client.CoreV1().PersistentVolumeClaims(m.cfg.Namespace).Patch(ctx, c.Name, types.MergePatchType, b, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		m.log.Debug("record a volume's used bytes", "volume_id", c.Labels[labelVolumeID], "error", err)
	}
}

// CreateVolume makes a volume of sizeBytes for the caller's tenant: its
// claim. The name must be new in the tenant (ErrAlreadyExists, also while
// a volume of that name is being deleted), and the tenant below
// Policy.MaxVolumesPerTenant (ErrResourceExhausted; counted in this
// replica's cache, so replicas creating at once may pass it by one each).
func (m *Manager) CreateVolume(ctx context.Context, name string, size int64) (core.Volume, error) {
	if err := m.checkOpen(); err != nil {
		return core.Volume{}, err
	}
	if err := m.volumesOn(); err != nil {
		return core.Volume{}, err
	}
	tenant := core.CallerOf(ctx).Tenant
	n := 0
	for _, c := range m.volumeClaims() {
		if c.Annotations[annTenant] == tenant {
			n++
		}
	}
	if max := m.cfg.MaxVolumesPerTenant; max > 0 && n >= max {
		return core.Volume{}, core.Exhaustedf("tenant %q has %d volumes, the most this server allows (sandboxd --max-volumes-per-tenant); delete one first", tenant, n)
	}
	id := core.NewVolumeID()
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: volumeClaimName(tenant, name), Namespace: m.cfg.Namespace,
			Labels: map[string]string{labelManaged: managedBy, labelVolumeID: id, labelVolumeTenant: userHash(tenant, "")},
			Annotations: map[string]string{annTenant: tenant, annVolumeName: name,
				annCreatedAt: time.Now().UTC().Format(time.RFC3339Nano)},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{m.cfg.VolumeAccessMode},
			StorageClassName: ptr.To(m.cfg.VolumeClass),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: *resource.NewQuantity(size, resource.BinarySI)}},
		},
	}
	made, err := m.cfg.Client.CoreV1().PersistentVolumeClaims(m.cfg.Namespace).Create(ctx, c, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		old, gerr := m.cfg.Client.CoreV1().PersistentVolumeClaims(m.cfg.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
		switch {
		case gerr == nil && old.DeletionTimestamp != nil:
			return core.Volume{}, core.AlreadyExistsf("volume %q is being deleted (sandboxes still mount it); the name is free once it is gone", name)
		case gerr == nil:
			return core.Volume{}, core.AlreadyExistsf("volume %q already exists (%s)", name, old.Labels[labelVolumeID])
		}
		return core.Volume{}, core.AlreadyExistsf("volume %q already exists", name)
	}
	if err != nil {
		return core.Volume{}, apiError("create the volume's claim", err)
	}
	m.log.Info("volume created", "volume_id", id, "name", name, "tenant", tenant, "size_bytes", size, "claim", made.Name)
	m.awaitClaimCached(ctx, made.Name)
	return core.Volume{ID: id, Name: name, Tenant: tenant, SizeBytes: size, CreatedAt: made.CreationTimestamp.UTC()}, nil
}

// GetVolume describes a volume the caller may see.
func (m *Manager) GetVolume(ctx context.Context, ref string) (core.Volume, error) {
	if err := m.checkOpen(); err != nil {
		return core.Volume{}, err
	}
	c, err := m.findVolumeFresh(ctx, ref)
	if err != nil {
		return core.Volume{}, err
	}
	return m.describeVolumes(ctx, []*corev1.PersistentVolumeClaim{c})[0], nil
}

// findVolumeFresh is findVolume, after waiting a moment for this
// replica's cache to show a volume another replica (or this one) has just
// made: a caller that created a volume and names it next must find it.
func (m *Manager) findVolumeFresh(ctx context.Context, ref string) (*corev1.PersistentVolumeClaim, error) {
	caller := core.CallerOf(ctx)
	c, err := m.findVolume(caller, ref)
	if !errors.Is(err, core.ErrNotFound) {
		return c, err
	}
	// Past the cache: the claim of the caller's name, or the claim that
	// carries the ID.
	var list []corev1.PersistentVolumeClaim
	if core.IsVolumeID(ref) {
		l, lerr := m.cfg.Client.CoreV1().PersistentVolumeClaims(m.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: labelVolumeID + "=" + ref})
		if lerr != nil {
			return nil, apiError("list volume claims", lerr)
		}
		list = l.Items
	} else {
		got, gerr := m.cfg.Client.CoreV1().PersistentVolumeClaims(m.cfg.Namespace).Get(ctx, volumeClaimName(caller.Tenant, ref), metav1.GetOptions{})
		if gerr == nil {
			list = append(list, *got)
		}
	}
	for i := range list {
		c := &list[i]
		if c.DeletionTimestamp == nil && core.IsVolumeID(c.Labels[labelVolumeID]) && caller.Sees(c.Annotations[annTenant]) {
			return c, nil
		}
	}
	return nil, err
}

// ListVolumes lists the volumes the caller may see (an admin's: of tenant,
// or all), by tenant and name.
func (m *Manager) ListVolumes(ctx context.Context, tenant string) ([]core.Volume, error) {
	if err := m.checkOpen(); err != nil {
		return nil, err
	}
	if err := m.volumesOn(); err != nil {
		return nil, err
	}
	caller := core.CallerOf(ctx)
	var cs []*corev1.PersistentVolumeClaim
	for _, c := range m.volumeClaims() {
		t := c.Annotations[annTenant]
		if caller.Sees(t) && (tenant == "" || t == tenant) {
			cs = append(cs, c)
		}
	}
	slices.SortFunc(cs, func(a, b *corev1.PersistentVolumeClaim) int {
		return cmp.Compare(a.Annotations[annTenant]+"\x00"+a.Annotations[annVolumeName], b.Annotations[annTenant]+"\x00"+b.Annotations[annVolumeName])
	})
	return m.describeVolumes(ctx, cs), nil
}

// DeleteVolume deletes a volume: its server Pod, then its claim. While
// sandboxes mount it, it is VolumeInUse unless force; with force they
// keep it until their Pods end (the claim's pvc-protection), then it is
// gone with its files.
func (m *Manager) DeleteVolume(ctx context.Context, ref string, force bool) error {
	if err := m.checkOpen(); err != nil {
		return err
	}
	c, err := m.findVolumeFresh(ctx, ref)
	if err != nil {
		return err
	}
	id := c.Labels[labelVolumeID]
	if by := m.volumeMountedBy(id); len(by) > 0 && !force {
		return core.VolumeInUse(ref, by)
	}
	if err := m.cfg.Client.CoreV1().Pods(m.cfg.Namespace).Delete(ctx, volumeServerName(id), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return apiError("delete the volume's server pod", err)
	}
	// The cache may not have seen a deletion yet (this replica's own, a
	// moment ago, or another's): the claim is read from the API server,
	// and deleted only at the version read, so that of two deletions of
	// one volume exactly one succeeds and the other is NOT_FOUND, as on
	// Docker. (A claim being deleted already has its deletion timestamp:
	// pvc-protection keeps it while a Pod still mounts it.)
	for range maxAcquireRounds {
		fresh, err := m.cfg.Client.CoreV1().PersistentVolumeClaims(m.cfg.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return core.VolumeNotFound(ref)
		case err != nil:
			return apiError("read the volume's claim", err)
		case fresh.UID != c.UID || fresh.DeletionTimestamp != nil:
			return core.VolumeNotFound(ref)
		}
		err = m.cfg.Client.CoreV1().PersistentVolumeClaims(m.cfg.Namespace).Delete(ctx, c.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &fresh.UID, ResourceVersion: &fresh.ResourceVersion}})
		switch {
		case apierrors.IsConflict(err):
			continue // changed since the read (a deletion, or another write): read it again
		case apierrors.IsNotFound(err):
			return core.VolumeNotFound(ref)
		case err != nil:
			return apiError("delete the volume's claim", err)
		}
		m.log.Info("volume deleted", "volume_id", id, "name", c.Annotations[annVolumeName], "tenant", c.Annotations[annTenant], "force", force)
		return nil
	}
	return core.Errorf(core.ErrUnavailable, "gave up deleting volume %s after %d conflicting writes; try again", ref, maxAcquireRounds)
}

// podVolume is a mount of a sandbox Pod: the volume by ID, and its claim.
type podVolume struct {
	core.VolumeMount
	claim string
}

// mountsOf are the mounts of vs, as annVolumes and the API keep them.
func mountsOf(vs []podVolume) []core.VolumeMount {
	var out []core.VolumeMount
	for _, v := range vs {
		out = append(out, v.VolumeMount)
	}
	return out
}

// resolveMounts turns a new sandbox's mounts into volume IDs: each volume
// the caller's tenant's, not being deleted, and mounted once.
func (m *Manager) resolveMounts(ctx context.Context, ms []core.VolumeMount) ([]podVolume, error) {
	if len(ms) == 0 {
		return nil, nil
	}
	if err := m.volumesOn(); err != nil {
		return nil, err
	}
	caller := core.CallerOf(ctx)
	out := make([]podVolume, len(ms))
	for i, vm := range ms {
		c, err := m.findVolumeFresh(ctx, vm.Volume)
		if err != nil {
			return nil, err
		}
		if c.Annotations[annTenant] != caller.Tenant {
			return nil, core.VolumeNotFound(vm.Volume) // a sandbox mounts its own tenant's volumes only, an admin's too
		}
		id := c.Labels[labelVolumeID]
		if slices.ContainsFunc(out[:i], func(o podVolume) bool { return o.Volume == id }) {
			return nil, core.Invalidf("volumes: %s is mounted twice (by its ID and its name)", c.Annotations[annVolumeName])
		}
		out[i] = podVolume{VolumeMount: core.VolumeMount{Volume: id, Path: vm.Path, ReadOnly: vm.ReadOnly}, claim: c.Name}
	}
	return out, nil
}

// keptMounts are the mounts of ms whose volume still exists (a sandbox
// woken or started from a snapshot keeps them; a volume deleted meanwhile
// is left out, as on Docker).
func (m *Manager) keptMounts(ms []core.VolumeMount) []podVolume {
	if len(ms) == 0 || m.cfg.VolumeClass == "" {
		return nil
	}
	claims := map[string]string{}
	for _, c := range m.volumeClaims() {
		claims[c.Labels[labelVolumeID]] = c.Name
	}
	var out []podVolume
	for _, vm := range ms {
		if claim := claims[vm.Volume]; claim != "" {
			out = append(out, podVolume{VolumeMount: vm, claim: claim})
		} else {
			m.log.Warn("a volume the sandbox mounted is gone; it starts without it", "volume_id", vm.Volume)
		}
	}
	return out
}

// encodeMounts and decodeMounts are annVolumes' form.
func encodeMounts(ms []core.VolumeMount) string {
	if len(ms) == 0 {
		return ""
	}
	b, _ := json.Marshal(ms)
	return string(b)
}

func decodeMounts(s string) []core.VolumeMount {
	if s == "" {
		return nil
	}
	var ms []core.VolumeMount
	if err := json.Unmarshal([]byte(s), &ms); err != nil || len(ms) > core.MaxVolumeMounts {
		return nil
	}
	out := ms[:0]
	for _, vm := range ms {
		if core.IsVolumeID(vm.Volume) && core.ValidateMountPath(vm.Path) == nil {
			out = append(out, vm)
		}
	}
	return out
}

// volumePodParts are the Pod volumes and the mounts of the sandbox and
// sidecar containers for ms, and the labels that say the Pod mounts them.
func volumePodParts(ms []podVolume) (vols []corev1.Volume, sandbox, sidecar []corev1.VolumeMount, lbl map[string]string) {
	lbl = map[string]string{}
	for i, vm := range ms {
		name := fmt.Sprintf("vol-%d", i)
		vols = append(vols, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: vm.claim}}})
		sandbox = append(sandbox, corev1.VolumeMount{Name: name, MountPath: vm.Path, ReadOnly: vm.ReadOnly})
		sidecar = append(sidecar, corev1.VolumeMount{Name: name, MountPath: volumesDir + "/" + vm.Volume})
		lbl[volumeUseLabel(vm.Volume)] = "true"
	}
	return vols, sandbox, sidecar, lbl
}

// servingPod is a ready Pod whose sidecar mounts volume id: a sandbox's
// or its server's; nil if none.
func (m *Manager) servingPod(id string) *corev1.Pod {
	var best *corev1.Pod
	ps, _ := m.pods.Pods(m.cfg.Namespace).List(labels.SelectorFromSet(labels.Set{volumeUseLabel(id): "true"}))
	for _, p := range ps {
		if gone, dead, _, ready := podState(p); gone || dead || !ready || p.DeletionTimestamp != nil {
			continue // a Pod stopping (a server the leader deleted) may still show ready
		}
		if best == nil || p.Labels[labelVolumeServer] == "" {
			best = p // a sandbox's Pod before the server: the server may go idle
		}
	}
	return best
}

// volumeFiles returns the files API on volume ref through a serving Pod,
// starting the volume's server Pod when none serves it (bounded by
// StartTimeout).
func (m *Manager) volumeFiles(ctx context.Context, ref string) (iosidecar.VolumeFiles, error) {
	if err := m.checkOpen(); err != nil {
		return iosidecar.VolumeFiles{}, err
	}
	c, err := m.findVolumeFresh(ctx, ref)
	if err != nil {
		return iosidecar.VolumeFiles{}, err
	}
	id := c.Labels[labelVolumeID]
	p := m.servingPod(id)
	if p == nil {
		if p, err = m.startVolumeServer(ctx, c); err != nil {
			return iosidecar.VolumeFiles{}, err
		}
	}
	if p.Labels[labelVolumeServer] != "" {
		m.touchServer(ctx, p)
	}
	conn, err := m.io(ctx, p)
	if err != nil {
		return iosidecar.VolumeFiles{}, err
	}
	return conn.Volume(id), nil
}

// startVolumeServer creates volume c's server Pod (or finds the one
// another call created; one the leader is stopping is waited out and made
// again) and waits until it is ready, all within StartTimeout.
func (m *Manager) startVolumeServer(ctx context.Context, c *corev1.PersistentVolumeClaim) (*corev1.Pod, error) {
	id := c.Labels[labelVolumeID]
	pods := m.cfg.Client.CoreV1().Pods(m.cfg.Namespace)
	deadline := time.Now().Add(m.cfg.StartTimeout)
	var p *corev1.Pod
	for p == nil {
		if time.Now().After(deadline) {
			return nil, core.Errorf(core.ErrUnavailable, "volume %s: its server pod could not be made within %v; try again later", id, m.cfg.StartTimeout)
		}
		ch := m.changed()
		made, err := pods.Create(ctx, buildVolumeServer(&m.cfg, id, c.Name), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			made, err = pods.Get(ctx, volumeServerName(id), metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				continue // gone meanwhile: made again
			}
		}
		if err != nil {
			return nil, apiError("create the volume's server pod", err)
		}
		if made.DeletionTimestamp == nil {
			p = made
			break
		}
		if err := m.awaitChange(ctx, ch, deadline, "volume %s: waiting for its stopping server pod %s to go", id, made.Name); err != nil {
			return nil, err
		}
	}
	for {
		ch := m.changed()
		q, err := m.pods.Pods(m.cfg.Namespace).Get(p.Name)
		if err == nil && q.UID == p.UID {
			if _, dead, why, ready := podState(q); ready {
				return q, nil
			} else if dead {
				return nil, core.Errorf(core.ErrUnavailable, "volume %s: its server pod failed: %s", id, why)
			}
			p = q
		}
		if err := m.awaitChange(ctx, ch, deadline, "volume %s: waiting for its server pod %s to start (%s)", id, p.Name, pendingWhy(p)); err != nil {
			return nil, err
		}
	}
}

// touchServer writes a volume server Pod's last use, at most every
// serverUseWrite.
func (m *Manager) touchServer(ctx context.Context, p *corev1.Pod) {
	if t := parseTime(p.Annotations[annServerUsed]); time.Since(t) < serverUseWrite {
		return
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{annServerUsed: time.Now().UTC().Format(time.RFC3339Nano)}}})
	if _, err := m.cfg.Client.CoreV1().Pods(m.cfg.Namespace).Patch(ctx, p.Name, types.MergePatchType, b, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		m.log.Debug("record a volume server's use", "pod", p.Name, "error", err)
	}
}

// stopIdleServers is the leader's: it deletes volume server Pods without
// a call for volumeServerIdle, and those whose volume is gone.
func (m *Manager) stopIdleServers(ctx context.Context, now time.Time) {
	req, _ := labels.NewRequirement(labelVolumeServer, selection.Exists, nil)
	ps, _ := m.pods.Pods(m.cfg.Namespace).List(labels.NewSelector().Add(*req))
	if len(ps) == 0 {
		return
	}
	have := map[string]bool{}
	for _, c := range m.volumeClaims() {
		have[c.Labels[labelVolumeID]] = true
	}
	for _, p := range ps {
		if p.DeletionTimestamp != nil {
			continue
		}
		used := parseTime(p.Annotations[annServerUsed])
		if c := p.CreationTimestamp.Time; c.After(used) {
			used = c
		}
		if have[p.Labels[labelVolumeServer]] && now.Sub(used) < volumeServerIdle {
			continue
		}
		err := m.cfg.Client.CoreV1().Pods(m.cfg.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			m.log.Warn("delete an idle volume server pod", "pod", p.Name, "error", err)
		}
	}
}

// SampleVolumeServer returns the Pod that serves a named volume's files
// under cfg (its zero fields defaulted), for a fixed volume: the exact
// spec sandboxd creates, for checking it against a cluster's admission
// policies and NetworkPolicies before deploying.
func SampleVolumeServer(cfg Config) *corev1.Pod {
	cfg.fillDefaults()
	return buildVolumeServer(&cfg, "vol-abcdefghijklmnopqrst", volumeClaimName(core.DefaultTenant, "sample"))
}

// buildVolumeServer is volume id's server Pod: the io sidecar alone, the
// volume's claim at volumesDir/<id>, under the sidecar's posture in a
// sandbox Pod (pod.go).
func buildVolumeServer(cfg *Config, id, claim string) *corev1.Pod {
	scratch := resource.NewQuantity(16<<20, resource.BinarySI)
	sidecar := sidecarContainer(cfg, cfg.Image,
		[]string{fmt.Sprintf("--listen=:%d", cfg.IOPort), "--io=/io", "--workspace=/workspace", "--volumes=" + volumesDir},
		[]corev1.VolumeMount{
			{Name: "data", MountPath: volumesDir + "/" + id},
			{Name: volumeIO, MountPath: "/io"},
			{Name: volumeWorkspace, MountPath: "/workspace"},
		})
	sidecar.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstrPort(cfg.IOPort)}}, PeriodSeconds: 1}
	spec := basePodSpec(cfg)
	spec.Volumes = []corev1.Volume{
		{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}},
		{Name: volumeIO, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: scratch}}},
		{Name: volumeWorkspace, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: scratch}}},
	}
	spec.Containers = []corev1.Container{sidecar}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: volumeServerName(id), Namespace: cfg.Namespace,
			Labels:      map[string]string{labelManaged: managedBy, labelVolumeServer: id, volumeUseLabel(id): "true"},
			Annotations: map[string]string{annServerUsed: time.Now().UTC().Format(time.RFC3339Nano)},
		},
		Spec: spec,
	}
}

// The volume API's files calls, through a serving Pod's sidecar
// (volumeFiles); the Docker backend's semantics, by the same code
// (wspath's Volume tree, in the sidecar).

// VolumeUpload writes r to a file on the volume, atomically, creating
// missing parents; without overwrite an existing file is ErrAlreadyExists.
// At most Config.MaxUploadBytes.
func (m *Manager) VolumeUpload(ctx context.Context, ref, rel string, r io.Reader, overwrite bool) (core.FileInfo, error) {
	v, err := m.volumeFiles(ctx, ref)
	if err != nil {
		return core.FileInfo{}, err
	}
	return v.Upload(ctx, rel, r, m.cfg.MaxUploadBytes, overwrite)
}

// VolumeDownload opens a regular file on the volume for reading.
func (m *Manager) VolumeDownload(ctx context.Context, ref, rel string) (io.ReadCloser, core.FileInfo, error) {
	v, err := m.volumeFiles(ctx, ref)
	if err != nil {
		return nil, core.FileInfo{}, err
	}
	return v.Download(ctx, rel)
}

// VolumeStat describes a file on the volume (a symlink as a link).
func (m *Manager) VolumeStat(ctx context.Context, ref, rel string) (core.FileInfo, error) {
	v, err := m.volumeFiles(ctx, ref)
	if err != nil {
		return core.FileInfo{}, err
	}
	return v.Stat(ctx, rel)
}

// VolumeListFiles lists a directory of the volume over depth levels.
func (m *Manager) VolumeListFiles(ctx context.Context, ref, rel string, depth int) ([]core.FileInfo, error) {
	v, err := m.volumeFiles(ctx, ref)
	if err != nil {
		return nil, err
	}
	return v.List(ctx, rel, depth)
}

// VolumeMakeDirectory creates a directory on the volume.
func (m *Manager) VolumeMakeDirectory(ctx context.Context, ref, rel string, parents bool) (core.FileInfo, error) {
	v, err := m.volumeFiles(ctx, ref)
	if err != nil {
		return core.FileInfo{}, err
	}
	return v.MakeDirectory(ctx, rel, parents)
}

// VolumeRemove removes a file or directory from the volume.
func (m *Manager) VolumeRemove(ctx context.Context, ref, rel string, recursive bool) error {
	v, err := m.volumeFiles(ctx, ref)
	if err != nil {
		return err
	}
	return v.Remove(ctx, rel, recursive)
}

// VolumeSetAttributes sets a file's owner, group or mode on the volume
// (never through a symlink).
func (m *Manager) VolumeSetAttributes(ctx context.Context, ref, rel string, a core.FileAttributes) (core.FileInfo, error) {
	v, err := m.volumeFiles(ctx, ref)
	if err != nil {
		return core.FileInfo{}, err
	}
	return v.SetAttributes(ctx, rel, a)
}
