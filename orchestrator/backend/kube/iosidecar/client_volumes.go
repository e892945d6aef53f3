package iosidecar

import (
	"context"
	"io"

	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/wspath"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	sandboxiov1 "github.com/sandboxd/sandboxd/proto/sandboxio/v1"
)

// VolumeFiles is the files API on one named volume mounted in the
// sidecar's Pod (volumes.go): the workspace's calls, with paths relative
// to the volume's root (core.CleanVolumePath) and descriptions checked by
// that rule. A volume the Pod does not mount is core.ErrFailedPrecondition.
type VolumeFiles struct {
	c  *Client
	id string
}

// Volume returns the files API on volume id (its ID, vol-…).
func (c *Client) Volume(id string) VolumeFiles { return VolumeFiles{c: c, id: id} }

// Upload writes r to path on the volume, creating missing parents; an
// existing file is replaced only with overwrite (core.ErrAlreadyExists
// otherwise). More than maxBytes is core.ErrResourceExhausted (0 leaves
// the sidecar's own cap).
func (v VolumeFiles) Upload(ctx context.Context, path string, r io.Reader, maxBytes int64, overwrite bool) (core.FileInfo, error) {
	return v.c.upload(ctx, wspath.Volume, &sandboxiov1.UploadHeader{Path: path, MaxBytes: maxBytes, Volume: v.id, Exclusive: !overwrite}, r)
}

// Download opens a regular file on the volume, as Client.Download does in
// the workspace.
func (v VolumeFiles) Download(ctx context.Context, path string) (io.ReadCloser, core.FileInfo, error) {
	return v.c.download(ctx, wspath.Volume, &sandboxiov1.DownloadRequest{Path: path, Volume: v.id})
}

// List lists a directory of the volume over depth levels, as
// Client.ListFiles does in the workspace.
func (v VolumeFiles) List(ctx context.Context, path string, depth int) ([]core.FileInfo, error) {
	return v.c.listFiles(ctx, wspath.Volume, v.id, path, depth)
}

// Stat describes a file on the volume (a symbolic link as a link).
func (v VolumeFiles) Stat(ctx context.Context, path string) (core.FileInfo, error) {
	resp, err := v.c.rpc.Stat(ctx, &sandboxiov1.StatRequest{Path: path, Volume: v.id})
	if err != nil {
		return core.FileInfo{}, errorOf(ctx, callFiles, err)
	}
	return checkInfoIn(wspath.Volume, resp.GetFile())
}

// MakeDirectory creates a directory on the volume, as
// Client.MakeDirectory does in the workspace.
func (v VolumeFiles) MakeDirectory(ctx context.Context, path string, parents bool) (core.FileInfo, error) {
	resp, err := v.c.rpc.MakeDirectory(ctx, &sandboxiov1.MakeDirectoryRequest{Path: path, Parents: parents, Volume: v.id})
	if err != nil {
		return core.FileInfo{}, errorOf(ctx, callFiles, err)
	}
	return checkInfoIn(wspath.Volume, resp.GetFile())
}

// Remove deletes path on the volume, as Client.Remove does in the
// workspace.
func (v VolumeFiles) Remove(ctx context.Context, path string, recursive bool) error {
	if _, err := v.c.rpc.Remove(ctx, &sandboxiov1.RemoveRequest{Path: path, Recursive: recursive, Volume: v.id}); err != nil {
		return errorOf(ctx, callFiles, err)
	}
	return nil
}

// SetAttributes sets a file's owner, group or mode on the volume (never
// through a symbolic link).
func (v VolumeFiles) SetAttributes(ctx context.Context, path string, a core.FileAttributes) (core.FileInfo, error) {
	req := &sandboxiov1.SetAttributesRequest{Path: path, Volume: v.id, Uid: a.UID, Gid: a.GID}
	if a.Mode != nil {
		m := uint32(*a.Mode)
		req.Mode = &m
	}
	resp, err := v.c.rpc.SetAttributes(ctx, req)
	if err != nil {
		return core.FileInfo{}, errorOf(ctx, callFiles, err)
	}
	return checkInfoIn(wspath.Volume, resp.GetFile())
}

// Usage returns the bytes the volume's files take and its file system's
// size.
func (v VolumeFiles) Usage(ctx context.Context) (used, total int64, err error) {
	resp, err := v.c.rpc.VolumeUsage(ctx, &sandboxiov1.VolumeUsageRequest{Volume: v.id})
	if err != nil {
		return 0, 0, errorOf(ctx, callFiles, err)
	}
	if resp.GetUsedBytes() < 0 || resp.GetTotalBytes() < 0 {
		return 0, 0, badResponse("volume %s: negative usage (%d of %d bytes)", v.id, resp.GetUsedBytes(), resp.GetTotalBytes())
	}
	return resp.GetUsedBytes(), resp.GetTotalBytes(), nil
}
