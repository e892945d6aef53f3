package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sandboxd/sandboxd/ioproto"
)

// fakeDocker is an in-memory DockerAPI: containers are records whose state
// tests change, and state changes are published as events like the engine's.
type fakeDocker struct {
	mu          sync.Mutex
	images      map[string]bool
	containers  map[string]*fakeContainer
	nextID      int
	creates     int
	restarts    int
	updates     int   // ContainerUpdate calls that changed a container
	updateErr   error // when set, ContainerUpdate fails with it
	unreachable bool
	subs        map[chan events.Message]struct{}
	// unsubscribed gets a value each time a subscription ends, which
	// happens asynchronously after its context is cancelled, as with the
	// engine's client.
	unsubscribed chan struct{}
	history      []events.Message // replayed to subscribers asking for events since a time
	// removed receives the ID of every removed container (buffered).
	removed chan string
	// startDelay, when set, is how long ContainerStart takes (a slow
	// engine on a loaded machine).
	startDelay time.Duration
	// imageFiles are the files of images (image → path → file) that the
	// archive API finds; statBlock, when set, holds CopyFromContainer
	// until it is closed or the caller gives up (an engine that hangs).
	imageFiles map[string]map[string]fakeFile
	statBlock  chan struct{}
}

// fakeFile is a file of a fake image: mode's type says which kind; link
// is a symbolic link's target, resolved as the engine resolves it.
type fakeFile struct {
	mode os.FileMode
	data string
	link string
}

type fakeContainer struct {
	id   string
	name string
	cfg  container.Config
	host container.HostConfig
	st   container.State
}

var errFakeUnreachable = fmt.Errorf("cannot connect to the Docker daemon: %w", cerrdefs.ErrUnavailable)

func newFakeDocker(images ...string) *fakeDocker {
	f := &fakeDocker{
		images:       make(map[string]bool),
		containers:   make(map[string]*fakeContainer),
		subs:         make(map[chan events.Message]struct{}),
		unsubscribed: make(chan struct{}, 1024),
		removed:      make(chan string, 100),
	}
	for _, im := range images {
		f.images[im] = true
	}
	return f
}

func (f *fakeDocker) setUnreachable(v bool) {
	f.mu.Lock()
	f.unreachable = v
	f.mu.Unlock()
}

func notFound(kind, id string) error {
	return fmt.Errorf("Error response from daemon: No such %s: %s: %w", kind, id, cerrdefs.ErrNotFound)
}

func (f *fakeDocker) ImageInspect(ctx context.Context, ref string, _ ...client.ImageInspectOption) (image.InspectResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unreachable {
		return image.InspectResponse{}, errFakeUnreachable
	}
	if !f.images[ref] {
		return image.InspectResponse{}, notFound("image", ref)
	}
	return image.InspectResponse{ID: "sha256:" + ref}, nil
}

func (f *fakeDocker) ContainerCreate(ctx context.Context, cfg *container.Config, host *container.HostConfig, _ *network.NetworkingConfig, _ *ocispec.Platform, name string) (container.CreateResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unreachable {
		return container.CreateResponse{}, errFakeUnreachable
	}
	if !f.images[cfg.Image] {
		return container.CreateResponse{}, notFound("image", cfg.Image)
	}
	for _, c := range f.containers {
		if c.name == name {
			return container.CreateResponse{}, fmt.Errorf("name %s in use: %w", name, cerrdefs.ErrConflict)
		}
	}
	f.nextID++
	f.creates++
	id := fmt.Sprintf("%064x", f.nextID)
	f.containers[id] = &fakeContainer{id: id, name: name, cfg: *cfg, host: *host, st: container.State{Status: container.StateCreated}}
	return container.CreateResponse{ID: id}, nil
}

func (f *fakeDocker) ContainerStart(ctx context.Context, id string, _ container.StartOptions) error {
	f.mu.Lock()
	delay := f.startDelay
	f.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unreachable {
		return errFakeUnreachable
	}
	c := f.containers[id]
	if c == nil {
		return notFound("container", id)
	}
	c.st = container.State{Status: container.StateRunning, Running: true, Pid: 42}
	return answerWarmup(c.host)
}

// answerWarmup stands in for the driver's answer to the warm pool's warm-up
// command (there is no driver behind a fake container): its done event is
// in place before the pool asks.
func answerWarmup(host container.HostConfig) error {
	for _, b := range host.Binds {
		src, dst, _ := strings.Cut(b, ":")
		if !strings.HasPrefix(dst, "/io:") {
			continue
		}
		line, err := ioproto.EncodeEvent(&ioproto.Event{Seq: 1, Type: ioproto.EventDone, Status: ioproto.StatusOK})
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(src, ioproto.OutDir, ioproto.EventsFileName(warmupCommandID)), line, 0o644)
	}
	return nil
}

