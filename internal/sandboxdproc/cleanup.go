package sandboxdproc

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"syscall"

	"github.com/moby/sys/mountinfo"

	"github.com/sandboxd/sandboxd/orchestrator/labels"
)

// Cleanup removes what a sandboxd with state directory stateDir may have
// left behind after a failed run: its containers (RemoveContainers), then
// the volumes still mounted under stateDir (UnmountUnder), so that the
// directory can be removed and no loop device is left.
func Cleanup(ctx context.Context, stateDir string) error {
	err := RemoveContainers(ctx, stateDir)
	return errors.Join(err, RemoveImages(ctx, stateDir), UnmountUnder(stateDir))
}

// RemoveImages force-removes every image sandboxd made for stateDir: the
// templates it built and their step cache (labelled with it), which
// would otherwise outlive the test and fill the disk run after run.
func RemoveImages(ctx context.Context, stateDir string) error {
	out, err := exec.CommandContext(ctx, "docker", "images", "-q", "--no-trunc", "--filter", "label="+labels.StateDir+"="+stateDir).Output()
	if err != nil {
		return fmt.Errorf("docker images: %w", err)
	}
	ids := slices.Compact(slices.Sorted(slices.Values(strings.Fields(string(out)))))
	if len(ids) == 0 {
		return nil
	}
	if out, err := exec.CommandContext(ctx, "docker", append([]string{"rmi", "-f"}, ids...)...).CombinedOutput(); err != nil {
		return fmt.Errorf("docker rmi: %v: %s", err, out)
	}
	return nil
}

// RemoveContainers force-removes every container sandboxd made for
// stateDir (those labelled with it), running or not.
func RemoveContainers(ctx context.Context, stateDir string) error {
	ids, err := Containers(ctx, stateDir, true)
	if err != nil || len(ids) == 0 {
		return err
	}
	if out, err := exec.CommandContext(ctx, "docker", append([]string{"rm", "-f"}, ids...)...).CombinedOutput(); err != nil {
		return fmt.Errorf("docker rm: %v: %s", err, out)
	}
	return nil
}

// Containers lists the IDs of the containers sandboxd made for stateDir
// (running ones only, unless all).
func Containers(ctx context.Context, stateDir string, all bool) ([]string, error) {
	args := []string{"ps", "-q", "--no-trunc", "--filter", "label=" + labels.StateDir + "=" + stateDir}
	if all {
		args = append(args, "-a")
	}
	out, err := exec.CommandContext(ctx, "docker", args...).Output()
	if err != nil {
		return nil, fmt.Errorf("docker ps: %w", err)
	}
	return strings.Fields(string(out)), nil
}

// UnmountUnder unmounts whatever is mounted below dir, deepest first:
// sandboxd's loop-mounted volumes that a killed sandboxd left (a live or
// gracefully stopped one keeps them on purpose, for its sandboxes).
func UnmountUnder(dir string) error {
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return fmt.Errorf("listing mounts: %w", err)
	}
	slices.SortFunc(mounts, func(a, b *mountinfo.Info) int { return len(b.Mountpoint) - len(a.Mountpoint) })
	var errs []error
	for _, m := range mounts {
		if err := syscall.Unmount(m.Mountpoint, syscall.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m.Mountpoint, err))
		}
	}
	return errors.Join(errs...)
}
