package iosidecar

import (
	"bytes"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/wspath"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

const (
	volA = "vol-aaaaaaaaaaaaaaaaaaaa"
	volB = "vol-bbbbbbbbbbbbbbbbbbbb"
)

// The volume API's files calls through a real sidecar, on a volume mounted
// in its volumes directory: the Docker backend's semantics (wspath's
// Volume tree, the same code), paths from the volume's root, and nothing
// outside the volume reachable.
func TestVolumeFiles(t *testing.T) {
	sc := startSidecarWith(t, nil, volA)
	ctx := ctxT(t)
	v := sc.c.Volume(volA)
	root := filepath.Join(sc.volumes, volA)

	fi, err := v.Upload(ctx, "/dir/a.txt", strings.NewReader("one"), 0, false)
	mustDo(t, err)
	if fi.Path != "dir/a.txt" || fi.Size != 3 || display(wspath.Volume, fi) != "/dir/a.txt" {
		t.Errorf("Upload = %+v; want dir/a.txt of 3 bytes, shown as /dir/a.txt", fi)
	}
	if b, err := os.ReadFile(filepath.Join(root, "dir/a.txt")); err != nil || string(b) != "one" {
		t.Fatalf("the volume holds %q, %v; want \"one\"", b, err)
	}
	if os.Geteuid() == 0 && (fi.UID != wspath.UID || fi.GID != wspath.GID) {
		t.Errorf("uploaded file owned by %d:%d; want the sandbox user", fi.UID, fi.GID)
	}
	_, err = v.Upload(ctx, "dir/a.txt", strings.NewReader("two"), 0, false)
	wantClass(t, "Upload over a file without overwrite", err, core.ErrAlreadyExists, "/dir/a.txt")
	_, err = v.Upload(ctx, "dir/a.txt", strings.NewReader("two!"), 0, true)
	mustDo(t, err)
	_, err = v.Upload(ctx, "big", bytes.NewReader(make([]byte, 100)), 10, true)
	wantClass(t, "Upload past max_bytes", err, core.ErrResourceExhausted, "limit of 10 bytes")
	_, err = v.Upload(ctx, "/", strings.NewReader("x"), 0, true)
	wantClass(t, "Upload to the volume's root", err, core.ErrInvalidArgument, "name a file under the volume")

	rc, fi, err := v.Download(ctx, "/dir/a.txt")
	mustDo(t, err)
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(b) != "two!" || fi.Size != 4 {
		t.Errorf("Download = %q (%+v), %v; want \"two!\"", b, fi, err)
	}

	// "/workspace/x" on a volume is the volume's own workspace/x: the
	// volume's paths are from its root, never the sandbox's /workspace.
	mustDo(t, os.WriteFile(filepath.Join(sc.workspace, "ws.txt"), []byte("ws"), 0o644))
	_, err = v.Stat(ctx, "/workspace/ws.txt")
	wantClass(t, "Stat of a workspace path on a volume", err, core.ErrNotFound, "/workspace/ws.txt")

	fi, err = v.MakeDirectory(ctx, "/x/y", true)
	mustDo(t, err)
	if fi.Path != "x/y" || !fi.IsDir {
		t.Errorf("MakeDirectory(/x/y) = %+v", fi)
	}
	_, err = v.MakeDirectory(ctx, "/q/r", false)
	wantClass(t, "MakeDirectory without its parent", err, core.ErrNotFound, "/q")
	list, err := v.List(ctx, "/", 2)
	mustDo(t, err)
	var paths []string
	for _, fi := range list {
		paths = append(paths, fi.Path)
	}
	if got := strings.Join(paths, " "); got != "dir dir/a.txt x x/y" {
		t.Errorf("List(/, 2) = %s; want dir dir/a.txt x x/y", got)
	}
	fi, err = v.Stat(ctx, "/dir")
	mustDo(t, err)
	if fi.Path != "dir" || !fi.IsDir {
		t.Errorf("Stat(/dir) = %+v", fi)
	}
	if fi, err := v.Stat(ctx, ""); err != nil || fi.Path != "" || !fi.IsDir {
		t.Errorf("Stat of the root = %+v, %v; want the root directory", fi, err)
	}

	mode := fs.FileMode(0o600)
	fi, err = v.SetAttributes(ctx, "/dir/a.txt", core.FileAttributes{Mode: &mode})
	mustDo(t, err)
	if fi.Mode.Perm() != 0o600 {
		t.Errorf("SetAttributes(mode 0600) = %v", fi.Mode)
	}
	if os.Geteuid() == 0 {
		uid := uint32(4321)
		fi, err = v.SetAttributes(ctx, "/dir/a.txt", core.FileAttributes{UID: &uid})
		mustDo(t, err)
		if fi.UID != 4321 || fi.GID != wspath.GID {
			t.Errorf("SetAttributes(uid 4321) = %d:%d; want 4321:%d", fi.UID, fi.GID, wspath.GID)
		}
	}
	setuid := fs.FileMode(0o755) | fs.ModeSetuid
	_, err = v.SetAttributes(ctx, "/dir/a.txt", core.FileAttributes{Mode: &setuid})
	wantClass(t, "SetAttributes(setuid)", err, core.ErrInvalidArgument, "no setuid")
	_, err = v.SetAttributes(ctx, "/dir/a.txt", core.FileAttributes{})
	wantClass(t, "SetAttributes(nothing)", err, core.ErrInvalidArgument, "give a uid, a gid or a mode")
	_, err = sc.c.Volume("").SetAttributes(ctx, "ws.txt", core.FileAttributes{Mode: &mode})
	wantClass(t, "SetAttributes in the workspace", err, core.ErrInvalidArgument, "a volume is required")

	// A link planted on the volume (by a sandbox) leads nowhere outside it.
	mustDo(t, os.Symlink("../../workspace", filepath.Join(root, "out")))
	mustDo(t, os.Symlink("/etc/passwd", filepath.Join(root, "passwd")))
	_, _, err = v.Download(ctx, "/passwd")
	wantClass(t, "Download through an absolute link", err, core.ErrInvalidArgument, "escapes the volume")
	_, err = v.List(ctx, "/out", 1)
	wantClass(t, "List through a link out", err, core.ErrInvalidArgument, "escapes the volume")
	_, err = v.Upload(ctx, "/out/ws.txt", strings.NewReader("x"), 0, true)
	wantClass(t, "Upload through a link out", err, core.ErrInvalidArgument, "escapes the volume")
	if b, _ := os.ReadFile(filepath.Join(sc.workspace, "ws.txt")); string(b) != "ws" {
		t.Errorf("the workspace's file became %q through a link on the volume", b)
	}
	fi, err = v.Stat(ctx, "/passwd")
	mustDo(t, err)
	if fi.Type != core.FileSymlink {
		t.Errorf("Stat of a link = %+v; want the link itself", fi)
	}
	_, err = v.SetAttributes(ctx, "/passwd", core.FileAttributes{Mode: &mode})
	wantClass(t, "SetAttributes(mode) of a link", err, core.ErrInvalidArgument, "symbolic link")
	_, err = v.Stat(ctx, "/../x")
	wantClass(t, "Stat(/../x)", err, core.ErrInvalidArgument, "escapes the volume")

	mustDo(t, v.Remove(ctx, "/x", true))
	if _, err := os.Stat(filepath.Join(root, "x")); !os.IsNotExist(err) {
		t.Errorf("/x still on the volume after Remove: %v", err)
	}
	err = v.Remove(ctx, "/", true)
	wantClass(t, "Remove of the volume's root", err, core.ErrInvalidArgument, "the volume itself cannot be removed")

	used, total, err := v.Usage(ctx)
	mustDo(t, err)
	if total <= 0 || used < 0 || used > total {
		t.Errorf("Usage = %d of %d bytes", used, total)
	}

	// The workspace is still the workspace.
	if fi, err := sc.c.Upload(ctx, "w2.txt", strings.NewReader("w"), 0); err != nil || display(wspath.Workspace, fi) != "/workspace/w2.txt" {
		t.Errorf("workspace Upload = %+v, %v", fi, err)
	}
	if _, err := os.Stat(filepath.Join(root, "w2.txt")); !os.IsNotExist(err) {
		t.Errorf("a workspace upload landed on the volume: %v", err)
	}
}

// A volume the Pod does not mount, a sidecar with no volumes, and a
// volume field that is not a volume ID are refused, each saying so.
func TestVolumeNotMounted(t *testing.T) {
	ctx := ctxT(t)
	sc := startSidecarWith(t, nil, volA)
	_, err := sc.c.Volume(volB).Stat(ctx, "/")
	wantClass(t, "Stat on a volume not mounted", err, core.ErrFailedPrecondition, volB+" is not mounted in this Pod")
	_, _, err = sc.c.Volume(volB).Usage(ctx)
	wantClass(t, "Usage of a volume not mounted", err, core.ErrFailedPrecondition, "not mounted")
	_, err = sc.c.Volume("../workspace").List(ctx, "/", 1)
	wantClass(t, "List on a volume named by a path", err, core.ErrInvalidArgument, "not a volume ID")

	plain := startSidecar(t)
	_, err = plain.c.Volume(volA).Upload(ctx, "/a", strings.NewReader("a"), 0, true)
	wantClass(t, "Upload to a sidecar without volumes", err, core.ErrFailedPrecondition, "serves no volumes")
}

// The sidecar gives a fresh volume (root's, as a provisioner makes it) to
// the sandbox user and removes its empty lost+found; a volume already the
// sandbox user's, and a lost+found holding files, are left as they are.
func TestVolumePrepared(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	sc := startSidecarWith(t, func(dir string) {
		for _, d := range []string{volA + "/lost+found", volB + "/lost+found/kept"} {
			mustDo(t, os.MkdirAll(filepath.Join(dir, d), 0o700))
		}
		mustDo(t, os.Chown(filepath.Join(dir, volB), 1234, 1234))
		mustDo(t, os.MkdirAll(filepath.Join(dir, "not-a-volume"), 0o700))
	})
	st, err := os.Stat(filepath.Join(sc.volumes, volA))
	mustDo(t, err)
	if ownerOf(t, st) != wspath.UID {
		t.Errorf("a fresh volume's root is owned by uid %d; want the sandbox user", ownerOf(t, st))
	}
	if _, err := os.Stat(filepath.Join(sc.volumes, volA, "lost+found")); !os.IsNotExist(err) {
		t.Errorf("an empty lost+found is still there: %v", err)
	}
	st, err = os.Stat(filepath.Join(sc.volumes, volB))
	mustDo(t, err)
	if ownerOf(t, st) != 1234 {
		t.Errorf("a volume owned by uid 1234 became uid %d's", ownerOf(t, st))
	}
	if _, err := os.Stat(filepath.Join(sc.volumes, volB, "lost+found", "kept")); err != nil {
		t.Errorf("a volume's own files are gone: %v", err)
	}
	st, err = os.Stat(filepath.Join(sc.volumes, "not-a-volume"))
	mustDo(t, err)
	if ownerOf(t, st) != 0 {
		t.Errorf("a directory that is no volume was given to uid %d", ownerOf(t, st))
	}
}
