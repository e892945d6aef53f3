package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"syscall"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/orchestrator/wspath"
)

// Files live in the sandbox's /workspace, which is a host directory
// bind-mounted into the container, so sandboxd reads and writes them on the
// host side, without a Docker call. Everything under it is controlled by the
// sandboxed code, which may have planted symlinks to host paths; every access
// therefore goes through os.Root, which refuses to resolve any path (symlinks
// included, at every step, race-free) to a location outside the workspace.
// What a path means (relative to /workspace, or absolute under it; no "..",
// no NUL) is package wspath's, shared with the io sidecar of the Kubernetes
// backend.

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
// that name, and creates missing parent directories. The data is written to
// a temporary name and renamed into place, so a partial upload is never
// visible under the real name. The file and the directories created belong
// to the sandbox user, who can then modify them. Uploads are capped at
// Config.MaxUploadBytes (ErrInvalidArgument); one that does not fit in the
// sandbox's disk is ErrResourceExhausted.
func (m *Manager) Upload(ctx context.Context, sandboxID, rel string, r io.Reader) (core.FileInfo, error) {
	sb, err := m.use(ctx, sandboxID)
	if err != nil {
		return core.FileInfo{}, err
	}
	show := core.DisplayPath(rel)
	root, err := openWorkspace(sb)
	if err != nil {
		return core.FileInfo{}, err
	}
	defer root.Close()

	dir := path.Dir(rel)
	if err := mkdirAllOwned(root, dir); err != nil {
		return core.FileInfo{}, fsError("upload to", show, err)
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := path.Join(dir, uploadTempPrefix+hex.EncodeToString(rnd[:]))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return core.FileInfo{}, fsError("upload to", show, err)
	}
	committed := false
	defer func() {
		if !committed {
			f.Close()
			root.Remove(tmp)
		}
	}()
	src := &ctxReader{ctx: ctx, r: r}
	n, err := io.Copy(f, src) // core.Validating bounds src by Policy.MaxUploadBytes
	if src.err != nil {
		return core.FileInfo{}, src.err // the caller's stream or context failed: theirs to report
	}
	if err != nil {
		return core.FileInfo{}, fsError("upload to", show, err)
	}
	if err := chownFile(f); err != nil {
		return core.FileInfo{}, err
	}
	if err := f.Close(); err != nil {
		return core.FileInfo{}, fsError("upload to", show, err)
	}
	if err := root.Rename(tmp, rel); err != nil {
		if errors.Is(err, syscall.EEXIST) || errors.Is(err, syscall.ENOTEMPTY) {
			err = syscall.EISDIR // renaming over a directory
		}
		root.Remove(tmp)
		committed = true
		return core.FileInfo{}, fsError("upload to", show, err)
	}
	committed = true
	st, err := root.Lstat(rel)
	if err != nil {
		return core.FileInfo{}, fsError("upload to", show, err)
	}
	m.log.Debug("file uploaded", "sandbox_id", sb.id, "path", show, "bytes", n)
	return fileInfo(rel, st), nil
}

// mkdirAllOwned creates dir and its missing parents inside root, each owned
// by the sandbox user (wspath.MkdirAllOwned).
func mkdirAllOwned(root *os.Root, dir string) error { return wspath.MkdirAllOwned(root, dir) }

// chownFile gives an open file to the sandbox user (by descriptor, so no
// path is involved).
func chownFile(f *os.File) error { return wspath.ChownFile(f) }

// Download opens a regular file in the sandbox's workspace for reading. The
// caller closes it. Directories and special files (a FIFO would block
// forever) are ErrInvalidArgument.
func (m *Manager) Download(ctx context.Context, sandboxID, rel string) (io.ReadCloser, core.FileInfo, error) {
	sb, err := m.use(ctx, sandboxID)
	if err != nil {
		return nil, core.FileInfo{}, err
	}
	show := core.DisplayPath(rel)
	root, err := openWorkspace(sb)
	if err != nil {
		return nil, core.FileInfo{}, err
	}
	defer root.Close() // files opened through a root outlive it
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, core.FileInfo{}, fsError("download", show, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, core.FileInfo{}, fsError("download", show, err)
	}
	switch {
	case st.IsDir():
		f.Close()
		return nil, core.FileInfo{}, core.Invalidf("download %s: is a directory; use ListFiles", show)
	case !st.Mode().IsRegular():
		f.Close()
		return nil, core.FileInfo{}, core.Invalidf("download %s: not a regular file (%v)", show, st.Mode().Type())
	}
	return f, fileInfo(rel, st), nil
}

// ListFiles lists a directory of the sandbox's workspace (not recursively),
// sorted by name; for a file it returns just that file. Symbolic links are
// listed as such (not followed). "" and "/workspace" list the workspace.
// It is ListFilesDepth at depth 1.
func (m *Manager) ListFiles(ctx context.Context, sandboxID, p string) ([]core.FileInfo, error) {
	return m.ListFilesDepth(ctx, sandboxID, p, 1)
}

// fileInfo converts host file metadata; rel is relative to the workspace.
func fileInfo(rel string, st fs.FileInfo) core.FileInfo {
	fi := core.FileInfo{Path: rel, IsDir: st.IsDir(), ModTime: st.ModTime(), Mode: st.Mode(), Type: core.FileTypeOf(st.Mode())}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		fi.UID, fi.GID = sys.Uid, sys.Gid
	}
	if rel == "." {
		fi.Path = ""
	}
	if !fi.IsDir {
		fi.Size = st.Size()
	}
	return fi
}

// ctxReader stops a copy when ctx ends, so an abandoned upload does not
// keep writing, and remembers a read error to tell it from a write error.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
	err error
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		c.err = err
		return 0, err
	}
	n, err := c.r.Read(p)
	if err != nil && err != io.EOF {
		c.err = err
	}
	return n, err
}
