package ioproto

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Names inside the /io directory.
const (
	StdinFile        = "stdin"
	StateFile        = "state.json"
	DriverStatusFile = "driver.json"
	OutDir           = "out"
	// ReserveFile, inside OutDir, is space the driver holds back so that it
	// can always finish a command (write its done event) when /io is full.
	// Its name starts with a dot, so readers ignore it.
	ReserveFile  = ".reserve"
	eventsSuffix = ".events"
)

// Values of DriverStatus.Health.
const (
	// HealthOK: the driver can take commands and store their output.
	HealthOK = "ok"
	// HealthIOFull: /io has no room left for commands' output even after
	// pruning; commands end at once with status error and a reason starting
	// with "/io is full". The host should report the sandbox as unhealthy
	// (with HealthReason) and may recycle it.
	HealthIOFull = "io_full"
)

// EventsFileName is the name, inside OutDir, of a command's events file.
func EventsFileName(commandID string) string { return commandID + eventsSuffix }

// ArtifactFileName is the name, inside OutDir, of the n-th large MIME value
// of event seq of a command.
func ArtifactFileName(commandID string, seq int64, n int) string {
	return commandID + "." + strconv.FormatInt(seq, 10) + "." + strconv.Itoa(n)
}

// CommandIDFromEventsFile returns the command ID named by an events file
// name, or false when name is not one (temporary files, artifacts).
func CommandIDFromEventsFile(name string) (string, bool) {
	id, ok := strings.CutSuffix(name, eventsSuffix)
	if !ok || ValidateCommandID(id) != nil {
		return "", false
	}
	return id, true
}

// State is /io/state.json: how far the driver has acted on the log.
type State struct {
	// Version is the protocol version, 1.
	Version int `json:"version"`
	// Offset is the byte offset in /io/stdin before which every record has
	// been fully acted on.
	Offset int64 `json:"offset"`
}

// DriverStatus is /io/driver.json: diagnostics about the running driver.
type DriverStatus struct {
	// Version is the protocol version, 1.
	Version int `json:"version"`
	// PID is the driver's process ID inside the container.
	PID int `json:"pid"`
	// StartedAt is when this driver process started.
	StartedAt time.Time `json:"started_at"`
	// Boot counts driver starts on this /io directory, from 1.
	Boot int64 `json:"boot"`
	// Wake is "inotify" or "poll": how the driver learns of new records.
	Wake string `json:"wake"`
	// KernelPID is the Python interpreter's process ID, 0 while none runs.
	KernelPID int `json:"kernel_pid,omitempty"`
	// Health is HealthOK or HealthIOFull; empty (drivers before it existed)
	// means HealthOK. The driver rewrites the file whenever it changes.
	Health string `json:"health,omitempty"`
	// HealthReason explains a Health other than HealthOK.
	HealthReason string `json:"health_reason,omitempty"`
	// OutBudget is the most bytes the driver lets /io/out take on disk (all
	// retained commands' events and artifacts and its reserve).
	OutBudget int64 `json:"out_budget,omitempty"`
	// MaxOutput is the per-command output cap in effect, in bytes as stored
	// (after JSON escaping).
	MaxOutput int64 `json:"max_output,omitempty"`
	// Languages lists the command languages this image supports (probed
	// at driver start: the interpreters present). Absent (drivers before
	// it existed) means LanguagePython and LanguageBash.
	Languages []string `json:"languages,omitempty"`
}

// ReadJSONFile decodes a small JSON file such as State or DriverStatus. A
// missing file is reported with an error satisfying errors.Is(err, os.ErrNotExist).
func ReadJSONFile(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	return nil
}

// WriteJSONFileAtomic replaces path with v encoded as JSON, atomically.
func WriteJSONFileAtomic(path string, v any, perm os.FileMode) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return WriteFileAtomic(path, append(b, '\n'), perm)
}

// WriteFileAtomic creates or replaces path with data so that readers see
// either nothing (or the old content) or all of data: it writes a temporary
// file in the same directory, whose name starts with a dot so that readers
// skip it, and renames it into place.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	dir, base := filepath.Split(path)
	f, err := os.CreateTemp(dir, ".tmp-"+base+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	if err := f.Chmod(perm); werr == nil {
		werr = err
	}
	if err := f.Close(); werr == nil {
		werr = err
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		os.Remove(tmp)
		return werr
	}
	return nil
}

// AppendLine appends one complete line to the file at path with a single
// write(2) on an O_APPEND descriptor, the only way the protocol allows lines
// to be added. line must end with a newline.
func AppendLine(path string, line []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	werr := AppendLineTo(f, line)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	return werr
}

