package errgrpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// codeOf is every class's gRPC code, as the API documents them
// (docs/api.md's error codes).
var codeOf = map[*core.Class]codes.Code{
	core.ErrInvalidArgument:    codes.InvalidArgument,
	core.ErrNotFound:           codes.NotFound,
	core.ErrFailedPrecondition: codes.FailedPrecondition,
	core.ErrResourceExhausted:  codes.ResourceExhausted,
	core.ErrUnavailable:        codes.Unavailable,
	core.ErrAlreadyExists:      codes.AlreadyExists,
	core.ErrDeadlineExceeded:   codes.DeadlineExceeded,
	core.ErrNotImplemented:     codes.Unimplemented,
}

// TestTable: every class the domain has maps to its code, a code of its
// own, and back to the class with its message; a code of no class comes
// back as no class.
func TestTable(t *testing.T) {
	if len(codeOf) != len(core.Classes()) {
		t.Fatalf("the test knows %d classes, core has %d", len(codeOf), len(core.Classes()))
	}
	seen := make(map[codes.Code]*core.Class)
	for _, c := range core.Classes() {
		code := Code(c)
		if code != codeOf[c] {
			t.Errorf("class %q maps to %v, want %v", c, code, codeOf[c])
		}
		if prev, dup := seen[code]; dup {
			t.Errorf("classes %q and %q both map to %v", prev, c, code)
		}
		seen[code] = c
		back := ToNative(status.Error(code, "what went wrong"))
		if core.ClassOf(back) != c || back.Error() != "what went wrong" {
			t.Errorf("code %v maps back to %q of class %v, want %q of %q", code, back, core.ClassOf(back), "what went wrong", c)
		}
	}
	for _, code := range []codes.Code{codes.Internal, codes.Unknown, codes.Canceled, codes.PermissionDenied} {
		if back := ToNative(status.Error(code, "x")); core.ClassOf(back) != nil {
			t.Errorf("%v maps back to class %v; want none", code, core.ClassOf(back))
		}
	}
	if back := ToNative(status.Error(codes.Canceled, "x")); !errors.Is(back, context.Canceled) {
		t.Errorf("Canceled maps back to %v; want context.Canceled", back)
	}
	if err := errors.New("no status"); ToNative(err) != err || ToGRPC(err) != err {
		t.Error("an error without a status, or without a class, does not pass through")
	}
}

// TestRoundTrip: an error of every class crosses a real gRPC hop (a server
// answering ToGRPC's status, a client reading it with ToNative) as the
// same class with the same message, also when the server's error wraps a
// cause that has a status or a class of its own: the cause stays behind
// (no details), the caller sees what the server's caller would.
func TestRoundTrip(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var answer error
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) {
		return nil, ToGRPC(answer)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	hc := healthpb.NewHealthClient(conn)

	causes := map[string]error{
		"no cause":          nil,
		"a plain cause":     errors.New("disk full"),
		"a status as cause": status.Error(codes.Internal, "the sidecar's own words"),
		"a class as cause":  core.NotFoundf("sandbox sb-x not found"),
		"an errdefs cause":  fmt.Errorf("docker: %w", errdefs.ErrConflict),
	}
	for _, c := range core.Classes() {
		for name, cause := range causes {
			answer = core.Errorf(c, "the call failed")
			if cause != nil {
				answer = fmt.Errorf("sandbox sb-y: %w", core.Errorf(c, "the call failed: %w", cause))
			}
			_, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{})
			st, _ := status.FromError(err)
			if st.Code() != codeOf[c] || len(st.Details()) != 0 {
				t.Errorf("%q, %s: status %v with %d details; want %v, none", c, name, st.Code(), len(st.Details()), codeOf[c])
			}
			got := ToNative(err)
			if core.ClassOf(got) != c || got.Error() != answer.Error() {
				t.Errorf("%q, %s: came back as %q of class %v; want %q of the same class", c, name, got, core.ClassOf(got), answer)
			}
		}
	}
}
