// Package ioproto holds the file formats of the /io protocol shared by the
// in-container driver and the host-side orchestrator: command records,
// events, the driver's state files and the rules for naming files under /io.
// ioproto/PROTOCOL.md is the normative description; this package is its Go
// implementation, free of any transport or Docker concern.
package ioproto

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Record kinds in /io/stdin.
const (
	KindExec      = "exec"
	KindInterrupt = "interrupt"
	// KindStdin, KindStdinClose and KindResize act on a command's standard
	// input or terminal (PROTOCOL.md, "Standard input and terminals"). Like
	// interrupts they name a command but are not commands.
	KindStdin      = "stdin"
	KindStdinClose = "stdin_close"
	KindResize     = "resize"
	// KindContext creates, restarts or deletes a context (context.go).
	KindContext = "context"
)

// MaxStdinChunk bounds the data of one stdin record (before base64), so
// interactive input stays a small fraction of the log's bounds.
const MaxStdinChunk = 64 << 10

// MaxPtyDim bounds a terminal's rows and columns (the kernel's winsize
// fields are 16 bits; real terminals stay far below).
const MaxPtyDim = 4096

// PtySize is a pseudo-terminal's size in character cells.
type PtySize struct {
	Rows int `json:"rows"`
	Cols int `json:"cols"`
}

// validate checks both dimensions are within 1..MaxPtyDim.
func (p PtySize) validate() error {
	if p.Rows < 1 || p.Rows > MaxPtyDim || p.Cols < 1 || p.Cols > MaxPtyDim {
		return fmt.Errorf("%w: terminal size %dx%d (rows x cols) is outside 1..%d", ErrMalformed, p.Rows, p.Cols, MaxPtyDim)
	}
	return nil
}

// NamesCommand reports whether records of kind k are commands (exec), as
// opposed to records that only refer to one (interrupt, stdin, ...). Only
// commands count for "a command ID runs once".
func NamesCommand(k string) bool {
	return k != KindInterrupt && k != KindStdin && k != KindStdinClose && k != KindResize && k != KindAdopt && k != KindEnv && k != KindMounts
}

// Languages an exec record may ask for. Python and bash are in every
// image; the others only where the image has their interpreter (the driver
// lists what it found in DriverStatus.Languages).
const (
	LanguagePython     = "python"
	LanguageBash       = "bash"
	LanguageJavaScript = "javascript"
	LanguageTypeScript = "typescript"
	LanguageR          = "r"
	LanguageJava       = "java"
)

// Languages lists every language the protocol knows, in a stable order.
var Languages = []string{LanguagePython, LanguageBash, LanguageJavaScript, LanguageTypeScript, LanguageR, LanguageJava}

// KnownLanguage reports whether lang is one of Languages.
func KnownLanguage(lang string) bool {
	for _, l := range Languages {
		if l == lang {
			return true
		}
	}
	return false
}

// Bounds on a command's environment (Record.Env): it travels in one record
// line, and the kernels apply it key by key before the command.
const (
	MaxEnvVars  = 256
	MaxEnvBytes = 128 << 10
)

// ValidateEnv checks a command's environment: at most MaxEnvVars entries
// and MaxEnvBytes in total (each entry counted as len(key)+len(value)+1),
// names non-empty without '=' or NUL, values without NUL, all valid UTF-8.
func ValidateEnv(env map[string]string) error {
	if len(env) > MaxEnvVars {
		return fmt.Errorf("env has %d variables; the limit is %d", len(env), MaxEnvVars)
	}
	total := 0
	for k, v := range env {
		switch {
		case k == "":
			return errors.New("env has a variable with an empty name")
		case strings.ContainsAny(k, "=\x00"):
			return fmt.Errorf("env variable name %q contains '=' or a NUL byte", short(k))
		case strings.ContainsRune(v, 0):
			return fmt.Errorf("env variable %q contains a NUL byte", short(k))
		case !utf8.ValidString(k) || !utf8.ValidString(v):
			return fmt.Errorf("env variable %q is not valid UTF-8", short(k))
		}
		total += len(k) + len(v) + 1
	}
	if total > MaxEnvBytes {
		return fmt.Errorf("env is %d bytes long; the limit is %d", total, MaxEnvBytes)
	}
	return nil
}

