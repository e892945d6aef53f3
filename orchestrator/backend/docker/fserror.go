package docker

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"

	"github.com/sandboxd/sandboxd/orchestrator/core"

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
	case core.IsClassified(err):
		return err
	case errors.Is(err, fs.ErrNotExist):
		return core.NotFoundf("%s %s: no such file or directory", op, display)
	case iolog.IsEscape(err):
		return core.Invalidf("%s %s: path escapes /workspace", op, display)
	case errors.Is(err, syscall.ENOTDIR):
		return core.Invalidf("%s %s: a parent of the path is not a directory", op, display)
	case errors.Is(err, syscall.EISDIR):
		return core.Invalidf("%s %s: is a directory", op, display)
	case errors.Is(err, syscall.ENAMETOOLONG):
		return core.Invalidf("%s %s: name too long", op, display)
	case errors.Is(err, fs.ErrExist):
		return core.Invalidf("%s %s: already exists", op, display)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return core.Exhaustedf("%s %s: no space left on the sandbox's disk", op, display)
	}
	return fmt.Errorf("%s %s: %w", op, display, err)
}
