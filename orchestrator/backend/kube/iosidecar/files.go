package iosidecar

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/iolog"
	"github.com/sandboxd/sandboxd/orchestrator/wspath"
	sandboxiov1 "github.com/sandboxd/sandboxd/proto/sandboxio/v1"
)

// The files API works on /workspace exactly as orchestrator/files.go does
// on the host: paths by wspath's rules, every access through an os.Root
// (the sandbox may have planted symlinks to leave the workspace), uploads
// written under a temporary name and renamed into place, what is created
// owned by the sandbox user.

// cleanPath applies wspath's rules, as INVALID_ARGUMENT.
func cleanPath(p string) (string, error) {
	rel, err := core.CleanPath(p)
	if err != nil {
		return "", status.Error(codes.InvalidArgument, err.Error())
	}
	return rel, nil
}

// fsError classifies a file system error on the workspace, as
// orchestrator's fsError does.
func fsError(op, display string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return status.Errorf(codes.NotFound, "%s %s: no such file or directory", op, display)
	case iolog.IsEscape(err):
		return status.Errorf(codes.InvalidArgument, "%s %s: path escapes /workspace", op, display)
	case errors.Is(err, syscall.ENOTDIR):
		return status.Errorf(codes.InvalidArgument, "%s %s: a parent of the path is not a directory", op, display)
	case errors.Is(err, syscall.EISDIR):
		return status.Errorf(codes.InvalidArgument, "%s %s: is a directory", op, display)
	case errors.Is(err, syscall.ENAMETOOLONG):
		return status.Errorf(codes.InvalidArgument, "%s %s: name too long", op, display)
	case errors.Is(err, fs.ErrExist):
		return status.Errorf(codes.InvalidArgument, "%s %s: already exists", op, display)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return status.Errorf(codes.ResourceExhausted, "%s %s: no space left on the sandbox's disk", op, display)
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Errorf(codes.Internal, "%s %s: %v", op, display, err)
}

// fileInfo describes a file; rel is relative to the workspace.
func fileInfo(rel string, st fs.FileInfo) *sandboxiov1.FileInfo {
	fi := &sandboxiov1.FileInfo{Path: core.DisplayPath(rel), Mode: uint32(st.Mode()), ModTimeUnixNano: st.ModTime().UnixNano()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		fi.Uid, fi.Gid = sys.Uid, sys.Gid
	}
	if !st.IsDir() {
		fi.Size = st.Size()
	}
	return fi
}

// Upload writes a file under /workspace. The header comes first; the
// content may not exceed the header's max_bytes nor the server's cap
// (RESOURCE_EXHAUSTED). Missing parents are created.
func (s *Server) Upload(stream grpc.ClientStreamingServer[sandboxiov1.UploadRequest, sandboxiov1.UploadResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	h := first.GetHeader()
	if h == nil {
		return status.Error(codes.InvalidArgument, "the first message of an upload must be its header")
	}
	limit := s.cfg.MaxUploadBytes
	switch {
	case h.GetMaxBytes() < 0:
		return status.Errorf(codes.InvalidArgument, "max_bytes is negative (%d)", h.GetMaxBytes())
	case h.GetMaxBytes() > 0:
		limit = min(limit, h.GetMaxBytes())
	}
	rel, err := cleanPath(h.GetPath())
	if err != nil {
		return err
	}
	if rel == "." {
		return status.Error(codes.InvalidArgument, "upload path is empty: name a file under /workspace")
	}
	show := core.DisplayPath(rel)
	root, err := os.OpenRoot(s.cfg.Workspace)
	if err != nil {
		return status.Errorf(codes.Internal, "open the workspace: %v", err)
	}
	defer root.Close()

	dir := path.Dir(rel)
	if err := wspath.MkdirAllOwned(root, dir); err != nil {
		return fsError("upload to", show, err)
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := path.Join(dir, wspath.UploadTempPrefix+hex.EncodeToString(rnd[:]))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fsError("upload to", show, err)
	}
	committed := false
	defer func() {
		if !committed {
			f.Close()
			root.Remove(tmp)
		}
	}()
	var n int64
	for {
		msg, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err // the caller's stream failed: theirs to report
		}
		chunk := msg.GetChunk()
		if msg.GetHeader() != nil {
			return status.Error(codes.InvalidArgument, "an upload has one header, in its first message")
		}
		n += int64(len(chunk))
		if n > limit {
			return status.Errorf(codes.ResourceExhausted, "upload to %s is larger than its limit of %d bytes", show, limit)
		}
		if _, err := f.Write(chunk); err != nil {
			return fsError("upload to", show, err)
		}
	}
	if err := wspath.ChownFile(f); err != nil {
		return fsError("upload to", show, err)
	}
	if err := f.Close(); err != nil {
		return fsError("upload to", show, err)
	}
	if err := root.Rename(tmp, rel); err != nil {
		if errors.Is(err, syscall.EEXIST) || errors.Is(err, syscall.ENOTEMPTY) {
			err = syscall.EISDIR // renaming over a directory
		}
		root.Remove(tmp)
		committed = true
		return fsError("upload to", show, err)
	}
	committed = true
	st, err := root.Lstat(rel)
	if err != nil {
		return fsError("upload to", show, err)
	}
	s.log.Debug("file uploaded", "path", show, "bytes", n)
	return stream.SendAndClose(&sandboxiov1.UploadResponse{File: fileInfo(rel, st)})
}

