//go:build linux

package node_test

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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
