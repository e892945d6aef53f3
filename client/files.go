package client

import (
	"context"
	"errors"
	"fmt"
	"io"

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
	err = stream.Send(&sandboxv1.UploadFileRequest{Payload: &sandboxv1.UploadFileRequest_Header{Header: &sandboxv1.UploadFileHeader{SandboxId: sandboxID, Path: path}}})
	buf := make([]byte, chunkSize)
	for err == nil {
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			err = stream.Send(&sandboxv1.UploadFileRequest{Payload: &sandboxv1.UploadFileRequest_Chunk{Chunk: buf[:n]}})
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return fail(rerr)
		}
	}
	// A Send error is io.EOF when sandboxd ended the call: its status
	// comes with the response.
	if err != nil && !errors.Is(err, io.EOF) {
		return fail(fromGRPC(err))
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return fail(fromGRPC(err))
	}
	return resp.GetFile(), nil
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
	var info *sandboxv1.FileInfo
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			if info == nil {
				return fail(errors.New("sandboxd sent no file description"))
			}
			return info, nil
		}
		if err != nil {
			return fail(fromGRPC(err))
		}
		if info == nil {
			info = m.GetFile()
		}
		if _, err := w.Write(m.GetChunk()); err != nil {
			return fail(err)
		}
	}
}

// ListFiles lists one directory under the sandbox's /workspace ("" is
// /workspace itself), sorted by path, not recursively; for a file it
// returns just that file.
func (c *Client) ListFiles(ctx context.Context, sandboxID, path string) ([]*sandboxv1.FileInfo, error) {
	r, err := c.api.ListFiles(ctx, &sandboxv1.ListFilesRequest{SandboxId: sandboxID, Path: path})
	if err != nil {
		return nil, fmt.Errorf("listing %q in sandbox %s: %w", path, sandboxID, fromGRPC(err))
	}
	return r.GetFiles(), nil
}
