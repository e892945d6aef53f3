// Package iolog is sandboxd's half of the /io protocol (ioproto, whose
// PROTOCOL.md is normative): for each sandbox, it appends records to the
// command log (io/stdin), follows commands' events files (io/out: the
// follow loop, Events.Follow), and wakes followers when those files
// change. The same code runs on the host under the Docker backend and
// inside the sandbox's Pod, in the io sidecar, under the Kubernetes
// backend.
//
// Everything under io/ is writable by the sandboxed code, which is hostile
// by assumption: every file is opened through an os.Root and checked, its
// size and layout bounded before it is read (openBounded, safeopen.go;
// the bounds are named constants next to their readers), no lock is held
// while reading it, and every read stops when its caller's context ends or
// the Dir is closed. Failures that mean the sandbox tampered with its files
// wrap ErrTampered. Errors are plain errors or this package's sentinels;
// each host decides what they mean for its callers (the Docker backend in
// the domain's errors, the io sidecar in the reasons of its statuses).
package iolog

import (
	"errors"
	"path/filepath"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

// Dir is one sandbox's io/ directory on the host, as sandboxd uses it. It
// is safe for concurrent use. sandboxd is the command log's only writer
// (the state directory's lock guarantees one sandboxd), so Dir keeps an
// index of the command IDs in the log, built from the log the first time
// it is needed and kept up to date by its own appends: idempotency costs
// one map lookup.
//
// Locking: mu is never held while reading a file the sandbox controls. The
// log is loaded without it (one load at a time, see ensureLoaded), so a
// forged log slows down only the callers that need that log, and never a
// caller that merely takes mu (HoldAppends, from a Delete).
type Dir struct {
	path string
	// done is closed by Close: loads and readers of this directory stop
	// at their next check.
	done      chan struct{}
	closeOnce sync.Once

	// mu serialises appends (the protocol requires writers to serialise
	// per sandbox) and guards the fields below.
	mu sync.Mutex
	// ids maps each command ID in the log to where its record ends (to
	// tell a queued command from one whose output was pruned) and to the
	// digest of what it runs (to tell a retry from a conflicting re-use of
	// the ID); nil until the log is loaded.
	ids map[string]logEntry
	// order lists the IDs of ids in log order (ListCommands' pages).
	order []string
	// loadErr is a final failure to load the log: the sandbox tampered
	// with it, and it is not read again.
	loadErr error
	// loading is closed when the load in progress ends; nil when none is.
	loading chan struct{}
	// readers counts open Events and loads in progress (files open under
	// io/); idle is closed when it drops to zero after Close.
	readers int
	idle    chan struct{}
	// size is the log's length as far as we know it.
	size int64
	// partial is set when the log ends in an incomplete line (a crash in
	// the middle of a write): the next append starts with a newline so
	// that our record is not glued to the debris.
	partial bool
	// seal (SealWhileHibernating) refuses new commands while pendingSnap,
	// the ID of the log's last snapshot record, has no restore record
	// after it.
	seal        bool
	pendingSnap string
}

// SealWhileHibernating makes d refuse new commands (exec and context
// records, and a snapshot other than the pending one) with ErrHibernating
// from a snapshot record until the restore record after it: what a
// command appended between the two would see is lost with the sandbox's
// processes, or runs before its globals are restored. The seal is the
// log's own content, so it holds across restarts of the writer and of
// the sandbox. Input and interrupts for commands already in the log are
// still taken: they help the command the snapshot waits for to end. Call
// it before d is used. The io sidecar seals its log (a Pod's hibernation
// spans two Pods and any replica); the Docker backend holds its appends
// itself.
func (d *Dir) SealWhileHibernating() { d.seal = true }

// New returns the Dir for the io/ directory at path. It does not touch
// the file system: the log is read when first needed.
func New(path string) *Dir {
	return &Dir{path: path, done: make(chan struct{}), idle: make(chan struct{})}
}

// ErrClosed: the Dir was closed (its sandbox is being deleted).
var ErrClosed = errors.New("sandbox io directory closed")

// Close stops every load and reader of the directory at its next check
// (between lines or chunks), refuses new ones with ErrClosed, and waits up
// to timeout for those open to release their files, so the volume can be
// unmounted. It reports whether none is left open.
func (d *Dir) Close(timeout time.Duration) bool {
	d.closeOnce.Do(func() {
		d.mu.Lock()
		close(d.done)
		if d.readers == 0 {
			close(d.idle)
		}
		d.mu.Unlock()
	})
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-d.idle:
		return true
	case <-t.C:
		return false
	}
}

// closed reports whether Close was called.
func (d *Dir) closed() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// addReader counts a file about to be opened under io/; it fails once the
// Dir is closed. Call with mu held.
func (d *Dir) addReaderLocked() error {
	if d.closed() {
		return ErrClosed
	}
	d.readers++
	return nil
}

// doneReader uncounts a reader.
func (d *Dir) doneReader() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.readers--
	if d.readers == 0 && d.closed() {
		close(d.idle)
	}
}

// Path is the host path of the io/ directory.
func (d *Dir) Path() string { return d.path }

// outDir is the host path of io/out, where the driver writes events.
func (d *Dir) outDir() string { return filepath.Join(d.path, ioproto.OutDir) }

// HoldAppends runs fn while no append is in progress or can start: one in
// progress finishes first, and the next waits until fn returns. The
// orchestrator marks a sandbox as being removed in fn, so that no record
// is appended to a log that is being deleted.
func (d *Dir) HoldAppends(fn func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fn()
}

// OpenReaders is the number of files the Dir has open for reading (open
// Events, loads in progress): zero once every follower has returned. For
// tests and diagnostics.
func (d *Dir) OpenReaders() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.readers
}
