package e2bapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/sandboxd/sandboxd/internal/httpguard"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/core/errgrpc"

	"connectrpc.com/connect"
	"github.com/containerd/errdefs/pkg/errhttp"
)

// internalMessage is all an E2B client learns about an unexpected error; the
// detail goes to sandboxd's log, as on the gRPC door.
const internalMessage = "internal error; see the sandboxd log"

// httpStatus maps a domain error class to the HTTP status E2B's API and envd
// answer for it (the SDKs turn 400, 401, 404, 409, 429, 502 and 507 into
// their own error classes): containerd's errhttp.ToHTTP, the counterpart
// of errgrpc for HTTP, except where E2B answers otherwise. Those are
// here, and only here:
//
//   - a failed precondition is E2B's 409 (a sandbox in the wrong state:
//     paused, not running), where errhttp says 412, which the SDKs do not
//     know. A feature the backend lacks is not one (core.Unsupported,
//     errhttp's 501): the SDKs' pause reads a 409 as "already paused" and
//     answers false without a word;
//   - a name taken (already exists) is 409 too; errhttp has no status for
//     it (500);
//   - the server's own deadline (a template's build) is 504; errhttp has
//     none (500).
func httpStatus(c *core.Class) int {
	switch c {
	case core.ErrFailedPrecondition, core.ErrAlreadyExists:
		return http.StatusConflict
	case core.ErrDeadlineExceeded:
		return http.StatusGatewayTimeout
	}
	return errhttp.ToHTTP(c)
}

// connectCode maps a domain error class to the Connect code envd's RPCs
// answer with: the gRPC API's code (errgrpc.Code, the one mapping),
// as Connect's codes are gRPC's.
func connectCode(c *core.Class) connect.Code {
	return connect.Code(errgrpc.Code(c))
}

// apiError is an error with an HTTP status and a message for the caller,
// raised by the door itself (a malformed request, a missing key).
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(msg string) error { return &apiError{status: http.StatusBadRequest, msg: msg} }

// tooLarge refuses a body past its bound of limit bytes.
func tooLarge(limit int64) error {
	return &apiError{status: http.StatusRequestEntityTooLarge, msg: httpguard.TooLargeMessage(limit)}
}

// classify returns the HTTP status and caller-facing message for err,
// logging what the caller is not told.
func (s *Server) classify(ctx context.Context, op string, err error) (int, string) {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae.status, ae.msg
	case core.ClassOf(err) != nil:
		return httpStatus(core.ClassOf(err)), err.Error()
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusRequestTimeout, err.Error()
	}
	s.log.ErrorContext(ctx, "internal error", "e2b.op", op, "error", err.Error())
	return http.StatusInternalServerError, internalMessage
}

// writeError answers a plain HTTP request with E2B's JSON error body
// {code, message}.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, op string, err error) {
	code, msg := s.classify(r.Context(), op, err)
	writeJSON(w, code, map[string]any{"code": code, "message": msg})
}

// connectError converts a domain error for an envd RPC.
func (s *Server) connectError(ctx context.Context, op string, err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		code := connect.CodeInvalidArgument
		if ae.status == http.StatusUnauthorized {
			code = connect.CodeUnauthenticated
		}
		return connect.NewError(code, errors.New(ae.msg))
	case core.ClassOf(err) != nil:
		return connect.NewError(connectCode(core.ClassOf(err)), errors.New(err.Error()))
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	s.log.ErrorContext(ctx, "internal error", "e2b.op", op, "error", err.Error())
	return connect.NewError(connect.CodeInternal, errors.New(internalMessage))
}

// writeJSON writes v as the JSON body with status code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// discardLogger is the logger of a Server built without one.
var discardLogger = slog.New(slog.DiscardHandler)
