// Package wspath is the host half of the files API: the operations on a
// sandbox's /workspace through an os.Root — atomic upload, opening for
// download, listing, file descriptions (core.FileInfo) and the
// classification of file system errors into the domain's error classes —
// shared by the Docker backend (which reaches the workspace on the host)
// and the io sidecar of the Kubernetes backend (which reaches it inside the
// Pod), so that each is written once. Paths here are already clean and
// relative (core.CleanPath, the one path rule, applied by core.Validating
// in sandboxd and by the sidecar on what it receives); the workspace may
// still hold symlinks planted to leave it, which os.Root refuses to follow
// out.
package wspath

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
)

// MaxListEntries bounds one directory listing.
const MaxListEntries = 10000

// UploadTempPrefix starts the temporary name an upload is written under
// before it is renamed into place; listings hide such names.
const UploadTempPrefix = ".sandboxd-upload-"

// UID and GID are the user the sandbox runs as ("1000:1000", set by the
// image). What is created for it in the workspace belongs to it.
const (
	UID = 1000
	GID = 1000
)

// MkdirAllOwned creates dir and its missing parents inside root, each owned
// by the sandbox user. Existing components may be symlinks to directories
// inside the workspace (os.Root resolves them safely); an existing
// component that is not a directory is syscall.ENOTDIR.
func MkdirAllOwned(root *os.Root, dir string) error {
	if dir == "." {
		return nil
	}
	var prefix string
	for _, elem := range strings.Split(dir, "/") {
		prefix = path.Join(prefix, elem)
		err := root.Mkdir(prefix, 0o755)
		if errors.Is(err, fs.ErrExist) {
			st, serr := root.Stat(prefix)
			if serr != nil {
				return serr
			}
			if !st.IsDir() {
				return syscall.ENOTDIR
			}
			continue
		}
		if err != nil {
			return err
		}
		// Lchown: if the sandbox swapped the new directory for a symlink
		// meanwhile, the link is chowned, not what it points to.
		if err := LchownOwned(root, prefix); err != nil {
			return err
		}
	}
	return nil
}

// LchownOwned gives name under root (not what a symlink there points to)
// to the sandbox user. A process that runs as the sandbox user itself
// already creates files with the right owner, so EPERM is fine there.
func LchownOwned(root *os.Root, name string) error {
	err := root.Lchown(name, UID, GID)
	if err != nil && errors.Is(err, fs.ErrPermission) && os.Geteuid() == UID {
		return nil
	}
	return err
}

// ChownFile gives an open file to the sandbox user (by descriptor, so no
// path is involved).
func ChownFile(f *os.File) error {
	err := f.Chown(UID, GID)
	if err != nil && errors.Is(err, fs.ErrPermission) && os.Geteuid() == UID {
		return nil
	}
	return err
}
