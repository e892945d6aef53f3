package iosidecar

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/iolog"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/wsarchive"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/wspath"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	sandboxiov1 "github.com/sandboxd/sandboxd/proto/sandboxio/v1"
)

// Export and Import move a snapshot's workspace archive (wsarchive) out
// of and into the Pod: the sandbox's /workspace, and the globals file a
// live snapshot record saved in io/hibernate. Both directories belong to
// the sandbox, so every access goes through an os.Root, and wsarchive
// neither follows nor creates anything outside it. Their errors cross the
// wire in the files calls' classes (errors.go): an archive past its limit
// is core.ErrResourceExhausted, a bad one (or a bad globals name)
// core.ErrInvalidArgument, a missing globals file core.ErrNotFound.

// globalsName is what a globals file in io/hibernate may be named: one
// path element, as the kube backend names them.
var globalsName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// importTempPrefix starts the name an imported globals file is written
// under before it is renamed into place: the driver never reads a name
// starting with "." (ioproto.HibernateDir).
const importTempPrefix = ".sandboxd-import-"

func checkGlobalsName(name string) error {
	if !globalsName.MatchString(name) || name == "." || name == ".." {
		return core.Invalidf("globals file name %q is not valid: give 1 to 128 letters, digits, '_', '.' or '-', not . or ..", core.Truncate(wireString(name), 128))
	}
	return nil
}

// archiveLimits are the request's bounds: max_bytes, or the server's
// default when 0.
func (s *Server) archiveLimits(maxBytes int64) (wsarchive.Limits, error) {
	switch {
	case maxBytes < 0:
		return wsarchive.Limits{}, core.Invalidf("max_bytes is negative (%d)", maxBytes)
	case maxBytes == 0:
		maxBytes = s.cfg.MaxArchiveBytes
	}
	return wsarchive.Limits{MaxBytes: maxBytes}, nil
}

