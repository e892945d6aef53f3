package ioproto

import (
	"encoding/json"
	"fmt"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Event types in an events file.
const (
	EventStarted = "started"
	EventStdout  = "stdout"
	EventStderr  = "stderr"
	EventDisplay = "display"
	EventResult  = "result"
	EventError   = "error"
	EventDone    = "done"
)

// Statuses of a done event.
const (
	StatusOK          = "ok"
	StatusError       = "error"
	StatusTimeout     = "timeout"
	StatusInterrupted = "interrupted"
	StatusKilled      = "killed"
)

// MaxChunk bounds the text of one stdout or stderr event, so events stay
// small enough to stream and to read in one go.
const MaxChunk = 64 << 10

// ArtifactThreshold is the size above which a MIME value moves out of the
// event line into an artifact file beside the events file.
const ArtifactThreshold = 256 << 10

// MaxFiles bounds the list of changed files in a done event.
const MaxFiles = 1000

// MalformedRecordName is the error name reported for a malformed record that
// still carried a usable command ID.
const MalformedRecordName = "MalformedRecord"

// Event is one line of an events file. Only the fields of its Type are set.
type Event struct {
	// Seq numbers the command's events from 1 without gaps.
	Seq int64 `json:"seq"`
	// Type is one of the Event* constants.
	Type string `json:"type"`

	// CommandID, Language and Time describe the command (started; Time also on done).
	CommandID string    `json:"command_id,omitempty"`
	Language  string    `json:"language,omitempty"`
	Time      time.Time `json:"time,omitzero"`
	// ContextID (started) is the context the command runs in, or the
	// context a context record is about; absent for the default context
	// from drivers before contexts.
	ContextID string `json:"context_id,omitempty"`

	// Text is an output chunk (stdout, stderr).
	Text string `json:"text,omitempty"`

	// Data is a MIME bundle (display, result): MIME type to text, or to
	// base64 for binary types.
	Data map[string]string `json:"data,omitempty"`
	// Refs maps MIME types whose values were too large for the line to the
	// artifact file (a name inside out/) that holds them.
	Refs map[string]string `json:"refs,omitempty"`

	// EName, EValue and Traceback describe an exception (error).
	EName     string   `json:"ename,omitempty"`
	EValue    string   `json:"evalue,omitempty"`
	Traceback []string `json:"traceback,omitempty"`

	// Status, DurationMS, StateLost, Reason, ExitCode, ExecutionCount,
	// Files and OutputTruncated end the command (done).
	Status     string `json:"status,omitempty"`
	DurationMS int64  `json:"duration_ms,omitempty"`
	StateLost  bool   `json:"state_lost,omitempty"`
	Reason     string `json:"reason,omitempty"`
	ExitCode   *int   `json:"exit_code,omitempty"`
	// ExecutionCount is the Python kernel's cell counter (Python only).
	ExecutionCount *int64 `json:"execution_count,omitempty"`
	Files          []File `json:"files,omitempty"`
	// OutputTruncated says the driver's output cap discarded output.
	OutputTruncated bool `json:"output_truncated,omitempty"`

	// Snapshot (done of a snapshot or restore record) is its outcome; Wake
	// (started of the first command after a restore record, in the default
	// context) says how the state came back (hibernate.go).
	Snapshot *HibResult `json:"snapshot,omitempty"`
	Wake     *HibResult `json:"wake,omitempty"`
}

// File is a workspace file created or changed by a command.
type File struct {
	// Path is relative to /workspace.
	Path string `json:"path"`
	// Size is in bytes.
	Size int64 `json:"size"`
}

// EncodeEvent returns the event as one line, newline included.
func EncodeEvent(e *Event) ([]byte, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// ParseEvent decodes one line of an events file, without its newline.
func ParseEvent(line []byte) (Event, error) {
	var e Event
	// go-json-experiment decodes about twice as fast as encoding/json: on a
	// streaming command sandboxd spends most of its time here.
	if err := jsonv2.Unmarshal(line, &e, jsontext.AllowInvalidUTF8(true)); err != nil {
		return Event{}, fmt.Errorf("bad event line: %w", err)
	}
	if e.Seq < 1 || e.Type == "" {
		return Event{}, fmt.Errorf("bad event line: missing seq or type")
	}
	return e, nil
}

// IsBinaryMIME reports whether a MIME bundle carries the type's value as
// base64 (images and other non-text data) rather than as text.
func IsBinaryMIME(mime string) bool {
	switch mime {
	case "image/svg+xml":
		return false
	}
	if len(mime) >= 6 && mime[:6] == "image/" {
		return true
	}
	switch mime {
	case "application/pdf", "application/octet-stream":
		return true
	}
	return false
}
