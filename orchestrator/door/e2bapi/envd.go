package e2bapi

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sandboxd/sandboxd/orchestrator/door/e2bapi/envdproto/filesystem"
	"github.com/sandboxd/sandboxd/orchestrator/door/e2bapi/envdproto/filesystem/filesystemconnect"
)

func (s *Server) envdMux() http.Handler {
	mux := http.NewServeMux()
	opts := rpcHandlerOptions()
	p, ph := newProcessHandler(s, opts...)
	mux.Handle(p, ph)
	f, fh := filesystemconnect.NewFilesystemHandler(&filesystemService{s: s}, opts...)
	mux.Handle(f, fh)
	mux.HandleFunc("GET /health", s.envdHealth)
	mux.HandleFunc("GET /files", s.download)
	mux.HandleFunc("POST /files", s.upload)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]any{"code": http.StatusNotFound,
			"message": fmt.Sprintf("envd: %s %s is not served by sandboxd", r.Method, sanitizeHeader(r.URL.Path))})
	})
	return mux
}

// download answers GET /files?path=: the file's bytes.
func (s *Server) download(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
	if p == "" {
		s.writeError(w, r, "download", badRequest("path is required"))
		return
	}
	rc, fi, err := s.m.Download(r.Context(), sandboxFrom(r.Context()), toWorkspace(p))
	if err != nil {
		s.writeError(w, r, "download", err)
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(fi.Size, 10))
	_, _ = io.Copy(w, io.LimitReader(rc, fi.Size))
}

// entryWritten is one element of POST /files' answer.
type entryWritten struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

// recordedBody is a request body that keeps its read error.
type recordedBody struct {
	io.ReadCloser
	err error
}

func (b *recordedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && b.err == nil {
		b.err = err
	}
	return n, err
}

// failure is the caller's error for the body's read error; nil if none.
func (b *recordedBody) failure() error {
	if b.err == nil {
		return nil
	}
	return bodyError(b.err)
}

// cmpErr is the first of errs that is not nil.
func cmpErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// maxUploadParts bounds the parts of one multipart upload (each file is an
// upload to the domain, bounded by --max-upload; the whole body by its
// deadline and minimum rate).
const maxUploadParts = 1000

// upload answers POST /files: a multipart form (fields "file", each file's
// name its path unless ?path= is given) or, for envd ≥ 0.5.7, the raw body
// (application/octet-stream) written to ?path=.
func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	qpath := r.URL.Query().Get("path")
	// A failure to read the body (its deadline) is the client's, told as
	// such, not an internal error of the domain's upload.
	rb := &recordedBody{ReadCloser: r.Body}
	r.Body = rb
	switch ce := r.Header.Get("Content-Encoding"); ce {
	case "", "identity":
	case "gzip":
		// Decompressed size is bounded by the domain's upload limit.
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			s.writeError(w, r, "upload", badRequest("the gzip body is malformed: "+err.Error()))
			return
		}
		defer zr.Close()
		r.Body = zr
	default:
		s.writeError(w, r, "upload", badRequest(fmt.Sprintf("Content-Encoding %q is not supported (gzip is)", sanitizeHeader(ce))))
		return
	}
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var out []entryWritten
	put := func(p string, body io.Reader) error {
		if p == "" {
			return badRequest("the file's path is missing (?path= or the part's file name)")
		}
		fi, err := s.m.Upload(ctx, sandboxFrom(ctx), toWorkspace(p), body)
		if err != nil {
			return cmpErr(rb.failure(), err)
		}
		out = append(out, entryWritten{Name: path.Base(fi.Path), Type: "file", Path: fromWorkspace(fi.Path)})
		return nil
	}
	switch {
	case mt == "multipart/form-data" && params["boundary"] == "":
		s.writeError(w, r, "upload", badRequest("multipart body without a boundary"))
		return
	case mt == "multipart/form-data":
		mr := multipart.NewReader(r.Body, params["boundary"])
		for parts := 0; ; parts++ {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				s.writeError(w, r, "upload", cmpErr(rb.failure(), badRequest("malformed multipart body: "+err.Error())))
				return
			}
			if parts >= maxUploadParts {
				part.Close()
				s.writeError(w, r, "upload", badRequest(fmt.Sprintf("more than %d parts in one upload", maxUploadParts)))
				return
			}
			if part.FormName() != "file" {
				part.Close()
				continue
			}
			p := qpath
			if p == "" {
				// The part's file name is the path (multipart.Part.FileName
				// would keep only its last element).
				_, dp, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
				p = dp["filename"]
			}
			err = put(p, part)
			part.Close()
			if err != nil {
				s.writeError(w, r, "upload", err)
				return
			}
		}
	default:
		if err := put(qpath, r.Body); err != nil {
			s.writeError(w, r, "upload", err)
			return
		}
	}
	if len(out) == 0 {
		s.writeError(w, r, "upload", badRequest("no file in the request (multipart field \"file\")"))
		return
	}
	// What follows a multipart body's last part (nothing, or an epilogue)
	// is read to the end, so that the connection is kept.
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 64<<10))
	writeJSON(w, http.StatusOK, out)
}

