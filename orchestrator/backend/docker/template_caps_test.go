package docker

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// hangingBuilds is the fake engine with what template builds need, whose
// build steps never end: creating a step's container waits until the
// build's context ends, as an endless step would hold its build.
type hangingBuilds struct {
	*fakeDocker
	steps chan string // a template's ID, as its step starts
}

func newHangingBuilds() *hangingBuilds {
	return &hangingBuilds{fakeDocker: newFakeDocker(testImage), steps: make(chan string, 16)}
}

// ImageInspect answers for an image by its ID too (the fake's IDs are
// "sha256:" and the name).
func (h *hangingBuilds) ImageInspect(ctx context.Context, ref string, opts ...client.ImageInspectOption) (image.InspectResponse, error) {
	return h.fakeDocker.ImageInspect(ctx, strings.TrimPrefix(ref, "sha256:"), opts...)
}

func (h *hangingBuilds) ContainerCreate(ctx context.Context, cfg *container.Config, host *container.HostConfig, nc *network.NetworkingConfig, p *ocispec.Platform, name string) (container.CreateResponse, error) {
	if id := cfg.Labels[labelTemplateBuild]; id != "" {
		h.steps <- id
		<-ctx.Done()
		return container.CreateResponse{}, ctx.Err()
	}
	return h.fakeDocker.ContainerCreate(ctx, cfg, host, nc, p, name)
}

var errNotFaked = errors.New("not in the fake engine")

func (h *hangingBuilds) ContainerCommit(context.Context, string, container.CommitOptions) (container.CommitResponse, error) {
	return container.CommitResponse{}, errNotFaked
}
func (h *hangingBuilds) CopyToContainer(context.Context, string, string, io.Reader, container.CopyToContainerOptions) error {
	return errNotFaked
}
func (h *hangingBuilds) CopyFromContainer(context.Context, string, string) (io.ReadCloser, container.PathStat, error) {
	return nil, container.PathStat{}, errNotFaked
}
func (h *hangingBuilds) ContainerLogs(context.Context, string, container.LogsOptions) (io.ReadCloser, error) {
	return nil, errNotFaked
}
func (h *hangingBuilds) ContainerWait(context.Context, string, container.WaitCondition) (<-chan container.WaitResponse, <-chan error) {
	errC := make(chan error, 1)
	errC <- errNotFaked
	return nil, errC
}
func (h *hangingBuilds) ContainerInspectWithRaw(context.Context, string, bool) (container.InspectResponse, []byte, error) {
	return container.InspectResponse{}, nil, errNotFaked
}
func (h *hangingBuilds) ImageList(context.Context, image.ListOptions) ([]image.Summary, error) {
	return nil, nil
}
func (h *hangingBuilds) ImageRemove(context.Context, string, image.RemoveOptions) ([]image.DeleteResponse, error) {
	return nil, errNotFaked
}
func (h *hangingBuilds) ImageTag(context.Context, string, string) error { return errNotFaked }

// awaitStep waits (bounded) until a build's step has started.
func (h *hangingBuilds) awaitStep(t *testing.T) {
	t.Helper()
	select {
	case <-h.steps:
	case <-time.After(10 * time.Second):
		t.Fatal("no build step started within 10 s")
	}
}

func endlessSpec(tag string) core.TemplateSpec {
	return core.TemplateSpec{Steps: []core.TemplateStep{{Run: "sleep infinity # " + tag}}}
}

// TestTemplateBuildsTenantCap: with the server's default of two builds at
// once, a tenant's endless build holds its own cap (a quarter of the
// server's, at least one), so its second is RESOURCE_EXHAUSTED naming
// the tenant's cap while another tenant's build still starts; cancelling
// the endless build (deleting its template) gives the tenant its place
// back.
func TestTemplateBuildsTenantCap(t *testing.T) {
	fd := newHangingBuilds()
	m, err := New(t.Context(), testConfig(t), fd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	v := validate(m)
	ctxA, ctxB := as(t, "tenant-a", false), as(t, "tenant-b", false)

	if _, _, err := v.BuildTemplate(ctxA, "endless", endlessSpec("a1"), false); err != nil {
		t.Fatal(err)
	}
	fd.awaitStep(t)
	_, _, err = v.BuildTemplate(ctxA, "endless-too", endlessSpec("a2"), false)
	if !errors.Is(err, core.ErrResourceExhausted) || !strings.Contains(err.Error(), "tenant tenant-a has 1 template builds running, its cap (sandboxd --template-builds-per-tenant)") {
		t.Fatalf("tenant-a's second build: %v; want RESOURCE_EXHAUSTED naming the tenant's cap", err)
	}
	if _, tv, err := v.BuildTemplate(ctxB, "mine", endlessSpec("b1"), false); err != nil || tv.State != core.TemplateBuilding {
		t.Fatalf("tenant-b's build while tenant-a's runs: %+v, %v; want it started", tv, err)
	}
	fd.awaitStep(t)

	// Cancelled, the endless build frees tenant-a's place.
	if err := v.DeleteTemplate(ctxA, "endless"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, _, err := v.BuildTemplate(ctxA, "endless-too", endlessSpec("a2"), false)
		if err == nil {
			break
		}
		if !errors.Is(err, core.ErrResourceExhausted) || time.Now().After(deadline) {
			t.Fatalf("tenant-a's build after its first was cancelled: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestHungTemplateBuildEndsAtItsDeadline: an endless build ends at
// --template-build-timeout, DEADLINE_EXCEEDED naming the flag, and its
// place is free again.
func TestHungTemplateBuildEndsAtItsDeadline(t *testing.T) {
	fd := newHangingBuilds()
	cfg := testConfig(t)
	cfg.TemplateBuildTimeout = 300 * time.Millisecond
	m, err := New(t.Context(), cfg, fd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	v := validate(m)
	ctx := as(t, "tenant-a", false)
	if _, _, err := v.BuildTemplate(ctx, "endless", endlessSpec("a1"), false); err != nil {
		t.Fatal(err)
	}
	fd.awaitStep(t)
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err = v.FollowTemplateBuild(fctx, "endless", 1, 0, func(core.TemplateBuildEvent) error { return nil })
	if !errors.Is(err, core.ErrDeadlineExceeded) || !strings.Contains(err.Error(), "--template-build-timeout") {
		t.Fatalf("an endless build: %v; want DEADLINE_EXCEEDED naming --template-build-timeout", err)
	}
	if _, _, err := v.BuildTemplate(ctx, "next", endlessSpec("a2"), false); err != nil {
		t.Errorf("a build after the endless one ended: %v", err)
	}
}
