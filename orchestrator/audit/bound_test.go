package audit

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
)

// TestRefusedHugeReferenceBounded: a DeleteVolume the domain refuses, with
// a 3 MiB reference, writes a record of a few hundred bytes, not 3 MiB.
func TestRefusedHugeReferenceBounded(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	m := Audited(coretest.Validated(fake()), l)
	ctx := core.WithCaller(t.Context(), core.Caller{Tenant: "acme", Name: "ci-bot"})
	huge := strings.Repeat("v", 3<<20)
	if err := m.DeleteVolume(ctx, huge, false); err == nil {
		t.Fatal("DeleteVolume(3 MiB reference) succeeded")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) == 0 || len(b) > 2048 {
		t.Errorf("the refused call's record is %d bytes; want one record of at most 2 KiB", len(b))
	}
}

// TestEveryStringBounded sets every string field of an Event, found by
// reflection, to 1 MiB: bounded must cut each, whatever fields a later
// change adds; a field of another kind that could hold strings (a list, a
// map, a struct) fails the test until it is bounded too.
func TestEveryStringBounded(t *testing.T) {
	var e Event
	v := reflect.ValueOf(&e).Elem()
	var names []string
	for i := range v.NumField() {
		f, sf := v.Field(i), v.Type().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(strings.Repeat("é", 1<<19))
			names = append(names, sf.Name)
		case reflect.Bool, reflect.Int, reflect.Int32, reflect.Int64:
		default:
			if sf.Type != reflect.TypeFor[time.Time]() {
				// A list, a map or a struct may hold strings bounded() does not see.
				t.Errorf("Event.%s is a %s: bound it in bounded() and here", sf.Name, sf.Type)
			}
		}
	}
	if len(names) < 15 {
		t.Fatalf("found only %d string fields: %v", len(names), names)
	}
	b := reflect.ValueOf(e.bounded())
	for i, f := range reflect.VisibleFields(b.Type()) {
		s := b.Field(i)
		if s.Kind() != reflect.String {
			continue
		}
		limit := maxField
		if f.Name == "Message" {
			limit = maxMessage
		}
		if got := s.Len(); got > limit+len("…") || got == 0 || !utf8.ValidString(s.String()) || !strings.HasSuffix(s.String(), "…") {
			t.Errorf("bounded() left %s at %d bytes (valid UTF-8: %v); want at most %d, cut and marked", f.Name, got, utf8.ValidString(s.String()), limit)
		}
	}
}

func TestBound(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 8, "short"},
		{"exactly8", 8, "exactly8"},
		{"abcdefghij", 8, "abcdefgh…"},
		{"aaaaaaaé", 8, "aaaaaaa…"}, // é is 2 bytes: not cut in half
		// Invalid UTF-8 before the cut does not swallow the whole value.
		{"\xffbcdefghij", 8, "\xffbcdefgh…"},
	} {
		if got := bound(c.in, c.n); got != c.want {
			t.Errorf("bound(%q, %d) = %q; want %q", c.in, c.n, got, c.want)
		}
	}
}
