package errgrpc

import (
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// TestTable: every class the domain has maps to a code of its own, and
// back.
func TestTable(t *testing.T) {
	seen := make(map[codes.Code]*core.Class)
	for _, c := range core.Classes() {
		code := Code(c)
		if code == codes.Internal || code == codes.Unknown || code == codes.OK {
			t.Errorf("class %q maps to %v", c, code)
		}
		if prev, dup := seen[code]; dup {
			t.Errorf("classes %q and %q both map to %v", prev, c, code)
		}
		seen[code] = c
		if back := Class(code); back != c {
			t.Errorf("code %v maps back to %v, want %q", code, back, c)
		}
	}
	if c := Class(codes.Internal); c != nil {
		t.Errorf("Internal maps to class %q; want none", c)
	}
}