func short(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

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
	// Language is one of Languages (exec only; empty means Python).
	Language string `json:"language,omitempty"`
	// Code is the source to run (exec only).
	Code string `json:"code,omitempty"`
	// TimeoutMS is the wall-clock limit in milliseconds; 0 means none.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// Stdin (exec, bash only) keeps the command's standard input open for
	// stdin records; without it the command reads EOF at once.
	Stdin bool `json:"stdin,omitempty"`
	// Pty (exec, bash only), when not zero, runs the command on a
	// pseudo-terminal of that size; it implies Stdin. For resize records,
	// the new size.
	Pty PtySize `json:"pty,omitzero"`
	// Data is a stdin record's bytes in standard base64, at most
	// MaxStdinChunk bytes decoded (StdinData). A string rather than
	// []byte keeps Record comparable.
	Data string `json:"data,omitempty"`
	// Env holds environment variables set for this command only (exec):
	// they override the sandbox's for the command's duration and are
	// restored afterwards (ValidateEnv gives the rules). In an env record
	// (KindEnv), the variables set for every later command.
	Env map[string]string `json:"env,omitempty"`
	// ContextID names the context an exec runs in (empty: DefaultContext)
	// or that a context record is about (context.go).
	ContextID string `json:"context_id,omitempty"`
	// Op and Cwd belong to context records (context.go).
	Op  string `json:"op,omitempty"`
	Cwd string `json:"cwd,omitempty"`
	// Snapshot names a snapshot file in HibernateDir and Level the level to
	// restore (snapshot and restore records, hibernate.go).
	Snapshot string `json:"snapshot,omitempty"`
	Level    string `json:"level,omitempty"`
	// Live marks a snapshot record taken while the sandbox keeps running
	// (a named snapshot, a fork's): the host expects no restore record
	// after it, so it does not hold commands back. The driver does the
	// same either way.
	Live bool `json:"live,omitempty"`
	// Mounts are a mounts record's mount points (KindMounts).
	Mounts []string `json:"mounts,omitempty"`
}

// StdinRecord returns the stdin record giving data to command id.
func StdinRecord(id string, data []byte) Record {
	return Record{Type: KindStdin, CommandID: id, Data: base64.StdEncoding.EncodeToString(data)}
}

// StdinData decodes a stdin record's data.
func (r *Record) StdinData() ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(r.Data)
	if err != nil {
		return nil, fmt.Errorf("%w: stdin data is not base64: %v", ErrMalformed, err)
	}
	return b, nil
}

// HasPty reports whether an exec record asks for a terminal.
func (r *Record) HasPty() bool { return r.Pty != (PtySize{}) }

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
		if !KnownLanguage(r.Language) {
			return fmt.Errorf("%w: unknown language %q (want one of %s)", ErrMalformed, short(r.Language), strings.Join(Languages, ", "))
		}
		if err := ValidateEnv(r.Env); err != nil {
			return fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		if r.TimeoutMS < 0 {
			return fmt.Errorf("%w: timeout_ms is negative (%d)", ErrMalformed, r.TimeoutMS)
		}
		if (r.Stdin || r.HasPty()) && r.Language != LanguageBash {
			return fmt.Errorf("%w: stdin and pty are for bash commands only (language %q)", ErrMalformed, r.Language)
		}
		if r.HasPty() {
			if err := r.Pty.validate(); err != nil {
				return err
			}
		}
		if err := validateExecContext(r); err != nil {
			return err
		}
	case KindContext:
		return r.validateContextOp()
	case KindSnapshot, KindRestore:
		return r.validateHibRecord()
	case KindStdin:
		if base64.StdEncoding.DecodedLen(len(r.Data)) > MaxStdinChunk+2 {
			return fmt.Errorf("%w: stdin data is about %d bytes; the limit is %d", ErrMalformed, base64.StdEncoding.DecodedLen(len(r.Data)), MaxStdinChunk)
		}
		b, err := r.StdinData()
		if err != nil {
			return err
		}
		if len(b) > MaxStdinChunk {
			return fmt.Errorf("%w: stdin data is %d bytes; the limit is %d", ErrMalformed, len(b), MaxStdinChunk)
		}
	case KindResize:
		if !r.HasPty() {
			return fmt.Errorf("%w: resize without pty size", ErrMalformed)
		}
		if err := r.Pty.validate(); err != nil {
			return err
		}
	case KindEnv:
		return r.validateEnvRecord()
	case KindMounts:
		return r.validateMountsRecord()
	case KindInterrupt, KindStdinClose, KindAdopt:
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
