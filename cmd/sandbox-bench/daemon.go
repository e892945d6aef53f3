package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/sandboxdproc"
)

// daemonConfig says how to run a sandboxd the benchmark starts itself.
type daemonConfig struct {
	binary   string // sandboxd executable
	stateDir string
	image    string
	runtime  string
	extra    []string // more flags, e.g. --warm-pool
}

// daemon is one sandboxd process.
type daemon struct {
	cfg     daemonConfig
	proc    *sandboxdproc.Process
	addr    string
	started time.Time // just before the process was started
}

// errFlagUnsupported says sandboxd refused one of the extra flags: it is an
// older build (e.g. one without --warm-pool).
var errFlagUnsupported = errors.New("sandboxd does not support a flag")

// startDaemon runs sandboxd on addr (":0" style addresses pick a free port)
// and waits until it serves.
func startDaemon(ctx context.Context, cfg daemonConfig, addr string) (*daemon, error) {
	args := []string{"--listen", addr, "--state-dir", cfg.stateDir, "--image", cfg.image, "--shutdown-timeout", "5s", "--warm-pool", "0"}
	if cfg.runtime != "" {
		args = append(args, "--runtime", cfg.runtime)
	}
	args = append(args, cfg.extra...)
	p, err := sandboxdproc.Start(ctx, sandboxdproc.Config{
		Binary: cfg.binary,
		Args:   args,
		// The flags decide; a SANDBOXD_* variable in the caller's
		// environment must not change what is measured.
		Env: withoutPrefix(os.Environ(), "SANDBOXD_"),
		// A long benchmark must not hold all of sandboxd's log.
		LogBytes: 64 << 10,
	})
	if errors.Is(err, sandboxdproc.ErrExitedBeforeServing) && strings.Contains(err.Error(), "flag provided but not defined") {
		return nil, fmt.Errorf("%w: %w", errFlagUnsupported, err)
	}
	if err != nil {
		return nil, err
	}
	return &daemon{cfg: cfg, proc: p, addr: p.Addr, started: p.Started}, nil
}

// pid is the sandboxd process's ID.
func (d *daemon) pid() int { return d.proc.Pid() }

// stop shuts sandboxd down gracefully (SIGTERM); its sandboxes keep running.
func (d *daemon) stop() error { return d.proc.Stop(time.Minute) }

// kill ends the process at once.
func (d *daemon) kill() { d.proc.Kill() }

// buildSandboxd compiles cmd/sandboxd into dir and returns the binary's path.
// It needs the Go tool and this module's source, i.e. running from the
// repository, which is what `make bench` and the tests do.
func buildSandboxd(ctx context.Context, dir string) (string, error) {
	bin, err := sandboxdproc.Build(ctx, dir, sandboxdproc.Package)
	if err != nil {
		return "", fmt.Errorf("%w (run from the repository, or pass --sandboxd)", err)
	}
	return bin, nil
}

// removeContainers force-removes every container sandboxd made for
// stateDir: the benchmark leaves nothing behind, whatever went wrong.
func removeContainers(stateDir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return sandboxdproc.RemoveContainers(ctx, stateDir)
}

// removeImages force-removes the images sandboxd built for stateDir.
func removeImages(stateDir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return sandboxdproc.RemoveImages(ctx, stateDir)
}

// containersOf lists the IDs of the containers sandboxd made for stateDir
// (running ones only, unless all).
func containersOf(ctx context.Context, stateDir string, all bool) ([]string, error) {
	return sandboxdproc.Containers(ctx, stateDir, all)
}

// unmountUnder unmounts whatever is mounted below dir, deepest first:
// sandboxd's loop-mounted volumes of sandboxes a failed run could not delete.
func unmountUnder(dir string) error { return sandboxdproc.UnmountUnder(dir) }

func withoutPrefix(env []string, prefix string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, prefix) {
			out = append(out, kv)
		}
	}
	return out
}
