package orchestrator

import "errors"

// Error classes. Every error the Manager returns wraps exactly one of these
// (test with errors.Is); orchestrator/grpcapi maps them to gRPC codes in one
// place. The wrapping message says what was wrong, for the caller.
//
// Two kinds of errors are deliberately left unclassified: the caller's own
// context errors (ctx.Err(), returned as is), and server-side failures the
// caller can do nothing about (host disk I/O, unexpected Docker answers),
// which grpcapi reports as Internal and logs in full.
var (
	// ErrInvalidArgument: the request itself is wrong (bad ID, path, limit…).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNotFound: no such sandbox (never existed, expired or deleted), command or file.
	ErrNotFound = errors.New("not found")
	// ErrFailedPrecondition: the request is valid but the system is not in a
	// state to serve it (image missing, sandbox dead).
	ErrFailedPrecondition = errors.New("failed precondition")
	// ErrResourceExhausted: a cap on sandboxes or sizes was reached.
	ErrResourceExhausted = errors.New("resource exhausted")
	// ErrUnavailable: a dependency (the Docker engine) cannot be reached; retry later.
	ErrUnavailable = errors.New("unavailable")
)
