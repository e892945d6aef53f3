package docker

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/sandboxd/sandboxd/ioproto"
)

// SnapshotStore keeps hibernated sandboxes' snapshots. The local store
// keeps them on the sandbox's /io volume (the driver writes them there
// from inside the container); a Kubernetes backend would map it to the
// volume it keeps when it deletes the Pod.
type SnapshotStore interface {
	// Size reports the size of the complete snapshot name of the sandbox
	// in dir, and false when there is none (never finished, or deleted).
	Size(dir, name string) (int64, bool)
	// Prune deletes the sandbox's snapshots other than keep ("" = all).
	Prune(dir, keep string) error
}

// LocalSnapshots is the SnapshotStore on the host's disk: files in the
// sandbox's io/hibernate/, which the sandbox itself writes. sandboxd only
// looks at their size and deletes them, never reads their content, and
// does both through an os.Root confined to io/: the sandbox may have made
// io/hibernate, or an entry in it, a symlink to anywhere (a host path).
type LocalSnapshots struct{}

// Size is Lstat of a regular file, confined to io/.
func (LocalSnapshots) Size(dir, name string) (int64, bool) {
	if !ioproto.ValidSnapshotName(name) {
		return 0, false
	}
	root, err := os.OpenRoot(filepath.Join(dir, ioDir))
	if err != nil {
		return 0, false
	}
	defer root.Close()
	st, err := root.Lstat(ioproto.HibernateDir + "/" + name)
	if err != nil || !st.Mode().IsRegular() {
		return 0, false
	}
	return st.Size(), true
}

// Prune removes the entries of io/hibernate/ but keep, confined to io/
// (os.Root.RemoveAll never follows a symlink out of it).
func (LocalSnapshots) Prune(dir, keep string) error {
	root, err := os.OpenRoot(filepath.Join(dir, ioDir))
	if err != nil {
		return err
	}
	defer root.Close()
	if st, err := root.Lstat(ioproto.HibernateDir); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	} else if !st.IsDir() {
		return root.Remove(ioproto.HibernateDir) // a planted symlink or file
	}
	d, err := openDir(root, ioproto.HibernateDir) // swapped for a FIFO since: refused, not waited on
	if err != nil {
		return err
	}
	names, err := d.Readdirnames(10000) // bounded: the sandbox may have filled it
	d.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	var errs []error
	for _, name := range names {
		if name == keep {
			continue
		}
		errs = append(errs, root.RemoveAll(ioproto.HibernateDir+"/"+name))
	}
	return errors.Join(errs...)
}
