package orchestrator

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"

	"github.com/sandboxd/sandboxd/orchestrator/iolog"
)

// fsError classifies an error from the host file system for a user-supplied
// path (shown as display): a missing file is the caller's NotFound, an escape
// attempt or a wrong file type is the caller's InvalidArgument. Anything else
// (EIO, ENOSPC, ...) is returned unclassified: it is the server's fault, and
// grpcapi reports it as Internal while logging the detail.
func fsError(op, display string, err error) error {
	switch {
	case err == nil:
		return nil
	case isClassified(err):
		return err
	case errors.Is(err, fs.ErrNotExist):
		return notFoundf("%s %s: no such file or directory", op, display)
	case iolog.IsEscape(err):
		return invalidf("%s %s: path escapes /workspace", op, display)
	case errors.Is(err, syscall.ENOTDIR):
		return invalidf("%s %s: a parent of the path is not a directory", op, display)
	case errors.Is(err, syscall.EISDIR):
		return invalidf("%s %s: is a directory", op, display)
	case errors.Is(err, syscall.ENAMETOOLONG):
		return invalidf("%s %s: name too long", op, display)
	case errors.Is(err, fs.ErrExist):
		return invalidf("%s %s: already exists", op, display)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return exhaustedf("%s %s: no space left on the sandbox's disk", op, display)
	}
	return fmt.Errorf("%s %s: %w", op, display, err)
}
