package docker

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/ioproto"
)

// fakeDriver writes a command's output files the way the driver does: the
// events file is created atomically with its first event, further events are
// appended (here deliberately in two writes, to exercise partial lines),
// artifacts are created atomically before the event that refers to them.
type fakeDriver struct {
	t   *testing.T
	out string
	cmd string
	seq int64
}

func newFakeDriver(t *testing.T, m *validated, sandboxID, cmd string) *fakeDriver {
	return &fakeDriver{t: t, out: filepath.Join(m.cfg.StateDir, "sandboxes", sandboxID, "io", "out"), cmd: cmd}
}

func (d *fakeDriver) path() string { return filepath.Join(d.out, ioproto.EventsFileName(d.cmd)) }

// emit writes the next event; split makes it arrive in two writes.
func (d *fakeDriver) emit(ev ioproto.Event, split bool) {
	d.t.Helper()
	d.seq++
	ev.Seq = d.seq
	line, err := ioproto.EncodeEvent(&ev)
	if err != nil {
		d.t.Fatal(err)
	}
	if d.seq == 1 {
		if err := ioproto.WriteFileAtomic(d.path(), line, 0o644); err != nil {
			d.t.Fatal(err)
		}
		return
	}
	f, err := os.OpenFile(d.path(), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		d.t.Fatal(err)
	}
	defer f.Close()
	if split {
		half := len(line) / 2
		f.Write(line[:half])
		f.Sync()
		f.Write(line[half:])
		return
	}
	f.Write(line)
}

func (d *fakeDriver) artifact(seq int64, n int, data []byte) string {
	d.t.Helper()
	name := ioproto.ArtifactFileName(d.cmd, seq, n)
	if err := ioproto.WriteFileAtomic(filepath.Join(d.out, name), data, 0o644); err != nil {
		d.t.Fatal(err)
	}
	return name
}

// followAsync runs Follow in the background, sending events on a channel.
type followRun struct {
	events chan core.Event
	err    chan error
}

func followAsync(ctx context.Context, m *validated, sandboxID, cmd string, after int64) followRun {
	r := followRun{events: make(chan core.Event, 100), err: make(chan error, 1)}
	go func() {
		r.err <- m.Follow(ctx, sandboxID, cmd, after, func(e core.Event) error {
			r.events <- e
			return nil
		})
	}()
	return r
}

func (r followRun) next(t *testing.T) core.Event {
	t.Helper()
	select {
	case e := <-r.events:
		return e
	case err := <-r.err:
		// Follow sends every event before it returns: prefer those.
		select {
		case e := <-r.events:
			r.err <- err
			return e
		default:
		}
		t.Fatalf("Follow returned %v while an event was expected", err)
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
	}
	return core.Event{}
}

func (r followRun) result(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.err:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("Follow did not return within 5s")
	}
	return nil
}

func submit(t *testing.T, m *validated, sandboxID, cmd string) {
	t.Helper()
	if _, err := m.Submit(t.Context(), core.ExecRequest{SandboxID: sandboxID, CommandID: cmd, Code: "x"}); err != nil {
		t.Fatal(err)
	}
}

