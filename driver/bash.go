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

// runBash runs a command with bash in dir (its context's working directory), in its own process
// group, streaming its output, and emits its events (not done). The script is
// passed as a file rather than with -c because a single argument is limited
// to 128 KiB by the kernel.
func (d *Driver) runBash(ctx context.Context, dir string, rec ioproto.Record, ev *eventsFile, intr <-chan struct{}) outcome {
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

	outR, outW, err := os.Pipe()
	if err != nil {
		return d.bashFailed(ev, err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(outR, outW)
		return d.bashFailed(ev, err)
	}
	cmd := exec.Command("bash", script.Name())
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		closeAll(outR, outW, errR, errW)
		return d.bashFailed(ev, err)
	}
	closeAll(outW, errW)
	pgid := cmd.Process.Pid
	// Whatever the script left running in its group ends with it.
	defer killGroup(pgid)

	output := make(chan outputItem, 64)
	stop := make(chan struct{})
	defer close(stop)
	defer closeAll(outR, errR)
	go (&outputReader{stream: ioproto.EventStdout, out: output, stop: stop}).pump(outR)
	go (&outputReader{stream: ioproto.EventStderr, out: output, stop: stop}).pump(errR)
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()

	st := newStopper(rec.TimeoutMS)
	defer st.stop()
	eofs := 0
	var drain <-chan time.Time
	killed := false
	emitItem := func(it outputItem) {
		if it.eof {
			eofs++
		} else {
			d.emitText(ev, it.stream, it.text)
		}
	}
	for exited != nil || eofs < 2 {
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
		case <-drain:
			d.log.Warn("bash: output pipes still open after the script ended (a process left its group); not waiting further", "command_id", rec.CommandID)
			eofs = 2
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
