package driver

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/sandboxd/sandboxd/ioproto"
)

func TestJSONLen(t *testing.T) {
	for _, s := range []string{"", "hello\n", "\x00\x01\x1f", `"\<>&`, "tab\there", "€uro ñ 😀", "\u2028\u2029", "mixed \x00 é \n"} {
		b, _ := json.Marshal(s)
		if got, want := jsonLen(s), int64(len(b)-2); got != want {
			t.Errorf("jsonLen(%q) = %d, encoding/json writes %d", s, got, want)
		}
	}
	if got := jsonPrefix("ab\x00cd", 8); got != "ab\x00" {
		t.Errorf("jsonPrefix = %q, want the NUL (6 bytes escaped) in and no more", got)
	}
	if got := jsonPrefix("a€b", 3); got != "a" {
		t.Errorf("jsonPrefix cut a character: %q", got)
	}
}

// TestOutputCapCountsEscapedBytes: NUL bytes take six bytes each in an
// events file, and the cap counts those.
func TestOutputCapCountsEscapedBytes(t *testing.T) {
	dir := t.TempDir()
	d := &Driver{cfg: Config{MaxOutput: 600}}
	d.cfg.setDefaults()
	ev, err := createEvents(dir, "c1", "bash", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		d.emitText(ev, ioproto.EventStdout, strings.Repeat("\x00", 100))
	}
	ev.close()
	var kept int
	for _, e := range readEventsFile(t, filepath.Join(dir, "c1.events")) {
		if e.Type == ioproto.EventStdout {
			kept += len(e.Text)
		}
	}
	if kept != 100 {
		t.Fatalf("kept %d NUL bytes, want 100 (600 bytes as stored)", kept)
	}
	if ev.output > 600 {
		t.Fatalf("counted %d stored bytes past the 600 cap", ev.output)
	}
}