// archiveError says what an Export's or Import's failure means: a limit
// passed, a bad archive, an archive whose links lead out of /workspace or
// whose layout the file system refuses, a full disk. The stream's own
// failure, the context's end and what is already classified are returned
// as they are; anything else is the sidecar's failure.
func archiveError(op string, err error) error {
	if _, ok := status.FromError(err); ok || core.IsClassified(err) {
		return err
	}
	switch {
	case errors.Is(err, wsarchive.ErrTooLarge):
		return core.Exhaustedf("%s: %v", op, err)
	case errors.Is(err, wsarchive.ErrBadArchive):
		return core.Invalidf("%s: %v", op, err)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return core.Exhaustedf("%s: no space left on the sandbox's disk: %v", op, err)
	case op == "import" && (iolog.IsEscape(err) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EISDIR) ||
		errors.Is(err, syscall.ENAMETOOLONG) || errors.Is(err, syscall.ENOTEMPTY)):
		return core.Invalidf("%s: the archive cannot be extracted in /workspace: %v", op, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// ioRoot opens the sandbox's /io as a root: the sandbox owns it and may
// have made io/hibernate a symlink to anywhere.
func (s *Server) ioRoot() (*os.Root, error) {
	root, err := os.OpenRoot(s.cfg.IODir)
	if err != nil {
		return nil, fmt.Errorf("open /io: %w", err)
	}
	return root, nil
}

// openGlobals opens globals file name in io/hibernate for Export: a
// regular file, never through a symlink. The caller closes both.
func (s *Server) openGlobals(name string) (*os.Root, *os.File, error) {
	ioDir, err := s.ioRoot()
	if err != nil {
		return nil, nil, err
	}
	defer ioDir.Close()
	if st, err := ioDir.Lstat(ioproto.HibernateDir); errors.Is(err, fs.ErrNotExist) || (err == nil && !st.IsDir()) {
		return nil, nil, core.NotFoundf("globals file %s: /io/%s is not a directory", name, ioproto.HibernateDir)
	} else if err != nil {
		return nil, nil, err
	}
	hib, err := ioDir.OpenRoot(ioproto.HibernateDir)
	if err != nil {
		return nil, nil, fmt.Errorf("open /io/%s: %w", ioproto.HibernateDir, err)
	}
	f, err := hib.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err == nil {
		var st fs.FileInfo
		if st, err = f.Stat(); err == nil && !st.Mode().IsRegular() {
			err = core.Invalidf("globals file %s is not a regular file (%v)", name, st.Mode().Type())
		}
		if err != nil {
			f.Close()
		}
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		err = core.NotFoundf("globals file %s is not in /io/%s", name, ioproto.HibernateDir)
	case iolog.IsEscape(err): // ELOOP, or os.Root's refusal of a link out
		err = core.Invalidf("globals file %s is a symbolic link", name)
	case err != nil && !core.IsClassified(err):
		err = fmt.Errorf("open globals file %s: %w", name, err)
	}
	if err != nil {
		hib.Close()
		return nil, nil, err
	}
	return hib, f, nil
}

// Export sends the workspace's archive in downloadChunk messages, the
// last one with the archive's stats and done. The globals file is removed
// from /io once the archive was sent whole, never before: a failed export
// leaves it for the next.
func (s *Server) Export(req *sandboxiov1.ExportRequest, stream grpc.ServerStreamingServer[sandboxiov1.ExportResponse]) error {
	lim, err := s.archiveLimits(req.GetMaxBytes())
	if err != nil {
		return err
	}
	var hib *os.Root
	var globals *os.File
	name := req.GetGlobals()
	if name != "" {
		if err := checkGlobalsName(name); err != nil {
			return err
		}
		if hib, globals, err = s.openGlobals(name); err != nil {
			return err
		}
		defer hib.Close()
		defer globals.Close()
		// Saved for this export only: gone when it ends, sent or not, so
		// that failed exports cannot fill /io.
		defer func() {
			if err := hib.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
				s.log.Warn("remove an exported globals file", "name", name, "error", err)
			}
		}()
	}
	ws, err := s.workspace()
	if err != nil {
		return err
	}
	defer ws.Close()
	cw := &chunkWriter{send: func(b []byte) error { return stream.Send(&sandboxiov1.ExportResponse{Chunk: b}) }}
	st, err := wsarchive.Write(stream.Context(), cw, ws, globals, lim)
	if err != nil {
		return archiveError("export", err)
	}
	skipped := make([]string, len(st.Skipped))
	for i, sk := range st.Skipped {
		skipped[i] = wireString(sk)
	}
	last := &sandboxiov1.ExportResponse{Chunk: cw.buf, Bytes: st.Bytes, Skipped: skipped, SkippedCount: int64(st.SkippedCount), Done: true}
	if err := stream.Send(last); err != nil {
		return err
	}
	s.log.Debug("workspace exported", "bytes", st.Bytes, "entries", st.Entries, "skipped", st.SkippedCount)
	return nil
}

// chunkWriter sends what is written in downloadChunk pieces; the rest
// stays in buf for the last message. Each piece is a new slice: gRPC may
// use a message after Send returns.
type chunkWriter struct {
	send func([]byte) error
	buf  []byte
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if c.buf == nil {
			c.buf = make([]byte, 0, downloadChunk)
		}
		m := min(len(p), downloadChunk-len(c.buf))
		c.buf = append(c.buf, p[:m]...)
		p = p[m:]
		if len(c.buf) == downloadChunk {
			if err := c.send(c.buf); err != nil {
				return 0, err
			}
			c.buf = nil
		}
	}
	return n, nil
}

// Import extracts the archive the stream carries into the workspace,
// owned by the sandbox user, and its globals entry into io/hibernate
// (importGlobals). The header (globals, max_bytes) is in the first
// message only.
func (s *Server) Import(stream grpc.ClientStreamingServer[sandboxiov1.ImportRequest, sandboxiov1.ImportResponse]) error {
	first, err := stream.Recv()
	if err == io.EOF {
		return core.Invalidf("an import needs at least its header")
	}
	if err != nil {
		return err
	}
	lim, err := s.archiveLimits(first.GetMaxBytes())
	if err != nil {
		return err
	}
	name := first.GetGlobals()
	var g *importGlobals
	var open func() (io.WriteCloser, error)
	if name != "" {
		if err := checkGlobalsName(name); err != nil {
			return err
		}
		g = &importGlobals{s: s, name: name}
		defer g.cleanup()
		open = g.open
	}
	ws, err := s.workspace()
	if err != nil {
		return err
	}
	defer ws.Close()
	r := &importReader{stream: stream, pending: first.GetChunk()}
	st, err := wsarchive.Extract(stream.Context(), r, ws, open, wsarchive.Owner{UID: wspath.UID, GID: wspath.GID}, lim)
	if err != nil {
		return archiveError("import", err)
	}
	if g != nil && !g.done {
		return core.Invalidf("import: the archive has no globals entry for globals file %s", name)
	}
	if g != nil {
		g.keep = true
	}
	skipped := make([]string, len(st.Skipped))
	for i, sk := range st.Skipped {
		skipped[i] = wireString(sk)
	}
	s.log.Debug("workspace imported", "bytes", st.Bytes, "entries", st.Entries, "skipped", st.SkippedCount)
	return stream.SendAndClose(&sandboxiov1.ImportResponse{Bytes: st.Bytes, Skipped: skipped, SkippedCount: int64(st.SkippedCount)})
}

