package iolog

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/ioproto"
)

func TestReadContexts(t *testing.T) {
	dir := t.TempDir()
	d := New(dir)
	path := filepath.Join(dir, ioproto.ContextsFile)

	list, err := d.ReadContexts()
	if err != nil || len(list) != 1 || list[0].ID != ioproto.DefaultContext {
		t.Fatalf("no file: %v, %v; want the default context alone", list, err)
	}

	// A forged file: bad entries are dropped, the rest kept in order, the
	// default first whatever the file says.
	var entries []string
	entries = append(entries,
		`{"id":"ok1","language":"python","cwd":"a/","created_at":"2026-01-02T03:04:05Z"}`,
		`{"id":"../evil","language":"python","cwd":"."}`,
		`{"id":"lang","language":"cobol","cwd":"."}`,
		`{"id":"esc","language":"python","cwd":"../.."}`,
		`{"id":"ok1","language":"bash","cwd":"."}`,
		`{"id":"default","language":"bash","cwd":"x"}`,
		`{"id":"old","language":"bash","cwd":".","created_at":"0001-01-01T00:00:00Z","created_by":"../x"}`)
	for i := range 40 {
		entries = append(entries, fmt.Sprintf(`{"id":"f%d","language":"bash","cwd":"."}`, i))
	}
	if err := os.WriteFile(path, []byte(`{"version":1,"contexts":[`+strings.Join(entries, ",")+`]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	list, err = d.ReadContexts()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != ioproto.MaxContexts+1 || list[0].ID != ioproto.DefaultContext || list[0].Language != "python" || list[0].Cwd != "." {
		t.Fatalf("got %d contexts, first %+v; want %d, the real default first", len(list), list[0], ioproto.MaxContexts+1)
	}
	if list[1].ID != "ok1" || list[1].Cwd != "a" || list[1].Language != "python" || list[2].ID != "old" || list[2].CreatedBy != "" {
		t.Fatalf("kept entries: %+v %+v", list[1], list[2])
	}

	// Oversized, symlinked and undecodable files are refused.
	if err := os.WriteFile(path, make([]byte, ioproto.MaxContextsFileBytes+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := d.ReadContexts(); err == nil {
		t.Error("an oversized contexts file was read")
	}
	os.Remove(path)
	if err := os.Symlink("/etc/passwd", path); err != nil {
		t.Fatal(err)
	}
	if _, err := d.ReadContexts(); err == nil {
		t.Error("a symlinked contexts file was read")
	}
	os.Remove(path)
	os.WriteFile(path, []byte("{not json"), 0o644)
	if _, err := d.ReadContexts(); err == nil {
		t.Error("an undecodable contexts file was accepted")
	}
}

// TestContextRecordsAppendOnce: context records are appended once per ID,
// and an exec's context is part of what it is.
func TestContextRecordsAppendOnce(t *testing.T) {
	d := newDir(t)
	op := ioproto.Record{Type: ioproto.KindContext, CommandID: "op1", Op: ioproto.ContextCreate, ContextID: "c1", Language: "python"}
	for i, want := range []bool{true, false} {
		if appended, err := d.Append(op, nil); err != nil || appended != want {
			t.Fatalf("context record #%d: %v, %v; want %v", i+1, appended, err, want)
		}
	}
	other := op
	other.Op = ioproto.ContextDelete
	other.Language = ""
	if _, err := d.Append(other, nil); err != ErrConflict {
		t.Errorf("another op under the same ID: %v, want ErrConflict", err)
	}
	e := exec("e1")
	if appended, err := d.Append(e, nil); !appended || err != nil {
		t.Fatal(err)
	}
	e.ContextID = "c1"
	if _, err := d.Append(e, nil); err != ErrConflict {
		t.Errorf("the same command ID in another context: %v, want ErrConflict", err)
	}
	e.ContextID = ioproto.DefaultContext
	if appended, err := d.Append(e, nil); appended || err != nil {
		t.Errorf("the same command naming the default context: %v, %v; want a replay", appended, err)
	}
}
