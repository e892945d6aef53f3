package core

import (
	"context"
	"io"
)

// validatingVolumes is Validating's wrapper of a Volumes port.
type validatingVolumes struct {
	*validator
	m Volumes
}

// The volume calls' request rules (volume.go): references, names, sizes,
// paths, depth; uploads cut off past Policy.MaxUploadBytes and, as every
// transfer, counted against the caller's streams (keyed by the volume
// reference, as a sandbox's are by its ID).

func (v validatingVolumes) CreateVolume(ctx context.Context, name string, size int64) (Volume, error) {
	if err := ValidateVolumeName(name); err != nil {
		return Volume{}, err
	}
	size, err := v.p.ValidateVolumeSize(size)
	if err != nil {
		return Volume{}, err
	}
	return v.m.CreateVolume(ctx, name, size)
}

func (v validatingVolumes) GetVolume(ctx context.Context, ref string) (Volume, error) {
	if err := ValidateVolumeRef(ref); err != nil {
		return Volume{}, err
	}
	return v.m.GetVolume(ctx, ref)
}

func (v validatingVolumes) ListVolumes(ctx context.Context, tenant string) ([]Volume, error) {
	if tenant != "" {
		if err := ValidateTenant(tenant); err != nil {
			return nil, err
		}
		if c := CallerOf(ctx); !c.Admin && tenant != c.Tenant {
			return nil, Invalidf("only an admin may list another tenant's volumes")
		}
	}
	return v.m.ListVolumes(ctx, tenant)
}

func (v validatingVolumes) DeleteVolume(ctx context.Context, ref string, force bool) error {
	if err := ValidateVolumeRef(ref); err != nil {
		return err
	}
	return v.m.DeleteVolume(ctx, ref, force)
}

// volumePath checks a volume reference and a path on it.
func volumePath(ref, p string) (string, error) {
	if err := ValidateVolumeRef(ref); err != nil {
		return "", err
	}
	return CleanVolumePath(p)
}

func (v validatingVolumes) VolumeUpload(ctx context.Context, ref, p string, r io.Reader, overwrite bool) (FileInfo, error) {
	rel, err := volumePath(ref, p)
	if err != nil {
		return FileInfo{}, err
	}
	if rel == "." {
		return FileInfo{}, Invalidf("upload path is empty: name a file on the volume")
	}
	release, err := v.stream(ctx, ref)
	if err != nil {
		return FileInfo{}, err
	}
	defer release()
	return v.m.VolumeUpload(ctx, ref, rel, &uploadLimit{r: r, max: v.p.MaxUploadBytes, left: v.p.MaxUploadBytes, path: rel, volume: true}, overwrite)
}

func (v validatingVolumes) VolumeDownload(ctx context.Context, ref, p string) (io.ReadCloser, FileInfo, error) {
	rel, err := volumePath(ref, p)
	if err != nil {
		return nil, FileInfo{}, err
	}
	release, err := v.stream(ctx, ref)
	if err != nil {
		return nil, FileInfo{}, err
	}
	rc, fi, err := v.m.VolumeDownload(ctx, ref, rel)
	if err != nil {
		release()
		return nil, FileInfo{}, err
	}
	return &releasingReader{ReadCloser: rc, release: release}, fi, nil
}

func (v validatingVolumes) VolumeStat(ctx context.Context, ref, p string) (FileInfo, error) {
	rel, err := volumePath(ref, p)
	if err != nil {
		return FileInfo{}, err
	}
	return v.m.VolumeStat(ctx, ref, rel)
}

func (v validatingVolumes) VolumeListFiles(ctx context.Context, ref, p string, depth int) ([]FileInfo, error) {
	rel, err := volumePath(ref, p)
	if err != nil {
		return nil, err
	}
	if depth < 1 || depth > MaxListDepth {
		return nil, Invalidf("list depth %d is out of range: give 1 to %d", depth, MaxListDepth)
	}
	return v.m.VolumeListFiles(ctx, ref, rel, depth)
}

func (v validatingVolumes) VolumeMakeDirectory(ctx context.Context, ref, p string, parents bool) (FileInfo, error) {
	rel, err := volumePath(ref, p)
	if err != nil {
		return FileInfo{}, err
	}
	return v.m.VolumeMakeDirectory(ctx, ref, rel, parents)
}

func (v validatingVolumes) VolumeSetAttributes(ctx context.Context, ref, p string, a FileAttributes) (FileInfo, error) {
	rel, err := volumePath(ref, p)
	if err != nil {
		return FileInfo{}, err
	}
	if err := ValidateFileAttributes(a); err != nil {
		return FileInfo{}, err
	}
	return v.m.VolumeSetAttributes(ctx, ref, rel, a)
}

func (v validatingVolumes) VolumeRemove(ctx context.Context, ref, p string, recursive bool) error {
	rel, err := volumePath(ref, p)
	if err != nil {
		return err
	}
	if rel == "." {
		return Invalidf("remove /: the volume's root cannot be removed; remove what is in it, or delete the volume")
	}
	return v.m.VolumeRemove(ctx, ref, rel, recursive)
}
