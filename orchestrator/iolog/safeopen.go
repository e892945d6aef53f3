package iolog

import (
	"errors"
	"fmt"
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
		if IsEscape(err) {
			err = tampered{err}
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
