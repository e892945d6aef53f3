package iolog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

// Tests of the bounds on what iolog reads: every file under io/ is written
// by hostile code.

// countingHandler counts log records, to check that hostile input is
// logged at a bounded rate.
type countingHandler struct {
	mu sync.Mutex
	n  int
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(context.Context, slog.Record) error {
	h.mu.Lock()
	h.n++
	h.mu.Unlock()
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }
func (h *countingHandler) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

func stdinPath(d *Dir) string { return filepath.Join(d.Path(), ioproto.StdinFile) }

func outPath(d *Dir, name string) string { return filepath.Join(d.Path(), ioproto.OutDir, name) }

// sparse makes path a sparse file of size bytes, over what is there.
func sparse(t *testing.T, path string, size int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
}

// appendTimed runs Append and fails if it takes long: a forged log must be
// refused from its stat, not after reading it.
func appendTimed(t *testing.T, d *Dir, rec ioproto.Record) error {
	t.Helper()
	start := time.Now()
	_, err := d.Append(rec, nil)
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("Append took %v on a forged log", el)
	}
	return err
}

func TestLogSparseRefused(t *testing.T) {
	d := newDir(t)
	if _, err := d.Append(exec("c1"), nil); err != nil {
		t.Fatal(err)
	}
	// The attack: the log grown to 1 TiB of holes (ext4's per-file limit
	// stops at 16 TiB; any size far above the allocation is the same case).
	// A fresh Dir, as after a restart.
	sparse(t, stdinPath(d), 1<<40)
	d = New(d.Path())
	err := appendTimed(t, d, exec("c2"))
	if !errors.Is(err, ErrTampered) || !strings.Contains(err.Error(), "bytes long") {
		t.Fatalf("Append on a 1 TiB log = %v, want ErrTampered (too long)", err)
	}
	// Within the size bound but sparse.
	sparse(t, stdinPath(d), 512<<20)
	d = New(d.Path())
	if err := appendTimed(t, d, exec("c2")); !errors.Is(err, ErrTampered) || !strings.Contains(err.Error(), "sparse") {
		t.Fatalf("Append on a sparse 512 MiB log = %v, want ErrTampered (sparse)", err)
	}
	// The verdict is kept: the log is not read again.
	if _, _, err := d.lookup(context.Background(), "c1"); !errors.Is(err, ErrTampered) {
		t.Errorf("lookup after a refused load = %v, want ErrTampered", err)
	}
	// HoldAppends (a Delete's barrier) never waits for anything here.
	held := make(chan struct{})
	go d.HoldAppends(func() { close(held) })
	select {
	case <-held:
	case <-time.After(5 * time.Second):
		t.Fatal("HoldAppends blocked on a refused log")
	}
}

