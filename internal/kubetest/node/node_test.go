//go:build linux

package node_test

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/sandboxd/sandboxd/internal/kubetest/node"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// One real node runs a Pod of the sandbox image: the scheduler binds it,
// containerd runs it with an address of the node's Pod range, the host
// reaches it there (as sandboxd reaches an io sidecar), and its container
// is found, and gone once the Pod is deleted.
func TestCluster(t *testing.T) {
	const image = "sandboxd.test/sandbox:node-test"
	c := node.Start(t, node.Options{Images: map[string]string{testenv.Image(): image}})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	pods := c.Client.CoreV1().Pods("default")
	if _, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers:                    []corev1.Container{{Name: "main", Image: image, Command: []string{"python3", "-m", "http.server", "8080"}}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var p *corev1.Pod
	for p == nil || p.Status.Phase != corev1.PodRunning {
		if ctx.Err() != nil {
			t.Fatalf("the pod is not running after 3m: %+v\n%s", p.Status, c.Nodes[0].Logs())
		}
		time.Sleep(200 * time.Millisecond) // polling the API server
		p, _ = pods.Get(ctx, "web", metav1.GetOptions{})
	}
	n := c.Nodes[0]
	if p.Spec.NodeName != n.Name || !n.PodCIDR.Contains(netip.MustParseAddr(p.Status.PodIP)) {
		t.Errorf("the pod runs on %q at %s; want node %s, in %s", p.Spec.NodeName, p.Status.PodIP, n.Name, n.PodCIDR)
	}
	id := c.ContainerID(ctx, "default", "web", "main")
	if id == "" {
		t.Fatal("the CRI lists no running container for the pod")
	}
	var err error
	for {
		var conn net.Conn
		if conn, err = net.DialTimeout("tcp", net.JoinHostPort(p.Status.PodIP, "8080"), time.Second); err == nil {
			conn.Close()
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the host cannot reach the pod at %s:8080: %v", p.Status.PodIP, err)
		}
		time.Sleep(200 * time.Millisecond) // the server starting
	}
	if err := pods.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitContainerGone(t, ctx, c, id)
}

// A Pod of two containers runs under gVisor (the cluster's RuntimeClass):
// one exits at once, and its node reports its exit code and its output
// (the kubelet's termination message falls back to the container's log),
// which gVisor's kernel wrote; the other keeps running beside it, in the
// same sandbox; both go with the Pod.
func TestClusterGVisor(t *testing.T) {
	const image = "sandboxd.test/sandbox:node-test"
	c := node.Start(t, node.Options{Images: map[string]string{testenv.Image(): image}})
	rc := c.NeedGVisor(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	pods := c.Client.CoreV1().Pods("default")
	if _, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "gvisor"},
		Spec: corev1.PodSpec{
			RuntimeClassName:              ptr.To(rc),
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{
				{Name: "stays", Image: image, Command: []string{"sleep", "3600"}},
				{Name: "exits", Image: image, Command: []string{"sh", "-c", "echo written; cat /proc/version; exit 3"},
					TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError},
			},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var exited, running *corev1.ContainerStatus
	for exited == nil || running == nil {
		if ctx.Err() != nil {
			t.Fatalf("no exit of one container beside the other running after 3m (exited %+v, running %+v)\n%s", exited, running, c.Nodes[0].Logs())
		}
		time.Sleep(200 * time.Millisecond) // polling the API server
		p, err := pods.Get(ctx, "gvisor", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		exited, running = nil, nil
		for i, s := range p.Status.ContainerStatuses {
			switch {
			case s.Name == "exits" && s.State.Terminated != nil:
				exited = &p.Status.ContainerStatuses[i]
			case s.Name == "stays" && s.State.Running != nil:
				running = &p.Status.ContainerStatuses[i]
			}
		}
	}
	if term := exited.State.Terminated; term.ExitCode != 3 || !strings.Contains(term.Message, "written") || !strings.Contains(term.Message, "gvisor") {
		t.Errorf("the exited container: code %d, message %q; want 3, and its output (gVisor's kernel version)", term.ExitCode, term.Message)
	}
	id := c.ContainerID(ctx, "default", "gvisor", "stays")
	if id == "" {
		t.Fatal("the CRI lists no running container for the pod")
	}
	// The runtime's stats of the container are of its own cgroup (runsc's,
	// holding the process that stands for the container on the host), not
	// of this machine's root cgroup.
	st, err := c.Nodes[0].CRI.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: id})
	if ws := st.GetStats().GetMemory().GetWorkingSetBytes().GetValue(); err != nil || ws > 64<<20 {
		t.Errorf("the running container's stats: %v, working set %d bytes; want those of its own cgroup, a few MiB", err, ws)
	}
	if err := pods.Delete(ctx, "gvisor", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitContainerGone(t, ctx, c, id)
}

// waitContainerGone waits, until ctx ends, for container id to be gone
// from every node after its Pod was deleted.
func waitContainerGone(t *testing.T, ctx context.Context, c *node.Cluster, id string) {
	t.Helper()
	for {
		gone, err := c.ContainerGone(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if gone {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("container %s still exists after its pod was deleted", id)
		}
		time.Sleep(200 * time.Millisecond) // the kubelet's clean-up
	}
}

// A claim of the cluster's StorageClass is bound to a local PV of the node
// its first Pod is scheduled to, and holds what that Pod wrote (as a
// non-root user, into two subPaths of it) after the Pod is deleted: a
// second Pod, sent to the same node by the PV's node affinity, finds it
// there (a sandbox's hibernation and wake). Once the claim is deleted, the
// PV is emptied and Available again.
func TestClusterLocalVolumes(t *testing.T) {
	const image = "sandboxd.test/sandbox:node-test"
	c := node.Start(t, node.Options{Nodes: []string{"node-a", "node-b"}, Images: map[string]string{testenv.Image(): image}})
	if c.StorageClass != node.LocalStorageClass {
		t.Fatalf("the cluster's StorageClass is %q; want %q", c.StorageClass, node.LocalStorageClass)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	claims := c.Client.CoreV1().PersistentVolumeClaims("default")
	if _, err := claims.Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(c.StorageClass),
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The first Pod writes a file into each subPath, as uid 1000.
	first := runClaimPod(t, ctx, c, "first", "data", image)
	id := c.ContainerID(ctx, "default", "first", "main")
	if _, err := c.Exec(ctx, id, "sh", "-c", `test "$(id -u)" = 1000 && echo ws > /workspace/w && echo io > /io/i`); err != nil {
		t.Fatalf("uid 1000 cannot write the claim's subPaths: %v", err)
	}
	claim, err := claims.Get(ctx, "data", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv, err := c.Client.CoreV1().PersistentVolumes().Get(ctx, claim.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the claim's volume %q: %v", claim.Spec.VolumeName, err)
	}
	if pv.Labels[node.LocalVolumeLabel] != first.Spec.NodeName || pv.Spec.Local == nil {
		t.Fatalf("the claim is bound to PV %s (node %q); want a local PV of the Pod's node %s", pv.Name, pv.Labels[node.LocalVolumeLabel], first.Spec.NodeName)
	}
	dir := pv.Spec.Local.Path
	for _, sub := range []string{"workspace", "io"} {
		fi, err := os.Stat(filepath.Join(dir, sub))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		t.Logf("the kubelet made subPath %s: mode %v, owner %d:%d", sub, fi.Mode(), st.Uid, st.Gid)
	}
	deletePod(t, ctx, c, "first")

	// The second Pod, on the same node, finds both files.
	second := runClaimPod(t, ctx, c, "second", "data", image)
	if second.Spec.NodeName != first.Spec.NodeName {
		t.Errorf("the second Pod runs on %s; want %s, the PV's node", second.Spec.NodeName, first.Spec.NodeName)
	}
	out, err := c.Exec(ctx, c.ContainerID(ctx, "default", "second", "main"), "cat", "/workspace/w", "/io/i")
	if err != nil || out != "ws\nio\n" {
		t.Errorf("the second Pod reads %q, %v; want the first Pod's files (ws, io)", out, err)
	}
	deletePod(t, ctx, c, "second")

	// Deleting the claim releases the PV, which the recycler empties and
	// makes Available again.
	if err := claims.Delete(ctx, "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		got, err := c.Client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		if err == nil {
			pv = got
			if pv.Status.Phase == corev1.VolumeAvailable && pv.Spec.ClaimRef == nil {
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("PV %s is not Available again after its claim was deleted: %v, phase %q, claim %v", pv.Name, err, pv.Status.Phase, pv.Spec.ClaimRef)
		}
		time.Sleep(200 * time.Millisecond) // polling the API server
	}
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != 0 {
		t.Errorf("the recycled PV's directory %s holds %v (%v); want it empty", dir, ents, err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o777 {
		t.Errorf("the recycled PV's directory: %v, %v; want mode 0777", fi, err)
	}
}

// runClaimPod runs Pod name, as uid 1000, mounting claim's subPaths
// workspace and io at /workspace and /io, and returns it once it runs.
func runClaimPod(t *testing.T, ctx context.Context, c *node.Cluster, name, claim, image string) *corev1.Pod {
	t.Helper()
	pods := c.Client.CoreV1().Pods("default")
	if _, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			SecurityContext:               &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](1000)},
			Containers: []corev1.Container{{Name: "main", Image: image, Command: []string{"sleep", "3600"},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "data", MountPath: "/workspace", SubPath: "workspace"},
					{Name: "data", MountPath: "/io", SubPath: "io"},
				}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
			}}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var last corev1.PodStatus
	for {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil && p.Status.Phase == corev1.PodRunning:
			return p
		case err == nil:
			last = p.Status
		case ctx.Err() == nil:
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			var logs string
			for _, n := range c.Nodes {
				logs += n.Logs()
			}
			t.Fatalf("Pod %s is not running: %+v\n%s", name, last, logs)
		}
		time.Sleep(200 * time.Millisecond) // polling the API server
	}
}

// deletePod deletes Pod name and waits until it is gone from the API
// server (the kubelet has unmounted its volumes).
func deletePod(t *testing.T, ctx context.Context, c *node.Cluster, name string) {
	t.Helper()
	pods := c.Client.CoreV1().Pods("default")
	if err := pods.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := pods.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("Pod %s is still there after its deletion: %v", name, err)
		}
		time.Sleep(200 * time.Millisecond) // the kubelet's clean-up
	}
}
