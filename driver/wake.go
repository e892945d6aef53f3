package driver

import (
	"context"
	"log/slog"
	"os"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Wake modes, as reported in /io/driver.json.
const (
	wakeInotify = "inotify"
	wakePoll    = "poll"
)

const (
	// watchdogEvery is how often the inotify watchdog compares the log's size
	// with what the reader has seen.
	watchdogEvery = 250 * time.Millisecond
	// watchdogRecheck gives an in-flight inotify event time to arrive before
	// the watchdog concludes that inotify is blind.
	watchdogRecheck = 20 * time.Millisecond
	// pollFast and pollIdle are the polling intervals while commands arrive
	// and after pollIdleAfter without any.
	pollFast      = 2 * time.Millisecond
	pollIdle      = 50 * time.Millisecond
	pollIdleAfter = time.Second
)

// File system magic numbers (statfs f_type) of mounts whose content can
// change without the local kernel's inotify hearing of it: network and
// user-space file systems, and gVisor's gofer mounts, which appear as 9p.
var remoteFSMagic = map[int64]string{
	0x01021997: "9p",
	0x65735546: "fuse",
	0x6969:     "nfs",
	0x517b:     "smb",
	0xfe534d42: "smb2",
	0xff534d42: "cifs",
	0x00c36400: "ceph",
}

// waker tells the reader when the command log may have grown. It prefers
// inotify; it polls when inotify cannot work here (probed at start-up) or
// turns out not to see the host's writes (noticed by a watchdog), as under
// gVisor (google/gvisor#8089).
type waker struct {
	log     *slog.Logger
	path    string
	watcher *fsnotify.Watcher // nil when polling

	// observedSize is the log's size when the reader last caught up.
	observedSize int64
	lastActive   time.Time
	sawEvent     bool
	watchdog     *time.Ticker
	poll         *time.Timer
}

// newWaker chooses the wake mode. mode is "auto", "inotify" or "poll";
// "inotify" disables the watchdog (for tests of the inotify path only).
func newWaker(mode, ioDir, stdinPath string, log *slog.Logger) *waker {
	w := &waker{log: log, path: stdinPath, lastActive: time.Now()}
	if mode == wakePoll {
		w.log.Info("wake-ups: polling (forced)")
		return w.startPolling()
	}
	if mode == "auto" {
		var sfs syscall.Statfs_t
		if err := syscall.Statfs(ioDir, &sfs); err == nil {
			if name, remote := remoteFSMagic[int64(sfs.Type)]; remote {
				w.log.Info("wake-ups: polling, the log is on a file system inotify cannot follow", "fs", name)
				return w.startPolling()
			}
		}
	}
	watcher, err := fsnotify.NewWatcher()
	if err == nil {
		err = watcher.Add(stdinPath)
		if err != nil {
			watcher.Close()
		}
	}
	if err != nil {
		w.log.Warn("wake-ups: polling, inotify is unavailable", "err", err)
		return w.startPolling()
	}
	w.watcher = watcher
	if mode == "auto" {
		w.watchdog = time.NewTicker(watchdogEvery)
	}
	return w
}

func (w *waker) startPolling() *waker {
	w.poll = time.NewTimer(pollFast)
	return w
}

func (w *waker) mode() string {
	if w.watcher != nil {
		return wakeInotify
	}
	return wakePoll
}

// observed records the log's size after the reader caught up.
func (w *waker) observed(size int64) {
	if size != w.observedSize {
		w.lastActive = time.Now()
	}
	w.observedSize = size
}

// wait blocks until the log may have grown; it returns false when ctx ends.
// active says whether the last read found new records.
func (w *waker) wait(ctx context.Context, active bool) bool {
	if active {
		w.lastActive = time.Now()
	}
	if w.watcher == nil {
		interval := pollFast
		if time.Since(w.lastActive) > pollIdleAfter {
			interval = pollIdle
		}
		w.poll.Reset(interval)
		select {
		case <-ctx.Done():
			return false
		case <-w.poll.C:
			return true
		}
	}
	var watchdog <-chan time.Time
	if w.watchdog != nil {
		watchdog = w.watchdog.C
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case _, ok := <-w.watcher.Events:
			if !ok {
				w.switchToPolling("inotify watcher closed")
				return true
			}
			w.sawEvent = true
			return true
		case err := <-w.watcher.Errors:
			// An overflow loses events, not data: read to catch up.
			w.log.Warn("inotify error; reading to catch up", "err", err)
			return true
		case <-watchdog:
			if w.sawEvent {
				w.sawEvent = false
				continue
			}
			if !w.grewUnseen() {
				continue
			}
			// Give an event that is on its way a moment to arrive.
			select {
			case <-ctx.Done():
				return false
			case <-w.watcher.Events:
				w.sawEvent = true
				return true
			case <-time.After(watchdogRecheck):
			}
			w.switchToPolling("the command log grew without an inotify event")
			return true
		}
	}
}

// grewUnseen reports whether the log is larger than the reader last saw.
func (w *waker) grewUnseen() bool {
	st, err := os.Stat(w.path)
	return err == nil && st.Size() > w.observedSize
}

func (w *waker) switchToPolling(why string) {
	w.log.Warn("wake-ups: switching to polling for good", "why", why)
	w.close()
	w.watcher = nil
	w.startPolling()
}

func (w *waker) close() {
	if w.watcher != nil {
		w.watcher.Close()
	}
	if w.watchdog != nil {
		w.watchdog.Stop()
		w.watchdog = nil
	}
	if w.poll != nil {
		w.poll.Stop()
	}
}
