package core

import "errors"

// Class is an error class: what kind of failure an error of the Manager is,
// which decides what a caller can do about it (fix the request, retry,
// acquire a new sandbox, ...). The classes are the Err* values below, and
// they are listed only there: ClassOf and Classes find them, and
// orchestrator/door/grpcapi maps each one to a gRPC code in one function.
//
// Every error the Manager returns wraps exactly one class (test with
// errors.Is(err, ErrNotFound), or ClassOf). The wrapping message says what
// was wrong, for the caller.
//
// Two kinds of errors are deliberately left unclassified: the caller's own
// context errors (ctx.Err(), returned as is), and server-side failures the
// caller can do nothing about (host disk I/O, unexpected Docker answers),
// which grpcapi reports as Internal and logs in full.
type Class struct{ name string }

// Error returns the class's name, so a class is itself the sentinel error
// that errors of the class wrap.
func (c *Class) Error() string { return c.name }

// classes is every class, in declaration order; newClass fills it.
var classes []*Class

func newClass(name string) *Class {
	c := &Class{name: name}
	classes = append(classes, c)
	return c
}

// The error classes.
var (
	// ErrInvalidArgument: the request itself is wrong (bad ID, path, limit…).
	ErrInvalidArgument = newClass("invalid argument")
	// ErrNotFound: no such sandbox (never existed, expired or deleted), command or file.
	ErrNotFound = newClass("not found")
	// ErrFailedPrecondition: the request is valid but the system is not in a
	// state to serve it (image missing, sandbox dead).
	ErrFailedPrecondition = newClass("failed precondition")
	// ErrResourceExhausted: a cap on sandboxes or sizes was reached.
	ErrResourceExhausted = newClass("resource exhausted")
	// ErrUnavailable: a dependency (the Docker engine) cannot be reached; retry later.
	ErrUnavailable = newClass("unavailable")
	// ErrAlreadyExists: the request would create something whose name is
	// taken by something else: a command ID re-used for a different
	// command. A class of its own rather than a failed precondition: the
	// fix is a new name, not a change of the system's state, and a client
	// retrying on a precondition (acquire a new sandbox) would do the wrong
	// thing; gRPC's ALREADY_EXISTS says exactly this.
	ErrAlreadyExists = newClass("already exists")
	// ErrDeadlineExceeded: work the server bounds in time (a template's
	// build) ran past its limit. Not the caller's own context deadline,
	// which is returned as ctx.Err().
	ErrDeadlineExceeded = newClass("deadline exceeded")
)

// Classes returns every error class, for code that must handle each of
// them (grpcapi's tests check that each has its own gRPC code).
func Classes() []*Class { return append([]*Class(nil), classes...) }

// ClassOf returns the class err wraps, or nil for an unclassified error.
func ClassOf(err error) *Class {
	var c *Class
	if errors.As(err, &c) {
		return c
	}
	return nil
}
