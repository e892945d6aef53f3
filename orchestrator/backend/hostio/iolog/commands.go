package iolog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

// Bounds on what telling a command's progress reads of its events file:
// the first line (the started event, a few hundred bytes) and the last
// (done, which the driver keeps under 64 KiB). A forged file costs at most
// these per listed command, whatever its size.
const (
	headBytes = 4 << 10
	// tailBytes: a first look at the end; most done lines fit.
	tailBytes = 4 << 10
	// maxTailBytes: the driver's bound on done's line (64 KiB) and slack.
	maxTailBytes = 80 << 10
)

// CommandEntry is what the command log says of one command.
type CommandEntry struct {
	ID string
	// Language is one of ioproto's languages; empty for a malformed
	// record (the driver answered it with an error).
	Language string
	// ContextID is the record's context (empty: the default context).
	ContextID string
	// Stdin and Pty: the command was started with its input open, or on
	// a terminal (which implies Stdin).
	Stdin, Pty bool
	// Index is the command's position in the log, 0 for the first.
	Index int
	// recordEnd is where its record ends in the log.
	recordEnd int64
}

// Command returns command id's entry; ok is false when it is not in the
// log.
func (d *Dir) Command(ctx context.Context, id string) (e CommandEntry, ok bool, err error) {
	if err := d.ensureLoaded(ctx); err != nil {
		return CommandEntry{}, false, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	le, ok := d.ids[id]
	if !ok {
		return CommandEntry{}, false, nil
	}
	return CommandEntry{ID: id, Language: le.lang, ContextID: le.context, Stdin: le.stdin, Pty: le.pty, recordEnd: le.end}, true, nil
}

// Commands returns up to n commands, newest first, among those at log
// positions below before (before <= 0 or beyond the log: from the newest).
// total is the number of commands in the log.
func (d *Dir) Commands(ctx context.Context, before, n int) (list []CommandEntry, total int, err error) {
	if err := d.ensureLoaded(ctx); err != nil {
		return nil, 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	total = len(d.order)
	if before <= 0 || before > total {
		before = total
	}
	for i := before - 1; i >= 0 && len(list) < n; i-- {
		id := d.order[i]
		le := d.ids[id]
		list = append(list, CommandEntry{ID: id, Language: le.lang, ContextID: le.context, Stdin: le.stdin, Pty: le.pty, Index: i, recordEnd: le.end})
	}
	return list, total, nil
}

// Phase is where a command is in its life, as its files tell.
type Phase int

const (
	// PhaseUnknown: its events file cannot be read (tampered with).
	PhaseUnknown Phase = iota
	// PhaseQueued: the driver has not started it.
	PhaseQueued
	// PhaseRunning: started, no done yet.
	PhaseRunning
	// PhaseFinished: done is written (Done is set), or the driver acted
	// on the command and its files were pruned since (Done is nil).
	PhaseFinished
)

// Progress is what a command's files say of it.
type Progress struct {
	Phase Phase
	// StartedAt is the started event's time; zero when not known.
	StartedAt time.Time
	// Done is the done event, when it was read.
	Done *ioproto.Event
	// OutputAvailable: the events file exists (not pruned), so the
	// command's output can still be streamed.
	OutputAvailable bool
}

// Progress tells, for each entry, where the command is: from the driver's
// state file (read once) and a bounded read of the head and tail of each
// events file (headBytes + at most maxTailBytes). What the sandbox forged
// is reported as PhaseUnknown, never an error; only ctx's end or Close
// are.
func (d *Dir) Progress(ctx context.Context, entries []CommandEntry) ([]Progress, error) {
	d.mu.Lock()
	err := d.addReaderLocked()
	d.mu.Unlock()
	if err != nil {
		return nil, err
	}
	defer d.doneReader()
	root, err := os.OpenRoot(d.path)
	if err != nil {
		return nil, fmt.Errorf("open sandbox io directory: %w", err)
	}
	defer root.Close()
	stateOffset := int64(-1)
	if file, _, r, err := openBounded(root, ioproto.StateFile, maxStateFile); err == nil {
		var st ioproto.State
		if b, err := io.ReadAll(r); err == nil && json.Unmarshal(b, &st) == nil {
			stateOffset = st.Offset
		}
		file.Close()
	}
	out := make([]Progress, len(entries))
	for i, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if d.closed() {
			return nil, ErrClosed
		}
		out[i] = progressOf(root, e, stateOffset)
	}
	return out, nil
}

func progressOf(root *os.Root, e CommandEntry, stateOffset int64) Progress {
	name := path.Join(ioproto.OutDir, ioproto.EventsFileName(e.ID))
	file, st, _, err := openBounded(root, name, maxEventsFile)
	if errors.Is(err, fs.ErrNotExist) {
		// The driver creates the events file before its saved offset
		// passes the record: past it and no file means pruned (or
		// skipped); before it, not started.
		if stateOffset >= e.recordEnd {
			return Progress{Phase: PhaseFinished}
		}
		// Look again: the command may have started just now.
		if file, st, _, err = openBounded(root, name, maxEventsFile); errors.Is(err, fs.ErrNotExist) {
			return Progress{Phase: PhaseQueued}
		}
	}
	if err != nil {
		return Progress{Phase: PhaseUnknown}
	}
	defer file.Close()
	p := Progress{Phase: PhaseRunning, OutputAvailable: true}
	head := make([]byte, min(headBytes, st.Size()))
	n, _ := io.ReadFull(file, head)
	if i := bytes.IndexByte(head[:n], '\n'); i >= 0 {
		if ev, err := ioproto.ParseEvent(head[:i]); err == nil && ev.Type == ioproto.EventStarted {
			p.StartedAt = ev.Time
		}
	}
	if done := lastEvent(file, st.Size()); done != nil && done.Type == ioproto.EventDone {
		p.Phase, p.Done = PhaseFinished, done
	}
	return p
}

// lastEvent parses the last complete line of a file of size bytes, reading
// at most maxTailBytes from its end; nil when that line is not an event or
// longer than the bound.
func lastEvent(f *os.File, size int64) *ioproto.Event {
	for _, want := range []int64{tailBytes, maxTailBytes} {
		off := max(0, size-want)
		buf := make([]byte, size-off)
		n, err := f.ReadAt(buf, off)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil
		}
		buf = buf[:n]
		end := bytes.LastIndexByte(buf, '\n')
		if end < 0 {
			if off == 0 {
				return nil
			}
			continue
		}
		start := bytes.LastIndexByte(buf[:end], '\n') + 1
		if start == 0 && off > 0 {
			continue // the line may start before what was read
		}
		ev, err := ioproto.ParseEvent(buf[start:end])
		if err != nil {
			return nil
		}
		return &ev
	}
	return nil
}
