package iosidecar

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/wspath"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// wantClass fails unless err is of class and its text contains what.
func wantClass(t *testing.T, what string, err error, class *core.Class, text string) {
	t.Helper()
	if !errors.Is(err, class) || !strings.Contains(err.Error(), text) {
		t.Errorf("%s = %v; want %v mentioning %q", what, err, class, text)
	}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The directory calls, through a real sidecar: the Docker backend's
// semantics (wspath, the same code), each error in its class.
func TestMakeDirectory(t *testing.T) {
	sc := startSidecar(t)
	ctx := ctxT(t)
	fi, err := sc.c.MakeDirectory(ctx, "/workspace/a", false)
	mustDo(t, err)
	if fi.Path != "a" || !fi.IsDir || display(wspath.Workspace, fi) != "/workspace/a" {
		t.Errorf("MakeDirectory(a) = %+v", fi)
	}
	if os.Geteuid() == 0 && (fi.UID != 1000 || fi.GID != 1000) {
		t.Errorf("directory owned by %d:%d; want 1000:1000", fi.UID, fi.GID)
	}
	_, err = sc.c.MakeDirectory(ctx, "a", false)
	wantClass(t, "MakeDirectory of an existing directory", err, core.ErrAlreadyExists, "/workspace/a: already exists")
	if fi, err := sc.c.MakeDirectory(ctx, "a", true); err != nil || fi.Path != "a" || !fi.IsDir {
		t.Errorf("MakeDirectory(a, parents) of an existing directory = %+v, %v; want it as it is", fi, err)
	}
	_, err = sc.c.MakeDirectory(ctx, "x/y/z", false)
	wantClass(t, "MakeDirectory without its parent", err, core.ErrNotFound, "parent directory /workspace/x/y does not exist")
	fi, err = sc.c.MakeDirectory(ctx, "x/y/z", true)
	mustDo(t, err)
	if fi.Path != "x/y/z" || !fi.IsDir {
		t.Errorf("MakeDirectory(x/y/z, parents) = %+v", fi)
	}
	st, err := os.Stat(filepath.Join(sc.workspace, "x"))
	mustDo(t, err)
	if os.Geteuid() == 0 && ownerOf(t, st) != 1000 {
		t.Errorf("created parent owned by uid %d; want 1000", ownerOf(t, st))
	}
	mustDo(t, os.WriteFile(filepath.Join(sc.workspace, "f"), []byte("f"), 0o644))
	_, err = sc.c.MakeDirectory(ctx, "f", true)
	wantClass(t, "MakeDirectory(parents) over a file", err, core.ErrAlreadyExists, "not a directory exists there")
	_, err = sc.c.MakeDirectory(ctx, "f", false)
	wantClass(t, "MakeDirectory over a file", err, core.ErrAlreadyExists, "already exists")
	_, err = sc.c.MakeDirectory(ctx, "f/sub", true)
	wantClass(t, "MakeDirectory under a file", err, core.ErrInvalidArgument, "not a directory")
	if fi, err := sc.c.MakeDirectory(ctx, "", true); err != nil || fi.Path != "" || !fi.IsDir {
		t.Errorf("MakeDirectory(/workspace, parents) = %+v, %v; want the workspace", fi, err)
	}
	_, err = sc.c.MakeDirectory(ctx, "/workspace", false)
	wantClass(t, "MakeDirectory(/workspace)", err, core.ErrAlreadyExists, "already exists")
}

func TestRemove(t *testing.T) {
	sc := startSidecar(t)
	ctx := ctxT(t)
	ws := sc.workspace
	mustDo(t, os.WriteFile(filepath.Join(ws, "f"), []byte("f"), 0o644))
	mustDo(t, os.MkdirAll(filepath.Join(ws, "d/sub"), 0o755))
	mustDo(t, os.WriteFile(filepath.Join(ws, "d/sub/g"), []byte("g"), 0o644))
	mustDo(t, os.Mkdir(filepath.Join(ws, "empty"), 0o755))

	mustDo(t, sc.c.Remove(ctx, "/workspace/f", false))
	if _, err := os.Lstat(filepath.Join(ws, "f")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("f after Remove: %v", err)
	}
	wantClass(t, "Remove of a missing file", sc.c.Remove(ctx, "f", false), core.ErrNotFound, "remove /workspace/f: no such file")
	wantClass(t, "Remove of a non-empty directory", sc.c.Remove(ctx, "d", false), core.ErrFailedPrecondition, "not empty (set recursive")
	mustDo(t, sc.c.Remove(ctx, "empty", false))
	mustDo(t, sc.c.Remove(ctx, "d", true))
	if ents, _ := os.ReadDir(ws); len(ents) != 0 {
		t.Errorf("workspace after the removals: %v", ents)
	}
	for _, p := range []string{"", "/workspace", "/workspace/"} {
		wantClass(t, "Remove("+p+")", sc.c.Remove(ctx, p, true), core.ErrInvalidArgument, "the workspace itself cannot be removed")
	}
	if _, err := os.Stat(ws); err != nil {
		t.Fatalf("the workspace: %v", err)
	}
}

func TestRename(t *testing.T) {
	sc := startSidecar(t)
	ctx := ctxT(t)
	ws := sc.workspace
	mustDo(t, os.WriteFile(filepath.Join(ws, "a.txt"), []byte("a"), 0o644))
	mustDo(t, os.WriteFile(filepath.Join(ws, "b.txt"), []byte("b"), 0o644))
	mustDo(t, os.MkdirAll(filepath.Join(ws, "dir/sub"), 0o755))
	mustDo(t, os.Mkdir(filepath.Join(ws, "empty"), 0o755))

	fi, err := sc.c.Rename(ctx, "a.txt", "/workspace/dir/a2.txt", false)
	mustDo(t, err)
	if fi.Path != "dir/a2.txt" || fi.Size != 1 || !fi.Mode.IsRegular() {
		t.Errorf("Rename = %+v", fi)
	}
	_, err = sc.c.Rename(ctx, "b.txt", "dir/a2.txt", false)
	wantClass(t, "Rename onto a file", err, core.ErrAlreadyExists, "the destination exists (set overwrite")
	_, err = sc.c.Rename(ctx, "b.txt", "dir/a2.txt", true)
	mustDo(t, err)
	if b, _ := os.ReadFile(filepath.Join(ws, "dir/a2.txt")); string(b) != "b" {
		t.Errorf("overwrite: %q", b)
	}
	_, err = sc.c.Rename(ctx, "nope", "x", false)
	wantClass(t, "Rename of a missing file", err, core.ErrNotFound, "/workspace/nope")
	_, err = sc.c.Rename(ctx, "dir/a2.txt", "no/such/x", false)
	wantClass(t, "Rename into a missing directory", err, core.ErrNotFound, "/workspace/no/such does not exist")
	_, err = sc.c.Rename(ctx, "dir", "dir/sub/x", false)
	wantClass(t, "Rename into itself", err, core.ErrInvalidArgument, "into itself")
	_, err = sc.c.Rename(ctx, "dir", "dir", false)
	wantClass(t, "Rename onto itself", err, core.ErrInvalidArgument, "same path")
	_, err = sc.c.Rename(ctx, "", "x", false)
	wantClass(t, "Rename of the workspace", err, core.ErrInvalidArgument, "workspace itself")
	_, err = sc.c.Rename(ctx, "dir", "/workspace", true)
	wantClass(t, "Rename onto the workspace", err, core.ErrInvalidArgument, "workspace itself")
	_, err = sc.c.Rename(ctx, "dir/a2.txt", "empty", true)
	wantClass(t, "Rename of a file onto a directory", err, core.ErrInvalidArgument, "is a directory")
	_, err = sc.c.Rename(ctx, "empty", "dir", true)
	wantClass(t, "Rename onto a non-empty directory", err, core.ErrFailedPrecondition, "non-empty directory")
	fi, err = sc.c.Rename(ctx, "dir", "empty", true)
	mustDo(t, err)
	if !fi.IsDir || fi.Path != "empty" {
		t.Errorf("Rename(dir) onto an empty directory = %+v", fi)
	}
}

// What the sandbox plants in /workspace (a symbolic link out of it, a
// FIFO) and paths with ".." never take a directory call out of
// /workspace, nor block it.
func TestDirectoryCallsHostile(t *testing.T) {
	sc := startSidecar(t)
	ctx := ctxT(t)
	ws := sc.workspace
	host := t.TempDir() // stands for /etc where the test may not write
	mustDo(t, os.WriteFile(filepath.Join(host, "secret"), []byte("host"), 0o644))
	mustDo(t, os.Mkdir(filepath.Join(host, "sub"), 0o755))
	mustDo(t, os.Symlink("/etc", filepath.Join(ws, "etc")))
	mustDo(t, os.Symlink(host, filepath.Join(ws, "hostdir")))
	mustDo(t, os.WriteFile(filepath.Join(ws, "f"), []byte("f"), 0o644))

	for _, p := range []string{"etc/x", "etc/x/y", "hostdir/new", "hostdir/sub/new", "../x", "a/../../x", "/etc/x"} {
		for _, parents := range []bool{false, true} {
			_, err := sc.c.MakeDirectory(ctx, p, parents)
			wantClass(t, "MakeDirectory("+p+")", err, core.ErrInvalidArgument, "")
		}
	}
	if _, err := os.Stat("/etc/x"); err == nil {
		t.Error("MakeDirectory escaped to /etc/x")
	}
	for _, p := range []string{"etc/passwd", "hostdir/secret", "hostdir/sub", "..", "../x", "a/../../x", "/etc/passwd"} {
		for _, recursive := range []bool{false, true} {
			wantClass(t, "Remove("+p+")", sc.c.Remove(ctx, p, recursive), core.ErrInvalidArgument, "")
		}
	}
	for _, mv := range [][2]string{
		{"etc/passwd", "stolen"}, {"hostdir/secret", "stolen"}, {"hostdir/sub", "stolen"},
		{"f", "etc/planted"}, {"f", "hostdir/planted"}, {"f", "hostdir/sub/planted"},
		{"f", "../planted"}, {"../x", "y"}, {"f", "/etc/planted"},
	} {
		for _, overwrite := range []bool{false, true} {
			_, err := sc.c.Rename(ctx, mv[0], mv[1], overwrite)
			wantClass(t, "Rename("+mv[0]+", "+mv[1]+")", err, core.ErrInvalidArgument, "")
		}
	}
	if _, err := os.Stat("/etc/planted"); err == nil {
		t.Error("Rename escaped to /etc/planted")
	}
	if ents, _ := os.ReadDir(host); len(ents) != 2 {
		t.Errorf("the host directory changed: %v", ents)
	}
	if ents, _ := os.ReadDir(filepath.Join(host, "sub")); len(ents) != 0 {
		t.Errorf("the host directory's sub changed: %v", ents)
	}
	if _, err := os.Stat(filepath.Join(ws, "f")); err != nil {
		t.Errorf("f: %v", err)
	}

	// A link out of the workspace is a file here: as mkdir -p's target it
	// is not a directory of the workspace's, renaming moves the link and
	// removing it (even recursively) removes the link, never its target.
	_, err := sc.c.MakeDirectory(ctx, "hostdir", true)
	if err == nil {
		t.Error("MakeDirectory(hostdir, parents) through a link out of the workspace succeeded")
	}
	fi, err := sc.c.Rename(ctx, "hostdir", "hostdir2", false)
	mustDo(t, err)
	if fi.Mode&fs.ModeSymlink == 0 {
		t.Errorf("the renamed link is described as %v", fi.Mode)
	}
	mustDo(t, sc.c.Remove(ctx, "hostdir2", true))
	mustDo(t, sc.c.Remove(ctx, "etc", true))
	if _, err := os.Stat(filepath.Join(host, "secret")); err != nil {
		t.Fatalf("removing the link removed its target: %v", err)
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Fatalf("/etc/passwd: %v", err)
	}

	// A FIFO is moved and removed without being opened (which would block).
	mustDo(t, syscall.Mkfifo(filepath.Join(ws, "pipe"), 0o644))
	_, err = sc.c.MakeDirectory(ctx, "pipe", true)
	wantClass(t, "MakeDirectory(parents) over a FIFO", err, core.ErrAlreadyExists, "not a directory")
	fi, err = sc.c.Rename(ctx, "pipe", "pipe2", false)
	mustDo(t, err)
	if fi.Mode&fs.ModeNamedPipe == 0 || fi.Type != core.FileTypeOf(fi.Mode) {
		t.Errorf("the renamed FIFO is described as %+v", fi)
	}
	mustDo(t, sc.c.Remove(ctx, "pipe2", false))
	if _, err := os.Lstat(filepath.Join(ws, "pipe2")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the FIFO after Remove: %v", err)
	}
}
