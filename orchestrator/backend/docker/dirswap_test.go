package docker

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// swapDirAndFIFO swaps dir and a FIFO beside it, atomically, over and over
// until the test ends: what a sandbox can do to a directory of its own
// while sandboxd walks it.
func swapDirAndFIFO(t *testing.T, dir string) {
	t.Helper()
	fifo := dir + ".fifo"
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			if err := unix.Renameat2(unix.AT_FDCWD, dir, unix.AT_FDCWD, fifo, unix.RENAME_EXCHANGE); err != nil {
				// sandboxd removed one (Prune removes what is no
				// directory): made again, as the sandbox would.
				os.Mkdir(dir, 0o755)
				syscall.Mkfifo(fifo, 0o644)
			}
		}
	}()
	t.Cleanup(func() {
		stop.Store(true)
		<-done
		// Anything still blocked opening the FIFO gets a writer, and ends.
		for _, p := range []string{dir, fifo} {
			if f, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Close()
			}
		}
	})
}

// repeatBounded runs f n times, failing the test if one run takes more
// than within (it is blocked: on a FIFO, for good).
func repeatBounded(t *testing.T, what string, n int, within time.Duration, f func()) {
	t.Helper()
	for i := range n {
		ran := make(chan struct{})
		go func() { defer close(ran); f() }()
		select {
		case <-ran:
		case <-time.After(within):
			t.Fatalf("%s blocked for %v at run %d: it opened a FIFO the sandbox swapped in for a directory", what, within, i)
		}
	}
}

// TestDirSizeNeverOpensAFIFO: the workspace's size is walked while the
// sandbox swaps a directory for a FIFO; the walk never blocks on it.
func TestDirSizeNeverOpensAFIFO(t *testing.T) {
	root := t.TempDir()
	sub := filepath.Join(root, "d")
	if err := os.MkdirAll(filepath.Join(sub, "e"), 0o755); err != nil {
		t.Fatal(err)
	}
	swapDirAndFIFO(t, sub)
	repeatBounded(t, "dirSize", 3000, 5*time.Second, func() { dirSize(root, 100) })
}

// TestPruneNeverOpensAFIFO: io/hibernate is pruned while the sandbox swaps
// it for a FIFO; the prune never blocks on it.
func TestPruneNeverOpensAFIFO(t *testing.T) {
	dir := t.TempDir()
	hib := filepath.Join(dir, ioDir, "hibernate")
	if err := os.MkdirAll(hib, 0o755); err != nil {
		t.Fatal(err)
	}
	swapDirAndFIFO(t, hib)
	repeatBounded(t, "Prune", 20000, 5*time.Second, func() { LocalSnapshots{}.Prune(dir, "keep") })
}
