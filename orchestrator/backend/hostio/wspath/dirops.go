package wspath

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"syscall"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// The directory operations of the files API (make, remove, rename), for
// the Docker backend (a workspace or a volume, on the host) and the io
// sidecar (a workspace, inside the Pod). Paths are clean (core.CleanPath);
// the checks on what they name (the tree itself cannot be removed or
// moved, ...) are the caller's (core.Validating, and the sidecar again).
// Every access goes through root: a symbolic link is never followed out
// of the tree.

// MakeDirectory is Workspace.MakeDirectory.
func MakeDirectory(root *os.Root, rel string, parents bool) (core.FileInfo, error) {
	return Workspace.MakeDirectory(root, rel, parents)
}

// Remove is Workspace.Remove.
func Remove(root *os.Root, rel string, recursive bool) error {
	return Workspace.Remove(root, rel, recursive)
}

// Rename is Workspace.Rename.
func Rename(root *os.Root, relFrom, relTo string, overwrite bool) (core.FileInfo, error) {
	return Workspace.Rename(root, relFrom, relTo, overwrite)
}

// MakeDirectory creates directory rel under root, owned by the sandbox
// user. Without parents, a missing parent is ErrNotFound and an existing
// path ErrAlreadyExists; with parents, missing parents are created and an
// existing directory (or a symlink to one inside the tree) is returned as
// it is (mkdir -p), while an existing non-directory is still
// ErrAlreadyExists.
func (t Tree) MakeDirectory(root *os.Root, rel string, parents bool) (core.FileInfo, error) {
	show := t.Display(rel)
	if parents {
		if st, err := root.Stat(rel); err == nil && !st.IsDir() {
			return core.FileInfo{}, core.AlreadyExistsf("make directory %s: a file that is not a directory exists there", show)
		}
		if err := MkdirAllOwned(root, rel); err != nil {
			return core.FileInfo{}, t.FSError("make directory", show, err)
		}
	} else {
		if rel == "." {
			return core.FileInfo{}, core.AlreadyExistsf("make directory %s: already exists", show)
		}
		switch err := root.Mkdir(rel, 0o755); {
		case errors.Is(err, fs.ErrExist):
			return core.FileInfo{}, core.AlreadyExistsf("make directory %s: already exists", show)
		case errors.Is(err, fs.ErrNotExist):
			return core.FileInfo{}, core.NotFoundf("make directory %s: parent directory %s does not exist (set parents to create it)", show, t.Display(path.Dir(rel)))
		case err != nil:
			return core.FileInfo{}, t.FSError("make directory", show, err)
		}
		if err := LchownOwned(root, rel); err != nil {
			return core.FileInfo{}, t.FSError("make directory", show, err)
		}
	}
	st, err := root.Stat(rel)
	if err != nil {
		return core.FileInfo{}, t.FSError("make directory", show, err)
	}
	return Info(rel, st), nil
}

// Remove deletes file, symbolic link (not its target) or directory rel
// under root. A non-empty directory needs recursive
// (ErrFailedPrecondition otherwise). Recursive removal goes through root
// too, so a symlink inside the tree is removed, never followed.
func (t Tree) Remove(root *os.Root, rel string, recursive bool) error {
	show := t.Display(rel)
	st, err := root.Lstat(rel)
	if err != nil {
		return t.FSError("remove", show, err)
	}
	if st.IsDir() && recursive {
		err = root.RemoveAll(rel)
	} else {
		err = root.Remove(rel)
	}
	if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
		return core.Preconditionf("remove %s: the directory is not empty (set recursive to remove it with its content)", show)
	}
	if err != nil {
		return t.FSError("remove", show, err)
	}
	return nil
}

// Rename moves file or directory relFrom to relTo under root and
// describes it there. The destination's parent must exist. An existing
// destination is ErrAlreadyExists unless overwrite is set; with overwrite
// the rename(2) rules apply (a directory only replaces an empty directory:
// ErrFailedPrecondition otherwise; a file never replaces a directory nor
// the reverse: ErrInvalidArgument). Without overwrite the check and the
// rename are two steps, so sandboxed code creating the destination in
// between sees it replaced, as with mv from inside the sandbox; both paths
// stay inside the tree either way.
func (t Tree) Rename(root *os.Root, relFrom, relTo string, overwrite bool) (core.FileInfo, error) {
	showFrom, showTo := t.Display(relFrom), t.Display(relTo)
	src, err := root.Lstat(relFrom)
	if err != nil {
		return core.FileInfo{}, t.FSError("rename", showFrom, err)
	}
	if dst, err := root.Lstat(relTo); err == nil {
		switch {
		case !overwrite:
			return core.FileInfo{}, core.AlreadyExistsf("rename %s to %s: the destination exists (set overwrite to replace it)", showFrom, showTo)
		case dst.IsDir() && !src.IsDir():
			return core.FileInfo{}, core.Invalidf("rename %s to %s: the destination is a directory and the source is not", showFrom, showTo)
		case !dst.IsDir() && src.IsDir():
			return core.FileInfo{}, core.Invalidf("rename %s to %s: the source is a directory and the destination is not", showFrom, showTo)
		case dst.IsDir():
			// os.Root.Rename never replaces a directory (as os.Rename):
			// remove the destination first, which only an empty one allows.
			if err := root.Remove(relTo); err != nil && !errors.Is(err, fs.ErrNotExist) {
				if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
					return core.FileInfo{}, core.Preconditionf("rename %s to %s: the destination is a non-empty directory", showFrom, showTo)
				}
				return core.FileInfo{}, t.FSError("rename to", showTo, err)
			}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return core.FileInfo{}, t.FSError("rename to", showTo, err)
	}
	switch err := root.Rename(relFrom, relTo); {
	case err == nil:
	case errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EEXIST):
		return core.FileInfo{}, core.Preconditionf("rename %s to %s: the destination is a non-empty directory", showFrom, showTo)
	case errors.Is(err, fs.ErrNotExist):
		if _, serr := root.Lstat(relFrom); serr != nil {
			return core.FileInfo{}, t.FSError("rename", showFrom, serr)
		}
		return core.FileInfo{}, core.NotFoundf("rename %s to %s: directory %s does not exist", showFrom, showTo, t.Display(path.Dir(relTo)))
	case errors.Is(err, syscall.EISDIR):
		return core.FileInfo{}, core.Invalidf("rename %s to %s: the destination is a directory and the source is not", showFrom, showTo)
	case errors.Is(err, syscall.ENOTDIR):
		return core.FileInfo{}, core.Invalidf("rename %s to %s: a file that is not a directory is in the way", showFrom, showTo)
	case errors.Is(err, syscall.EINVAL):
		return core.FileInfo{}, core.Invalidf("rename %s to %s: cannot move a directory into itself", showFrom, showTo)
	default:
		return core.FileInfo{}, t.FSError("rename "+showFrom+" to", showTo, err)
	}
	st, err := root.Lstat(relTo)
	if err != nil {
		return core.FileInfo{}, t.FSError("rename to", showTo, err)
	}
	return Info(relTo, st), nil
}
