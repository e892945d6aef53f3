package driver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

// runBash runs a command with bash in dir (its context's working
// directory), in its own process
// group, streaming its output, and emits its events (not done). The script is
// passed as a file rather than with -c because a single argument is limited
// to 128 KiB by the kernel.
func (d *Driver) runBash(ctx context.Context, dir string, q queued, ev *eventsFile, intr <-chan struct{}) outcome {
	rec := q.rec
	script, err := os.CreateTemp("", "command-*.sh")
	if err != nil {
		return d.bashFailed(ev, fmt.Errorf("write script: %w", err))
	}
	defer os.Remove(script.Name())
	_, werr := script.WriteString(rec.Code)
	if cerr := script.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return d.bashFailed(ev, fmt.Errorf("write script: %w", werr))
	}

	feed := d.stdinFeedOf(rec.CommandID)
	cmd := exec.Command("bash", script.Name())
	cmd.Dir = dir
	// The sandbox's environment where the record is in the log, and the
	// command's own over it.
	cmd.Env = withEnv(d.processEnv(q.env), rec.Env)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	files, err := d.bashIO(cmd, feed)
	if err != nil {
		return d.bashFailed(ev, err)
	}
	if err := cmd.Start(); err != nil {
		files.closeAll()
		return d.bashFailed(ev, err)
	}
	files.started()
	pgid := cmd.Process.Pid
	// Whatever the script left running in its group ends with it.
	defer killGroup(pgid)

	output := make(chan outputItem, 64)
	stop := make(chan struct{})
	defer close(stop)
	defer files.closeAll()
	if feed != nil {
		defer feed.end()
		feed.start(files.in)
	}
	go (&outputReader{stream: ioproto.EventStdout, out: output, stop: stop}).pump(files.outR)
	if files.errR != nil {
		go (&outputReader{stream: ioproto.EventStderr, out: output, stop: stop}).pump(files.errR)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()

	st := newStopper(rec.TimeoutMS)
	defer st.stop()
	eofs, streams := 0, files.streams()
	var drain, idle <-chan time.Time
	var idleTimer *time.Timer
	isPty := feed != nil && feed.pty
	killed := false
	emitItem := func(it outputItem) {
		if it.eof {
			eofs++
		} else {
			d.emitText(ev, it.stream, it.text)
		}
		if idleTimer != nil {
			idleTimer.Reset(ptyDrainIdle)
		}
	}
	for exited != nil || eofs < streams {
		select {
		case <-ctx.Done():
			return outcome{}
		case it := <-output:
			emitItem(it)
		case <-st.timeoutC:
			st.trigger(ioproto.StatusTimeout, d.cfg.Grace, func() { _ = syscall.Kill(-pgid, syscall.SIGINT) })
		case <-intr:
			st.trigger(ioproto.StatusInterrupted, d.cfg.Grace, func() { _ = syscall.Kill(-pgid, syscall.SIGINT) })
		case <-st.graceC:
			killed = true
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		case <-exited:
			exited = nil
			// The script is over; what it left running in its group goes
			// now, which closes the pipes those processes held. Only a
			// process that left the group can keep them open: the bound.
			killGroup(pgid)
			t := time.NewTimer(drainBound)
			defer t.Stop()
			drain = t.C
			if isPty {
				idleTimer = time.NewTimer(ptyDrainIdle)
				defer idleTimer.Stop()
				idle = idleTimer.C
			}
		case <-idle:
			d.log.Debug("bash: terminal silent after the command ended; its output is complete", "command_id", rec.CommandID)
			eofs = streams
		case <-drain:
			d.log.Warn("bash: output pipes still open after the script ended (a process left its group); not waiting further", "command_id", rec.CommandID)
			eofs = streams
		}
	}
	// Output already read is never dropped, whichever case won the select.
	for more := true; more; {
		select {
		case it := <-output:
			emitItem(it)
		default:
			more = false
		}
	}

	var inputNote string
	if feed != nil {
		inputNote = feed.end()
	}
	code := cmd.ProcessState.ExitCode()
	res := outcome{status: ioproto.StatusOK}
	// Every bash command that exited reports its status, 0 included; one
	// killed by a signal (ExitCode -1) has none.
	if code >= 0 {
		res.exitCode = &code
	}
	if code != 0 {
		res.status = ioproto.StatusError
		res.reason = describeExit(cmd.ProcessState)
	}
	switch {
	case killed:
		res.status = ioproto.StatusKilled
		res.reason = fmt.Sprintf("the command did not stop within %s of SIGINT (%s) and was killed", d.cfg.Grace, st.status)
	case st.status == ioproto.StatusTimeout:
		res.status = ioproto.StatusTimeout
		res.reason = fmt.Sprintf("timed out after %s and was interrupted", time.Duration(rec.TimeoutMS)*time.Millisecond)
	case st.status == ioproto.StatusInterrupted:
		res.status = ioproto.StatusInterrupted
		res.reason = "interrupted on request"
	}
	res.reason = joinReason(res.reason, inputNote)
	return res
}

