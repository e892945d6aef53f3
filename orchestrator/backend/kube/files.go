package kube

import (
	"context"
	"io"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Upload writes a file under the sandbox's /workspace through its io
// sidecar, which confines it to /workspace as the Docker backend does on
// the host; at most Config.MaxUploadBytes.
func (m *Manager) Upload(ctx context.Context, sandboxID, path string, r io.Reader) (core.FileInfo, error) {
	c, err := m.files(ctx, sandboxID)
	if err != nil {
		return core.FileInfo{}, err
	}
	fi, err := c.Upload(ctx, path, r, m.cfg.MaxUploadBytes)
	if err != nil {
		return core.FileInfo{}, m.ioError(sandboxID, "", err)
	}
	return fi, nil
}

// Download reads a regular file under the sandbox's /workspace.
func (m *Manager) Download(ctx context.Context, sandboxID, path string) (io.ReadCloser, core.FileInfo, error) {
	c, err := m.files(ctx, sandboxID)
	if err != nil {
		return nil, core.FileInfo{}, err
	}
	rc, fi, err := c.Download(ctx, path)
	if err != nil {
		return nil, core.FileInfo{}, m.ioError(sandboxID, "", err)
	}
	return rc, fi, nil
}

// ListFiles lists a directory under the sandbox's /workspace.
func (m *Manager) ListFiles(ctx context.Context, sandboxID, path string) ([]core.FileInfo, error) {
	return m.ListFilesDepth(ctx, sandboxID, path, 1)
}

// ListFilesDepth is ListFiles over depth levels, through the io sidecar
// (wspath.List, as the Docker backend): 0 and 1 list the directory's
// children, 2 their children too, up to core.MaxListDepth. Only real
// directories are descended into, never symbolic links. The answer, sorted
// by path, holds at most wspath.MaxListEntries entries
// (ErrResourceExhausted beyond).
func (m *Manager) ListFilesDepth(ctx context.Context, sandboxID, path string, depth int) ([]core.FileInfo, error) {
	c, err := m.files(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	list, err := c.ListFiles(ctx, path, depth)
	if err != nil {
		return nil, m.ioError(sandboxID, "", err)
	}
	return list, nil
}

// MakeDirectory creates a directory under the sandbox's /workspace, owned
// by the sandbox user, through its io sidecar (wspath.MakeDirectory, as the
// Docker backend on the host): with parents, as mkdir -p; without, a
// missing parent is ErrNotFound and an existing path ErrAlreadyExists.
func (m *Manager) MakeDirectory(ctx context.Context, sandboxID, path string, parents bool) (core.FileInfo, error) {
	c, err := m.files(ctx, sandboxID)
	if err != nil {
		return core.FileInfo{}, err
	}
	fi, err := c.MakeDirectory(ctx, path, parents)
	if err != nil {
		return core.FileInfo{}, m.ioError(sandboxID, "", err)
	}
	return fi, nil
}

// Remove deletes a file, symbolic link (not its target) or directory under
// the sandbox's /workspace through its io sidecar (wspath.Remove); a
// non-empty directory needs recursive (ErrFailedPrecondition otherwise).
func (m *Manager) Remove(ctx context.Context, sandboxID, path string, recursive bool) error {
	c, err := m.files(ctx, sandboxID)
	if err != nil {
		return err
	}
	if err := c.Remove(ctx, path, recursive); err != nil {
		return m.ioError(sandboxID, "", err)
	}
	return nil
}

// Rename moves a file or directory within the sandbox's /workspace through
// its io sidecar (wspath.Rename): an existing destination is
// ErrAlreadyExists unless overwrite is set.
func (m *Manager) Rename(ctx context.Context, sandboxID, from, to string, overwrite bool) (core.FileInfo, error) {
	c, err := m.files(ctx, sandboxID)
	if err != nil {
		return core.FileInfo{}, err
	}
	fi, err := c.Rename(ctx, from, to, overwrite)
	if err != nil {
		return core.FileInfo{}, m.ioError(sandboxID, "", err)
	}
	return fi, nil
}

// files returns the sidecar connection of a live sandbox for a files call,
// which counts as a use.
func (m *Manager) files(ctx context.Context, sandboxID string) (IOConn, error) {
	p, err := m.live(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	m.touch(sandboxID, p)
	return m.io(ctx, p)
}
