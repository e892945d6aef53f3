package wspath

import (
	"os"
	"path/filepath"
	"testing"
)

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
