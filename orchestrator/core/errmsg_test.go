package core

import (
	"errors"
	"fmt"
	"testing"
)

// TestUnsupported: Unsupported's errors are FAILED_PRECONDITION naming the
// backend and the feature, told apart from the class's other errors by
// IsUnsupported, also when wrapped.
func TestUnsupported(t *testing.T) {
	err := Unsupported("kubernetes", "hibernation and wake")
	if ClassOf(err) != ErrFailedPrecondition {
		t.Errorf("class %v, want failed precondition", ClassOf(err))
	}
	if want := "hibernation and wake are not supported by sandboxd's kubernetes backend yet (--backend kubernetes)"; err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
	if !IsUnsupported(err) || !IsUnsupported(fmt.Errorf("pause: %w", err)) {
		t.Error("IsUnsupported does not recognise Unsupported's error")
	}
	for _, other := range []error{Preconditionf("sandbox x is dead"), SandboxDead("sb-x", "OOM"), errors.New("unsupported"), nil} {
		if IsUnsupported(other) {
			t.Errorf("IsUnsupported(%v) = true", other)
		}
	}
}
