package iosidecar

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/wspath"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	sandboxiov1 "github.com/sandboxd/sandboxd/proto/sandboxio/v1"
)

// Deep listings through a real sidecar: the Docker backend's
// TestListFilesDepth, with what a sandbox can plant (a link to /etc, a link
// back up, a link loop): links are listed, never descended into; depth and
// entry bounds hold.
func TestListFilesDepth(t *testing.T) {
	sc := startSidecar(t)
	ctx := ctxT(t)
	ws := sc.workspace
	mustDo(t, os.MkdirAll(filepath.Join(ws, "a/b/c"), 0o755))
	mustDo(t, os.WriteFile(filepath.Join(ws, "a/b/c/deep.txt"), []byte("x"), 0o600))
	mustDo(t, os.WriteFile(filepath.Join(ws, "top.txt"), nil, 0o644))
	mustDo(t, os.Symlink("/etc", filepath.Join(ws, "etc")))
	mustDo(t, os.Symlink("a", filepath.Join(ws, "alink")))
	mustDo(t, os.Symlink("..", filepath.Join(ws, "a/up")))
	mustDo(t, os.Symlink("loop2", filepath.Join(ws, "a/b/loop1")))
	mustDo(t, os.Symlink("loop1", filepath.Join(ws, "a/b/loop2")))

	paths := func(path string, depth int) []string {
		t.Helper()
		list, err := sc.c.ListFiles(ctx, path, depth)
		mustDo(t, err)
		var out []string
		for _, f := range list {
			out = append(out, f.Path)
		}
		return out
	}
	top := []string{"a", "alink", "etc", "top.txt"}
	for _, d := range []int{0, 1} {
		if got := paths("", d); !slices.Equal(got, top) {
			t.Errorf("depth %d: %v", d, got)
		}
	}
	if got, want := paths("", 2), []string{"a", "a/b", "a/up", "alink", "etc", "top.txt"}; !slices.Equal(got, want) {
		t.Errorf("depth 2: %v", got)
	}
	// Links are never descended into, whatever the depth.
	want := []string{"a", "a/b", "a/b/c", "a/b/c/deep.txt", "a/b/loop1", "a/b/loop2", "a/up", "alink", "etc", "top.txt"}
	if got := paths("", core.MaxListDepth); !slices.Equal(got, want) {
		t.Errorf("depth %d: %v", core.MaxListDepth, got)
	}
	list, err := sc.c.ListFiles(ctx, "/workspace/a/b/c", 3)
	mustDo(t, err)
	if len(list) != 1 || list[0].Path != "a/b/c/deep.txt" || list[0].Mode.Perm() != 0o600 || !list[0].Mode.IsRegular() {
		t.Errorf("list a/b/c = %+v", list)
	}
	list, err = sc.c.ListFiles(ctx, "", 3)
	mustDo(t, err)
	for _, f := range list {
		if (f.Path == "etc" || f.Path == "a/up" || f.Path == "a/b/loop1") && f.Mode&os.ModeSymlink == 0 {
			t.Errorf("%s: %v; want a symbolic link", f.Path, f.Mode)
		}
	}

	// The client refuses a depth out of range; the sidecar does too.
	for _, d := range []int{-1, core.MaxListDepth + 1} {
		_, err := sc.c.ListFiles(ctx, "", d)
		wantClass(t, "ListFiles depth", err, core.ErrInvalidArgument, "depth")
	}
	_, err = sc.srv.ListFiles(ctx, &sandboxiov1.ListFilesRequest{Depth: core.MaxListDepth + 1})
	wantClass(t, "the sidecar's ListFiles at depth 11", err, core.ErrInvalidArgument, "depth")

	_, err = sc.c.ListFiles(ctx, "etc", 2)
	wantClass(t, "ListFiles(etc)", err, core.ErrInvalidArgument, "escapes /workspace")
	_, err = sc.c.ListFiles(ctx, "a/b/loop1", 2)
	wantClass(t, "ListFiles(a/b/loop1)", err, core.ErrInvalidArgument, "")
	_, err = sc.c.ListFiles(ctx, "nope", 2)
	wantClass(t, "ListFiles(nope)", err, core.ErrNotFound, "/workspace/nope")

	// The entry cap covers the whole answer, across levels.
	for d := range 3 {
		dir := filepath.Join(ws, "many", fmt.Sprint("d", d))
		mustDo(t, os.MkdirAll(dir, 0o755))
		for i := range wspath.MaxListEntries / 3 {
			mustDo(t, os.WriteFile(filepath.Join(dir, fmt.Sprint("f", i)), nil, 0o644))
		}
	}
	if list, err := sc.c.ListFiles(ctx, "many", 1); err != nil || len(list) != 3 {
		t.Fatalf("depth 1: %d entries, %v", len(list), err)
	}
	_, err = sc.c.ListFiles(ctx, "many", 2)
	wantClass(t, "ListFiles(many, 2)", err, core.ErrResourceExhausted, "more than 10000 entries")
}
