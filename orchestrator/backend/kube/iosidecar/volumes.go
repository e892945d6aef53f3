package iosidecar

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"

	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/wspath"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Named volumes in a Pod. sandboxd mounts each volume a Pod uses (its
// claim) in the io sidecar at Config.Volumes/<volume ID>, beside where the
// sandbox container sees it, so that the volume API's files calls reach a
// volume through any Pod that mounts it: a sandbox's, or a Pod made only
// to serve the volume. The calls are the workspace's (files.go) with the
// volume named: paths relative to its root (core.CleanVolumePath), the
// same os.Root confinement, since sandboxes write to volumes too.

// prepareVolumes gives the root of each volume under dir that root still
// owns (one the provisioner has just made) to the sandbox user, as the
// Docker backend's mkfs does (root_owner), and removes the lost+found an
// empty ext4 file system starts with. (A root a caller has given to root
// with SetAttributes looks the same, and is given back to the sandbox user
// by the next Pod that mounts the volume.)
func prepareVolumes(dir string, log *slog.Logger) error {
	if dir == "" {
		return nil
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the volumes directory %s: %w", dir, err)
	}
	for _, e := range ents {
		if !core.IsVolumeID(e.Name()) || !e.IsDir() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		st, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("volume %s: %w", e.Name(), err)
		}
		if sys, ok := st.Sys().(*syscall.Stat_t); !ok || sys.Uid != 0 {
			continue
		}
		// lost+found only while it is empty: a volume's files are the
		// tenant's, and a directory of that name may be theirs.
		_ = os.Remove(filepath.Join(p, "lost+found"))
		if err := chownDir(p); err != nil {
			return fmt.Errorf("volume %s: %w", e.Name(), err)
		}
		log.Info("volume prepared for the sandbox user", "volume", e.Name(), "uid", wspath.UID)
	}
	return nil
}
