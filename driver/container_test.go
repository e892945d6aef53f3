package driver_test

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/ioproto"
)

// These tests run the real driver in real containers from the real sandbox
// image (make image), talking to it only through a temporary host directory
// bind-mounted at /io, exactly as the orchestrator does.

const waitLimit = 60 * time.Second

// requireDocker and hasRuntime are the names driver_test.go calls; the
// skip-or-fail rule is testenv's.
func requireDocker(t *testing.T) {
	t.Helper()
	testenv.NeedDocker(t)
}

func hasRuntime(name string) bool {
	rts, err := testenv.Runtimes()
	return err == nil && slices.Contains(rts, name)
}

type boxOptions struct {
	runtime string   // "" for the engine default (runc)
	env     []string // extra environment, e.g. SANDBOX_WAKE=poll
	pids    int      // pids limit; 0 for 256
	ioBytes int64    // > 0: /io is a tmpfs of this size, like a size-limited volume
}

// box is one sandbox container and its host-side /io and /workspace.
type box struct {
	t         *testing.T
	io, ws    string
	container string
	seq       atomic.Int64
}

func startBox(t *testing.T, opts boxOptions) *box {
	t.Helper()
	requireDocker(t)
	dir := t.TempDir()
	b := &box{t: t, io: filepath.Join(dir, "io"), ws: filepath.Join(dir, "workspace")}
	for _, d := range []string{b.io, b.ws} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, 1000, 1000); err != nil {
			t.Fatal(err)
		}
	}
	if opts.ioBytes > 0 {
		mountIOVolume(t, b.io, opts.ioBytes)
	}
	if err := os.WriteFile(filepath.Join(b.io, ioproto.StdinFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"run", "-d", "--init", "--network", "none", "--user", "1000:1000",
		"--read-only", "--tmpfs", "/tmp:rw,nosuid,nodev,size=64m", "--cap-drop", "ALL",
		"--security-opt", "no-new-privileges", "--memory", "1g", "--pids-limit", strconv.Itoa(cmp.Or(opts.pids, 256)),
		"--restart", "on-failure", "--label", "sandboxd.test=driver",
		"-v", b.io + ":/io", "-v", b.ws + ":/workspace"}
	if opts.runtime != "" {
		args = append(args, "--runtime", opts.runtime)
	}
	for _, e := range opts.env {
		args = append(args, "-e", e)
	}
	args = append(args, testenv.Image())
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker run: %v: %s", err, out)
	}
	b.container = strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := exec.Command("docker", "logs", "--tail", "50", b.container).CombinedOutput()
			t.Logf("driver log (last 50 lines):\n%s", logs)
		}
		exec.Command("docker", "rm", "-f", b.container).Run()
	})
	return b
}

// appendRaw appends bytes to /io/stdin with one write, like the orchestrator.
func (b *box) appendRaw(s string) {
	b.t.Helper()
	f, err := os.OpenFile(filepath.Join(b.io, ioproto.StdinFile), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		b.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		b.t.Fatal(err)
	}
}

// submit appends an exec record and returns its command ID.
func (b *box) submit(language, code string, timeout time.Duration) string {
	b.t.Helper()
	id := fmt.Sprintf("cmd-%d", b.seq.Add(1))
	line, err := ioproto.EncodeRecord(ioproto.Record{Type: ioproto.KindExec, CommandID: id, Language: language, Code: code, TimeoutMS: timeout.Milliseconds()})
	if err != nil {
		b.t.Fatal(err)
	}
	b.appendRaw(string(line))
	return id
}

// py runs Python code and returns its events once done.
func (b *box) py(code string) []ioproto.Event {
	b.t.Helper()
	return b.wait(b.submit("python", code, 0))
}

