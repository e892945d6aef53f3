package iolog

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

func putEvents(t *testing.T, d *Dir, id, content string) {
	t.Helper()
	if err := os.WriteFile(outPath(d, ioproto.EventsFileName(id)), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCommandsAndProgress(t *testing.T) {
	ctx := context.Background()
	d := newDir(t)
	bash := ioproto.Record{Type: ioproto.KindExec, CommandID: "b", Language: ioproto.LanguageBash, Code: "cat", Stdin: true}
	term := ioproto.Record{Type: ioproto.KindExec, CommandID: "t", Language: ioproto.LanguageBash, Code: "vim", Pty: ioproto.PtySize{Rows: 2, Cols: 3}}
	for _, rec := range []ioproto.Record{exec("pruned"), exec("done"), bash, term, exec("queued")} {
		if _, err := d.Append(rec, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Input records name commands but are not commands.
	for _, rec := range []ioproto.Record{ioproto.StdinRecord("b", []byte("x")), {Type: ioproto.KindStdinClose, CommandID: "b"}, {Type: ioproto.KindResize, CommandID: "t", Pty: ioproto.PtySize{Rows: 5, Cols: 5}}} {
		if ok, err := d.Append(rec, nil); !ok || err != nil {
			t.Fatalf("Append(%s) = %v, %v", rec.Type, ok, err)
		}
	}
	if _, err := d.Append(ioproto.StdinRecord("nobody", nil), nil); !errors.Is(err, ErrUnknownCommand) {
		t.Fatalf("stdin for an unknown command: %v", err)
	}
	started := `{"seq":1,"type":"started","command_id":"x","time":"2026-01-02T03:04:05Z"}` + "\n"
	putEvents(t, d, "done", started+`{"seq":2,"type":"stdout","text":"hi"}`+"\n"+`{"seq":3,"type":"done","status":"error","duration_ms":1500,"exit_code":3,"time":"2026-01-02T03:04:07Z"}`+"\n")
	putEvents(t, d, "b", started+`{"seq":2,"type":"stdout","text":"`+strings.Repeat("y", 100<<10)+`"}`+"\n")
	putEvents(t, d, "t", started+`{"seq":2,"type":"done","status":"ok"`) // done not yet complete
	// The driver is past "pruned"'s record (its file is gone), not past "queued"'s.
	pruned, _, _ := d.Command(ctx, "pruned")
	if err := os.WriteFile(filepath.Join(d.Path(), ioproto.StateFile), []byte(`{"version":1,"offset":`+strconv.FormatInt(pruned.recordEnd, 10)+`}`), 0o644); err != nil {
		t.Fatal(err)
	}

	// A fresh Dir, as after a restart, rebuilds the same index from the log.
	for name, dir := range map[string]*Dir{"appended": d, "loaded": New(d.Path())} {
		list, total, err := dir.Commands(ctx, 0, 10)
		if err != nil || total != 5 {
			t.Fatalf("%s: Commands = %d commands, %v", name, total, err)
		}
		var ids []string
		for _, e := range list {
			ids = append(ids, e.ID)
		}
		if got := strings.Join(ids, ","); got != "queued,t,b,done,pruned" {
			t.Fatalf("%s: order %s", name, got)
		}
		if e := list[1]; !e.Pty || !e.Stdin || e.Language != ioproto.LanguageBash {
			t.Errorf("%s: terminal command's entry %+v", name, e)
		}
		if e := list[2]; e.Pty || !e.Stdin {
			t.Errorf("%s: stdin command's entry %+v", name, e)
		}
		// Pages: two, then from before the second's position.
		page, _, _ := dir.Commands(ctx, 0, 2)
		rest, _, _ := dir.Commands(ctx, page[1].Index, 10)
		if len(rest) != 3 || rest[0].ID != "b" {
			t.Errorf("%s: the page after %v is %v", name, page, rest)
		}

		prog, err := dir.Progress(ctx, list)
		if err != nil {
			t.Fatal(err)
		}
		want := []Phase{PhaseQueued, PhaseRunning, PhaseRunning, PhaseFinished, PhaseFinished}
		for i, p := range prog {
			if p.Phase != want[i] {
				t.Errorf("%s: %s is in phase %v; want %v", name, list[i].ID, p.Phase, want[i])
			}
		}
		if p := prog[3]; p.Done == nil || p.Done.Status != "error" || *p.Done.ExitCode != 3 || p.Done.DurationMS != 1500 || !p.OutputAvailable ||
			!p.StartedAt.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
			t.Errorf("%s: finished command's progress %+v", name, p)
		}
		if p := prog[4]; p.Done != nil || p.OutputAvailable {
			t.Errorf("%s: pruned command's progress %+v", name, p)
		}
	}
}

// A forged events file costs a bounded read and is reported, not an error.
func TestProgressOfForgedEvents(t *testing.T) {
	ctx := context.Background()
	d := newDir(t)
	for _, id := range []string{"sparse", "link", "fifo", "longdone"} {
		if _, err := d.Append(exec(id), nil); err != nil {
			t.Fatal(err)
		}
	}
	sparse(t, outPath(d, ioproto.EventsFileName("sparse")), 1<<40)
	if err := os.Symlink("/etc/passwd", outPath(d, ioproto.EventsFileName("link"))); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(outPath(d, ioproto.EventsFileName("fifo")), 0o644); err != nil {
		t.Fatal(err)
	}
	// A "done" line longer than the tail bound is not looked for further.
	putEvents(t, d, "longdone", `{"seq":1,"type":"started"}`+"\n"+`{"seq":2,"type":"done","status":"ok","reason":"`+strings.Repeat("r", maxTailBytes)+`"}`+"\n")
	list, _, err := d.Commands(ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	prog, err := d.Progress(ctx, list)
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("Progress took %v over forged files", el)
	}
	for i, p := range prog {
		want := PhaseUnknown
		if list[i].ID == "longdone" {
			want = PhaseRunning
		}
		if p.Phase != want {
			t.Errorf("%s: phase %v; want %v", list[i].ID, p.Phase, want)
		}
	}
}
