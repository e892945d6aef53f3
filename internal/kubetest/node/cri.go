//go:build linux

package node

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The labels the kubelet puts on every container it asks the CRI for.
const (
	labelPodNamespace = "io.kubernetes.pod.namespace"
	labelPodName      = "io.kubernetes.pod.name"
	labelContainer    = "io.kubernetes.container.name"
)

// ContainerID is the running container name of Pod ns/pod, on whichever
// live node runs it; "" when none does.
func (c *Cluster) ContainerID(ctx context.Context, ns, pod, name string) string {
	for _, n := range c.Nodes {
		if n.lost {
			continue
		}
		list, err := n.CRI.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
			State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
			LabelSelector: map[string]string{labelPodNamespace: ns, labelPodName: pod, labelContainer: name},
		}})
		if err == nil && len(list.GetContainers()) > 0 {
			return list.GetContainers()[0].GetId()
		}
	}
	return ""
}

// ContainerGone reports whether no live node has container id any more.
func (c *Cluster) ContainerGone(ctx context.Context, id string) (bool, error) {
	for _, n := range c.Nodes {
		if n.lost {
			continue
		}
		_, err := n.CRI.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		switch status.Code(err) {
		case codes.OK:
			return false, nil
		case codes.NotFound:
		default:
			return false, fmt.Errorf("node %s: container status of %s: %w", n.Name, id, err)
		}
	}
	return true, nil
}

// KillContainer kills container name of Pod ns/pod at once, through the
// CRI of the node running it, as a crash would (the kubelet sees it exit
// with 137 and restarts it, or not, by the Pod's restart policy).
func (c *Cluster) KillContainer(ctx context.Context, ns, pod, name string) error {
	id := c.ContainerID(ctx, ns, pod, name)
	if id == "" {
		return fmt.Errorf("no node runs container %s of pod %s/%s", name, ns, pod)
	}
	for _, n := range c.Nodes {
		if n.lost {
			continue
		}
		if _, err := n.CRI.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 0}); status.Code(err) != codes.NotFound {
			return err
		}
	}
	return fmt.Errorf("container %s of pod %s/%s went before it was killed", name, ns, pod)
}

// Exec runs argv in container id, on whichever live node has it, and
// returns its standard output, as `kubectl exec` would (a non-zero exit is
// an error quoting its standard error).
func (c *Cluster) Exec(ctx context.Context, id string, argv ...string) (string, error) {
	for _, n := range c.Nodes {
		if n.lost {
			continue
		}
		r, err := n.CRI.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: argv, Timeout: 30})
		switch status.Code(err) {
		case codes.OK:
			if r.GetExitCode() != 0 {
				return string(r.GetStdout()), fmt.Errorf("%v in container %s: exit %d: %s", argv, id, r.GetExitCode(), r.GetStderr())
			}
			return string(r.GetStdout()), nil
		case codes.NotFound:
		default:
			return "", fmt.Errorf("node %s: exec %v in container %s: %w", n.Name, argv, id, err)
		}
	}
	return "", fmt.Errorf("no live node has container %s", id)
}
