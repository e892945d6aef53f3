package docker

import (
	"context"
	"io"
	"os"
	"path/filepath"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/wspath"
)

// Files live in the sandbox's /workspace, which is a host directory
// bind-mounted into the container, so sandboxd reads and writes them on the
// host side, without a Docker call. Everything under it is controlled by the
// sandboxed code, which may have planted symlinks to host paths; every access
// therefore goes through os.Root, which refuses to resolve any path (symlinks
// included, at every step, race-free) to a location outside the workspace.
// What a path means (relative to /workspace, or absolute under it; no "..",
// no NUL) is core's (core.CleanPath, applied by core.Validating before a
// path gets here); the operations shared with the io sidecar of the
// Kubernetes backend (upload, download, listing, file descriptions, error
// classification) are package wspath's.

// maxListEntries bounds one ListFiles answer.
const maxListEntries = wspath.MaxListEntries

// uploadTempPrefix starts the temporary name an upload is written under
// before it is renamed into place; ListFiles hides such names.
const uploadTempPrefix = wspath.UploadTempPrefix

// openWorkspace opens the sandbox's workspace as a root.
func openWorkspace(sb *sandbox) (*os.Root, error) {
	return os.OpenRoot(filepath.Join(sb.dir, workspaceDir))
}

// Upload writes r to a file in the sandbox's workspace, replacing any file of
// that name, and creates missing parent directories, atomically
// (wspath.Upload: a partial upload is never visible under the real name).
// The file and the directories created belong to the sandbox user, who can
// then modify them. Uploads are capped at Config.MaxUploadBytes
// (ErrInvalidArgument, by core.Validating's reader); one that does not fit
// in the sandbox's disk is ErrResourceExhausted.
func (m *Manager) Upload(ctx context.Context, sandboxID, rel string, r io.Reader) (core.FileInfo, error) {
	sb, err := m.use(ctx, sandboxID)
	if err != nil {
		return core.FileInfo{}, err
	}
	root, err := openWorkspace(sb)
	if err != nil {
		return core.FileInfo{}, err
	}
	defer root.Close()
	fi, n, err := wspath.Upload(ctx, root, rel, r)
	if err != nil {
		return core.FileInfo{}, err
	}
	m.log.Debug("file uploaded", "sandbox_id", sb.id, "path", core.DisplayPath(rel), "bytes", n)
	return fi, nil
}

// Download opens a regular file in the sandbox's workspace for reading
// (wspath.Open). The caller closes it. Directories and special files (a
// FIFO would block forever) are ErrInvalidArgument.
func (m *Manager) Download(ctx context.Context, sandboxID, rel string) (io.ReadCloser, core.FileInfo, error) {
	sb, err := m.use(ctx, sandboxID)
	if err != nil {
		return nil, core.FileInfo{}, err
	}
	root, err := openWorkspace(sb)
	if err != nil {
		return nil, core.FileInfo{}, err
	}
	defer root.Close() // files opened through a root outlive it
	f, fi, err := wspath.Open(root, rel)
	if err != nil {
		return nil, core.FileInfo{}, err
	}
	return f, fi, nil
}

// ListFiles lists a directory of the sandbox's workspace (not recursively),
// sorted by name; for a file it returns just that file. Symbolic links are
// listed as such (not followed). "" and "/workspace" list the workspace.
// It is ListFilesDepth at depth 1.
func (m *Manager) ListFiles(ctx context.Context, sandboxID, p string) ([]core.FileInfo, error) {
	return m.ListFilesDepth(ctx, sandboxID, p, 1)
}
