package docker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/wswatch"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// WatchDirectory's caps (calls in progress and directories watched, per
// sandbox, per tenant and on the server, and directories per call) are the
// policy's: core.Policy.WatchCaps, counted in Manager.watchCalls and
// Manager.watchDirs under the sandbox's tenant. What a call and a
// directory cost, and why the defaults are what they are: core.Policy.

// warnHostWatchLimits logs a warning for each of the host's limits that
// is below what the caps on watches allow, so that the server's caps do
// not protect the host: watches then fail at the host's limit (with
// HostWatchLimit's error) instead of the caps', and sandboxd's other
// work, which needs descriptors and inotify too, may fail with them. Half
// of each limit is left to the rest of sandboxd and root's processes.
func warnHostWatchLimits(p core.Policy, log *slog.Logger) {
	sysctl := func(name string) int {
		b, err := os.ReadFile("/proc/sys/fs/inotify/" + name)
		if err != nil {
			return 0
		}
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return n
	}
	if n := sysctl("max_user_instances"); n > 0 && p.MaxWatches > n/2 {
		log.Warn("--max-watches allows more watches than half of the host's inotify instances: raise fs.inotify.max_user_instances or lower --max-watches",
			"max_watches", p.MaxWatches, "max_user_instances", n)
	}
	if n := sysctl("max_user_watches"); n > 0 && p.MaxWatchDirs > n/2 {
		log.Warn("--max-watch-dirs allows more watched directories than half of the host's inotify watches: raise fs.inotify.max_user_watches or lower --max-watch-dirs",
			"max_watch_dirs", p.MaxWatchDirs, "max_user_watches", n)
	}
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && uint64(p.MaxWatchDirs+2*p.MaxWatches) > rl.Cur/2 {
		log.Warn("--max-watch-dirs allows watches to hold more than half of sandboxd's open-file limit: raise it (LimitNOFILE, ulimit -n) or lower --max-watch-dirs",
			"max_watch_dirs", p.MaxWatchDirs, "max_watches", p.MaxWatches, "nofile", rl.Cur)
	}
}

// WatchDirectory reports changes under a directory of the sandbox's
// workspace to fn until ctx ends (returning its error), the sandbox is
// deleted (ErrNotFound) or fn fails (returning its error): the watch is
// wswatch's, run here on the host over the workspace's os.Root. Caps
// (ErrResourceExhausted naming the cap): core.Policy.WatchCaps, on the
// calls in progress and the directories watched, per sandbox, per tenant
// (the sandbox's) and on the server, and MaxWatchDirsPerCall directories
// per call, checked also when a new subdirectory would pass them.
func (m *Manager) WatchDirectory(ctx context.Context, sandboxID, rel string, recursive bool, fn func(core.WatchUpdate) error) error {
	sb, err := m.use(ctx, sandboxID)
	if err != nil {
		return err
	}
	show := core.DisplayPath(rel)
	callCaps, dirCaps := m.cfg.WatchCaps()
	tenant := sb.tenant
	if scope, ok := m.watchCalls.Take(callCaps, sb.id, tenant, 1); !ok {
		return fmt.Errorf("watch %s: %w", show, core.WatchesCapReached(scope, capHolder(scope, sb.id, tenant), callCaps.Of(scope)))
	}
	defer m.watchCalls.Release(sb.id, tenant, 1)
	root, err := openWorkspace(sb)
	if err != nil {
		return err
	}
	defer root.Close()
	// The sandbox's deletion and the server's shutdown end the watch with
	// their reasons.
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-wctx.Done():
		case <-sb.goneCh:
			cancel(core.SandboxNotFound(sb.id))
		case <-m.closing:
			cancel(core.Unavailablef("the server is shutting down"))
		}
	}()
	err = wswatch.Watch(wctx, root, rel, wswatch.Options{
		Recursive: recursive,
		MaxDirs:   m.cfg.MaxWatchDirsPerCall,
		TakeDir: func() error {
			if scope, ok := m.watchDirs.Take(dirCaps, sb.id, tenant, 1); !ok {
				return core.WatchDirsCapReached(scope, capHolder(scope, sb.id, tenant), dirCaps.Of(scope))
			}
			return nil
		},
		ReleaseDir: func() { m.watchDirs.Release(sb.id, tenant, 1) },
		Log:        m.log.With("sandbox_id", sb.id),
	}, fn)
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// capHolder names who holds the cap at scope: the sandbox, its tenant, or
// nobody (the server's).
func capHolder(scope core.Scope, sandboxID, tenant string) string {
	switch scope {
	case core.ScopeSandbox:
		return sandboxID
	case core.ScopeTenant:
		return tenant
	}
	return ""
}