func (f *fakeDocker) ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unreachable {
		return container.InspectResponse{}, errFakeUnreachable
	}
	c := f.containers[id]
	if c == nil {
		return container.InspectResponse{}, notFound("container", id)
	}
	st := c.st
	cfg, host := c.cfg, c.host
	return container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{ID: id, Name: "/" + c.name, State: &st, HostConfig: &host},
		Config:            &cfg,
	}, nil
}

func (f *fakeDocker) ContainerList(ctx context.Context, opts container.ListOptions) ([]container.Summary, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unreachable {
		return nil, errFakeUnreachable
	}
	want := opts.Filters.Get("label")
	var out []container.Summary
	for _, c := range f.containers {
		if !opts.All && !c.st.Running {
			continue
		}
		if !matchLabels(c.cfg.Labels, want) {
			continue
		}
		out = append(out, container.Summary{ID: c.id, Names: []string{"/" + c.name}, Labels: c.cfg.Labels, State: c.st.Status})
	}
	return out, nil
}

// matchLabels applies Docker's label filter semantics: every "k=v" (or "k")
// must match.
func matchLabels(lbls map[string]string, want []string) bool {
	for _, w := range want {
		k, v, hasV := strings.Cut(w, "=")
		got, ok := lbls[k]
		if !ok || (hasV && got != v) {
			return false
		}
	}
	return true
}

func (f *fakeDocker) ContainerRemove(ctx context.Context, id string, opts container.RemoveOptions) error {
	f.mu.Lock()
	if f.unreachable {
		f.mu.Unlock()
		return errFakeUnreachable
	}
	c := f.containers[id]
	if c == nil {
		f.mu.Unlock()
		return notFound("container", id)
	}
	if c.st.Running && !opts.Force {
		f.mu.Unlock()
		return fmt.Errorf("container is running: %w", cerrdefs.ErrConflict)
	}
	delete(f.containers, id)
	f.mu.Unlock()
	if c.st.Running {
		f.publish(c, events.ActionDie, map[string]string{"exitCode": "137"})
	}
	f.publish(c, events.ActionDestroy, nil)
	f.removed <- id
	return nil
}

func (f *fakeDocker) ContainerRestart(ctx context.Context, id string, _ container.StopOptions) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unreachable {
		return errFakeUnreachable
	}
	c := f.containers[id]
	if c == nil {
		return notFound("container", id)
	}
	c.st = container.State{Status: container.StateRunning, Running: true, Pid: 43}
	f.restarts++
	return nil
}

func (f *fakeDocker) Events(ctx context.Context, opts events.ListOptions) (<-chan events.Message, <-chan error) {
	msgs := make(chan events.Message, 100)
	errs := make(chan error, 1)
	f.mu.Lock()
	if f.unreachable {
		f.mu.Unlock()
		errs <- errFakeUnreachable
		return msgs, errs
	}
	// Replay like the engine: events since opts.Since, then live ones.
	if since, err := time.Parse(time.RFC3339Nano, opts.Since); err == nil {
		for _, msg := range f.history {
			if msg.TimeNano >= since.UnixNano() {
				msgs <- msg
			}
		}
	}
	f.subs[msgs] = struct{}{}
	f.mu.Unlock()
	go func() {
		<-ctx.Done()
		f.mu.Lock()
		delete(f.subs, msgs)
		f.mu.Unlock()
		select {
		case f.unsubscribed <- struct{}{}:
		default:
		}
		errs <- ctx.Err()
	}()
	return msgs, errs
}

// publish sends a container event to every subscriber, with the container's
// labels among the attributes as the engine does.
func (f *fakeDocker) publish(c *fakeContainer, action events.Action, attrs map[string]string) {
	a := map[string]string{"name": c.name}
	for k, v := range c.cfg.Labels {
		a[k] = v
	}
	for k, v := range attrs {
		a[k] = v
	}
	msg := events.Message{Type: events.ContainerEventType, Action: action, Actor: events.Actor{ID: c.id, Attributes: a}, TimeNano: time.Now().UnixNano()}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.history = append(f.history, msg)
	for ch := range f.subs {
		select {
		case ch <- msg:
		default: // a stuck subscriber loses events, like a slow reader of the engine's stream
		}
	}
}

// exit stops a container as if its process ended (the restart policy not
// applying), and publishes die.
func (f *fakeDocker) exit(id string, code int, oom bool) {
	f.mu.Lock()
	c := f.containers[id]
	c.st = container.State{Status: container.StateExited, ExitCode: code, OOMKilled: oom}
	f.mu.Unlock()
	f.publish(c, events.ActionDie, map[string]string{"exitCode": fmt.Sprint(code)})
}

