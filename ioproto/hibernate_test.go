package ioproto

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestHibResultSanitized: what a sandbox reports about a hibernation is
// bounded and valid UTF-8 before the host uses it.
func TestHibResultSanitized(t *testing.T) {
	r := &HibResult{Level: "bogus", Bytes: -5, Reason: "bad \xff byte"}
	for i := range MaxHibNames + 10 {
		r.Names = append(r.Names, strings.Repeat("n", 300)+string(rune('a'+i%26)))
		r.Lost = append(r.Lost, LostName{Name: "x\xfe", Why: strings.Repeat("é", 400)})
	}
	s := r.Sanitized()
	if s.Level != LevelFiles || s.Bytes != 0 {
		t.Errorf("level %q bytes %d; want files, 0", s.Level, s.Bytes)
	}
	if len(s.Names) != MaxHibNames || len(s.Lost) != MaxHibNames || !strings.Contains(s.Reason, "10 more names not listed") {
		t.Errorf("names %d lost %d reason %q", len(s.Names), len(s.Lost), s.Reason)
	}
	for _, n := range s.Names {
		if len(n) > MaxHibNameLen || !utf8.ValidString(n) {
			t.Fatalf("name not bounded: %d bytes", len(n))
		}
	}
	for _, l := range s.Lost {
		if len(l.Why) > MaxHibNameLen || !utf8.ValidString(l.Why) || !utf8.ValidString(l.Name) {
			t.Fatalf("lost entry not sanitised: %q", l)
		}
	}
	if (*HibResult)(nil).Sanitized() != nil {
		t.Error("nil should stay nil")
	}
}

func TestHibRecordValidate(t *testing.T) {
	for _, tc := range []struct {
		rec Record
		ok  bool
	}{
		{Record{Type: KindSnapshot, CommandID: "s1", Snapshot: "snap-1"}, true},
		{Record{Type: KindSnapshot, CommandID: "s1"}, false},
		{Record{Type: KindSnapshot, CommandID: "s1", Snapshot: "../etc/passwd"}, false},
		{Record{Type: KindSnapshot, CommandID: "s1", Snapshot: ".tmp-x"}, false},
		{Record{Type: KindRestore, CommandID: "r1", Level: LevelFiles}, true},
		{Record{Type: KindRestore, CommandID: "r1", Level: LevelGlobals, Snapshot: "snap-1"}, true},
		{Record{Type: KindRestore, CommandID: "r1", Level: LevelGlobals}, false},
		{Record{Type: KindRestore, CommandID: "r1", Level: LevelMemory}, true},
		{Record{Type: KindRestore, CommandID: "r1", Level: "disk"}, false},
		{Record{Type: KindRestore, CommandID: "r1", Level: LevelFiles, ContextID: "ctx-1"}, false},
	} {
		err := tc.rec.Validate()
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrMalformed)) {
			t.Errorf("%+v: %v; want ok=%v", tc.rec, err, tc.ok)
		}
		if err == nil && tc.rec.Language != LanguagePython {
			t.Errorf("%+v: language not set to python", tc.rec)
		}
	}
}
