package iolog

import (
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"

	"github.com/fsnotify/fsnotify"

	"github.com/sandboxd/sandboxd/ioproto"
)

// eventsSuffix ends every events file's name.
var eventsSuffix = ioproto.EventsFileName("")

// Watcher tells followers when a command's events file changes. It holds
// one inotify instance (fsnotify.Watcher) for all sandboxes, with one
// watch per sandbox io/out directory that has ever been followed, and fans
// events out to the subscriptions of the command whose file changed.
//
// Notifications carry no data: a subscriber re-reads its file from where it
// stopped, so coalescing many writes into one wake-up loses nothing.
type Watcher struct {
	w   *fsnotify.Watcher
	log *slog.Logger

	mu      sync.Mutex
	dirs    map[string]map[string]map[*Subscription]struct{} // out dir → command ID → subscriptions
	watched map[string]bool                                  // out dirs with an inotify watch

	done chan struct{} // closed when the event loop has ended
}

// Subscription is one follower's wake-up channel.
type Subscription struct {
	// C receives a value (coalesced, never blocking the watcher) when the
	// command's events file may have changed, or when the watch broke.
	C      <-chan struct{}
	ch     chan struct{} // C, for sending
	w      *Watcher
	dir    string
	cmd    string
	closed bool
}

// NewWatcher starts a watcher; log receives its warnings. Close it.
func NewWatcher(log *slog.Logger) (*Watcher, error) {
	w, err := fsnotify.NewBufferedWatcher(1024)
	if err != nil {
		return nil, err
	}
	ow := &Watcher{
		w:       w,
		log:     log,
		dirs:    make(map[string]map[string]map[*Subscription]struct{}),
		watched: make(map[string]bool),
		done:    make(chan struct{}),
	}
	go ow.loop()
	return ow, nil
}

// Subscribe registers interest in command cmd's events file in d,
// starting the watch of d's out directory if needed. Subscribe before
// reading the file, so that no change between the read and the wait is
// missed; Cancel the subscription when done.
func (ow *Watcher) Subscribe(d *Dir, cmd string) *Subscription {
	outDir := d.outDir()
	ow.mu.Lock()
	defer ow.mu.Unlock()
	if !ow.watched[outDir] {
		// A failed Add (directory missing, inotify watch limit) is not fatal:
		// followers still re-check periodically, and the next subscription
		// tries again.
		if err := ow.w.Add(outDir); err != nil {
			ow.log.Warn("cannot watch output directory; followers fall back to periodic checks", "dir", outDir, "error", err)
		} else {
			ow.watched[outDir] = true
		}
	}
	byCmd := ow.dirs[outDir]
	if byCmd == nil {
		byCmd = make(map[string]map[*Subscription]struct{})
		ow.dirs[outDir] = byCmd
	}
	subs := byCmd[cmd]
	if subs == nil {
		subs = make(map[*Subscription]struct{})
		byCmd[cmd] = subs
	}
	ch := make(chan struct{}, 1)
	s := &Subscription{C: ch, ch: ch, w: ow, dir: outDir, cmd: cmd}
	subs[s] = struct{}{}
	return s
}

// Cancel ends the subscription. The directory's watch stays: the sandbox is
// likely to be followed again soon, and Forget removes it with the sandbox.
func (s *Subscription) Cancel() {
	ow := s.w
	ow.mu.Lock()
	defer ow.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	if byCmd := ow.dirs[s.dir]; byCmd != nil {
		delete(byCmd[s.cmd], s)
		if len(byCmd[s.cmd]) == 0 {
			delete(byCmd, s.cmd)
		}
	}
}

// Forget drops the watch of d's out directory, when its sandbox is
// destroyed. Remaining subscribers are woken (they notice the sandbox is
// gone).
func (ow *Watcher) Forget(d *Dir) {
	outDir := d.outDir()
	ow.mu.Lock()
	defer ow.mu.Unlock()
	for _, subs := range ow.dirs[outDir] {
		for s := range subs {
			notify(s)
		}
	}
	delete(ow.dirs, outDir)
	if !ow.watched[outDir] {
		return
	}
	delete(ow.watched, outDir)
	// The watch may already be gone with the directory (IN_IGNORED).
	if err := ow.w.Remove(outDir); err != nil && !errors.Is(err, fsnotify.ErrNonExistentWatch) {
		ow.log.Debug("remove watch", "dir", outDir, "error", err)
	}
}

// Watching reports how many subscriptions are active; tests check that
// followers clean up after themselves.
func (ow *Watcher) Watching() int {
	ow.mu.Lock()
	defer ow.mu.Unlock()
	n := 0
	for _, byCmd := range ow.dirs {
		for _, subs := range byCmd {
			n += len(subs)
		}
	}
	return n
}

// Close stops the watcher and waits for its loop to end.
func (ow *Watcher) Close() error {
	err := ow.w.Close()
	<-ow.done
	return err
}

func (ow *Watcher) loop() {
	defer close(ow.done)
	for {
		select {
		case ev, ok := <-ow.w.Events:
			if !ok {
				return
			}
			// Routing is a map lookup by name. Subscriptions exist only for
			// valid command IDs, so a name that is not one (a temporary file,
			// an artifact, anything the sandbox made up) matches nothing
			// without being validated; this runs for every write the driver
			// makes.
			dir, name := filepath.Split(ev.Name)
			cmd, ok := strings.CutSuffix(name, eventsSuffix)
			if !ok {
				continue // temporary files and artifacts: the events line follows them
			}
			ow.mu.Lock()
			for s := range ow.dirs[strings.TrimSuffix(dir, string(filepath.Separator))][cmd] {
				notify(s)
			}
			ow.mu.Unlock()
		case err, ok := <-ow.w.Errors:
			if !ok {
				return
			}
			// Typically the kernel queue overflowed: events were lost, so
			// everyone re-reads.
			ow.log.Warn("file watcher error; waking all followers", "error", err)
			ow.mu.Lock()
			for _, byCmd := range ow.dirs {
				for _, subs := range byCmd {
					for s := range subs {
						notify(s)
					}
				}
			}
			ow.mu.Unlock()
		}
	}
}

// notify wakes s without blocking; a pending wake-up already covers this one.
func notify(s *Subscription) {
	select {
	case s.ch <- struct{}{}:
	default:
	}
}
