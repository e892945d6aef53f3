package e2bapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errhttp"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// TestErrorTable: every class of the domain answers its HTTP status and
// its Connect code (gRPC's), and a status this door takes from errhttp
// maps back to the class; the statuses E2B wants otherwise are the ones
// httpStatus lists.
func TestErrorTable(t *testing.T) {
	want := map[*core.Class]struct {
		status  int
		code    connect.Code
		errhttp bool // the status is errhttp.ToHTTP's
	}{
		core.ErrInvalidArgument:    {http.StatusBadRequest, connect.CodeInvalidArgument, true},
		core.ErrNotFound:           {http.StatusNotFound, connect.CodeNotFound, true},
		core.ErrFailedPrecondition: {http.StatusConflict, connect.CodeFailedPrecondition, false},
		core.ErrResourceExhausted:  {http.StatusTooManyRequests, connect.CodeResourceExhausted, true},
		core.ErrUnavailable:        {http.StatusServiceUnavailable, connect.CodeUnavailable, true},
		core.ErrAlreadyExists:      {http.StatusConflict, connect.CodeAlreadyExists, false},
		core.ErrDeadlineExceeded:   {http.StatusGatewayTimeout, connect.CodeDeadlineExceeded, false},
		core.ErrNotImplemented:     {http.StatusNotImplemented, connect.CodeUnimplemented, true},
	}
	if len(want) != len(core.Classes()) {
		t.Fatalf("the test knows %d classes, core has %d", len(want), len(core.Classes()))
	}
	s := &Server{log: discardLogger}
	for _, c := range core.Classes() {
		w := want[c]
		err := fmt.Errorf("wrapped: %w", core.Errorf(c, "what went wrong"))
		if got, msg := s.classify(context.Background(), "test", err); got != w.status || msg != err.Error() {
			t.Errorf("class %q answers %d %q, want %d and the error's text", c, got, msg, w.status)
		}
		if got := (errhttp.ToHTTP(c) == w.status); got != w.errhttp {
			t.Errorf("class %q: %d is errhttp's status: %v, want %v", c, w.status, got, w.errhttp)
		}
		if w.errhttp && errdefs.Resolve(errhttp.ToNative(w.status)) != errdefs.Resolve(c) {
			t.Errorf("status %d maps back to %v, want class %q", w.status, errhttp.ToNative(w.status), c)
		}
		var ce *connect.Error
		if !errors.As(s.connectError(context.Background(), "test", err), &ce) || ce.Code() != w.code || ce.Message() != err.Error() {
			t.Errorf("class %q as Connect: %v, want %v with the error's text", c, ce, w.code)
		}
	}
}
