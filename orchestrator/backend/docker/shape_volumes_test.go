package docker

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// fakeMounts is the kernel's side of mounting into running containers for
// tests with a fake engine: the mount points it made, by process.
type fakeMounts struct {
	mu     sync.Mutex
	byPID  map[int][]hostMount
	failed bool // every inject fails
}

func newFakeMounts() *fakeMounts { return &fakeMounts{byPID: map[int][]hostMount{}} }

func (f *fakeMounts) inject(pid int, ms []hostMount) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failed {
		return os.ErrPermission
	}
	f.byPID[pid] = append(f.byPID[pid], ms...)
	return nil
}

func (f *fakeMounts) missing(pid int, dsts []string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, d := range dsts {
		if !slices.ContainsFunc(f.byPID[pid], func(m hostMount) bool { return m.dst == d }) {
			out = append(out, d)
		}
	}
	return out, nil
}

func (f *fakeMounts) of(pid int) []hostMount {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.byPID[pid])
}

// TestWarmPoolShapesVolumes: a request with volumes takes a pool sandbox,
// whose running container gets them mounted (read-only as asked), whose
// log gets a mounts record naming them after they are mounted, and whose
// meta.json says they were mounted so; a container restart has them
// mounted again. A mount that fails discards the claimed sandbox, and the
// request is created cold with them in its configuration.
func TestWarmPoolShapesVolumes(t *testing.T) {
	needVolumes(t)
	fd := newFakeDocker(testImage)
	fm := newFakeMounts()
	rec := newRecordingMetrics()
	cfg := testConfig(t)
	cfg.NoDiskVolumes = false
	cfg.IODiskBytes, cfg.DefaultLimits.DiskBytes = 16<<20, 32<<20
	cfg.WarmPool, cfg.mountKernel, cfg.Metrics = 1, fm, rec
	t.Cleanup(func() { unmountAll(t, cfg.StateDir) })
	m := newTestManager(t, cfg, fd)
	awaitPool(t, m, 1)
	ctx := as(t, "acme", false)
	data, err := m.CreateVolume(ctx, "data", 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := m.CreateVolume(ctx, "ref", 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	vols := []core.VolumeMount{{Volume: data.ID, Path: "/data/main"}, {Volume: ref.ID, Path: "/mnt/ref", ReadOnly: true}}
	ready := poolIDs(m)
	res, err := m.Acquire(ctx, "alice", core.Options{Volumes: vols})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sandbox.ID != ready[0] {
		t.Fatalf("a request with volumes got %s; want the pool sandbox %s", res.Sandbox.ID, ready[0])
	}
	want := []hostMount{
		{src: volumeDataDir(cfg.StateDir, data.ID), dst: "/data/main"},
		{src: volumeDataDir(cfg.StateDir, ref.ID), dst: "/mnt/ref", ro: true},
	}
	if got := fm.of(42); !slices.Equal(got, want) {
		t.Errorf("mounted into the container: %+v; want %+v", got, want)
	}
	if len(res.Sandbox.Volumes) != 2 {
		t.Errorf("the claimed sandbox says volumes %+v", res.Sandbox.Volumes)
	}
	dir := sandboxDir(cfg.StateDir, res.Sandbox.ID)
	md, err := readMeta(dir)
	if err != nil || md.Shaping || !md.VolumesMounted || len(md.Volumes) != 2 {
		t.Errorf("meta.json: shaping %v, volumes mounted %v, volumes %+v, %v", md.Shaping, md.VolumesMounted, md.Volumes, err)
	}
	if last := lastRecord(t, dir); last.Type != ioproto.KindMounts || !slices.Equal(last.Mounts, []string{"/data/main", "/mnt/ref"}) {
		t.Errorf("the log's last record is %+v; want a mounts record of /data/main and /mnt/ref", last)
	}
	if got := m.mountedBy(data.ID); !slices.Contains(got, res.Sandbox.ID) {
		t.Errorf("the volume is not mounted by the claimed sandbox: %v", got)
	}

	// Docker restarts the container: the mounts are made again.
	if err := fd.ContainerRestart(t.Context(), res.Sandbox.ContainerID, container.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	fd.publish(fd.container(res.Sandbox.ContainerID), events.ActionStart, nil)
	deadline := time.Now().Add(5 * time.Second)
	for len(fm.of(43)) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("after a restart of the container the volumes mounted are %+v", fm.of(43))
		}
		time.Sleep(5 * time.Millisecond)
	}

	// A mount that fails: the claimed sandbox is discarded, and the
	// request is created cold, with the volumes in its configuration.
	awaitPool(t, m, 1)
	doomed := poolIDs(m)[0]
	fm.mu.Lock()
	fm.failed = true
	fm.mu.Unlock()
	res, err = m.Acquire(ctx, "bob", core.Options{Volumes: vols})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sandbox.ID == doomed {
		t.Fatal("a pool sandbox whose volumes could not be mounted was handed out")
	}
	c := fd.container(res.Sandbox.ContainerID)
	if !slices.ContainsFunc(c.host.Binds, func(b string) bool { return strings.HasSuffix(b, ":/mnt/ref:ro") }) {
		t.Errorf("the cold sandbox's binds %v lack the read-only volume", c.host.Binds)
	}
	rec.mu.Lock()
	if rec.misses[core.PoolMissShaping] != 1 {
		t.Errorf("misses: %v; want one shaping_failed", rec.misses)
	}
	rec.mu.Unlock()

	// A volume deleted by force: the claimed sandbox's driver is told to
	// wait no more for it.
	if err := m.DeleteVolume(ctx, ref.ID, true); err != nil {
		t.Fatal(err)
	}
	if last := lastRecord(t, dir); last.Type != ioproto.KindMounts || !slices.Equal(last.Mounts, []string{"/data/main"}) {
		t.Errorf("after a forced deletion the log's last record is %+v; want a mounts record of /data/main alone", last)
	}
}

// lastRecord is the last record of the command log of sandbox dir.
func lastRecord(t *testing.T, dir string) ioproto.Record {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, ioDir, ioproto.StdinFile))
	if err != nil {
		t.Fatal(err)
	}
	var last ioproto.Record
	for line := range strings.Lines(string(b)) {
		if err := json.Unmarshal([]byte(line), &last); err != nil {
			t.Fatal(err)
		}
	}
	return last
}
