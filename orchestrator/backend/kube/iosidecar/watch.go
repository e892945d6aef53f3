package iosidecar

import (
	"context"
	"io"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"

	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/wswatch"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	sandboxiov1 "github.com/sandboxd/sandboxd/proto/sandboxio/v1"
)

// Watches: the sidecar sees /workspace, so the watch runs here
// (orchestrator/backend/hostio/wswatch, the Docker backend's on the host) and its
// updates stream to sandboxd, which counts the directories against its
// caps and bounds what it accepts.

// Bounds of a watch, both ends.
const (
	// MaxWatchCalls caps the sidecar's watches in progress, whatever
	// sandboxd's caps say: each holds an inotify instance of the node's
	// (128 per user by default).
	MaxWatchCalls = 32
	// MaxWatchDirs caps the directories one watch of the sidecar's holds,
	// whatever the request's max_dirs says.
	MaxWatchDirs = 8000
	// maxWatchMsg bounds one message of a watch as the Client receives it:
	// a path of core.MaxPathLen and its envelope.
	maxWatchMsg = core.MaxPathLen + 1<<10
	// WatchEventRate and WatchEventBurst bound the events per second the
	// Client passes on from one watch; more are dropped and counted, as a
	// slow reader's are: a sidecar flooding sandboxd costs it the parsing
	// only.
	WatchEventRate  = 2000
	WatchEventBurst = 2000
)

// WatchDirectory runs a watch (wswatch.Watch) over the workspace and
// streams its updates, with the directories it watches in each.
func (s *Server) WatchDirectory(req *sandboxiov1.WatchDirectoryRequest, stream grpc.ServerStreamingServer[sandboxiov1.WatchDirectoryResponse]) error {
	rel, err := core.CleanPath(req.GetPath()) // the sidecar's own check (package doc)
	if err != nil {
		return err
	}
	maxDirs := int(min(req.GetMaxDirs(), MaxWatchDirs))
	if maxDirs == 0 {
		return core.Invalidf("max_dirs is 0; a watch needs at least one directory")
	}
	if n := s.watches.Add(1); n > MaxWatchCalls {
		s.watches.Add(-1)
		return core.Exhaustedf("watch %s: the io sidecar runs %d watches already; the limit is %d", core.DisplayPath(rel), n-1, MaxWatchCalls)
	}
	defer s.watches.Add(-1)
	root, err := s.workspace()
	if err != nil {
		return err
	}
	defer root.Close()
	ctx, cancel := context.WithCancelCause(stream.Context())
	defer cancel(nil)
	go func() {
		select {
		case <-ctx.Done():
		case <-s.closing:
			cancel(core.Unavailablef("the io sidecar is shutting down; watch again"))
		}
	}()
	var dirs atomic.Int32
	err = wswatch.Watch(ctx, root, rel, wswatch.Options{
		Recursive:  req.GetRecursive(),
		MaxDirs:    maxDirs,
		TakeDir:    func() error { dirs.Add(1); return nil },
		ReleaseDir: func() { dirs.Add(-1) },
		Log:        s.log,
	}, func(u core.WatchUpdate) error {
		resp := &sandboxiov1.WatchDirectoryResponse{Dropped: u.Dropped, Dirs: uint32(max(dirs.Load(), 0))}
		if e := u.Event; e != nil {
			resp.Event = &sandboxiov1.WatchEvent{Op: sandboxiov1.WatchOp(e.Op), Path: wireString(e.Path), TimeUnixNano: unixNano(e.Time)}
		}
		return stream.Send(resp)
	})
	if err != nil && stream.Context().Err() == nil {
		s.log.Debug("watch ended", "path", rel, "error", err)
	}
	return err
}

// WatchUpdate is one update of a watch as the Client passes it on: the
// domain's, and the directories the watch holds in the sidecar.
type WatchUpdate struct {
	core.WatchUpdate
	// Dirs is how many directories the watch holds now, at most the
	// request's maxDirs.
	Dirs int
}

