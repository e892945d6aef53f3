package docker

import (
	"errors"
	"io/fs"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/cmdlog"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/iolog"
)

// A sandbox's health is what its driver says in /io/driver.json, as
// cmdlog.HealthReason reads it (the same on both backends); here, on the
// host, the file is read where states are brought up to date (refresh and
// refreshListed, monitor.go), that is for Get, List and Acquire, never on a
// command's path. One lstat tells whether the file changed since it was
// last read (the driver replaces it atomically: a new inode); it is read
// again only then. The file belongs to the sandbox user, so its content is
// hostile: it is read through iolog's bounded open (no symlink, FIFO,
// hard link, sparse or oversized file), and the reason is bounded
// (cmdlog.HealthReason). A file that breaks these rules, or that is missing
// (older drivers, a driver not started yet), says nothing: the sandbox is
// reported healthy, and the problem logged.

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
	if sb.state != core.StateRunning {
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
	reason, readKey, err := readDriverHealth(sb.io)
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

// readDriverHealth reads the health in the sandbox's driver.json: the
// reason the sandbox is unhealthy, or "" when it is healthy or says nothing
// (missing file, with err nil). key identifies the file read (zero when
// none was). The read is iolog's bounded one.
func readDriverHealth(d *iolog.Dir) (reason string, key statusKey, err error) {
	ds, fi, err := d.ReadDriverStatus()
	if fi != nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			key = keyOf(st)
		}
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", key, nil
	case err != nil:
		return "", key, err
	}
	return cmdlog.HealthReason(ds), key, nil
}
