package ioproto

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"time"
	"unicode/utf8"
)

// Contexts: several independent interpreters in one sandbox (PROTOCOL.md,
// "Contexts"). Each context has its own queue of commands, its own
// interpreter (globals), a language and a working directory under
// /workspace; commands of one context run one at a time in log order,
// commands of different contexts run in parallel. Every sandbox has the
// default context, which cannot be created, restarted away or deleted:
// exec records without context_id run in it, as before contexts existed.

// DefaultContext is the ID of every sandbox's default context.
const DefaultContext = "default"

// ContextsFile is the driver's list of contexts, inside /io.
const ContextsFile = "contexts.json"

// Context operations (Record.Op of a KindContext record).
const (
	ContextCreate  = "create"
	ContextRestart = "restart"
	ContextDelete  = "delete"
)

// Error names (the error event's ename) of a refused context record, so the
// host can answer with the right status without parsing the reason.
const (
	ContextErrUnknown = "UnknownContext"
	ContextErrExists  = "ContextExists"
	ContextErrTooMany = "TooManyContexts"
	// ContextErrCwd: the working directory does not exist, is not a
	// directory, or resolves outside /workspace.
	ContextErrCwd     = "BadContextDirectory"
	ContextErrDefault = "DefaultContext"
	ContextErrIO      = "ContextIOError"
)

// Bounds on contexts.
const (
	// MaxContexts bounds the contexts a sandbox may have besides the
	// default one: each holds an interpreter, which costs memory (a
	// Python kernel with the usual imports takes 30-60 MiB).
	MaxContexts = 16
	// MaxContextIDLen bounds a context ID.
	MaxContextIDLen = 64
	// MaxContextCwdLen bounds a context's working directory.
	MaxContextCwdLen = 1024
	// MaxContextsFileBytes bounds /io/contexts.json: MaxContexts+1 entries
	// of a few hundred bytes each fit many times over. Readers refuse a
	// larger file (the sandbox can write /io).
	MaxContextsFileBytes = 64 << 10
)

// ValidateContextID reports whether id may name a context: the command ID
// rule, at most MaxContextIDLen characters.
func ValidateContextID(id string) error {
	switch {
	case id == "":
		return errors.New("context_id is empty")
	case len(id) > MaxContextIDLen:
		return fmt.Errorf("context_id is %d bytes long; the limit is %d", len(id), MaxContextIDLen)
	case !isCommandID(id):
		return fmt.Errorf("context_id %q has characters outside [A-Za-z0-9._-] or does not start with a letter or digit", id)
	}
	return nil
}

// CleanContextCwd checks a context's working directory, a path relative to
// /workspace, and returns it in canonical form ("." for /workspace itself).
// It refuses absolute paths and paths that leave /workspace with "..".
// Whether the directory exists is the driver's to check.
func CleanContextCwd(cwd string) (string, error) {
	switch {
	case len(cwd) > MaxContextCwdLen:
		return "", fmt.Errorf("cwd is %d bytes long; the limit is %d", len(cwd), MaxContextCwdLen)
	case !utf8.ValidString(cwd) || strings.ContainsRune(cwd, 0):
		return "", errors.New("cwd is not valid UTF-8 text without NUL")
	case strings.HasPrefix(cwd, "/"):
		return "", fmt.Errorf("cwd %q is absolute; give a path relative to /workspace", cwd)
	}
	c := path.Clean("./" + cwd)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("cwd %q leaves /workspace", cwd)
	}
	return c, nil
}

// validateExecContext checks an exec record's context_id.
func validateExecContext(r *Record) error {
	if r.ContextID == "" {
		return nil
	}
	if err := ValidateContextID(r.ContextID); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return nil
}

// validateContextOp checks a context record and normalises its cwd.
func (r *Record) validateContextOp() error {
	if err := ValidateContextID(r.ContextID); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	switch r.Op {
	case ContextCreate:
		if r.ContextID == DefaultContext {
			return fmt.Errorf("%w: context %q exists in every sandbox and cannot be created", ErrMalformed, DefaultContext)
		}
		// The languages a context may have are those an exec may ask for.
		probe := Record{Type: KindExec, CommandID: r.CommandID, Language: r.Language}
		if r.Language == "" {
			return fmt.Errorf("%w: a context needs a language", ErrMalformed)
		}
		if err := probe.Validate(); err != nil {
			return err
		}
		cwd, err := CleanContextCwd(r.Cwd)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		r.Cwd = cwd
	case ContextRestart, ContextDelete:
	case "":
		return fmt.Errorf("%w: op is missing", ErrMalformed)
	default:
		return fmt.Errorf("%w: unknown context op %q (want %q, %q or %q)", ErrMalformed, r.Op, ContextCreate, ContextRestart, ContextDelete)
	}
	return nil
}

// Contexts is /io/contexts.json, the driver's list of a sandbox's contexts,
// replaced atomically whenever it changes (and before the done event of the
// context record that changed it). It holds definitions only, not which
// command each context runs: rewriting it per command would cost every
// command a file replacement.
type Contexts struct {
	Version  int           `json:"version"`
	Contexts []ContextInfo `json:"contexts"`
}

// ContextInfo describes one context.
type ContextInfo struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	// Cwd is the working directory, relative to /workspace ("." for
	// /workspace itself).
	Cwd       string    `json:"cwd"`
	CreatedAt time.Time `json:"created_at"`
	// CreatedBy is the command ID of the context record that created it
	// (empty for the default context).
	CreatedBy string `json:"created_by,omitempty"`
}
