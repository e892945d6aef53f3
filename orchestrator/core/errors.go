package core

import (
	"errors"

	"github.com/containerd/errdefs"
)

// Class is an error class: what kind of failure an error of the Manager is,
// which decides what a caller can do about it (fix the request, retry,
// acquire a new sandbox, ...). The classes are the Err* values below, and
// they are listed only there: ClassOf and Classes find them.
//
// Each class is one of containerd's errdefs classes, which it wraps, so
// errdefs' libraries map it to a protocol's code (errdefs/pkg/errgrpc for
// gRPC, through orchestrator/core/errgrpc; errdefs/pkg/errhttp for HTTP)
// and errors.Is(err, errdefs.ErrNotFound) and errdefs.IsNotFound(err)
// hold for every error of ErrNotFound. A Class of our own rather than the
// errdefs values themselves, because the domain's classes are a strict
// subset: an unexpected Docker answer satisfies errdefs' interfaces too
// (IsNotFound, ...), and it must stay unclassified; ClassOf sees only
// errors made here.
//
// Every error the Manager returns wraps exactly one class (test with
// errors.Is(err, ErrNotFound), or ClassOf). The wrapping message says what
// was wrong, for the caller.
//
// Two kinds of errors are deliberately left unclassified: the caller's own
// context errors (ctx.Err(), returned as is), and server-side failures the
// caller can do nothing about (host disk I/O, unexpected Docker answers),
// which the doors report as Internal and log in full.
type Class struct {
	name string
	def  error // the errdefs class
}

// Error returns the class's name, so a class is itself the sentinel error
// that errors of the class wrap.
func (c *Class) Error() string { return c.name }

// Unwrap returns the errdefs class c is, for errors.Is, errdefs' Is*
// functions and the mappings of errdefs/pkg.
func (c *Class) Unwrap() error { return c.def }

// classes is every class, in declaration order; newClass fills it.
var classes []*Class

func newClass(def error) *Class {
	c := &Class{name: def.Error(), def: def}
	classes = append(classes, c)
	return c
}

// The error classes.
var (
	// ErrInvalidArgument: the request itself is wrong (bad ID, path, limit…).
	ErrInvalidArgument = newClass(errdefs.ErrInvalidArgument)
	// ErrNotFound: no such sandbox (never existed, expired or deleted), command or file.
	ErrNotFound = newClass(errdefs.ErrNotFound)
	// ErrFailedPrecondition: the request is valid but the system is not in a
	// state to serve it (image missing, sandbox dead).
	ErrFailedPrecondition = newClass(errdefs.ErrFailedPrecondition)
	// ErrResourceExhausted: a cap on sandboxes or sizes was reached.
	ErrResourceExhausted = newClass(errdefs.ErrResourceExhausted)
	// ErrUnavailable: a dependency (the Docker engine) cannot be reached; retry later.
	ErrUnavailable = newClass(errdefs.ErrUnavailable)
	// ErrAlreadyExists: the request would create something whose name is
	// taken by something else: a command ID re-used for a different
	// command. A class of its own rather than a failed precondition: the
	// fix is a new name, not a change of the system's state, and a client
	// retrying on a precondition (acquire a new sandbox) would do the wrong
	// thing; gRPC's ALREADY_EXISTS says exactly this.
	ErrAlreadyExists = newClass(errdefs.ErrAlreadyExists)
	// ErrDeadlineExceeded: work the server bounds in time (a template's
	// build) ran past its limit. Not the caller's own context deadline,
	// which is returned as ctx.Err(): errors of this class are not
	// context.DeadlineExceeded, though errdefs.IsDeadlineExceeded holds
	// for them (errdefs has no value of its own for the class).
	ErrDeadlineExceeded = newClass(serverDeadline{})
	// ErrNotImplemented: the API has the operation, this server's backend
	// (or its configuration) lacks it; another backend has it. Only
	// Unsupported makes errors of it: a class of its own, not a failed
	// precondition, so that every door answers it the same (gRPC's
	// UNIMPLEMENTED, HTTP's 501) and no client mistakes it for a state it
	// could change (the E2B SDKs read a 409 on pause as "already paused").
	ErrNotImplemented = newClass(errdefs.ErrNotImplemented)
)

// serverDeadline is ErrDeadlineExceeded's errdefs class: errdefs knows a
// deadline only as context.DeadlineExceeded or by this method, which its
// mappings read (gRPC's DEADLINE_EXCEEDED).
type serverDeadline struct{}

func (serverDeadline) Error() string { return "deadline exceeded" }

// DeadlineExceeded marks the class for errdefs.IsDeadlineExceeded.
func (serverDeadline) DeadlineExceeded() {}

// Classes returns every error class, for code that must handle each of
// them (errgrpc's tests check that each has its own gRPC code).
func Classes() []*Class { return append([]*Class(nil), classes...) }

// ClassOf returns the class err wraps, or nil for an unclassified error.
func ClassOf(err error) *Class {
	var c *Class
	if errors.As(err, &c) {
		return c
	}
	return nil
}
