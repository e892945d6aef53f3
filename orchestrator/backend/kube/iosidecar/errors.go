package iosidecar

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/cmdlog"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/iolog"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/core/errgrpc"
)

// Errors cross the sidecar by reason, not by message text, as containerd's
// errdefs cross its gRPC hops: every error status the Server sends carries
// an ErrorInfo (google.rpc.ErrorInfo, in the status's details) whose reason
// names what the error means, and reasons is the one table both ends read:
//
//   - the Server turns a handler's error into a status through it
//     (statusOf): an iolog sentinel (unknown command, pruned output,
//     conflict, full log, tampering), a cmdlog one (input refused, a
//     command's context refused it) or
//     a core class (the files API's errors, wspath's, and refused
//     requests) becomes the reason's code and the reason, with the
//     error's text as the message;
//   - the Client turns a status back through it (errorOf): an *Error that
//     matches (errors.Is) the same sentinel or class, so that the kube
//     Manager only adds the sandbox's context (ioError), as the Docker
//     backend does with iolog's errors on the host.
//
// The sidecar is hostile to sandboxd (it shares the sandbox's Pod), so the
// Client believes a reason only when it is in the table, came with the
// table's code, and is one the call may answer (calls); anything else is
// ErrInternal, which sandboxd reports as UNAVAILABLE ("the io sidecar of
// sandbox … failed"). No reason makes sandboxd touch another sandbox: each
// names a state of the sandbox whose sidecar answered, and the text that
// comes with it is bounded, made valid UTF-8 and marked as the sidecar's
// ("io sidecar: …"). A status without an ErrorInfo is gRPC's own (the
// transport, the token check, a message over its limit): its code alone
// says what happened (bareKind).

// ErrorDomain is the domain of the sidecar's ErrorInfos.
const ErrorDomain = "iosidecar.sandboxd.io"

// call names the calls of the IOService, as sets: the calls that may
// answer a reason.
type call uint8

const (
	callAppend call = 1 << iota
	callFollow
	callStatus
	callFiles    // Upload, Download, ListFiles, MakeDirectory, Remove, Rename, Export, Import, Stat, SetAttributes, VolumeUsage
	callList     // ListCommands
	callContexts // ListContexts
	callWatch    // WatchDirectory
	callEgress   // SetEgress, EgressStatus

	callAny = callAppend | callFollow | callStatus | callFiles | callList | callContexts | callWatch | callEgress
)

// reason is a row of the table.
type reason struct {
	// name is the ErrorInfo's reason.
	name string
	// code is the status code the reason travels with.
	code codes.Code
	// err is what the reason means on both ends: an iolog sentinel or a
	// core class, matched with errors.Is.
	err error
	// calls are the calls that may answer it.
	calls call
}

// reasons is the table: iolog's sentinels, then one row a class of the
// domain (classReasons). Order matters to statusOf only: a sentinel is
// more precise than a class.
var reasons = append([]reason{
	// The /io protocol's own failures (iolog's sentinels).
	{"UNKNOWN_COMMAND", codes.NotFound, iolog.ErrUnknownCommand, callAppend | callFollow},
	{"OUTPUT_PRUNED", codes.NotFound, iolog.ErrPruned, callFollow},
	{"COMMAND_CONFLICT", codes.AlreadyExists, iolog.ErrConflict, callAppend},
	{"LOG_FULL", codes.ResourceExhausted, iolog.ErrLogFull, callAppend},
	{"TAMPERED", codes.FailedPrecondition, iolog.ErrTampered, callAppend | callFollow | callStatus | callList},
	{"HIBERNATING", codes.FailedPrecondition, iolog.ErrHibernating, callAppend},
	// Input refused by cmdlog's rules (cmdlog.AppendInput).
	{"NO_TERMINAL", codes.FailedPrecondition, cmdlog.ErrNoTerminal, callAppend},
	{"NO_INPUT", codes.FailedPrecondition, cmdlog.ErrNoInput, callAppend},
	{"COMMAND_FINISHED", codes.FailedPrecondition, cmdlog.ErrFinished, callAppend},
	// A command's context refused it, or cannot be read
	// (cmdlog.CheckExecContext).
	{"UNKNOWN_CONTEXT", codes.NotFound, cmdlog.ErrUnknownContext, callAppend},
	{"CONTEXT_LANGUAGE", codes.FailedPrecondition, cmdlog.ErrContextLanguage, callAppend},
	{"CONTEXTS_UNREADABLE", codes.FailedPrecondition, cmdlog.ErrContextsUnreadable, callAppend | callContexts},
	// The Pod's egress gateway (egress.go).
	{"EGRESS_OFF", codes.FailedPrecondition, ErrEgressOff, callEgress},
	{"EGRESS_UNAVAILABLE", codes.FailedPrecondition, ErrEgressUnavailable, callEgress},
	{"RULES_SEALED", codes.FailedPrecondition, ErrRulesSealed, callEgress},
}, classReasons()...)

