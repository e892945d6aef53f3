package grpcapi

import (
	"context"
	"errors"
	"log/slog"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/core/errgrpc"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// internalMessage is all a client learns about an unexpected error: details
// (paths, Docker messages, stack traces) stay in the server log, where an
// operator can find them by time and method.
const internalMessage = "internal error; see the sandboxd log"

// toStatus is the one place where errors become gRPC status errors. Domain
// classes become their code (errgrpc: containerd's mapping) and keep their
// message (it says what was wrong, for the caller); context errors become Canceled or DeadlineExceeded; errors that already
// carry a status (from the gRPC stream itself, or from validation) pass
// through; anything else is a bug or an unclassified failure, so the client
// gets a generic Internal and the detail is logged.
func toStatus(ctx context.Context, log *slog.Logger, method string, err error) error {
	if err == nil {
		return nil
	}
	if core.ClassOf(err) != nil {
		return errgrpc.ToGRPC(err)
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	if s, ok := status.FromError(err); ok && s.Code() != codes.Unknown {
		return s.Err()
	}
	log.ErrorContext(ctx, "internal error", "grpc.method", method, "error", err.Error())
	return status.Error(codes.Internal, internalMessage)
}

// invalid is a validation failure: the request itself is wrong.
func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// required checks that a required field (shown as name) is present.
func required(name, value string) error {
	if value == "" {
		return invalid("%s is empty", name)
	}
	return nil
}