// readEvents returns the command's events so far (nil if no file yet).
func (b *box) readEvents(id string) []ioproto.Event {
	b.t.Helper()
	data, err := os.ReadFile(filepath.Join(b.io, ioproto.OutDir, ioproto.EventsFileName(id)))
	if err != nil {
		return nil
	}
	var evs []ioproto.Event
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		if len(line) == 0 || line[len(line)-1] != '\n' {
			continue
		}
		ev, err := ioproto.ParseEvent(line[:len(line)-1])
		if err != nil {
			b.t.Fatalf("command %s: %v", id, err)
		}
		if ev.Seq != int64(len(evs)+1) {
			b.t.Fatalf("command %s: event seq %d after %d events", id, ev.Seq, len(evs))
		}
		evs = append(evs, ev)
	}
	return evs
}

// until waits, woken by inotify on /io/out, until cond holds for the
// command's events, and returns them.
func (b *box) until(id string, what string, cond func([]ioproto.Event) bool) []ioproto.Event {
	b.t.Helper()
	return b.untilWithin(id, what, waitLimit, cond)
}

// untilWithin is until with a bound of its own.
func (b *box) untilWithin(id string, what string, waitLimit time.Duration, cond func([]ioproto.Event) bool) []ioproto.Event {
	b.t.Helper()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		b.t.Fatal(err)
	}
	defer w.Close()
	out := filepath.Join(b.io, ioproto.OutDir)
	// The driver creates out/ at start-up; watch /io until it exists.
	if err := w.Add(b.io); err != nil {
		b.t.Fatal(err)
	}
	_ = w.Add(out)
	deadline := time.After(waitLimit)
	for {
		_ = w.Add(out)
		evs := b.readEvents(id)
		if cond(evs) {
			return evs
		}
		select {
		case <-w.Events:
		case err := <-w.Errors:
			b.t.Fatalf("watch: %v", err)
		case <-deadline:
			b.t.Fatalf("command %s: %s not seen within %s; events so far: %s", id, what, waitLimit, dump(evs))
		}
	}
}

func (b *box) wait(id string) []ioproto.Event {
	b.t.Helper()
	return b.until(id, "done", isDone)
}

func isDone(evs []ioproto.Event) bool {
	return len(evs) > 0 && evs[len(evs)-1].Type == ioproto.EventDone
}

func done(t *testing.T, evs []ioproto.Event) ioproto.Event {
	t.Helper()
	if !isDone(evs) {
		t.Fatalf("no done event: %s", dump(evs))
	}
	for i, e := range evs[:len(evs)-1] {
		if e.Type == ioproto.EventDone {
			t.Fatalf("done at position %d is not last: %s", i, dump(evs))
		}
	}
	return evs[len(evs)-1]
}

func stdout(evs []ioproto.Event) string {
	var s strings.Builder
	for _, e := range evs {
		if e.Type == ioproto.EventStdout {
			s.WriteString(e.Text)
		}
	}
	return s.String()
}

func ofType(evs []ioproto.Event, typ string) []ioproto.Event {
	var out []ioproto.Event
	for _, e := range evs {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

func result(t *testing.T, evs []ioproto.Event) map[string]string {
	t.Helper()
	rs := ofType(evs, ioproto.EventResult)
	if len(rs) != 1 {
		t.Fatalf("want one result event, got %d: %s", len(rs), dump(evs))
	}
	return rs[0].Data
}

func dump(evs []ioproto.Event) string {
	var s strings.Builder
	for _, e := range evs {
		b, _ := json.Marshal(e)
		if len(b) > 400 {
			b = append(b[:400], "…"...)
		}
		s.Write(b)
		s.WriteByte('\n')
	}
	return s.String()
}

func expectStatus(t *testing.T, evs []ioproto.Event, status string, stateLost bool) ioproto.Event {
	t.Helper()
	d := done(t, evs)
	if d.Status != status || d.StateLost != stateLost {
		t.Fatalf("done status=%q state_lost=%v, want %q/%v: %s", d.Status, d.StateLost, status, stateLost, dump(evs))
	}
	return d
}

// driverStatus reads /io/driver.json once the driver has written it.
func (b *box) driverStatus() ioproto.DriverStatus {
	b.t.Helper()
	var st ioproto.DriverStatus
	if err := ioproto.ReadJSONFile(filepath.Join(b.io, ioproto.DriverStatusFile), &st); err != nil {
		b.t.Fatalf("read driver status: %v", err)
	}
	return st
}
