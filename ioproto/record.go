// Package ioproto holds the file formats of the /io protocol shared by the
// in-container driver and the host-side orchestrator: command records,
// events, the driver's state files and the rules for naming files under /io.
// ioproto/PROTOCOL.md is the normative description; this package is its Go
// implementation, free of any transport or Docker concern.
package ioproto

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
)

// Record kinds in /io/stdin.
const (
	KindExec      = "exec"
	KindInterrupt = "interrupt"
	// KindContext creates, restarts or deletes a context (context.go).
	KindContext = "context"
)

// Languages an exec record may ask for.
const (
	LanguagePython = "python"
	LanguageBash   = "bash"
)

// MaxRecordLen bounds one line of /io/stdin. Longer lines are malformed; the
// bound keeps a runaway writer from making the driver buffer without limit.
// It leaves room for 1 MiB of code even when JSON escaping makes every byte
// six (control characters become \u00XX).
const MaxRecordLen = 8 << 20

// MaxCommandIDLen bounds a command ID; IDs name files, so they stay short.
const MaxCommandIDLen = 128

// isCommandID reports whether id matches ^[A-Za-z0-9][A-Za-z0-9._-]*$. A
// byte loop, not a regexp: the driver checks every name in /io/out with it
// and sandboxd every events file it is told about.
func isCommandID(id string) bool {
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case (c == '.' || c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return id != ""
}

// ErrMalformed classifies every problem with a record's content.
var ErrMalformed = errors.New("malformed record")

// ValidateCommandID reports whether id may be used as a command ID. IDs become
// file names under /io/out, so the charset excludes path separators and a
// leading dot.
func ValidateCommandID(id string) error {
	switch {
	case id == "":
		return errors.New("command_id is empty")
	case len(id) > MaxCommandIDLen:
		return fmt.Errorf("command_id is %d bytes long; the limit is %d", len(id), MaxCommandIDLen)
	case !isCommandID(id):
		return fmt.Errorf("command_id %q has characters outside [A-Za-z0-9._-] or does not start with a letter or digit", id)
	}
	return nil
}

// Record is one line of /io/stdin.
type Record struct {
	// Type is KindExec or KindInterrupt.
	Type string `json:"type"`
	// CommandID names the command the record is about.
	CommandID string `json:"command_id"`
	// Language is LanguagePython or LanguageBash (exec only; empty means Python).
	Language string `json:"language,omitempty"`
	// Code is the source to run (exec only).
	Code string `json:"code,omitempty"`
	// TimeoutMS is the wall-clock limit in milliseconds; 0 means none.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// ContextID names the context an exec runs in (empty: DefaultContext)
	// or that a context record is about (context.go).
	ContextID string `json:"context_id,omitempty"`
	// Op and Cwd belong to context records (context.go).
	Op  string `json:"op,omitempty"`
	Cwd string `json:"cwd,omitempty"`
}

// Validate checks the record's fields against the protocol and normalises the
// default language. Errors wrap ErrMalformed.
func (r *Record) Validate() error {
	if err := ValidateCommandID(r.CommandID); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	switch r.Type {
	case KindExec:
		if r.Language == "" {
			r.Language = LanguagePython
		}
		if r.Language != LanguagePython && r.Language != LanguageBash {
			return fmt.Errorf("%w: unknown language %q (want %q or %q)", ErrMalformed, r.Language, LanguagePython, LanguageBash)
		}
		if r.TimeoutMS < 0 {
			return fmt.Errorf("%w: timeout_ms is negative (%d)", ErrMalformed, r.TimeoutMS)
		}
		if err := validateExecContext(r); err != nil {
			return err
		}
	case KindContext:
		return r.validateContextOp()
	case KindInterrupt:
	case "":
		return fmt.Errorf("%w: type is missing", ErrMalformed)
	default:
		return fmt.Errorf("%w: unknown type %q", ErrMalformed, r.Type)
	}
	return nil
}

// ParseRecord decodes and validates one line of /io/stdin, without its
// trailing newline. On error it still returns the command ID when one could be
// read and is valid, so the driver can answer the malformed record in that
// command's events; otherwise the returned ID is empty.
func ParseRecord(line []byte) (Record, string, error) {
	var r Record
	if len(line) > MaxRecordLen {
		return r, "", fmt.Errorf("%w: line is %d bytes long; the limit is %d", ErrMalformed, len(line), MaxRecordLen)
	}
	if err := json.Unmarshal(line, &r); err != nil {
		return Record{}, salvageCommandID(line), fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if err := r.Validate(); err != nil {
		id := r.CommandID
		if ValidateCommandID(id) != nil {
			id = ""
		}
		return r, id, err
	}
	return r, r.CommandID, nil
}

// salvageCommandID finds a command ID in a line that is not valid JSON as a
// whole, for reporting only; only an unambiguous valid ID is returned.
func salvageCommandID(line []byte) string {
	var loose map[string]json.RawMessage
	if json.Unmarshal(line, &loose) == nil {
		var id string
		if json.Unmarshal(loose["command_id"], &id) == nil && ValidateCommandID(id) == nil {
			return id
		}
		return ""
	}
	m := salvagePattern.FindSubmatch(line)
	if m == nil || bytes.Count(line, []byte(`"command_id"`)) != 1 {
		return ""
	}
	if ValidateCommandID(string(m[1])) != nil {
		return ""
	}
	return string(m[1])
}

var salvagePattern = regexp.MustCompile(`"command_id"\s*:\s*"([A-Za-z0-9._-]{1,128})"`)

// EncodeRecord returns the record as one complete line, newline included,
// ready for a single append. It validates first, so a writer cannot put a
// record into the log that the driver would reject.
func EncodeRecord(r Record) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxRecordLen {
		return nil, fmt.Errorf("%w: encoded record is %d bytes long; the limit is %d", ErrMalformed, len(b), MaxRecordLen)
	}
	return append(b, '\n'), nil
}
