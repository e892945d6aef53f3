package core

import (
	"errors"
	"fmt"
	"testing"

	"github.com/containerd/errdefs"
)

// TestUnsupported: Unsupported's errors are of ErrNotImplemented (errdefs'
// ErrNotImplemented) naming the backend and the feature, recognised by
// IsUnsupported, also when wrapped, and told apart from a failed
// precondition.
func TestUnsupported(t *testing.T) {
	err := Unsupported("kubernetes", "hibernation and wake")
	if ClassOf(err) != ErrNotImplemented || !errdefs.IsNotImplemented(err) || errdefs.IsFailedPrecondition(err) {
		t.Errorf("class %v, want not implemented", ClassOf(err))
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
