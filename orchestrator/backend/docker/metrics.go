package docker

import (
	"context"
	"io"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// SandboxCounts counts the registered sandboxes (not the unclaimed warm-pool
// ones; see PoolSize) by tenant and state, sorted by tenant then state.
// It reads the registry as it is, for gauges computed at scrape time.
func (m *Manager) SandboxCounts() []core.SandboxCount {
	counts := map[core.CountKey]int{}
	for _, sb := range m.reg.all() {
		st, _ := sb.status()
		sb.mu.Lock()
		tenant := sb.tenant
		sb.mu.Unlock()
		counts[core.CountKey{Tenant: tenant, State: st}]++
	}
	return core.SortedCounts(counts)
}

// PoolSize is the number of ready, unclaimed warm-pool sandboxes.
func (m *Manager) PoolSize() int { return m.pool.size() + m.netPool.size() }

// countDockerErrors wraps d so that its failures are reported to mt.
// Without metrics, d is returned as is.
func countDockerErrors(d DockerAPI, mt core.Metrics) DockerAPI {
	if _, none := mt.(core.NoMetrics); none {
		return d
	}
	return countingDocker{d, mt}
}

// countingDocker is a DockerAPI that reports its failures. Events' errors
// are the monitor's to handle (it reconnects) and are not counted.
type countingDocker struct {
	DockerAPI
	mt core.Metrics
}

func (c countingDocker) count(ctx context.Context, op string, err error) {
	if err == nil || cerrdefs.IsNotFound(err) || ctx.Err() != nil {
		return
	}
	c.mt.DockerError(op)
}

func (c countingDocker) ImageInspect(ctx context.Context, imageID string, opts ...client.ImageInspectOption) (image.InspectResponse, error) {
	r, err := c.DockerAPI.ImageInspect(ctx, imageID, opts...)
	c.count(ctx, "image_inspect", err)
	return r, err
}

func (c countingDocker) ContainerCreate(ctx context.Context, config *container.Config, hostConfig *container.HostConfig, networkingConfig *network.NetworkingConfig, platform *ocispec.Platform, containerName string) (container.CreateResponse, error) {
	r, err := c.DockerAPI.ContainerCreate(ctx, config, hostConfig, networkingConfig, platform, containerName)
	c.count(ctx, "container_create", err)
	return r, err
}

func (c countingDocker) ContainerStart(ctx context.Context, containerID string, options container.StartOptions) error {
	err := c.DockerAPI.ContainerStart(ctx, containerID, options)
	c.count(ctx, "container_start", err)
	return err
}

func (c countingDocker) ContainerInspect(ctx context.Context, containerID string) (container.InspectResponse, error) {
	r, err := c.DockerAPI.ContainerInspect(ctx, containerID)
	c.count(ctx, "container_inspect", err)
	return r, err
}

func (c countingDocker) ContainerList(ctx context.Context, options container.ListOptions) ([]container.Summary, error) {
	r, err := c.DockerAPI.ContainerList(ctx, options)
	c.count(ctx, "container_list", err)
	return r, err
}

func (c countingDocker) ContainerRemove(ctx context.Context, containerID string, options container.RemoveOptions) error {
	err := c.DockerAPI.ContainerRemove(ctx, containerID, options)
	c.count(ctx, "container_remove", err)
	return err
}

func (c countingDocker) ContainerRestart(ctx context.Context, containerID string, options container.StopOptions) error {
	err := c.DockerAPI.ContainerRestart(ctx, containerID, options)
	c.count(ctx, "container_restart", err)
	return err
}

func (c countingDocker) CopyFromContainer(ctx context.Context, containerID, srcPath string) (io.ReadCloser, container.PathStat, error) {
	r, st, err := c.DockerAPI.CopyFromContainer(ctx, containerID, srcPath)
	c.count(ctx, "copy_from_container", err)
	return r, st, err
}
