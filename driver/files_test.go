package driver

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

func TestEventsFileArtifactsAndRecovery(t *testing.T) {
	dir := t.TempDir()
	ev, err := createEvents(dir, "c1", "python", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := createEvents(dir, "c1", "python", time.Now()); err != errExists {
		t.Fatalf("second create = %v, want errExists", err)
	}
	png := strings.Repeat("\x89PNG", 100_000)
	if err := ev.emit(&ioproto.Event{Type: ioproto.EventDisplay, Data: map[string]string{
		"text/plain": "<Figure>", "image/png": base64.StdEncoding.EncodeToString([]byte(png))}}); err != nil {
		t.Fatal(err)
	}
	ev.close()

	// A driver that died mid-write leaves a torn line; reopening cuts it off.
	f, _ := os.OpenFile(filepath.Join(dir, "c1.events"), os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"seq":3,"type":"std`)
	f.Close()
	ev, done, err := openEvents(dir, "c1")
	if err != nil || done {
		t.Fatalf("openEvents = done %v, err %v", done, err)
	}
	if err := ev.emit(&ioproto.Event{Type: ioproto.EventDone, Status: ioproto.StatusKilled}); err != nil {
		t.Fatal(err)
	}
	ev.close()

	data, _ := os.ReadFile(filepath.Join(dir, "c1.events"))
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("events file:\n%s", data)
	}
	disp, err := ioproto.ParseEvent([]byte(lines[1]))
	if err != nil || disp.Data["text/plain"] != "<Figure>" || disp.Data["image/png"] != "" {
		t.Fatalf("display event: %+v, %v", disp, err)
	}
	art, err := os.ReadFile(filepath.Join(dir, disp.Refs["image/png"]))
	if err != nil || string(art) != png {
		t.Fatalf("artifact holds %d bytes (%v), want the decoded PNG", len(art), err)
	}
	doneEv, _ := ioproto.ParseEvent([]byte(lines[2]))
	if doneEv.Seq != 3 || doneEv.Type != ioproto.EventDone {
		t.Fatalf("done after recovery: %+v", doneEv)
	}
	if _, done, _ := openEvents(dir, "c1"); !done {
		t.Fatal("openEvents did not see done")
	}
}

func TestPrune(t *testing.T) {
	// By age: c0, c1, c2, c4, c5 are minutes old, c3 two hours old.
	ages := []time.Duration{0, time.Minute, 2 * time.Minute, 2 * time.Hour, 3 * time.Minute, 4 * time.Minute}
	tests := []struct {
		name    string
		keepMax int
		want    string
	}{
		// KeepMax drops the oldest by rank (c5, c3).
		{"by count", 4, "c0 c1 c2 c4"},
		// Within KeepMax, only what is older than MaxAge goes (c3).
		{"by age", 10, "c0 c1 c2 c4 c5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			d, err := New(Config{IODir: dir, Workspace: t.TempDir(), KeepMin: 2, KeepMax: tt.keepMax, MaxAge: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, ioproto.OutDir)
			now := time.Now()
			for i, age := range ages {
				id := "c" + string(rune('0'+i))
				for _, name := range []string{ioproto.EventsFileName(id), ioproto.ArtifactFileName(id, 2, 1)} {
					p := filepath.Join(out, name)
					if err := os.WriteFile(p, []byte("x\n"), 0o644); err != nil {
						t.Fatal(err)
					}
					os.Chtimes(p, now.Add(-age), now.Add(-age))
				}
			}
			entries, _ := os.ReadDir(out) // what recover does at start-up
			d.finished = finishedFrom(entries)
			d.prune()
			var left []string
			entries, _ = os.ReadDir(out)
			for _, e := range entries {
				if id, ok := ioproto.CommandIDFromEventsFile(e.Name()); ok {
					left = append(left, id)
					if _, err := os.Stat(filepath.Join(out, ioproto.ArtifactFileName(id, 2, 1))); err != nil {
						t.Errorf("artifact of kept command %s is gone", id)
					}
				} else if owner, _ := artifactOwner(e.Name()); !strings.Contains(tt.want, owner) {
					t.Errorf("artifact %s of a pruned command is left", e.Name())
				}
			}
			if strings.Join(left, " ") != tt.want {
				t.Fatalf("after prune: %v, want %s", left, tt.want)
			}
		})
	}
}

func TestWorkspaceWatch(t *testing.T) {
	ws := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		os.MkdirAll(filepath.Dir(filepath.Join(ws, name)), 0o755)
		if err := os.WriteFile(filepath.Join(ws, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("old.txt", "o")
	os.Chtimes(filepath.Join(ws, "old.txt"), time.Now().Add(-time.Hour), time.Now().Add(-time.Hour))
	// Written just before the command starts, like an upload: not the
	// command's doing, even though its mtime is within the clock slack.
	write("uploaded.csv", "a,b\n")
	w := watchWorkspace(ws, time.Now())
	write("sub/new.csv", "a,b\n")
	write("old.txt", "changed")
	files := w.changed(10)
	got := map[string]int64{}
	for _, f := range files {
		got[f.Path] = f.Size
	}
	if len(got) != 2 || got["sub/new.csv"] != 4 || got["old.txt"] != 7 {
		t.Fatalf("changed files = %+v, want sub/new.csv and old.txt", files)
	}
	if len(w.changed(1)) != 1 {
		t.Fatal("limit not applied")
	}
}
