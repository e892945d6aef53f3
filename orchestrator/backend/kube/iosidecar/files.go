package iosidecar

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/wspath"
	sandboxiov1 "github.com/sandboxd/sandboxd/proto/sandboxio/v1"
)

// The files API works on /workspace with wspath, the code the Docker
// backend runs on the host: every access through an os.Root (the sandbox
// may have planted symlinks to leave the workspace), uploads written under
// a temporary name and renamed into place, what is created owned by the
// sandbox user, errors in core's classes (sent with their reason,
// errors.go). What is sandboxio.v1's own is here: the path checked again
// (core.CleanPath: the package doc says why), the messages' framing, and
// file descriptions with absolute paths (protoInfo).

// workspace opens the sandbox's /workspace as a root.
func (s *Server) workspace() (*os.Root, error) {
	root, err := os.OpenRoot(s.cfg.Workspace)
	if err != nil {
		return nil, fmt.Errorf("open the workspace: %w", err)
	}
	return root, nil
}

// protoInfo is a file's description as sandboxio.v1 sends it: its path
// absolute, as the sandbox sees it, and valid UTF-8 (wireString).
func protoInfo(fi core.FileInfo) *sandboxiov1.FileInfo {
	rel := fi.Path
	if rel == "" {
		rel = "."
	}
	return &sandboxiov1.FileInfo{Path: wireString(core.DisplayPath(rel)), Size: fi.Size, Mode: uint32(fi.Mode),
		ModTimeUnixNano: fi.ModTime.UnixNano(), Uid: fi.UID, Gid: fi.GID}
}

// Upload writes a file under /workspace (wspath.Upload). The header comes
// first; the content may not exceed the header's max_bytes nor the
// server's cap (RESOURCE_EXHAUSTED). Missing parents are created.
func (s *Server) Upload(stream grpc.ClientStreamingServer[sandboxiov1.UploadRequest, sandboxiov1.UploadResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	h := first.GetHeader()
	if h == nil {
		return core.Invalidf("the first message of an upload must be its header")
	}
	limit := s.cfg.MaxUploadBytes
	switch {
	case h.GetMaxBytes() < 0:
		return core.Invalidf("max_bytes is negative (%d)", h.GetMaxBytes())
	case h.GetMaxBytes() > 0:
		limit = min(limit, h.GetMaxBytes())
	}
	rel, err := core.CleanPath(h.GetPath())
	if err != nil {
		return err
	}
	if rel == "." {
		return core.Invalidf("upload path is empty: name a file under /workspace")
	}
	root, err := s.workspace()
	if err != nil {
		return err
	}
	defer root.Close()
	show := core.DisplayPath(rel)
	fi, n, err := wspath.Upload(stream.Context(), root, rel, &uploadReader{stream: stream, limit: limit, show: show})
	if err != nil {
		return err
	}
	s.log.Debug("file uploaded", "path", show, "bytes", n)
	return stream.SendAndClose(&sandboxiov1.UploadResponse{File: protoInfo(fi)})
}

// uploadReader reads an upload's content from its stream: at most limit
// bytes (ErrResourceExhausted beyond), and no second header. The stream's
// own failure is the caller's, returned as it is.
type uploadReader struct {
	stream  grpc.ClientStreamingServer[sandboxiov1.UploadRequest, sandboxiov1.UploadResponse]
	limit   int64
	show    string
	n       int64
	pending []byte
}

func (u *uploadReader) Read(p []byte) (int, error) {
	for len(u.pending) == 0 {
		msg, err := u.stream.Recv()
		if err != nil {
			return 0, err // io.EOF at the end
		}
		if msg.GetHeader() != nil {
			return 0, core.Invalidf("an upload has one header, in its first message")
		}
		u.n += int64(len(msg.GetChunk()))
		if u.n > u.limit {
			return 0, core.Exhaustedf("upload to %s is larger than its limit of %d bytes", u.show, u.limit)
		}
		u.pending = msg.GetChunk()
	}
	n := copy(p, u.pending)
	u.pending = u.pending[n:]
	return n, nil
}

// Download sends a regular file under /workspace (wspath.Open) in 1 MiB
// chunks, the file's description in the first message. It sends at most
// the size the file had when opened: a file the sandbox keeps growing does
// not keep the stream going.
func (s *Server) Download(req *sandboxiov1.DownloadRequest, stream grpc.ServerStreamingServer[sandboxiov1.DownloadResponse]) error {
	rel, err := core.CleanPath(req.GetPath())
	if err != nil {
		return err
	}
	root, err := s.workspace()
	if err != nil {
		return err
	}
	defer root.Close()
	f, fi, err := wspath.Open(root, rel)
	if err != nil {
		return err
	}
	defer f.Close()
	r := io.LimitReader(f, fi.Size)
	buf := make([]byte, downloadChunk)
	msg := &sandboxiov1.DownloadResponse{File: protoInfo(fi)}
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
			return wspath.FSError("download", core.DisplayPath(rel), err)
		}
		if err := stream.Context().Err(); err != nil {
			return err
		}
	}
}

