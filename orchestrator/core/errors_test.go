package core

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/containerd/errdefs"
)

// TestClassesAreErrdefs: every error of a class is errdefs' class of the
// same name (errors.Is, errdefs' Is* functions and Resolve, which
// errdefs/pkg's mappings read), also wrapped, with the message it was made
// with and its cause reachable; ClassOf still finds the domain's class.
func TestClassesAreErrdefs(t *testing.T) {
	is := map[*Class]func(error) bool{
		ErrInvalidArgument:    errdefs.IsInvalidArgument,
		ErrNotFound:           errdefs.IsNotFound,
		ErrFailedPrecondition: errdefs.IsFailedPrecondition,
		ErrResourceExhausted:  errdefs.IsResourceExhausted,
		ErrUnavailable:        errdefs.IsUnavailable,
		ErrAlreadyExists:      errdefs.IsAlreadyExists,
		ErrDeadlineExceeded:   errdefs.IsDeadlineExceeded,
		ErrNotImplemented:     errdefs.IsNotImplemented,
	}
	if len(is) != len(Classes()) {
		t.Fatalf("the test knows %d classes, core has %d", len(is), len(Classes()))
	}
	// The names are kept in records (a template version's class) and in
	// the io sidecar's reasons: they are errdefs' and never change.
	var names []string
	for _, c := range Classes() {
		names = append(names, c.Error())
	}
	if got, want := fmt.Sprint(names), "[invalid argument not found failed precondition resource exhausted unavailable already exists deadline exceeded not implemented]"; got != want {
		t.Errorf("class names %s, want %s", got, want)
	}
	cause := errors.New("the cause")
	for _, c := range Classes() {
		err := fmt.Errorf("outer: %w", Errorf(c, "what went wrong: %w", cause))
		if err.Error() != "outer: what went wrong: the cause" || !errors.Is(err, cause) || ClassOf(err) != c {
			t.Errorf("class %q: %q, class %v; want the message as made, the cause, the class", c, err, ClassOf(err))
		}
		if f := is[c]; f == nil || !f(err) {
			t.Errorf("class %q is not errdefs' class", c)
		}
		if c != ErrDeadlineExceeded && (!errors.Is(err, c.def) || errdefs.Resolve(err) != c.def) {
			t.Errorf("class %q: errdefs.Resolve = %v", c, errdefs.Resolve(err))
		}
	}
	// The server's deadline is not the caller's.
	err := Errorf(ErrDeadlineExceeded, "the build ran past 30m")
	if errors.Is(err, context.DeadlineExceeded) || errdefs.Resolve(err) != context.DeadlineExceeded {
		t.Errorf("ErrDeadlineExceeded: is the context's %v, resolves to %v; want not, and context.DeadlineExceeded", errors.Is(err, context.DeadlineExceeded), errdefs.Resolve(err))
	}
	// errdefs' own errors (a Docker answer's) are not the domain's.
	for _, other := range []error{errdefs.ErrNotFound, fmt.Errorf("docker: %w", errdefs.ErrInvalidArgument), context.Canceled} {
		if ClassOf(other) != nil {
			t.Errorf("ClassOf(%v) = %v; want none", other, ClassOf(other))
		}
	}
}
