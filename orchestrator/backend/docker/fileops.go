package docker

import (
	"context"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/wspath"
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
	return wspath.MakeDirectory(root, rel, parents)
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
	if err := wspath.Remove(root, rel, recursive); err != nil {
		return err
	}
	m.log.Debug("file removed", "sandbox_id", sb.id, "path", core.DisplayPath(rel), "recursive", recursive)
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
	root, err := openWorkspace(sb)
	if err != nil {
		return core.FileInfo{}, err
	}
	defer root.Close()
	fi, err := wspath.Rename(root, relFrom, relTo, overwrite)
	if err != nil {
		return core.FileInfo{}, err
	}
	m.log.Debug("file renamed", "sandbox_id", sb.id, "from", core.DisplayPath(relFrom), "to", core.DisplayPath(relTo))
	return fi, nil
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