// TestDiskLimitBoundsFraming: one-byte writes cannot make the events file
// many times the cap.
func TestDiskLimitBoundsFraming(t *testing.T) {
	dir := t.TempDir()
	d := &Driver{cfg: Config{MaxOutput: 1 << 20}}
	d.cfg.setDefaults()
	ev, err := createEvents(dir, "c1", "bash", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ev.lim = limits{output: 1 << 20, disk: 64 << 10}
	for range 10_000 {
		d.emitText(ev, ioproto.EventStdout, "x")
	}
	ev.close()
	st, _ := os.Stat(filepath.Join(dir, "c1.events"))
	if st.Size() > 64<<10+1024 || ev.dropped == 0 {
		t.Fatalf("events file %d bytes, dropped %d: the disk limit did not apply", st.Size(), ev.dropped)
	}
}

// TestOutputReaderNonce: with a nonce, only markers carrying it are
// markers; forged ones (the old form, or a guessed nonce) are text.
func TestOutputReaderNonce(t *testing.T) {
	nonce := "0123456789abcdef0123456789abcdef"
	real := "\x00\x1eSBX-SYNC:" + nonce + ":1\x1e\x00"
	forged := []string{
		"\x00\x1eSBX-SYNC:7\x1e\x00",
		"\x00\x1eSBX-SYNC:ffffffffffffffffffffffffffffffff:7\x1e\x00",
		"\x00\x1eSBX-SYNC:" + nonce[:31] + ":7\x1e\x00",
	}
	for _, f := range forged {
		out := make(chan outputItem, 1024)
		o := &outputReader{stream: "stdout", markers: true, nonce: nonce, out: out, stop: make(chan struct{})}
		in := "a" + f + "b" + real[:5]
		o.pump(&chunkReader{chunks: []string{in, real[5:] + "c"}})
		close(out)
		var items []outputItem
		for it := range out {
			items = append(items, it)
		}
		var text strings.Builder
		syncs := 0
		for _, it := range items {
			text.WriteString(it.text)
			if it.sync > 0 {
				syncs++
				if it.sync != 1 || text.String() != "a"+f+"b" {
					t.Fatalf("forged %q: marker %d after %q", f, it.sync, text.String())
				}
			}
		}
		if syncs != 1 || text.String() != "a"+f+"bc" {
			t.Fatalf("forged %q: text %q with %d markers; want all text and the one real marker", f, text.String(), syncs)
		}
	}
}

// TestIOFullAnswersCommands runs the driver in-process while statfs says
// /io is nearly full: the command is answered with done and the reason,
// not run, and /io/driver.json says the sandbox is unhealthy until space
// is back.
func TestIOFullAnswersCommands(t *testing.T) {
	io := t.TempDir()
	var free int64 = 100 << 10
	h := startDriver(t, io, func(d *Driver) {
		d.statfsHook = func(string) (int64, int64, error) { return free, 1 << 30, nil }
	})
	h.submit("full", "bash", "echo ran > ran.txt")
	d := lastEvent(t, h.wait("full"))
	if d.Status != ioproto.StatusError || !strings.HasPrefix(d.Reason, "/io is full") || !strings.Contains(d.Reason, "not run") {
		t.Fatalf("done = %+v, want status error and a reason saying /io is full", d)
	}
	if _, err := os.Stat(filepath.Join(h.ws, "ran.txt")); err == nil {
		t.Fatal("the command ran")
	}
	var st ioproto.DriverStatus
	if err := ioproto.ReadJSONFile(filepath.Join(io, ioproto.DriverStatusFile), &st); err != nil || st.Health != ioproto.HealthIOFull || !strings.Contains(st.HealthReason, "/io is full") {
		t.Fatalf("driver status %+v (%v), want health io_full", st, err)
	}

	free = 1 << 30
	h.submit("ok", "bash", "echo fine")
	if d := lastEvent(t, h.wait("ok")); d.Status != ioproto.StatusOK {
		t.Fatalf("after space came back: %+v", d)
	}
	if err := ioproto.ReadJSONFile(filepath.Join(io, ioproto.DriverStatusFile), &st); err != nil || st.Health != ioproto.HealthOK || st.OutBudget == 0 {
		t.Fatalf("driver status %+v (%v), want health ok again and the budget", st, err)
	}
}

// TestIOFullUsesReserve fills a real (tmpfs) /io to the last byte behind
// the driver's back: creating the command's events file fails with ENOSPC,
// and the driver answers it from its reserve. Needs root, to mount.
func TestIOFullUsesReserve(t *testing.T) {
	io := mountTmpfs(t, 8<<20)
	// statfs would see the junk; this test is about a write failing when
	// the free-space check did not foresee it.
	lying := func(d *Driver) {
		d.statfsHook = func(string) (int64, int64, error) { return 1 << 30, 8 << 20, nil }
	}
	h := startDriver(t, io, lying)
	h.submit("first", "bash", "echo first")
	h.wait("first")
	if st, err := os.Stat(filepath.Join(io, ioproto.OutDir, ioproto.ReserveFile)); err != nil || st.Size() != reserveBytes {
		t.Fatalf("reserve: %v, %v", st, err)
	}
	// Stop the driver, queue the command while there is room for the log
	// line, fill the volume, and start a new driver on it. Nothing is left
	// to prune, so only the reserve can answer the command.
	h.stop()
	if err := os.Remove(filepath.Join(io, ioproto.OutDir, ioproto.EventsFileName("first"))); err != nil {
		t.Fatal(err)
	}
	h.submit("victim", "bash", "echo should not run > ran.txt")
	fillUp(t, filepath.Join(io, "junk"))
	h = startDriver(t, io, lying)
	d := lastEvent(t, h.wait("victim"))
	if d.Status != ioproto.StatusError || !strings.Contains(d.Reason, "/io is full") {
		t.Fatalf("victim's done = %+v, want status error, /io is full", d)
	}
	if _, err := os.Stat(filepath.Join(h.ws, "ran.txt")); err == nil {
		t.Fatal("the victim ran")
	}
	var st ioproto.DriverStatus
	if err := ioproto.ReadJSONFile(filepath.Join(io, ioproto.DriverStatusFile), &st); err != nil || st.Health != ioproto.HealthIOFull {
		t.Fatalf("driver status %+v (%v), want io_full", st, err)
	}
}

// TestFinishUsesReserve: when a running command's done cannot be written
// for lack of space and nothing can be pruned, the reserve makes room.
func TestFinishUsesReserve(t *testing.T) {
	io := mountTmpfs(t, 8<<20)
	d, err := New(Config{IODir: io, Workspace: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io2testLog{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	d.setupBudget()
	ev, err := createEvents(d.outDir, "c1", "bash", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// End the events file at a block boundary, so done needs a new block.
	pad := (blockSize - ev.size%blockSize - int64(len(`{"seq":2,"type":"stdout","text":""}`+"\n"))) % blockSize
	if pad < 0 {
		pad += blockSize
	}
	d.emit(ev, &ioproto.Event{Type: ioproto.EventStdout, Text: strings.Repeat("x", int(pad))})
	if ev.size%blockSize != 0 {
		t.Fatalf("events file is %d bytes; the test wants a block boundary", ev.size)
	}
	fillUp(t, filepath.Join(io, "junk"))
	if err := d.finish(ev, &ioproto.Event{Type: ioproto.EventDone, Status: ioproto.StatusOK, Time: time.Now()}); err != nil {
		t.Fatalf("finish on a full /io: %v", err)
	}
	ev.close()
	evs := readEventsFile(t, filepath.Join(d.outDir, "c1.events"))
	if len(evs) != 3 || evs[2].Type != ioproto.EventDone {
		t.Fatalf("events: %+v", evs)
	}
	if _, err := os.Stat(filepath.Join(d.outDir, ioproto.ReserveFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the reserve is still there (%v); done should have needed it", err)
	}
	var st ioproto.DriverStatus
	if err := ioproto.ReadJSONFile(filepath.Join(io, ioproto.DriverStatusFile), &st); err != nil || st.Health != ioproto.HealthIOFull {
		t.Fatalf("driver status %+v (%v), want io_full", st, err)
	}
}

// TestTornLineIsCutOff: an event that a full volume cut short is removed,
// so the next one starts on a line of its own.
func TestTornLineIsCutOff(t *testing.T) {
	io := mountTmpfs(t, 4<<20)
	ev, err := createEvents(io, "c1", "bash", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	fillUp(t, filepath.Join(io, "junk"))
	// Bigger than what is left in the file's last block.
	err = ev.emit(&ioproto.Event{Type: ioproto.EventStdout, Text: strings.Repeat("y", 64<<10)})
	if !isNoSpace(err) {
		t.Fatalf("emit on a full volume: %v", err)
	}
	if err := ev.emit(&ioproto.Event{Type: ioproto.EventDone, Status: ioproto.StatusOK}); err != nil {
		t.Fatal(err)
	}
	ev.close()
	evs := readEventsFile(t, filepath.Join(io, "c1.events"))
	if len(evs) != 2 || evs[1].Type != ioproto.EventDone || evs[1].Seq != 2 {
		t.Fatalf("events after a torn write: %+v", evs)
	}
}

// mountTmpfs mounts a tmpfs of size bytes on a temporary directory. It
// needs root; the test is skipped otherwise (and fails in CI).
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+strconv.FormatInt(size, 10), "tmpfs", dir).CombinedOutput(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mount tmpfs: %v: %s", err, out)
		}
		t.Skipf("cannot mount a tmpfs (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// fillUp writes path until its volume is full, to the last byte.
func fillUp(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for n := len(buf); n > 0; {
		if _, err := f.Write(buf[:n]); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			n /= 2
		}
	}
}

// driverHarness runs a Driver in-process on a temporary /io.
type driverHarness struct {
	t      *testing.T
	io, ws string
	stop   func()
}

func startDriver(t *testing.T, io string, tweak func(*Driver)) *driverHarness {
	t.Helper()
	ws := t.TempDir()
	if f, err := os.OpenFile(filepath.Join(io, ioproto.StdinFile), os.O_CREATE|os.O_WRONLY, 0o644); err != nil {
		t.Fatal(err)
	} else {
		f.Close()
	}
	d, err := New(Config{IODir: io, Workspace: ws, Wake: "inotify",
		Logger: slog.New(slog.NewTextHandler(io2testLog{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	tweak(d)
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

// io2testLog sends the driver's log to the test's.
type io2testLog struct{ t *testing.T }

func (l io2testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

var _ io.Writer = io2testLog{}

func (h *driverHarness) submit(id, language, code string) {
	h.t.Helper()
	line, err := ioproto.EncodeRecord(ioproto.Record{Type: ioproto.KindExec, CommandID: id, Language: language, Code: code})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := ioproto.AppendLine(filepath.Join(h.io, ioproto.StdinFile), line); err != nil {
		h.t.Fatal(err)
	}
}

// wait returns the command's events once done is written, woken by
// inotify, within a bound.
func (h *driverHarness) wait(id string) []ioproto.Event {
	h.t.Helper()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		h.t.Fatal(err)
	}
	defer w.Close()
	out := filepath.Join(h.io, ioproto.OutDir)
	if err := w.Add(out); err != nil {
		h.t.Fatal(err)
	}
	deadline := time.After(30 * time.Second)
	path := filepath.Join(out, ioproto.EventsFileName(id))
	for {
		if evs := readEventsFile(h.t, path); len(evs) > 0 && evs[len(evs)-1].Type == ioproto.EventDone {
			return evs
		}
		select {
		case <-w.Events:
		case <-deadline:
			h.t.Fatalf("command %s: no done within 30s; events: %+v", id, readEventsFile(h.t, path))
		}
	}
}

func readEventsFile(t *testing.T, path string) []ioproto.Event {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var evs []ioproto.Event
	for _, line := range strings.SplitAfter(string(data), "\n") {
		if !strings.HasSuffix(line, "\n") {
			continue
		}
		e, err := ioproto.ParseEvent([]byte(line[:len(line)-1]))
		if err != nil {
			t.Fatalf("%s: %v: %q", path, err, line)
		}
		evs = append(evs, e)
	}
	return evs
}

func lastEvent(t *testing.T, evs []ioproto.Event) ioproto.Event {
	t.Helper()
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	return evs[len(evs)-1]
}
