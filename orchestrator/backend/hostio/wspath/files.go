package wspath

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"

	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/iolog"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// The files API's operations on an open workspace root, written once for
// the Docker backend (on the host) and the io sidecar (inside the Pod).
// Their errors are the domain's (core's classes, with messages for the
// caller that show paths as the sandbox sees them) or, for a failure of
// the server itself, unclassified; each caller presents them at its own
// edge (the Docker backend returns them as they are, the sidecar turns
// them into a status carrying the class).

// Tree names the file tree an operation works in, for the caller's
// messages: a sandbox's /workspace (Workspace) or a volume. The package's
// functions are Workspace's methods.
type Tree struct {
	// Name is how messages name the tree ("/workspace", "the volume").
	Name string
	// Display shows a path relative to the tree as the caller gives it.
	Display func(rel string) string
	// Disk names the tree's storage when it is full.
	Disk string
	// Clean turns a caller's path into one relative to the tree (the
	// domain's rule for it: core.CleanPath, core.CleanVolumePath).
	Clean func(p string) (string, error)
}

// Workspace is a sandbox's /workspace.
var Workspace = Tree{Name: "/workspace", Display: core.DisplayPath, Disk: "the sandbox's disk", Clean: core.CleanPath}

// Volume is a named volume's files (core/volume.go), whose paths are
// relative to its root.
var Volume = Tree{Name: "the volume", Display: core.VolumePathDisplay, Disk: "the volume (its size is fixed when it is created)", Clean: core.CleanVolumePath}

// FSError is Workspace.FSError.
func FSError(op, display string, err error) error { return Workspace.FSError(op, display, err) }

// FSError classifies an error of the file system for a path the caller
// gave (shown as display): a missing file is the caller's ErrNotFound, an
// escape attempt or a wrong file type the caller's ErrInvalidArgument, a
// full disk ErrResourceExhausted. An error already classified is returned
// as it is. Anything else (EIO, ...) is returned unclassified: it is the
// server's fault, and sandboxd reports it as Internal while logging the
// detail.
func (t Tree) FSError(op, display string, err error) error {
	switch {
	case err == nil:
		return nil
	case core.IsClassified(err):
		return err
	case errors.Is(err, fs.ErrNotExist):
		return core.NotFoundf("%s %s: no such file or directory", op, display)
	case iolog.IsEscape(err):
		return core.Invalidf("%s %s: path escapes %s", op, display, t.Name)
	case errors.Is(err, syscall.ENOTDIR):
		return core.Invalidf("%s %s: a parent of the path is not a directory", op, display)
	case errors.Is(err, syscall.EISDIR):
		return core.Invalidf("%s %s: is a directory", op, display)
	case errors.Is(err, syscall.ENAMETOOLONG):
		return core.Invalidf("%s %s: name too long", op, display)
	case errors.Is(err, fs.ErrExist):
		return core.Invalidf("%s %s: already exists", op, display)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return core.Exhaustedf("%s %s: no space left on %s", op, display, t.Disk)
	}
	return fmt.Errorf("%s %s: %w", op, display, err)
}

