package ioproto

import (
	"errors"
	"strings"
	"testing"
)

func TestCleanContextCwd(t *testing.T) {
	for in, want := range map[string]string{"": ".", ".": ".", "a": "a", "a/b/": "a/b", "./a//b": "a/b", "a/../b": "b", "a/..": "."} {
		if got, err := CleanContextCwd(in); err != nil || got != want {
			t.Errorf("CleanContextCwd(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"/etc", "..", "../x", "a/../../x", "a\x00b", "\xff", strings.Repeat("a", MaxContextCwdLen+1)} {
		if got, err := CleanContextCwd(in); err == nil {
			t.Errorf("CleanContextCwd(%q) = %q; want an error", in, got)
		}
	}
}

func TestContextRecords(t *testing.T) {
	ok := []string{
		`{"type":"context","command_id":"o1","op":"create","context_id":"c1","language":"python","cwd":"a/"}`,
		`{"type":"context","command_id":"o2","op":"create","context_id":"c1","language":"bash"}`,
		`{"type":"context","command_id":"o3","op":"restart","context_id":"default"}`,
		`{"type":"context","command_id":"o4","op":"delete","context_id":"c1"}`,
		`{"type":"exec","command_id":"e1","code":"1","context_id":"c1"}`,
	}
	for _, line := range ok {
		if _, _, err := ParseRecord([]byte(line)); err != nil {
			t.Errorf("%s: %v", line, err)
		}
	}
	r, _, _ := ParseRecord([]byte(ok[0]))
	if r.Cwd != "a" {
		t.Errorf("cwd not normalised: %q", r.Cwd)
	}
	bad := []string{
		`{"type":"context","command_id":"b1","op":"create","context_id":"default","language":"python"}`,
		`{"type":"context","command_id":"b2","op":"create","context_id":"c1"}`,
		`{"type":"context","command_id":"b3","op":"create","context_id":"c1","language":"cobol"}`,
		`{"type":"context","command_id":"b4","op":"create","context_id":"c1","language":"python","cwd":"../x"}`,
		`{"type":"context","command_id":"b5","op":"explode","context_id":"c1"}`,
		`{"type":"context","command_id":"b6","context_id":"c1"}`,
		`{"type":"context","command_id":"b7","op":"delete","context_id":"../c"}`,
		`{"type":"exec","command_id":"b8","code":"1","context_id":"` + strings.Repeat("c", MaxContextIDLen+1) + `"}`,
	}
	for _, line := range bad {
		_, id, err := ParseRecord([]byte(line))
		if !errors.Is(err, ErrMalformed) || id == "" {
			t.Errorf("%s: err %v, id %q; want malformed with its command ID", line, err, id)
		}
	}
}
