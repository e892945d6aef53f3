package sandboxdproc

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// sh runs script as a stand-in for sandboxd: these tests are about the
// process handling, which must not depend on Docker.
func sh(script string) Config {
	return Config{Binary: "/bin/sh", Args: []string{"-c", script}, ServeTimeout: time.Minute}
}

func TestStartFindsAddressAndStopReportsExit(t *testing.T) {
	p, err := Start(context.Background(), sh(`trap 'exit 0' TERM; echo 'level=INFO msg=serving listen=127.0.0.1:4242' >&2; while :; do sleep 0.1; done`))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if p.Addr != "127.0.0.1:4242" {
		t.Errorf("Addr = %q, want the address from the serving line", p.Addr)
	}
	if err := p.Stop(time.Minute); err != nil {
		t.Errorf("Stop of a process that exits 0 on SIGTERM: %v", err)
	}
	select {
	case <-p.Exited():
	default:
		t.Error("Exited is open after Stop returned")
	}
	if !strings.Contains(p.Log().String(), "msg=serving") {
		t.Errorf("log %q lacks the serving line", p.Log())
	}
	p.Kill() // already ended: must not block or panic
}

func TestStopKillsAfterGrace(t *testing.T) {
	p, err := Start(context.Background(), sh(`trap '' TERM; echo 'msg=serving listen=x' >&2; while :; do sleep 0.1; done`))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(100 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "did not exit") {
		t.Errorf("Stop of a process ignoring SIGTERM = %v, want a did-not-exit error", err)
	}
	select {
	case <-p.Exited():
	default:
		t.Error("the process survived Stop's SIGKILL")
	}
}

func TestStartReportsEarlyExitWithLog(t *testing.T) {
	_, err := Start(context.Background(), sh(`echo 'flag provided but not defined: -nope' >&2; exit 2`))
	if !errors.Is(err, ErrExitedBeforeServing) || !strings.Contains(err.Error(), "flag provided but not defined") {
		t.Errorf("Start = %v, want ErrExitedBeforeServing carrying the log", err)
	}
}

func TestStartGivesUpWhenContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Start(ctx, sh(`exec sleep 60`)); !errors.Is(err, context.Canceled) {
		t.Errorf("Start with an ended context = %v, want context.Canceled", err)
	}
}

func TestLogKeepsTheTail(t *testing.T) {
	l := &Log{max: 10}
	for _, line := range []string{"aaaa", "bbbb", "cccc"} {
		l.add(line)
	}
	if got := l.String(); got != "bbbb\ncccc\n" {
		t.Errorf("Log = %q, want the last lines within 10 bytes", got)
	}
}
