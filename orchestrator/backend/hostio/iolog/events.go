package iolog

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/sandboxd/sandboxd/ioproto"
)

// Bounds on what a follower reads from files the sandbox writes: the driver
// keeps well inside them, sandboxed code trying to exhaust sandboxd's memory
// or CPU does not. A file beyond them is refused as tampered with.
const (
	// maxEventLine bounds one events line: a 64 KiB output chunk can grow
	// six-fold with JSON escaping, and display events carry MIME values of
	// up to 256 KiB each inline.
	maxEventLine = 8 << 20
	// maxEventsFile bounds one events file: the driver's output cap is at
	// most its out budget (at most 1 GiB), and the file at most the cap
	// plus a quarter plus 256 KiB (PROTOCOL.md, "Output cap").
	maxEventsFile = 2 << 30
	// maxArtifactBytes bounds one artifact read back into an event, and
	// maxEventArtifactBytes all the values one event gets from artifacts
	// (counted as delivered: base64 for binary types). 40 MiB keeps an
	// event, with its base64 and the rest of the message, under the 64
	// MiB sandboxv1.MaxMessageSize that sandboxd can send; the driver
	// moves to artifacts only values over 256 KiB, and real plots are a
	// few MiB.
	maxArtifactBytes      = 40 << 20
	maxEventArtifactBytes = 40 << 20
	// maxRefsPerEvent bounds the artifacts one event may refer to. The
	// driver writes one per MIME value of a display result, a handful; a
	// forged event referring to one artifact 200,000 times would have
	// sandboxd read and copy it as often.
	maxRefsPerEvent = 16
	// maxStateFile bounds the driver's state.json (a few dozen bytes).
	maxStateFile = 4 << 10
	// drainCheckEvery: a Drain looks at its context and at Close every so
	// many lines (or checkEveryBytes), so that a caller gone or a Delete
	// stops it promptly however large the file.
	drainCheckEvery = 64
)

// Events reads one command's events file (io/out/<id>.events) as the
// driver appends to it. It is not safe for concurrent use: each follower
// has its own.
type Events struct {
	dir       *Dir
	ctx       context.Context
	root      *os.Root // the sandbox's io directory
	cmd       string
	recordEnd int64 // where the command's record ends in the log
	last      int64 // highest seq delivered (or skipped as not wanted)
	log       *slog.Logger
	file      *os.File // nil until the events file exists
	lr        *ioproto.LineReader
	closed    bool

	// What was skipped, logged once (the first of each kind in detail) and
	// summed up at Close: a sandbox writing garbage must not turn each
	// bad line into a line of sandboxd's log.
	malformed, overlong, badRefs int
}

// Events opens command cmd's events for reading, to deliver those with
// seq above afterSeq. The command must be in the log (ErrUnknownCommand
// otherwise); its events file need not exist yet. Warnings about what the
// sandbox wrote go to log, with the command ID. Close the result.
func (d *Dir) Events(cmd string, afterSeq int64, log *slog.Logger) (*Events, error) {
	return d.EventsContext(context.Background(), cmd, afterSeq, log)
}

// EventsContext is Events for a caller whose ctx bounds the reads: the
// log's load, and every Drain, stop when ctx ends (with ctx.Err()) or when
// the Dir is closed (with ErrClosed).
func (d *Dir) EventsContext(ctx context.Context, cmd string, afterSeq int64, log *slog.Logger) (*Events, error) {
	end, ok, err := d.lookup(ctx, cmd)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, ErrUnknownCommand
	}
	d.mu.Lock()
	err = d.addReaderLocked()
	d.mu.Unlock()
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(d.path)
	if err != nil {
		d.doneReader()
		return nil, fmt.Errorf("open sandbox io directory: %w", err)
	}
	return &Events{dir: d, ctx: ctx, root: root, cmd: cmd, recordEnd: end, last: afterSeq, log: log.With("command_id", cmd)}, nil
}

// Close releases the files, and logs what was skipped.
func (e *Events) Close() error {
	if e.closed {
		return nil
	}
	e.closed = true
	if e.malformed+e.overlong+e.badRefs > 0 {
		e.log.Warn("skipped what the sandbox wrote wrong in an events file",
			"malformed_lines", e.malformed, "overlong_lines", e.overlong, "bad_refs", e.badRefs)
	}
	if e.file != nil {
		e.file.Close()
	}
	err := e.root.Close()
	e.dir.doneReader()
	return err
}

