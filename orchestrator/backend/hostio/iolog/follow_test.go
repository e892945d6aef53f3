package iolog

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

// appendEvents appends events to command cmd's events file, as the driver
// does (from any goroutine: failures are t.Error).
func appendEvents(t *testing.T, d *Dir, cmd string, evs ...ioproto.Event) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(d.Path(), ioproto.OutDir, ioproto.EventsFileName(cmd)), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	for _, ev := range evs {
		line, err := ioproto.EncodeEvent(&ev)
		if err == nil {
			_, err = f.Write(line)
		}
		if err != nil {
			t.Error(err)
			return
		}
	}
}

// follow runs Events.Follow of command cmd in d, after appending it, and
// returns the seqs it delivered and its error.
func follow(t *testing.T, ctx context.Context, d *Dir, w *Watcher, cmd string, o FollowOptions) ([]int64, error) {
	t.Helper()
	evs, err := d.EventsContext(ctx, cmd, 0, discard)
	if err != nil {
		t.Fatal(err)
	}
	defer evs.Close()
	var seqs []int64
	err = evs.Follow(w, o, func(ev ioproto.Event) error { seqs = append(seqs, ev.Seq); return nil })
	return seqs, err
}

func newWatcher(t *testing.T) *Watcher {
	t.Helper()
	w, err := NewWatcher(discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func TestFollowLoop(t *testing.T) {
	w := newWatcher(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	started := ioproto.Event{Seq: 1, Type: ioproto.EventStarted, CommandID: "c1", Language: ioproto.LanguagePython}
	done := ioproto.Event{Seq: 2, Type: ioproto.EventDone, Status: ioproto.StatusOK}

	t.Run("waits for the events, until done", func(t *testing.T) {
		d := newDir(t)
		if _, err := d.Append(exec("c1"), nil); err != nil {
			t.Fatal(err)
		}
		go func() {
			time.Sleep(100 * time.Millisecond)
			appendEvents(t, d, "c1", started)
			time.Sleep(100 * time.Millisecond)
			appendEvents(t, d, "c1", done)
		}()
		// An hour between re-checks: the watcher's notifications wake it.
		seqs, err := follow(t, ctx, d, w, "c1", FollowOptions{Recheck: time.Hour})
		if err != nil || len(seqs) != 2 {
			t.Fatalf("Follow = %v, %v; want seqs 1 and 2", seqs, err)
		}
	})
	t.Run("a dead sandbox's last events, then ErrDied", func(t *testing.T) {
		d := newDir(t)
		if _, err := d.Append(exec("c1"), nil); err != nil {
			t.Fatal(err)
		}
		appendEvents(t, d, "c1", started)
		dead := make(chan struct{})
		close(dead)
		seqs, err := follow(t, ctx, d, w, "c1", FollowOptions{Dead: dead})
		if !errors.Is(err, ErrDied) || len(seqs) != 1 {
			t.Fatalf("Follow = %v, %v; want seq 1, then ErrDied", seqs, err)
		}
	})
	for name, tc := range map[string]struct {
		o    func(ch chan struct{}) FollowOptions
		want error
	}{
		"stop": {func(ch chan struct{}) FollowOptions { return FollowOptions{Stop: ch} }, ErrStopped},
		"gone": {func(ch chan struct{}) FollowOptions { return FollowOptions{Gone: ch} }, ErrClosed},
	} {
		t.Run(name, func(t *testing.T) {
			d := newDir(t)
			if _, err := d.Append(exec("c1"), nil); err != nil {
				t.Fatal(err)
			}
			ch := make(chan struct{})
			time.AfterFunc(50*time.Millisecond, func() { close(ch) })
			if _, err := follow(t, ctx, d, w, "c1", tc.o(ch)); !errors.Is(err, tc.want) {
				t.Fatalf("Follow = %v; want %v", err, tc.want)
			}
		})
	}
	t.Run("pruned", func(t *testing.T) {
		d := newDir(t)
		if _, err := d.Append(exec("c1"), nil); err != nil {
			t.Fatal(err)
		}
		// The driver is past the record and there is no events file.
		if err := os.WriteFile(filepath.Join(d.Path(), ioproto.StateFile), []byte(`{"version":1,"offset":1000000}`), 0o644); err != nil {
			t.Fatal(err)
		}
		var rechecks atomic.Int32
		start := time.Now()
		_, err := follow(t, ctx, d, w, "c1", FollowOptions{OnRecheck: func() { rechecks.Add(1) }})
		if !errors.Is(err, ErrPruned) || rechecks.Load() != 1 {
			t.Fatalf("Follow = %v after %d re-checks; want ErrPruned at the first", err, rechecks.Load())
		}
		if el := time.Since(start); el < PrunedCheckDelay || el > 10*time.Second {
			t.Errorf("pruned output reported after %v; want after PrunedCheckDelay (%v)", el, PrunedCheckDelay)
		}
	})
	t.Run("tampered events file", func(t *testing.T) {
		d := newDir(t)
		if _, err := d.Append(exec("c1"), nil); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/etc/passwd", filepath.Join(d.Path(), ioproto.OutDir, ioproto.EventsFileName("c1"))); err != nil {
			t.Fatal(err)
		}
		if _, err := follow(t, ctx, d, w, "c1", FollowOptions{}); !errors.Is(err, ErrTampered) {
			t.Fatalf("Follow of a symlinked events file = %v; want ErrTampered", err)
		}
	})
	t.Run("the context's end", func(t *testing.T) {
		d := newDir(t)
		if _, err := d.Append(exec("c1"), nil); err != nil {
			t.Fatal(err)
		}
		cctx, ccancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer ccancel()
		if _, err := follow(t, cctx, d, w, "c1", FollowOptions{}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Follow = %v; want the context's error", err)
		}
	})
}
