package docker

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// TestIntegrationVolumes follows one volume through what its users rely
// on, on the real engine: made for a tenant and invisible to another;
// files put on it without a sandbox seen by two sandboxes mounting it at
// once (one read-only), a write by one seen by the other at once; its size
// a hard cap inside and outside; refused for deletion while mounted; kept
// through a hibernation, the deletion of its sandboxes, a restart of
// sandboxd and a fork (by reference: the fork writes to the same files);
// its host-side calls never following a symlink a sandbox planted; and
// deleted with force under a running sandbox, which keeps running.
func TestIntegrationVolumes(t *testing.T) {
	m, _, cfg := integrationManager(t)
	ctxA, ctxB := as(t, "tenant-a", false), as(t, "tenant-b", false)

	vol, err := m.CreateVolume(ctxA, "shared", 32<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !core.IsVolumeID(vol.ID) || vol.Name != "shared" || vol.Tenant != "tenant-a" || vol.SizeBytes != 32<<20 || len(vol.MountedBy) != 0 {
		t.Fatalf("new volume: %+v", vol)
	}
	if _, err := m.CreateVolume(ctxA, "shared", 0); !errors.Is(err, core.ErrAlreadyExists) {
		t.Errorf("a second volume of the same name: %v; want ALREADY_EXISTS", err)
	}
	for _, ref := range []string{"shared", vol.ID} {
		if _, err := m.GetVolume(ctxB, ref); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("tenant-b's GetVolume(%s): %v; want NOT_FOUND", ref, err)
		}
		if _, err := m.Acquire(ctxB, "mallory", core.Options{Volumes: []core.VolumeMount{{Volume: ref, Path: "/mnt/x"}}}); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("tenant-b mounting tenant-a's volume %s: %v; want NOT_FOUND", ref, err)
		}
	}
	if l, err := m.ListVolumes(ctxB, ""); err != nil || len(l) != 0 {
		t.Errorf("tenant-b lists %+v, %v", l, err)
	}

	// Files without a sandbox.
	if _, err := m.VolumeUpload(ctxA, "shared", "/in/seed.txt", strings.NewReader("seed"), false); err != nil {
		t.Fatal(err)
	}
	if _, err := m.VolumeUpload(ctxA, "shared", "in/seed.txt", strings.NewReader("again"), false); !errors.Is(err, core.ErrAlreadyExists) {
		t.Errorf("upload over an existing file without overwrite: %v; want ALREADY_EXISTS", err)
	}
	if fi, err := m.VolumeStat(ctxA, vol.ID, "in/seed.txt"); err != nil || fi.Size != 4 || fi.UID != sandboxUID {
		t.Errorf("stat of the uploaded file: %+v, %v (want 4 bytes, the sandbox user's)", fi, err)
	}

	// Two sandboxes mount it at once, one read-only.
	alice, err := m.Acquire(ctxA, "alice", core.Options{Volumes: []core.VolumeMount{{Volume: "shared", Path: "/mnt/shared"}}})
	if err != nil {
		t.Fatal(err)
	}
	bob, err := m.Acquire(ctxA, "bob", core.Options{Volumes: []core.VolumeMount{{Volume: vol.ID, Path: "/data/ro", ReadOnly: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []core.VolumeMount{{Volume: vol.ID, Path: "/mnt/shared"}}; !slices.Equal(alice.Sandbox.Volumes, want) {
		t.Errorf("alice's sandbox reports volumes %+v; want %+v", alice.Sandbox.Volumes, want)
	}
	if got := stdoutOf(t, m, alice.Sandbox.ID, "print(open('/mnt/shared/in/seed.txt').read()); open('/mnt/shared/from-alice.txt','w').write('hello bob')"); got != "seed\n" {
		t.Errorf("alice reads %q", got)
	}
	if got := stdoutOf(t, m, bob.Sandbox.ID, "print(open('/data/ro/from-alice.txt').read())"); got != "hello bob\n" {
		t.Errorf("bob reads %q right after alice's write", got)
	}
	if got := stdoutOf(t, m, bob.Sandbox.ID, "try:\n    open('/data/ro/x','w')\nexcept OSError as e:\n    print(e.errno)"); got != "30\n" {
		t.Errorf("bob writing to his read-only mount: %q; want EROFS (30)", got)
	}
	if v, err := m.GetVolume(ctxA, "shared"); err != nil || !slices.Equal(v.MountedBy, sortedIDs(alice.Sandbox.ID, bob.Sandbox.ID)) || v.UsedBytes <= 0 {
		t.Errorf("GetVolume with two sandboxes: %+v, %v", v, err)
	}

	// The size is a hard cap, inside and outside.
	if got := stdoutOf(t, m, alice.Sandbox.ID, "try:\n    open('/mnt/shared/big','wb').write(b'x' * (40 << 20))\nexcept OSError as e:\n    print(e.errno)\nimport os\nos.remove('/mnt/shared/big')"); got != "28\n" {
		t.Errorf("writing 40 MB to a 32 MiB volume inside: %q; want ENOSPC (28)", got)
	}
	_, err = m.VolumeUpload(ctxA, "shared", "big", bytes.NewReader(make([]byte, 40<<20)), true)
	if !errors.Is(err, core.ErrResourceExhausted) || !strings.Contains(err.Error(), "volume") {
		t.Errorf("uploading 40 MB to a 32 MiB volume: %v; want RESOURCE_EXHAUSTED naming the volume", err)
	}
	if _, err := m.VolumeStat(ctxA, "shared", "big"); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("the refused upload left a file: %v", err)
	}

	// A symlink a sandbox plants is never followed by the host.
	stdoutOf(t, m, alice.Sandbox.ID, "import os; os.symlink('/etc', '/mnt/shared/etc')")
	if _, _, err := m.VolumeDownload(ctxA, "shared", "etc/passwd"); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("download through a planted symlink: %v; want INVALID_ARGUMENT", err)
	}
	if fi, err := m.VolumeStat(ctxA, "shared", "etc"); err != nil || fi.Type != core.FileSymlink {
		t.Errorf("stat of the planted symlink: %+v, %v; want the link itself", fi, err)
	}

	// Owner and mode, set without a sandbox, hold inside: root's 0600 file
	// is closed to the sandbox user. A symlink has no mode to set.
	root, private := uint32(0), fs.FileMode(0o600)
	if fi, err := m.VolumeSetAttributes(ctxA, "shared", "in/seed.txt", core.FileAttributes{UID: &root, GID: &root, Mode: &private}); err != nil ||
		fi.UID != 0 || fi.Mode.Perm() != 0o600 {
		t.Errorf("set attributes: %+v, %v", fi, err)
	}
	if got := stdoutOf(t, m, alice.Sandbox.ID, "try:\n    open('/mnt/shared/in/seed.txt')\nexcept OSError as e:\n    print(e.errno)"); got != "13\n" {
		t.Errorf("the sandbox user reading root's 0600 file: %q; want EACCES (13)", got)
	}
	if _, err := m.VolumeSetAttributes(ctxA, "shared", "etc", core.FileAttributes{Mode: &private}); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("the mode of a symlink: %v; want INVALID_ARGUMENT", err)
	}
	setuid := fs.FileMode(0o755) | fs.ModeSetuid
	if _, err := m.VolumeSetAttributes(ctxA, "shared", "in/seed.txt", core.FileAttributes{Mode: &setuid}); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("a setuid mode: %v; want INVALID_ARGUMENT", err)
	}

	if err := m.DeleteVolume(ctxA, "shared", false); !errors.Is(err, core.ErrFailedPrecondition) ||
		!strings.Contains(err.Error(), alice.Sandbox.ID) || !strings.Contains(err.Error(), bob.Sandbox.ID) {
		t.Errorf("deleting a mounted volume: %v; want FAILED_PRECONDITION naming both sandboxes", err)
	}

	// Through a hibernation (by reference: the volume stays where it is).
	if _, err := m.Hibernate(ctxA, alice.Sandbox.ID); err != nil {
		t.Fatal(err)
	}
	if v, err := m.GetVolume(ctxA, "shared"); err != nil || !slices.Contains(v.MountedBy, alice.Sandbox.ID) {
		t.Errorf("a hibernated sandbox no longer counts as mounting: %+v, %v", v, err)
	}
	if _, _, err := m.Wake(ctxA, alice.Sandbox.ID); err != nil {
		t.Fatal(err)
	}
	if got := stdoutOf(t, m, alice.Sandbox.ID, "print(open('/mnt/shared/from-alice.txt').read())"); got != "hello bob\n" {
		t.Errorf("after a wake alice reads %q", got)
	}

	// Both sandboxes go; the data stays, and a new sandbox finds it.
	for _, id := range []string{alice.Sandbox.ID, bob.Sandbox.ID} {
		if err := m.Delete(ctxA, id); err != nil {
			t.Fatal(err)
		}
	}
	rc, _, err := m.VolumeDownload(ctxA, "shared", "from-alice.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "hello bob" {
		t.Errorf("after both sandboxes were deleted the volume holds %q", b)
	}

	// Across a restart of sandboxd.
	carol, err := m.Acquire(ctxA, "carol", core.Options{Volumes: []core.VolumeMount{{Volume: "shared", Path: "/mnt/v"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m2, err := newValidated(t.Context(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if l, err := m2.ListVolumes(ctxA, ""); err != nil || len(l) != 1 || l[0].ID != vol.ID || !slices.Equal(l[0].MountedBy, []string{carol.Sandbox.ID}) {
		t.Fatalf("after a restart: %+v, %v", l, err)
	}
	if got := stdoutOf(t, m2, carol.Sandbox.ID, "print(open('/mnt/v/from-alice.txt').read())"); got != "hello bob\n" {
		t.Errorf("after a restart carol reads %q", got)
	}

	// A fork mounts the same volume, not a copy.
	rs, err := m2.Fork(ctxA, carol.Sandbox.ID, core.ForkRequest{Count: 1})
	if err != nil || len(rs) != 1 || rs[0].Err != nil {
		t.Fatalf("fork: %+v, %v", rs, err)
	}
	fork := rs[0].Sandbox.ID
	stdoutOf(t, m2, fork, "open('/mnt/v/from-fork.txt','w').write('fork was here')")
	if got := stdoutOf(t, m2, carol.Sandbox.ID, "print(open('/mnt/v/from-fork.txt').read())"); got != "fork was here\n" {
		t.Errorf("carol reads the fork's write as %q", got)
	}

	// Deleted with force under running sandboxes: gone for callers at once,
	// its files and mount gone from the host; the sandboxes keep running.
	if err := m2.DeleteVolume(ctxA, vol.ID, true); err != nil {
		t.Fatal(err)
	}
	if _, err := m2.GetVolume(ctxA, vol.ID); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("GetVolume after a forced delete: %v; want NOT_FOUND", err)
	}
	if sb, err := m2.Get(ctxA, carol.Sandbox.ID); err != nil || sb.State != core.StateRunning || len(sb.Volumes) != 0 {
		t.Errorf("carol after her volume was deleted: %+v, %v; want running without volumes", sb, err)
	}
	if _, err := os.Stat(filepath.Join(cfg.StateDir, volumesDir, vol.ID)); !os.IsNotExist(err) {
		t.Errorf("the deleted volume's directory: %v", err)
	}
	stdoutOf(t, m2, carol.Sandbox.ID, "print(1)")
	if _, err := m2.Acquire(ctxA, "dave", core.Options{Volumes: []core.VolumeMount{{Volume: "shared", Path: "/mnt/v"}}}); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("mounting a deleted volume: %v; want NOT_FOUND", err)
	}
}

// TestIntegrationVolumeCrashDebris: a volume whose creation a crash cut
// short (no meta.json) is removed at start-up, and an existing volume that
// is no longer mounted (a reboot) is mounted again.
func TestIntegrationVolumeCrashDebris(t *testing.T) {
	m, _, cfg := integrationManager(t)
	ctx := as(t, "tenant-a", false)
	vol, err := m.CreateVolume(ctx, "kept", 0)
	if err != nil {
		t.Fatal(err)
	}
	if vol.SizeBytes != core.DefaultVolumeBytes {
		t.Errorf("default size %d; want %d", vol.SizeBytes, core.DefaultVolumeBytes)
	}
	if _, err := m.VolumeUpload(ctx, "kept", "f", strings.NewReader("x"), true); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	debris := filepath.Join(cfg.StateDir, volumesDir, core.NewVolumeID())
	if err := os.MkdirAll(filepath.Join(debris, volDataDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unmountStack(volumeDataDir(cfg.StateDir, vol.ID)); err != nil { // as after a reboot
		t.Fatal(err)
	}
	m2, err := newValidated(t.Context(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if _, err := os.Stat(debris); !os.IsNotExist(err) {
		t.Errorf("an unfinished volume's directory survived the start: %v", err)
	}
	if fi, err := m2.VolumeStat(ctx, "kept", "f"); err != nil || fi.Size != 1 {
		t.Errorf("the volume after a reboot: %+v, %v; want its file", fi, err)
	}
}

func sortedIDs(ids ...string) []string {
	slices.Sort(ids)
	return ids
}
