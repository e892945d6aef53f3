package docker

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sandboxd/sandboxd/ioproto"
)

// TestLocalSnapshotsConfined: the sandbox writes io/hibernate, so it may
// make it, or an entry in it, a symlink to a host path. The store's size
// and prune must never follow one out of io/.
func TestLocalSnapshotsConfined(t *testing.T) {
	host := t.TempDir()
	victim := filepath.Join(host, "precious")
	if err := os.WriteFile(victim, []byte("host data"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := LocalSnapshots{}

	// io/hibernate itself a symlink to the host directory.
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, ioDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(host, filepath.Join(dir, ioDir, ioproto.HibernateDir)); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Size(dir, "precious"); ok {
		t.Error("Size followed a symlinked hibernate directory")
	}
	if err := s.Prune(dir, ""); err != nil {
		t.Logf("prune: %v", err)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("Prune deleted a host file through a symlink: %v", err)
	}

	// An entry that is a symlink; a real snapshot next to it.
	dir2 := t.TempDir()
	hib := filepath.Join(dir2, ioDir, ioproto.HibernateDir)
	if err := os.MkdirAll(hib, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(hib, "snap-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hib, "snap-1"), []byte("pickle"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Size(dir2, "snap-link"); ok {
		t.Error("Size counted a symlink as a snapshot")
	}
	if n, ok := s.Size(dir2, "snap-1"); !ok || n != 6 {
		t.Errorf("Size(snap-1) = %d, %v", n, ok)
	}
	if err := s.Prune(dir2, "snap-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("Prune deleted a symlink's target: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(hib, "snap-link")); !os.IsNotExist(err) {
		t.Errorf("the planted symlink was not pruned: %v", err)
	}
	if _, ok := s.Size(dir2, "snap-1"); !ok {
		t.Error("Prune removed the snapshot it was told to keep")
	}
}
