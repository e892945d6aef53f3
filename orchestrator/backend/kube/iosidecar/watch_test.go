package iosidecar

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	sandboxiov1 "github.com/sandboxd/sandboxd/proto/sandboxio/v1"
)

// clientWatch runs Client.WatchDirectory in the background and collects
// its updates.
type clientWatch struct {
	updates chan WatchUpdate
	done    chan error
}

func startClientWatch(t *testing.T, c *Client, rel string, recursive bool, maxDirs int) *clientWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(ctxT(t))
	w := &clientWatch{updates: make(chan WatchUpdate, 100), done: make(chan error, 1)}
	go func() {
		w.done <- c.WatchDirectory(ctx, rel, recursive, maxDirs, func(u WatchUpdate) error {
			w.updates <- u
			return nil
		})
	}()
	t.Cleanup(func() { cancel(); <-w.done })
	return w
}

// next waits, bounded, for the next update.
func (w *clientWatch) next(t *testing.T, what string) WatchUpdate {
	t.Helper()
	select {
	case u := <-w.updates:
		return u
	case err := <-w.done:
		w.done <- err // for the cleanup
		t.Fatalf("%s: the watch ended: %v", what, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no update within 10s", what)
	}
	return WatchUpdate{}
}

// end waits, bounded, for the watch's end.
func (w *clientWatch) end(t *testing.T, what string) error {
	t.Helper()
	for {
		select {
		case <-w.updates:
		case err := <-w.done:
			w.done <- err // for the cleanup
			return err
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the watch did not end within 10s", what)
		}
	}
}

// WatchDirectory through a real sidecar: the first update says the watch
// is in place with one directory; a file created, and a directory created
// with a file inside, come as CREATE events with their workspace paths,
// the new directory counted; a watch past max_dirs ends with
// RESOURCE_EXHAUSTED, one of a missing directory is NOT_FOUND, of a file
// INVALID_ARGUMENT, and max_dirs 0 INVALID_ARGUMENT, each by reason.
func TestWatchDirectory(t *testing.T) {
	sc := startSidecar(t)
	if err := os.Mkdir(filepath.Join(sc.workspace, "top"), 0o755); err != nil {
		t.Fatal(err)
	}
	w := startClientWatch(t, sc.c, "top", true, 10)
	if u := w.next(t, "in place"); u.Event != nil || u.Dirs != 1 {
		t.Fatalf("first update %+v; want no event, one directory", u)
	}
	if err := os.WriteFile(filepath.Join(sc.workspace, "top", "a.txt"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	if u := w.next(t, "a.txt"); u.Event == nil || u.Event.Op != core.WatchCreate || u.Event.Path != "top/a.txt" {
		t.Fatalf("update %+v (event %+v); want CREATE top/a.txt", u, u.Event)
	}
	if err := os.Mkdir(filepath.Join(sc.workspace, "top", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for {
		u := w.next(t, "top/sub")
		if u.Event != nil && u.Event.Path == "top/sub" {
			if u.Event.Op != core.WatchCreate || u.Dirs != 2 {
				t.Fatalf("update %+v (event %+v); want CREATE top/sub with two directories watched", u, u.Event)
			}
			break
		}
	}
	if err := os.WriteFile(filepath.Join(sc.workspace, "top", "sub", "b.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for {
		if u := w.next(t, "top/sub/b.txt"); u.Event != nil && u.Event.Path == "top/sub/b.txt" && u.Event.Op == core.WatchCreate {
			break
		}
	}

	small := startClientWatch(t, sc.c, "", true, 3)
	if u := small.next(t, "in place"); u.Dirs != 3 { // the workspace, top, top/sub
		t.Fatalf("a recursive watch of the workspace holds %d directories; want 3", u.Dirs)
	}
	if err := os.Mkdir(filepath.Join(sc.workspace, "more"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := small.end(t, "past max_dirs"); !errors.Is(err, core.ErrResourceExhausted) || !strings.Contains(err.Error(), "max-watch-dirs-per-call") {
		t.Errorf("a watch past max_dirs: %v; want RESOURCE_EXHAUSTED naming the per-call cap", err)
	}
	for _, tc := range []struct {
		rel     string
		maxDirs int
		class   error
	}{
		{"missing", 10, core.ErrNotFound},
		{"top/a.txt", 10, core.ErrInvalidArgument},
		{"top", 0, core.ErrInvalidArgument},
	} {
		err := startClientWatch(t, sc.c, tc.rel, false, tc.maxDirs).end(t, tc.rel)
		var e *Error
		if !errors.Is(err, tc.class) || !errors.As(err, &e) || e.Reason == "" {
			t.Errorf("watch %s (max_dirs %d): %v; want %v by reason", tc.rel, tc.maxDirs, err, tc.class)
		}
	}
}

// sendWatch sends the messages, then ends the stream with err.
func sendWatch(err error, msgs ...*sandboxiov1.WatchDirectoryResponse) func(grpc.ServerStreamingServer[sandboxiov1.WatchDirectoryResponse]) error {
	return func(s grpc.ServerStreamingServer[sandboxiov1.WatchDirectoryResponse]) error {
		for _, m := range msgs {
			if err := s.Send(m); err != nil {
				return err
			}
		}
		if err == nil {
			<-s.Context().Done()
		}
		return err
	}
}

// A lying sidecar's watch is refused, bounded: an event before the watch
// is in place, a watch in place with no directory, more directories than
// asked for, an update without an event, an unknown kind, a path outside
// the watched directory (absolute, escaping, elsewhere, not clean, the
// directory itself), a message over the size bound, a stream that ends
// without an error; and events past the rate are dropped and counted,
// never all passed on.
func TestHostileWatchDirectory(t *testing.T) {
	ready := &sandboxiov1.WatchDirectoryResponse{Dirs: 1}
	ev := func(op sandboxiov1.WatchOp, p string) *sandboxiov1.WatchDirectoryResponse {
		return &sandboxiov1.WatchDirectoryResponse{Dirs: 1, Event: &sandboxiov1.WatchEvent{Op: op, Path: p, TimeUnixNano: time.Now().UnixNano()}}
	}
	create := sandboxiov1.WatchOp_WATCH_OP_CREATE
	for name, msgs := range map[string][]*sandboxiov1.WatchDirectoryResponse{
		"an event first":        {ev(create, "top/a")},
		"in place without dir":  {{}},
		"more dirs than asked":  {ready, {Dirs: 11, Event: ev(create, "top/a").Event}},
		"no event":              {ready, {Dirs: 1}},
		"an unknown kind":       {ready, ev(9, "top/a")},
		"an unspecified kind":   {ready, ev(0, "top/a")},
		"an absolute path":      {ready, ev(create, "/etc/passwd")},
		"an escaping path":      {ready, ev(create, "top/../../etc")},
		"a path elsewhere":      {ready, ev(create, "other/a")},
		"a prefix, not a dir":   {ready, ev(create, "topx/a")},
		"a path not clean":      {ready, ev(create, "top//a")},
		"the directory itself":  {ready, ev(create, "top")},
		"a path over the size":  {ready, ev(create, "top/"+strings.Repeat("a", 8<<10))},
		"the end without error": nil,
	} {
		t.Run(name, func(t *testing.T) {
			end := sendWatch(nil, msgs...)
			if msgs == nil { // in place, then the end, OK
				end = func(s grpc.ServerStreamingServer[sandboxiov1.WatchDirectoryResponse]) error { return s.Send(ready) }
			}
			c := startHostile(t, &hostileSidecar{watch: end})
			w := startClientWatch(t, c, "top", true, 10)
			wantBounded(t, "WatchDirectory", w.end(t, name), ErrBadResponse)
		})
	}

	t.Run("a flood", func(t *testing.T) {
		const sent = 4 * WatchEventBurst
		msgs := []*sandboxiov1.WatchDirectoryResponse{ready}
		for range sent {
			msgs = append(msgs, ev(create, "top/a"))
		}
		c := startHostile(t, &hostileSidecar{watch: sendWatch(withReason(codes.NotFound, "NOT_FOUND", "gone"), msgs...)})
		start := time.Now()
		var events int
		var dropped uint64
		err := c.WatchDirectory(ctxT(t), "top", false, 10, func(u WatchUpdate) error {
			if u.Event != nil {
				events++
			}
			dropped += u.Dropped
			return nil
		})
		elapsed := time.Since(start)
		if !errors.Is(err, core.ErrNotFound) {
			t.Errorf("the flood's end: %v; want NOT_FOUND", err)
		}
		if limit := WatchEventBurst + int(elapsed.Seconds()*WatchEventRate) + 1; events > limit || events < WatchEventBurst {
			t.Errorf("%d events passed on in %s; want %d to %d", events, elapsed, WatchEventBurst, limit)
		}
		if dropped == 0 || uint64(events)+dropped > sent {
			t.Errorf("%d events passed on and %d counted dropped of %d sent; want some dropped, no more than sent", events, dropped, sent)
		}
	})
}
