package wspath

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestClean(t *testing.T) {
	for in, want := range map[string]string{
		"": ".", "/workspace": ".", "/workspace/": ".", "x": "x", "./x": "x",
		"a//b/": "a/b", "/workspace//a": "a", "a/./b": "a/b", "..foo/bar..": "..foo/bar..",
	} {
		if got, err := Clean(in); err != nil || got != want {
			t.Errorf("Clean(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, msg := range map[string]string{
		"../etc/passwd": "escapes /workspace", "a/..": "escapes /workspace", "/workspace/../etc": "escapes /workspace",
		"/etc/passwd": "outside /workspace", "/workspacex/y": "outside /workspace",
		"a\x00b": "NUL", strings.Repeat("a", MaxPathLen+1): "limit",
	} {
		_, err := Clean(in)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), msg) || len(err.Error()) > 400 {
			t.Errorf("Clean(%.40q) = %v; want ErrInvalid saying %q, bounded", in, err, msg)
		}
	}
}

func TestMkdirAllOwned(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := MkdirAllOwned(root, "a/b/c"); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(dir, "a/b/c")); err != nil || !st.IsDir() {
		t.Fatalf("a/b/c = %v, %v", st, err)
	}
	if err := MkdirAllOwned(root, "file/x"); err == nil {
		t.Error("MkdirAllOwned through a file succeeded")
	}
	if err := MkdirAllOwned(root, "out/x"); err == nil {
		t.Error("MkdirAllOwned through a symlink leaving the root succeeded")
	}
	if _, err := os.Stat("/etc/x"); err == nil {
		t.Fatal("a directory was made in /etc")
	}
}
