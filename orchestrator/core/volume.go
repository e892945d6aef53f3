package core

import (
	"crypto/rand"
	"encoding/base32"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Volumes: named, size-capped file systems of a tenant that outlive
// sandboxes. A sandbox mounts them at creation (Options.Volumes), several
// sandboxes of the tenant may mount one at once, and their files can be
// read and written without any sandbox (the Manager's Volume* calls).
// Hibernation, forks and snapshots keep a sandbox's mounts by reference:
// the volume itself is never copied.
//
// The rules on names, references, mount paths and sizes are here, said
// once; Validating applies them before a backend sees a request.

// Volume describes a named volume.
type Volume struct {
	ID        string
	Name      string
	Tenant    string
	SizeBytes int64 // its capacity: writes past it fail with ENOSPC
	UsedBytes int64 // the blocks its files take
	CreatedAt time.Time
	// MountedBy are the sandboxes (running or hibernated) that mount it,
	// in ID order.
	MountedBy []string
}

// VolumeMount asks for a volume in a sandbox.
type VolumeMount struct {
	// Volume is the volume's ID or name (of the caller's tenant). A
	// backend records the ID, so a sandbox keeps its volume whatever
	// becomes of the name.
	Volume string
	// Path is where it appears in the sandbox (ValidateMountPath).
	Path     string
	ReadOnly bool
}

// Volume bounds.
const (
	// MaxVolumeMounts bounds the volumes of one sandbox.
	MaxVolumeMounts = 8
	// DefaultVolumeBytes is a volume's size when its creator names none.
	DefaultVolumeBytes = 1 << 30
	// DefaultMaxVolumeBytes caps a volume's size unless configured.
	DefaultMaxVolumeBytes = 10 << 30
	// MinVolumeBytes is the smallest volume (an ext4 file system smaller
	// than this has no room for its own journal).
	MinVolumeBytes = 16 << 20
	// DefaultMaxVolumesPerTenant caps a tenant's volumes unless configured.
	DefaultMaxVolumesPerTenant = 100
)

// mountRoots are the directories under which a sandbox may mount volumes:
// paths no sandbox image uses for its own files, so a mount hides nothing
// the driver, the kernels or a template need.
var mountRoots = []string{"/mnt", "/data"}

// VolumeMountRoots are the directories under which a sandbox may mount
// volumes (a backend that mounts them after a container started gives a
// pool container those directories).
func VolumeMountRoots() []string { return slices.Clone(mountRoots) }

var volumeIDRE = regexp.MustCompile(`^vol-[a-z0-9]{20}$`)

// NewVolumeID returns a new volume ID: "vol-" and 20 random lower-case
// base32 characters.
func NewVolumeID() string {
	var b [13]byte
	rand.Read(b[:])
	return "vol-" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))[:20]
}

// IsVolumeID reports whether ref has the form of a volume ID (else it is a
// name).
func IsVolumeID(ref string) bool { return volumeIDRE.MatchString(ref) }

// ValidateVolumeName checks a new volume's name: 1 to 64 of A-Z a-z 0-9 _
// . -, not of the form of a volume ID (a reference must say which it is).
func ValidateVolumeName(name string) error {
	switch {
	case name == "":
		return Invalidf("volume: a name is required")
	case !snapshotNameRE.MatchString(name) || name == "." || name == "..":
		return Invalidf("volume name %q: want 1 to 64 of A-Z a-z 0-9 _ . -", Truncate(name, 80))
	case IsVolumeID(name):
		return Invalidf("volume name %q: a name may not have the form of a volume ID (vol-…)", name)
	}
	return nil
}

// ValidateVolumeRef checks a reference to a volume: its ID or name.
func ValidateVolumeRef(ref string) error {
	if ref == "" {
		return Invalidf("volume: an ID or a name is required")
	}
	if IsVolumeID(ref) {
		return nil
	}
	if !snapshotNameRE.MatchString(ref) {
		return Invalidf("volume %q: want a volume ID (vol-…) or a name of 1 to 64 of A-Z a-z 0-9 _ . -", Truncate(ref, 80))
	}
	return nil
}

// ValidateMountPath checks where a volume appears in a sandbox: an
// absolute, clean path strictly under /mnt or /data, of printable ASCII
// without spaces, at most 256 bytes.
func ValidateMountPath(p string) error {
	if p == "" {
		return Invalidf("volume mount: a path is required (under %s)", strings.Join(mountRoots, " or "))
	}
	if len(p) > 256 {
		return Invalidf("volume mount path %q: longer than 256 bytes", Truncate(p, 80))
	}
	for _, r := range p {
		if r <= ' ' || r > '~' {
			return Invalidf("volume mount path %q: only printable ASCII without spaces", Truncate(p, 80))
		}
	}
	if path.Clean(p) != p || !path.IsAbs(p) {
		return Invalidf("volume mount path %q: want an absolute, clean path (no trailing slash, . or ..)", p)
	}
	for _, root := range mountRoots {
		if strings.HasPrefix(p, root+"/") {
			return nil
		}
	}
	return Invalidf("volume mount path %q: want a path under %s (e.g. /mnt/data)", p, strings.Join(mountRoots, " or "))
}