// check stops a Drain whose caller has gone or whose sandbox is deleted.
func (e *Events) check() error {
	if err := e.ctx.Err(); err != nil {
		return err
	}
	if e.dir.closed() {
		return ErrClosed
	}
	return nil
}

// Drain calls fn for every complete event available now with a seq above
// the last one delivered, in order, and reports done=true after the done
// event (at once, if done's seq is not above afterSeq: there is nothing
// left to send). Events whose values the driver moved to artifact files
// come with those values back in Data (base64 for binary MIME types) and
// no Refs. Lines that are not events (over-long, malformed) are skipped,
// and counted for one warning at Close. fn's error is returned as is; an
// events file replaced by the sandbox, or beyond maxEventsFile or sparse,
// is an error wrapping ErrTampered; the context's end or Close stop it.
func (e *Events) Drain(fn func(ioproto.Event) error) (done bool, err error) {
	if err := e.check(); err != nil {
		return false, err
	}
	name := path.Join(ioproto.OutDir, ioproto.EventsFileName(e.cmd))
	if e.file == nil {
		file, _, _, err := openBounded(e.root, name, maxEventsFile)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil // not started yet
		}
		if err != nil {
			return false, fmt.Errorf("open events of command %s: %w", e.cmd, err)
		}
		e.file, e.lr = file, ioproto.NewLineReader(file, 0, maxEventLine)
	} else {
		// The file grows as the command runs: check it again, on the
		// descriptor, before reading what was added.
		st, err := e.file.Stat()
		if err != nil {
			return false, fmt.Errorf("read events of command %s: %w", e.cmd, err)
		}
		if err := checkBounds(st, name, maxEventsFile); err != nil {
			return false, fmt.Errorf("read events of command %s: %w", e.cmd, err)
		}
		// The driver only appends. A file now shorter than what was read of
		// it was truncated from inside the sandbox: reading on would wait at
		// a position the file never reaches again, until the caller's
		// deadline (a Follow hung on a shrunk file).
		if pos := e.lr.ReadTo(); st.Size() < pos {
			return false, fmt.Errorf("read events of command %s: %s shrank from at least %d to %d bytes; the driver only appends: %w", e.cmd, name, pos, st.Size(), ErrTampered)
		}
	}
	checked := e.lr.Offset()
	for n := 1; ; n++ {
		if n%drainCheckEvery == 0 || e.lr.Offset()-checked >= checkEveryBytes {
			checked = e.lr.Offset()
			if err := e.check(); err != nil {
				return false, err
			}
		}
		line, ok, err := e.lr.Next()
		if err != nil {
			return false, fmt.Errorf("read events of command %s: %w", e.cmd, err)
		}
		if !ok {
			return false, nil
		}
		if e.lr.Offset() > maxEventsFile {
			return false, fmt.Errorf("read events of command %s: the file grew past %d bytes: %w", e.cmd, int64(maxEventsFile), ErrTampered)
		}
		if line.Err != nil {
			if e.overlong == 0 {
				e.log.Warn("skipping over-long events line (further ones are counted, not logged)", "offset", line.Start)
			}
			e.overlong++
			continue
		}
		ev, err := ioproto.ParseEvent(line.Data)
		if err != nil {
			if e.malformed == 0 {
				e.log.Warn("skipping malformed events line (further ones are counted, not logged)", "offset", line.Start, "error", err)
			}
			e.malformed++
			continue
		}
		if ev.Seq <= e.last {
			if ev.Type == ioproto.EventDone {
				return true, nil // the caller has everything, done included
			}
			continue
		}
		e.last = ev.Seq
		if len(ev.Refs) > 0 {
			if err := e.resolveRefs(&ev); err != nil {
				return false, err
			}
		}
		if err := fn(ev); err != nil {
			return false, err
		}
		if ev.Type == ioproto.EventDone {
			return true, nil
		}
	}
}