// filesystemService implements envd's filesystem.Filesystem.
type filesystemService struct {
	filesystemconnect.UnimplementedFilesystemHandler
	s *Server
}

// entryOf converts a domain FileInfo.
func entryOf(fi core.FileInfo) *filesystem.EntryInfo {
	t := filesystem.FileType_FILE_TYPE_UNSPECIFIED
	switch fi.Type {
	case core.FileRegular:
		t = filesystem.FileType_FILE_TYPE_FILE
	case core.FileDirectory:
		t = filesystem.FileType_FILE_TYPE_DIRECTORY
	case core.FileSymlink:
		t = filesystem.FileType_FILE_TYPE_SYMLINK
	}
	name := path.Base(fi.Path)
	if fi.Path == "" || fi.Path == "." {
		name = path.Base(workspace)
	}
	return &filesystem.EntryInfo{
		Name: name, Type: t, Path: fromWorkspace(fi.Path), Size: fi.Size,
		Mode: uint32(fi.Mode.Perm()), Permissions: fi.Mode.String(),
		Owner: ownerName(fi.UID), Group: ownerName(fi.GID),
		ModifiedTime: timestamppb.New(fi.ModTime),
	}
}

// ownerName names an owner as E2B does: the sandbox user is "user".
func ownerName(id uint32) string {
	if id == 0 {
		return "root"
	}
	return "user"
}

// stat finds one entry: the domain lists directories, so a path is looked
// up in its parent's listing.
func (f *filesystemService) stat(ctx context.Context, p string) (core.FileInfo, error) {
	rel := path.Clean(toWorkspace(p))
	id := sandboxFrom(ctx)
	if rel == "." || rel == "" {
		return core.FileInfo{Path: "", IsDir: true, Type: core.FileDirectory, Mode: fs.ModeDir | 0o755, ModTime: time.Now()}, nil
	}
	if strings.HasPrefix(rel, "/") || rel == ".." || strings.HasPrefix(rel, "../") {
		_, err := f.s.m.ListFiles(ctx, id, rel) // the domain says why not
		if err == nil {
			err = badRequest("path is outside /workspace")
		}
		return core.FileInfo{}, err
	}
	list, err := f.s.m.ListFiles(ctx, id, path.Dir(rel))
	if err != nil {
		if core.ClassOf(err) == core.ErrNotFound {
			return core.FileInfo{}, connect.NewError(connect.CodeNotFound, fmt.Errorf("path %s does not exist", p))
		}
		return core.FileInfo{}, err
	}
	for _, fi := range list {
		if fi.Path == rel {
			return fi, nil
		}
	}
	return core.FileInfo{}, connect.NewError(connect.CodeNotFound, fmt.Errorf("path %s does not exist", p))
}

func (f *filesystemService) Stat(ctx context.Context, req *connect.Request[filesystem.StatRequest]) (*connect.Response[filesystem.StatResponse], error) {
	fi, err := f.stat(ctx, req.Msg.GetPath())
	if err != nil {
		return nil, f.s.connectError(ctx, "Stat", err)
	}
	return connect.NewResponse(&filesystem.StatResponse{Entry: entryOf(fi)}), nil
}

func (f *filesystemService) ListDir(ctx context.Context, req *connect.Request[filesystem.ListDirRequest]) (*connect.Response[filesystem.ListDirResponse], error) {
	depth := int(req.Msg.GetDepth())
	if depth == 0 {
		depth = 1
	}
	list, err := f.s.m.ListFilesDepth(ctx, sandboxFrom(ctx), toWorkspace(req.Msg.GetPath()), depth)
	if err != nil {
		return nil, f.s.connectError(ctx, "ListDir", err)
	}
	out := &filesystem.ListDirResponse{Entries: make([]*filesystem.EntryInfo, 0, len(list))}
	for _, fi := range list {
		out.Entries = append(out.Entries, entryOf(fi))
	}
	return connect.NewResponse(out), nil
}

// MakeDir creates the directory and its parents; an existing path is
// AlreadyExists (the SDK's makeDir then answers false).
func (f *filesystemService) MakeDir(ctx context.Context, req *connect.Request[filesystem.MakeDirRequest]) (*connect.Response[filesystem.MakeDirResponse], error) {
	p := req.Msg.GetPath()
	if _, err := f.stat(ctx, p); err == nil {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("%s already exists", p))
	}
	fi, err := f.s.m.MakeDirectory(ctx, sandboxFrom(ctx), toWorkspace(p), true)
	if err != nil {
		return nil, f.s.connectError(ctx, "MakeDir", err)
	}
	return connect.NewResponse(&filesystem.MakeDirResponse{Entry: entryOf(fi)}), nil
}

// Move renames, replacing an existing destination as rename(2) does.
func (f *filesystemService) Move(ctx context.Context, req *connect.Request[filesystem.MoveRequest]) (*connect.Response[filesystem.MoveResponse], error) {
	fi, err := f.s.m.Rename(ctx, sandboxFrom(ctx), toWorkspace(req.Msg.GetSource()), toWorkspace(req.Msg.GetDestination()), true)
	if err != nil {
		return nil, f.s.connectError(ctx, "Move", err)
	}
	return connect.NewResponse(&filesystem.MoveResponse{Entry: entryOf(fi)}), nil
}

