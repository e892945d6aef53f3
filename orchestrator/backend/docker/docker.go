package docker

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// DockerAPI is the part of the Docker Engine API the Manager uses, declared
// next to its user so that tests can substitute a fake. The signatures are
// those of *client.Client from github.com/docker/docker/client, which
// satisfies the interface as is.
//
// Errors must be classifiable with github.com/containerd/errdefs (NotFound,
// InvalidArgument, ...) as the real client's are; connection failures are
// recognised with client.IsErrConnectionFailed.
type DockerAPI interface {
	ImageInspect(ctx context.Context, imageID string, opts ...client.ImageInspectOption) (image.InspectResponse, error)
	ContainerCreate(ctx context.Context, config *container.Config, hostConfig *container.HostConfig, networkingConfig *network.NetworkingConfig, platform *ocispec.Platform, containerName string) (container.CreateResponse, error)
	ContainerStart(ctx context.Context, containerID string, options container.StartOptions) error
	ContainerInspect(ctx context.Context, containerID string) (container.InspectResponse, error)
	ContainerList(ctx context.Context, options container.ListOptions) ([]container.Summary, error)
	ContainerRemove(ctx context.Context, containerID string, options container.RemoveOptions) error
	ContainerRestart(ctx context.Context, containerID string, options container.StopOptions) error
	// ContainerUpdate changes a running container's cgroup limits: a
	// claimed warm-pool sandbox takes its request's (shape.go).
	ContainerUpdate(ctx context.Context, containerID string, updateConfig container.UpdateConfig) (container.UpdateResponse, error)
	Events(ctx context.Context, options events.ListOptions) (<-chan events.Message, <-chan error)
	// The archive API, to read a file of a sandbox's image
	// (readImageFile).
	CopyFromContainer(ctx context.Context, containerID, srcPath string) (io.ReadCloser, container.PathStat, error)
}

// newDockerClient connects to the engine named by the environment
// (DOCKER_HOST, ...). Version negotiation is required: the client library
// speaks a newer API than engines still in service (20.10 speaks 1.41).
func newDockerClient() (*client.Client, error) {
	c, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, core.Unavailablef("docker client: %w", err)
	}
	return c, nil
}

// containerNamePrefix + sandbox ID names each container.
const containerNamePrefix = "sandboxd-"

// dockerError classifies an error from the Docker API for the operation op.
// Unreachable engine, timeouts and server-side trouble are Unavailable (the
// caller may retry); a rejected request is InvalidArgument. NotFound is left
// to callers, which know what was missing; here it becomes NotFound with the
// engine's message. Anything else is returned unclassified (an Internal error
// to API clients, logged in full).
func dockerError(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case core.IsClassified(err):
		return err
	case client.IsErrConnectionFailed(err), cerrdefs.IsUnavailable(err):
		return core.Unavailablef("docker engine is unreachable (%s): %w", op, err)
	case cerrdefs.IsNotFound(err):
		return core.NotFoundf("docker %s: %w", op, err)
	case cerrdefs.IsInvalidArgument(err):
		return core.Invalidf("docker rejected %s: %w", op, err)
	case cerrdefs.IsConflict(err):
		return core.Preconditionf("docker %s: %w", op, err)
	case cerrdefs.IsInternal(err), cerrdefs.IsUnknown(err), cerrdefs.IsDeadlineExceeded(err),
		errors.Is(err, context.DeadlineExceeded):
		return core.Unavailablef("docker %s failed: %w", op, err)
	}
	return fmt.Errorf("docker %s: %w", op, err)
}
