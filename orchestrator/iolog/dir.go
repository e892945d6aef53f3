// Package iolog is sandboxd's half of the /io protocol (ioproto, whose
// PROTOCOL.md is normative): for each sandbox, it appends records to the
// command log (io/stdin), follows commands' events files (io/out), and
// wakes followers when those files change.
//
// Everything under io/ is writable by the sandboxed code, which is hostile
// by assumption: every file is opened through an os.Root and checked (see
// safeopen.go), and failures that mean the sandbox tampered with its files
// wrap ErrTampered. Errors are plain errors or this package's sentinels;
// the orchestrator decides what they mean for its callers.
package iolog

import (
	"path/filepath"
	"sync"

	"github.com/sandboxd/sandboxd/ioproto"
)

// Dir is one sandbox's io/ directory on the host, as sandboxd uses it. It
// is safe for concurrent use. sandboxd is the command log's only writer
// (the state directory's lock guarantees one sandboxd), so Dir keeps an
// index of the command IDs in the log, built from the log the first time
// it is needed and kept up to date by its own appends: idempotency costs
// one map lookup.
type Dir struct {
	path string

	// mu serialises appends (the protocol requires writers to serialise
	// per sandbox) and guards the fields below.
	mu sync.Mutex
	// ids maps each command ID in the log to the offset just past its
	// record, to tell a queued command from one whose output was pruned;
	// nil until the log is loaded.
	ids map[string]int64
	// size is the log's length as far as we know it.
	size int64
	// partial is set when the log ends in an incomplete line (a crash in
	// the middle of a write): the next append starts with a newline so
	// that our record is not glued to the debris.
	partial bool
}

// New returns the Dir for the io/ directory at path. It does not touch
// the file system: the log is read when first needed.
func New(path string) *Dir { return &Dir{path: path} }

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