func TestFollowStreamsEventsAndArtifacts(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := testConfig(t)
	cfg.recheck = time.Hour // prove that inotify, not the safety re-check, wakes Follow
	m := newTestManager(t, cfg, fd)
	sb := acquire(t, m, "u").Sandbox
	submit(t, m, sb.ID, "c1")

	// Follow first: the command is queued, there is no events file yet.
	run := followAsync(t.Context(), m, sb.ID, "c1", 0)
	d := newFakeDriver(t, m, sb.ID, "c1")
	d.emit(ioproto.Event{Type: "started", CommandID: "c1", Language: "python"}, false)
	if e := run.next(t); e.Seq != 1 || e.Type != "started" {
		t.Fatalf("first event = %+v", e)
	}
	d.emit(ioproto.Event{Type: "stdout", Text: "hello\n"}, true)
	if e := run.next(t); e.Seq != 2 || e.Text != "hello\n" {
		t.Fatalf("second event = %+v", e)
	}
	png := bytes.Repeat([]byte{0x89, 'P', 'N', 'G', 0}, 100_000)
	html := strings.Repeat("<p>big</p>", 30_000)
	pngName := d.artifact(3, 1, png)
	htmlName := d.artifact(3, 2, []byte(html))
	d.emit(ioproto.Event{Type: "display", Data: map[string]string{"text/plain": "<Figure>"},
		Refs: map[string]string{"image/png": pngName, "text/html": htmlName}}, true)
	e := run.next(t)
	if e.Seq != 3 || e.Refs != nil || e.Data["text/plain"] != "<Figure>" || e.Data["text/html"] != html {
		t.Fatalf("display event: seq %d refs %v keys %d", e.Seq, e.Refs, len(e.Data))
	}
	if got, _ := base64.StdEncoding.DecodeString(e.Data["image/png"]); !bytes.Equal(got, png) {
		t.Fatal("image/png artifact not restored as base64 of the file")
	}
	d.emit(ioproto.Event{Type: "result", Data: map[string]string{"text/plain": "42"}}, false)
	d.emit(ioproto.Event{Type: "done", Status: "ok"}, true)
	if e := run.next(t); e.Type != "result" || e.Data["text/plain"] != "42" {
		t.Fatalf("result = %+v", e)
	}
	if e := run.next(t); e.Type != "done" || e.Seq != 5 {
		t.Fatalf("done = %+v", e)
	}
	if err := run.result(t); err != nil {
		t.Fatalf("Follow = %v", err)
	}
	if n := m.watch.Watching(); n != 0 {
		t.Errorf("%d watch subscriptions left after Follow returned", n)
	}

	// Resuming after seq 3 replays only the rest.
	var seqs []int64
	err := m.Follow(t.Context(), sb.ID, "c1", 3, func(e core.Event) error { seqs = append(seqs, e.Seq); return nil })
	if err != nil || len(seqs) != 2 || seqs[0] != 4 || seqs[1] != 5 {
		t.Fatalf("Follow after 3 = %v, %v", seqs, err)
	}
	// After done's seq: nothing to send, and no waiting.
	err = m.Follow(t.Context(), sb.ID, "c1", 5, func(e core.Event) error { t.Errorf("unexpected event %+v", e); return nil })
	if err != nil {
		t.Fatalf("Follow after done = %v", err)
	}
}

