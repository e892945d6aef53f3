package docker

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// A sandbox's image may be a template's, and a template is its tenant's
// work: whatever sandboxd reads from an image is hostile input. It is
// read through the engine's archive API from the sandbox's container once
// created and before it starts (so nothing of the image runs, and nothing
// changes the files between the look and the read), never through a
// process running the image nor by opening files of its root file system
// on the host. The engine archives the path with its lstat (a FIFO, a
// device or a socket is archived as a header, never opened) and a
// symbolic link's target resolved within the container's root file
// system, whose archive is asked for in turn; sandboxd reads the file
// only once the stat says it is a regular file of a bounded size, and
// the tar stream bounded too, and the whole is bounded in time by the request's
// context and imageReadTimeout. (It was opened through the holder's
// /proc/PID/root, and a template that made its CA bundle a FIFO blocked
// a sandboxd thread per networked acquire, for good.)

// imageReadTimeout bounds one read of a file of an image, whatever the
// caller's context allows.
const imageReadTimeout = 30 * time.Second

// errNoImageFile is readImageFile's answer for a path the image does not
// have (a dangling link included).
var errNoImageFile = errors.New("the image has no such file")

// readImageFile reads the regular file at path in the root file system
// of container id (created, not started), at most max bytes. Anything but
// a regular file, a link to anything else, or a file larger than max is
// refused with FAILED_PRECONDITION naming the path; a missing file is
// errNoImageFile; the engine's failures are classified (dockerError).
func readImageFile(ctx context.Context, d DockerAPI, id, path string, max int64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, imageReadTimeout)
	defer cancel()
	fail := func(op string, err error) error {
		if isDockerNotFound(err) {
			return errNoImageFile
		}
		return dockerError(op+" "+path+" in the sandbox's image", err)
	}
	// The engine sends the path's lstat with its archive, a link's
	// target resolved within the root: a FIFO, a device or a socket is
	// archived as a header, never opened.
	rc, st, err := d.CopyFromContainer(ctx, id, path)
	if err != nil {
		return nil, fail("read", err)
	}
	if st.Mode&fs.ModeSymlink != 0 {
		rc.Close()
		if st.LinkTarget == "" || st.LinkTarget[0] != '/' {
			return nil, core.Preconditionf("the sandbox's image has %s as a symbolic link the engine could not resolve; sandboxd reads only a regular file there", path)
		}
		target := st.LinkTarget
		if rc, st, err = d.CopyFromContainer(ctx, id, target); err != nil {
			return nil, fail("read", err)
		}
		if st.Mode&fs.ModeSymlink != 0 {
			rc.Close()
			return nil, core.Preconditionf("the sandbox's image has %s as a symbolic link to a link the engine could not resolve; sandboxd reads only a regular file there", path)
		}
		path = target
	}
	defer rc.Close()
	if !st.Mode.IsRegular() {
		return nil, core.Preconditionf("the sandbox's image has %s as a %s, not a regular file; sandboxd reads only a regular file there", path, fileKind(st.Mode))
	}
	if st.Size > max {
		return nil, core.Preconditionf("the sandbox's image has %s of %d bytes; sandboxd reads at most %d", path, st.Size, max)
	}
	// One entry, the file; the tar framing adds at most a few blocks.
	tr := tar.NewReader(io.LimitReader(rc, max+64<<10))
	hdr, err := tr.Next()
	if err != nil {
		return nil, fail("read", err)
	}
	if hdr.Typeflag != tar.TypeReg {
		return nil, core.Preconditionf("the sandbox's image has %s as a %s, not a regular file; sandboxd reads only a regular file there", path, fileKind(hdr.FileInfo().Mode()))
	}
	if hdr.Size > max {
		return nil, core.Preconditionf("the sandbox's image has %s of %d bytes; sandboxd reads at most %d", path, hdr.Size, max)
	}
	b, err := readBounded(tr, max, path)
	if err != nil {
		return nil, fail("read", err)
	}
	return b, nil
}

// fileKind names the type of a file of mode m for a message.
func fileKind(m os.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	}
	return "special file (" + m.Type().String() + ")"
}
