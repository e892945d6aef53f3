package docker

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// TestReadImageFile: a file of an image is read only when it is a
// regular file of a bounded size, a link to one included; anything else
// is refused, named, without being read.
func TestReadImageFile(t *testing.T) {
	const img, p = "tpl:1", "/etc/ssl/certs/ca-certificates.crt"
	for _, tc := range []struct {
		name string
		file *fakeFile
		want string // content, or the error's class and text
		err  error
	}{
		{name: "regular", file: &fakeFile{mode: 0o644, data: "roots\n"}, want: "roots\n"},
		{name: "missing", err: errNoImageFile},
		{name: "fifo", file: &fakeFile{mode: fs.ModeNamedPipe | 0o644}, err: core.ErrFailedPrecondition, want: "FIFO"},
		{name: "device", file: &fakeFile{mode: fs.ModeDevice | fs.ModeCharDevice | 0o644}, err: core.ErrFailedPrecondition, want: "character device"},
		{name: "socket", file: &fakeFile{mode: fs.ModeSocket | 0o755}, err: core.ErrFailedPrecondition, want: "socket"},
		{name: "directory", file: &fakeFile{mode: fs.ModeDir | 0o755}, err: core.ErrFailedPrecondition, want: "directory"},
		{name: "too large", file: &fakeFile{mode: 0o644, data: strings.Repeat("x", 65)}, err: core.ErrFailedPrecondition, want: "65 bytes"},
		{name: "link to regular", file: &fakeFile{mode: fs.ModeSymlink | 0o777, link: "/etc/pki/bundle.pem"}, want: "pki roots\n"},
		{name: "link to fifo", file: &fakeFile{mode: fs.ModeSymlink | 0o777, link: "/run/fifo"}, err: core.ErrFailedPrecondition, want: "/run/fifo as a FIFO"},
		{name: "unresolved link", file: &fakeFile{mode: fs.ModeSymlink | 0o777}, err: core.ErrFailedPrecondition, want: "could not resolve"},
		{name: "dangling link", file: &fakeFile{mode: fs.ModeSymlink | 0o777, link: "/nowhere"}, err: errNoImageFile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fd := newFakeDocker(img)
			fd.setImageFile(img, "/etc/pki/bundle.pem", fakeFile{mode: 0o644, data: "pki roots\n"})
			fd.setImageFile(img, "/run/fifo", fakeFile{mode: fs.ModeNamedPipe | 0o600})
			if tc.file != nil {
				fd.setImageFile(img, p, *tc.file)
			}
			resp, err := fd.ContainerCreate(t.Context(), &container.Config{Image: img}, &container.HostConfig{}, nil, nil, "c")
			if err != nil {
				t.Fatal(err)
			}
			got, err := readImageFile(t.Context(), fd, resp.ID, p, 64)
			switch {
			case tc.err == nil && err != nil:
				t.Fatalf("error %v, want %q", err, tc.want)
			case tc.err == nil && string(got) != tc.want:
				t.Fatalf("read %q, want %q", got, tc.want)
			case tc.err != nil && !errors.Is(err, tc.err):
				t.Fatalf("read %q, %v; want %v", got, err, tc.err)
			case tc.err != nil && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// TestReadImageFileEndsWithItsCaller: an engine that does not answer
// holds the read no longer than the caller's context.
func TestReadImageFileEndsWithItsCaller(t *testing.T) {
	fd := newFakeDocker(testImage)
	fd.statBlock = make(chan struct{})
	resp, err := fd.ContainerCreate(t.Context(), &container.Config{Image: testImage}, &container.HostConfig{}, nil, nil, "c")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := readImageFile(ctx, fd, resp.ID, imageRootsPath, maxRootsBytes)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error %v; want the caller's deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the read outlived its caller's context by 10s")
	}
}

// TestNetworkedAcquireRefusesSpecialRoots: a sandbox image whose CA
// bundle is a FIFO fails a networked acquire at once with
// FAILED_PRECONDITION saying so, and gives back what it took (holder,
// sandbox container, address, host link); an image with a bundle gets it
// in the sandbox's, followed by the sandbox's CA.
func TestNetworkedAcquireRefusesSpecialRoots(t *testing.T) {
	fd := newFakeDocker(testImage)
	fd.setImageFile(testImage, imageRootsPath, fakeFile{mode: fs.ModeNamedPipe | 0o644})
	k := newFakeKernel()
	cfg := testConfig(t)
	cfg.AllowNetwork, cfg.netKernel = true, k
	m := newTestManager(t, cfg, fd)

	done := make(chan error, 1)
	go func() {
		_, err := m.Acquire(t.Context(), "fifo", core.Options{Network: true})
		done <- err
	}()
	select {
	case err := <-done:
		wantClass(t, err, core.ErrFailedPrecondition, imageRootsPath+" as a FIFO")
	case <-time.After(30 * time.Second):
		t.Fatal("a networked acquire of an image whose CA bundle is a FIFO did not end within 30s")
	}
	if list, _ := fd.ContainerList(t.Context(), container.ListOptions{All: true}); len(list) != 0 {
		t.Errorf("the failed acquire left %d containers", len(list))
	}
	m.Manager.net.pool.mu.Lock()
	taken := len(m.Manager.net.pool.used)
	m.Manager.net.pool.mu.Unlock()
	if taken != 0 || k.linkCount() != 0 {
		t.Errorf("the failed acquire left %d addresses taken and %d links", taken, k.linkCount())
	}

	fd.setImageFile(testImage, imageRootsPath, fakeFile{mode: 0o644, data: "# the image's roots"})
	res, err := m.Acquire(t.Context(), "regular", core.Options{Network: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(sandboxDir(cfg.StateDir, res.Sandbox.ID), netDir, caMountDir, caBundleFile))
	if err != nil || !strings.HasPrefix(string(b), "# the image's roots\n-----BEGIN CERTIFICATE-----") {
		t.Errorf("the sandbox's bundle: %q, %v; want the image's roots, then its CA", b, err)
	}
}

// TestHolderRunsSandboxdsImage: a sandbox of another image (a template's)
// has its network held by sandboxd's own image, never by its own (whose
// `sleep` is the tenant's), under small limits.
func TestHolderRunsSandboxdsImage(t *testing.T) {
	const tpl = "sandboxd-template-x:1"
	fd := newFakeDocker(testImage, tpl)
	cfg := testConfig(t)
	cfg.AllowNetwork = true
	m := newTestManager(t, cfg, fd)
	spec := m.Manager.newSpec(userKey{user: "u"}, core.Options{Network: true})
	spec.image = tpl
	sb, err := m.Manager.create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Manager.discardCreated(context.Background(), sb) })
	if c := fd.container(sb.containerID); c.cfg.Image != tpl {
		t.Fatalf("the sandbox runs %q, want the template's image", c.cfg.Image)
	}
	h := fd.containerNamed(holderNamePrefix + sb.id)
	if h == nil {
		t.Fatal("no holder")
	}
	r := h.host.Resources
	if h.cfg.Image != testImage || h.host.Runtime != "runc" || r.NanoCPUs <= 0 || r.NanoCPUs > 100_000_000 ||
		r.Memory <= 0 || r.Memory > 64<<20 || r.PidsLimit == nil || *r.PidsLimit <= 0 || *r.PidsLimit > 16 {
		t.Errorf("holder: image %q, runtime %q, CPU %d, memory %d, pids %v; want sandboxd's image %q under small limits",
			h.cfg.Image, h.host.Runtime, r.NanoCPUs, r.Memory, r.PidsLimit, testImage)
	}
}
