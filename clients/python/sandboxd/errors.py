"""Exceptions raised by the sandboxd client, one per gRPC status code.

Every failed call raises a subclass of SandboxdError carrying the gRPC status
code and the server's message (which says what was wrong). The meaning of
each code is the API's error model (proto/sandbox/v1/sandbox.proto).
"""

import grpc

__all__ = [
    "SandboxdError",
    "NotFound",
    "InvalidArgument",
    "FailedPrecondition",
    "ResourceExhausted",
    "Unavailable",
    "PermissionDenied",
    "Unauthenticated",
    "Aborted",
    "DeadlineExceeded",
    "Cancelled",
    "Unimplemented",
    "from_rpc_error",
]


class SandboxdError(Exception):
    """A failed sandboxd call. `code` is the grpc.StatusCode, `message` the
    server's message. Codes without a subclass of their own (INTERNAL,
    UNKNOWN, ...) raise SandboxdError itself."""

    code = grpc.StatusCode.UNKNOWN

    def __init__(self, message, code=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self):
        return "%s: %s" % (self.code.name, self.message)


class NotFound(SandboxdError):
    """The sandbox, command or file does not exist (never existed, expired,
    was deleted, or belongs to another tenant)."""

    code = grpc.StatusCode.NOT_FOUND


class InvalidArgument(SandboxdError):
    """The request itself is bad; do not retry it unchanged."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class AlreadyExists(SandboxdError):
    """Something the request would create is there already: a file or
    directory, or a command ID used for a different command."""

    code = grpc.StatusCode.ALREADY_EXISTS


class FailedPrecondition(SandboxdError):
    """The request is valid but cannot be served now (sandbox dead, image
    missing)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class ResourceExhausted(SandboxdError):
    """A cap was reached; the message names it."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class Unavailable(SandboxdError):
    """sandboxd or a dependency (the Docker engine) is down; the call may be
    retried."""

    code = grpc.StatusCode.UNAVAILABLE


class PermissionDenied(SandboxdError):
    """The caller's token may not do this."""

    code = grpc.StatusCode.PERMISSION_DENIED


class Unauthenticated(SandboxdError):
    """The call carried no valid token (see Client(token=...))."""

    code = grpc.StatusCode.UNAUTHENTICATED


class Aborted(SandboxdError):
    """The call was aborted (e.g. by a concurrent change); it may be
    retried."""

    code = grpc.StatusCode.ABORTED


class DeadlineExceeded(SandboxdError):
    """The call's deadline passed."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class Cancelled(SandboxdError):
    """The call was cancelled (by the client, or the channel was closed)."""

    code = grpc.StatusCode.CANCELLED


class Unimplemented(SandboxdError):
    """The server's backend lacks the feature (e.g. templates on the
    Kubernetes backend, snapshots without a snapshot directory); the message
    names the backend and the feature."""

    code = grpc.StatusCode.UNIMPLEMENTED


_BY_CODE = {
    cls.code: cls
    for cls in (
        NotFound,
        InvalidArgument,
        AlreadyExists,
        FailedPrecondition,
        ResourceExhausted,
        Unavailable,
        PermissionDenied,
        Unauthenticated,
        Aborted,
        DeadlineExceeded,
        Cancelled,
        Unimplemented,
    )
}


def from_rpc_error(err):
    """Returns the SandboxdError for a grpc.RpcError (an error raised by a
    gRPC call, which has code() and details()). The original error is kept
    as the new one's __cause__ when raised with `raise ... from err`."""
    code = err.code() if hasattr(err, "code") else None
    message = err.details() if hasattr(err, "details") else None
    if not isinstance(code, grpc.StatusCode):
        code = grpc.StatusCode.UNKNOWN
    if not message:
        message = str(err) or code.name.lower()
    cls = _BY_CODE.get(code, SandboxdError)
    return cls(message, code)


def from_code(code_number, message):
    """Returns the SandboxdError for a status code number and message (a
    fork's failure in ForkSandbox's answer)."""
    code = next((c for c in grpc.StatusCode if c.value[0] == code_number), grpc.StatusCode.UNKNOWN)
    cls = _BY_CODE.get(code, SandboxdError)
    return cls(message or code.name.lower(), code)
