package docker

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// fileOpsEnv is a sandbox on the fake Docker with its host workspace.
func fileOpsEnv(t *testing.T) (*validated, string, string) {
	t.Helper()
	m := newTestManager(t, testConfig(t), newFakeDocker(testImage))
	sb := acquire(t, m, "u").Sandbox
	return m, sb.ID, filepath.Join(m.cfg.StateDir, "sandboxes", sb.ID, "workspace")
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestMakeDirectory(t *testing.T) {
	m, id, ws := fileOpsEnv(t)
	ctx := t.Context()

	fi, err := m.MakeDirectory(ctx, id, "/workspace/out", false)
	mustDo(t, err)
	if fi.Path != "out" || !fi.IsDir || !fi.Mode.IsDir() || fi.Mode.Perm() != 0o755 {
		t.Errorf("MakeDirectory = %+v", fi)
	}
	st, _ := os.Lstat(filepath.Join(ws, "out"))
	if sys := st.Sys().(*syscall.Stat_t); sys.Uid != sandboxUID || fi.UID != sandboxUID || fi.GID != sandboxGID {
		t.Errorf("owned by %d (reported %d:%d)", sys.Uid, fi.UID, fi.GID)
	}
	_, err = m.MakeDirectory(ctx, id, "out", false)
	wantClass(t, err, core.ErrAlreadyExists, "already exists")
	_, err = m.MakeDirectory(ctx, id, "", false)
	wantClass(t, err, core.ErrAlreadyExists, "already exists")
	_, err = m.MakeDirectory(ctx, id, "a/b/c", false)
	wantClass(t, err, core.ErrNotFound, "/workspace/a/b does not exist")

	// parents: mkdir -p.
	fi, err = m.MakeDirectory(ctx, id, "a/b/c", true)
	mustDo(t, err)
	if fi.Path != "a/b/c" || !fi.IsDir {
		t.Errorf("MakeDirectory(parents) = %+v", fi)
	}
	if _, err := m.MakeDirectory(ctx, id, "a/b/c", true); err != nil {
		t.Errorf("existing directory with parents: %v", err)
	}
	mustDo(t, os.WriteFile(filepath.Join(ws, "f"), nil, 0o644))
	_, err = m.MakeDirectory(ctx, id, "f", true)
	wantClass(t, err, core.ErrAlreadyExists, "not a directory")
	_, err = m.MakeDirectory(ctx, id, "f/x", true)
	wantClass(t, err, core.ErrInvalidArgument, "not a directory")
	_, err = m.MakeDirectory(ctx, id, "f", false)
	wantClass(t, err, core.ErrAlreadyExists, "already exists")

	// Escapes.
	host := t.TempDir()
	mustDo(t, os.Symlink(host, filepath.Join(ws, "hostdir")))
	for _, p := range []string{"hostdir/x", "hostdir/x/y"} {
		for _, parents := range []bool{false, true} {
			_, err = m.MakeDirectory(ctx, id, p, parents)
			wantClass(t, err, core.ErrInvalidArgument, "escapes /workspace")
		}
	}
	for p, msg := range map[string]string{"../x": "escapes", "/tmp/x": "outside /workspace", "a/../../x": "escapes"} {
		_, err = m.MakeDirectory(ctx, id, p, true)
		wantClass(t, err, core.ErrInvalidArgument, msg)
	}
	if ents, _ := os.ReadDir(host); len(ents) != 0 {
		t.Errorf("created outside the workspace: %v", ents)
	}
}

func TestRemove(t *testing.T) {
	m, id, ws := fileOpsEnv(t)
	ctx := t.Context()
	mustDo(t, os.MkdirAll(filepath.Join(ws, "d/e"), 0o755))
	mustDo(t, os.WriteFile(filepath.Join(ws, "d/e/f.txt"), []byte("x"), 0o644))
	mustDo(t, os.WriteFile(filepath.Join(ws, "g.txt"), []byte("x"), 0o644))
	mustDo(t, os.Mkdir(filepath.Join(ws, "empty"), 0o755))

	for _, p := range []string{"", "/workspace", "/workspace/", "."} {
		err := m.Remove(ctx, id, p, true)
		wantClass(t, err, core.ErrInvalidArgument, "workspace itself")
	}
	wantClass(t, m.Remove(ctx, id, "nope", false), core.ErrNotFound, "/workspace/nope")
	wantClass(t, m.Remove(ctx, id, "d", false), core.ErrFailedPrecondition, "not empty")
	mustDo(t, m.Remove(ctx, id, "g.txt", false))
	mustDo(t, m.Remove(ctx, id, "/workspace/empty", false))
	mustDo(t, m.Remove(ctx, id, "d", true))
	if ents, _ := os.ReadDir(ws); len(ents) != 0 {
		t.Errorf("left: %v", ents)
	}

	// A symlink is removed, never followed, also inside a recursive removal.
	host := t.TempDir()
	mustDo(t, os.WriteFile(filepath.Join(host, "keep"), []byte("host"), 0o644))
	mustDo(t, os.Symlink(host, filepath.Join(ws, "hostdir")))
	mustDo(t, os.Mkdir(filepath.Join(ws, "tree"), 0o755))
	mustDo(t, os.Symlink(host, filepath.Join(ws, "tree", "hostlink")))
	wantClass(t, m.Remove(ctx, id, "hostdir/keep", false), core.ErrInvalidArgument, "escapes /workspace")
	wantClass(t, m.Remove(ctx, id, "hostdir/keep", true), core.ErrInvalidArgument, "escapes /workspace")
	wantClass(t, m.Remove(ctx, id, "../x", true), core.ErrInvalidArgument, "escapes /workspace")
	wantClass(t, m.Remove(ctx, id, "/etc/passwd", true), core.ErrInvalidArgument, "outside /workspace")
	mustDo(t, m.Remove(ctx, id, "tree", true))
	mustDo(t, m.Remove(ctx, id, "hostdir", true))
	if b, err := os.ReadFile(filepath.Join(host, "keep")); err != nil || string(b) != "host" {
		t.Fatalf("host file: %q, %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(ws, "hostdir")); !os.IsNotExist(err) {
		t.Error("link not removed")
	}
}

func TestRename(t *testing.T) {
	m, id, ws := fileOpsEnv(t)
	ctx := t.Context()
	mustDo(t, os.WriteFile(filepath.Join(ws, "a.txt"), []byte("a"), 0o644))
	mustDo(t, os.WriteFile(filepath.Join(ws, "b.txt"), []byte("b"), 0o644))
	mustDo(t, os.MkdirAll(filepath.Join(ws, "dir/sub"), 0o755))
	mustDo(t, os.Mkdir(filepath.Join(ws, "empty"), 0o755))

	fi, err := m.Rename(ctx, id, "a.txt", "/workspace/dir/a2.txt", false)
	mustDo(t, err)
	if fi.Path != "dir/a2.txt" || fi.Size != 1 || !fi.Mode.IsRegular() {
		t.Errorf("Rename = %+v", fi)
	}
	_, err = m.Rename(ctx, id, "b.txt", "dir/a2.txt", false)
	wantClass(t, err, core.ErrAlreadyExists, "destination exists")
	fi, err = m.Rename(ctx, id, "b.txt", "dir/a2.txt", true)
	mustDo(t, err)
	if b, _ := os.ReadFile(filepath.Join(ws, "dir/a2.txt")); string(b) != "b" {
		t.Errorf("overwrite: %q", b)
	}
	_, err = m.Rename(ctx, id, "nope", "x", false)
	wantClass(t, err, core.ErrNotFound, "/workspace/nope")
	_, err = m.Rename(ctx, id, "dir/a2.txt", "no/such/x", false)
	wantClass(t, err, core.ErrNotFound, "/workspace/no/such does not exist")
	_, err = m.Rename(ctx, id, "dir", "dir/sub/x", false)
	wantClass(t, err, core.ErrInvalidArgument, "into itself")
	_, err = m.Rename(ctx, id, "", "x", false)
	wantClass(t, err, core.ErrInvalidArgument, "workspace itself")
	_, err = m.Rename(ctx, id, "dir", "/workspace", true)
	wantClass(t, err, core.ErrInvalidArgument, "workspace itself")
	_, err = m.Rename(ctx, id, "dir/a2.txt", "empty", true)
	wantClass(t, err, core.ErrInvalidArgument, "is a directory")
	_, err = m.Rename(ctx, id, "empty", "dir", true)
	wantClass(t, err, core.ErrFailedPrecondition, "non-empty directory")
	fi, err = m.Rename(ctx, id, "dir", "empty", true) // onto an empty directory
	mustDo(t, err)
	if !fi.IsDir || fi.Path != "empty" {
		t.Errorf("Rename(dir) = %+v", fi)
	}

	// Escapes, both ways.
	host := t.TempDir()
	mustDo(t, os.WriteFile(filepath.Join(host, "secret"), []byte("host"), 0o644))
	mustDo(t, os.Symlink(host, filepath.Join(ws, "hostdir")))
	_, err = m.Rename(ctx, id, "hostdir/secret", "stolen", false)
	wantClass(t, err, core.ErrInvalidArgument, "escapes /workspace")
	_, err = m.Rename(ctx, id, "empty/a2.txt", "hostdir/planted", false)
	wantClass(t, err, core.ErrInvalidArgument, "escapes /workspace")
	_, err = m.Rename(ctx, id, "empty/a2.txt", "../planted", false)
	wantClass(t, err, core.ErrInvalidArgument, "escapes /workspace")
	_, err = m.Rename(ctx, id, "/etc/passwd", "x", false)
	wantClass(t, err, core.ErrInvalidArgument, "outside /workspace")
	if ents, _ := os.ReadDir(host); len(ents) != 1 {
		t.Errorf("host dir changed: %v", ents)
	}
	// Renaming the link itself moves the link, not the target.
	fi, err = m.Rename(ctx, id, "hostdir", "hostdir2", false)
	mustDo(t, err)
	if fi.Mode&os.ModeSymlink == 0 {
		t.Errorf("renamed link reported as %v", fi.Mode)
	}
}

func TestListFilesDepth(t *testing.T) {
	m, id, ws := fileOpsEnv(t)
	ctx := t.Context()
	mustDo(t, os.MkdirAll(filepath.Join(ws, "a/b/c"), 0o755))
	mustDo(t, os.WriteFile(filepath.Join(ws, "a/b/c/deep.txt"), []byte("x"), 0o600))
	mustDo(t, os.WriteFile(filepath.Join(ws, "top.txt"), nil, 0o644))
	mustDo(t, os.Symlink("/etc", filepath.Join(ws, "etc")))
	mustDo(t, os.Symlink("a", filepath.Join(ws, "alink")))

	paths := func(depth int) []string {
		t.Helper()
		list, err := m.ListFilesDepth(ctx, id, "", depth)
		mustDo(t, err)
		var out []string
		for _, f := range list {
			out = append(out, f.Path)
		}
		return out
	}
	top := []string{"a", "alink", "etc", "top.txt"}
	for _, d := range []int{0, 1} {
		if got := paths(d); !slices.Equal(got, top) {
			t.Errorf("depth %d: %v", d, got)
		}
	}
	if got, want := paths(2), []string{"a", "a/b", "alink", "etc", "top.txt"}; !slices.Equal(got, want) {
		t.Errorf("depth 2: %v", got)
	}
	// Links are never descended into, whatever the depth.
	if got, want := paths(10), []string{"a", "a/b", "a/b/c", "a/b/c/deep.txt", "alink", "etc", "top.txt"}; !slices.Equal(got, want) {
		t.Errorf("depth 10: %v", got)
	}
	list, err := m.ListFilesDepth(ctx, id, "a/b/c", 3)
	mustDo(t, err)
	if len(list) != 1 || list[0].Mode.Perm() != 0o600 || !list[0].Mode.IsRegular() {
		t.Errorf("list a/b/c = %+v", list)
	}
	list, _ = m.ListFilesDepth(ctx, id, "", 1)
	for _, f := range list {
		if f.Path == "etc" && f.Mode&os.ModeSymlink == 0 {
			t.Errorf("etc: %v", f.Mode)
		}
	}
	for _, d := range []int{-1, 11} {
		_, err := m.ListFilesDepth(ctx, id, "", d)
		wantClass(t, err, core.ErrInvalidArgument, "depth")
	}
	_, err = m.ListFilesDepth(ctx, id, "etc", 2)
	wantClass(t, err, core.ErrInvalidArgument, "escapes /workspace")
	_, err = m.ListFilesDepth(ctx, id, "nope", 2)
	wantClass(t, err, core.ErrNotFound, "/workspace/nope")

	// The entry cap covers the whole answer, across levels.
	for d := range 3 {
		dir := filepath.Join(ws, "many", fmt.Sprint("d", d))
		mustDo(t, os.MkdirAll(dir, 0o755))
		for i := range maxListEntries / 3 {
			mustDo(t, os.WriteFile(filepath.Join(dir, fmt.Sprint("f", i)), nil, 0o644))
		}
	}
	if list, err := m.ListFilesDepth(ctx, id, "many", 1); err != nil || len(list) != 3 {
		t.Fatalf("depth 1: %d entries, %v", len(list), err)
	}
	_, err = m.ListFilesDepth(ctx, id, "many", 2)
	wantClass(t, err, core.ErrResourceExhausted, "more than 10000 entries")
}
