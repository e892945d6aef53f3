package core

import (
	"context"
	"io"
)

// Volumes is named file systems of the caller's tenant (volume.go), which
// sandboxes mount (Options.Volumes) and callers read and write without a
// sandbox. A reference (ref) is a volume's ID or name.
type Volumes interface {
	// CreateVolume makes an empty volume of sizeBytes (Validating turns 0
	// into the default); a name the tenant already uses is AlreadyExists.
	CreateVolume(ctx context.Context, name string, sizeBytes int64) (Volume, error)

	GetVolume(ctx context.Context, ref string) (Volume, error)

	// ListVolumes lists the volumes the caller may see (an admin: of
	// tenant, or all when tenant is ""), by tenant and name.
	ListVolumes(ctx context.Context, tenant string) ([]Volume, error)

	// DeleteVolume deletes a volume and its files. While sandboxes mount it
	// it is VolumeInUse, unless force: then they keep running without it
	// (their view of it is detached, and gone at their next start).
	DeleteVolume(ctx context.Context, ref string, force bool) error

	// The files of a volume, without a sandbox: paths are relative to its
	// root (CleanVolumePath; Validating hands backends the clean form).
	// What they create belongs to the sandbox user, as if a sandbox had
	// written it.
	VolumeUpload(ctx context.Context, ref, path string, r io.Reader, overwrite bool) (FileInfo, error)

	VolumeDownload(ctx context.Context, ref, path string) (io.ReadCloser, FileInfo, error)
	VolumeStat(ctx context.Context, ref, path string) (FileInfo, error)
	VolumeListFiles(ctx context.Context, ref, path string, depth int) ([]FileInfo, error)
	VolumeMakeDirectory(ctx context.Context, ref, path string, parents bool) (FileInfo, error)
	VolumeRemove(ctx context.Context, ref, path string, recursive bool) error

	// VolumeSetAttributes sets a file's owner, group or permission bits
	// on a volume (FileAttributes; nil fields are left as they are), as
	// chown and chmod would; a symlink's owner is its own, and its mode
	// cannot be set.
	VolumeSetAttributes(ctx context.Context, ref, path string, a FileAttributes) (FileInfo, error)
}
