package iolog

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/sandboxd/sandboxd/ioproto"
)

// ErrUnknownCommand: the command is not in the sandbox's command log.
var ErrUnknownCommand = errors.New("command not in the command log")

// Append appends rec to the command log (io/stdin), once: an exec record
// whose command ID is already in the log is not appended again, and Append
// reports appended=false (the caller's retried submission must not run a
// command twice). An interrupt record must name a command in the log, or
// Append fails with ErrUnknownCommand.
//
// ready, if not nil, is called with appends held (see HoldAppends) just
// before the write; its error cancels the append and is returned as is.
// The orchestrator refuses appends to a dead or deleted sandbox there.
func (d *Dir) Append(rec ioproto.Record, ready func() error) (appended bool, err error) {
	line, err := ioproto.EncodeRecord(rec)
	if err != nil {
		return false, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.loadLocked(); err != nil {
		return false, err
	}
	_, known := d.ids[rec.CommandID]
	switch {
	case rec.Type == ioproto.KindExec && known:
		return false, nil
	case rec.Type == ioproto.KindInterrupt && !known:
		return false, ErrUnknownCommand
	}
	if ready != nil {
		if err := ready(); err != nil {
			return false, err
		}
	}
	if err := d.appendLocked(line); err != nil {
		return false, err
	}
	if rec.Type == ioproto.KindExec {
		d.ids[rec.CommandID] = d.size
	}
	return true, nil
}

// lookup reports whether command id is in the log and, if so, where its
// record ends.
func (d *Dir) lookup(id string) (end int64, ok bool, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.loadLocked(); err != nil {
		return 0, false, err
	}
	end, ok = d.ids[id]
	return end, ok, nil
}

// loadLocked builds ids by reading the whole log once. Call with mu held.
func (d *Dir) loadLocked() error {
	if d.ids != nil {
		return nil
	}
	f, _, err := d.openLog(os.O_RDONLY)
	if err != nil {
		return err
	}
	defer f.Close()
	ids := make(map[string]int64)
	lr := ioproto.NewLineReader(f, 0, ioproto.MaxRecordLen)
	for {
		line, ok, err := lr.Next()
		if err != nil {
			return fmt.Errorf("read command log: %w", err)
		}
		if !ok {
			break
		}
		// Count every ID the driver would count as a command: valid exec
		// records, and malformed ones it answers under their ID. Interrupts
		// only refer to commands.
		rec, id, perr := ioproto.ParseRecord(line.Data)
		if id == "" || (perr == nil && rec.Type == ioproto.KindInterrupt) {
			continue
		}
		if _, seen := ids[id]; !seen {
			ids[id] = line.End
		}
	}
	st, err := f.Stat()
	if err != nil {
		return err
	}
	d.ids, d.size = ids, st.Size()
	d.partial = st.Size() > lr.Offset()
	return nil
}

// openLog opens the command log through an os.Root confined to io/ (the
// file stays open when the root is closed).
func (d *Dir) openLog(flag int) (*os.File, fs.FileInfo, error) {
	root, err := os.OpenRoot(d.path)
	if err != nil {
		return nil, nil, err
	}
	defer root.Close()
	return openRegular(root, ioproto.StdinFile, flag)
}

// appendLocked appends one encoded record (a complete line) with
// ioproto.AppendLineTo: a single write(2) on an O_APPEND descriptor. It does
// not use ioproto.AppendLine because that opens a path: io/ belongs to the
// sandbox user, so sandboxed code could replace stdin with a symlink to a
// host file, and sandboxd (root) would append to it. Opening through os.Root
// confines the open to io/, and the owner check refuses a file the sandbox
// made itself. Call with mu held.
func (d *Dir) appendLocked(line []byte) error {
	f, st, err := d.openLog(os.O_WRONLY | os.O_APPEND)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := checkOwnedByUs(st, "/io/"+ioproto.StdinFile); err != nil {
		return err
	}
	if d.partial {
		line = append([]byte{'\n'}, line...)
	}
	if err := ioproto.AppendLineTo(f, line); err != nil {
		n := len(line)
		if ae := (*ioproto.AppendError)(nil); errors.As(err, &ae) {
			n = ae.Written
		}
		d.size += int64(n)
		// Whatever part of the line was written is debris now.
		d.partial = n > 0 && line[n-1] != '\n'
		return fmt.Errorf("append to command log: %w", err)
	}
	d.size += int64(len(line))
	d.partial = false
	return nil
}