// AppendLineTo is AppendLine on a descriptor the caller opened with
// O_APPEND, for writers that must open the file in a confined way. A
// failure is an *AppendError saying how many bytes reached the file.
func AppendLineTo(f *os.File, line []byte) error {
	if len(line) == 0 || line[len(line)-1] != '\n' {
		return errors.New("append: line must end with a newline")
	}
	n, err := f.Write(line)
	if err == nil && n != len(line) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return &AppendError{Written: n, Err: err}
	}
	return nil
}

// AppendError reports a failed append and how much of the line was
// written, which a writer needs to repair the log's last line.
type AppendError struct {
	Written int
	Err     error
}

func (e *AppendError) Error() string {
	return fmt.Sprintf("append: %v (%d bytes written)", e.Err, e.Written)
}
func (e *AppendError) Unwrap() error { return e.Err }

// LineReader reads complete lines from a file that others append to, keeping
// its position between calls. Bytes after the last newline are left for a
// later call, so a line written in several parts is returned once, whole.
type LineReader struct {
	f      *os.File
	offset int64 // file offset of buf[start]
	// buf[start:end] holds bytes read but not yet returned. The buffer starts
	// small and grows only as far as long lines need: readers are made per
	// command, and most events files are a few hundred bytes.
	buf        []byte
	start, end int
	maxLine    int
	skip       bool
}

// minRead is the least free space a read gets, and the first buffer's size.
const minRead = 4 << 10

// NewLineReader reads f from offset. Lines longer than maxLine bytes are
// returned truncated to maxLine with ErrLineTooLong (and the rest of them is
// skipped), so a runaway writer cannot make the reader buffer without limit.
func NewLineReader(f *os.File, offset int64, maxLine int) *LineReader {
	return &LineReader{f: f, offset: offset, maxLine: maxLine}
}

// ErrLineTooLong marks a line that exceeded the reader's limit.
var ErrLineTooLong = errors.New("line too long")

// Line is one complete line read by a LineReader.
type Line struct {
	// Data is the line without its newline; it stays valid until the next Next.
	Data []byte
	// Start is the byte offset of the line's first byte; End is just past its newline.
	Start, End int64
	// Err is ErrLineTooLong when Data was cut short.
	Err error
}

// Offset returns the position just past the last complete line returned.
func (r *LineReader) Offset() int64 { return r.offset }

// ReadTo returns the position up to which the file has been read: the
// lines returned and the bytes still pending. A file that only grows (as
// the protocol's files do) is never shorter than this.
func (r *LineReader) ReadTo() int64 { return r.offset + int64(r.end-r.start) }

// Next returns the next complete line, or ok=false when no complete line is
// available yet. A read error other than EOF is returned as err.
func (r *LineReader) Next() (line Line, ok bool, err error) {
	for {
		pending := r.buf[r.start:r.end]
		if i := bytes.IndexByte(pending, '\n'); i >= 0 {
			data := pending[:i]
			start := r.offset
			r.offset += int64(i + 1)
			r.start += i + 1
			if r.skip {
				// The tail of an over-long line already reported.
				r.skip = false
				continue
			}
			if len(data) > r.maxLine {
				return Line{Data: data[:r.maxLine], Start: start, End: r.offset, Err: ErrLineTooLong}, true, nil
			}
			return Line{Data: data, Start: start, End: r.offset}, true, nil
		}
		if len(pending) > r.maxLine {
			// Report the over-long line once, then drop bytes up to its newline.
			start := r.offset
			r.offset += int64(len(pending))
			r.start, r.end = 0, 0
			if !r.skip {
				r.skip = true
				return Line{Data: pending[:r.maxLine], Start: start, End: r.offset, Err: ErrLineTooLong}, true, nil
			}
		}
		// Move what is pending to the front (Data returned earlier is only
		// valid until this call) and make room for a read.
		if r.start > 0 {
			r.end = copy(r.buf, r.buf[r.start:r.end])
			r.start = 0
		}
		if len(r.buf)-r.end < minRead {
			nb := make([]byte, max(2*len(r.buf), r.end+minRead))
			copy(nb, r.buf[:r.end])
			r.buf = nb
		}
		n, err := r.f.ReadAt(r.buf[r.end:], r.offset+int64(r.end))
		r.end += n
		if n > 0 {
			continue
		}
		if err != nil && err != io.EOF {
			return Line{}, false, err
		}
		return Line{}, false, nil
	}
}
