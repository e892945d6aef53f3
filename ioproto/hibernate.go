package ioproto

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Hibernation records (see PROTOCOL.md, *Hibernation*). A snapshot record
// asks the driver to save the default context's Python globals into a file
// under HibernateDir; a restore record, the first record a woken sandbox's
// log gets, asks it to load them into the fresh kernel. Both are answered
// like commands: an events file with started and done, whose done carries
// the outcome in Snapshot.
const (
	KindSnapshot = "snapshot"
	KindRestore  = "restore"
)

// HibernateDir, inside /io, holds snapshot files. Files whose name starts
// with "." are being written and never read.
const HibernateDir = "hibernate"

// Snapshot levels, best first: how much of a sandbox's state a hibernation
// keeps.
const (
	// LevelMemory: the whole process tree, checkpointed by the runtime.
	LevelMemory = "memory"
	// LevelGlobals: the Python kernel's user namespace, pickled name by name.
	LevelGlobals = "globals"
	// LevelFiles: /workspace only; everything in memory is lost.
	LevelFiles = "files"
)

// Bounds on a hibernation outcome, which the sandbox writes: the host
// keeps at most MaxHibNames names of at most MaxHibNameLen bytes each.
const (
	MaxHibNames     = 1000
	MaxHibNameLen   = 256
	maxHibReasonLen = 4096
)

// HibResult is the outcome of a snapshot or restore record (done.snapshot),
// and on the first command after a restore how the state came back
// (started.wake).
type HibResult struct {
	// Level is the level achieved: LevelGlobals, or LevelFiles when nothing
	// in memory was kept.
	Level string `json:"level"`
	// Bytes is the snapshot file's size (snapshot only).
	Bytes int64 `json:"bytes,omitempty"`
	// Names are the names saved (snapshot) or restored (restore).
	Names []string `json:"names,omitempty"`
	// Lost are the names that could not be kept, each with why.
	Lost []LostName `json:"lost,omitempty"`
	// Reason explains a lower level than asked for, or what else was lost.
	Reason string `json:"reason,omitempty"`
}

// LostName is a global that a hibernation could not keep.
type LostName struct {
	Name string `json:"name"`
	Why  string `json:"why,omitempty"`
}

// Sanitized returns r bounded and made valid UTF-8 for the host, which
// treats everything the sandbox writes as hostile: unknown levels become
// LevelFiles, names and reasons are cut.
func (r *HibResult) Sanitized() *HibResult {
	if r == nil {
		return nil
	}
	out := &HibResult{Level: r.Level, Bytes: max(r.Bytes, 0), Reason: clean(r.Reason, maxHibReasonLen)}
	if out.Level != LevelGlobals && out.Level != LevelMemory {
		out.Level = LevelFiles
	}
	for i, n := range r.Names {
		if i >= MaxHibNames {
			out.Reason = strings.TrimPrefix(out.Reason+fmt.Sprintf("; %d more names not listed", len(r.Names)-i), "; ")
			break
		}
		out.Names = append(out.Names, clean(n, MaxHibNameLen))
	}
	for i, l := range r.Lost {
		if i >= MaxHibNames {
			out.Reason = strings.TrimPrefix(out.Reason+fmt.Sprintf("; %d more lost names not listed", len(r.Lost)-i), "; ")
			break
		}
		out.Lost = append(out.Lost, LostName{Name: clean(l.Name, MaxHibNameLen), Why: clean(l.Why, MaxHibNameLen)})
	}
	return out
}

// clean makes s valid UTF-8 and at most n bytes (cut at a rune boundary).
func clean(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// ValidSnapshotName reports whether name may name a snapshot file in
// HibernateDir: a command ID's characters, not starting with ".".
func ValidSnapshotName(name string) bool {
	return name != "" && len(name) <= MaxCommandIDLen && isCommandID(name)
}

// validateHibRecord checks a snapshot or restore record.
func (r *Record) validateHibRecord() error {
	r.Language = LanguagePython
	switch {
	case r.Type == KindSnapshot && !ValidSnapshotName(r.Snapshot):
		return fmt.Errorf("%w: snapshot record without a valid snapshot file name", ErrMalformed)
	case r.Type == KindRestore && r.Level != LevelGlobals && r.Level != LevelFiles && r.Level != LevelMemory:
		return fmt.Errorf("%w: restore level %q (want %s, %s or %s)", ErrMalformed, short(r.Level), LevelMemory, LevelGlobals, LevelFiles)
	case r.Type == KindRestore && r.Level == LevelGlobals && !ValidSnapshotName(r.Snapshot):
		return fmt.Errorf("%w: restore record without a valid snapshot file name", ErrMalformed)
	case r.Type == KindRestore && r.Live:
		return fmt.Errorf("%w: live is for snapshot records", ErrMalformed)
	case r.ContextID != "" && r.ContextID != DefaultContext:
		return fmt.Errorf("%w: %s records act on the default context only", ErrMalformed, r.Type)
	}
	return nil
}
