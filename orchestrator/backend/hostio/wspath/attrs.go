package wspath

import (
	"io/fs"
	"os"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Stat describes rel under root; a symbolic link is described as a link,
// never followed.
func (t Tree) Stat(root *os.Root, rel string) (core.FileInfo, error) {
	st, err := root.Lstat(rel)
	if err != nil {
		return core.FileInfo{}, t.FSError("stat", t.Display(rel), err)
	}
	return Info(rel, st), nil
}

// SetAttributes sets rel's owner, group or permission bits (those of a
// are set; the rest are left) through root: the path never resolves out
// of the tree, and a symbolic link is changed itself (its owner), never
// what it points to; a mode for a symbolic link is refused, since it has
// none of its own. Only the volume API sets attributes today (the
// workspace's files belong to the sandbox user).
func (t Tree) SetAttributes(root *os.Root, rel string, a core.FileAttributes) (core.FileInfo, error) {
	show := t.Display(rel)
	st, err := root.Lstat(rel)
	if err != nil {
		return core.FileInfo{}, t.FSError("set attributes of", show, err)
	}
	if a.UID != nil || a.GID != nil {
		uid, gid := -1, -1
		if a.UID != nil {
			uid = int(*a.UID)
		}
		if a.GID != nil {
			gid = int(*a.GID)
		}
		if err := root.Lchown(rel, uid, gid); err != nil {
			return core.FileInfo{}, t.FSError("set the owner of", show, err)
		}
	}
	if a.Mode != nil {
		if st.Mode()&fs.ModeSymlink != 0 {
			return core.FileInfo{}, core.Invalidf("set the mode of %s: it is a symbolic link, which has no mode of its own", show)
		}
		if err := root.Chmod(rel, *a.Mode); err != nil {
			return core.FileInfo{}, t.FSError("set the mode of", show, err)
		}
	}
	if st, err = root.Lstat(rel); err != nil {
		return core.FileInfo{}, t.FSError("set attributes of", show, err)
	}
	return Info(rel, st), nil
}