// Download sends a regular file under /workspace in 1 MiB chunks, the
// file's description in the first message. It sends at most the size the
// file had when opened: a file the sandbox keeps growing does not keep
// the stream going.
func (s *Server) Download(req *sandboxiov1.DownloadRequest, stream grpc.ServerStreamingServer[sandboxiov1.DownloadResponse]) error {
	rel, err := cleanPath(req.GetPath())
	if err != nil {
		return err
	}
	show := core.DisplayPath(rel)
	root, err := os.OpenRoot(s.cfg.Workspace)
	if err != nil {
		return status.Errorf(codes.Internal, "open the workspace: %v", err)
	}
	defer root.Close()
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return fsError("download", show, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fsError("download", show, err)
	}
	switch {
	case st.IsDir():
		return status.Errorf(codes.InvalidArgument, "download %s: is a directory; use ListFiles", show)
	case !st.Mode().IsRegular():
		return status.Errorf(codes.InvalidArgument, "download %s: not a regular file (%v)", show, st.Mode().Type())
	}
	r := io.LimitReader(f, st.Size())
	buf := make([]byte, downloadChunk)
	msg := &sandboxiov1.DownloadResponse{File: fileInfo(rel, st)}
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 || msg.File != nil {
			msg.Chunk = buf[:n]
			if serr := stream.Send(msg); serr != nil {
				return serr
			}
			msg = &sandboxiov1.DownloadResponse{}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil
		}
		if err != nil {
			return fsError("download", show, err)
		}
		if err := stream.Context().Err(); err != nil {
			return status.FromContextError(err).Err()
		}
	}
}

// ListFiles lists a directory under /workspace (not recursively), sorted
// by path; for a file it returns just that file. Symbolic links are listed
// as such, never followed. At most wspath.MaxListEntries entries
// (RESOURCE_EXHAUSTED beyond).
func (s *Server) ListFiles(ctx context.Context, req *sandboxiov1.ListFilesRequest) (*sandboxiov1.ListFilesResponse, error) {
	rel, err := cleanPath(req.GetPath())
	if err != nil {
		return nil, err
	}
	show := core.DisplayPath(rel)
	root, err := os.OpenRoot(s.cfg.Workspace)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "open the workspace: %v", err)
	}
	defer root.Close()
	st, err := root.Stat(rel)
	if err != nil {
		return nil, fsError("list", show, err)
	}
	if !st.IsDir() {
		return &sandboxiov1.ListFilesResponse{Files: []*sandboxiov1.FileInfo{fileInfo(rel, st)}}, nil
	}
	d, err := root.Open(rel)
	if err != nil {
		return nil, fsError("list", show, err)
	}
	entries, err := d.ReadDir(wspath.MaxListEntries + 1)
	d.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fsError("list", show, err)
	}
	out := make([]*sandboxiov1.FileInfo, 0, len(entries))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), wspath.UploadTempPrefix) {
			continue
		}
		if len(out) == wspath.MaxListEntries {
			return nil, status.Errorf(codes.ResourceExhausted, "list %s: the directory has more than %d entries", show, wspath.MaxListEntries)
		}
		info, err := e.Info()
		if err != nil {
			continue // removed since ReadDir
		}
		out = append(out, fileInfo(path.Join(rel, e.Name()), info))
	}
	slices.SortFunc(out, func(a, b *sandboxiov1.FileInfo) int { return strings.Compare(a.Path, b.Path) })
	return &sandboxiov1.ListFilesResponse{Files: out}, nil
}
