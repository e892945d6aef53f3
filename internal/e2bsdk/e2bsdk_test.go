package e2bsdk

import (
	"fmt"
	"testing"
)

func TestParseTAP(t *testing.T) {
	out := []byte(`TAP version 13
# Subtest: suite
    # Subtest: passes
    ok 1 - passes
      ---
      duration_ms: 1
      ...
    # Subtest: fails
    not ok 2 - fails
      ---
      error: |-
        expected 1 to equal 2
      ...
    1..2
not ok 1 - suite
# Subtest: top
ok 2 - top
# Subtest: later
ok 3 - later # SKIP no templates here
`)
	got := ParseTAP(out)
	want := []Result{{Name: "passes", OK: true}, {Name: "fails", Why: "expected 1 to equal 2"}, {Name: "top", OK: true}, {Name: "later", OK: true, Skip: true, Why: "no templates here"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ParseTAP = %+v, want %+v", got, want)
	}
}