// Info describes a file; rel is its path relative to the workspace ("."
// for the workspace itself, described with an empty Path).
func Info(rel string, st fs.FileInfo) core.FileInfo {
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

// Upload writes r to rel under root, replacing any file of that name, and
// creates missing parent directories. The data is written to a temporary
// name (UploadTempPrefix) and renamed into place, so a partial upload is
// never visible under the real name. The file and the directories created
// belong to the sandbox user. It returns the file's description and the
// bytes written.
//
// r bounds the upload: an error of r (the caller's stream broke, its limit
// was passed) is returned as it is, as is ctx's end; file system errors
// go through FSError. Nothing is left behind on failure.
func Upload(ctx context.Context, root *os.Root, rel string, r io.Reader) (core.FileInfo, int64, error) {
	return Workspace.Upload(ctx, root, rel, r, true)
}

// Upload is the package's Upload in t; without overwrite, an existing
// file of that name is ErrAlreadyExists, decided atomically (the finished
// temporary is linked to the name, which fails if anything is there).
func (t Tree) Upload(ctx context.Context, root *os.Root, rel string, r io.Reader, overwrite bool) (core.FileInfo, int64, error) {
	show := t.Display(rel)
	if !overwrite {
		if _, err := root.Lstat(rel); err == nil {
			return core.FileInfo{}, 0, core.AlreadyExistsf("upload to %s: a file exists there (overwrite to replace it)", show)
		}
	}
	dir := path.Dir(rel)
	if err := MkdirAllOwned(root, dir); err != nil {
		return core.FileInfo{}, 0, t.FSError("upload to", show, err)
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := path.Join(dir, UploadTempPrefix+hex.EncodeToString(rnd[:]))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return core.FileInfo{}, 0, t.FSError("upload to", show, err)
	}
	committed := false
	defer func() {
		if !committed {
			f.Close()
			root.Remove(tmp)
		}
	}()
	src := &ctxReader{ctx: ctx, r: r}
	n, err := io.Copy(f, src)
	if src.err != nil {
		return core.FileInfo{}, n, src.err // the caller's stream, limit or context: theirs to report
	}
	if err != nil {
		return core.FileInfo{}, n, t.FSError("upload to", show, err)
	}
	if err := ChownFile(f); err != nil {
		return core.FileInfo{}, n, t.FSError("upload to", show, err)
	}
	if err := f.Close(); err != nil {
		return core.FileInfo{}, n, t.FSError("upload to", show, err)
	}
	if !overwrite {
		err := root.Link(tmp, rel)
		root.Remove(tmp)
		committed = true
		if errors.Is(err, fs.ErrExist) {
			return core.FileInfo{}, n, core.AlreadyExistsf("upload to %s: a file exists there (overwrite to replace it)", show)
		}
		if err != nil {
			return core.FileInfo{}, n, t.FSError("upload to", show, err)
		}
	} else if err := root.Rename(tmp, rel); err != nil {
		if errors.Is(err, syscall.EEXIST) || errors.Is(err, syscall.ENOTEMPTY) {
			err = syscall.EISDIR // renaming over a directory
		}
		root.Remove(tmp)
		committed = true
		return core.FileInfo{}, n, t.FSError("upload to", show, err)
	}
	committed = true
	st, err := root.Lstat(rel)
	if err != nil {
		return core.FileInfo{}, n, t.FSError("upload to", show, err)
	}
	return Info(rel, st), n, nil
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

// Open opens the regular file rel under root for reading, without
// blocking (a FIFO would block forever), and describes it. Directories and
// special files are ErrInvalidArgument. The caller closes the file, which
// outlives root.
func Open(root *os.Root, rel string) (*os.File, core.FileInfo, error) {
	return Workspace.Open(root, rel)
}

// Open is the package's Open in t.
func (t Tree) Open(root *os.Root, rel string) (*os.File, core.FileInfo, error) {
	show := t.Display(rel)
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, core.FileInfo{}, t.FSError("download", show, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, core.FileInfo{}, t.FSError("download", show, err)
	}
	switch {
	case st.IsDir():
		f.Close()
		return nil, core.FileInfo{}, core.Invalidf("download %s: is a directory; use ListFiles", show)
	case !st.Mode().IsRegular():
		f.Close()
		return nil, core.FileInfo{}, core.Invalidf("download %s: not a regular file (%v)", show, st.Mode().Type())
	}
	return f, Info(rel, st), nil
}

// List lists directory rel under root over depth levels: 0 and 1 list its
// children, 2 their children too, and so on (the caller bounds depth). For
// a file it returns just that file. Only real directories are descended
// into, never symbolic links, which are listed as such; upload temporaries
// are hidden. The answer, sorted by path, holds at most MaxListEntries
// entries (ErrResourceExhausted beyond). ctx's end stops it.
func List(ctx context.Context, root *os.Root, rel string, depth int) ([]core.FileInfo, error) {
	return Workspace.List(ctx, root, rel, depth)
}

// List is the package's List in t.
func (t Tree) List(ctx context.Context, root *os.Root, rel string, depth int) ([]core.FileInfo, error) {
	show := t.Display(rel)
	st, err := root.Stat(rel)
	if err != nil {
		return nil, t.FSError("list", show, err)
	}
	if !st.IsDir() {
		return []core.FileInfo{Info(rel, st)}, nil
	}
	depth = max(depth, 1)
	var out []core.FileInfo
	level := []string{rel}
	for d := 1; d <= depth && len(level) > 0; d++ {
		var next []string
		for _, dir := range level {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			// O_DIRECTORY|O_NONBLOCK: a directory the sandbox swapped
			// for a FIFO since it was listed is refused, not waited on
			// for good.
			f, err := root.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
			if err != nil {
				if dir != rel && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)) {
					continue // changed since it was listed
				}
				return nil, t.FSError("list", t.Display(dir), err)
			}
			entries, err := f.ReadDir(MaxListEntries + 1 - len(out))
			f.Close()
			if err != nil && !errors.Is(err, io.EOF) {
				return nil, t.FSError("list", t.Display(dir), err)
			}
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), UploadTempPrefix) {
					continue
				}
				info, err := e.Info()
				if err != nil {
					continue // removed since ReadDir
				}
				if len(out) == MaxListEntries {
					if depth == 1 {
						return nil, core.Exhaustedf("list %s: the directory has more than %d entries", show, MaxListEntries)
					}
					return nil, core.Exhaustedf("list %s: more than %d entries (list a smaller depth or a subdirectory)", show, MaxListEntries)
				}
				p := path.Join(dir, e.Name())
				out = append(out, Info(p, info))
				if info.IsDir() {
					next = append(next, p)
				}
			}
		}
		level = next
	}
	slices.SortFunc(out, core.CompareFiles)
	return out, nil
}
