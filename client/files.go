package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"google.golang.org/grpc"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// chunkSize is the content sent per upload message: well under sandboxd's
// 4 MiB receive limit, large enough that per-message cost is negligible.
const chunkSize = 1 << 20

// Upload writes r's content to path under the sandbox's /workspace
// (relative, or absolute under /workspace), replacing any file there and
// creating missing directories; the file appears under its name only once
// complete. It returns the stored file. ErrInvalidArgument for a bad path
// or a file above sandboxd's upload cap, ErrResourceExhausted when the
// sandbox's disk is full.
func (c *Client) Upload(ctx context.Context, sandboxID, path string, r io.Reader) (*sandboxv1.FileInfo, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // abandons the upload on a read error
	fail := func(err error) (*sandboxv1.FileInfo, error) {
		return nil, fmt.Errorf("uploading %s to sandbox %s: %w", path, sandboxID, err)
	}
	stream, err := c.api.UploadFile(ctx)
	if err != nil {
		return fail(fromGRPC(err))
	}
	hdr := &sandboxv1.UploadFileRequest{Payload: &sandboxv1.UploadFileRequest_Header{Header: &sandboxv1.UploadFileHeader{SandboxId: sandboxID, Path: path}}}
	info, err := sendUpload(stream, hdr, func(b []byte) *sandboxv1.UploadFileRequest {
		return &sandboxv1.UploadFileRequest{Payload: &sandboxv1.UploadFileRequest_Chunk{Chunk: b}}
	}, r)
	if err != nil {
		return fail(err)
	}
	return info, nil
}

// sendUpload sends an upload's header, then r in chunkSize chunks, and
// returns the stored file. Its errors are the reader's as they are, and
// the call's as fromGRPC makes them.
func sendUpload[Req, Resp any, PResp interface {
	*Resp
	GetFile() *sandboxv1.FileInfo
}](stream grpc.ClientStreamingClient[Req, Resp], header *Req, chunk func([]byte) *Req, r io.Reader) (*sandboxv1.FileInfo, error) {
	resp, err := sendStream(stream, header, chunk, r)
	if err != nil {
		return nil, err
	}
	return PResp(resp).GetFile(), nil
}

// sendStream is sendUpload for any upload stream: it returns sandboxd's
// answer as it is.
func sendStream[Req, Resp any](stream grpc.ClientStreamingClient[Req, Resp], header *Req, chunk func([]byte) *Req, r io.Reader) (*Resp, error) {
	err := stream.Send(header)
	buf := make([]byte, chunkSize)
	for err == nil {
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			err = stream.Send(chunk(buf[:n]))
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return nil, rerr
		}
	}
	// A Send error is io.EOF when sandboxd ended the call: its status
	// comes with the response.
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fromGRPC(err)
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return nil, fromGRPC(err)
	}
	return resp, nil
}

// Download writes the content of the regular file at path under the
// sandbox's /workspace to w, and returns the file's description.
// ErrNotFound when there is no such file, ErrInvalidArgument for a
// directory. On an error w may hold part of the content.
func (c *Client) Download(ctx context.Context, sandboxID, path string, w io.Writer) (*sandboxv1.FileInfo, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // abandons the download on a write error
	fail := func(err error) (*sandboxv1.FileInfo, error) {
		return nil, fmt.Errorf("downloading %s from sandbox %s: %w", path, sandboxID, err)
	}
	stream, err := c.api.DownloadFile(ctx, &sandboxv1.DownloadFileRequest{SandboxId: sandboxID, Path: path})
	if err != nil {
		return fail(fromGRPC(err))
	}
	info, err := receiveDownload(stream, w)
	if err != nil {
		return fail(err)
	}
	return info, nil
}

// receiveDownload writes a download's chunks to w and returns the file's
// description, which comes with the first message.
func receiveDownload[Resp any, PResp interface {
	*Resp
	GetFile() *sandboxv1.FileInfo
	GetChunk() []byte
}](stream grpc.ServerStreamingClient[Resp], w io.Writer) (*sandboxv1.FileInfo, error) {
	var info *sandboxv1.FileInfo
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			if info == nil {
				return nil, errors.New("sandboxd sent no file description")
			}
			return info, nil
		}
		if err != nil {
			return nil, fromGRPC(err)
		}
		if info == nil {
			info = PResp(m).GetFile()
		}
		if _, err := w.Write(PResp(m).GetChunk()); err != nil {
			return nil, err
		}
	}
}

// ListFiles lists one directory under the sandbox's /workspace ("" is
// /workspace itself), sorted by path, not recursively unless WithDepth says
// otherwise; for a file it returns just that file. ErrNotFound when the path
// does not exist, ErrResourceExhausted above sandboxd's 10000 entries.
func (c *Client) ListFiles(ctx context.Context, sandboxID, path string, opts ...ListOption) ([]*sandboxv1.FileInfo, error) {
	var o listOptions
	for _, opt := range opts {
		opt(&o)
	}
	r, err := c.api.ListFiles(ctx, &sandboxv1.ListFilesRequest{SandboxId: sandboxID, Path: path, Depth: o.depth})
	if err != nil {
		return nil, fmt.Errorf("listing %q in sandbox %s: %w", path, sandboxID, fromGRPC(err))
	}
	return r.GetFiles(), nil
}

// ListOption is an option of ListFiles.
type ListOption func(*listOptions)

type listOptions struct{ depth int32 }

