package docker

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// Mounting a volume into a running container (shape_volumes.go): the
// kernel's side, behind mountKernel so that the fake-engine tests run
// without root. The new mount API does it without a helper process: the
// volume's directory is cloned as a detached mount in sandboxd's own
// namespace (open_tree), made read-only there when asked (mount_setattr),
// and attached at its path in the container's namespace (move_mount) by a
// thread that entered that namespace alone (unshare of its file-system
// attributes, then setns) and is never given back to the scheduler: the
// goroutine ends locked, so the runtime ends the thread, and no other
// goroutine ever runs in the container's namespace. The path is made
// there, resolved in the container's root: a symlink in the image cannot
// lead it to the host's file system.

// hostMount is a volume's directory on the host (src) to be mounted at dst
// in a container.
type hostMount struct {
	src, dst string
	ro       bool
}

// mountKernel mounts into running containers.
type mountKernel interface {
	// inject mounts each of ms in the mount namespace of process pid, in
	// order; the first failure stops it (mounts already made stay, and go
	// with the container).
	inject(pid int, ms []hostMount) error
	// missing lists the paths of dsts that are not mount points in pid's
	// mount namespace.
	missing(pid int, dsts []string) ([]string, error)
}

// linuxMounts is the real mountKernel.
type linuxMounts struct{}

var _ mountKernel = linuxMounts{}

// inject: see mountKernel.
func (linuxMounts) inject(pid int, ms []hostMount) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: see above
		errc <- injectLocked(pid, ms)
	}()
	return <-errc
}

// injectLocked is inject on a locked thread that may change namespace.
func injectLocked(pid int, ms []hostMount) error {
	trees := make([]int, 0, len(ms))
	defer func() {
		for _, fd := range trees {
			unix.Close(fd)
		}
	}()
	for _, m := range ms {
		fd, err := unix.OpenTree(unix.AT_FDCWD, m.src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			return fmt.Errorf("clone the mount of %s: %w", m.src, err)
		}
		trees = append(trees, fd)
		attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
		if m.ro {
			attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
		}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
			return fmt.Errorf("set the attributes of the mount of %s: %w", m.src, err)
		}
	}
	ns, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("the mount namespace of process %d: %w", pid, err)
	}
	defer unix.Close(ns)
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare the thread's file-system attributes: %w", err)
	}
	if err := unix.Setns(ns, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("enter the mount namespace of process %d: %w", pid, err)
	}
	for i, m := range ms {
		if err := os.MkdirAll(m.dst, 0o755); err != nil {
			return fmt.Errorf("make the mount point %s: %w", m.dst, err)
		}
		if err := unix.MoveMount(trees[i], "", unix.AT_FDCWD, m.dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("mount %s at %s: %w", m.src, m.dst, err)
		}
	}
	return nil
}

// maxMountinfo bounds the read of a container's mount table: a sandbox
// cannot mount (no CAP_SYS_ADMIN), so its table is the runtime's few dozen
// lines, but the read is bounded all the same.
const maxMountinfo = 1 << 20

// missing: see mountKernel. It reads the mount points of pid's namespace
// from /proc/<pid>/mountinfo, at most maxMountinfo bytes.
func (linuxMounts) missing(pid int, dsts []string) ([]string, error) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "mountinfo"))
	if err != nil {
		return nil, fmt.Errorf("the mounts of process %d: %w", pid, err)
	}
	defer f.Close()
	b, err := readBounded(f, maxMountinfo, "mount table")
	if err != nil {
		return nil, fmt.Errorf("the mounts of process %d: %w", pid, err)
	}
	ms, err := mountinfo.GetMountsFromReader(bytes.NewReader(b), nil)
	if err != nil {
		return nil, fmt.Errorf("the mounts of process %d: %w", pid, err)
	}
	have := make(map[string]bool, len(ms))
	for _, m := range ms {
		have[m.Mountpoint] = true
	}
	var out []string
	for _, d := range dsts {
		if !have[d] {
			out = append(out, d)
		}
	}
	return out, nil
}

// errNoProcess is a container without a process to mount into.
var errNoProcess = errors.New("the container has no process")