// classReasons are the table's rows for the domain's classes, as core
// lists them (core.Classes) and errgrpc gives them codes (containerd's
// errdefs mapping, as on every other hop): a request the sidecar refused
// (INVALID_ARGUMENT, on any call that takes arguments), the sidecar
// shutting down (UNAVAILABLE, on any call), and the files API's errors
// (wspath's, in every class). The reason is the class's name in capitals
// ("not found": NOT_FOUND). The Client reads a class back from its row,
// not with errgrpc.ToNative from the code alone: a code is also gRPC's
// own (RESOURCE_EXHAUSTED for a message over the size limit), and only a
// reason the call may answer says the sidecar's handler sent it.
func classReasons() []reason {
	var rows []reason
	for _, class := range core.Classes() {
		calls := callFiles | callWatch
		switch class {
		case core.ErrInvalidArgument:
			calls = callAppend | callFollow | callFiles | callList | callWatch | callEgress
		case core.ErrUnavailable:
			calls = callAny
		}
		name := strings.ToUpper(strings.ReplaceAll(class.Error(), " ", "_"))
		rows = append(rows, reason{name, errgrpc.Code(class), class, calls})
	}
	return rows
}

// The egress gateway's own failures, the table's rows for SetEgress and
// EgressStatus.
var (
	// ErrEgressOff: the sidecar runs no gateway (the sandbox was made
	// without network).
	ErrEgressOff = errors.New("the io sidecar runs no egress gateway")
	// ErrEgressUnavailable: the Pod's redirect is not in force (the node
	// lacks the CNI plugin, or the runtime bypasses the Pod's netfilter),
	// so the gateway refuses to open.
	ErrEgressUnavailable = errors.New("the Pod's egress redirect is not in force")
	// ErrRulesSealed: a policy's header rules cannot be opened with this
	// sidecar's token (seal.go): they were sealed under another (the io
	// token was rotated), or damaged; or the sidecar has no CA to serve
	// them with.
	ErrRulesSealed = errors.New("the network rules cannot be opened")
)

// Errors the Client makes of the hop itself, besides the table's.
var (
	// ErrUnavailable: the sidecar could not be reached or went away
	// mid-call (its container restarting, the Pod gone, a network
	// failure): the call may be retried.
	ErrUnavailable = errors.New("io sidecar unavailable")
	// ErrUnauthenticated: the sidecar refused the token.
	ErrUnauthenticated = errors.New("io sidecar refused the token")
	// ErrBadResponse: the sidecar answered what the protocol does not allow
	// (a malformed or out-of-order event, a message over the size limit, a
	// file description outside /workspace). The sidecar shares a Pod with
	// the sandbox; treat the sandbox as compromised.
	ErrBadResponse = errors.New("io sidecar sent a bad response")
	// ErrInternal: any other failure, including a reason the Client does
	// not believe (unknown, with another code, or not one the call may
	// answer).
	ErrInternal = errors.New("io sidecar failed")
)

