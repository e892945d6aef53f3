package wspath

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

func openRoot(t *testing.T) (*os.Root, string) {
	t.Helper()
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return root, dir
}

func TestFSError(t *testing.T) {
	already := core.NotFoundf("mine")
	for _, tc := range []struct {
		err   error
		class *core.Class
		msg   string
	}{
		{&os.PathError{Op: "open", Path: "x", Err: syscall.ENOENT}, core.ErrNotFound, "download /workspace/x: no such file or directory"},
		{&os.PathError{Op: "openat", Path: "x", Err: errors.New("path escapes from parent")}, core.ErrInvalidArgument, "download /workspace/x: path escapes /workspace"},
		{syscall.ELOOP, core.ErrInvalidArgument, "path escapes /workspace"},
		{syscall.ENOTDIR, core.ErrInvalidArgument, "a parent of the path is not a directory"},
		{syscall.EISDIR, core.ErrInvalidArgument, "is a directory"},
		{syscall.ENAMETOOLONG, core.ErrInvalidArgument, "name too long"},
		{syscall.EEXIST, core.ErrInvalidArgument, "already exists"},
		{syscall.ENOSPC, core.ErrResourceExhausted, "no space left on the sandbox's disk"},
		{syscall.EDQUOT, core.ErrResourceExhausted, "no space left on the sandbox's disk"},
		{already, core.ErrNotFound, "mine"},
		{syscall.EIO, nil, "download /workspace/x: input/output error"},
	} {
		err := FSError("download", "/workspace/x", tc.err)
		if core.ClassOf(err) != tc.class || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("FSError(%v) = %v (class %v); want class %v, saying %q", tc.err, err, core.ClassOf(err), tc.class, tc.msg)
		}
	}
	if !errors.Is(FSError("x", "y", syscall.EIO), syscall.EIO) {
		t.Error("an unclassified error does not keep its cause")
	}
	if FSError("x", "y", nil) != nil {
		t.Error("FSError(nil) is not nil")
	}
}

// failAfter returns data, then err.
type failAfter struct {
	data string
	err  error
}

func (f *failAfter) Read(p []byte) (int, error) {
	if f.data == "" {
		return 0, f.err
	}
	n := copy(p, f.data)
	f.data = f.data[n:]
	return n, nil
}

func TestUpload(t *testing.T) {
	root, dir := openRoot(t)
	ctx := t.Context()
	fi, n, err := Upload(ctx, root, "a/b/c.txt", strings.NewReader("hello"))
	if err != nil || n != 5 || fi.Path != "a/b/c.txt" || fi.Size != 5 || fi.IsDir || fi.Type != core.FileRegular {
		t.Fatalf("Upload = %+v, %d, %v", fi, n, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "a/b/c.txt")); err != nil || string(b) != "hello" {
		t.Fatalf("the file holds %q, %v", b, err)
	}
	// The reader's error comes back as it is, and nothing is left behind:
	// not the file, not a temporary.
	boom := core.Exhaustedf("too large")
	if _, _, err := Upload(ctx, root, "a/b/d.txt", &failAfter{"part", boom}); err != boom {
		t.Fatalf("Upload with a failing reader = %v; want its error as it is", err)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "a/b"))
	if len(entries) != 1 {
		t.Errorf("a/b holds %v after a failed upload; want c.txt only", entries)
	}
	// A context that ended stops it.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := Upload(cctx, root, "e.txt", strings.NewReader("x")); !errors.Is(err, context.Canceled) {
		t.Errorf("Upload with an ended context = %v", err)
	}
	// Over a directory, through a file: the caller's mistakes.
	if _, _, err := Upload(ctx, root, "a/b", strings.NewReader("x")); core.ClassOf(err) != core.ErrInvalidArgument || !strings.Contains(err.Error(), "upload to /workspace/a/b: is a directory") {
		t.Errorf("Upload over a directory = %v", err)
	}
	if _, _, err := Upload(ctx, root, "a/b/c.txt/x", strings.NewReader("x")); core.ClassOf(err) != core.ErrInvalidArgument {
		t.Errorf("Upload through a file = %v", err)
	}
}

func TestOpen(t *testing.T) {
	root, dir := openRoot(t)
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "leak")); err != nil {
		t.Fatal(err)
	}
	f, fi, err := Open(root, "f")
	if err != nil || fi.Size != 3 || fi.Path != "f" {
		t.Fatalf("Open(f) = %+v, %v", fi, err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "abc" {
		t.Errorf("read %q", b)
	}
	for name, want := range map[string]string{
		"d":       "download /workspace/d: is a directory; use ListFiles",
		"fifo":    "download /workspace/fifo: not a regular file",
		"leak":    "download /workspace/leak: path escapes /workspace",
		"missing": "download /workspace/missing: no such file or directory",
	} {
		if _, _, err := Open(root, name); err == nil || !strings.Contains(err.Error(), want) || core.ClassOf(err) == nil {
			t.Errorf("Open(%s) = %v; want a classified error saying %q", name, err, want)
		}
	}
}

func TestList(t *testing.T) {
	root, dir := openRoot(t)
	for _, p := range []string{"a/b/c", "a/x"} {
		if err := os.MkdirAll(filepath.Join(dir, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"top.txt", "a/b/f.txt", UploadTempPrefix + "0123"} {
		if err := os.WriteFile(filepath.Join(dir, p), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc", filepath.Join(dir, "a/etc")); err != nil {
		t.Fatal(err)
	}
	paths := func(list []core.FileInfo) string {
		var s []string
		for _, fi := range list {
			s = append(s, fi.Path)
		}
		return strings.Join(s, " ")
	}
	for depth, want := range map[int]string{
		0: "a top.txt",
		1: "a top.txt",
		2: "a a/b a/etc a/x top.txt",
		5: "a a/b a/b/c a/b/f.txt a/etc a/x top.txt",
	} {
		list, err := List(t.Context(), root, ".", depth)
		if err != nil || paths(list) != want {
			t.Errorf("List(., %d) = %q, %v; want %q", depth, paths(list), err, want)
		}
	}
	if list, err := List(t.Context(), root, "a/b/f.txt", 1); err != nil || paths(list) != "a/b/f.txt" {
		t.Errorf("List of a file = %q, %v", paths(list), err)
	}
	if _, err := List(t.Context(), root, "a/etc", 1); core.ClassOf(err) != core.ErrInvalidArgument {
		t.Errorf("List through a symlink leaving the root = %v; want ErrInvalidArgument", err)
	}
	for i := range MaxListEntries + 1 {
		if err := os.WriteFile(filepath.Join(dir, "a/x", fmt.Sprint(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := List(t.Context(), root, "a/x", 1); core.ClassOf(err) != core.ErrResourceExhausted || !strings.Contains(err.Error(), "the directory has more than") {
		t.Errorf("List of a directory too large = %v", err)
	}
}
