package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

// OnIdle values: what the idle TTL does to a running sandbox.
const (
	// OnIdleHibernate hibernates it (kept Config.HibernatedTTL more).
	OnIdleHibernate = "hibernate"
	// OnIdleDelete deletes it, with everything in it.
	OnIdleDelete = "delete"
)

// SnapshotInfo describes the state a hibernated sandbox keeps.
type SnapshotInfo struct {
	// Level is "globals" or "files" (ioproto.Level*).
	Level string
	// Bytes is the snapshot's size on disk (the volumes not counted).
	Bytes   int64
	TakenAt time.Time
	// Reason says why the level is lower than globals, when it is.
	Reason string
}

// WakeInfo is how a woken sandbox's state came back. Never silent: the
// wake's response and the first command after it carry it.
type WakeInfo struct {
	// Level is "globals" or "files".
	Level string
	// Restored are the Python globals restored (level globals).
	Restored []string
	// Lost are the globals that could not be kept, with why.
	Lost []ioproto.LostName
	// Reason explains a lower level, or what else was lost.
	Reason string
	Time   time.Time
}

func (w *WakeInfo) Clone() *WakeInfo {
	if w == nil {
		return nil
	}
	c := *w
	c.Restored, c.Lost = slices.Clone(w.Restored), slices.Clone(w.Lost)
	return &c
}

// WakeFromEvent turns a (sanitised) hibernation outcome from the sandbox
// into a WakeInfo; nil stays nil.
func WakeFromEvent(r *ioproto.HibResult) *WakeInfo {
	if r == nil {
		return nil
	}
	r = r.Sanitized()
	return &WakeInfo{Level: r.Level, Restored: r.Names, Lost: r.Lost, Reason: r.Reason}
}

// checkOnIdle checks Options.OnIdle.
func checkOnIdle(onIdle string) error {
	switch onIdle {
	case "", OnIdleHibernate, OnIdleDelete:
		return nil
	}
	return Invalidf("on-idle action %q: want %q or %q", onIdle, OnIdleHibernate, OnIdleDelete)
}

// JoinReasons joins two reasons a hibernation or wake gives, either of
// which may be empty, with "; ".
func JoinReasons(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// HibOutcome is the outcome of a snapshot or restore record of kind that
// a backend sent and followed for at most wait: snap is what the record's
// done event carried (nil when none came), err how the follow ended. The
// outcome is sanitised: the sandbox wrote it.
func HibOutcome(kind string, wait time.Duration, snap *ioproto.HibResult, err error) (*ioproto.HibResult, error) {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("the sandbox did not answer the %s record within %s", kind, wait)
	case err != nil:
		return nil, fmt.Errorf("%s record: %w", kind, err)
	case snap == nil:
		return nil, fmt.Errorf("the sandbox answered the %s record without an outcome", kind)
	}
	return snap.Sanitized(), nil
}
