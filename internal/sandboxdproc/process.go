package sandboxdproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"syscall"
	"time"
)

// ErrExitedBeforeServing says sandboxd ended before it logged that it
// serves, e.g. because it refused a flag; the error carries its log.
var ErrExitedBeforeServing = errors.New("sandboxd exited before serving")

// servingLine is what sandboxd logs once its gRPC listener is up, with the
// address it listens on (the port is known only then when it asked for 0).
var servingLine = regexp.MustCompile(`msg=serving listen=(\S+)`)

// Config says how to run sandboxd.
type Config struct {
	// Binary is the sandboxd executable.
	Binary string
	// Args are its flags.
	Args []string
	// Env is its whole environment; nil inherits the caller's.
	Env []string
	// LogBytes bounds how much of its log the Process keeps (the last
	// lines); 0 means 1 MiB.
	LogBytes int
	// ServeTimeout bounds the wait for it to serve; 0 means 3 minutes,
	// ample for a first start on a loaded machine.
	ServeTimeout time.Duration
}

// Process is a running (or ended) sandboxd.
type Process struct {
	// Addr is the address it serves gRPC on, from its log.
	Addr string
	// Started is when the process was started (just before).
	Started time.Time

	cmd     *exec.Cmd
	log     *Log
	exited  chan struct{}
	waitErr error // set before exited is closed
}

// Start runs sandboxd and waits until it logs that it serves. On error no
// process is left running: it exited, or it was killed because it did not
// serve within cfg.ServeTimeout or ctx ended first.
func Start(ctx context.Context, cfg Config) (*Process, error) {
	logBytes, serveTimeout := cfg.LogBytes, cfg.ServeTimeout
	if logBytes <= 0 {
		logBytes = 1 << 20
	}
	if serveTimeout <= 0 {
		serveTimeout = 3 * time.Minute
	}
	cmd := exec.Command(cfg.Binary, cfg.Args...)
	cmd.Env = cfg.Env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	p := &Process{cmd: cmd, log: &Log{max: logBytes}, exited: make(chan struct{}), Started: time.Now()}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cfg.Binary, err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			line := sc.Text()
			p.log.add(line)
			if m := servingLine.FindStringSubmatch(line); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		// A line beyond the scanner's limit ends the scan; keep reading so
		// that sandboxd never blocks writing its log.
		_, _ = io.Copy(io.Discard, stderr)
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	timer := time.NewTimer(serveTimeout)
	defer timer.Stop()
	select {
	case p.Addr = <-addr:
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("%w: %v\n%s", ErrExitedBeforeServing, p.waitErr, p.log)
	case <-timer.C:
		p.Kill()
		return nil, fmt.Errorf("sandboxd did not serve within %v\n%s", serveTimeout, p.log)
	case <-ctx.Done():
		p.Kill()
		return nil, ctx.Err()
	}
}

// Pid is the process's ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Cmd is the started command, for sending signals; the Process waits for
// it, so callers must not.
func (p *Process) Cmd() *exec.Cmd { return p.cmd }

// Log is the tail of what sandboxd logged so far.
func (p *Process) Log() *Log { return p.log }

// Exited is closed once the process has ended and been waited for.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Stop shuts sandboxd down gracefully (SIGTERM; its sandboxes keep
// running) and waits up to grace for it to exit, then kills it. The error
// says if it did not exit in time or exited with a failure, with its log.
func (p *Process) Stop(grace time.Duration) error {
	select {
	case <-p.exited:
	default:
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return fmt.Errorf("SIGTERM: %w", err)
		}
		timer := time.NewTimer(grace)
		defer timer.Stop()
		select {
		case <-p.exited:
		case <-timer.C:
			p.Kill()
			return fmt.Errorf("sandboxd did not exit within %v of SIGTERM\n%s", grace, p.log)
		}
	}
	if p.waitErr != nil {
		return fmt.Errorf("sandboxd exited with %v\n%s", p.waitErr, p.log)
	}
	return nil
}

// Kill ends the process at once (SIGKILL, nothing graceful) and waits for
// it; it does nothing if it already ended.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}