// WatchDirectory watches directory rel (core.CleanPath's form) and calls
// fn with each update until ctx ends, the watch ends (its error) or fn
// fails (its error). The first update has no event. What the sidecar
// sends is checked: each message at most maxWatchMsg bytes, the first
// without an event and the others with one, an event's kind one of the
// domain's, its path clean, relative and under rel, its time a sane one
// (else the time it arrived), the directories at most maxDirs; anything
// else is ErrBadResponse. Events beyond WatchEventRate a second are
// dropped and counted in the next update's Dropped.
func (c *Client) WatchDirectory(ctx context.Context, rel string, recursive bool, maxDirs int, fn func(WatchUpdate) error) error {
	if rel == "" {
		rel = "." // the workspace, as core.CleanPath names it
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.rpc.WatchDirectory(ctx, &sandboxiov1.WatchDirectoryRequest{Path: rel, Recursive: recursive, MaxDirs: uint32(maxDirs)},
		grpc.MaxCallRecvMsgSize(maxWatchMsg))
	if err != nil {
		return errorOf(ctx, callWatch, err)
	}
	var dropped uint64
	tokens, last := float64(WatchEventBurst), time.Now()
	for first := true; ; first = false {
		msg, err := stream.Recv()
		if err == io.EOF {
			return badResponse("watch %s: the stream ended without an error", core.DisplayPath(rel))
		}
		if err != nil {
			return errorOf(ctx, callWatch, err)
		}
		u, err := checkWatch(rel, maxDirs, first, msg)
		if err != nil {
			return err
		}
		dropped = addSat(dropped, u.Dropped)
		if u.Event != nil {
			now := time.Now()
			tokens = min(WatchEventBurst, tokens+now.Sub(last).Seconds()*WatchEventRate)
			last = now
			if tokens < 1 {
				dropped = addSat(dropped, 1)
				continue
			}
			tokens--
		}
		u.Dropped, dropped = dropped, 0
		if err := fn(u); err != nil {
			return err
		}
	}
}

// addSat is a+b, saturated.
func addSat(a, b uint64) uint64 {
	if a+b < a {
		return ^uint64(0)
	}
	return a + b
}

// checkWatch checks one message of a watch of rel and turns it into an
// update.
func checkWatch(rel string, maxDirs int, first bool, msg *sandboxiov1.WatchDirectoryResponse) (WatchUpdate, error) {
	show := core.DisplayPath(rel)
	u := WatchUpdate{WatchUpdate: core.WatchUpdate{Dropped: msg.GetDropped()}, Dirs: int(msg.GetDirs())}
	switch {
	case u.Dirs > maxDirs:
		return WatchUpdate{}, badResponse("watch %s: %d directories watched; the call may watch %d", show, u.Dirs, maxDirs)
	case first && msg.GetEvent() != nil:
		return WatchUpdate{}, badResponse("watch %s: an event before the watch was in place", show)
	case first && u.Dirs == 0:
		return WatchUpdate{}, badResponse("watch %s: in place without a directory", show)
	case first:
		return u, nil
	case msg.GetEvent() == nil:
		return WatchUpdate{}, badResponse("watch %s: an update without an event", show)
	}
	e := msg.GetEvent()
	op := core.WatchOp(e.GetOp())
	if op < core.WatchCreate || op > core.WatchRename {
		return WatchUpdate{}, badResponse("watch %s: event kind %d is not one of the domain's", show, e.GetOp())
	}
	p := e.GetPath()
	clean, err := core.CleanPath(p)
	if !utf8.ValidString(p) || err != nil || clean != p || strings.HasPrefix(p, "/") || p == rel ||
		(rel != "." && !strings.HasPrefix(p, rel+"/")) {
		return WatchUpdate{}, badResponse("watch %s: event path %q is not a clean path under the watched directory", show, core.Truncate(p, 256))
	}
	t := timeOf(e.GetTimeUnixNano())
	if t.Year() < 2000 || t.Year() > 9999 {
		t = time.Now()
	}
	u.Event = &core.WatchEvent{Op: op, Path: p, Time: t.UTC()}
	return u, nil
}