// vanish removes a container without any event, as if the event was lost.
func (f *fakeDocker) vanish(id string) {
	f.mu.Lock()
	delete(f.containers, id)
	f.mu.Unlock()
}

func (f *fakeDocker) container(id string) *fakeContainer {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.containers[id]
}

func (f *fakeDocker) createCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.creates
}

// addContainer inserts a running container with the given labels (an orphan,
// for reconcile tests) and returns its ID.
func (f *fakeDocker) addContainer(name string, lbls map[string]string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	id := fmt.Sprintf("%064x", f.nextID)
	f.containers[id] = &fakeContainer{id: id, name: name, cfg: container.Config{Labels: lbls}, st: container.State{Status: container.StateRunning, Running: true}}
	return id
}

// setImageFile gives image the file at path.
func (f *fakeDocker) setImageFile(image, path string, ff fakeFile) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.imageFiles == nil {
		f.imageFiles = map[string]map[string]fakeFile{}
	}
	if f.imageFiles[image] == nil {
		f.imageFiles[image] = map[string]fakeFile{}
	}
	f.imageFiles[image][path] = ff
}

// imageFile is the file at path of container id's image.
func (f *fakeDocker) imageFile(id, path string) (fakeFile, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unreachable {
		return fakeFile{}, errFakeUnreachable
	}
	c := f.containers[id]
	if c == nil {
		return fakeFile{}, notFound("container", id)
	}
	ff, ok := f.imageFiles[c.cfg.Image][path]
	if !ok {
		return fakeFile{}, notFound("file", path)
	}
	return ff, nil
}

// statPath is the engine's lstat of path in container id's image.
func (f *fakeDocker) statPath(ctx context.Context, id, path string) (container.PathStat, error) {
	f.mu.Lock()
	block := f.statBlock
	f.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return container.PathStat{}, ctx.Err()
		}
	}
	ff, err := f.imageFile(id, path)
	if err != nil {
		return container.PathStat{}, err
	}
	return container.PathStat{Name: filepath.Base(path), Size: int64(len(ff.data)), Mode: ff.mode, LinkTarget: ff.link}, nil
}

func (f *fakeDocker) CopyFromContainer(ctx context.Context, id, path string) (io.ReadCloser, container.PathStat, error) {
	st, err := f.statPath(ctx, id, path)
	if err != nil {
		return nil, st, err
	}
	ff, _ := f.imageFile(id, path)
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if st.Mode&os.ModeSocket != 0 {
		tw.Close() // the engine skips sockets
		return io.NopCloser(&b), st, nil
	}
	h, err := tar.FileInfoHeader(fakeFileInfo{st}, ff.link)
	if err != nil {
		return nil, st, err
	}
	if err := tw.WriteHeader(h); err != nil {
		return nil, st, err
	}
	if h.Typeflag == tar.TypeReg {
		io.WriteString(tw, ff.data)
	}
	tw.Close()
	return io.NopCloser(&b), st, nil
}

// fakeFileInfo is a PathStat as an fs.FileInfo.
type fakeFileInfo struct{ st container.PathStat }

func (i fakeFileInfo) Name() string       { return i.st.Name }
func (i fakeFileInfo) Size() int64        { return i.st.Size }
func (i fakeFileInfo) Mode() os.FileMode  { return i.st.Mode }
func (i fakeFileInfo) ModTime() time.Time { return i.st.Mtime }
func (i fakeFileInfo) IsDir() bool        { return i.st.Mode.IsDir() }
func (i fakeFileInfo) Sys() any           { return nil }

var _ DockerAPI = (*fakeDocker)(nil)
var _ DockerAPI = (*client.Client)(nil)

// containerNamed returns the container of that name, or nil.
func (f *fakeDocker) containerNamed(name string) *fakeContainer {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.containers {
		if c.name == name {
			return c
		}
	}
	return nil
}

func (f *fakeDocker) ContainerUpdate(ctx context.Context, id string, uc container.UpdateConfig) (container.UpdateResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unreachable {
		return container.UpdateResponse{}, errFakeUnreachable
	}
	if f.updateErr != nil {
		return container.UpdateResponse{}, f.updateErr
	}
	c := f.containers[id]
	if c == nil {
		return container.UpdateResponse{}, notFound("container", id)
	}
	r := &c.host.Resources
	r.Memory, r.MemorySwap, r.NanoCPUs, r.PidsLimit = uc.Memory, uc.MemorySwap, uc.NanoCPUs, uc.PidsLimit
	f.updates++
	return container.UpdateResponse{}, nil
}
