// Package wspath holds the rules for paths under a sandbox's /workspace and
// the few os.Root helpers that create files there for the sandbox user. It
// is shared by the orchestrator (which reaches the workspace on the host,
// Docker backend) and the io sidecar (which reaches it inside the Pod,
// Kubernetes backend), so that a path means the same thing on both.
//
// Paths are what the sandboxed code sees: relative paths are relative to
// /workspace, and absolute paths must be /workspace or lie under it
// ("/workspace/data/x.csv" and "data/x.csv" name the same file). Any other
// absolute path ("/etc/passwd", but also "/data/x.csv") is refused rather
// than reinterpreted, so a path means the same thing to the model writing
// code and to the file API. Paths with a ".." element are refused even when
// they would stay inside, as are NUL bytes. Callers still open everything
// through an os.Root: the workspace is the sandbox's, and may hold symlinks
// planted to leave it.
package wspath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
)

// MaxPathLen bounds a path argument (Linux's PATH_MAX).
const MaxPathLen = 4096

// MaxListEntries bounds one directory listing.
const MaxListEntries = 10000

// UploadTempPrefix starts the temporary name an upload is written under
// before it is renamed into place; listings hide such names.
const UploadTempPrefix = ".sandboxd-upload-"

// UID and GID are the user the sandbox runs as ("1000:1000", set by the
// image). What is created for it in the workspace belongs to it.
const (
	UID = 1000
	GID = 1000
)

// ErrInvalid marks a path refused by Clean.
var ErrInvalid = errors.New("invalid workspace path")

// invalid is a refused path: its message is the whole error text, and it
// matches ErrInvalid.
type invalid string

func (e invalid) Error() string        { return string(e) }
func (e invalid) Is(target error) bool { return target == ErrInvalid }

func invalidf(format string, args ...any) error { return invalid(fmt.Sprintf(format, args...)) }

// Clean turns a caller's path into a clean path relative to the workspace
// ("." for the workspace itself). A refused path is an error matching
// ErrInvalid whose text says why (quoting at most 256 bytes of the path).
func Clean(p string) (string, error) {
	switch {
	case strings.ContainsRune(p, 0):
		return "", invalidf("path %q contains a NUL byte", Truncate(p, 256))
	case len(p) > MaxPathLen:
		return "", invalidf("path is %d bytes long; the limit is %d", len(p), MaxPathLen)
	}
	rel := p
	if strings.HasPrefix(p, "/") {
		after, ok := strings.CutPrefix(p, "/workspace")
		if !ok || (after != "" && !strings.HasPrefix(after, "/")) {
			return "", invalidf("path %q is outside /workspace: give a path relative to /workspace or one starting with /workspace/", Truncate(p, 256))
		}
		rel = strings.TrimLeft(after, "/")
	}
	for _, elem := range strings.Split(rel, "/") {
		if elem == ".." {
			return "", invalidf("path %q escapes /workspace: \"..\" is not allowed", Truncate(p, 256))
		}
	}
	return path.Clean("./" + rel), nil // "./" makes "" clean to "."
}

// Display shows a workspace-relative path as the sandbox sees it.
func Display(rel string) string {
	if rel == "." {
		return "/workspace"
	}
	return "/workspace/" + rel
}

// Truncate shortens s for an error message so a huge input cannot blow up
// the response.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// MkdirAllOwned creates dir and its missing parents inside root, each owned
// by the sandbox user. Existing components may be symlinks to directories
// inside the workspace (os.Root resolves them safely); an existing
// component that is not a directory is syscall.ENOTDIR.
func MkdirAllOwned(root *os.Root, dir string) error {
	if dir == "." {
		return nil
	}
	var prefix string
	for _, elem := range strings.Split(dir, "/") {
		prefix = path.Join(prefix, elem)
		err := root.Mkdir(prefix, 0o755)
		if errors.Is(err, fs.ErrExist) {
			st, serr := root.Stat(prefix)
			if serr != nil {
				return serr
			}
			if !st.IsDir() {
				return syscall.ENOTDIR
			}
			continue
		}
		if err != nil {
			return err
		}
		// Lchown: if the sandbox swapped the new directory for a symlink
		// meanwhile, the link is chowned, not what it points to.
		if err := LchownOwned(root, prefix); err != nil {
			return err
		}
	}
	return nil
}

// LchownOwned gives name under root (not what a symlink there points to)
// to the sandbox user. A process that runs as the sandbox user itself
// already creates files with the right owner, so EPERM is fine there.
func LchownOwned(root *os.Root, name string) error {
	err := root.Lchown(name, UID, GID)
	if err != nil && errors.Is(err, fs.ErrPermission) && os.Geteuid() == UID {
		return nil
	}
	return err
}

// ChownFile gives an open file to the sandbox user (by descriptor, so no
// path is involved).
func ChownFile(f *os.File) error {
	err := f.Chown(UID, GID)
	if err != nil && errors.Is(err, fs.ErrPermission) && os.Geteuid() == UID {
		return nil
	}
	return err
}
