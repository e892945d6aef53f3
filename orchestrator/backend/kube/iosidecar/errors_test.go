package iosidecar

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/iolog"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

var allCalls = []call{callAppend, callFollow, callStatus, callFiles}

// Every row crosses the hop and comes back meaning what it meant: the
// Server's end (statusOf) and the Client's (errorOf) read the same table.
func TestReasonTableRoundTrip(t *testing.T) {
	valid := regexp.MustCompile(`^[A-Z][A-Z0-9_]+[A-Z0-9]$`) // ErrorInfo's rule for reasons
	seen := map[string]bool{}
	for _, r := range reasons {
		if !valid.MatchString(r.name) || len(r.name) > 63 || seen[r.name] {
			t.Errorf("reason %q: not a valid ErrorInfo reason, or twice in the table", r.name)
		}
		seen[r.name] = true
		sent := statusOf(fmt.Errorf("wrapped: %w", reasonf(r.err, "what happened to %s", r.name)))
		for _, c := range allCalls {
			got := errorOf(t.Context(), c, sent)
			var e *Error
			if !errors.As(got, &e) || e.Code != r.code || e.Message != "wrapped: what happened to "+r.name {
				t.Fatalf("%s on call %b = %#v; want an *Error with code %v and the text sent", r.name, c, got, r.code)
			}
			switch {
			case r.calls&c != 0 && (!errors.Is(got, r.err) || e.Reason != r.name):
				t.Errorf("%s on call %b = %v (reason %q); want it to mean %v", r.name, c, got, e.Reason, r.err)
			case r.calls&c == 0 && (!errors.Is(got, ErrInternal) || e.Reason != ""):
				t.Errorf("%s on call %b, which cannot answer it = %v (reason %q); want ErrInternal", r.name, c, got, e.Reason)
			}
		}
	}
	// Every class of the domain can cross: a new class cannot be forgotten.
	for _, class := range core.Classes() {
		got := errorOf(t.Context(), callFiles, statusOf(core.Errorf(class, "x")))
		if core.ClassOf(got) != class {
			t.Errorf("class %v crosses the sidecar as %v", class, got)
		}
	}
}

func TestStatusOf(t *testing.T) {
	for name, tc := range map[string]struct {
		err    error
		code   codes.Code
		reason string
	}{
		"iolog's sentinel":                {fmt.Errorf("x: %w", iolog.ErrLogFull), codes.ResourceExhausted, "LOG_FULL"},
		"a class":                         {core.NotFoundf("download /workspace/x: no such file or directory"), codes.NotFound, "NOT_FOUND"},
		"the caller's context":            {context.Canceled, codes.Canceled, ""},
		"the caller's deadline":           {fmt.Errorf("read: %w", context.DeadlineExceeded), codes.DeadlineExceeded, ""},
		"a status already":                {status.Error(codes.Unavailable, "transport is closing"), codes.Unavailable, ""},
		"the sidecar's own failure":       {errors.New("encode event 3: boom"), codes.Internal, ""},
		"a missing log, tampered with":    {reasonf(iolog.ErrTampered, "the command log was altered"), codes.FailedPrecondition, "TAMPERED"},
		"a sentinel before a class":       {core.Errorf(core.ErrFailedPrecondition, "x: %w", iolog.ErrTampered), codes.FailedPrecondition, "TAMPERED"},
		"an error of the protocol's data": {fmt.Errorf("x: %w", iolog.ErrPruned), codes.NotFound, "OUTPUT_PRUNED"},
	} {
		st, _ := status.FromError(statusOf(tc.err))
		got, _ := reasonName(st)
		msg := tc.err.Error()
		if s, ok := status.FromError(tc.err); ok {
			msg = s.Message()
		}
		if st.Code() != tc.code || got != tc.reason || st.Message() != msg {
			t.Errorf("%s: statusOf(%v) = %v %q, reason %q; want %v, reason %q, the error's text", name, tc.err, st.Code(), st.Message(), got, tc.code, tc.reason)
		}
	}
	if statusOf(nil) != nil {
		t.Error("statusOf(nil) is not nil")
	}
}

// What a sidecar may send that sandboxd does not believe: it means
// ErrInternal ("the io sidecar failed"), never another state; and gRPC's
// own errors, without a reason, mean what their code says.
func TestErrorOfDistrust(t *testing.T) {
	other := func(code codes.Code, details ...*anypb.Any) error {
		p := status.New(code, "forged").Proto()
		p.Details = details
		return status.FromProto(p).Err()
	}
	info := func(reason, domain string) *anypb.Any {
		a, err := anypb.New(&errdetails.ErrorInfo{Reason: reason, Domain: domain})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	notInfo, _ := anypb.New(wrapperspb.String("LOG_FULL"))
	for name, tc := range map[string]struct {
		err  error
		c    call
		want error
	}{
		"an unknown reason":                 {withReason(codes.NotFound, "SANDBOX_DELETED", "x"), callFollow, ErrInternal},
		"a reason with another code":        {withReason(codes.Unavailable, "OUTPUT_PRUNED", "x"), callFollow, ErrInternal},
		"a reason another call answers":     {withReason(codes.ResourceExhausted, "LOG_FULL", "x"), callFollow, ErrInternal},
		"a reason of the files on Follow":   {withReason(codes.NotFound, "NOT_FOUND", "x"), callFollow, ErrInternal},
		"a command's reason on the files":   {withReason(codes.NotFound, "UNKNOWN_COMMAND", "x"), callFiles, ErrInternal},
		"another domain":                    {other(codes.NotFound, info("OUTPUT_PRUNED", "example.com")), callFollow, ErrInternal},
		"an empty reason":                   {other(codes.NotFound, info("", ErrorDomain)), callFollow, ErrInternal},
		"an ErrorInfo that does not decode": {other(codes.NotFound, &anypb.Any{TypeUrl: errorInfoType, Value: []byte{0xff, 0xff}}), callFollow, ErrInternal},
		"the first ErrorInfo decides":       {other(codes.ResourceExhausted, notInfo, info("LOG_FULL", ErrorDomain), info("UNKNOWN_COMMAND", ErrorDomain)), callAppend, iolog.ErrLogFull},
		"no reason: not found":              {status.Error(codes.NotFound, "x"), callFollow, ErrInternal},
		"no reason: invalid":                {status.Error(codes.InvalidArgument, "x"), callFiles, ErrInternal},
		"no reason: unavailable":            {status.Error(codes.Unavailable, "x"), callFiles, ErrUnavailable},
		"no reason: deadline":               {status.Error(codes.DeadlineExceeded, "x"), callAppend, ErrUnavailable},
		"no reason: unauthenticated":        {status.Error(codes.Unauthenticated, "x"), callStatus, ErrUnauthenticated},
		"no reason: too large":              {status.Error(codes.ResourceExhausted, "x"), callAppend, ErrBadResponse},
		"not a status":                      {errors.New("x"), callFiles, ErrInternal},
	} {
		got := errorOf(t.Context(), tc.c, tc.err)
		if !errors.Is(got, tc.want) {
			t.Errorf("%s: errorOf = %v; want %v", name, got, tc.want)
		}
		if core.ClassOf(got) != nil && tc.want == ErrInternal {
			t.Errorf("%s: errorOf = %v, of class %v; want none", name, got, core.ClassOf(got))
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if got := errorOf(ctx, callFollow, withReason(codes.NotFound, "OUTPUT_PRUNED", "x")); got != context.Canceled {
		t.Errorf("errorOf after the caller gave up = %v; want the caller's context error", got)
	}
}