// ValidateVolumeMounts checks a sandbox's mounts: at most MaxVolumeMounts,
// each with a valid reference and path, no volume twice and no path at or
// under another's.
func ValidateVolumeMounts(ms []VolumeMount) error {
	if len(ms) > MaxVolumeMounts {
		return Invalidf("volumes: %d mounts, at most %d", len(ms), MaxVolumeMounts)
	}
	for i, m := range ms {
		if err := ValidateVolumeRef(m.Volume); err != nil {
			return err
		}
		if err := ValidateMountPath(m.Path); err != nil {
			return err
		}
		for _, o := range ms[:i] {
			if o.Volume == m.Volume {
				return Invalidf("volumes: %s is mounted twice", m.Volume)
			}
			if o.Path == m.Path || strings.HasPrefix(m.Path, o.Path+"/") || strings.HasPrefix(o.Path, m.Path+"/") {
				return Invalidf("volumes: mount paths %s and %s overlap", o.Path, m.Path)
			}
		}
	}
	return nil
}

// ValidateVolumeSize checks a requested size against the policy, 0 being
// the default; it returns the size to create.
func (p Policy) ValidateVolumeSize(n int64) (int64, error) {
	switch {
	case n == 0:
		return min(DefaultVolumeBytes, p.maxVolumeBytes()), nil
	case n < MinVolumeBytes:
		return 0, Invalidf("volume size %d bytes: at least %d (16 MiB)", n, MinVolumeBytes)
	case n > p.maxVolumeBytes():
		return 0, Invalidf("volume size %d bytes: above this server's maximum of %d", n, p.maxVolumeBytes())
	}
	return n, nil
}

func (p Policy) maxVolumeBytes() int64 {
	if p.MaxVolumeBytes > 0 {
		return p.MaxVolumeBytes
	}
	return DefaultMaxVolumeBytes
}

// VolumeNamed says whether ref, a volume name, names one volume: n is how
// many volumes of that name the caller may see (its own tenant's; an
// admin's, any tenant's). None is VolumeNotFound; several (an admin's
// name more than one tenant uses) are ambiguous, to be named by ID.
func VolumeNamed(ref string, n int) error {
	switch {
	case n == 0:
		return VolumeNotFound(ref)
	case n > 1:
		return Invalidf("volume name %q is used by %d tenants; name it by its ID", Truncate(ref, 80), n)
	}
	return nil
}

// VolumeNotFound is the error for a volume the caller cannot see.
func VolumeNotFound(ref string) error {
	return Errorf(ErrNotFound, "volume %s not found", Truncate(ref, 80))
}

// VolumeInUse is the error for deleting a mounted volume without force.
func VolumeInUse(ref string, by []string) error {
	shown := by
	if len(shown) > 5 {
		shown = shown[:5]
	}
	more := ""
	if len(by) > len(shown) {
		more = fmt.Sprintf(" and %d more", len(by)-len(shown))
	}
	return Preconditionf("volume %s is mounted by sandbox %s%s: delete them first, or delete with force (they keep running without it)",
		Truncate(ref, 80), strings.Join(shown, ", "), more)
}

// FileAttributes are what VolumeSetAttributes changes; nil: unchanged.
type FileAttributes struct {
	UID, GID *uint32
	Mode     *fs.FileMode // permission bits and the sticky bit only
}

// MaxFileOwner bounds a uid or gid a caller may give a file.
const MaxFileOwner = 65535

// ValidateFileAttributes checks what a caller asks to set on a file: at
// least one attribute, owners up to MaxFileOwner, a mode of permission
// bits and the sticky bit (setuid and setgid are refused: volumes are
// mounted nosuid, so they would only mislead).
func ValidateFileAttributes(a FileAttributes) error {
	switch {
	case a.UID == nil && a.GID == nil && a.Mode == nil:
		return Invalidf("set attributes: give a uid, a gid or a mode")
	case a.UID != nil && *a.UID > MaxFileOwner:
		return Invalidf("uid %d: at most %d", *a.UID, MaxFileOwner)
	case a.GID != nil && *a.GID > MaxFileOwner:
		return Invalidf("gid %d: at most %d", *a.GID, MaxFileOwner)
	case a.Mode != nil && *a.Mode&^(fs.ModePerm|fs.ModeSticky) != 0:
		return Invalidf("mode %v: only permission bits and the sticky bit (no setuid, setgid or file type)", *a.Mode)
	}
	return nil
}

// ChmodMode turns chmod's bits (0o7777: permissions, then sticky, setgid
// and setuid) into an fs.FileMode, the form FileAttributes.Mode takes; the
// doors receive a mode as chmod's bits. ValidateFileAttributes judges the
// result (setuid and setgid are refused there).
func ChmodMode(bits uint32) fs.FileMode {
	m := fs.FileMode(bits & 0o777)
	if bits&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if bits&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if bits&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}
