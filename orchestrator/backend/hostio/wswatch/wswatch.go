// Package wswatch watches a directory of a sandbox's workspace for
// changes (WatchDirectory), on whichever side sees the workspace: the
// Docker backend on the host, the io sidecar inside a Pod on Kubernetes.
// The watch is confined to the workspace and bounded (directories per
// call, the caller's other caps through Options, a queue for a slow
// reader), so both backends report, coalesce, drop and refuse alike.
package wswatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/wspath"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

const (
	// QueueLen is how many events wait for a slow reader; more are
	// dropped and counted.
	QueueLen = 1000
	// WriteWindow is how long writes to one path are merged into one event.
	WriteWindow = 100 * time.Millisecond
)

// How a watch stays inside the workspace: fsnotify (inotify) watches a path,
// and the kernel resolves that path, following symlinks wherever they lead.
// A host path into the workspace is therefore never given to it: each
// directory is opened through the workspace's os.Root (which refuses any
// resolution outside it, symlinks included) as a descriptor, and the watch is added on
// /proc/self/fd/N, which names exactly that open directory, wherever the
// sandbox has moved it or whatever it has put in its place since. The
// descriptor stays open while the directory is watched, so N is not reused
// for anything else, and the watch's events (named /proc/self/fd/N/<name>)
// map back to the directory's workspace path. New subdirectories are opened
// the same way (a symbolic link is never watched: os.Root's Lstat must say
// directory, and a link swapped in meanwhile is resolved by os.Root, inside
// the workspace, or refused). A watched directory that is removed or renamed away stops being
// watched (with its watched descendants), so paths are never reported under
// a stale name.

// dirWatch is one WatchDirectory call's state, owned by its event loop.
type dirWatch struct {
	opts      Options
	root      *os.Root
	w         *fsnotify.Watcher
	recursive bool
	top       string // the watched directory's workspace path

	dirs  map[string]*os.File // /proc/self/fd/N -> the open directory
	rels  map[string]string   // /proc/self/fd/N -> its workspace path
	byRel map[string]string   // workspace path -> /proc/self/fd/N

	out     chan core.WatchEvent
	dropped atomic.Uint64
	writes  map[string]time.Time // pending coalesced writes: path -> first
}

// Options says how a watch is bounded and what it may not report.
type Options struct {
	// Recursive watches subdirectories too, including those created later.
	Recursive bool
	// MaxDirs caps the directories the call watches
	// (core.WatchDirsPerCallReached past it); at least 1.
	MaxDirs int
	// TakeDir reserves one more directory against the caller's other caps
	// (per sandbox, tenant, server); its error refuses the directory and
	// ends the watch. ReleaseDir gives one back. nil: none.
	TakeDir    func() error
	ReleaseDir func()
	// Log receives the watch's warnings; nil discards them.
	Log *slog.Logger
}

