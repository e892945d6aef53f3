// Package errgrpc carries the domain's error classes over gRPC with
// containerd's errdefs/pkg/errgrpc, which maps each errdefs class (and so
// each core.Class, which is one) to its code and back: the one mapping
// every hop that speaks gRPC codes uses (the gRPC door, the E2B door's
// Connect RPCs, the io sidecar of the Kubernetes backend), so a class
// means the same code everywhere. It is apart from core so that core
// imports no gRPC.
//
// What it adds to the library is what the domain needs of a hop: a status
// carries the class and the caller-facing message, nothing else (the
// library would add the cause's typed details, which are the server's to
// log, not the caller's to read), and its code comes back as a core class.
package errgrpc

import (
	"github.com/containerd/errdefs"
	cerrgrpc "github.com/containerd/errdefs/pkg/errgrpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Code is c's gRPC code.
func Code(c *core.Class) codes.Code { return status.Code(cerrgrpc.ToGRPC(c)) }

// ToGRPC returns a classified error as a status error of its class's code
// with its message (err.Error()) and no details; any other error as it is,
// for the caller to decide (the gRPC door answers INTERNAL).
func ToGRPC(err error) error {
	c := core.ClassOf(err)
	if c == nil {
		return err
	}
	// The class and the message, without the cause: a cause that carries
	// a status or a class of its own would otherwise travel as details.
	return cerrgrpc.ToGRPC(core.Errorf(c, "%s", err.Error()))
}

// ToNative returns a status error as an error of the core class of its
// code, with the status's message; a code of no class comes back as the
// library makes it (Canceled as context.Canceled, INTERNAL as
// errdefs.ErrInternal, ...), and an error without a status as it is. The
// status's details are not decoded: a peer chooses them.
//
// DEADLINE_EXCEEDED comes back as core.ErrDeadlineExceeded, though gRPC
// gives the caller's own deadline the same code: a caller tells them
// apart by its context (ctx.Err()) first.
func ToNative(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	// The class from the code alone: the library reads a
	// FAILED_PRECONDITION whose message ends in ": conflict" as
	// errdefs.ErrConflict, which is no class of ours.
	if c := classOf(cerrgrpc.ToNative(status.Error(st.Code(), ""))); c != nil {
		return core.Errorf(c, "%s", st.Message())
	}
	return cerrgrpc.ToNative(status.Error(st.Code(), st.Message()))
}

// classOf is the core class whose errdefs class err resolves to, if any.
func classOf(err error) *core.Class {
	def := errdefs.Resolve(err)
	for _, c := range core.Classes() {
		if errdefs.Resolve(c) == def {
			return c
		}
	}
	return nil
}