func TestFollowErrors(t *testing.T) {
	fd := newFakeDocker(testImage)
	m := newTestManager(t, testConfig(t), fd)
	sb := acquire(t, m, "u").Sandbox
	ctx := t.Context()
	noop := func(core.Event) error { return nil }

	wantClass(t, m.Follow(ctx, sb.ID, "unknown", 0, noop), core.ErrNotFound, "command unknown not found")
	wantClass(t, m.Follow(ctx, sb.ID, "../x", 0, noop), core.ErrInvalidArgument, "")

	// fn's error stops Follow and is returned as is.
	submit(t, m, sb.ID, "c1")
	d := newFakeDriver(t, m, sb.ID, "c1")
	d.emit(ioproto.Event{Type: "started"}, false)
	d.emit(ioproto.Event{Type: "stdout", Text: "a"}, false)
	stop := errors.New("client went away")
	calls := 0
	err := m.Follow(ctx, sb.ID, "c1", 0, func(core.Event) error { calls++; return stop })
	if err != stop || calls != 1 {
		t.Fatalf("Follow = %v after %d calls, want fn's error after 1", err, calls)
	}

	// The caller's context ends a wait.
	cctx, cancel := context.WithCancel(ctx)
	run := followAsync(cctx, m, sb.ID, "c1", 2)
	cancel()
	if err := run.result(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("Follow after cancel = %v", err)
	}

	// Malformed lines are skipped, not fatal.
	f, _ := os.OpenFile(d.path(), os.O_WRONLY|os.O_APPEND, 0)
	f.Write([]byte("{not json}\n"))
	f.Close()
	d.emit(ioproto.Event{Type: "done", Status: "ok"}, false)
	var types []string
	if err := m.Follow(ctx, sb.ID, "c1", 0, func(e core.Event) error { types = append(types, e.Type); return nil }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(types, ",") != "started,stdout,done" {
		t.Errorf("events = %v", types)
	}
	if n := m.watch.Watching(); n != 0 {
		t.Errorf("%d watch subscriptions left", n)
	}
}

func TestFollowSandboxDiesOrIsDeleted(t *testing.T) {
	fd := newFakeDocker(testImage)
	m := newTestManager(t, testConfig(t), fd)
	sb := acquire(t, m, "u").Sandbox
	submit(t, m, sb.ID, "c1")
	d := newFakeDriver(t, m, sb.ID, "c1")
	d.emit(ioproto.Event{Type: "started"}, false)

	run := followAsync(t.Context(), m, sb.ID, "c1", 0)
	run.next(t)
	fd.exit(sb.ContainerID, 137, false)
	err := run.result(t)
	wantClass(t, err, core.ErrFailedPrecondition, "died before command c1 finished: container exited with code 137")

	// Finished output stays readable on a dead sandbox.
	d.emit(ioproto.Event{Type: "done", Status: "killed"}, false)
	if err := m.Follow(t.Context(), sb.ID, "c1", 0, func(core.Event) error { return nil }); err != nil {
		t.Fatalf("Follow of a finished command on a dead sandbox = %v", err)
	}

	// Deleting the sandbox ends its followers.
	other := acquire(t, m, "u").Sandbox
	submit(t, m, other.ID, "c2")
	run = followAsync(t.Context(), m, other.ID, "c2", 0)
	// Wait until the follower is subscribed, so the test covers a wait.
	deadline := time.Now().Add(5 * time.Second)
	for m.watch.Watching() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("follower never subscribed")
		}
		time.Sleep(time.Millisecond)
	}
	if err := m.Delete(t.Context(), other.ID); err != nil {
		t.Fatal(err)
	}
	wantClass(t, run.result(t), core.ErrNotFound, "deleted")
	if n := m.watch.Watching(); n != 0 {
		t.Errorf("%d watch subscriptions left", n)
	}
}

func TestFollowPrunedOutput(t *testing.T) {
	fd := newFakeDocker(testImage)
	m := newTestManager(t, testConfig(t), fd)
	sb := acquire(t, m, "u").Sandbox
	submit(t, m, sb.ID, "c1")
	io := filepath.Join(m.cfg.StateDir, "sandboxes", sb.ID, "io")
	st, _ := os.Stat(filepath.Join(io, "stdin"))
	// The driver has acted on the record, yet there is no events file.
	if err := ioproto.WriteJSONFileAtomic(filepath.Join(io, "state.json"), ioproto.State{Version: 1, Offset: st.Size()}, 0o644); err != nil {
		t.Fatal(err)
	}
	err := m.Follow(t.Context(), sb.ID, "c1", 0, func(core.Event) error { return nil })
	wantClass(t, err, core.ErrNotFound, "pruned")
}

func TestFollowRefusesEscapingEventsFile(t *testing.T) {
	fd := newFakeDocker(testImage)
	m := newTestManager(t, testConfig(t), fd)
	sb := acquire(t, m, "u").Sandbox
	submit(t, m, sb.ID, "c1")
	// Sandboxed code plants a symlink to a host file as the events file.
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte(`{"seq":1,"type":"stdout","text":"host secret"}`+"\n"), 0o600)
	out := filepath.Join(m.cfg.StateDir, "sandboxes", sb.ID, "io", "out")
	if err := os.Symlink(secret, filepath.Join(out, "c1.events")); err != nil {
		t.Fatal(err)
	}
	err := m.Follow(t.Context(), sb.ID, "c1", 0, func(e core.Event) error {
		t.Errorf("delivered %+v from outside the sandbox", e)
		return nil
	})
	wantClass(t, err, core.ErrFailedPrecondition, "altered")
}
