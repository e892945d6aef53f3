package client

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The error classes. Every error a call returns because sandboxd (or the
// connection to it) refused it wraps exactly one of them, chosen by the gRPC
// code in one place, so callers decide with errors.Is rather than by
// inspecting codes; the error's message is still sandboxd's own, and
// status.Code still sees the code. Canceled and DeadlineExceeded wrap
// context.Canceled and context.DeadlineExceeded.
var (
	// ErrInvalidArgument: the request itself is wrong; do not retry it
	// unchanged (INVALID_ARGUMENT, OUT_OF_RANGE).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNotFound: the sandbox, command or file does not exist, or belongs
	// to another tenant (NOT_FOUND).
	ErrNotFound = errors.New("not found")
	// ErrAlreadyExists: what the call would create exists (ALREADY_EXISTS).
	ErrAlreadyExists = errors.New("already exists")
	// ErrFailedPrecondition: the request is valid but cannot be served in
	// the current state, e.g. the sandbox is dead (FAILED_PRECONDITION).
	ErrFailedPrecondition = errors.New("failed precondition")
	// ErrResourceExhausted: a cap was reached; the message names it
	// (RESOURCE_EXHAUSTED).
	ErrResourceExhausted = errors.New("resource exhausted")
	// ErrUnavailable: sandboxd, or the Docker engine behind it, cannot be
	// reached right now; the call may be retried (UNAVAILABLE, ABORTED).
	ErrUnavailable = errors.New("unavailable")
	// ErrUnauthenticated: the call carried no valid token
	// (UNAUTHENTICATED).
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrPermissionDenied: the token may not do this (PERMISSION_DENIED).
	ErrPermissionDenied = errors.New("permission denied")
	// ErrNotImplemented: this sandboxd lacks the call or the feature: its
	// backend does not offer it (the message names the backend and the
	// feature), or it is older than the client (UNIMPLEMENTED).
	ErrNotImplemented = errors.New("not implemented")
	// ErrInternal: sandboxd failed; its log says why (INTERNAL, UNKNOWN,
	// DATA_LOSS, and any code this client does not know).
	ErrInternal = errors.New("internal error")
)

// ErrGone means the sandbox no longer exists or its container died: the
// Python variables and files built in it are lost.
var ErrGone = errors.New("sandbox is gone")

// ErrCommandLost means the sandbox exists but the command's output can no
// longer be read (sandboxd pruned it).
var ErrCommandLost = errors.New("command output is no longer available")

// classes maps gRPC codes to error classes; a code that is not here is
// ErrInternal.
var classes = map[codes.Code]error{
	codes.Canceled:           context.Canceled,
	codes.DeadlineExceeded:   context.DeadlineExceeded,
	codes.InvalidArgument:    ErrInvalidArgument,
	codes.OutOfRange:         ErrInvalidArgument,
	codes.NotFound:           ErrNotFound,
	codes.AlreadyExists:      ErrAlreadyExists,
	codes.FailedPrecondition: ErrFailedPrecondition,
	codes.ResourceExhausted:  ErrResourceExhausted,
	codes.Unavailable:        ErrUnavailable,
	codes.Aborted:            ErrUnavailable,
	codes.Unauthenticated:    ErrUnauthenticated,
	codes.PermissionDenied:   ErrPermissionDenied,
	codes.Unimplemented:      ErrNotImplemented,
}

// fromGRPC is the one place where gRPC errors become the client's errors:
// a status error becomes an *rpcErr wrapping its class; nil, errors that
// are already converted and errors without a status pass through.
func fromGRPC(err error) error {
	if err == nil {
		return nil
	}
	var done *rpcErr
	if errors.As(err, &done) {
		return err
	}
	s, ok := status.FromError(err)
	if !ok {
		return err
	}
	class, ok := classes[s.Code()]
	if !ok {
		class = ErrInternal
	}
	return &rpcErr{st: s, class: class}
}

// rpcErr is a call's failure: sandboxd's status and the class it maps to.
type rpcErr struct {
	st    *status.Status
	class error
}

// Error is sandboxd's message and the code, without gRPC's "rpc error:
// code = ... desc =" noise.
func (e *rpcErr) Error() string { return fmt.Sprintf("%s (%s)", e.st.Message(), e.st.Code()) }

// Unwrap lets errors.Is find the class.
func (e *rpcErr) Unwrap() error { return e.class }

// GRPCStatus lets status.Code and status.FromError see the code and
// sandboxd's message through the conversion.
func (e *rpcErr) GRPCStatus() *status.Status { return e.st }