func TestLogTooManyRecords(t *testing.T) {
	d := newDir(t)
	var b strings.Builder
	for i := range MaxLogRecords {
		fmt.Fprintf(&b, `{"type":"exec","command_id":"c%d","code":"1"}`+"\n", i)
	}
	if err := os.WriteFile(stdinPath(d), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	// At the bound: loaded, but no new command is taken.
	if _, err := d.Append(exec("new"), nil); !errors.Is(err, ErrLogFull) {
		t.Fatalf("Append to a log of MaxLogRecords commands = %v, want ErrLogFull", err)
	}
	if _, err := d.Append(ioproto.Record{Type: ioproto.KindInterrupt, CommandID: "c7"}, nil); err != nil {
		t.Errorf("interrupt in a full log = %v, want it appended", err)
	}
	// One more than sandboxd ever appends: forged.
	fmt.Fprintf(&b, `{"type":"exec","command_id":"one-more","code":"1"}`+"\n")
	if err := os.WriteFile(stdinPath(d), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(d.Path()).Append(exec("new"), nil); !errors.Is(err, ErrTampered) {
		t.Fatalf("Append to a log of MaxLogRecords+1 commands = %v, want ErrTampered", err)
	}
}

func TestLogLoadCancelled(t *testing.T) {
	d := newDir(t)
	var b strings.Builder
	for i := range 10000 {
		fmt.Fprintf(&b, `{"type":"exec","command_id":"c%d","code":"1"}`+"\n", i)
	}
	if err := os.WriteFile(stdinPath(d), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.AppendContext(ctx, exec("new"), nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Append with a cancelled context = %v, want context.Canceled", err)
	}
	// Not a verdict: the next caller loads the log.
	if appended, err := d.Append(exec("c9999"), nil); appended || err != nil {
		t.Fatalf("Append of a logged command after a cancelled load = %v, %v", appended, err)
	}
	// Closed: no more loads or appends.
	d2 := New(d.Path())
	if !d2.Close(time.Second) {
		t.Fatal("Close of an idle Dir did not report it idle")
	}
	if _, err := d2.Append(exec("x"), nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after Close = %v, want ErrClosed", err)
	}
}

func TestLogOwnedBySandbox(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a file of another uid")
	}
	d := newDir(t)
	if _, err := d.Append(exec("c1"), nil); err != nil {
		t.Fatal(err)
	}
	// The attack's copy: a log the sandbox wrote and renamed onto stdin.
	if err := os.Chown(stdinPath(d), 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if _, err := New(d.Path()).Append(exec("c2"), nil); !errors.Is(err, ErrTampered) {
		t.Fatalf("Append on a log owned by the sandbox = %v, want ErrTampered", err)
	}
}

func TestCommandIDConflict(t *testing.T) {
	d := newDir(t)
	if _, err := d.Append(exec("c1"), nil); err != nil {
		t.Fatal(err)
	}
	other := exec("c1")
	other.Code = "2"
	bash := exec("c1")
	bash.Language = ioproto.LanguageBash
	for _, dir := range []*Dir{d, New(d.Path())} { // in memory, and loaded from the log
		for _, rec := range []ioproto.Record{other, bash} {
			if _, err := dir.Append(rec, nil); !errors.Is(err, ErrConflict) {
				t.Errorf("Append of c1 with %+v = %v, want ErrConflict", rec, err)
			}
		}
		same := exec("c1")
		same.Language = "" // the default, python
		same.TimeoutMS = 5000
		if appended, err := dir.Append(same, nil); appended || err != nil {
			t.Errorf("Append of the same c1 = %v, %v; want a replay", appended, err)
		}
	}
	// A malformed record's ID (only the sandbox writes those) replays.
	if err := os.WriteFile(stdinPath(d), []byte(`{"type":"exec","command_id":"bad","language":"cobol"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if appended, err := New(d.Path()).Append(exec("bad"), nil); appended || err != nil {
		t.Errorf("Append of a malformed record's ID = %v, %v; want a replay", appended, err)
	}
}

// plant replaces name (a path under io/) with something that is not a file
// sandboxd would read.
func plant(t *testing.T, kind, path string) {
	t.Helper()
	os.Remove(path)
	var err error
	switch kind {
	case "fifo":
		err = syscall.Mkfifo(path, 0o644)
	case "device":
		if os.Geteuid() != 0 {
			t.Skip("mknod needs root")
		}
		err = syscall.Mknod(path, syscall.S_IFCHR|0o644, 1<<8|3) // /dev/null's 1:3
	case "symlink":
		victim := filepath.Join(t.TempDir(), "victim")
		if err := os.WriteFile(victim, []byte(`{"seq":1,"type":"started"}`+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		err = os.Symlink(victim, path)
	case "hardlink":
		other := path + ".orig"
		if err := os.WriteFile(other, []byte(`{"seq":1,"type":"started"}`+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		err = os.Link(other, path)
	case "dir":
		err = os.Mkdir(path, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
}

var plantKinds = []string{"fifo", "device", "symlink", "hardlink", "dir"}

func TestPlantedLog(t *testing.T) {
	for _, kind := range plantKinds {
		t.Run(kind, func(t *testing.T) {
			d := newDir(t)
			plant(t, kind, stdinPath(d))
			if err := appendTimed(t, d, exec("c1")); !errors.Is(err, ErrTampered) {
				t.Errorf("Append with stdin a %s = %v, want ErrTampered", kind, err)
			}
		})
	}
}

func TestPlantedEvents(t *testing.T) {
	for _, kind := range plantKinds {
		t.Run(kind, func(t *testing.T) {
			d := newDir(t)
			if _, err := d.Append(exec("c1"), nil); err != nil {
				t.Fatal(err)
			}
			plant(t, kind, outPath(d, ioproto.EventsFileName("c1")))
			evs, err := d.Events("c1", 0, discard)
			if err != nil {
				t.Fatal(err)
			}
			defer evs.Close()
			n := 0
			if _, err := evs.Drain(func(ioproto.Event) error { n++; return nil }); !errors.Is(err, ErrTampered) || n != 0 {
				t.Errorf("Drain with the events file a %s = %v after %d events, want ErrTampered", kind, err, n)
			}
		})
	}
}

// writeEvents writes c1's events file.
func writeEvents(t *testing.T, d *Dir, lines ...string) {
	t.Helper()
	if err := os.WriteFile(outPath(d, ioproto.EventsFileName("c1")), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// drainAll drains c1's events once, returning them.
func drainAll(t *testing.T, d *Dir, log *slog.Logger) ([]ioproto.Event, bool, error) {
	t.Helper()
	if _, err := d.Append(exec("c1"), nil); err != nil {
		t.Fatal(err)
	}
	evs, err := d.Events("c1", 0, log)
	if err != nil {
		t.Fatal(err)
	}
	defer evs.Close()
	var got []ioproto.Event
	done, err := evs.Drain(func(ev ioproto.Event) error { got = append(got, ev); return nil })
	return got, done, err
}

func TestPlantedArtifact(t *testing.T) {
	for _, kind := range append(plantKinds, "sparse", "oversized") {
		t.Run(kind, func(t *testing.T) {
			d := newDir(t)
			art := outPath(d, "c1.1.1")
			switch kind {
			case "sparse":
				sparse(t, art, 8<<20)
			case "oversized":
				sparse(t, art, maxArtifactBytes+1)
			default:
				plant(t, kind, art)
			}
			writeEvents(t, d, `{"seq":1,"type":"display","data":{"text/plain":"x"},"refs":{"image/png":"c1.1.1"}}`,
				`{"seq":2,"type":"done","status":"ok"}`)
			got, done, err := drainAll(t, d, discard)
			if err != nil || !done || len(got) != 2 {
				t.Fatalf("Drain = %v, %v, %d events; want both, the artifact skipped", done, err, len(got))
			}
			if _, ok := got[0].Data["image/png"]; ok || got[0].Data["text/plain"] != "x" {
				t.Errorf("display with a %s artifact = %+v, want the artifact left out", kind, got[0].Data)
			}
		})
	}
}

func TestRefsBounded(t *testing.T) {
	d := newDir(t)
	// One artifact of 12 MiB, referred to by 40 MIME types: read once,
	// delivered within the event's budget (40 MiB: three copies), the refs
	// past maxRefsPerEvent dropped.
	content := strings.Repeat("a", 12<<20)
	if err := os.WriteFile(outPath(d, "c1.1.1"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	var refs []string
	for i := range 40 {
		refs = append(refs, fmt.Sprintf(`"text/x-%02d":"c1.1.1"`, i))
	}
	writeEvents(t, d, `{"seq":1,"type":"display","refs":{`+strings.Join(refs, ",")+`}}`,
		`{"seq":2,"type":"done","status":"ok"}`)
	logs := &countingHandler{}
	before := artifactReads.Load()
	got, done, err := drainAll(t, d, slog.New(logs))
	if err != nil || !done || len(got) != 2 {
		t.Fatalf("Drain = %v, %v, %d events", done, err, len(got))
	}
	if n := artifactReads.Load() - before; n != 1 {
		t.Errorf("the artifact was read %d times, want once", n)
	}
	total := 0
	for _, v := range got[0].Data {
		total += len(v)
	}
	if total > maxEventArtifactBytes || len(got[0].Data) != 3 {
		t.Errorf("display carries %d values, %d bytes; want 3 within %d", len(got[0].Data), total, maxEventArtifactBytes)
	}
	if got[0].Refs != nil {
		t.Errorf("refs left in the event: %d", len(got[0].Refs))
	}
	if n := logs.count(); n > 2 {
		t.Errorf("%d log records for one event's bad refs, want at most 2 (first, summary)", n)
	}
}

func TestMalformedFloodLoggedOnce(t *testing.T) {
	d := newDir(t)
	lines := []string{`{"seq":1,"type":"started"}`}
	for range 20000 {
		lines = append(lines, "not json at all")
	}
	lines = append(lines, strings.Repeat("x", maxEventLine+10), `{"seq":2,"type":"done","status":"ok"}`)
	writeEvents(t, d, lines...)
	logs := &countingHandler{}
	got, done, err := drainAll(t, d, slog.New(logs))
	if err != nil || !done || len(got) != 2 {
		t.Fatalf("Drain = %v, %v, %d events", done, err, len(got))
	}
	// The first malformed line, the first over-long one, the summary.
	if n := logs.count(); n > 3 {
		t.Errorf("%d log records for 20000 malformed lines, want at most 3", n)
	}
}

func TestEventsSparseOrHuge(t *testing.T) {
	for _, size := range []int64{64 << 20, maxEventsFile + 1} {
		d := newDir(t)
		writeEvents(t, d, `{"seq":1,"type":"started"}`)
		sparse(t, outPath(d, ioproto.EventsFileName("c1")), size)
		start := time.Now()
		if _, _, err := drainAll(t, d, discard); !errors.Is(err, ErrTampered) {
			t.Errorf("Drain of a %d-byte sparse events file = %v, want ErrTampered", size, err)
		}
		if el := time.Since(start); el > 2*time.Second {
			t.Errorf("refusing took %v", el)
		}
	}
}

func TestDrainStopsOnCancelAndClose(t *testing.T) {
	d := newDir(t)
	if _, err := d.Append(exec("c1"), nil); err != nil {
		t.Fatal(err)
	}
	// Enough events that a Drain checks its context several times.
	var lines []string
	for i := range 1000 {
		lines = append(lines, fmt.Sprintf(`{"seq":%d,"type":"stdout","text":"x"}`, i+1))
	}
	writeEvents(t, d, lines...)

	ctx, cancel := context.WithCancel(context.Background())
	evs, err := d.EventsContext(ctx, "c1", 0, discard)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	_, err = evs.Drain(func(ioproto.Event) error {
		if n++; n == 10 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || n >= 1000 {
		t.Errorf("Drain after cancel = %v after %d events, want context.Canceled well before the end", err, n)
	}
	evs.Close()

	evs, err = d.Events("c1", 0, discard)
	if err != nil {
		t.Fatal(err)
	}
	// An open reader keeps Close waiting (bounded), until it is closed.
	if d.Close(20 * time.Millisecond) {
		t.Error("Close reported no reader while one is open")
	}
	if _, err := evs.Drain(func(ioproto.Event) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Errorf("Drain after Close = %v, want ErrClosed", err)
	}
	evs.Close()
	if !d.Close(time.Second) {
		t.Error("Close still waiting after the reader closed")
	}
	if _, err := d.Events("c1", 0, discard); !errors.Is(err, ErrClosed) {
		t.Errorf("Events after Close = %v, want ErrClosed", err)
	}
}

// TestLoadHoldsNoLock: while a (large, legitimate) log is being loaded,
// HoldAppends, which a Delete takes, does not wait for it, and Close stops
// the load at its next check.
func TestLoadHoldsNoLock(t *testing.T) {
	d := newDir(t)
	f, err := os.Create(stdinPath(d))
	if err != nil {
		t.Fatal(err)
	}
	code := strings.Repeat("x", 1<<20)
	for i := range 300 {
		fmt.Fprintf(f, `{"type":"exec","command_id":"c%d","code":"%s"}`+"\n", i, code)
	}
	f.Close()
	loaded := make(chan error, 1)
	go func() { loaded <- d.Load(context.Background()) }()
	for deadline := time.Now().Add(10 * time.Second); ; {
		d.mu.Lock()
		loading := d.loading != nil
		d.mu.Unlock()
		if loading {
			break
		}
		select {
		case err := <-loaded:
			t.Skipf("the load ended (%v) before it could be observed", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the load never started")
		}
	}
	start := time.Now()
	stillLoading := false
	d.HoldAppends(func() { stillLoading = d.loading != nil })
	if !stillLoading {
		t.Skip("the load ended before HoldAppends: inconclusive")
	}
	t.Logf("HoldAppends during a load of a 300 MiB log: %v", time.Since(start))
	start = time.Now()
	if !d.Close(5 * time.Second) {
		t.Fatal("Close: the load still holds the log 5 s later")
	}
	select {
	case err := <-loaded:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("load cut by Close = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the load did not return after Close")
	}
	t.Logf("Close stopped the load in %v", time.Since(start))
}

// TestPlantedLogAfterLoad: a log already loaded is opened only to append;
// a FIFO planted then (no reader: open fails with ENXIO) is tampering too,
// not an internal error.
func TestPlantedLogAfterLoad(t *testing.T) {
	for _, kind := range plantKinds {
		t.Run(kind, func(t *testing.T) {
			d := newDir(t)
			if err := appendTimed(t, d, exec("c1")); err != nil {
				t.Fatal(err)
			}
			plant(t, kind, stdinPath(d))
			if err := appendTimed(t, d, exec("c2")); !errors.Is(err, ErrTampered) {
				t.Errorf("Append with stdin replaced by a %s after the load = %v, want ErrTampered", kind, err)
			}
		})
	}
}

// TestEventsShrunk: an events file truncated under a reader (the driver
// only appends) is tampering; the reader must not wait at a position the
// file never reaches again.
func TestEventsShrunk(t *testing.T) {
	d := newDir(t)
	if _, err := d.Append(exec("c1"), nil); err != nil {
		t.Fatal(err)
	}
	writeEvents(t, d, `{"seq":1,"type":"started"}`, `{"seq":2,"type":"stdout","text":"`+strings.Repeat("a", 4096)+`"}`)
	evs, err := d.Events("c1", 0, discard)
	if err != nil {
		t.Fatal(err)
	}
	defer evs.Close()
	n := 0
	count := func(ioproto.Event) error { n++; return nil }
	if done, err := evs.Drain(count); done || err != nil || n != 2 {
		t.Fatalf("first Drain = %v, %v after %d events; want 2 events, not done", done, err, n)
	}
	// Rewrite it in place, shorter (same inode: the reader's descriptor
	// sees the new size).
	if err := os.Truncate(outPath(d, ioproto.EventsFileName("c1")), 0); err != nil {
		t.Fatal(err)
	}
	writeEvents(t, d, `{"seq":3,"type":"done","status":"ok"}`)
	if _, err := evs.Drain(count); !errors.Is(err, ErrTampered) {
		t.Errorf("Drain of a shrunk events file = %v, want ErrTampered", err)
	}
}
