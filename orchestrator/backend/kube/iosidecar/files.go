package iosidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"unicode/utf8"

	"google.golang.org/grpc"

	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/wspath"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	sandboxiov1 "github.com/sandboxd/sandboxd/proto/sandboxio/v1"
)

// The files API works on /workspace (and on the volumes mounted in the
// sidecar: volumes.go) with wspath, the code the Docker backend runs on
// the host: every access through an os.Root (the sandbox
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

// target is where a files call works: a tree (/workspace, or a volume
// mounted under Config.Volumes), opened as a root, and the call's path
// made clean by the tree's rule.
type target struct {
	tree wspath.Tree
	root *os.Root
	rel  string
}

// show is the path as the caller gave it.
func (t *target) show() string { return t.tree.Display(t.rel) }

// info is a file's description as sandboxio.v1 sends it (protoInfo).
func (t *target) info(fi core.FileInfo) *sandboxiov1.FileInfo { return protoInfo(t.tree, fi) }

// open checks path by the rule of the tree volume names ("": the
// workspace) and opens that tree. The caller closes the root.
func (s *Server) open(volume, path string) (*target, error) {
	t := &target{tree: wspath.Workspace}
	if volume != "" {
		t.tree = wspath.Volume
	}
	rel, err := t.tree.Clean(path)
	if err != nil {
		return nil, err
	}
	t.rel = rel
	if volume == "" {
		t.root, err = s.workspace()
		return t, err
	}
	t.root, err = s.volume(volume)
	return t, err
}

// volume opens the root of volume id, mounted at Config.Volumes/id.
func (s *Server) volume(id string) (*os.Root, error) {
	if !core.IsVolumeID(id) {
		return nil, core.Invalidf("volume %q: not a volume ID (vol-…)", core.Truncate(id, 80))
	}
	if s.cfg.Volumes == "" {
		return nil, core.Preconditionf("volume %s: this io sidecar serves no volumes", id)
	}
	root, err := os.OpenRoot(filepath.Join(s.cfg.Volumes, id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, core.Preconditionf("volume %s is not mounted in this Pod", id)
	}
	if err != nil {
		return nil, fmt.Errorf("open volume %s: %w", id, err)
	}
	return root, nil
}

// protoInfo is a file's description as sandboxio.v1 sends it: its path
// absolute in its tree (as the sandbox sees it in /workspace, from the
// root on a volume), and valid UTF-8 (wireString).
func protoInfo(t wspath.Tree, fi core.FileInfo) *sandboxiov1.FileInfo {
	rel := fi.Path
	if rel == "" {
		rel = "."
	}
	return &sandboxiov1.FileInfo{Path: wireString(t.Display(rel)), Size: fi.Size, Mode: uint32(fi.Mode),
		ModTimeUnixNano: fi.ModTime.UnixNano(), Uid: fi.UID, Gid: fi.GID}
}

// Upload writes a file under /workspace or on a volume (wspath.Upload).
// The header comes first; the content may not exceed the header's
// max_bytes nor the server's cap (RESOURCE_EXHAUSTED). Missing parents are
// created; an existing file is replaced unless the header is exclusive.
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
	t, err := s.open(h.GetVolume(), h.GetPath())
	if err != nil {
		return err
	}
	defer t.root.Close()
	if t.rel == "." {
		return core.Invalidf("upload path is empty: name a file under %s", t.tree.Name)
	}
	show := t.show()
	fi, n, err := t.tree.Upload(stream.Context(), t.root, t.rel, &uploadReader{stream: stream, limit: limit, show: show}, !h.GetExclusive())
	if err != nil {
		return err
	}
	s.log.Debug("file uploaded", "volume", h.GetVolume(), "path", show, "bytes", n)
	return stream.SendAndClose(&sandboxiov1.UploadResponse{File: t.info(fi)})
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

// Download sends a regular file under /workspace or on a volume
// (wspath.Open) in 1 MiB
// chunks, the file's description in the first message. It sends at most
// the size the file had when opened: a file the sandbox keeps growing does
// not keep the stream going.
func (s *Server) Download(req *sandboxiov1.DownloadRequest, stream grpc.ServerStreamingServer[sandboxiov1.DownloadResponse]) error {
	t, err := s.open(req.GetVolume(), req.GetPath())
	if err != nil {
		return err
	}
	defer t.root.Close()
	f, fi, err := t.tree.Open(t.root, t.rel)
	if err != nil {
		return err
	}
	defer f.Close()
	r := io.LimitReader(f, fi.Size)
	buf := make([]byte, downloadChunk)
	msg := &sandboxiov1.DownloadResponse{File: t.info(fi)}
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
			return t.tree.FSError("download", t.show(), err)
		}
		if err := stream.Context().Err(); err != nil {
			return err
		}
	}
}

