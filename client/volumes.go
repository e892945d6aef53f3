package client

import (
	"context"
	"fmt"
	"io"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// Volumes are named, size-capped file systems of the caller's tenant that
// outlive sandboxes: sandboxes mount them at creation (WithVolume), and
// their files can be read and written without any sandbox. Paths on a
// volume are relative to its root ("/a" and "a" are the same file). A ref
// is a volume's ID (vol-…) or its name.

// WithVolume mounts a volume (its ID or name) in the new sandbox at
// mountPath, under /mnt or /data; readOnly makes the sandbox's writes to
// it fail. Repeat it for more volumes (up to 8). Sandbox.Volumes reports
// the mounts, each volume by ID.
func WithVolume(ref, mountPath string, readOnly bool) AcquireOption {
	return func(o *sandboxv1.SandboxOptions) {
		o.Volumes = append(o.Volumes, &sandboxv1.VolumeMount{Volume: ref, MountPath: mountPath, ReadOnly: readOnly})
	}
}

// CreateVolume makes an empty volume of the caller's tenant; sizeBytes 0
// is sandboxd's default (1 GiB). ErrAlreadyExists when the tenant has a
// volume of that name.
func (c *Client) CreateVolume(ctx context.Context, name string, sizeBytes int64) (*sandboxv1.Volume, error) {
	r, err := c.api.CreateVolume(ctx, &sandboxv1.CreateVolumeRequest{Name: name, SizeBytes: sizeBytes})
	if err != nil {
		return nil, fmt.Errorf("creating volume %s: %w", name, fromGRPC(err))
	}
	return r.GetVolume(), nil
}

// GetVolume describes a volume. ErrNotFound when the caller has none by
// that reference.
func (c *Client) GetVolume(ctx context.Context, ref string) (*sandboxv1.Volume, error) {
	r, err := c.api.GetVolume(ctx, &sandboxv1.GetVolumeRequest{Volume: ref})
	if err != nil {
		return nil, fmt.Errorf("getting volume %s: %w", ref, fromGRPC(err))
	}
	return r.GetVolume(), nil
}

// ListVolumes lists the caller's volumes by tenant and name; tenant, for
// an admin, keeps one tenant's ("" for all it may see).
func (c *Client) ListVolumes(ctx context.Context, tenant string) ([]*sandboxv1.Volume, error) {
	r, err := c.api.ListVolumes(ctx, &sandboxv1.ListVolumesRequest{Tenant: tenant})
	if err != nil {
		return nil, fmt.Errorf("listing volumes: %w", fromGRPC(err))
	}
	return r.GetVolumes(), nil
}

// DeleteVolume deletes a volume and its files. While sandboxes mount it
// it is ErrFailedPrecondition, unless force: they then keep running
// without it.
func (c *Client) DeleteVolume(ctx context.Context, ref string, force bool) error {
	if _, err := c.api.DeleteVolume(ctx, &sandboxv1.DeleteVolumeRequest{Volume: ref, Force: force}); err != nil {
		return fmt.Errorf("deleting volume %s: %w", ref, fromGRPC(err))
	}
	return nil
}

// UploadVolumeFile writes r's content to path on a volume, creating
// missing directories; the file appears under its name only once
// complete. An existing file is ErrAlreadyExists unless overwrite is set;
// ErrResourceExhausted when the volume is full.
func (c *Client) UploadVolumeFile(ctx context.Context, ref, path string, r io.Reader, overwrite bool) (*sandboxv1.FileInfo, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // abandons the upload on a read error
	fail := func(err error) (*sandboxv1.FileInfo, error) {
		return nil, fmt.Errorf("uploading %s to volume %s: %w", path, ref, err)
	}
	stream, err := c.api.UploadVolumeFile(ctx)
	if err != nil {
		return fail(fromGRPC(err))
	}
	hdr := &sandboxv1.UploadVolumeFileRequest{Payload: &sandboxv1.UploadVolumeFileRequest_Header{
		Header: &sandboxv1.UploadVolumeFileHeader{Volume: ref, Path: path, Overwrite: overwrite}}}
	info, err := sendUpload(stream, hdr, func(b []byte) *sandboxv1.UploadVolumeFileRequest {
		return &sandboxv1.UploadVolumeFileRequest{Payload: &sandboxv1.UploadVolumeFileRequest_Chunk{Chunk: b}}
	}, r)
	if err != nil {
		return fail(err)
	}
	return info, nil
}

// DownloadVolumeFile writes the content of the regular file at path on a
// volume to w, and returns the file's description. ErrNotFound when there
// is no such file, ErrInvalidArgument for a directory. On an error w may
// hold part of the content.
func (c *Client) DownloadVolumeFile(ctx context.Context, ref, path string, w io.Writer) (*sandboxv1.FileInfo, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // abandons the download on a write error
	fail := func(err error) (*sandboxv1.FileInfo, error) {
		return nil, fmt.Errorf("downloading %s from volume %s: %w", path, ref, err)
	}
	stream, err := c.api.DownloadVolumeFile(ctx, &sandboxv1.DownloadVolumeFileRequest{Volume: ref, Path: path})
	if err != nil {
		return fail(fromGRPC(err))
	}
	info, err := receiveDownload(stream, w)
	if err != nil {
		return fail(err)
	}
	return info, nil
}

// ListVolumeFiles lists a directory on a volume ("" is its root), sorted
// by path, one level unless WithDepth says otherwise; for a file it
// returns just that file.
func (c *Client) ListVolumeFiles(ctx context.Context, ref, path string, opts ...ListOption) ([]*sandboxv1.FileInfo, error) {
	var o listOptions
	for _, opt := range opts {
		opt(&o)
	}
	r, err := c.api.ListVolumeFiles(ctx, &sandboxv1.ListVolumeFilesRequest{Volume: ref, Path: path, Depth: o.depth})
	if err != nil {
		return nil, fmt.Errorf("listing %q on volume %s: %w", path, ref, fromGRPC(err))
	}
	return r.GetFiles(), nil
}

// StatVolumeFile describes one file or directory on a volume ("" is its
// root). ErrNotFound when it does not exist.
func (c *Client) StatVolumeFile(ctx context.Context, ref, path string) (*sandboxv1.FileInfo, error) {
	r, err := c.api.StatVolumeFile(ctx, &sandboxv1.StatVolumeFileRequest{Volume: ref, Path: path})
	if err != nil {
		return nil, fmt.Errorf("stat %q on volume %s: %w", path, ref, fromGRPC(err))
	}
	return r.GetFile(), nil
}

// MakeVolumeDirectory creates a directory on a volume, as MakeDirectory
// does in a sandbox (parents: mkdir -p).
func (c *Client) MakeVolumeDirectory(ctx context.Context, ref, path string, parents bool) (*sandboxv1.FileInfo, error) {
	r, err := c.api.MakeVolumeDirectory(ctx, &sandboxv1.MakeVolumeDirectoryRequest{Volume: ref, Path: path, Parents: parents})
	if err != nil {
		return nil, fmt.Errorf("making directory %q on volume %s: %w", path, ref, fromGRPC(err))
	}
	return r.GetFile(), nil
}

// RemoveVolumeFile deletes a file, symbolic link or directory on a
// volume, as Remove does in a sandbox; a non-empty directory needs
// recursive (ErrFailedPrecondition otherwise).
func (c *Client) RemoveVolumeFile(ctx context.Context, ref, path string, recursive bool) error {
	if _, err := c.api.RemoveVolumeFile(ctx, &sandboxv1.RemoveVolumeFileRequest{Volume: ref, Path: path, Recursive: recursive}); err != nil {
		return fmt.Errorf("removing %q on volume %s: %w", path, ref, fromGRPC(err))
	}
	return nil
}

// SetVolumeFileAttributes sets the owner, group or permission bits of a
// file on a volume (nil: left as it is); mode is chmod's bits (e.g.
// 0o640, with 0o1000 for the sticky bit). It returns the file as it now
// is. ErrInvalidArgument for setuid or setgid bits, or nothing to set.
func (c *Client) SetVolumeFileAttributes(ctx context.Context, ref, path string, uid, gid, mode *uint32) (*sandboxv1.FileInfo, error) {
	r, err := c.api.SetVolumeFileAttributes(ctx, &sandboxv1.SetVolumeFileAttributesRequest{Volume: ref, Path: path, Uid: uid, Gid: gid, Mode: mode})
	if err != nil {
		return nil, fmt.Errorf("setting the attributes of %q on volume %s: %w", path, ref, fromGRPC(err))
	}
	return r.GetFile(), nil
}