// WithDepth lists n levels: 0 and 1 the directory's children, 2 their
// children too, and so on up to sandboxd's cap of 10 (ErrInvalidArgument
// beyond). Symbolic links are never descended into.
func WithDepth(n int) ListOption {
	return func(o *listOptions) {
		o.depth = int32(max(min(n, math.MaxInt32), math.MinInt32))
	}
}

// MakeDirectory creates a directory under the sandbox's /workspace. Without
// parents a missing parent is ErrNotFound and an existing path
// ErrAlreadyExists; with parents it behaves as mkdir -p.
func (c *Client) MakeDirectory(ctx context.Context, sandboxID, path string, parents bool) (*sandboxv1.FileInfo, error) {
	r, err := c.api.MakeDirectory(ctx, &sandboxv1.MakeDirectoryRequest{SandboxId: sandboxID, Path: path, Parents: parents})
	if err != nil {
		return nil, fmt.Errorf("making directory %q in sandbox %s: %w", path, sandboxID, fromGRPC(err))
	}
	return r.GetFile(), nil
}

// Remove deletes a file, symbolic link or directory under the sandbox's
// /workspace; a non-empty directory needs recursive (ErrFailedPrecondition
// otherwise). ErrNotFound when it does not exist; /workspace itself is
// ErrInvalidArgument.
func (c *Client) Remove(ctx context.Context, sandboxID, path string, recursive bool) error {
	if _, err := c.api.Remove(ctx, &sandboxv1.RemoveRequest{SandboxId: sandboxID, Path: path, Recursive: recursive}); err != nil {
		return fmt.Errorf("removing %q in sandbox %s: %w", path, sandboxID, fromGRPC(err))
	}
	return nil
}

// Rename moves a file or directory within the sandbox's /workspace and
// returns it at its new path. An existing destination is ErrAlreadyExists
// unless overwrite is set.
func (c *Client) Rename(ctx context.Context, sandboxID, from, to string, overwrite bool) (*sandboxv1.FileInfo, error) {
	r, err := c.api.Rename(ctx, &sandboxv1.RenameRequest{SandboxId: sandboxID, From: from, To: to, Overwrite: overwrite})
	if err != nil {
		return nil, fmt.Errorf("renaming %q to %q in sandbox %s: %w", from, to, sandboxID, fromGRPC(err))
	}
	return r.GetFile(), nil
}

// WatchOp is the kind of a WatchEvent.
type WatchOp string

// The kinds of WatchEvent.
const (
	WatchCreate WatchOp = "create"
	WatchWrite  WatchOp = "write"
	WatchRemove WatchOp = "remove"
	WatchRename WatchOp = "rename"
)

// WatchEvent is one change under a watched directory.
type WatchEvent struct {
	Op WatchOp
	// Path is relative to /workspace.
	Path string
	// Time is when sandboxd saw the change.
	Time time.Time
	// Dropped counts the events sandboxd dropped before this one because
	// the reader was too slow.
	Dropped uint64
}

// Watch is a stream of changes from WatchDirectory.
type Watch struct {
	stream grpc.ServerStreamingClient[sandboxv1.WatchDirectoryResponse]
	cancel context.CancelFunc
	desc   string
}

// WatchDirectory watches a directory under the sandbox's /workspace (with
// recursive, its subdirectories too) and returns once the watch is in
// place: changes made after it returns are reported by Next. Close it when
// done. ErrNotFound for a missing directory or sandbox, ErrResourceExhausted
// past sandboxd's caps on watched directories.
func (c *Client) WatchDirectory(ctx context.Context, sandboxID, path string, recursive bool) (*Watch, error) {
	ctx, cancel := context.WithCancel(ctx)
	w := &Watch{cancel: cancel, desc: fmt.Sprintf("watching %q in sandbox %s", path, sandboxID)}
	stream, err := c.api.WatchDirectory(ctx, &sandboxv1.WatchDirectoryRequest{SandboxId: sandboxID, Path: path, Recursive: recursive})
	if err == nil {
		w.stream = stream
		_, err = stream.Recv() // the watch is in place
	}
	if err != nil {
		cancel()
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("%s: %w", w.desc, fromGRPC(err))
	}
	return w, nil
}

// Next waits for the next change. The stream ends with an error: ErrNotFound
// when the sandbox was deleted, context.Canceled after Close,
// ErrResourceExhausted when a new subdirectory passed sandboxd's caps.
func (w *Watch) Next() (WatchEvent, error) {
	for {
		m, err := w.stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return WatchEvent{}, fmt.Errorf("%s: %w", w.desc, fromGRPC(err))
		}
		ev := m.GetEvent()
		if ev == nil {
			continue
		}
		var op WatchOp
		switch ev.GetType() {
		case sandboxv1.WatchEventType_WATCH_EVENT_TYPE_CREATE:
			op = WatchCreate
		case sandboxv1.WatchEventType_WATCH_EVENT_TYPE_WRITE:
			op = WatchWrite
		case sandboxv1.WatchEventType_WATCH_EVENT_TYPE_REMOVE:
			op = WatchRemove
		case sandboxv1.WatchEventType_WATCH_EVENT_TYPE_RENAME:
			op = WatchRename
		default:
			op = WatchOp(strings.ToLower(strings.TrimPrefix(ev.GetType().String(), "WATCH_EVENT_TYPE_")))
		}
		return WatchEvent{Op: op, Path: ev.GetPath(), Time: ev.GetTime().AsTime(), Dropped: m.GetDropped()}, nil
	}
}

// Close ends the watch.
func (w *Watch) Close() error {
	w.cancel()
	return nil
}
