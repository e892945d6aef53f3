package orchestrator

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/iolog"
)

// A sandbox's health is what its driver says in /io/driver.json (see
// ioproto/PROTOCOL.md): "ok", or "io_full" with a reason while /io has no
// room for commands' output. A sandbox that is not healthy stays running
// (commands that fit still work, and it recovers by itself once room is
// made); Sandbox.HealthReason says what is wrong.
//
// The file is read where states are brought up to date (refresh and
// refreshListed, monitor.go), that is for Get, List and Acquire, never on a
// command's path. One lstat tells whether the file changed since it was
// last read (the driver replaces it atomically: a new inode); it is read
// again only then. The file belongs to the sandbox user, so its content is
// hostile: it is opened through os.Root, without following a symlink or
// blocking on a FIFO, must be a regular file of at most
// maxDriverStatusBytes, and the reason is bounded. A file that breaks these
// rules, or that is missing (older drivers, a driver not started yet), says
// nothing: the sandbox is reported healthy, and the problem logged.

// maxDriverStatusBytes bounds what is read of /io/driver.json, which the
// driver writes in a few hundred bytes.
const maxDriverStatusBytes = 8 << 10

// maxHealthReason bounds the reason passed on to callers.
const maxHealthReason = 1 << 10

// ioHealth is a sandbox's health as last read from /io/driver.json.
type ioHealth struct {
	mu   sync.Mutex // serialises reads; guards key and read
	key  statusKey  // the file last read (or found missing)
	read bool       // key is set
	// reason is HealthReason; read without mu (snapshot holds sandbox.mu,
	// which is innermost).
	reason atomic.Pointer[string]
}

// statusKey identifies a version of the file: the driver replaces it with
// rename (a new inode); an in-place rewrite changes its ctime, which no
// user can set.
type statusKey struct {
	dev, ino     uint64
	size         int64
	mtime, ctime syscall.Timespec
}

func keyOf(st *syscall.Stat_t) statusKey {
	return statusKey{dev: uint64(st.Dev), ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
}

// healthReasonLocked is the sandbox's HealthReason for snapshot: empty for
// a sandbox that is not running. Call with sb.mu held.
func (sb *sandbox) healthReasonLocked() string {
	if sb.state != StateRunning {
		return ""
	}
	if r := sb.health.reason.Load(); r != nil {
		return *r
	}
	return ""
}

// refreshHealth re-reads a running sandbox's /io/driver.json if it changed
// since the last read.
func (m *Manager) refreshHealth(sb *sandbox) {
	h := &sb.health
	h.mu.Lock()
	defer h.mu.Unlock()
	var st syscall.Stat_t
	var key statusKey // zero: missing
	if err := syscall.Lstat(filepath.Join(sb.io.Path(), ioproto.DriverStatusFile), &st); err == nil {
		key = keyOf(&st)
	}
	if h.read && key == h.key {
		return
	}
	reason, readKey, err := readDriverHealth(sb.io.Path())
	if err != nil {
		m.log.Warn("ignoring the sandbox's driver status", "sandbox_id", sb.id, "file", ioproto.DriverStatusFile, "error", err)
	}
	if readKey == (statusKey{}) {
		readKey = key
	}
	if old := h.reason.Load(); old == nil || *old != reason {
		if reason != "" {
			m.log.Warn("sandbox unhealthy", "sandbox_id", sb.id, "reason", reason)
		} else if old != nil && *old != "" {
			m.log.Info("sandbox healthy again", "sandbox_id", sb.id)
		}
	}
	h.key, h.read = readKey, true
	h.reason.Store(&reason)
}

// readDriverHealth reads the health in ioDir's driver.json: the reason the
// sandbox is unhealthy, or "" when it is healthy or says nothing (missing
// file, with err nil). key identifies the file read (zero when none was).
func readDriverHealth(ioDir string) (reason string, key statusKey, err error) {
	root, err := os.OpenRoot(ioDir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", key, nil
		}
		return "", key, err
	}
	defer root.Close()
	f, err := root.OpenFile(ioproto.DriverStatusFile, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", key, nil
	case err != nil && iolog.IsEscape(err):
		return "", key, fmt.Errorf("%s is a symbolic link: %w", ioproto.DriverStatusFile, iolog.ErrTampered)
	case err != nil:
		return "", key, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", key, err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		key = keyOf(st)
	}
	switch {
	case !fi.Mode().IsRegular():
		return "", key, fmt.Errorf("%s is not a regular file (%v): %w", ioproto.DriverStatusFile, fi.Mode().Type(), iolog.ErrTampered)
	case fi.Size() > maxDriverStatusBytes:
		return "", key, fmt.Errorf("%s is %d bytes, more than %d: %w", ioproto.DriverStatusFile, fi.Size(), maxDriverStatusBytes, iolog.ErrTampered)
	}
	// The size was checked on the descriptor, but the file can still grow:
	// read no more than the bound either way.
	b, err := io.ReadAll(io.LimitReader(f, maxDriverStatusBytes+1))
	if err != nil {
		return "", key, err
	}
	if len(b) > maxDriverStatusBytes {
		return "", key, fmt.Errorf("%s grew past %d bytes: %w", ioproto.DriverStatusFile, maxDriverStatusBytes, iolog.ErrTampered)
	}
	var ds ioproto.DriverStatus
	if err := json.Unmarshal(b, &ds); err != nil {
		return "", key, fmt.Errorf("decode %s: %w", ioproto.DriverStatusFile, err)
	}
	return healthReason(ds), key, nil
}

// healthReason is the HealthReason a driver status means: "" for ok (or
// no health, from drivers before it existed), otherwise the driver's reason,
// bounded, or a reason made up when it gave none.
func healthReason(ds ioproto.DriverStatus) string {
	switch ds.Health {
	case "", ioproto.HealthOK:
		return ""
	}
	r := ds.HealthReason
	if r == "" {
		if ds.Health == ioproto.HealthIOFull {
			r = "/io is full"
		} else {
			r = "the sandbox's driver reports health " + truncate(fmt.Sprintf("%q", ds.Health), 64)
		}
	}
	return truncate(r, maxHealthReason)
}