// bareKind is what a status without an ErrorInfo means: gRPC's own
// errors. Of the Server's handlers' errors, only the caller's context's
// end and the sidecar's own failures (INTERNAL) go without a reason
// (statusOf).
func bareKind(c codes.Code) error {
	switch c {
	case codes.Unavailable, codes.Canceled, codes.DeadlineExceeded, codes.Aborted:
		return ErrUnavailable
	case codes.Unauthenticated, codes.PermissionDenied:
		return ErrUnauthenticated
	case codes.ResourceExhausted:
		// A message over gRPC's size limit: an answer too large to be
		// honest.
		return ErrBadResponse
	}
	return ErrInternal
}

// statusOf is the Server's end of the table: the status a handler's error
// is sent as. A status already (a stream's own failure) is sent as it is,
// the caller's context's end as its code, an error of the table with its
// reason, anything else (the sidecar's own failure) as INTERNAL.
func statusOf(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			st, derr := status.New(r.code, err.Error()).WithDetails(&errdetails.ErrorInfo{Reason: r.name, Domain: ErrorDomain})
			if derr != nil {
				return status.Error(codes.Internal, err.Error())
			}
			return st.Err()
		}
	}
	return status.Error(codes.Internal, err.Error())
}

// reasonf returns an error saying what format says that matches sentinel
// (so statusOf sends it with sentinel's reason).
func reasonf(sentinel error, format string, args ...any) error {
	return &reasonError{msg: fmt.Sprintf(format, args...), err: sentinel}
}

type reasonError struct {
	msg string
	err error
}

func (e *reasonError) Error() string { return e.msg }
func (e *reasonError) Unwrap() error { return e.err }

// Error is a failed call, as the Client returns it: its code, the
// sidecar's message (truncated and made valid UTF-8), its reason when the
// Client believed it, and what it means, which errors.Is and errors.As
// match: the table's iolog sentinel or core class, or one of this
// package's Err* values.
type Error struct {
	// Code is the gRPC code the sidecar (or the transport) returned.
	Code codes.Code
	// Message is the sidecar's text, at most about 1 KiB of valid UTF-8.
	Message string
	// Reason is the ErrorInfo's reason, when it was one of the table's
	// that the call may answer; empty otherwise.
	Reason string
	kind   error
}

func (e *Error) Error() string {
	return fmt.Sprintf("io sidecar: %s (%s)", e.Message, e.Code)
}

// Unwrap is what the error means: errors.Is(err, iolog.ErrPruned),
// core.ClassOf(err), errors.Is(err, ErrUnavailable), ...
func (e *Error) Unwrap() error { return e.kind }

// errorOf is the Client's end of the table: a call's error as an *Error
// (or ctx's error, when the caller gave up).
func errorOf(ctx context.Context, c call, err error) error {
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	st, _ := status.FromError(err) // a non-status error is Unknown
	e := &Error{Code: st.Code(), Message: sanitize(st.Message())}
	name, ok := reasonName(st)
	if !ok {
		e.kind = bareKind(st.Code())
		return e
	}
	e.kind = ErrInternal
	for _, r := range reasons {
		if r.name == name && r.code == st.Code() && r.calls&c != 0 {
			e.Reason, e.kind = r.name, r.err
			break
		}
	}
	return e
}

// hasReason says whether err is a status with an ErrorInfo (of any
// domain): an answer of the sidecar's handlers, not gRPC's own.
func hasReason(err error) bool {
	st, _ := status.FromError(err)
	_, ok := reasonName(st)
	return ok
}

// errorInfoType is ErrorInfo's type URL in a status's details.
const errorInfoType = "type.googleapis.com/google.rpc.ErrorInfo"

// reasonName returns the reason of the first ErrorInfo in st's details,
// and whether there is one; an ErrorInfo of another domain, or one that
// does not decode, gives a reason no row has. The details were bounded
// by the transport (maxHeaderList); only an ErrorInfo is decoded.
func reasonName(st *status.Status) (string, bool) {
	for _, d := range st.Proto().GetDetails() {
		if d.GetTypeUrl() != errorInfoType {
			continue
		}
		var info errdetails.ErrorInfo
		if d.UnmarshalTo(&info) != nil || info.GetDomain() != ErrorDomain {
			return "", true
		}
		return info.GetReason(), true
	}
	return "", false
}
