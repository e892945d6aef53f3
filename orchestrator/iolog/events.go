package iolog

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"strings"

	"github.com/sandboxd/sandboxd/ioproto"
)

// Bounds on what a follower reads from files the sandbox writes: the driver
// keeps well inside them, sandboxed code trying to exhaust sandboxd's memory
// does not.
const (
	// maxEventLine bounds one events line: a 64 KiB output chunk can grow
	// six-fold with JSON escaping, and display events carry MIME values of
	// up to 256 KiB each inline.
	maxEventLine = 8 << 20
	// maxArtifactBytes bounds one artifact read back into an event.
	maxArtifactBytes = 64 << 20
)

// Events reads one command's events file (io/out/<id>.events) as the
// driver appends to it. It is not safe for concurrent use: each follower
// has its own.
type Events struct {
	root      *os.Root // the sandbox's io directory
	cmd       string
	recordEnd int64 // where the command's record ends in the log
	last      int64 // highest seq delivered (or skipped as not wanted)
	log       *slog.Logger
	file      *os.File // nil until the events file exists
	lr        *ioproto.LineReader
}

// Events opens command cmd's events for reading, to deliver those with
// seq above afterSeq. The command must be in the log (ErrUnknownCommand
// otherwise); its events file need not exist yet. Warnings about what the
// sandbox wrote go to log, with the command ID. Close the result.
func (d *Dir) Events(cmd string, afterSeq int64, log *slog.Logger) (*Events, error) {
	end, ok, err := d.lookup(cmd)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, ErrUnknownCommand
	}
	root, err := os.OpenRoot(d.path)
	if err != nil {
		return nil, fmt.Errorf("open sandbox io directory: %w", err)
	}
	return &Events{root: root, cmd: cmd, recordEnd: end, last: afterSeq, log: log.With("command_id", cmd)}, nil
}

// Close releases the files.
func (e *Events) Close() error {
	if e.file != nil {
		e.file.Close()
	}
	return e.root.Close()
}

// Drain calls fn for every complete event available now with a seq above
// the last one delivered, in order, and reports done=true after the done
// event (at once, if done's seq is not above afterSeq: there is nothing
// left to send). Events whose values the driver moved to artifact files
// come with those values back in Data (base64 for binary MIME types) and
// no Refs. Lines that are not events (over-long, malformed) are logged and
// skipped. fn's error is returned as is; an events file replaced by the
// sandbox is an error wrapping ErrTampered.
func (e *Events) Drain(fn func(ioproto.Event) error) (done bool, err error) {
	if e.file == nil {
		file, _, err := openRegular(e.root, path.Join(ioproto.OutDir, ioproto.EventsFileName(e.cmd)), os.O_RDONLY)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil // not started yet
		}
		if err != nil {
			return false, fmt.Errorf("open events of command %s: %w", e.cmd, err)
		}
		e.file, e.lr = file, ioproto.NewLineReader(file, 0, maxEventLine)
	}
	for {
		line, ok, err := e.lr.Next()
		if err != nil {
			return false, fmt.Errorf("read events of command %s: %w", e.cmd, err)
		}
		if !ok {
			return false, nil
		}
		if line.Err != nil {
			e.log.Warn("skipping over-long events line", "offset", line.Start)
			continue
		}
		ev, err := ioproto.ParseEvent(line.Data)
		if err != nil {
			e.log.Warn("skipping malformed events line", "offset", line.Start, "error", err)
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
			e.resolveRefs(&ev)
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
// cannot be read (pruned, tampered with) is left out and logged: the rest of
// the event is still worth delivering.
func (e *Events) resolveRefs(ev *ioproto.Event) {
	for mime, name := range ev.Refs {
		data, err := e.readArtifact(name)
		if err != nil {
			e.log.Warn("cannot read artifact", "seq", ev.Seq, "mime", mime, "artifact", name, "error", err)
			continue
		}
		if ev.Data == nil {
			ev.Data = make(map[string]string, len(ev.Refs))
		}
		if ioproto.IsBinaryMIME(mime) {
			ev.Data[mime] = base64.StdEncoding.EncodeToString(data)
		} else {
			ev.Data[mime] = string(data)
		}
	}
	ev.Refs = nil
}

// readArtifact reads artifact name from io/out. Names come from a file the
// sandbox can write, so only a plain name of this command's artifacts is
// accepted, and the read goes through os.Root.
func (e *Events) readArtifact(name string) ([]byte, error) {
	if name == "" || strings.ContainsAny(name, "/\x00") || strings.HasPrefix(name, ".") || !strings.HasPrefix(name, e.cmd+".") {
		return nil, fmt.Errorf("invalid artifact name %q", name)
	}
	file, _, err := openRegular(e.root, path.Join(ioproto.OutDir, name), os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	data, err := io.ReadAll(io.LimitReader(file, maxArtifactBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxArtifactBytes {
		return nil, fmt.Errorf("artifact is larger than %d bytes", maxArtifactBytes)
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
	file, _, err := openRegular(e.root, ioproto.StateFile, os.O_RDONLY)
	if err != nil {
		return false
	}
	defer file.Close()
	var st ioproto.State
	b, err := io.ReadAll(io.LimitReader(file, 4096))
	if err != nil || json.Unmarshal(b, &st) != nil || st.Offset < e.recordEnd {
		return false
	}
	// The driver creates the events file before it moves its offset past the
	// record; look once more in case the file appeared just now.
	_, err = e.root.Lstat(path.Join(ioproto.OutDir, ioproto.EventsFileName(e.cmd)))
	return errors.Is(err, fs.ErrNotExist)
}
