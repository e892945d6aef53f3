package client

// Unit tests of Run's resume logic against the fake sandboxd.

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func collect(t *testing.T, c *Client, cmd Command, resume bool) (string, *Outcome, error) {
	t.Helper()
	var seen string
	out, err := c.Run(context.Background(), cmd, resume, func(ev Event) { seen += ev.Text })
	return seen, out, err
}

func TestRunNew(t *testing.T) {
	f := newFake()
	c := startFake(t, f, WithToken("s3cret"))
	seen, out, err := collect(t, c, Command{SandboxID: "sb-1", ID: "c1", Code: "x"}, false)
	if err != nil || seen != "abc" || out.Stdout != "abc" || out.Done == nil || out.Done.Status != StatusOK {
		t.Fatalf("Run = %q, %+v, %v", seen, out, err)
	}
	if f.executes != 1 || len(f.streams) != 0 {
		t.Errorf("%d Execute and %d StreamCommand calls, want 1 and 0", f.executes, len(f.streams))
	}
	if len(f.auth) != 1 || f.auth[0] != "Bearer s3cret" {
		t.Errorf("authorization metadata = %q", f.auth)
	}
}

// A resumed command that sandboxd already knows is streamed, not executed.
func TestRunResumeKnownCommand(t *testing.T) {
	f := newFake()
	f.commands["c1"] = f.events("c1")
	c := startFake(t, f)
	seen, _, err := collect(t, c, Command{SandboxID: "sb-1", ID: "c1"}, true)
	if err != nil || seen != "abc" {
		t.Fatalf("Run = %q, %v", seen, err)
	}
	if f.executes != 0 || len(f.streams) != 1 || f.streams[0] != 0 {
		t.Errorf("%d Execute calls and StreamCommand after %v; want 0 and [0]", f.executes, f.streams)
	}
}

// A resumed command that never reached sandboxd is sent once.
func TestRunResumeUnknownCommand(t *testing.T) {
	f := newFake()
	c := startFake(t, f)
	seen, _, err := collect(t, c, Command{SandboxID: "sb-1", ID: "c1"}, true)
	if err != nil || seen != "abc" || f.executes != 1 {
		t.Fatalf("Run = %q, %v after %d Execute calls; want abc after 1", seen, err, f.executes)
	}
}

// A stream broken mid-way resumes after the last event: no duplicates.
func TestRunResumesBrokenStream(t *testing.T) {
	f := newFake()
	f.breakAfter = 2
	c := startFake(t, f)
	seen, out, err := collect(t, c, Command{SandboxID: "sb-1", ID: "c1"}, false)
	if err != nil || seen != "abc" || out.Stdout != "abc" {
		t.Fatalf("Run = %q, %v", seen, err)
	}
	if f.executes != 1 || len(f.streams) != 1 || f.streams[0] != 2 {
		t.Errorf("%d Execute calls and StreamCommand after %v; want 1 and [2]", f.executes, f.streams)
	}
}

func TestRunSandboxGone(t *testing.T) {
	f := newFake()
	f.alive = false
	c := startFake(t, f)
	for _, resume := range []bool{false, true} {
		if _, _, err := collect(t, c, Command{SandboxID: "sb-1", ID: "c1"}, resume); !errors.Is(err, ErrGone) {
			t.Errorf("resume=%v: %v, want ErrGone", resume, err)
		}
	}
	if err := c.Check(context.Background(), "sb-1"); !errors.Is(err, ErrGone) {
		t.Errorf("Check = %v, want ErrGone", err)
	}
}

// A command whose Execute was lost before sandboxd recorded it is sent
// again once, and only once: if sandboxd still does not know it, its output
// is reported lost rather than risking a second run.
func TestRunExecuteRetriedOnce(t *testing.T) {
	f := newFake()
	c := startFake(t, f)
	f.dropExecute = true
	_, _, err := collect(t, c, Command{SandboxID: "sb-1", ID: "c1"}, false)
	if err != nil || f.executes != 2 {
		// Dropped Execute -> StreamCommand NOT_FOUND -> one more Execute.
		t.Fatalf("Run = %v after %d Execute calls; want success after 2", err, f.executes)
	}

	f = newFake()
	c = startFake(t, f)
	f.dropExecute = true
	_, _, err = collect(t, c, Command{SandboxID: "sb-1", ID: "c2"}, true)
	// StreamCommand NOT_FOUND -> Execute (dropped) -> StreamCommand
	// NOT_FOUND again: no third attempt.
	if !errors.Is(err, ErrCommandLost) || f.executes != 1 {
		t.Fatalf("Run = %v after %d Execute calls; want ErrCommandLost after 1", err, f.executes)
	}
}

// Execute and StreamCommand hand over the stream as it is, typed.
func TestStream(t *testing.T) {
	f := newFake()
	c := startFake(t, f)
	ctx := context.Background()
	s, err := c.Execute(ctx, Command{SandboxID: "sb-1", ID: "c1", Language: "python", Code: "x"})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []Kind
	for {
		ev, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.CommandID != "c1" {
			t.Errorf("event %d has command ID %q", ev.Seq, ev.CommandID)
		}
		kinds = append(kinds, ev.Kind)
	}
	if want := []Kind{KindStarted, KindStdout, KindStdout, KindStdout, KindDone}; !slices.Equal(kinds, want) {
		t.Errorf("kinds %v, want %v", kinds, want)
	}

	s, err = c.StreamCommand(ctx, "sb-1", "c1", 4)
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := s.Recv(); err != nil || ev.Seq != 5 || ev.Kind != KindDone || ev.Done.Status != StatusOK {
		t.Errorf("after seq 4: %+v, %v; want the done event", ev, err)
	}
	if _, err := s.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("after done: %v, want io.EOF", err)
	}

	s, err = c.StreamCommand(ctx, "sb-1", "unknown", 0)
	if err == nil {
		_, err = s.Recv()
	}
	if !errors.Is(err, ErrNotFound) || status.Code(err) != codes.NotFound {
		t.Errorf("unknown command: %v, want ErrNotFound", err)
	}
}
