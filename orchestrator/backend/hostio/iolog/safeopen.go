package iolog

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// Everything under io/ belongs to the sandbox user, so sandboxed code can
// replace any file there with a symlink to a host file, a FIFO, or a file
// of its own. sandboxd runs as root: every open under io/ therefore goes
// through an os.Root (no path, symlinks included, resolves outside io/),
// with O_NONBLOCK (a planted FIFO cannot block the open), and checks the
// file it got (openRegular, checkOwnedByUs).

// ErrTampered marks a file under io/ that is not what the protocol says it
// is: sandboxed code, which runs as the user owning io/, replaced it. An
// attempt to leave io/ through a planted symlink is reported as ErrTampered
// too.
var ErrTampered = errors.New("replaced from inside the sandbox")

// tampered marks err as ErrTampered without changing its text.
type tampered struct{ error }

func (t tampered) Is(target error) bool { return target == ErrTampered }
func (t tampered) Unwrap() error        { return t.error }

// openRegular opens name under root, makes sure it is a regular file and
// returns its stat for further checks (one fstat per open: this is on every
// command's path). O_NONBLOCK keeps a FIFO planted by the sandbox from
// blocking the open forever; it has no effect on regular files.
func openRegular(root *os.Root, name string, flag int) (*os.File, fs.FileInfo, error) {
	f, err := root.OpenFile(name, flag|syscall.O_NONBLOCK, 0)
	if err != nil {
		switch {
		case IsEscape(err):
			err = tampered{err}
		case errors.Is(err, syscall.EISDIR):
			err = fmt.Errorf("%s is a directory: %w", name, tampered{err})
		case errors.Is(err, syscall.ENXIO):
			// Opening a FIFO for writing without blocking fails with ENXIO
			// when nobody reads it (and a socket file always does): the
			// sandbox put one where the protocol has a regular file.
			err = fmt.Errorf("%s is not a regular file (a FIFO or socket): %w", name, tampered{err})
		}
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%s is not a regular file (%v): %w", name, st.Mode().Type(), ErrTampered)
	}
	return f, st, nil
}

// euid is sandboxd's effective user ID, which does not change.
var euid = os.Geteuid()

// checkOwnedByUs verifies that the file with stat st (shown as name) belongs
// to sandboxd's own user: the sandbox user cannot create such a file.
func checkOwnedByUs(st fs.FileInfo, name string) error {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != euid {
		return fmt.Errorf("%s is owned by uid %d, not by sandboxd: %w", name, sys.Uid, ErrTampered)
	}
	return nil
}

// IsEscape recognises os.Root's refusal to leave its directory. The os
// package does not export that error, so it is matched by its text (stable
// since Go 1.24: "path escapes from parent"); ELOOP is what openat returns
// for a symlink where os.Root used O_NOFOLLOW.
func IsEscape(err error) bool {
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Err != nil && pe.Err.Error() == "path escapes from parent" {
		return true
	}
	return errors.Is(err, syscall.ELOOP)
}

// sparseSlack: files up to this size are not checked for holes. Small files
// cost little to read whatever their layout, and ext4 may keep a tiny file's
// data inline (st_blocks 0).
const sparseSlack = 1 << 20

// openBounded is the one way iolog opens a file the sandbox can write for
// reading (the command log, events, artifacts, the driver's state): through
// root (no symlink followed, nothing outside io/), with O_NONBLOCK (a FIFO
// cannot block the open), and checked on the opened descriptor, not the
// path (the sandbox can swap the path between a check and the open):
//
//   - a regular file (not a FIFO, device, socket or directory);
//   - one link (a hard link would let the sandbox make one file several
//     files at once, e.g. the same big artifact under every name);
//   - at most maxSize bytes (a sandbox can make a file as large as it
//     likes with truncate, at no cost to itself);
//   - not sparse: a file of more than sparseSlack bytes must have at least
//     half its size allocated. The driver only ever appends or writes whole
//     files, which are dense; a sparse file is a forgery whose size costs
//     the sandbox nothing and sandboxd a full read (the "16 TiB" log).
//
// The result is the file, its stat, and a reader capped at the size fstat
// gave: a file growing after the check is read no further than that (the
// caller re-opens or reads on for a file that legitimately grows).
// Violations wrap ErrTampered with a message naming the file and the limit.
func openBounded(root *os.Root, name string, maxSize int64) (*os.File, fs.FileInfo, io.Reader, error) {
	f, st, err := openRegular(root, name, os.O_RDONLY)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := checkBounds(st, name, maxSize); err != nil {
		f.Close()
		return nil, nil, nil, err
	}
	return f, st, io.LimitReader(f, st.Size()), nil
}

// checkBounds applies openBounded's checks to the stat of an opened file.
func checkBounds(st fs.FileInfo, name string, maxSize int64) error {
	size := st.Size()
	if size > maxSize {
		return fmt.Errorf("%s is %d bytes long; the most sandboxd reads is %d: %w", name, size, maxSize, ErrTampered)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if sys.Nlink > 1 {
		return fmt.Errorf("%s has %d hard links; the driver makes files with one: %w", name, sys.Nlink, ErrTampered)
	}
	if size > sparseSlack && sys.Blocks*512 < size/2 {
		return fmt.Errorf("%s is sparse (%d bytes long, %d allocated); the driver writes dense files: %w", name, size, sys.Blocks*512, ErrTampered)
	}
	return nil
}
