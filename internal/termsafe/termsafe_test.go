package termsafe

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// hostile holds every kind of unsafe rune.
var hostile = []string{
	"a\nb", "a\rb", "a\tb", "\x1b[2J", "\x1b]52;c;ZXZpbA==\x07", "a\x7fb", "a\u0085b", "a\u009bb",
	"\u202etxt.exe", "a\u2066b\u2069", "a\u200bb", "\ufeffa", "a\u2028b", "a\u2029b", "a\ue000b",
	"\xff", "a\xc3", "\x00", "a\vb\fc",
}

// noControl fails when out holds anything a terminal would act on.
func noControl(t *testing.T, in, out string, allowed ...rune) {
	t.Helper()
	for _, r := range out {
		if !unicode.IsGraphic(r) && !strings.ContainsRune(string(allowed), r) {
			t.Errorf("%q printed as %q, which holds %U", in, out, r)
		}
	}
	if !strings.ContainsRune(string(allowed), '\uFFFD') && strings.ContainsRune(out, '\uFFFD') {
		t.Errorf("%q printed as %q: an invalid byte became U+FFFD, not an escape", in, out)
	}
}

func TestField(t *testing.T) {
	for _, s := range []string{"", "plain", "/home/user/notes.txt", "日本語のファイル", "Ωμέγα", "café", "a b", `a\nb`, `it's "quoted"`, "\uFFFD"} {
		if got := Field(s); got != s {
			t.Errorf("Field(%q) = %q; want it unchanged", s, got)
		}
	}
	for _, s := range append(hostile, `"quoted"`, `"`) {
		got := Field(s)
		noControl(t, s, got)
		if back, err := strconv.Unquote(got); err != nil || back != s {
			t.Errorf("Field(%q) = %q, which does not unquote to it (%q, %v)", s, got, back, err)
		}
	}
	if got, want := Field("日本\n語"), `"日本\n語"`; got != want {
		t.Errorf("Field = %s; want %s (letters kept)", got, want)
	}
}

func TestLine(t *testing.T) {
	for _, s := range []string{"", "Get:1 http://deb.debian.org bookworm InRelease", "col1\tcol2", "日本語", `C:\path`} {
		if got := Line(s); got != s {
			t.Errorf("Line(%q) = %q; want it unchanged", s, got)
		}
	}
	for _, s := range hostile {
		got := Line(s)
		noControl(t, s, got, '\t')
		if strings.Contains(got, "\n") {
			t.Errorf("Line(%q) = %q: two lines", s, got)
		}
	}
	for in, want := range map[string]string{
		"\x1b[31mERROR\x1b[0m": `\x1b[31mERROR\x1b[0m`,
		"50%\r100%":            `50%\r100%`,
		"a\nb":                 `a\nb`,
		"\u202eevil":           `\u202eevil`,
		"ok\xffé":              `ok\xffé`,
		"a\x00b":               `a\x00b`,
	} {
		if got := Line(in); got != want {
			t.Errorf("Line(%q) = %s; want %s", in, got, want)
		}
	}
	if got, want := Text("one\ntwo\x1b[2J\n"), "one\ntwo\\x1b[2J\n"; got != want {
		t.Errorf("Text = %q; want %q", got, want)
	}
	for _, s := range hostile {
		noControl(t, s, Text(s), '\t', '\n')
	}
}

func TestJSON(t *testing.T) {
	in := "{\n  \"a\": \"x\\u001b\x7f\u009b\u202e\u2028日本\U0001F600\U000E0001\",\n\t\"b\": [1, 2]\r\n}"
	got := string(JSON([]byte(in)))
	want := "{\n  \"a\": \"x\\u001b\\u007f\\u009b\\u202e\\u2028日本\U0001F600\\udb40\\udc01\",\n\t\"b\": [1, 2]\r\n}"
	if got != want {
		t.Errorf("JSON =\n%q\nwant\n%q", got, want)
	}
	var a, b any
	if err := json.Unmarshal([]byte(in), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(got), &b); err != nil || !reflect.DeepEqual(a, b) {
		t.Errorf("JSON changed the value: %v, %v", b, err)
	}
	if plain := []byte(`{"a": "plain é"}`); &JSON(plain)[0] != &plain[0] {
		t.Error("JSON copied text with nothing to escape")
	}
	if got := string(JSON([]byte("\"\xff\""))); got != `"\ufffd"` {
		t.Errorf("JSON(invalid byte) = %s", got)
	}
}
