package iolog

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

// newDir makes an io/ directory with an empty command log and out/.
func newDir(t *testing.T) *Dir {
	t.Helper()
	p := filepath.Join(t.TempDir(), "io")
	if err := os.MkdirAll(filepath.Join(p, ioproto.OutDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p, ioproto.StdinFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return New(p)
}

var discard = slog.New(slog.DiscardHandler)

func exec(id string) ioproto.Record {
	return ioproto.Record{Type: ioproto.KindExec, CommandID: id, Language: ioproto.LanguagePython, Code: "1"}
}

func TestAppendOnce(t *testing.T) {
	d := newDir(t)
	for i, want := range []bool{true, false} {
		appended, err := d.Append(exec("c1"), nil)
		if err != nil || appended != want {
			t.Fatalf("Append #%d = %v, %v; want %v", i+1, appended, err, want)
		}
	}
	if _, err := d.Append(ioproto.Record{Type: ioproto.KindInterrupt, CommandID: "nope"}, nil); !errors.Is(err, ErrUnknownCommand) {
		t.Errorf("interrupt of an unknown command = %v, want ErrUnknownCommand", err)
	}
	refused := errors.New("sandbox is dead")
	if _, err := d.Append(exec("c2"), func() error { return refused }); err != refused {
		t.Errorf("Append with a refusing ready = %v, want its error", err)
	}
	if _, err := d.Append(ioproto.Record{Type: ioproto.KindInterrupt, CommandID: "c1"}, nil); err != nil {
		t.Errorf("interrupt of c1: %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(d.Path(), ioproto.StdinFile))
	if n := strings.Count(string(b), "\n"); n != 2 {
		t.Errorf("log has %d lines, want 2 (c1 once, its interrupt):\n%s", n, b)
	}
	// A fresh Dir learns the log from the file.
	if appended, err := New(d.Path()).Append(exec("c1"), nil); appended || err != nil {
		t.Errorf("Append of a logged command by a fresh Dir = %v, %v", appended, err)
	}
}

func TestAppendRefusesPlantedLog(t *testing.T) {
	d := newDir(t)
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	stdin := filepath.Join(d.Path(), ioproto.StdinFile)
	os.Remove(stdin)
	if err := os.Symlink(victim, stdin); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Append(exec("c1"), nil); !errors.Is(err, ErrTampered) {
		t.Errorf("Append through a planted symlink = %v, want ErrTampered", err)
	}
	if b, _ := os.ReadFile(victim); len(b) != 0 {
		t.Errorf("the symlink's target was written: %q", b)
	}
}

func TestEvents(t *testing.T) {
	d := newDir(t)
	if _, err := d.Events("c1", 0, discard); !errors.Is(err, ErrUnknownCommand) {
		t.Fatalf("Events of an unknown command = %v", err)
	}
	if _, err := d.Append(exec("c1"), nil); err != nil {
		t.Fatal(err)
	}
	evs, err := d.Events("c1", 1, discard)
	if err != nil {
		t.Fatal(err)
	}
	defer evs.Close()
	var got []int64
	collect := func(ev ioproto.Event) error { got = append(got, ev.Seq); return nil }
	if done, err := evs.Drain(collect); done || err != nil || len(got) != 0 {
		t.Fatalf("Drain before the file exists = %v, %v, %v", done, err, got)
	}
	if evs.Pruned() {
		t.Error("Pruned with no driver state")
	}
	art := ioproto.ArtifactFileName("c1", 2, 0)
	if err := os.WriteFile(filepath.Join(d.Path(), ioproto.OutDir, art), []byte("big"), 0o644); err != nil {
		t.Fatal(err)
	}
	lines := `{"seq":1,"type":"started","command_id":"c1"}` + "\n" +
		`{"seq":2,"type":"display","refs":{"text/plain":"` + art + `"}}` + "\n" +
		"not json\n" +
		`{"seq":3,"type":"done","status":"ok"}` + "\n"
	if err := os.WriteFile(filepath.Join(d.Path(), ioproto.OutDir, ioproto.EventsFileName("c1")), []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	var display ioproto.Event
	done, err := evs.Drain(func(ev ioproto.Event) error {
		if ev.Type == ioproto.EventDisplay {
			display = ev
		}
		return collect(ev)
	})
	if !done || err != nil || len(got) != 2 || got[0] != 2 || got[1] != 3 {
		t.Fatalf("Drain = %v, %v, seqs %v; want done after 2 and 3", done, err, got)
	}
	if display.Data["text/plain"] != "big" || display.Refs != nil {
		t.Errorf("artifact not resolved: %+v", display)
	}
}

func TestEventsPruned(t *testing.T) {
	d := newDir(t)
	if _, err := d.Append(exec("c1"), nil); err != nil {
		t.Fatal(err)
	}
	evs, err := d.Events("c1", 0, discard)
	if err != nil {
		t.Fatal(err)
	}
	defer evs.Close()
	if err := os.WriteFile(filepath.Join(d.Path(), ioproto.StateFile), []byte(`{"offset":1000000}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if !evs.Pruned() {
		t.Error("Pruned = false, though the driver is past the record and the file is missing")
	}
}

func TestWatcher(t *testing.T) {
	w, err := NewWatcher(discard)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	d := newDir(t)
	sub := w.Subscribe(d, "c1")
	other := w.Subscribe(d, "c2")
	if n := w.Watching(); n != 2 {
		t.Fatalf("Watching = %d, want 2", n)
	}
	if err := os.WriteFile(filepath.Join(d.Path(), ioproto.OutDir, ioproto.EventsFileName("c1")), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sub.C:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up for c1's events file")
	}
	select {
	case <-other.C:
		t.Error("c2's subscriber woken by c1's file")
	case <-time.After(50 * time.Millisecond):
	}
	sub.Cancel()
	w.Forget(d) // wakes the remaining subscriber
	select {
	case <-other.C:
	case <-time.After(10 * time.Second):
		t.Fatal("Forget did not wake the remaining subscriber")
	}
	other.Cancel()
	if n := w.Watching(); n != 0 {
		t.Errorf("Watching = %d after Cancel and Forget, want 0", n)
	}
}
