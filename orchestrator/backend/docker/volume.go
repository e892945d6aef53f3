package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/moby/sys/mountinfo"
)

// Disk bounds. A sandbox's /io and /workspace are each a size-limited ext4
// file system in a sparse image file next to its meta.json, loop-mounted on
// the host directory that is bind-mounted into the container:
//
//	<StateDir>/sandboxes/<id>/workspace.img  →  mounted on workspace/
//	<StateDir>/sandboxes/<id>/io.img         →  mounted on io/
//
// Writing past a volume's size fails inside the sandbox with ENOSPC ("No
// space left on device"), and the host never gives a sandbox more than the
// image's size. Why two volumes rather than one holding both directories:
// when sandboxed code fills /workspace, the driver must still have room in
// /io to report the command's outcome (the ENOSPC included); with one volume
// the report itself would fail. /io is writable by sandboxed code too (the
// driver runs as the same user), so it is bounded as well; a sandbox that
// fills its own /io only breaks itself. The io volume keeps a small reserve
// for root, which is sandboxd: appending to the command log still works when
// the sandbox has filled /io.
//
// The images are sparse and formatted lazily (no inode table or journal
// zeroing, which would allocate host blocks for nothing), and mounted with
// discard, so a sandbox costs the host only what it stores, and deleting
// files inside gives the space back. Creating and mounting both volumes takes
// a few tens of milliseconds (BenchmarkVolumeCreate).
//
// The mount points themselves are created with mode 0: should a volume not
// be mounted (after a host reboot, before sandboxd has remounted it), the
// sandbox user cannot write to the bare directory underneath, so nothing
// ever lands on the host's own file system. reconcile remounts volumes at
// start-up and restarts containers that started without them.

// Image file names, next to meta.json.
const (
	ioImage        = "io.img"
	workspaceImage = "workspace.img"
)

// Volume sizes and options.
const (
	// ioRootReservePercent of the io volume only root (sandboxd) can use.
	ioRootReservePercent = "2"
	// mountOptions: no setuid binaries or device nodes from a volume the
	// sandbox controls; noinit_itable because the images are sparse (zeroes
	// already); discard to give deleted space back to the host.
	mountOptions = "loop,nosuid,nodev,noatime,discard,noinit_itable"
)

// volumeTools are the programs volumes need: e2fsprogs and util-linux, part
// of every Debian installation.
var volumeTools = []string{"mkfs.ext4", "mount"}

// checkVolumeSupport fails with a clear message when this host cannot give
// sandboxes disk volumes, so sandboxd refuses to start rather than failing
// every creation.
func checkVolumeSupport() error {
	for _, tool := range volumeTools {
		if _, err := exec.LookPath(tool); err != nil {
			return core.Preconditionf("disk volumes need %s (Debian packages e2fsprogs and mount): %v; install it or start sandboxd with --disk-volumes=false (no disk limits)", tool, err)
		}
	}
	if os.Geteuid() != 0 {
		return core.Preconditionf("disk volumes need root to loop-mount (sandboxd runs as uid %d); run as root or start sandboxd with --disk-volumes=false (no disk limits)", os.Geteuid())
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return core.Preconditionf("disk volumes need loop devices (/dev/loop-control: %v); load the loop module or start sandboxd with --disk-volumes=false (no disk limits)", err)
	}
	return nil
}

// volumeSizes are the sizes of a new sandbox's volumes; zero means a plain
// directory (Config.NoDiskVolumes).
type volumeSizes struct {
	io, workspace int64
	// workspaceFrom, when set, is a volume image (a named snapshot's) the
	// workspace volume is a sparse copy of, instead of a new file system.
	workspaceFrom string
}

// createVolume makes a sparse image of size bytes at img, formats it with
// ext4 (root directory owned by the sandbox user, reservePercent of it for
// root), and mounts it on mountpoint, which must exist.
func createVolume(ctx context.Context, img, mountpoint string, size int64, reservePercent string) error {
	f, err := os.OpenFile(img, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("size volume image %s: %w", img, err)
	}
	err = runTool(ctx, "mkfs.ext4", "-q", "-F",
		"-m", reservePercent,
		"-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard,root_owner="+strconv.Itoa(sandboxUID)+":"+strconv.Itoa(sandboxGID),
		img)
	if err != nil {
		return err
	}
	if err := mountVolume(ctx, img, mountpoint); err != nil {
		return err
	}
	// mkfs makes lost+found, root's, in the root directory; the sandbox
	// would see it in its /workspace and could not use it. e2fsck recreates
	// it should it ever need one.
	if err := os.Remove(filepath.Join(mountpoint, "lost+found")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove lost+found from new volume: %w", err)
	}
	return nil
}

// mountVolume loop-mounts img on mountpoint. The loop device is set to
// detach itself when the file system is unmounted.
func mountVolume(ctx context.Context, img, mountpoint string) error {
	return runTool(ctx, "mount", "-t", "ext4", "-o", mountOptions, img, mountpoint)
}

// runTool runs a volume tool, turning a failure into an error with its output.
func runTool(ctx context.Context, name string, args ...string) error {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

// hasVolume reports whether the sandbox directory dir keeps name (io or
// workspace) in a volume image, rather than as a plain directory.
func hasVolume(dir, name string) bool {
	_, err := os.Lstat(filepath.Join(dir, name+".img"))
	return err == nil
}

// ensureMounted mounts the sandbox's volumes that are not mounted and
// reports whether it had to (the host rebooted, or someone unmounted them).
func ensureMounted(ctx context.Context, dir string) (remounted bool, err error) {
	for _, name := range []string{ioDir, workspaceDir} {
		if !hasVolume(dir, name) {
			continue
		}
		mp := filepath.Join(dir, name)
		mounted, err := mountinfo.Mounted(mp)
		if err != nil {
			return remounted, fmt.Errorf("check mount %s: %w", mp, err)
		}
		if mounted {
			continue
		}
		if err := mountVolume(ctx, filepath.Join(dir, name+".img"), mp); err != nil {
			return remounted, err
		}
		remounted = true
	}
	return remounted, nil
}

// unmountVolumes unmounts whatever is mounted on the sandbox directory's io/
// and workspace/. Their images then can be deleted. A busy mount (a shell
// of the host's operator sitting in it) is detached lazily: it disappears
// from the tree now and is freed when the last user leaves.
func unmountVolumes(dir string) error {
	for _, name := range []string{ioDir, workspaceDir} {
		if err := unmountStack(filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}
