package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// TestToStatus: every class reaches the caller with the code it always
// had (only Unsupported's changed, FAILED_PRECONDITION to UNIMPLEMENTED)
// and its message, whatever its cause.
func TestToStatus(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		code     codes.Code
		msg      string // expected status message; "" means the error's own text
		internal bool   // the detail must be logged, not sent
	}{
		{"invalid argument", fmt.Errorf("%w: memory 9GiB above the maximum 4GiB", core.ErrInvalidArgument), codes.InvalidArgument, "", false},
		{"not found", fmt.Errorf("sandbox sb-1: %w", core.ErrNotFound), codes.NotFound, "", false},
		{"failed precondition", fmt.Errorf("%w: sandbox is dead", core.ErrFailedPrecondition), codes.FailedPrecondition, "", false},
		{"resource exhausted", fmt.Errorf("%w: 500 sandboxes", core.ErrResourceExhausted), codes.ResourceExhausted, "", false},
		{"unavailable", fmt.Errorf("%w: docker: connection refused", core.ErrUnavailable), codes.Unavailable, "", false},
		{"already exists", fmt.Errorf("%w: command ID c1 used for a different command", core.ErrAlreadyExists), codes.AlreadyExists, "", false},
		{"deadline exceeded (the server's)", core.Errorf(core.ErrDeadlineExceeded, "the build ran past its 30m"), codes.DeadlineExceeded, "", false},
		{"unsupported", core.Unsupported("kubernetes", "volumes"), codes.Unimplemented, "", false},
		{"doubly wrapped", fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", core.ErrNotFound)), codes.NotFound, "", false},
		{"a class wrapping a status", core.Unavailablef("the io sidecar: %w", status.Error(codes.Internal, "boom")), codes.Unavailable, "", false},
		{"a class wrapping a class", core.Preconditionf("sandbox sb-1 tampered: %w", core.NotFoundf("no events file")), codes.FailedPrecondition, "", false},
		{"canceled", fmt.Errorf("following: %w", context.Canceled), codes.Canceled, "", false},
		{"deadline", context.DeadlineExceeded, codes.DeadlineExceeded, "", false},
		{"status passes through", status.Error(codes.Aborted, "stream broke"), codes.Aborted, "stream broke", false},
		{"unclassified", errors.New("open /var/lib/secret: permission denied"), codes.Internal, internalMessage, true},
		{"unknown status is unclassified", status.Error(codes.Unknown, "???"), codes.Internal, internalMessage, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs := &syncBuffer{}
			log := slog.New(slog.NewTextHandler(logs, nil))
			got := toStatus(context.Background(), log, "Test", tt.err)
			st, ok := status.FromError(got)
			if !ok {
				t.Fatalf("toStatus(%v) = %v, not a status error", tt.err, got)
			}
			if st.Code() != tt.code {
				t.Errorf("code = %v, want %v", st.Code(), tt.code)
			}
			want := tt.msg
			if want == "" {
				want = tt.err.Error()
			}
			if st.Message() != want {
				t.Errorf("message = %q, want %q", st.Message(), want)
			}
			logged := strings.Contains(logs.String(), tt.err.Error())
			if logged != tt.internal {
				t.Errorf("detail logged = %v, want %v; log: %s", logged, tt.internal, logs.String())
			}
		})
	}
	if err := toStatus(context.Background(), slog.New(slog.DiscardHandler), "Test", nil); err != nil {
		t.Errorf("toStatus(nil) = %v, want nil", err)
	}
}

// TestErrorMappingOverTheWire checks that a domain error reaches a real client
// with its code and message, for unary and streaming RPCs.
func TestErrorMappingOverTheWire(t *testing.T) {
	fake := &fakeManager{
		GetFunc: func(context.Context, string) (core.Sandbox, error) {
			return core.Sandbox{}, fmt.Errorf("%w: sandbox "+sbGone, core.ErrNotFound)
		},
		SubmitFunc: func(context.Context, core.ExecRequest) (string, error) {
			return "", fmt.Errorf("%w: sandbox sb-1 is dead", core.ErrFailedPrecondition)
		},
		DeleteFunc: func(context.Context, string) error { return errors.New("docker said: boom at /var/run") },
	}
	env := newTestEnv(t, fake)
	ctx := testCtx(t)

	_, err := env.client.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: sbGone})
	if status.Code(err) != codes.NotFound || !strings.Contains(status.Convert(err).Message(), sbGone) {
		t.Errorf("GetSandbox error = %v, want NotFound naming sb-gone", err)
	}

	stream, err := env.client.Execute(ctx, &sandboxv1.ExecuteRequest{SandboxId: sb1, Code: "1"})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("Execute error = %v, want FailedPrecondition", err)
	}

	_, err = env.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: sb1})
	if status.Code(err) != codes.Internal || strings.Contains(err.Error(), "/var/run") {
		t.Errorf("DeleteSandbox error = %v, want Internal without the detail", err)
	}
	if !strings.Contains(env.log.String(), "docker said: boom") {
		t.Errorf("internal detail not logged; log: %s", env.log.String())
	}
}
