package iosidecar

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/cmdlog"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/iolog"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Input through a real sidecar: Append runs cmdlog's checks on stdin, its
// close and resizes next to the log, as the Docker backend does on the
// host. Input for a command that takes it lands in the log in order; each
// refusal crosses by its reason (FAILED_PRECONDITION, or NOT_FOUND for an
// unknown command) and appends nothing.
func TestAppendInput(t *testing.T) {
	sc := startSidecar(t)
	ctx := ctxT(t)
	bash := func(id string, stdin bool, pty ioproto.PtySize) ioproto.Record {
		return ioproto.Record{Type: ioproto.KindExec, CommandID: id, Language: ioproto.LanguageBash, Code: "cat", Stdin: stdin, Pty: pty}
	}
	for _, rec := range []ioproto.Record{execRec("plain", "1"), bash("in", true, ioproto.PtySize{}), bash("term", true, ioproto.PtySize{Rows: 24, Cols: 80})} {
		if _, err := sc.c.Append(ctx, rec); err != nil {
			t.Fatalf("append %s: %v", rec.CommandID, err)
		}
	}
	logFile := filepath.Join(sc.io, ioproto.StdinFile)
	logSize := func() int64 {
		st, err := os.Stat(logFile)
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	refused := func(what string, rec ioproto.Record, kind error, code codes.Code, reason string) {
		t.Helper()
		before := logSize()
		_, err := sc.c.Append(ctx, rec)
		var e *Error
		if !errors.Is(err, kind) || !errors.As(err, &e) || e.Code != code || e.Reason != reason {
			t.Errorf("%s: %v; want %v (%v, reason %s)", what, err, kind, code, reason)
		}
		if after := logSize(); after != before {
			t.Errorf("%s: the log grew from %d to %d bytes", what, before, after)
		}
	}
	stdin := func(id, data string) ioproto.Record {
		rec, err := cmdlog.StdinRecord(id, []byte(data))
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	size := core.PtySize{Rows: 40, Cols: 132}

	refused("stdin for an unknown command", stdin("nobody", "x"), iolog.ErrUnknownCommand, codes.NotFound, "UNKNOWN_COMMAND")
	refused("stdin for a command without input", stdin("plain", "x"), cmdlog.ErrNoInput, codes.FailedPrecondition, "NO_INPUT")
	refused("close for a command without input", cmdlog.CloseRecord("plain"), cmdlog.ErrNoInput, codes.FailedPrecondition, "NO_INPUT")
	refused("a resize without a terminal", cmdlog.ResizeRecord("in", size), cmdlog.ErrNoTerminal, codes.FailedPrecondition, "NO_TERMINAL")
	refused("a resize without input either", cmdlog.ResizeRecord("plain", size), cmdlog.ErrNoTerminal, codes.FailedPrecondition, "NO_TERMINAL")

	for _, rec := range []ioproto.Record{stdin("in", "hello\n"), cmdlog.CloseRecord("in"), cmdlog.ResizeRecord("term", size), stdin("term", "x")} {
		if appended, err := sc.c.Append(ctx, rec); err != nil || !appended {
			t.Fatalf("append %s for %s: %v, appended %v", rec.Type, rec.CommandID, appended, err)
		}
	}
	b, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
	if len(lines) != 7 {
		t.Fatalf("the log has %d records; want 3 commands and 4 inputs:\n%s", len(lines), b)
	}
	for i, want := range []struct{ typ, id string }{{ioproto.KindStdin, "in"}, {ioproto.KindStdinClose, "in"}, {ioproto.KindResize, "term"}, {ioproto.KindStdin, "term"}} {
		rec, _, err := ioproto.ParseRecord(lines[3+i])
		if err != nil || rec.Type != want.typ || rec.CommandID != want.id {
			t.Errorf("record %d: %+v, %v; want %s for %s", 3+i, rec, err, want.typ, want.id)
		}
		if rec.Type == ioproto.KindResize && (rec.Pty.Rows != 40 || rec.Pty.Cols != 132) {
			t.Errorf("the resize says %+v; want 40x132", rec.Pty)
		}
		if i == 0 {
			if data, err := rec.StdinData(); err != nil || string(data) != "hello\n" {
				t.Errorf("the stdin record holds %q, %v", data, err)
			}
		}
	}

	// Once done, a command takes no more input.
	sc.writeEvents(t, "in", ioproto.Event{Seq: 1, Type: ioproto.EventStarted, CommandID: "in"}, ioproto.Event{Seq: 2, Type: ioproto.EventDone, Status: ioproto.StatusOK})
	refused("stdin for a finished command", stdin("in", "late"), cmdlog.ErrFinished, codes.FailedPrecondition, "COMMAND_FINISHED")
}

// A sidecar's input reasons are believed on Append only, with their code.
func TestInputReasonsDistrusted(t *testing.T) {
	for _, tc := range []struct {
		code   codes.Code
		reason string
		c      call
		want   error
	}{
		{codes.FailedPrecondition, "NO_INPUT", callAppend, cmdlog.ErrNoInput},
		{codes.FailedPrecondition, "NO_TERMINAL", callAppend, cmdlog.ErrNoTerminal},
		{codes.FailedPrecondition, "COMMAND_FINISHED", callAppend, cmdlog.ErrFinished},
		{codes.NotFound, "NO_INPUT", callAppend, ErrInternal},
		{codes.FailedPrecondition, "NO_INPUT", callFollow, ErrInternal},
		{codes.FailedPrecondition, "COMMAND_FINISHED", callList, ErrInternal},
	} {
		err := errorOf(t.Context(), tc.c, withReason(tc.code, tc.reason, "x"))
		if !errors.Is(err, tc.want) {
			t.Errorf("%v %s on call %d = %v; want %v", tc.code, tc.reason, tc.c, err, tc.want)
		}
	}
}
