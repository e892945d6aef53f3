package wspath

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestListNeverOpensAFIFO: a directory is listed while the sandbox swaps
// one of its subdirectories for a FIFO, over and over; a listing may fail
// or miss it, and never blocks on it.
func TestListNeverOpensAFIFO(t *testing.T) {
	dir := t.TempDir()
	sub, fifo := filepath.Join(dir, "d"), filepath.Join(dir, "f")
	if err := os.MkdirAll(filepath.Join(sub, "e"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	var stop atomic.Bool
	swapped := make(chan struct{})
	go func() {
		defer close(swapped)
		for !stop.Load() {
			unix.Renameat2(unix.AT_FDCWD, sub, unix.AT_FDCWD, fifo, unix.RENAME_EXCHANGE)
		}
	}()
	t.Cleanup(func() {
		stop.Store(true)
		<-swapped
		for _, p := range []string{sub, fifo} { // a writer for anything blocked on the FIFO
			if f, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Close()
			}
		}
	})
	for i := range 3000 {
		listed := make(chan struct{})
		go func() {
			defer close(listed)
			List(context.Background(), root, ".", 3)
		}()
		select {
		case <-listed:
		case <-time.After(5 * time.Second):
			t.Fatalf("List blocked for 5s at run %d: it opened a FIFO swapped in for a directory", i)
		}
	}
}