// resolveRefs reads an event's artifacts back into its Data. An artifact that
// cannot be read (pruned, tampered with) is left out and counted: the rest
// of the event is still worth delivering. Bounded whatever the event says:
// at most maxRefsPerEvent refs are followed (in MIME order, the rest are
// dropped), each artifact file is read at most once however many refs name
// it, and the values added stay within maxEventArtifactBytes. Only the
// caller's end or Close are errors.
func (e *Events) resolveRefs(ev *ioproto.Event) error {
	mimes := make([]string, 0, len(ev.Refs))
	for mime := range ev.Refs {
		mimes = append(mimes, mime)
	}
	slices.Sort(mimes)
	if len(mimes) > maxRefsPerEvent {
		e.skipRef(ev.Seq, "", "", fmt.Errorf("event refers to %d artifacts; the limit is %d", len(mimes), maxRefsPerEvent))
		e.badRefs += len(mimes) - maxRefsPerEvent - 1
		mimes = mimes[:maxRefsPerEvent]
	}
	read := make(map[string][]byte, len(mimes)) // artifact name → content (nil: unreadable)
	budget := int64(maxEventArtifactBytes)
	for _, mime := range mimes {
		if err := e.check(); err != nil {
			return err
		}
		name := ev.Refs[mime]
		data, seen := read[name]
		if !seen {
			var err error
			data, err = e.readArtifact(name, budget)
			read[name] = data
			if err != nil {
				e.skipRef(ev.Seq, mime, name, err)
				continue
			}
		}
		if data == nil {
			e.badRefs++
			continue
		}
		value := string(data)
		if ioproto.IsBinaryMIME(mime) {
			value = base64.StdEncoding.EncodeToString(data)
		}
		if int64(len(value)) > budget {
			e.skipRef(ev.Seq, mime, name, fmt.Errorf("the event's artifacts exceed %d bytes", int64(maxEventArtifactBytes)))
			continue
		}
		budget -= int64(len(value))
		if ev.Data == nil {
			ev.Data = make(map[string]string, len(mimes))
		}
		ev.Data[mime] = value
	}
	ev.Refs = nil
	return nil
}

// artifactReads counts artifact opens, for tests of read-once.
var artifactReads atomic.Int64

// skipRef counts a ref left out, logging the first of the Events in detail.
func (e *Events) skipRef(seq int64, mime, name string, err error) {
	if e.badRefs == 0 {
		e.log.Warn("cannot read artifact (further ones are counted, not logged)", "seq", seq, "mime", mime, "artifact", name, "error", err)
	}
	e.badRefs++
}

// readArtifact reads artifact name from io/out, if it is at most
// min(maxArtifactBytes, budget) bytes. Names come from a file the sandbox
// can write, so only a plain name of this command's artifacts is accepted,
// and the read goes through openBounded: no symlink, no FIFO, no sparse
// file, and the size checked on the descriptor before the buffer is made.
func (e *Events) readArtifact(name string, budget int64) ([]byte, error) {
	if name == "" || strings.ContainsAny(name, "/\x00") || strings.HasPrefix(name, ".") || !strings.HasPrefix(name, e.cmd+".") {
		return nil, fmt.Errorf("invalid artifact name %q", name)
	}
	artifactReads.Add(1)
	limit := min(int64(maxArtifactBytes), budget)
	file, st, r, err := openBounded(e.root, path.Join(ioproto.OutDir, name), limit)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	data := make([]byte, st.Size())
	if _, err := io.ReadFull(r, data); err != nil {
		return nil, err
	}
	return data, nil
}

// Pruned reports whether the command's events file is missing because the
// driver pruned it (rather than because the command has not started): no
// events file has been seen, and the driver's state says it has acted on
// the command's record. It costs a read of the driver's state file, so
// followers ask only now and then. Any doubt (no state yet, unreadable
// state) means "not pruned": keep waiting.
func (e *Events) Pruned() bool {
	if e.file != nil {
		return false
	}
	file, _, r, err := openBounded(e.root, ioproto.StateFile, maxStateFile)
	if err != nil {
		return false
	}
	defer file.Close()
	var st ioproto.State
	b, err := io.ReadAll(r)
	if err != nil || json.Unmarshal(b, &st) != nil || st.Offset < e.recordEnd {
		return false
	}
	// The driver creates the events file before it moves its offset past the
	// record; look once more in case the file appeared just now.
	_, err = e.root.Lstat(path.Join(ioproto.OutDir, ioproto.EventsFileName(e.cmd)))
	return errors.Is(err, fs.ErrNotExist)
}
