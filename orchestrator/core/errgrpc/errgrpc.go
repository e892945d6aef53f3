// Package errgrpc maps the domain's error classes (core.Class) to gRPC
// status codes and back: the one table every hop that speaks gRPC codes
// uses (the gRPC door, the E2B door's Connect RPCs, the io sidecar of the
// Kubernetes backend), so a class means the same code everywhere. It is
// apart from core so that core imports no gRPC.
package errgrpc

import (
	"google.golang.org/grpc/codes"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// table is the mapping, a class to a code of its own.
var table = map[*core.Class]codes.Code{
	core.ErrInvalidArgument:    codes.InvalidArgument,
	core.ErrNotFound:           codes.NotFound,
	core.ErrFailedPrecondition: codes.FailedPrecondition,
	core.ErrResourceExhausted:  codes.ResourceExhausted,
	core.ErrUnavailable:        codes.Unavailable,
	core.ErrAlreadyExists:      codes.AlreadyExists,
	core.ErrDeadlineExceeded:   codes.DeadlineExceeded,
}

// Code is c's gRPC code; Internal for a class missing from the table
// (TestTable catches one).
func Code(c *core.Class) codes.Code {
	if code, ok := table[c]; ok {
		return code
	}
	return codes.Internal
}

// Class is the class whose code is code, or nil when none is.
func Class(code codes.Code) *core.Class {
	for c, k := range table {
		if k == code {
			return c
		}
	}
	return nil
}