// ListFiles lists a directory under /workspace or on a volume (wspath.List) over
// req.Depth levels (0 and 1: one level; at most core.MaxListDepth), sorted
// by path; only real directories are descended into; for a file it returns just that file. Symbolic links are
// listed as such, never followed. At most wspath.MaxListEntries entries
// (RESOURCE_EXHAUSTED beyond).
func (s *Server) ListFiles(ctx context.Context, req *sandboxiov1.ListFilesRequest) (*sandboxiov1.ListFilesResponse, error) {
	depth := req.GetDepth()
	if depth > core.MaxListDepth {
		return nil, core.Invalidf("list depth %d is out of range: give 0 to %d", depth, core.MaxListDepth)
	}
	t, err := s.open(req.GetVolume(), req.GetPath())
	if err != nil {
		return nil, err
	}
	defer t.root.Close()
	list, err := t.tree.List(ctx, t.root, t.rel, max(int(depth), 1))
	if err != nil {
		return nil, err
	}
	out := make([]*sandboxiov1.FileInfo, len(list))
	for i, fi := range list {
		out[i] = t.info(fi)
	}
	return &sandboxiov1.ListFilesResponse{Files: out}, nil
}

// MakeDirectory creates a directory under /workspace or on a volume
// (wspath.MakeDirectory), owned by the sandbox user: with parents, as
// mkdir -p.
func (s *Server) MakeDirectory(_ context.Context, req *sandboxiov1.MakeDirectoryRequest) (*sandboxiov1.MakeDirectoryResponse, error) {
	t, err := s.open(req.GetVolume(), req.GetPath())
	if err != nil {
		return nil, err
	}
	defer t.root.Close()
	fi, err := t.tree.MakeDirectory(t.root, t.rel, req.GetParents())
	if err != nil {
		return nil, err
	}
	return &sandboxiov1.MakeDirectoryResponse{File: t.info(fi)}, nil
}

// Remove deletes a file, symbolic link (not its target) or directory under
// /workspace or on a volume (wspath.Remove); never the tree's root.
func (s *Server) Remove(_ context.Context, req *sandboxiov1.RemoveRequest) (*sandboxiov1.RemoveResponse, error) {
	t, err := s.open(req.GetVolume(), req.GetPath())
	if err != nil {
		return nil, err
	}
	defer t.root.Close()
	if t.rel == "." {
		what := "the workspace"
		if req.GetVolume() != "" {
			what = t.tree.Name
		}
		return nil, core.Invalidf("remove %s: %s itself cannot be removed; remove what is in it", t.show(), what)
	}
	if err := t.tree.Remove(t.root, t.rel, req.GetRecursive()); err != nil {
		return nil, err
	}
	s.log.Debug("file removed", "volume", req.GetVolume(), "path", t.show(), "recursive", req.GetRecursive())
	return &sandboxiov1.RemoveResponse{}, nil
}

// Stat describes a file under /workspace or on a volume; a symbolic link
// as a link.
func (s *Server) Stat(_ context.Context, req *sandboxiov1.StatRequest) (*sandboxiov1.StatResponse, error) {
	t, err := s.open(req.GetVolume(), req.GetPath())
	if err != nil {
		return nil, err
	}
	defer t.root.Close()
	fi, err := t.tree.Stat(t.root, t.rel)
	if err != nil {
		return nil, err
	}
	return &sandboxiov1.StatResponse{File: t.info(fi)}, nil
}

// SetAttributes sets a file's owner, group or mode on a volume (wspath's
// Tree.SetAttributes), after core.ValidateFileAttributes, the check
// sandboxd made.
func (s *Server) SetAttributes(_ context.Context, req *sandboxiov1.SetAttributesRequest) (*sandboxiov1.SetAttributesResponse, error) {
	if req.GetVolume() == "" {
		return nil, core.Invalidf("set attributes: a volume is required (the workspace's files belong to the sandbox user)")
	}
	a := core.FileAttributes{UID: req.Uid, GID: req.Gid}
	if req.Mode != nil {
		m := fs.FileMode(req.GetMode())
		a.Mode = &m
	}
	if err := core.ValidateFileAttributes(a); err != nil {
		return nil, err
	}
	t, err := s.open(req.GetVolume(), req.GetPath())
	if err != nil {
		return nil, err
	}
	defer t.root.Close()
	fi, err := t.tree.SetAttributes(t.root, t.rel, a)
	if err != nil {
		return nil, err
	}
	s.log.Debug("file attributes set", "volume", req.GetVolume(), "path", t.show())
	return &sandboxiov1.SetAttributesResponse{File: t.info(fi)}, nil
}

// VolumeUsage reports a mounted volume's file system use (statfs).
func (s *Server) VolumeUsage(_ context.Context, req *sandboxiov1.VolumeUsageRequest) (*sandboxiov1.VolumeUsageResponse, error) {
	root, err := s.volume(req.GetVolume())
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := root.Open(".")
	if err != nil {
		return nil, fmt.Errorf("open volume %s: %w", req.GetVolume(), err)
	}
	defer f.Close()
	var st syscall.Statfs_t
	if err := syscall.Fstatfs(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("statfs volume %s: %w", req.GetVolume(), err)
	}
	return &sandboxiov1.VolumeUsageResponse{
		UsedBytes:  int64(st.Blocks-st.Bfree) * st.Bsize,
		TotalBytes: int64(st.Blocks) * st.Bsize,
	}, nil
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
	return &sandboxiov1.RenameResponse{File: protoInfo(wspath.Workspace, fi)}, nil
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