// Watch reports changes under directory rel of the workspace root to fn
// until ctx ends (returning context.Cause(ctx), so that a caller can end
// the watch with the domain's reason), the watched directory goes
// (ErrNotFound), a cap is reached (ErrResourceExhausted naming it) or fn
// fails (returning its error). fn is first called with no event once the
// watch is in place. Writes to one path within WriteWindow are reported
// once; at most QueueLen events wait for fn, later ones are dropped and
// counted in the next update's Dropped. Uploads in progress
// (wspath.UploadTempPrefix) are never reported.
func Watch(ctx context.Context, root *os.Root, rel string, opts Options, fn func(core.WatchUpdate) error) error {
	if opts.TakeDir == nil || opts.ReleaseDir == nil {
		opts.TakeDir, opts.ReleaseDir = func() error { return nil }, func() {}
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	show := core.DisplayPath(rel)
	st, err := root.Stat(rel)
	if err != nil {
		return wspath.FSError("watch", show, err)
	}
	if !st.IsDir() {
		return core.Invalidf("watch %s: not a directory", show)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		if errors.Is(err, syscall.EMFILE) {
			return fmt.Errorf("watch %s: %w", show, core.HostWatchLimit("inotify instances (fs.inotify.max_user_instances)"))
		}
		return fmt.Errorf("watch %s: %w", show, err)
	}
	dw := &dirWatch{
		opts: opts, root: root, w: w, recursive: opts.Recursive, top: rel,
		dirs: map[string]*os.File{}, rels: map[string]string{}, byRel: map[string]string{},
		out: make(chan core.WatchEvent, QueueLen), writes: map[string]time.Time{},
	}
	defer dw.close()
	if err := dw.add(rel, true, nil); err != nil {
		return err
	}

	loopCtx, cancel := context.WithCancel(ctx)
	loopErr := make(chan error, 1)
	loopDone := make(chan struct{})
	go func() { defer close(loopDone); loopErr <- dw.loop(loopCtx) }()
	defer func() { cancel(); <-loopDone }() // before dw.close: the loop owns dw

	if err := fn(core.WatchUpdate{}); err != nil {
		return err
	}
	for {
		select {
		case ev := <-dw.out:
			if err := fn(core.WatchUpdate{Event: &ev, Dropped: dw.dropped.Swap(0)}); err != nil {
				return err
			}
		case err := <-loopErr:
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return err
		}
	}
}

// loop turns fsnotify's events into WatchEvents until ctx ends, the
// sandbox goes, or a bound is passed.
func (dw *dirWatch) loop(ctx context.Context) error {
	tick := time.NewTicker(WriteWindow / 2)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case now := <-tick.C:
			// The directory's descriptor keeps inotify from reporting its
			// removal (IN_DELETE_SELF waits for the last reference), and
			// nothing watches its parent: a link count of 0 tells.
			if err := dw.topGone(); err != nil {
				return err
			}
			for p, first := range dw.writes {
				if now.Sub(first) >= WriteWindow {
					delete(dw.writes, p)
					dw.emit(core.WatchEvent{Op: core.WatchWrite, Path: p, Time: first})
				}
			}
		case err, ok := <-dw.w.Errors:
			if !ok {
				return errors.New("watch: inotify closed")
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				dw.dropped.Add(1) // the kernel's queue overflowed: some events are lost
				continue
			}
			dw.opts.Log.Warn("watch error", "error", err)
		case ev, ok := <-dw.w.Events:
			if !ok {
				return errors.New("watch: inotify closed")
			}
			if err := dw.handle(ev); err != nil {
				return err
			}
		}
	}
}

// handle maps one fsnotify event.
func (dw *dirWatch) handle(ev fsnotify.Event) error {
	now := time.Now()
	if rel, ok := dw.rels[ev.Name]; ok {
		// The watched directory itself was removed or moved: its parent,
		// when watched, reports it; either way it is no longer watched.
		if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
			dw.drop(rel)
			if rel == dw.top {
				return core.NotFoundf("watch %s: the watched directory was removed or moved", core.DisplayPath(rel))
			}
		}
		return nil
	}
	dir, name := filepath.Split(ev.Name)
	parent, ok := dw.rels[strings.TrimSuffix(dir, "/")]
	if !ok {
		return nil // from a directory no longer watched
	}
	if strings.HasPrefix(name, wspath.UploadTempPrefix) {
		return nil // an upload in progress; its rename shows as a CREATE
	}
	rel := path.Join(parent, name)
	switch {
	case ev.Has(fsnotify.Create):
		dw.flushWrite(rel)
		created := core.WatchEvent{Op: core.WatchCreate, Path: rel, Time: now}
		if dw.recursive {
			if st, err := dw.root.Lstat(rel); err == nil && st.IsDir() {
				return dw.add(rel, false, &created)
			}
		}
		dw.emit(created)
	case ev.Has(fsnotify.Remove):
		dw.flushWrite(rel)
		dw.drop(rel)
		dw.emit(core.WatchEvent{Op: core.WatchRemove, Path: rel, Time: now})
	case ev.Has(fsnotify.Rename):
		dw.flushWrite(rel)
		dw.drop(rel)
		dw.emit(core.WatchEvent{Op: core.WatchRename, Path: rel, Time: now})
	case ev.Has(fsnotify.Write):
		if _, pending := dw.writes[rel]; !pending {
			if len(dw.writes) >= QueueLen {
				dw.dropped.Add(1)
				return nil
			}
			dw.writes[rel] = now
		}
	}
	return nil
}