func (d *Driver) bashFailed(ev *eventsFile, err error) outcome {
	d.emit(ev, &ioproto.Event{Type: ioproto.EventError, EName: "BashUnavailable", EValue: err.Error()})
	return outcome{status: ioproto.StatusError, reason: "could not run bash: " + err.Error()}
}

// describeExit explains a non-zero exit of a bash command.
func describeExit(st *os.ProcessState) string {
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("bash was killed by signal %d (%s)", int(ws.Signal()), ws.Signal())
	}
	return fmt.Sprintf("exit status %d", st.ExitCode())
}

// ptyDrainIdle ends the reading of a terminal's output once the command
// has ended and the terminal has been silent this long (within drainBound
// in all). A terminal's master does not always report the end: under
// gVisor it was seen to wait for drainBound each time, where runc's reads
// EIO at once; and nothing of the command's group is left to write to it.
const ptyDrainIdle = 100 * time.Millisecond

// bashFiles are a bash command's standard files as the driver holds them.
type bashFiles struct {
	outR, errR *os.File   // output to read; errR is nil on a terminal
	in         *os.File   // where stdin goes (pipe write end or pty master), nil without stdin
	child      []*os.File // the child's ends, closed once it started
}

// bashIO wires cmd's standard files: pipes for output and, with a feed, a
// pipe for input, or for a pty command one terminal for all three (its
// output read from the master as stdout). Without a feed the command's
// input is /dev/null, so a command reading it sees EOF at once.
func (d *Driver) bashIO(cmd *exec.Cmd, feed *stdinFeed) (*bashFiles, error) {
	b := &bashFiles{}
	if feed != nil && feed.pty {
		master, slave, err := openPty(feed.currentSize())
		if err != nil {
			return nil, err
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
		// A session of its own with the terminal as its controlling one;
		// its ID is its process group's, so the group rules hold.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		b.outR, b.in, b.child = master, master, []*os.File{slave}
		return b, nil
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(outR, outW)
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	b.outR, b.errR, b.child = outR, errR, []*os.File{outW, errW}
	if feed != nil {
		inR, inW, err := os.Pipe()
		if err != nil {
			closeAll(outR, outW, errR, errW)
			return nil, err
		}
		cmd.Stdin = inR
		b.in, b.child = inW, append(b.child, inR)
	}
	return b, nil
}

// started closes the child's ends in the driver.
func (b *bashFiles) started() {
	closeAll(b.child...)
	b.child = nil
}

// streams is how many output streams end with EOF.
func (b *bashFiles) streams() int {
	if b.errR == nil {
		return 1
	}
	return 2
}

func (b *bashFiles) closeAll() {
	closeAll(b.child...)
	closeAll(b.outR, b.errR)
	if b.in != b.outR {
		closeAll(b.in)
	}
}