// Remove removes a file or a whole directory; a missing one is no error,
// as for envd (rm -rf).
func (f *filesystemService) Remove(ctx context.Context, req *connect.Request[filesystem.RemoveRequest]) (*connect.Response[filesystem.RemoveResponse], error) {
	err := f.s.m.Remove(ctx, sandboxFrom(ctx), toWorkspace(req.Msg.GetPath()), true)
	if core.ClassOf(err) == core.ErrNotFound {
		if _, serr := f.s.m.Get(ctx, sandboxFrom(ctx)); serr == nil {
			err = nil // the path, not the sandbox, is missing
		}
	}
	if err != nil {
		return nil, f.s.connectError(ctx, "Remove", err)
	}
	return connect.NewResponse(&filesystem.RemoveResponse{}), nil
}

// lockedSender serialises Send on one server stream between the event
// callback and the keepalive ticker.
type lockedSender[T any] struct {
	mu     sync.Mutex
	stream *connect.ServerStream[T]
}

func (l *lockedSender[T]) send(m *T) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stream.Send(m)
}

// keepalive sends ka every interval until ctx is done.
func keepalive(ctx context.Context, interval time.Duration, ka func() error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if ka() != nil {
				return
			}
		}
	}
}

// rpcKeepalive is the keepalive interval of streaming RPCs: the SDK asks
// for 50 s (Keepalive-Ping-Interval); a bit less keeps proxies content.
func (s *Server) rpcKeepalive(h http.Header) time.Duration {
	if n, err := strconv.Atoi(h.Get("Keepalive-Ping-Interval")); err == nil && n >= 1 && n <= 600 {
		return time.Duration(n) * time.Second * 9 / 10
	}
	return 30 * time.Second
}

// WatchDir streams changes under a directory: a start event once the
// watch is in place, then one event per change (name relative to the
// watched directory).
func (f *filesystemService) WatchDir(ctx context.Context, req *connect.Request[filesystem.WatchDirRequest], stream *connect.ServerStream[filesystem.WatchDirResponse]) error {
	dir := path.Clean(toWorkspace(req.Msg.GetPath()))
	if dir == "." {
		dir = ""
	}
	ls := &lockedSender[filesystem.WatchDirResponse]{stream: stream}
	kctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err := f.s.m.WatchDirectory(ctx, sandboxFrom(ctx), dir, req.Msg.GetRecursive(), func(u core.WatchUpdate) error {
		if u.Event == nil {
			// The start event first: the SDK takes the first message for it.
			if err := ls.send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Start{Start: &filesystem.WatchDirResponse_StartEvent{}}}); err != nil {
				return err
			}
			go keepalive(kctx, f.s.rpcKeepalive(req.Header()), func() error {
				return ls.send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Keepalive{Keepalive: &filesystem.WatchDirResponse_KeepAlive{}}})
			})
			return nil
		}
		name := u.Event.Path
		if dir != "" {
			name = strings.TrimPrefix(strings.TrimPrefix(name, dir), "/")
		}
		var t filesystem.EventType
		switch u.Event.Op {
		case core.WatchCreate:
			t = filesystem.EventType_EVENT_TYPE_CREATE
		case core.WatchWrite:
			t = filesystem.EventType_EVENT_TYPE_WRITE
		case core.WatchRemove:
			t = filesystem.EventType_EVENT_TYPE_REMOVE
		case core.WatchRename:
			t = filesystem.EventType_EVENT_TYPE_RENAME
		}
		if err := ls.send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Filesystem{Filesystem: &filesystem.FilesystemEvent{Name: name, Type: t}}}); err != nil {
			return err
		}
		if u.Event.Op == core.WatchCreate {
			// sandboxd's uploads (and editors) write a file aside and
			// rename it into place, which shows as a create only; envd
			// writes in place, and its clients wait for the write. A file
			// created is also written, so say so.
			if fi, err := f.stat(ctx, u.Event.Path); err == nil && fi.Type != core.FileDirectory {
				return ls.send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Filesystem{Filesystem: &filesystem.FilesystemEvent{Name: name, Type: filesystem.EventType_EVENT_TYPE_WRITE}}})
			}
		}
		return nil
	})
	if err != nil && ctx.Err() == nil {
		return f.s.connectError(ctx, "WatchDir", err)
	}
	return nil
}

// envdHealth answers 204 while the sandbox runs and 502 while it is
// paused (hibernated), as E2B's edge does for a sandbox without a running
// envd (Sandbox.isRunning). It looks without waking the sandbox.
func (s *Server) envdHealth(w http.ResponseWriter, r *http.Request) {
	sb, err := s.m.Get(r.Context(), sandboxFrom(r.Context()))
	if err != nil || sb.State != core.StateRunning {
		http.Error(w, "the sandbox is not running", http.StatusBadGateway)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