// ListFiles lists a directory under /workspace (wspath.List) over
// req.Depth levels (0 and 1: one level; at most core.MaxListDepth), sorted
// by path; only real directories are descended into; for a file it returns just that file. Symbolic links are
// listed as such, never followed. At most wspath.MaxListEntries entries
// (RESOURCE_EXHAUSTED beyond).
func (s *Server) ListFiles(ctx context.Context, req *sandboxiov1.ListFilesRequest) (*sandboxiov1.ListFilesResponse, error) {
	rel, err := core.CleanPath(req.GetPath())
	if err != nil {
		return nil, err
	}
	depth := req.GetDepth()
	if depth > core.MaxListDepth {
		return nil, core.Invalidf("list depth %d is out of range: give 0 to %d", depth, core.MaxListDepth)
	}
	root, err := s.workspace()
	if err != nil {
		return nil, err
	}
	defer root.Close()
	list, err := wspath.List(ctx, root, rel, max(int(depth), 1))
	if err != nil {
		return nil, err
	}
	out := make([]*sandboxiov1.FileInfo, len(list))
	for i, fi := range list {
		out[i] = protoInfo(fi)
	}
	return &sandboxiov1.ListFilesResponse{Files: out}, nil
}

// MakeDirectory creates a directory under /workspace (wspath.MakeDirectory),
// owned by the sandbox user: with parents, as mkdir -p.
func (s *Server) MakeDirectory(_ context.Context, req *sandboxiov1.MakeDirectoryRequest) (*sandboxiov1.MakeDirectoryResponse, error) {
	rel, err := core.CleanPath(req.GetPath())
	if err != nil {
		return nil, err
	}
	root, err := s.workspace()
	if err != nil {
		return nil, err
	}
	defer root.Close()
	fi, err := wspath.MakeDirectory(root, rel, req.GetParents())
	if err != nil {
		return nil, err
	}
	return &sandboxiov1.MakeDirectoryResponse{File: protoInfo(fi)}, nil
}

// Remove deletes a file, symbolic link (not its target) or directory under
// /workspace (wspath.Remove); never /workspace itself.
func (s *Server) Remove(_ context.Context, req *sandboxiov1.RemoveRequest) (*sandboxiov1.RemoveResponse, error) {
	rel, err := core.CleanPath(req.GetPath())
	if err != nil {
		return nil, err
	}
	if rel == "." {
		return nil, core.Invalidf("remove %s: the workspace itself cannot be removed; remove what is in it", core.DisplayPath(rel))
	}
	root, err := s.workspace()
	if err != nil {
		return nil, err
	}
	defer root.Close()
	if err := wspath.Remove(root, rel, req.GetRecursive()); err != nil {
		return nil, err
	}
	s.log.Debug("file removed", "path", core.DisplayPath(rel), "recursive", req.GetRecursive())
	return &sandboxiov1.RemoveResponse{}, nil
}

// Rename moves a file or directory within /workspace (wspath.Rename),
// after the checks core.Validating makes in sandboxd: neither path is
// /workspace itself, they differ, and a directory does not move into
// itself.
func (s *Server) Rename(_ context.Context, req *sandboxiov1.RenameRequest) (*sandboxiov1.RenameResponse, error) {
	relFrom, err := core.CleanPath(req.GetFrom())
	if err != nil {
		return nil, err
	}
	relTo, err := core.CleanPath(req.GetTo())
	if err != nil {
		return nil, err
	}
	showFrom, showTo := core.DisplayPath(relFrom), core.DisplayPath(relTo)
	switch {
	case relFrom == ".":
		return nil, core.Invalidf("rename %s: the workspace itself cannot be moved", showFrom)
	case relTo == ".":
		return nil, core.Invalidf("rename %s to %s: the destination is the workspace itself", showFrom, showTo)
	case relTo == relFrom:
		return nil, core.Invalidf("rename %s: source and destination are the same path", showFrom)
	case strings.HasPrefix(relTo, relFrom+"/"):
		return nil, core.Invalidf("rename %s to %s: cannot move a directory into itself", showFrom, showTo)
	}
	root, err := s.workspace()
	if err != nil {
		return nil, err
	}
	defer root.Close()
	fi, err := wspath.Rename(root, relFrom, relTo, req.GetOverwrite())
	if err != nil {
		return nil, err
	}
	s.log.Debug("file renamed", "from", showFrom, "to", showTo)
	return &sandboxiov1.RenameResponse{File: protoInfo(fi)}, nil
}

// wireString makes a name the sandbox chose valid UTF-8 for a proto string
// field, each run of invalid bytes one U+FFFD, as sandboxd's gRPC door
// makes every string it sends: a file name that is not UTF-8 would
// otherwise fail the whole response's encoding (a listing of a directory
// holding one, a watch seeing one).
func wireString(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
