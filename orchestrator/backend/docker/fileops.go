package docker

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path"
	"syscall"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/orchestrator/wspath"
)

// MakeDirectory creates a directory in the sandbox's workspace, owned by the
// sandbox user. Without parents, a missing parent is ErrNotFound and an
// existing path ErrAlreadyExists; with parents, missing parents are created
// and an existing directory (or a symlink to one inside the workspace) is
// returned as it is (mkdir -p), while an existing non-directory is still
// ErrAlreadyExists.
func (m *Manager) MakeDirectory(ctx context.Context, sandboxID, rel string, parents bool) (core.FileInfo, error) {
	sb, err := m.use(ctx, sandboxID)
	if err != nil {
		return core.FileInfo{}, err
	}
	root, err := openWorkspace(sb)
	if err != nil {
		return core.FileInfo{}, err
	}
	defer root.Close()
	return makeDirectoryIn(wspath.Workspace, root, rel, parents)
}

// makeDirectoryIn is MakeDirectory in tree t (a workspace or a volume)
// opened as root.
func makeDirectoryIn(t wspath.Tree, root *os.Root, rel string, parents bool) (core.FileInfo, error) {
	show := t.Display(rel)
	if parents {
		if st, err := root.Stat(rel); err == nil && !st.IsDir() {
			return core.FileInfo{}, core.AlreadyExistsf("make directory %s: a file that is not a directory exists there", show)
		}
		if err := wspath.MkdirAllOwned(root, rel); err != nil {
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
		if err := wspath.LchownOwned(root, rel); err != nil {
			return core.FileInfo{}, t.FSError("make directory", show, err)
		}
	}
	st, err := root.Stat(rel)
	if err != nil {
		return core.FileInfo{}, t.FSError("make directory", show, err)
	}
	return wspath.Info(rel, st), nil
}

// Remove deletes a file, symbolic link (not its target) or directory from
// the sandbox's workspace. A non-empty directory needs recursive
// (ErrFailedPrecondition otherwise). The workspace itself cannot be removed
// (ErrInvalidArgument). Recursive removal goes through os.Root too, so a
// symlink inside the tree is removed, never followed.
func (m *Manager) Remove(ctx context.Context, sandboxID, rel string, recursive bool) error {
	sb, err := m.use(ctx, sandboxID)
	if err != nil {
		return err
	}
	root, err := openWorkspace(sb)
	if err != nil {
		return err
	}
	defer root.Close()
	if err := removeIn(wspath.Workspace, root, rel, recursive); err != nil {
		return err
	}
	m.log.Debug("file removed", "sandbox_id", sb.id, "path", core.DisplayPath(rel), "recursive", recursive)
	return nil
}

// removeIn is Remove in tree t (a workspace or a volume) opened as root.
func removeIn(t wspath.Tree, root *os.Root, rel string, recursive bool) error {
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

// Rename moves a file or directory within the sandbox's workspace. The
// destination's parent must exist. An existing destination is
// ErrAlreadyExists unless overwrite is set; with overwrite the rename(2)
// rules apply (a directory only replaces an empty directory:
// ErrFailedPrecondition otherwise; a file never replaces a directory nor the
// reverse: ErrInvalidArgument). Without overwrite the check and the rename
// are two steps, so sandboxed code creating the destination in between sees
// it replaced, as with mv from inside the sandbox; both paths stay inside
// the workspace either way.
func (m *Manager) Rename(ctx context.Context, sandboxID, relFrom, relTo string, overwrite bool) (core.FileInfo, error) {
	sb, err := m.use(ctx, sandboxID)
	if err != nil {
		return core.FileInfo{}, err
	}
	showFrom, showTo := core.DisplayPath(relFrom), core.DisplayPath(relTo)
	root, err := openWorkspace(sb)
	if err != nil {
		return core.FileInfo{}, err
	}
	defer root.Close()
	src, err := root.Lstat(relFrom)
	if err != nil {
		return core.FileInfo{}, fsError("rename", showFrom, err)
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
				return core.FileInfo{}, fsError("rename to", showTo, err)
			}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return core.FileInfo{}, fsError("rename to", showTo, err)
	}
	switch err := root.Rename(relFrom, relTo); {
	case err == nil:
	case errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EEXIST):
		return core.FileInfo{}, core.Preconditionf("rename %s to %s: the destination is a non-empty directory", showFrom, showTo)
	case errors.Is(err, fs.ErrNotExist):
		if _, serr := root.Lstat(relFrom); serr != nil {
			return core.FileInfo{}, fsError("rename", showFrom, serr)
		}
		return core.FileInfo{}, core.NotFoundf("rename %s to %s: directory %s does not exist", showFrom, showTo, core.DisplayPath(path.Dir(relTo)))
	case errors.Is(err, syscall.EISDIR):
		return core.FileInfo{}, core.Invalidf("rename %s to %s: the destination is a directory and the source is not", showFrom, showTo)
	case errors.Is(err, syscall.ENOTDIR):
		return core.FileInfo{}, core.Invalidf("rename %s to %s: a file that is not a directory is in the way", showFrom, showTo)
	case errors.Is(err, syscall.EINVAL):
		return core.FileInfo{}, core.Invalidf("rename %s to %s: cannot move a directory into itself", showFrom, showTo)
	default:
		return core.FileInfo{}, fsError("rename "+showFrom+" to", showTo, err)
	}
	st, err := root.Lstat(relTo)
	if err != nil {
		return core.FileInfo{}, fsError("rename to", showTo, err)
	}
	m.log.Debug("file renamed", "sandbox_id", sb.id, "from", showFrom, "to", showTo)
	return wspath.Info(relTo, st), nil
}

// ListFilesDepth is ListFiles over depth levels (wspath.List): 0 and 1
// list the directory's children, 2 their children too, up to
// core.MaxListDepth (core.Validating refuses more). Only real directories
// are descended into, never symbolic links. The answer, sorted by path,
// holds at most maxListEntries entries (ErrResourceExhausted beyond).
func (m *Manager) ListFilesDepth(ctx context.Context, sandboxID, rel string, depth int) ([]core.FileInfo, error) {
	sb, err := m.use(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	root, err := openWorkspace(sb)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	return wspath.List(ctx, root, rel, depth)
}
