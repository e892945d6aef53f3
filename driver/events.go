package driver

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

// eventsFile is one command's events file, open for appending. Only the
// driver writes it, one event per write(2), so a reader on the host never
// sees half an event.
type eventsFile struct {
	dir string
	id  string
	f   *os.File
	seq int64
	// done is set once the done event is written; nothing may follow it.
	done bool
	// output counts the bytes of output and rich data emitted as stored
	// (JSON-escaped in event lines, or in artifact files), against the
	// command's output cap; dropped counts what the caps discarded.
	output, dropped int64
	// lim holds the command's caps; zero values mean the driver's defaults
	// (output) and no bound (disk).
	lim limits
	// size is the length of the file's complete lines; written adds the
	// artifacts' sizes, for the disk accounting.
	size, written int64
	// ioErr is the first write that failed for lack of space: output is
	// then dropped and done says so.
	ioErr error
	// artifacts are the artifact files written for this command.
	artifacts []string
}

// diskBytes is what the command's files take on disk, in whole blocks.
func (w *eventsFile) diskBytes() int64 {
	return diskSize(w.size) + (w.written - w.size) + int64(len(w.artifacts))*blockSize
}

// errExists reports that a command already has an events file, which under
// the protocol means it must never run (again).
var errExists = errors.New("events file exists")

// createEvents creates the events file of command id in dir with started as
// its first event. The file appears atomically with that event in it: it is
// written under a temporary name and renamed into place.
func createEvents(dir, id, language string, now time.Time) (*eventsFile, error) {
	return createEventsIn(dir, id, language, "", now)
}

// createEventsIn is createEvents for a command of context contextID, which
// its started event names.
func createEventsIn(dir, id, language, contextID string, now time.Time) (*eventsFile, error) {
	return createEventsWake(dir, id, language, contextID, nil, now)
}

// createEventsWake is createEventsIn whose started event also carries wake:
// how the state came back, for the first command after a restore record.
func createEventsWake(dir, id, language, contextID string, wake *ioproto.HibResult, now time.Time) (*eventsFile, error) {
	final := filepath.Join(dir, ioproto.EventsFileName(id))
	if _, err := os.Lstat(final); err == nil {
		return nil, errExists
	}
	tmp := filepath.Join(dir, ".tmp-"+ioproto.EventsFileName(id))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	w := &eventsFile{dir: dir, id: id, f: f}
	if err := w.emit(&ioproto.Event{Type: ioproto.EventStarted, CommandID: id, Language: language, ContextID: contextID, Time: now.UTC(), Wake: wake}); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, err
	}
	if err := os.Rename(tmp, final); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, err
	}
	return w, nil
}

// openEvents opens an existing events file for appending after its last
// complete event; it is used to finish commands interrupted by a driver
// restart.
func openEvents(dir, id string) (*eventsFile, bool, error) {
	path := filepath.Join(dir, ioproto.EventsFileName(id))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		return nil, false, err
	}
	w := &eventsFile{dir: dir, id: id, f: f}
	r := ioproto.NewLineReader(f, 0, 64<<20)
	var sawDone bool
	var end int64
	for {
		line, ok, err := r.Next()
		if err != nil {
			f.Close()
			return nil, false, err
		}
		if !ok {
			break
		}
		end = line.End
		if ev, err := ioproto.ParseEvent(line.Data); err == nil {
			w.seq = ev.Seq
			if ev.Type == ioproto.EventDone {
				sawDone = true
			}
		}
	}
	// A torn last event (the driver died inside a write, which a single
	// write(2) makes very unlikely) is cut off so that appends stay whole.
	if st, err := f.Stat(); err == nil && st.Size() > end {
		if err := f.Truncate(end); err != nil {
			f.Close()
			return nil, false, err
		}
	}
	w.done = sawDone
	w.size, w.written = end, end
	return w, sawDone, nil
}

// emit numbers e, moves large MIME values to artifact files and appends e.
func (w *eventsFile) emit(e *ioproto.Event) error {
	if w.done {
		return fmt.Errorf("command %s: event %q after done", w.id, e.Type)
	}
	e.Seq = w.seq + 1
	if err := w.spill(e); err != nil {
		return err
	}
	line, err := ioproto.EncodeEvent(e)
	if err != nil {
		return err
	}
	if n, err := w.f.Write(line); err != nil {
		if n > 0 {
			// A torn line would glue the next event to it: cut it off.
			if terr := w.f.Truncate(w.size); terr != nil {
				return fmt.Errorf("%w (and the torn line could not be cut off: %v)", err, terr)
			}
		}
		return err
	}
	w.size += int64(len(line))
	w.written += int64(len(line))
	w.seq = e.Seq
	if e.Type == ioproto.EventDone {
		w.done = true
	}
	return nil
}

// spill moves MIME values above the artifact threshold into their own files,
// so event lines stay small and readers can skip what they do not need.
func (w *eventsFile) spill(e *ioproto.Event) error {
	n := 0
	for mime, v := range e.Data {
		if len(v) <= ioproto.ArtifactThreshold {
			continue
		}
		content := []byte(v)
		if ioproto.IsBinaryMIME(mime) {
			if b, err := base64.StdEncoding.DecodeString(v); err == nil {
				content = b
			}
		}
		n++
		name := ioproto.ArtifactFileName(w.id, e.Seq, n)
		if err := ioproto.WriteFileAtomic(filepath.Join(w.dir, name), content, 0o644); err != nil {
			return fmt.Errorf("write artifact: %w", err)
		}
		if e.Refs == nil {
			e.Refs = map[string]string{}
		}
		e.Refs[mime] = name
		w.artifacts = append(w.artifacts, name)
		w.written += int64(len(content))
		delete(e.Data, mime)
	}
	return nil
}

func (w *eventsFile) close() error { return w.f.Close() }
