package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"

	"github.com/sandboxd/sandboxd/orchestrator"
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
	cmd     *exec.Cmd
	addr    string
	started time.Time // just before the process was started
	logs    *tailBuffer
	exited  chan struct{}
	waitErr error
}

var servingLine = regexp.MustCompile(`msg=serving listen=(\S+)`)

// errFlagUnsupported says sandboxd refused one of the extra flags: it is an
// older build (e.g. one without --warm-pool).
var errFlagUnsupported = errors.New("sandboxd does not support a flag")

// startDaemon runs sandboxd on addr (":0" style addresses pick a free port)
// and waits until it serves.
func startDaemon(ctx context.Context, cfg daemonConfig, addr string) (*daemon, error) {
	args := []string{"--listen", addr, "--state-dir", cfg.stateDir, "--image", cfg.image, "--shutdown-timeout", "5s"}
	if cfg.runtime != "" {
		args = append(args, "--runtime", cfg.runtime)
	}
	args = append(args, cfg.extra...)
	cmd := exec.Command(cfg.binary, args...)
	// The flags decide; a SANDBOXD_* variable in the caller's environment
	// must not change what is measured.
	cmd.Env = withoutPrefix(os.Environ(), "SANDBOXD_")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	d := &daemon{cfg: cfg, cmd: cmd, logs: &tailBuffer{max: 64 << 10}, exited: make(chan struct{})}
	d.started = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cfg.binary, err)
	}
	addrCh := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			d.logs.add(line)
			if m := servingLine.FindStringSubmatch(line); m != nil {
				select {
				case addrCh <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		d.waitErr = cmd.Wait()
		close(d.exited)
	}()
	timer := time.NewTimer(3 * time.Minute)
	defer timer.Stop()
	select {
	case d.addr = <-addrCh:
		return d, nil
	case <-d.exited:
		if strings.Contains(d.logs.String(), "flag provided but not defined") {
			return nil, fmt.Errorf("%w: %s", errFlagUnsupported, strings.TrimSpace(d.logs.String()))
		}
		return nil, fmt.Errorf("sandboxd exited before serving: %v\n%s", d.waitErr, d.logs.String())
	case <-timer.C:
		d.kill()
		return nil, fmt.Errorf("sandboxd did not serve within 3 minutes\n%s", d.logs.String())
	case <-ctx.Done():
		d.kill()
		return nil, ctx.Err()
	}
}

// pid is the sandboxd process's ID.
func (d *daemon) pid() int { return d.cmd.Process.Pid }

// stop shuts sandboxd down gracefully (SIGTERM); its sandboxes keep running.
func (d *daemon) stop() error {
	select {
	case <-d.exited:
		return nil
	default:
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-d.exited:
		if d.waitErr != nil {
			return fmt.Errorf("sandboxd exited with %v\n%s", d.waitErr, d.logs.String())
		}
		return nil
	case <-time.After(time.Minute):
		d.kill()
		return fmt.Errorf("sandboxd did not stop within a minute of SIGTERM\n%s", d.logs.String())
	}
}

// kill ends the process at once.
func (d *daemon) kill() {
	_ = d.cmd.Process.Kill()
	<-d.exited
}

// buildSandboxd compiles cmd/sandboxd into dir and returns the binary's path.
// It needs the Go tool and this module's source, i.e. running from the
// repository, which is what `make bench` and the tests do.
func buildSandboxd(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "sandboxd")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/sandboxd/sandboxd/cmd/sandboxd").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build sandboxd (run from the repository, or pass --sandboxd): %v\n%s", err, out)
	}
	return bin, nil
}

// removeContainers force-removes every container sandboxd made for
// stateDir: the benchmark leaves nothing behind, whatever went wrong.
func removeContainers(stateDir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ids, err := containersOf(ctx, stateDir, true)
	if err != nil || len(ids) == 0 {
		return err
	}
	out, err := exec.CommandContext(ctx, "docker", append([]string{"rm", "-f"}, ids...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("docker rm: %v: %s", err, out)
	}
	return nil
}

// containersOf lists the IDs of the containers sandboxd made for stateDir
// (running ones only, unless all).
func containersOf(ctx context.Context, stateDir string, all bool) ([]string, error) {
	args := []string{"ps", "-q", "--no-trunc", "--filter", "label=" + orchestrator.LabelStateDir + "=" + stateDir}
	if all {
		args = append(args, "-a")
	}
	out, err := exec.CommandContext(ctx, "docker", args...).Output()
	if err != nil {
		return nil, fmt.Errorf("docker ps: %w", err)
	}
	return strings.Fields(string(out)), nil
}

// unmountUnder unmounts whatever is mounted below dir, deepest first:
// sandboxd's loop-mounted volumes of sandboxes a failed run could not delete.
func unmountUnder(dir string) error {
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return err
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

func withoutPrefix(env []string, prefix string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, prefix) {
			out = append(out, kv)
		}
	}
	return out
}

// tailBuffer keeps the last lines of a log, up to max bytes, for error
// messages: a long benchmark must not hold all of sandboxd's log.
type tailBuffer struct {
	mu    sync.Mutex
	max   int
	size  int
	lines []string
}

func (b *tailBuffer) add(line string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lines = append(b.lines, line)
	b.size += len(line) + 1
	for b.size > b.max && len(b.lines) > 1 {
		b.size -= len(b.lines[0]) + 1
		b.lines = b.lines[1:]
	}
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.lines, "\n")
}
