package ioproto

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLineReaderWaitsForCompleteLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := NewLineReader(f, 0, 1024)
	appendRaw(t, path, `{"a":1}`+"\n"+`{"b":`)
	line := mustNext(t, r)
	if string(line.Data) != `{"a":1}` || line.Start != 0 || line.End != 8 {
		t.Fatalf("first line = %q [%d,%d)", line.Data, line.Start, line.End)
	}
	if _, ok, _ := r.Next(); ok {
		t.Fatal("a half-written line was returned")
	}
	appendRaw(t, path, "2}\n")
	line = mustNext(t, r)
	if string(line.Data) != `{"b":2}` || line.Start != 8 || line.End != 16 {
		t.Fatalf("second line = %q [%d,%d)", line.Data, line.Start, line.End)
	}
	if r.Offset() != 16 {
		t.Fatalf("offset = %d, want 16", r.Offset())
	}
	// A reader resumed at a saved offset continues there.
	r2 := NewLineReader(f, 8, 1024)
	if line := mustNext(t, r2); string(line.Data) != `{"b":2}` {
		t.Fatalf("resumed reader read %q", line.Data)
	}
}

func TestLineReaderLongLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	content := strings.Repeat("x", 100) + "\nok\n"
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := NewLineReader(f, 0, 10)
	line := mustNext(t, r)
	if !errors.Is(line.Err, ErrLineTooLong) || len(line.Data) != 10 {
		t.Fatalf("long line: err=%v len=%d", line.Err, len(line.Data))
	}
	if line := mustNext(t, r); string(line.Data) != "ok" || line.Err != nil {
		t.Fatalf("line after the long one = %q (%v)", line.Data, line.Err)
	}
	if r.Offset() != int64(len(content)) {
		t.Fatalf("offset = %d, want %d", r.Offset(), len(content))
	}
}

func TestAppendLineAndAtomicWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "stdin")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := AppendLine(path, []byte("no newline")); err == nil {
		t.Fatal("AppendLine accepted a line without a newline")
	}
	for _, l := range []string{"one\n", "two\n"} {
		if err := AppendLine(path, []byte(l)); err != nil {
			t.Fatal(err)
		}
	}
	if b, _ := os.ReadFile(path); string(b) != "one\ntwo\n" {
		t.Fatalf("log = %q", b)
	}
	state := filepath.Join(dir, StateFile)
	if err := WriteJSONFileAtomic(state, State{Version: 1, Offset: 42}, 0o644); err != nil {
		t.Fatal(err)
	}
	var st State
	if err := ReadJSONFile(state, &st); err != nil || st.Offset != 42 {
		t.Fatalf("state = %+v, %v", st, err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("temporary file left behind: %s", e.Name())
		}
	}
}

func TestFileNames(t *testing.T) {
	if got := EventsFileName("c1"); got != "c1.events" {
		t.Errorf("EventsFileName = %q", got)
	}
	if id, ok := CommandIDFromEventsFile("c1.events"); !ok || id != "c1" {
		t.Errorf("CommandIDFromEventsFile(c1.events) = %q, %v", id, ok)
	}
	for _, name := range []string{".tmp-c1.events", "c1.4.1", "c1.events.bak"} {
		if _, ok := CommandIDFromEventsFile(name); ok {
			t.Errorf("CommandIDFromEventsFile(%q) accepted a non-events file", name)
		}
	}
	if got := ArtifactFileName("c1", 4, 2); got != "c1.4.2" {
		t.Errorf("ArtifactFileName = %q", got)
	}
}

func TestParseEvent(t *testing.T) {
	e, err := ParseEvent([]byte(`{"seq":3,"type":"stdout","text":"hi\n"}`))
	if err != nil || e.Seq != 3 || e.Text != "hi\n" {
		t.Fatalf("ParseEvent = %+v, %v", e, err)
	}
	for _, bad := range []string{`{"type":"stdout"}`, `{"seq":1}`, `{`} {
		if _, err := ParseEvent([]byte(bad)); err == nil {
			t.Errorf("ParseEvent(%s) accepted a bad line", bad)
		}
	}
}

func appendRaw(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func mustNext(t *testing.T, r *LineReader) Line {
	t.Helper()
	line, ok, err := r.Next()
	if err != nil || !ok {
		t.Fatalf("Next = ok %v, err %v; want a line", ok, err)
	}
	return line
}
