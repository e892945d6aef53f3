package driver

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

// These tests run the driver in-process (the host's python3 runs the
// kernel) and talk to it through /io only, as the host does.

// startDriverIn is startDriver with a given workspace, so a second driver
// can take over the same sandbox.
func startDriverIn(t *testing.T, io, ws string) *driverHarness {
	t.Helper()
	if f, err := os.OpenFile(filepath.Join(io, ioproto.StdinFile), os.O_CREATE|os.O_WRONLY, 0o644); err != nil {
		t.Fatal(err)
	} else {
		f.Close()
	}
	// MaxOutput is the sandbox-driver binary's default. Left at 0, a
	// command's cap is most of the out budget, so the worst cases of
	// commands in parallel contexts would not fit together and each new
	// one would prune the others' finished output before the test read it
	// (TestContextsParallelAndSeparate failed so in CI).
	d, err := New(Config{IODir: io, Workspace: ws, Wake: "inotify", MaxOutput: 16 << 20,
		Logger: slog.New(slog.NewTextHandler(io2testLog{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if err := d.Run(ctx); err != nil {
			t.Errorf("driver: %v", err)
		}
	}()
	stop := func() { cancel(); <-stopped }
	t.Cleanup(stop)
	return &driverHarness{t: t, io: io, ws: ws, stop: stop}
}

func (h *driverHarness) record(r ioproto.Record) {
	h.t.Helper()
	line, err := ioproto.EncodeRecord(r)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := ioproto.AppendLine(filepath.Join(h.io, ioproto.StdinFile), line); err != nil {
		h.t.Fatal(err)
	}
}

// submitIn queues an exec in a context.
func (h *driverHarness) submitIn(ctxID, id, language, code string) {
	h.t.Helper()
	h.record(ioproto.Record{Type: ioproto.KindExec, CommandID: id, Language: language, Code: code, ContextID: ctxID})
}

// ctxOp sends a context record and returns its done.
func (h *driverHarness) ctxOp(id, op, ctxID, language, cwd string) ioproto.Event {
	h.t.Helper()
	h.record(ioproto.Record{Type: ioproto.KindContext, CommandID: id, Op: op, ContextID: ctxID, Language: language, Cwd: cwd})
	return lastEvent(h.t, h.wait(id))
}

func (h *driverHarness) mustOp(id, op, ctxID, language, cwd string) {
	h.t.Helper()
	if d := h.ctxOp(id, op, ctxID, language, cwd); d.Status != ioproto.StatusOK {
		h.t.Fatalf("context %s %s: %+v", op, ctxID, d)
	}
}

func (h *driverHarness) contexts() []ioproto.ContextInfo {
	h.t.Helper()
	var list ioproto.Contexts
	if err := ioproto.ReadJSONFile(filepath.Join(h.io, ioproto.ContextsFile), &list); err != nil {
		h.t.Fatal(err)
	}
	return list.Contexts
}

func ctxIDs(list []ioproto.ContextInfo) string {
	var ids []string
	for _, c := range list {
		ids = append(ids, c.ID+":"+c.Language+":"+c.Cwd)
	}
	return strings.Join(ids, ",")
}

func stdoutOf(evs []ioproto.Event) string {
	var b strings.Builder
	for _, e := range evs {
		if e.Type == ioproto.EventStdout {
			b.WriteString(e.Text)
		}
	}
	return b.String()
}

func expectDone(t *testing.T, evs []ioproto.Event, status string) ioproto.Event {
	t.Helper()
	d := lastEvent(t, evs)
	if d.Status != status {
		t.Fatalf("done = %+v, want status %s; events %+v", d, status, evs)
	}
	return d
}

// waitForFile is Python that blocks until the workspace file name exists
// (at most 20 s, then fails): a command that can only finish while another
// context's command runs.
func waitForFile(name string) string {
	return fmt.Sprintf(`import os, time
print("waiting", flush=True)
for _ in range(2000):
    if os.path.exists(%q):
        break
    time.sleep(0.01)
else:
    raise SystemExit("file never appeared")
print("saw it")`, name)
}

// waitRunning waits until command id has printed, so it is running.
func (h *driverHarness) waitRunning(id string) {
	h.t.Helper()
	path := filepath.Join(h.io, ioproto.OutDir, ioproto.EventsFileName(id))
	deadline := time.Now().Add(30 * time.Second)
	for stdoutOf(readEventsFile(h.t, path)) == "" {
		if time.Now().After(deadline) {
			h.t.Fatalf("command %s printed nothing within 30s: %+v", id, readEventsFile(h.t, path))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestContextsParallelAndSeparate(t *testing.T) {
	h := startDriverIn(t, t.TempDir(), t.TempDir())
	h.submit("first", "bash", "true")
	h.wait("first")
	if got := ctxIDs(h.contexts()); got != "default:python:." {
		t.Fatalf("contexts at start = %s, want only the default", got)
	}
	h.mustOp("op-a", ioproto.ContextCreate, "a", "python", "")
	h.mustOp("op-b", ioproto.ContextCreate, "b", "python", "")
	if got := ctxIDs(h.contexts()); got != "default:python:.,a:python:.,b:python:." {
		t.Fatalf("contexts = %s", got)
	}

	t.Run("separate globals", func(t *testing.T) {
		h.submitIn("a", "g1", "python", "x = 'in a'")
		h.submitIn("b", "g2", "python", "x = 'in b'")
		h.submit("g3", "python", "x = 'in default'")
		for _, id := range []string{"g1", "g2", "g3"} {
			expectDone(t, h.wait(id), ioproto.StatusOK)
		}
		for ctx, want := range map[string]string{"a": "in a", "b": "in b", "": "in default"} {
			id := "print-" + ctx
			h.submitIn(ctx, id, "python", "print(x)")
			if got := stdoutOf(h.wait(id)); got != want+"\n" {
				t.Errorf("context %q printed %q, want %q", ctx, got, want)
			}
		}
	})

	t.Run("parallel across contexts", func(t *testing.T) {
		// p1 in a can only finish once p2, in b, ran: queued behind p1 it
		// never would.
		h.submitIn("a", "p1", "python", waitForFile("flag"))
		h.submitIn("b", "p2", "python", "open('flag', 'w').close()")
		expectDone(t, h.wait("p2"), ioproto.StatusOK)
		if evs := h.wait("p1"); stdoutOf(evs) != "waiting\nsaw it\n" {
			t.Fatalf("p1: %+v", evs)
		}
		// Two sleeping commands overlap: each started before the other ended.
		h.submitIn("a", "s1", "python", "import time; time.sleep(0.5); print('a')")
		h.submitIn("b", "s2", "python", "import time; time.sleep(0.5); print('b')")
		e1, e2 := h.wait("s1"), h.wait("s2")
		if !e1[0].Time.Before(lastEvent(t, e2).Time) || !e2[0].Time.Before(lastEvent(t, e1).Time) {
			t.Fatalf("the commands did not overlap: s1 %v-%v, s2 %v-%v", e1[0].Time, lastEvent(t, e1).Time, e2[0].Time, lastEvent(t, e2).Time)
		}
	})

	t.Run("queued within a context", func(t *testing.T) {
		h.submitIn("a", "q1", "python", "import time; time.sleep(0.3); open('q1', 'w').close()")
		h.submitIn("a", "q2", "bash", "test -e q1 && echo after")
		e1, e2 := h.wait("q1"), h.wait("q2")
		if stdoutOf(e2) != "after\n" || e2[0].Time.Before(lastEvent(t, e1).Time) {
			t.Fatalf("q2 did not wait for q1: %+v / %+v", e1, e2)
		}
	})

	t.Run("restart gives fresh globals", func(t *testing.T) {
		h.mustOp("op-restart-a", ioproto.ContextRestart, "a", "", "")
		h.submitIn("a", "r1", "python", "print('x' in globals())")
		evs := h.wait("r1")
		if d := expectDone(t, evs, ioproto.StatusOK); d.StateLost || stdoutOf(evs) != "False\n" {
			t.Fatalf("after restart: %+v", evs)
		}
		h.submitIn("b", "r2", "python", "print(x)")
		if got := stdoutOf(h.wait("r2")); got != "in b\n" {
			t.Fatalf("restarting a touched b: %q", got)
		}
		// A running command ends with the interpreter.
		h.submitIn("a", "r3", "python", "import time\nprint('going', flush=True)\ntime.sleep(60)")
		h.waitRunning("r3")
		h.record(ioproto.Record{Type: ioproto.KindContext, CommandID: "op-restart-a2", Op: ioproto.ContextRestart, ContextID: "a"})
		d := expectDone(t, h.wait("r3"), ioproto.StatusKilled)
		if !d.StateLost || !strings.Contains(d.Reason, "restarted") {
			t.Fatalf("running command on restart: %+v", d)
		}
		expectDone(t, h.wait("op-restart-a2"), ioproto.StatusOK)
	})

	t.Run("delete", func(t *testing.T) {
		h.submitIn("b", "d1", "python", waitForFile("never"))
		h.submitIn("b", "d2", "python", "print('queued')")
		h.waitRunning("d1")
		h.mustOp("op-del-b", ioproto.ContextDelete, "b", "", "")
		if d := expectDone(t, h.wait("d1"), ioproto.StatusKilled); !strings.Contains(d.Reason, "deleted") {
			t.Fatalf("running command on delete: %+v", d)
		}
		if d := expectDone(t, h.wait("d2"), ioproto.StatusInterrupted); !strings.Contains(d.Reason, "deleted") {
			t.Fatalf("queued command on delete: %+v", d)
		}
		h.submitIn("b", "d3", "python", "print(1)")
		if d := expectDone(t, h.wait("d3"), ioproto.StatusError); !strings.Contains(d.Reason, "unknown context b") {
			t.Fatalf("command in a deleted context: %+v", d)
		}
		if got := ctxIDs(h.contexts()); got != "default:python:.,a:python:." {
			t.Fatalf("contexts after delete = %s", got)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		os.WriteFile(filepath.Join(h.ws, "file"), nil, 0o644)
		os.Symlink("/etc", filepath.Join(h.ws, "out"))
		for _, c := range []struct{ id, op, ctx, lang, cwd, want string }{
			{"bad1", ioproto.ContextCreate, "a", "python", "", "already exists"},
			{"bad2", ioproto.ContextCreate, "n", "python", "missing", "no such file"},
			{"bad3", ioproto.ContextCreate, "n", "python", "file", "not a directory"},
			{"bad4", ioproto.ContextCreate, "n", "python", "out", "leaves /workspace"},
			{"bad5", ioproto.ContextRestart, "nope", "", "", "unknown context nope"},
			{"bad6", ioproto.ContextDelete, ioproto.DefaultContext, "", "", "default context cannot be deleted"},
		} {
			if d := h.ctxOp(c.id, c.op, c.ctx, c.lang, c.cwd); d.Status != ioproto.StatusError || !strings.Contains(d.Reason, c.want) {
				t.Errorf("%s %s %q: done %+v, want error with %q", c.op, c.ctx, c.cwd, d, c.want)
			}
		}
		h.mustOp("op-sh", ioproto.ContextCreate, "sh", "bash", "")
		h.submitIn("sh", "lang1", "python", "print(1)")
		if d := expectDone(t, h.wait("lang1"), ioproto.StatusError); !strings.Contains(d.Reason, "runs bash, not python") {
			t.Fatalf("python in a bash context: %+v", d)
		}
		// The bound: bash contexts hold no interpreter, so they are cheap
		// to fill up with.
		n := len(h.contexts()) - 1
		for i := n; i < ioproto.MaxContexts; i++ {
			h.mustOp(fmt.Sprintf("fill-%d", i), ioproto.ContextCreate, fmt.Sprintf("f%d", i), "bash", "")
		}
		if d := h.ctxOp("one-too-many", ioproto.ContextCreate, "extra", "bash", ""); d.Status != ioproto.StatusError || !strings.Contains(d.Reason, "limit is 16") {
			t.Fatalf("context beyond the bound: %+v", d)
		}
	})
}

func TestContextCwd(t *testing.T) {
	h := startDriverIn(t, t.TempDir(), t.TempDir())
	if err := os.MkdirAll(filepath.Join(h.ws, "sub", "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	h.mustOp("op-py", ioproto.ContextCreate, "py", "python", "sub/dir/")
	h.mustOp("op-sh", ioproto.ContextCreate, "sh", "bash", "./sub")
	if got := ctxIDs(h.contexts()); got != "default:python:.,py:python:sub/dir,sh:bash:sub" {
		t.Fatalf("contexts = %s", got)
	}
	h.submitIn("py", "c1", "python", "import os; print(os.getcwd())")
	h.submitIn("py", "c2", "bash", "pwd")
	h.submitIn("sh", "c3", "bash", "pwd; echo hi > made-here")
	for id, want := range map[string]string{"c1": "/sub/dir\n", "c2": "/sub/dir\n", "c3": "/sub\n"} {
		if got := stdoutOf(h.wait(id)); !strings.HasSuffix(got, want) {
			t.Errorf("%s printed %q, want a path ending in %q", id, got, want)
		}
	}
	if _, err := os.Stat(filepath.Join(h.ws, "sub", "made-here")); err != nil {
		t.Fatalf("file made in the bash context's directory: %v", err)
	}
}

// TestContextsSurviveDriverRestart: a new driver on the same /io knows the
// contexts; their interpreters are fresh, which their next Python command
// reports.
func TestContextsSurviveDriverRestart(t *testing.T) {
	io, ws := t.TempDir(), t.TempDir()
	h := startDriverIn(t, io, ws)
	h.mustOp("op-a", ioproto.ContextCreate, "a", "python", "")
	h.mustOp("op-gone", ioproto.ContextCreate, "gone", "python", "")
	h.mustOp("op-del", ioproto.ContextDelete, "gone", "", "")
	h.submitIn("a", "x1", "python", "x = 1")
	expectDone(t, h.wait("x1"), ioproto.StatusOK)
	h.stop()

	h = startDriverIn(t, io, ws)
	if got := ctxIDs(h.contexts()); got != "default:python:.,a:python:." {
		t.Fatalf("contexts after restart = %s", got)
	}
	h.submitIn("a", "x2", "python", "print('x' in globals())")
	evs := h.wait("x2")
	if d := expectDone(t, evs, ioproto.StatusOK); !d.StateLost || stdoutOf(evs) != "False\n" {
		t.Fatalf("first command after restart: %+v", evs)
	}
	h.submitIn("gone", "x3", "python", "1")
	expectDone(t, h.wait("x3"), ioproto.StatusError)
	// Records are never acted on twice: re-creating "a" by a new record is
	// refused, the old record is not re-run.
	if d := h.ctxOp("op-a2", ioproto.ContextCreate, "a", "python", ""); !strings.Contains(d.Reason, "already exists") {
		t.Fatalf("re-create: %+v", d)
	}
}

// TestStateOffsetSeveralQueues: the saved offset never passes a record
// still queued in any context, even while other contexts move on.
func TestStateOffsetSeveralQueues(t *testing.T) {
	io := t.TempDir()
	h := startDriverIn(t, io, t.TempDir())
	h.mustOp("op-a", ioproto.ContextCreate, "a", "python", "")
	h.mustOp("op-b", ioproto.ContextCreate, "b", "bash", "")
	h.submitIn("a", "blocker", "python", waitForFile("go"))
	st, _ := os.Stat(filepath.Join(io, ioproto.StdinFile))
	queuedAt := st.Size()
	h.submitIn("a", "behind", "python", "print('behind')")
	for i := range 3 {
		id := fmt.Sprintf("other-%d", i)
		h.submitIn("b", id, "bash", "echo other")
		expectDone(t, h.wait(id), ioproto.StatusOK)
	}
	var state ioproto.State
	if err := ioproto.ReadJSONFile(filepath.Join(io, ioproto.StateFile), &state); err != nil {
		t.Fatal(err)
	}
	if state.Offset > queuedAt {
		t.Fatalf("state offset %d passed the queued record at %d", state.Offset, queuedAt)
	}
	h.submitIn("b", "release", "bash", "touch go")
	for _, id := range []string{"release", "blocker", "behind"} {
		expectDone(t, h.wait(id), ioproto.StatusOK)
	}
	st, _ = os.Stat(filepath.Join(io, ioproto.StdinFile))
	h.stop() // saves nothing new, but no more writes race the read
	if err := ioproto.ReadJSONFile(filepath.Join(io, ioproto.StateFile), &state); err != nil || state.Offset != st.Size() {
		t.Fatalf("state offset after everything ran = %d (%v), want the log's end %d", state.Offset, err, st.Size())
	}
}

// TestRoomHeldForRunningCommands: commands running at once in different
// contexts each hold their worst case out of the out budget, so a command
// that starts while another holds the room gets a lower cap, and the room
// comes back when the other ends.
func TestRoomHeldForRunningCommands(t *testing.T) {
	d, err := New(Config{IODir: t.TempDir(), Workspace: t.TempDir(), OutBudget: 48 << 20, MaxOutput: 16 << 20,
		Logger: slog.New(slog.NewTextHandler(io2testLog{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	d.statfsHook = func(string) (int64, int64, error) { return 1 << 40, 1 << 40, nil }
	d.setupBudget()
	first, ok, _ := d.makeRoom()
	if !ok || first.output != 16<<20 {
		t.Fatalf("first command: %+v, %v; want the full 16 MiB cap", first, ok)
	}
	// 48 MiB holds the reserve and two worst cases of 16 MiB commands
	// (about 20.3 MiB each), not three.
	second, ok, _ := d.makeRoom()
	if !ok || second.output != 16<<20 {
		t.Fatalf("second command: %+v, %v; want the full cap", second, ok)
	}
	third, ok, _ := d.makeRoom()
	if !ok || third.output >= 16<<20 || roomOf(first)+roomOf(second)+roomOf(third)+reserveBytes > d.budget {
		t.Fatalf("third command: %+v, %v; want a lower cap within the budget %d (held %d, %d)", third, ok, d.budget, roomOf(first), roomOf(second))
	}
	d.releaseRoom(first)
	d.releaseRoom(third)
	again, ok, _ := d.makeRoom()
	if !ok || again.output != 16<<20 {
		t.Fatalf("after the others ended: %+v, %v; want the full cap again", again, ok)
	}
	d.releaseRoom(second)
	d.releaseRoom(again)
	if d.reserved != 0 {
		t.Fatalf("room still held after every command ended: %d", d.reserved)
	}
}
