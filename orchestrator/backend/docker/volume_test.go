package docker

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/moby/sys/mountinfo"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// needVolumes skips (or fails, under CI=true) where volumes cannot be made.
func needVolumes(t testing.TB) {
	t.Helper()
	if err := checkVolumeSupport(); err != nil {
		testenv.Unavailable(t, "%v", err)
	}
}

func TestVolumeLifecycle(t *testing.T) {
	needVolumes(t)
	dir := filepath.Join(t.TempDir(), core.NewSandboxID())
	t.Cleanup(func() { unmountVolumes(dir) })
	if err := prepareDirs(t.Context(), dir, volumeSizes{io: 32 << 20, workspace: 48 << 20}); err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, workspaceDir)
	for _, name := range []string{ioDir, workspaceDir} {
		if ok, err := mountinfo.Mounted(filepath.Join(dir, name)); !ok || err != nil {
			t.Fatalf("%s mounted = %v, %v", name, ok, err)
		}
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(ws, &fs); err != nil {
		t.Fatal(err)
	}
	// ext4's own metadata and journal take a few percent.
	if total := int64(fs.Blocks) * fs.Bsize; total > 48<<20 || total < 48<<20*8/10 {
		t.Errorf("workspace file system holds %d bytes; want a little under 48 MiB", total)
	}
	// The sandbox user owns the roots; lost+found is not left in its way.
	for _, p := range []string{ws, filepath.Join(dir, ioDir)} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if s := st.Sys().(*syscall.Stat_t); s.Uid != sandboxUID || s.Gid != sandboxGID {
			t.Errorf("%s owned by %d:%d", p, s.Uid, s.Gid)
		}
	}
	if entries, _ := os.ReadDir(ws); len(entries) != 0 {
		t.Errorf("new workspace holds %v", entries)
	}
	if err := os.WriteFile(filepath.Join(ws, "f"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}

	// Unmounted (a host reboot), the bare mount point admits no sandbox
	// user, and ensureMounted brings the volume back with its files.
	if err := unmountVolumes(dir); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(ws); err != nil || st.Mode().Perm() != 0 {
		t.Errorf("bare mount point: %v, %v; want mode 0", st.Mode(), err)
	}
	remounted, err := ensureMounted(t.Context(), dir)
	if err != nil || !remounted {
		t.Fatalf("ensureMounted = %v, %v; want a remount", remounted, err)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "f")); string(b) != "kept" {
		t.Errorf("file after remount: %q, %v", b, err)
	}
	if remounted, err := ensureMounted(t.Context(), dir); err != nil || remounted {
		t.Errorf("ensureMounted on mounted volumes = %v, %v; want nothing to do", remounted, err)
	}

	if err := removeSandboxDir(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sandbox directory after removal: %v", err)
	}
}

func TestDiskLimitValidation(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	m := newTestManager(t, cfg, fd)
	// Without volumes a disk limit cannot be enforced: the limits in force
	// say 0 rather than promising one.
	res, err := core.Validating(m, m.Policy()).Acquire(t.Context(), "u", core.Options{Limits: core.Limits{DiskBytes: 1 << 30}})
	if err != nil || res.Sandbox.Limits.DiskBytes != 0 {
		t.Errorf("disk limit without volumes = %+v, %v; want 0", res.Sandbox.Limits, err)
	}
}

// BenchmarkVolumeCreate measures what disk limits add to a sandbox's
// creation: two sparse images formatted and mounted, then removed.
func BenchmarkVolumeCreate(b *testing.B) {
	needVolumes(b)
	root := b.TempDir()
	for b.Loop() {
		dir := filepath.Join(root, core.NewSandboxID())
		if err := prepareDirs(b.Context(), dir, volumeSizes{io: core.DefaultIODiskBytes, workspace: core.DefaultDiskBytes}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := removeSandboxDir(dir); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
