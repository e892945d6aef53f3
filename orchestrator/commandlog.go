package orchestrator

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/sandboxd/sandboxd/ioproto"
)

// commandLog is a sandbox's command log, io/stdin, as the host writes it.
//
// mu serialises appends (the protocol requires writers to serialise per
// sandbox) and guards ids, the set of exec command IDs already in the log.
// ids is built lazily, by scanning the log once the first time the sandbox
// is used by this process, and then kept up to date by our own appends
// (sandboxd is the log's only writer), so idempotency costs one map lookup.
type commandLog struct {
	mu    sync.Mutex
	ioDir string
	// ids maps each command ID in the log to the offset just past its
	// record, to tell a queued command from one whose output was pruned.
	ids map[string]int64
	// size is the log's length as far as we know it.
	size int64
	// partial is set when the log ends in an incomplete line (a crash in the
	// middle of a write): the next append starts with a newline so that our
	// record is not glued to the debris.
	partial bool
}

func (l *commandLog) init(sandboxDir string) { l.ioDir = filepath.Join(sandboxDir, ioDir) }

// loadLocked builds ids by reading the whole log once. Call with mu held.
func (l *commandLog) loadLocked() error {
	if l.ids != nil {
		return nil
	}
	root, err := os.OpenRoot(l.ioDir)
	if err != nil {
		return err
	}
	defer root.Close()
	f, _, err := openRegular(root, ioproto.StdinFile, os.O_RDONLY)
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
	l.ids, l.size = ids, st.Size()
	l.partial = st.Size() > lr.Offset()
	return nil
}

// lookup reports whether command id is in the log and, if so, where its
// record ends.
func (l *commandLog) lookup(id string) (end int64, ok bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.loadLocked(); err != nil {
		return 0, false, err
	}
	end, ok = l.ids[id]
	return end, ok, nil
}

// appendLocked appends one encoded record (a complete line) with
// ioproto.AppendLineTo: a single write(2) on an O_APPEND descriptor. It does
// not use ioproto.AppendLine because that opens a path: io/ belongs to the
// sandbox user, so sandboxed code could replace stdin with a symlink to a
// host file, and sandboxd (root) would append to it. Opening through os.Root
// confines the open to io/, and the owner check refuses a file the sandbox
// made itself.
func (l *commandLog) appendLocked(line []byte) error {
	root, err := os.OpenRoot(l.ioDir)
	if err != nil {
		return err
	}
	defer root.Close()
	f, st, err := openRegular(root, ioproto.StdinFile, os.O_WRONLY|os.O_APPEND)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := checkOwnedByUs(st, "/io/"+ioproto.StdinFile); err != nil {
		return err
	}
	if l.partial {
		line = append([]byte{'\n'}, line...)
	}
	if err := ioproto.AppendLineTo(f, line); err != nil {
		n := len(line)
		if ae := (*ioproto.AppendError)(nil); errors.As(err, &ae) {
			n = ae.Written
		}
		l.size += int64(n)
		// Whatever part of the line was written is debris now.
		l.partial = n > 0 && line[n-1] != '\n'
		return fmt.Errorf("append to command log: %w", err)
	}
	l.size += int64(len(line))
	l.partial = false
	return nil
}

// openRegular opens name under root, makes sure it is a regular file and
// returns its stat for further checks (one fstat per open: this is on every
// command's path). O_NONBLOCK keeps a FIFO planted by the sandbox from
// blocking the open forever; it has no effect on regular files.
func openRegular(root *os.Root, name string, flag int) (*os.File, fs.FileInfo, error) {
	f, err := root.OpenFile(name, flag|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%s is not a regular file (%v): %w", name, st.Mode().Type(), errTampered)
	}
	return f, st, nil
}

// errTampered marks a file under io/ that is not what the protocol says it
// is: sandboxed code, which runs as the user owning io/, replaced it.
var errTampered = errors.New("replaced from inside the sandbox")

// euid is sandboxd's effective user ID, which does not change.
var euid = os.Geteuid()

// checkOwnedByUs verifies that the file with stat st (shown as name) belongs
// to sandboxd's own user: the sandbox user cannot create such a file.
func checkOwnedByUs(st fs.FileInfo, name string) error {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != euid {
		return fmt.Errorf("%s is owned by uid %d, not by sandboxd: %w", name, sys.Uid, errTampered)
	}
	return nil
}
