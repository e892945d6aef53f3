package driver

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

// appendRecord appends one record to the harness's command log.
func (h *driverHarness) appendRecord(rec ioproto.Record) {
	h.t.Helper()
	line, err := ioproto.EncodeRecord(rec)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := ioproto.AppendLine(filepath.Join(h.io, ioproto.StdinFile), line); err != nil {
		h.t.Fatal(err)
	}
}

func (h *driverHarness) exec(id, code string, stdin bool, pty ioproto.PtySize) {
	h.appendRecord(ioproto.Record{Type: ioproto.KindExec, CommandID: id, Language: ioproto.LanguageBash, Code: code, Stdin: stdin, Pty: pty})
}

func (h *driverHarness) send(id, data string) {
	h.appendRecord(ioproto.StdinRecord(id, []byte(data)))
}

func (h *driverHarness) closeStdin(id string) {
	h.appendRecord(ioproto.Record{Type: ioproto.KindStdinClose, CommandID: id})
}

// until polls the command's events (20 ms apart, at most 30 s) until cond
// holds.
func (h *driverHarness) until(id, what string, cond func([]ioproto.Event) bool) []ioproto.Event {
	h.t.Helper()
	path := filepath.Join(h.io, ioproto.OutDir, ioproto.EventsFileName(id))
	deadline := time.Now().Add(30 * time.Second)
	for {
		evs := readEventsFile(h.t, path)
		if cond(evs) {
			return evs
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("command %s: %s not seen within 30s; events: %+v", id, what, evs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readAll waits until the driver has read the whole command log: every
// record appended so far has been acted on.
func readAll(t *testing.T, d *Driver, h *driverHarness) {
	t.Helper()
	st, err := os.Stat(filepath.Join(h.io, ioproto.StdinFile))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		d.mu.Lock()
		off := d.readOffset
		d.mu.Unlock()
		if off >= st.Size() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the driver read the log to %d of %d bytes within 30s", off, st.Size())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func outText(evs []ioproto.Event) string {
	var b strings.Builder
	for _, e := range evs {
		if e.Type == ioproto.EventStdout {
			b.WriteString(e.Text)
		}
	}
	return b.String()
}

func doneOf(t *testing.T, evs []ioproto.Event) ioproto.Event {
	t.Helper()
	e := lastEvent(t, evs)
	if e.Type != ioproto.EventDone {
		t.Fatalf("last event is %q, not done: %+v", e.Type, evs)
	}
	return e
}

func TestStdinInOrderAndEOF(t *testing.T) {
	h := startDriver(t, t.TempDir(), func(*Driver) {})
	h.exec("cat", "cat; echo END", true, ioproto.PtySize{})
	for _, s := range []string{"one\n", "two ", "three\n"} {
		h.send("cat", s)
	}
	h.closeStdin("cat")
	evs := h.wait("cat")
	if got := outText(evs); got != "one\ntwo three\nEND\n" {
		t.Fatalf("cat printed %q", got)
	}
	if d := doneOf(t, evs); d.Status != ioproto.StatusOK {
		t.Fatalf("done: %+v", d)
	}

	// An interactive read: the command waits for the line.
	h.exec("ask", `echo "name?"; read name; echo "hi $name"`, true, ioproto.PtySize{})
	h.until("ask", "the prompt", func(evs []ioproto.Event) bool { return strings.Contains(outText(evs), "name?") })
	h.send("ask", "Ada\n")
	if got := outText(h.wait("ask")); got != "name?\nhi Ada\n" {
		t.Fatalf("read printed %q", got)
	}

	// Without stdin a command reads EOF at once, as before.
	h.exec("nostdin", "cat; echo after", false, ioproto.PtySize{})
	if got := outText(h.wait("nostdin")); got != "after\n" {
		t.Fatalf("cat without stdin printed %q", got)
	}
	// Stdin for it, or for a finished or unknown command, is ignored.
	h.send("nostdin", "ignored")
	h.send("nobody", "ignored")
	h.exec("next", "echo ok", false, ioproto.PtySize{})
	if got := outText(h.wait("next")); got != "ok\n" {
		t.Fatalf("next printed %q", got)
	}
}

func TestStdinForQueuedCommandWaits(t *testing.T) {
	var d *Driver
	h := startDriver(t, t.TempDir(), func(x *Driver) { d = x })
	gate := filepath.Join(h.ws, "go")
	h.exec("first", `while [ ! -e go ]; do sleep 0.02; done; echo first`, false, ioproto.PtySize{})
	h.until("first", "the first command's start", func(evs []ioproto.Event) bool { return len(evs) > 0 })
	h.exec("second", "cat", true, ioproto.PtySize{})
	h.send("second", "queued ")
	h.send("second", "data\n")
	h.closeStdin("second")
	readAll(t, d, h)
	if _, err := os.Stat(filepath.Join(h.io, ioproto.OutDir, ioproto.EventsFileName("second"))); err == nil {
		t.Fatal("the second command started while the first was running")
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := outText(h.wait("second")); got != "queued data\n" {
		t.Fatalf("the queued command read %q", got)
	}
	// The driver drops a command's feed after its done event is written:
	// wait for it, bounded.
	n := -1
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		d.mu.Lock()
		n = len(d.stdin.feeds)
		d.mu.Unlock()
		if n == 0 && d.stdin.pending.Load() == 0 || time.Now().After(deadline) {
			break
		}
	}
	if n != 0 || d.stdin.pending.Load() != 0 {
		t.Fatalf("5 s after the commands: %d feeds, %d bytes pending; want none", n, d.stdin.pending.Load())
	}
}

func TestStdinNeverBlocksTheDriver(t *testing.T) {
	var d *Driver
	h := startDriver(t, t.TempDir(), func(x *Driver) { d = x })
	h.exec("deaf", "sleep 300", true, ioproto.PtySize{})
	h.until("deaf", "the start", func(evs []ioproto.Event) bool { return len(evs) > 0 })
	chunk := strings.Repeat("x", ioproto.MaxStdinChunk)
	// 5 MiB: the pipe takes 64 KiB, the feed at most 4 MiB; the rest is
	// discarded and reported.
	for range 80 {
		h.send("deaf", chunk)
	}
	start := time.Now()
	h.appendRecord(ioproto.Record{Type: ioproto.KindInterrupt, CommandID: "deaf"})
	evs := h.wait("deaf")
	dn := doneOf(t, evs)
	if dn.Status != ioproto.StatusInterrupted {
		t.Fatalf("done: %+v", dn)
	}
	if !strings.Contains(dn.Reason, "bytes of standard input were discarded") {
		t.Fatalf("done's reason does not report the discarded input: %q", dn.Reason)
	}
	t.Logf("interrupt with 5 MiB of stdin pending answered in %v", time.Since(start))
	h.exec("after", "echo ok", false, ioproto.PtySize{})
	if got := outText(h.wait("after")); got != "ok\n" {
		t.Fatalf("the next command printed %q", got)
	}
	if p := d.stdin.pending.Load(); p != 0 {
		t.Fatalf("%d bytes still accounted as pending", p)
	}
}

func TestPtyAndResize(t *testing.T) {
	if _, err := os.Stat("/dev/ptmx"); err != nil {
		t.Skip("no /dev/ptmx here")
	}
	h := startDriver(t, t.TempDir(), func(*Driver) {})
	h.exec("term", `tty; [ -t 0 ] && echo "is a tty"; stty size; read -r line; stty size; echo "got $line"`, false, ioproto.PtySize{Rows: 24, Cols: 80})
	h.until("term", "the first size", func(evs []ioproto.Event) bool { return strings.Contains(outText(evs), "24 80") })
	h.appendRecord(ioproto.Record{Type: ioproto.KindResize, CommandID: "term", Pty: ioproto.PtySize{Rows: 40, Cols: 132}})
	// The resize is a record like the line after it: read in order, so
	// it is applied before the line reaches the terminal.
	h.send("term", "hello\n")
	evs := h.wait("term")
	out := outText(evs)
	for _, want := range []string{"/dev/pts/", "is a tty", "24 80", "40 132", "got hello"} {
		if !strings.Contains(out, want) {
			t.Fatalf("terminal output %q lacks %q", out, want)
		}
	}
	if bytes.Contains([]byte(out), []byte("not a tty")) {
		t.Fatalf("tty said not a tty: %q", out)
	}
	if d := doneOf(t, evs); d.Status != ioproto.StatusOK || d.ExitCode == nil || *d.ExitCode != 0 {
		t.Fatalf("done: %+v", d)
	}

	// Closing a terminal's input sends EOF (Ctrl-D) to a reader.
	h.exec("eof", `cat; echo "after eof"`, false, ioproto.PtySize{Rows: 10, Cols: 20})
	h.send("eof", "abc\n")
	h.closeStdin("eof")
	out = outText(h.wait("eof"))
	if !strings.Contains(out, "after eof") {
		t.Fatalf("cat on a terminal did not end on close: %q", out)
	}
}