// importReader reads an import's archive from its stream; a second
// header is refused.
type importReader struct {
	stream  grpc.ClientStreamingServer[sandboxiov1.ImportRequest, sandboxiov1.ImportResponse]
	pending []byte
}

func (r *importReader) Read(p []byte) (int, error) {
	for len(r.pending) == 0 {
		msg, err := r.stream.Recv()
		if err != nil {
			return 0, err // io.EOF at the end
		}
		if msg.GetGlobals() != "" || msg.GetMaxBytes() != 0 {
			return 0, core.Invalidf("an import has one header, in its first message")
		}
		r.pending = msg.GetChunk()
	}
	n := copy(p, r.pending)
	r.pending = r.pending[n:]
	return n, nil
}

// importGlobals writes an archive's globals entry to io/hibernate/<name>:
// under a temporary name, owned by the sandbox user, mode 0600, renamed
// into place when complete (over whatever the sandbox put there, never
// through it).
type importGlobals struct {
	s    *Server
	name string
	hib  *os.Root
	f    *os.File
	tmp  string
	done bool // renamed into place
	keep bool // the import succeeded
}

// open makes io/hibernate if missing (0700, the sandbox user's; a
// non-directory the sandbox planted there is replaced) and the temporary
// file.
func (g *importGlobals) open() (io.WriteCloser, error) {
	ioDir, err := g.s.ioRoot()
	if err != nil {
		return nil, err
	}
	defer ioDir.Close()
	st, err := ioDir.Lstat(ioproto.HibernateDir)
	if err == nil && !st.IsDir() {
		if err := ioDir.Remove(ioproto.HibernateDir); err != nil {
			return nil, fmt.Errorf("replace /io/%s: %w", ioproto.HibernateDir, err)
		}
	}
	if err != nil || !st.IsDir() {
		if err := ioDir.Mkdir(ioproto.HibernateDir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("make /io/%s: %w", ioproto.HibernateDir, err)
		}
		if err := wspath.LchownOwned(ioDir, ioproto.HibernateDir); err != nil {
			return nil, fmt.Errorf("give /io/%s to the sandbox user: %w", ioproto.HibernateDir, err)
		}
	}
	if g.hib, err = ioDir.OpenRoot(ioproto.HibernateDir); err != nil {
		return nil, fmt.Errorf("open /io/%s: %w", ioproto.HibernateDir, err)
	}
	var suffix [8]byte
	rand.Read(suffix[:])
	g.tmp = importTempPrefix + hex.EncodeToString(suffix[:])
	g.f, err = g.hib.OpenFile(g.tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create the globals file: %w", err)
	}
	if err := wspath.ChownFile(g.f); err != nil {
		return nil, fmt.Errorf("give the globals file to the sandbox user: %w", err)
	}
	if err := g.f.Chmod(0o600); err != nil {
		return nil, fmt.Errorf("create the globals file: %w", err)
	}
	return g, nil
}

func (g *importGlobals) Write(p []byte) (int, error) { return g.f.Write(p) }

// Close syncs the file and renames it into place.
func (g *importGlobals) Close() error {
	err := g.f.Sync()
	if cerr := g.f.Close(); err == nil {
		err = cerr
	}
	g.f = nil
	if err == nil {
		err = g.hib.Rename(g.tmp, g.name)
	}
	if err != nil {
		return fmt.Errorf("write globals file %s: %w", g.name, err)
	}
	g.done = true
	return nil
}

// cleanup removes what a failed import left, the globals file included:
// a restore record must not load the globals of an archive that did not
// come in whole.
func (g *importGlobals) cleanup() {
	if g.f != nil {
		g.f.Close()
	}
	if g.hib == nil {
		return
	}
	switch {
	case !g.done:
		_ = g.hib.Remove(g.tmp)
	case !g.keep:
		_ = g.hib.Remove(g.name)
	}
	g.hib.Close()
}
