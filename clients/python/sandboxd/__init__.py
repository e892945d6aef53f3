"""sandboxd: a Python client for sandboxd's gRPC API (sandbox.v1).

    import sandboxd

    with sandboxd.Client("127.0.0.1:50051") as client:
        sb = client.acquire("alice")
        for event in sb.run("x = 41\nprint('hi')\nx + 1"):
            print(event)
        print(sb.run_collect("x + 1").results[0].text)   # "42"

It needs Debian's python3-grpcio and python3-protobuf (or any grpcio >= 1.51
and protobuf 4.21.x). See clients/python/README.md.
"""

from .client import MAX_MESSAGE_SIZE, Client, Execution, Files, Sandbox, StatelessRun, VolumeFiles, Watch, connect
from .errors import (
    Aborted,
    AlreadyExists,
    Cancelled,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    SandboxdError,
    Unauthenticated,
    Unavailable,
    Unimplemented,
)
from .events import (
    AuditEvent,
    CommandInfo,
    CommandStatus,
    Display,
    Done,
    Error,
    Event,
    FileInfo,
    FileRef,
    HostInfo,
    MetricsSample,
    NetworkCounters,
    NetworkDenial,
    NetworkPolicy,
    NetworkStatus,
    Result,
    SandboxInfo,
    SnapshotInfo,
    Started,
    TemplateBuild,
    TemplateBuildLine,
    TemplateInfo,
    TemplateVersion,
    VolumeInfo,
    VolumeMount,
    Stderr,
    Stdout,
    WatchEvent,
)

__all__ = [
    "AuditEvent",
    "Client",
    "Sandbox",
    "StatelessRun",
    "Execution",
    "Files",
    "Watch",
    "connect",
    "MAX_MESSAGE_SIZE",
    "CommandStatus",
    "CommandInfo",
    "Event",
    "Started",
    "Stdout",
    "Stderr",
    "Display",
    "Result",
    "Error",
    "Done",
    "FileRef",
    "FileInfo",
    "WatchEvent",
    "SandboxInfo",
    "SnapshotInfo",
    "TemplateInfo",
    "TemplateVersion",
    "TemplateBuild",
    "TemplateBuildLine",
    "VolumeInfo",
    "VolumeMount",
    "VolumeFiles",
    "NetworkPolicy",
    "NetworkCounters",
    "NetworkDenial",
    "NetworkStatus",
    "HostInfo",
    "MetricsSample",
    "SandboxdError",
    "NotFound",
    "InvalidArgument",
    "AlreadyExists",
    "FailedPrecondition",
    "ResourceExhausted",
    "Unavailable",
    "Unimplemented",
    "PermissionDenied",
    "Unauthenticated",
    "Aborted",
    "DeadlineExceeded",
    "Cancelled",
]