// topGone returns ErrNotFound once the watched directory has been removed.
func (dw *dirWatch) topGone() error {
	key, ok := dw.byRel[dw.top]
	if !ok {
		return core.NotFoundf("watch %s: the watched directory was removed or moved", core.DisplayPath(dw.top))
	}
	st, err := dw.dirs[key].Stat()
	if err != nil {
		return fmt.Errorf("watch %s: %w", core.DisplayPath(dw.top), err)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Nlink == 0 {
		return core.NotFoundf("watch %s: the watched directory was removed or moved", core.DisplayPath(dw.top))
	}
	return nil
}

// flushWrite emits rel's pending write, so it comes before what follows.
func (dw *dirWatch) flushWrite(rel string) {
	if first, ok := dw.writes[rel]; ok {
		delete(dw.writes, rel)
		dw.emit(core.WatchEvent{Op: core.WatchWrite, Path: rel, Time: first})
	}
}

// emit queues ev, or counts it as dropped when the reader is behind.
func (dw *dirWatch) emit(ev core.WatchEvent) {
	select {
	case dw.out <- ev:
	default:
		dw.dropped.Add(1)
	}
}

// add watches the directory rel (and, with recursive, its subdirectories).
// top is the directory the caller named. created, for a directory that
// appeared under a watched one, is its CREATE event: it is emitted once
// the directory's own watch is in place (so a client that saw it can rely
// on changes inside being reported), and what the directory already holds
// is then reported as CREATE events too (a `mkdir -p a/b/c` is over before
// a/ is watched).
func (dw *dirWatch) add(rel string, top bool, created *core.WatchEvent) error {
	announced := false
	announce := func() {
		if created != nil && !announced {
			announced = true
			dw.emit(*created)
		}
	}
	defer announce() // whatever happens below, the CREATE happened
	if _, ok := dw.byRel[rel]; ok {
		return nil
	}
	show := core.DisplayPath(rel)
	if perCall := dw.opts.MaxDirs; len(dw.dirs) >= perCall {
		return fmt.Errorf("watch %s: %w", show, core.WatchDirsPerCallReached(perCall))
	}
	if err := dw.opts.TakeDir(); err != nil {
		return fmt.Errorf("watch %s: %w", show, err)
	}
	release := dw.opts.ReleaseDir
	// os.Root keeps every step inside the workspace (a link swapped in
	// since the Lstat is resolved inside it, or refused); O_DIRECTORY: a
	// directory, not a file swapped in.
	f, err := dw.root.OpenFile(rel, os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		release()
		if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
			return fmt.Errorf("watch %s: %w", show, core.HostWatchLimit("open files (sandboxd's RLIMIT_NOFILE, fs.file-max)"))
		}
		if top {
			return wspath.FSError("watch", show, err)
		}
		return nil // gone or replaced since its event: nothing to watch
	}
	key := fmt.Sprintf("/proc/self/fd/%d", f.Fd())
	if err := dw.w.Add(key); err != nil {
		f.Close()
		release()
		if errors.Is(err, syscall.ENOSPC) {
			return fmt.Errorf("watch %s: %w", show, core.HostWatchLimit("inotify watches (fs.inotify.max_user_watches)"))
		}
		if top {
			return fmt.Errorf("watch %s: %w", show, err)
		}
		return nil
	}
	dw.dirs[key], dw.rels[key], dw.byRel[rel] = f, rel, key
	announce()
	if !dw.recursive {
		return nil
	}
	entries, err := f.ReadDir(-1)
	if err != nil {
		return nil
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), wspath.UploadTempPrefix) {
			continue
		}
		sub := path.Join(rel, e.Name())
		var subCreated *core.WatchEvent
		if created != nil {
			subCreated = &core.WatchEvent{Op: core.WatchCreate, Path: sub, Time: time.Now()}
		}
		if !e.Type().IsDir() {
			if subCreated != nil {
				dw.emit(*subCreated)
			}
			continue
		}
		if err := dw.add(sub, false, subCreated); err != nil {
			return err
		}
	}
	return nil
}

// drop stops watching rel and every watched directory under it.
func (dw *dirWatch) drop(rel string) {
	for r, key := range dw.byRel {
		if r == rel || strings.HasPrefix(r, rel+"/") || rel == "." {
			dw.unwatch(r, key)
		}
	}
}

func (dw *dirWatch) unwatch(rel, key string) {
	dw.w.Remove(key) // ErrNonExistentWatch when inotify dropped it already
	dw.dirs[key].Close()
	delete(dw.dirs, key)
	delete(dw.rels, key)
	delete(dw.byRel, rel)
	dw.opts.ReleaseDir()
}

// close ends the watch and gives back its directories.
func (dw *dirWatch) close() {
	dw.w.Close()
	for rel, key := range dw.byRel {
		dw.dirs[key].Close()
		delete(dw.byRel, rel)
		dw.opts.ReleaseDir()
	}
}
