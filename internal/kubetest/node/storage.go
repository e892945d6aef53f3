//go:build linux

package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// LocalStorageClass is the StorageClass every cluster offers
// (Cluster.StorageClass): static local PersistentVolumes, a pool per node
// (Options.LocalVolumes), since there is no provisioner to download.
// Binding waits for a Pod (WaitForFirstConsumer), so that the scheduler
// picks a node and a PV of that node together, as for any local storage;
// a claim's Pods all run on its PV's node. A PV is kept when its claim
// goes (Retain) and the cluster's recycler empties it and makes it
// Available again, as sig-storage's local-static-provisioner does.
const LocalStorageClass = "sandboxd-local"

// LocalVolumeLabel labels each local PV with the name of its node.
const LocalVolumeLabel = "kubetest.sandboxd.io/local-pv"

// defaultLocalVolumes is how many local PVs each node has unless
// Options.LocalVolumes says otherwise: more than the sandboxes a test
// keeps on one node at once (the e2e tests run twenty over two nodes),
// each holding one claim while it runs or hibernates.
const defaultLocalVolumes = 24

// localCapacity is every local PV's capacity: nominal, nothing enforces
// it (the PVs are directories of the host's disk).
var localCapacity = resource.MustParse("10Gi")

// recyclePeriod is how often the recycler looks for Released PVs.
const recyclePeriod = 500 * time.Millisecond

// makeLocalStorage makes the StorageClass and, for each node, its pool of
// count local PVs, each a directory under the node's directory (mode 0777,
// as an emptyDir's root, so that a non-root container may write).
func (c *Cluster) makeLocalStorage(ctx context.Context, count int) error {
	if _, err := c.Client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: LocalStorageClass},
		Provisioner:       "kubernetes.io/no-provisioner",
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimRetain),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
	}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("StorageClass %s: %w", LocalStorageClass, err)
	}
	for _, n := range c.Nodes {
		// The label the kubelet registered its node with, which the
		// scheduler matches the PVs' node affinity against.
		node, err := c.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		hostname := node.Labels[corev1.LabelHostname]
		if hostname == "" {
			return fmt.Errorf("node %s has no label %s", n.Name, corev1.LabelHostname)
		}
		for i := range count {
			name := fmt.Sprintf("local-%s-%02d", n.Name, i)
			dir := filepath.Join(n.dir, "local-volumes", name)
			if err := emptyDir(dir); err != nil {
				return err
			}
			if _, err := c.Client.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LocalVolumeLabel: n.Name}},
				Spec: corev1.PersistentVolumeSpec{
					Capacity:                      corev1.ResourceList{corev1.ResourceStorage: localCapacity},
					AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
					StorageClassName:              LocalStorageClass,
					VolumeMode:                    ptr.To(corev1.PersistentVolumeFilesystem),
					PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: dir}},
					NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
						MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{hostname}}},
					}}}},
				},
			}, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("PersistentVolume %s: %w", name, err)
			}
		}
	}
	return nil
}

// emptyDir makes dir an empty directory of mode 0777: what a new local PV
// is, and what the recycler makes of a released one. It removes dir's
// contents, not dir (the PV's path), and follows no symbolic link.
func emptyDir(dir string) error {
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
	}
	errs = append(errs, os.Chmod(dir, 0o777)) // past the umask, and whatever a Pod did
	return errors.Join(errs...)
}

// startRecycler starts the cluster's recycler, which Close stops.
func (c *Cluster) startRecycler(logf func(string, ...any)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	c.stopRecycler = func() {
		cancel()
		<-done
	}
	go func() {
		defer close(done)
		t := time.NewTicker(recyclePeriod)
		defer t.Stop()
		for {
			c.recycle(ctx, logf)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// recycle makes every Released local PV (its claim deleted) Available
// again: its directory emptied, then its claim reference cleared (the PV
// controller then marks it Available). What fails is logged and tried
// again the next round.
func (c *Cluster) recycle(ctx context.Context, logf func(string, ...any)) {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := c.Client.CoreV1().PersistentVolumes().List(lctx, metav1.ListOptions{LabelSelector: LocalVolumeLabel})
	if err != nil {
		if ctx.Err() == nil {
			logf("node: recycler: list PersistentVolumes: %v", err)
		}
		return
	}
	for i := range list.Items {
		pv := &list.Items[i]
		if pv.Status.Phase != corev1.VolumeReleased || pv.Spec.Local == nil || pv.Spec.StorageClassName != LocalStorageClass || pv.DeletionTimestamp != nil {
			continue
		}
		// A conflict is a PV that changed since the list: next round.
		if err := c.recycleOne(lctx, pv); err != nil && ctx.Err() == nil && !apierrors.IsConflict(err) {
			logf("node: recycler: PersistentVolume %s: %v", pv.Name, err)
		}
	}
}

// recycleOne empties Released PV pv and clears its claim reference,
// unless its claim is there after all.
func (c *Cluster) recycleOne(ctx context.Context, pv *corev1.PersistentVolume) error {
	if ref := pv.Spec.ClaimRef; ref != nil {
		claim, err := c.Client.CoreV1().PersistentVolumeClaims(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		switch {
		case err == nil && claim.UID == ref.UID:
			return nil // the PV controller's view lags; not released
		case err != nil && !apierrors.IsNotFound(err):
			return err
		}
	}
	if err := emptyDir(pv.Spec.Local.Path); err != nil {
		return fmt.Errorf("empty %s: %w", pv.Spec.Local.Path, err)
	}
	pv.Spec.ClaimRef = nil
	_, err := c.Client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{})
	return err
}
