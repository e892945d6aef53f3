from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

COMMAND_STATE_FINISHED: CommandState
COMMAND_STATE_QUEUED: CommandState
COMMAND_STATE_RUNNING: CommandState
COMMAND_STATE_UNSPECIFIED: CommandState
COMMAND_STATUS_ERROR: CommandStatus
COMMAND_STATUS_INTERRUPTED: CommandStatus
COMMAND_STATUS_KILLED: CommandStatus
COMMAND_STATUS_OK: CommandStatus
COMMAND_STATUS_TIMEOUT: CommandStatus
COMMAND_STATUS_UNSPECIFIED: CommandStatus
DESCRIPTOR: _descriptor.FileDescriptor
FILE_TYPE_DIRECTORY: FileType
FILE_TYPE_FILE: FileType
FILE_TYPE_OTHER: FileType
FILE_TYPE_SYMLINK: FileType
FILE_TYPE_UNSPECIFIED: FileType
IDLE_ACTION_DELETE: IdleAction
IDLE_ACTION_HIBERNATE: IdleAction
IDLE_ACTION_UNSPECIFIED: IdleAction
NETWORK_DENIAL_KIND_DNS: NetworkDenialKind
NETWORK_DENIAL_KIND_TCP: NetworkDenialKind
NETWORK_DENIAL_KIND_UNSPECIFIED: NetworkDenialKind
SANDBOX_STATE_DEAD: SandboxState
SANDBOX_STATE_HIBERNATED: SandboxState
SANDBOX_STATE_RUNNING: SandboxState
SANDBOX_STATE_UNSPECIFIED: SandboxState
TEMPLATE_STATE_BUILDING: TemplateState
TEMPLATE_STATE_FAILED: TemplateState
TEMPLATE_STATE_READY: TemplateState
TEMPLATE_STATE_UNSPECIFIED: TemplateState
WATCH_EVENT_TYPE_CREATE: WatchEventType
WATCH_EVENT_TYPE_REMOVE: WatchEventType
WATCH_EVENT_TYPE_RENAME: WatchEventType
WATCH_EVENT_TYPE_UNSPECIFIED: WatchEventType
WATCH_EVENT_TYPE_WRITE: WatchEventType

class AcquireSandboxRequest(_message.Message):
    __slots__ = ["options", "user_id"]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    options: SandboxOptions
    user_id: str
    def __init__(self, user_id: _Optional[str] = ..., options: _Optional[_Union[SandboxOptions, _Mapping]] = ...) -> None: ...

class AcquireSandboxResponse(_message.Message):
    __slots__ = ["created", "replaced_reason", "replaced_sandbox_id", "sandbox", "state_lost", "woke"]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    REPLACED_REASON_FIELD_NUMBER: _ClassVar[int]
    REPLACED_SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    STATE_LOST_FIELD_NUMBER: _ClassVar[int]
    WOKE_FIELD_NUMBER: _ClassVar[int]
    created: bool
    replaced_reason: str
    replaced_sandbox_id: str
    sandbox: Sandbox
    state_lost: bool
    woke: WakeInfo
    def __init__(self, sandbox: _Optional[_Union[Sandbox, _Mapping]] = ..., created: bool = ..., replaced_sandbox_id: _Optional[str] = ..., state_lost: bool = ..., replaced_reason: _Optional[str] = ..., woke: _Optional[_Union[WakeInfo, _Mapping]] = ...) -> None: ...

class AptStep(_message.Message):
    __slots__ = ["packages"]
    PACKAGES_FIELD_NUMBER: _ClassVar[int]
    packages: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, packages: _Optional[_Iterable[str]] = ...) -> None: ...

class AuditEvent(_message.Message):
    __slots__ = ["action", "admin", "bytes", "command_id", "context_id", "count", "dropped_count", "duration", "language", "message", "outcome", "path", "sandbox_id", "snapshot", "template", "tenant", "time", "to_path", "token_name", "user_id", "volume"]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    DROPPED_COUNT_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    TOKEN_NAME_FIELD_NUMBER: _ClassVar[int]
    TO_PATH_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    VOLUME_FIELD_NUMBER: _ClassVar[int]
    action: str
    admin: bool
    bytes: int
    command_id: str
    context_id: str
    count: int
    dropped_count: int
    duration: _duration_pb2.Duration
    language: str
    message: str
    outcome: str
    path: str
    sandbox_id: str
    snapshot: str
    template: str
    tenant: str
    time: _timestamp_pb2.Timestamp
    to_path: str
    token_name: str
    user_id: str
    volume: str
    def __init__(self, time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., tenant: _Optional[str] = ..., token_name: _Optional[str] = ..., admin: bool = ..., action: _Optional[str] = ..., sandbox_id: _Optional[str] = ..., user_id: _Optional[str] = ..., path: _Optional[str] = ..., to_path: _Optional[str] = ..., command_id: _Optional[str] = ..., context_id: _Optional[str] = ..., language: _Optional[str] = ..., bytes: _Optional[int] = ..., outcome: _Optional[str] = ..., message: _Optional[str] = ..., duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., dropped_count: _Optional[int] = ..., snapshot: _Optional[str] = ..., count: _Optional[int] = ..., volume: _Optional[str] = ..., template: _Optional[str] = ...) -> None: ...

class BuildTemplateRequest(_message.Message):
    __slots__ = ["force", "name", "spec"]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    force: bool
    name: str
    spec: TemplateSpec
    def __init__(self, name: _Optional[str] = ..., spec: _Optional[_Union[TemplateSpec, _Mapping]] = ..., force: bool = ...) -> None: ...

class BuildTemplateResponse(_message.Message):
    __slots__ = ["done", "line", "started"]
    DONE_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    done: TemplateVersion
    line: TemplateBuildLine
    started: TemplateBuildStarted
    def __init__(self, started: _Optional[_Union[TemplateBuildStarted, _Mapping]] = ..., line: _Optional[_Union[TemplateBuildLine, _Mapping]] = ..., done: _Optional[_Union[TemplateVersion, _Mapping]] = ...) -> None: ...

class CloseStdinRequest(_message.Message):
    __slots__ = ["command_id", "sandbox_id"]
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    command_id: str
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ..., command_id: _Optional[str] = ...) -> None: ...

class CloseStdinResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class CommandInfo(_message.Message):
    __slots__ = ["command_id", "context_id", "duration", "exit_code", "finished_at", "language", "output_available", "pty", "started_at", "state", "status", "stdin"]
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    PTY_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    command_id: str
    context_id: str
    duration: _duration_pb2.Duration
    exit_code: int
    finished_at: _timestamp_pb2.Timestamp
    language: str
    output_available: bool
    pty: bool
    started_at: _timestamp_pb2.Timestamp
    state: CommandState
    status: CommandStatus
    stdin: bool
    def __init__(self, command_id: _Optional[str] = ..., language: _Optional[str] = ..., state: _Optional[_Union[CommandState, str]] = ..., status: _Optional[_Union[CommandStatus, str]] = ..., started_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., exit_code: _Optional[int] = ..., output_available: bool = ..., stdin: bool = ..., pty: bool = ..., context_id: _Optional[str] = ...) -> None: ...

class Context(_message.Message):
    __slots__ = ["context_id", "created_at", "cwd", "language"]
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    created_at: _timestamp_pb2.Timestamp
    cwd: str
    language: str
    def __init__(self, context_id: _Optional[str] = ..., language: _Optional[str] = ..., cwd: _Optional[str] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CopyStep(_message.Message):
    __slots__ = ["archive", "dest", "mode", "owner", "src"]
    ARCHIVE_FIELD_NUMBER: _ClassVar[int]
    DEST_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    SRC_FIELD_NUMBER: _ClassVar[int]
    archive: str
    dest: str
    mode: int
    owner: str
    src: str
    def __init__(self, archive: _Optional[str] = ..., src: _Optional[str] = ..., dest: _Optional[str] = ..., mode: _Optional[int] = ..., owner: _Optional[str] = ...) -> None: ...

class CreateContextRequest(_message.Message):
    __slots__ = ["cwd", "language", "sandbox_id"]
    CWD_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    cwd: str
    language: str
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ..., language: _Optional[str] = ..., cwd: _Optional[str] = ...) -> None: ...

class CreateContextResponse(_message.Message):
    __slots__ = ["context"]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    context: Context
    def __init__(self, context: _Optional[_Union[Context, _Mapping]] = ...) -> None: ...

class CreateSnapshotRequest(_message.Message):
    __slots__ = ["name", "sandbox_id"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class CreateSnapshotResponse(_message.Message):
    __slots__ = ["snapshot"]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    snapshot: Snapshot
    def __init__(self, snapshot: _Optional[_Union[Snapshot, _Mapping]] = ...) -> None: ...

class CreateVolumeRequest(_message.Message):
    __slots__ = ["name", "size_bytes"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    size_bytes: int
    def __init__(self, name: _Optional[str] = ..., size_bytes: _Optional[int] = ...) -> None: ...

class CreateVolumeResponse(_message.Message):
    __slots__ = ["volume"]
    VOLUME_FIELD_NUMBER: _ClassVar[int]
    volume: Volume
    def __init__(self, volume: _Optional[_Union[Volume, _Mapping]] = ...) -> None: ...

class DeleteContextRequest(_message.Message):
    __slots__ = ["context_id", "sandbox_id"]
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ..., context_id: _Optional[str] = ...) -> None: ...

class DeleteContextResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class DeleteSandboxRequest(_message.Message):
    __slots__ = ["sandbox_id"]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ...) -> None: ...

class DeleteSandboxResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class DeleteSnapshotRequest(_message.Message):
    __slots__ = ["snapshot"]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    snapshot: str
    def __init__(self, snapshot: _Optional[str] = ...) -> None: ...

class DeleteSnapshotResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class DeleteTemplateRequest(_message.Message):
    __slots__ = ["template"]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    template: str
    def __init__(self, template: _Optional[str] = ...) -> None: ...

class DeleteTemplateResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class DeleteVolumeRequest(_message.Message):
    __slots__ = ["force", "volume"]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    VOLUME_FIELD_NUMBER: _ClassVar[int]
    force: bool
    volume: str
    def __init__(self, volume: _Optional[str] = ..., force: bool = ...) -> None: ...

class DeleteVolumeResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class DiskUsage(_message.Message):
    __slots__ = ["limit_bytes", "used_bytes"]
    LIMIT_BYTES_FIELD_NUMBER: _ClassVar[int]
    USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    limit_bytes: int
    used_bytes: int
    def __init__(self, used_bytes: _Optional[int] = ..., limit_bytes: _Optional[int] = ...) -> None: ...

class Display(_message.Message):
    __slots__ = ["data"]
    class DataEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: _containers.ScalarMap[str, str]
    def __init__(self, data: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Done(_message.Message):
    __slots__ = ["duration", "execution_count", "exit_code", "files", "output_truncated", "reason", "state_lost", "status", "time"]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_COUNT_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STATE_LOST_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    duration: _duration_pb2.Duration
    execution_count: int
    exit_code: int
    files: _containers.RepeatedCompositeFieldContainer[FileRef]
    output_truncated: bool
    reason: str
    state_lost: bool
    status: CommandStatus
    time: _timestamp_pb2.Timestamp
    def __init__(self, status: _Optional[_Union[CommandStatus, str]] = ..., duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., state_lost: bool = ..., reason: _Optional[str] = ..., exit_code: _Optional[int] = ..., files: _Optional[_Iterable[_Union[FileRef, _Mapping]]] = ..., time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., output_truncated: bool = ..., execution_count: _Optional[int] = ...) -> None: ...

class DownloadFileRequest(_message.Message):
    __slots__ = ["path", "sandbox_id"]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    path: str
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class DownloadFileResponse(_message.Message):
    __slots__ = ["chunk", "file"]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    chunk: bytes
    file: FileInfo
    def __init__(self, file: _Optional[_Union[FileInfo, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class DownloadVolumeFileRequest(_message.Message):
    __slots__ = ["path", "volume"]
    PATH_FIELD_NUMBER: _ClassVar[int]
    VOLUME_FIELD_NUMBER: _ClassVar[int]
    path: str
    volume: str
    def __init__(self, volume: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class DownloadVolumeFileResponse(_message.Message):
    __slots__ = ["chunk", "file"]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    chunk: bytes
    file: FileInfo
    def __init__(self, file: _Optional[_Union[FileInfo, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class EnvStep(_message.Message):
    __slots__ = ["vars"]
    class VarsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    VARS_FIELD_NUMBER: _ClassVar[int]
    vars: _containers.ScalarMap[str, str]
    def __init__(self, vars: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ["ename", "evalue", "traceback"]
    ENAME_FIELD_NUMBER: _ClassVar[int]
    EVALUE_FIELD_NUMBER: _ClassVar[int]
    TRACEBACK_FIELD_NUMBER: _ClassVar[int]
    ename: str
    evalue: str
    traceback: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, ename: _Optional[str] = ..., evalue: _Optional[str] = ..., traceback: _Optional[_Iterable[str]] = ...) -> None: ...

class ExecuteEvent(_message.Message):
    __slots__ = ["command_id", "display", "done", "error", "result", "seq", "started", "stderr", "stdout"]
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    command_id: str
    display: Display
    done: Done
    error: Error
    result: Result
    seq: int
    started: Started
    stderr: OutputChunk
    stdout: OutputChunk
    def __init__(self, seq: _Optional[int] = ..., command_id: _Optional[str] = ..., started: _Optional[_Union[Started, _Mapping]] = ..., stdout: _Optional[_Union[OutputChunk, _Mapping]] = ..., stderr: _Optional[_Union[OutputChunk, _Mapping]] = ..., display: _Optional[_Union[Display, _Mapping]] = ..., result: _Optional[_Union[Result, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ..., done: _Optional[_Union[Done, _Mapping]] = ...) -> None: ...

class ExecuteRequest(_message.Message):
    __slots__ = ["code", "command_id", "context_id", "env", "language", "pty", "sandbox_id", "stdin", "timeout"]
    class EnvEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CODE_FIELD_NUMBER: _ClassVar[int]
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    PTY_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    code: str
    command_id: str
    context_id: str
    env: _containers.ScalarMap[str, str]
    language: str
    pty: PtySize
    sandbox_id: str
    stdin: bool
    timeout: _duration_pb2.Duration
    def __init__(self, sandbox_id: _Optional[str] = ..., command_id: _Optional[str] = ..., language: _Optional[str] = ..., code: _Optional[str] = ..., timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., env: _Optional[_Mapping[str, str]] = ..., stdin: bool = ..., pty: _Optional[_Union[PtySize, _Mapping]] = ..., context_id: _Optional[str] = ...) -> None: ...

class FileInfo(_message.Message):
    __slots__ = ["gid", "is_dir", "mod_time", "mode", "path", "size", "type", "uid"]
    GID_FIELD_NUMBER: _ClassVar[int]
    IS_DIR_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    MOD_TIME_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    gid: int
    is_dir: bool
    mod_time: _timestamp_pb2.Timestamp
    mode: int
    path: str
    size: int
    type: FileType
    uid: int
    def __init__(self, path: _Optional[str] = ..., size: _Optional[int] = ..., is_dir: bool = ..., mod_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., type: _Optional[_Union[FileType, str]] = ..., mode: _Optional[int] = ..., uid: _Optional[int] = ..., gid: _Optional[int] = ...) -> None: ...

class FileRef(_message.Message):
    __slots__ = ["path", "size"]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    path: str
    size: int
    def __init__(self, path: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class FollowTemplateBuildRequest(_message.Message):
    __slots__ = ["after_seq", "template", "version"]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    after_seq: int
    template: str
    version: int
    def __init__(self, template: _Optional[str] = ..., version: _Optional[int] = ..., after_seq: _Optional[int] = ...) -> None: ...

class FollowTemplateBuildResponse(_message.Message):
    __slots__ = ["done", "line"]
    DONE_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    done: TemplateVersion
    line: TemplateBuildLine
    def __init__(self, line: _Optional[_Union[TemplateBuildLine, _Mapping]] = ..., done: _Optional[_Union[TemplateVersion, _Mapping]] = ...) -> None: ...

class ForkResult(_message.Message):
    __slots__ = ["error_code", "error_message", "sandbox", "woke"]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    WOKE_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    sandbox: Sandbox
    woke: WakeInfo
    def __init__(self, sandbox: _Optional[_Union[Sandbox, _Mapping]] = ..., woke: _Optional[_Union[WakeInfo, _Mapping]] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class ForkSandboxRequest(_message.Message):
    __slots__ = ["count", "options", "sandbox_id", "user_ids"]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    USER_IDS_FIELD_NUMBER: _ClassVar[int]
    count: int
    options: SandboxOptions
    sandbox_id: str
    user_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, sandbox_id: _Optional[str] = ..., count: _Optional[int] = ..., user_ids: _Optional[_Iterable[str]] = ..., options: _Optional[_Union[SandboxOptions, _Mapping]] = ...) -> None: ...

class ForkSandboxResponse(_message.Message):
    __slots__ = ["results"]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ForkResult]
    def __init__(self, results: _Optional[_Iterable[_Union[ForkResult, _Mapping]]] = ...) -> None: ...

class GetHostRequest(_message.Message):
    __slots__ = ["port", "sandbox_id"]
    PORT_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    port: int
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ..., port: _Optional[int] = ...) -> None: ...

class GetHostResponse(_message.Message):
    __slots__ = ["token_header", "token_required", "traffic_token", "url"]
    TOKEN_HEADER_FIELD_NUMBER: _ClassVar[int]
    TOKEN_REQUIRED_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_TOKEN_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    token_header: str
    token_required: bool
    traffic_token: str
    url: str
    def __init__(self, url: _Optional[str] = ..., token_required: bool = ..., traffic_token: _Optional[str] = ..., token_header: _Optional[str] = ...) -> None: ...

class GetNetworkStatusRequest(_message.Message):
    __slots__ = ["sandbox_id"]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ...) -> None: ...

class GetNetworkStatusResponse(_message.Message):
    __slots__ = ["counters", "denials", "policy"]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    DENIALS_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    counters: NetworkCounters
    denials: _containers.RepeatedCompositeFieldContainer[NetworkDenial]
    policy: NetworkPolicy
    def __init__(self, policy: _Optional[_Union[NetworkPolicy, _Mapping]] = ..., counters: _Optional[_Union[NetworkCounters, _Mapping]] = ..., denials: _Optional[_Iterable[_Union[NetworkDenial, _Mapping]]] = ...) -> None: ...

class GetSandboxMetricsRequest(_message.Message):
    __slots__ = ["sandbox_id", "since"]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    since: _timestamp_pb2.Timestamp
    def __init__(self, sandbox_id: _Optional[str] = ..., since: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetSandboxMetricsResponse(_message.Message):
    __slots__ = ["samples"]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    samples: _containers.RepeatedCompositeFieldContainer[SandboxMetricsSample]
    def __init__(self, samples: _Optional[_Iterable[_Union[SandboxMetricsSample, _Mapping]]] = ...) -> None: ...

class GetSandboxRequest(_message.Message):
    __slots__ = ["sandbox_id"]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ...) -> None: ...

class GetSandboxResponse(_message.Message):
    __slots__ = ["sandbox"]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: Sandbox
    def __init__(self, sandbox: _Optional[_Union[Sandbox, _Mapping]] = ...) -> None: ...

class GetTemplateRequest(_message.Message):
    __slots__ = ["template"]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    template: str
    def __init__(self, template: _Optional[str] = ...) -> None: ...

class GetTemplateResponse(_message.Message):
    __slots__ = ["template"]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    template: Template
    def __init__(self, template: _Optional[_Union[Template, _Mapping]] = ...) -> None: ...

class GetVolumeRequest(_message.Message):
    __slots__ = ["volume"]
    VOLUME_FIELD_NUMBER: _ClassVar[int]
    volume: str
    def __init__(self, volume: _Optional[str] = ...) -> None: ...

class GetVolumeResponse(_message.Message):
    __slots__ = ["volume"]
    VOLUME_FIELD_NUMBER: _ClassVar[int]
    volume: Volume
    def __init__(self, volume: _Optional[_Union[Volume, _Mapping]] = ...) -> None: ...

class HibernateSandboxRequest(_message.Message):
    __slots__ = ["sandbox_id"]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ...) -> None: ...

class HibernateSandboxResponse(_message.Message):
    __slots__ = ["sandbox"]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: Sandbox
    def __init__(self, sandbox: _Optional[_Union[Sandbox, _Mapping]] = ...) -> None: ...

class InterruptCommandRequest(_message.Message):
    __slots__ = ["command_id", "sandbox_id"]
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    command_id: str
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ..., command_id: _Optional[str] = ...) -> None: ...

class InterruptCommandResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ListAuditEventsRequest(_message.Message):
    __slots__ = ["action", "page_size", "page_token", "sandbox_id", "since", "tenant", "until"]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    action: str
    page_size: int
    page_token: str
    sandbox_id: str
    since: _timestamp_pb2.Timestamp
    tenant: str
    until: _timestamp_pb2.Timestamp
    def __init__(self, tenant: _Optional[str] = ..., sandbox_id: _Optional[str] = ..., action: _Optional[str] = ..., since: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., until: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListAuditEventsResponse(_message.Message):
    __slots__ = ["events", "next_page_token"]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[AuditEvent]
    next_page_token: str
    def __init__(self, events: _Optional[_Iterable[_Union[AuditEvent, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListCommandsRequest(_message.Message):
    __slots__ = ["page_size", "page_token", "sandbox_id"]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListCommandsResponse(_message.Message):
    __slots__ = ["commands", "next_page_token", "total_commands"]
    COMMANDS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_COMMANDS_FIELD_NUMBER: _ClassVar[int]
    commands: _containers.RepeatedCompositeFieldContainer[CommandInfo]
    next_page_token: str
    total_commands: int
    def __init__(self, commands: _Optional[_Iterable[_Union[CommandInfo, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., total_commands: _Optional[int] = ...) -> None: ...

class ListContextsRequest(_message.Message):
    __slots__ = ["sandbox_id"]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ...) -> None: ...

class ListContextsResponse(_message.Message):
    __slots__ = ["contexts"]
    CONTEXTS_FIELD_NUMBER: _ClassVar[int]
    contexts: _containers.RepeatedCompositeFieldContainer[Context]
    def __init__(self, contexts: _Optional[_Iterable[_Union[Context, _Mapping]]] = ...) -> None: ...

class ListFilesRequest(_message.Message):
    __slots__ = ["depth", "path", "sandbox_id"]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    depth: int
    path: str
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ..., path: _Optional[str] = ..., depth: _Optional[int] = ...) -> None: ...

class ListFilesResponse(_message.Message):
    __slots__ = ["files"]
    FILES_FIELD_NUMBER: _ClassVar[int]
    files: _containers.RepeatedCompositeFieldContainer[FileInfo]
    def __init__(self, files: _Optional[_Iterable[_Union[FileInfo, _Mapping]]] = ...) -> None: ...

class ListSandboxesRequest(_message.Message):
    __slots__ = ["metadata", "state", "tenant", "user_id"]
    class MetadataEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    METADATA_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    metadata: _containers.ScalarMap[str, str]
    state: SandboxState
    tenant: str
    user_id: str
    def __init__(self, user_id: _Optional[str] = ..., state: _Optional[_Union[SandboxState, str]] = ..., tenant: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ListSandboxesResponse(_message.Message):
    __slots__ = ["sandboxes"]
    SANDBOXES_FIELD_NUMBER: _ClassVar[int]
    sandboxes: _containers.RepeatedCompositeFieldContainer[Sandbox]
    def __init__(self, sandboxes: _Optional[_Iterable[_Union[Sandbox, _Mapping]]] = ...) -> None: ...

class ListSnapshotsRequest(_message.Message):
    __slots__ = ["sandbox_id", "tenant"]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    tenant: str
    def __init__(self, sandbox_id: _Optional[str] = ..., tenant: _Optional[str] = ...) -> None: ...

class ListSnapshotsResponse(_message.Message):
    __slots__ = ["snapshots"]
    SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    snapshots: _containers.RepeatedCompositeFieldContainer[Snapshot]
    def __init__(self, snapshots: _Optional[_Iterable[_Union[Snapshot, _Mapping]]] = ...) -> None: ...

class ListTemplatesRequest(_message.Message):
    __slots__ = ["tenant"]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    def __init__(self, tenant: _Optional[str] = ...) -> None: ...

class ListTemplatesResponse(_message.Message):
    __slots__ = ["templates"]
    TEMPLATES_FIELD_NUMBER: _ClassVar[int]
    templates: _containers.RepeatedCompositeFieldContainer[Template]
    def __init__(self, templates: _Optional[_Iterable[_Union[Template, _Mapping]]] = ...) -> None: ...

class ListVolumeFilesRequest(_message.Message):
    __slots__ = ["depth", "path", "volume"]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    VOLUME_FIELD_NUMBER: _ClassVar[int]
    depth: int
    path: str
    volume: str
    def __init__(self, volume: _Optional[str] = ..., path: _Optional[str] = ..., depth: _Optional[int] = ...) -> None: ...

class ListVolumeFilesResponse(_message.Message):
    __slots__ = ["files"]
    FILES_FIELD_NUMBER: _ClassVar[int]
    files: _containers.RepeatedCompositeFieldContainer[FileInfo]
    def __init__(self, files: _Optional[_Iterable[_Union[FileInfo, _Mapping]]] = ...) -> None: ...

class ListVolumesRequest(_message.Message):
    __slots__ = ["tenant"]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    def __init__(self, tenant: _Optional[str] = ...) -> None: ...

class ListVolumesResponse(_message.Message):
    __slots__ = ["volumes"]
    VOLUMES_FIELD_NUMBER: _ClassVar[int]
    volumes: _containers.RepeatedCompositeFieldContainer[Volume]
    def __init__(self, volumes: _Optional[_Iterable[_Union[Volume, _Mapping]]] = ...) -> None: ...

class LostName(_message.Message):
    __slots__ = ["name", "reason"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    name: str
    reason: str
    def __init__(self, name: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class MakeDirectoryRequest(_message.Message):
    __slots__ = ["parents", "path", "sandbox_id"]
    PARENTS_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    parents: bool
    path: str
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ..., path: _Optional[str] = ..., parents: bool = ...) -> None: ...

class MakeDirectoryResponse(_message.Message):
    __slots__ = ["file"]
    FILE_FIELD_NUMBER: _ClassVar[int]
    file: FileInfo
    def __init__(self, file: _Optional[_Union[FileInfo, _Mapping]] = ...) -> None: ...

class MakeVolumeDirectoryRequest(_message.Message):
    __slots__ = ["parents", "path", "volume"]
    PARENTS_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    VOLUME_FIELD_NUMBER: _ClassVar[int]
    parents: bool
    path: str
    volume: str
    def __init__(self, volume: _Optional[str] = ..., path: _Optional[str] = ..., parents: bool = ...) -> None: ...

class MakeVolumeDirectoryResponse(_message.Message):
    __slots__ = ["file"]
    FILE_FIELD_NUMBER: _ClassVar[int]
    file: FileInfo
    def __init__(self, file: _Optional[_Union[FileInfo, _Mapping]] = ...) -> None: ...

class NetworkBytes(_message.Message):
    __slots__ = ["bytes_in", "bytes_out"]
    BYTES_IN_FIELD_NUMBER: _ClassVar[int]
    BYTES_OUT_FIELD_NUMBER: _ClassVar[int]
    bytes_in: int
    bytes_out: int
    def __init__(self, bytes_in: _Optional[int] = ..., bytes_out: _Optional[int] = ...) -> None: ...

class NetworkCounters(_message.Message):
    __slots__ = ["bytes_in", "bytes_out", "connections_allowed", "connections_denied", "connections_open", "connections_refused_at_cap", "denials_dropped", "dns_allowed", "dns_denied", "dns_rate_limited", "rule_requests"]
    BYTES_IN_FIELD_NUMBER: _ClassVar[int]
    BYTES_OUT_FIELD_NUMBER: _ClassVar[int]
    CONNECTIONS_ALLOWED_FIELD_NUMBER: _ClassVar[int]
    CONNECTIONS_DENIED_FIELD_NUMBER: _ClassVar[int]
    CONNECTIONS_OPEN_FIELD_NUMBER: _ClassVar[int]
    CONNECTIONS_REFUSED_AT_CAP_FIELD_NUMBER: _ClassVar[int]
    DENIALS_DROPPED_FIELD_NUMBER: _ClassVar[int]
    DNS_ALLOWED_FIELD_NUMBER: _ClassVar[int]
    DNS_DENIED_FIELD_NUMBER: _ClassVar[int]
    DNS_RATE_LIMITED_FIELD_NUMBER: _ClassVar[int]
    RULE_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    bytes_in: int
    bytes_out: int
    connections_allowed: int
    connections_denied: int
    connections_open: int
    connections_refused_at_cap: int
    denials_dropped: int
    dns_allowed: int
    dns_denied: int
    dns_rate_limited: int
    rule_requests: int
    def __init__(self, bytes_out: _Optional[int] = ..., bytes_in: _Optional[int] = ..., connections_allowed: _Optional[int] = ..., connections_denied: _Optional[int] = ..., dns_allowed: _Optional[int] = ..., dns_denied: _Optional[int] = ..., connections_open: _Optional[int] = ..., rule_requests: _Optional[int] = ..., denials_dropped: _Optional[int] = ..., dns_rate_limited: _Optional[int] = ..., connections_refused_at_cap: _Optional[int] = ...) -> None: ...

class NetworkDenial(_message.Message):
    __slots__ = ["address", "kind", "name", "reason", "time"]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    address: str
    kind: NetworkDenialKind
    name: str
    reason: str
    time: _timestamp_pb2.Timestamp
    def __init__(self, time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., kind: _Optional[_Union[NetworkDenialKind, str]] = ..., name: _Optional[str] = ..., address: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class NetworkPolicy(_message.Message):
    __slots__ = ["allow_out", "allow_public_traffic", "deny_out", "rules"]
    class RulesEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: NetworkRule
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[NetworkRule, _Mapping]] = ...) -> None: ...
    ALLOW_OUT_FIELD_NUMBER: _ClassVar[int]
    ALLOW_PUBLIC_TRAFFIC_FIELD_NUMBER: _ClassVar[int]
    DENY_OUT_FIELD_NUMBER: _ClassVar[int]
    RULES_FIELD_NUMBER: _ClassVar[int]
    allow_out: _containers.RepeatedScalarFieldContainer[str]
    allow_public_traffic: bool
    deny_out: _containers.RepeatedScalarFieldContainer[str]
    rules: _containers.MessageMap[str, NetworkRule]
    def __init__(self, allow_out: _Optional[_Iterable[str]] = ..., deny_out: _Optional[_Iterable[str]] = ..., rules: _Optional[_Mapping[str, NetworkRule]] = ..., allow_public_traffic: bool = ...) -> None: ...

class NetworkRule(_message.Message):
    __slots__ = ["headers"]
    class HeadersEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    headers: _containers.ScalarMap[str, str]
    def __init__(self, headers: _Optional[_Mapping[str, str]] = ...) -> None: ...

class OutputChunk(_message.Message):
    __slots__ = ["text"]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class PtySize(_message.Message):
    __slots__ = ["cols", "rows"]
    COLS_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    cols: int
    rows: int
    def __init__(self, rows: _Optional[int] = ..., cols: _Optional[int] = ...) -> None: ...

class RemoveRequest(_message.Message):
    __slots__ = ["path", "recursive", "sandbox_id"]
    PATH_FIELD_NUMBER: _ClassVar[int]
    RECURSIVE_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    path: str
    recursive: bool
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ..., path: _Optional[str] = ..., recursive: bool = ...) -> None: ...

class RemoveResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class RemoveVolumeFileRequest(_message.Message):
    __slots__ = ["path", "recursive", "volume"]
    PATH_FIELD_NUMBER: _ClassVar[int]
    RECURSIVE_FIELD_NUMBER: _ClassVar[int]
    VOLUME_FIELD_NUMBER: _ClassVar[int]
    path: str
    recursive: bool
    volume: str
    def __init__(self, volume: _Optional[str] = ..., path: _Optional[str] = ..., recursive: bool = ...) -> None: ...

class RemoveVolumeFileResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class RenameRequest(_message.Message):
    __slots__ = ["overwrite", "sandbox_id", "to"]
    FROM_FIELD_NUMBER: _ClassVar[int]
    OVERWRITE_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    overwrite: bool
    sandbox_id: str
    to: str
    def __init__(self, sandbox_id: _Optional[str] = ..., to: _Optional[str] = ..., overwrite: bool = ..., **kwargs) -> None: ...

class RenameResponse(_message.Message):
    __slots__ = ["file"]
    FILE_FIELD_NUMBER: _ClassVar[int]
    file: FileInfo
    def __init__(self, file: _Optional[_Union[FileInfo, _Mapping]] = ...) -> None: ...

class ResizePtyRequest(_message.Message):
    __slots__ = ["command_id", "sandbox_id", "size"]
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    command_id: str
    sandbox_id: str
    size: PtySize
    def __init__(self, sandbox_id: _Optional[str] = ..., command_id: _Optional[str] = ..., size: _Optional[_Union[PtySize, _Mapping]] = ...) -> None: ...

class ResizePtyResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ResourceLimits(_message.Message):
    __slots__ = ["disk_bytes", "memory_bytes", "nano_cpus", "pids_limit"]
    DISK_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    NANO_CPUS_FIELD_NUMBER: _ClassVar[int]
    PIDS_LIMIT_FIELD_NUMBER: _ClassVar[int]
    disk_bytes: int
    memory_bytes: int
    nano_cpus: int
    pids_limit: int
    def __init__(self, memory_bytes: _Optional[int] = ..., nano_cpus: _Optional[int] = ..., pids_limit: _Optional[int] = ..., disk_bytes: _Optional[int] = ...) -> None: ...

class RestartContextRequest(_message.Message):
    __slots__ = ["context_id", "sandbox_id"]
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ..., context_id: _Optional[str] = ...) -> None: ...

class RestartContextResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class Result(_message.Message):
    __slots__ = ["data"]
    class DataEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: _containers.ScalarMap[str, str]
    def __init__(self, data: _Optional[_Mapping[str, str]] = ...) -> None: ...

class RunStatelessRequest(_message.Message):
    __slots__ = ["code", "language", "options", "timeout"]
    CODE_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    code: str
    language: str
    options: SandboxOptions
    timeout: _duration_pb2.Duration
    def __init__(self, language: _Optional[str] = ..., code: _Optional[str] = ..., timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., options: _Optional[_Union[SandboxOptions, _Mapping]] = ...) -> None: ...

class Sandbox(_message.Message):
    __slots__ = ["created_at", "expires_at", "health_reason", "hibernated_at", "idle_timeout", "image", "last_active_at", "last_wake", "limits", "metadata", "network", "network_policy", "on_idle", "sandbox_id", "snapshot", "state", "state_reason", "template", "template_version", "tenant", "user_id", "volumes"]
    class MetadataEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    HEALTH_REASON_FIELD_NUMBER: _ClassVar[int]
    HIBERNATED_AT_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    LAST_ACTIVE_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_WAKE_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    NETWORK_POLICY_FIELD_NUMBER: _ClassVar[int]
    ON_IDLE_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_REASON_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_VERSION_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    VOLUMES_FIELD_NUMBER: _ClassVar[int]
    created_at: _timestamp_pb2.Timestamp
    expires_at: _timestamp_pb2.Timestamp
    health_reason: str
    hibernated_at: _timestamp_pb2.Timestamp
    idle_timeout: _duration_pb2.Duration
    image: str
    last_active_at: _timestamp_pb2.Timestamp
    last_wake: WakeInfo
    limits: ResourceLimits
    metadata: _containers.ScalarMap[str, str]
    network: bool
    network_policy: NetworkPolicy
    on_idle: IdleAction
    sandbox_id: str
    snapshot: SnapshotInfo
    state: SandboxState
    state_reason: str
    template: str
    template_version: int
    tenant: str
    user_id: str
    volumes: _containers.RepeatedCompositeFieldContainer[VolumeMount]
    def __init__(self, sandbox_id: _Optional[str] = ..., user_id: _Optional[str] = ..., state: _Optional[_Union[SandboxState, str]] = ..., state_reason: _Optional[str] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., last_active_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., expires_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., image: _Optional[str] = ..., limits: _Optional[_Union[ResourceLimits, _Mapping]] = ..., tenant: _Optional[str] = ..., network: bool = ..., health_reason: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., idle_timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., snapshot: _Optional[_Union[SnapshotInfo, _Mapping]] = ..., hibernated_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., last_wake: _Optional[_Union[WakeInfo, _Mapping]] = ..., on_idle: _Optional[_Union[IdleAction, str]] = ..., network_policy: _Optional[_Union[NetworkPolicy, _Mapping]] = ..., volumes: _Optional[_Iterable[_Union[VolumeMount, _Mapping]]] = ..., template: _Optional[str] = ..., template_version: _Optional[int] = ...) -> None: ...

class SandboxMetricsSample(_message.Message):
    __slots__ = ["cpu_limit_cores", "cpu_used_cores", "io", "memory_cache_bytes", "memory_limit_bytes", "memory_used_bytes", "network", "pids", "pids_limit", "time", "workspace"]
    CPU_LIMIT_CORES_FIELD_NUMBER: _ClassVar[int]
    CPU_USED_CORES_FIELD_NUMBER: _ClassVar[int]
    IO_FIELD_NUMBER: _ClassVar[int]
    MEMORY_CACHE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_LIMIT_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    PIDS_FIELD_NUMBER: _ClassVar[int]
    PIDS_LIMIT_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    cpu_limit_cores: float
    cpu_used_cores: float
    io: DiskUsage
    memory_cache_bytes: int
    memory_limit_bytes: int
    memory_used_bytes: int
    network: NetworkBytes
    pids: int
    pids_limit: int
    time: _timestamp_pb2.Timestamp
    workspace: DiskUsage
    def __init__(self, time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., cpu_used_cores: _Optional[float] = ..., cpu_limit_cores: _Optional[float] = ..., memory_used_bytes: _Optional[int] = ..., memory_cache_bytes: _Optional[int] = ..., memory_limit_bytes: _Optional[int] = ..., workspace: _Optional[_Union[DiskUsage, _Mapping]] = ..., io: _Optional[_Union[DiskUsage, _Mapping]] = ..., pids: _Optional[int] = ..., pids_limit: _Optional[int] = ..., network: _Optional[_Union[NetworkBytes, _Mapping]] = ...) -> None: ...

class SandboxOptions(_message.Message):
    __slots__ = ["env", "from_snapshot", "idle_timeout", "limits", "metadata", "network", "network_policy", "on_idle", "template", "volumes"]
    class EnvEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class MetadataEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ENV_FIELD_NUMBER: _ClassVar[int]
    FROM_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    NETWORK_POLICY_FIELD_NUMBER: _ClassVar[int]
    ON_IDLE_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    VOLUMES_FIELD_NUMBER: _ClassVar[int]
    env: _containers.ScalarMap[str, str]
    from_snapshot: str
    idle_timeout: _duration_pb2.Duration
    limits: ResourceLimits
    metadata: _containers.ScalarMap[str, str]
    network: bool
    network_policy: NetworkPolicy
    on_idle: IdleAction
    template: str
    volumes: _containers.RepeatedCompositeFieldContainer[VolumeMount]
    def __init__(self, limits: _Optional[_Union[ResourceLimits, _Mapping]] = ..., env: _Optional[_Mapping[str, str]] = ..., network: bool = ..., metadata: _Optional[_Mapping[str, str]] = ..., idle_timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., on_idle: _Optional[_Union[IdleAction, str]] = ..., network_policy: _Optional[_Union[NetworkPolicy, _Mapping]] = ..., from_snapshot: _Optional[str] = ..., volumes: _Optional[_Iterable[_Union[VolumeMount, _Mapping]]] = ..., template: _Optional[str] = ...) -> None: ...

class SendStdinRequest(_message.Message):
    __slots__ = ["command_id", "data", "sandbox_id"]
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    command_id: str
    data: bytes
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ..., command_id: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...

class SendStdinResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class SetSandboxTimeoutRequest(_message.Message):
    __slots__ = ["sandbox_id", "timeout"]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    timeout: _duration_pb2.Duration
    def __init__(self, sandbox_id: _Optional[str] = ..., timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class SetSandboxTimeoutResponse(_message.Message):
    __slots__ = ["sandbox"]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: Sandbox
    def __init__(self, sandbox: _Optional[_Union[Sandbox, _Mapping]] = ...) -> None: ...

class SetVolumeFileAttributesRequest(_message.Message):
    __slots__ = ["gid", "mode", "path", "uid", "volume"]
    GID_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    VOLUME_FIELD_NUMBER: _ClassVar[int]
    gid: int
    mode: int
    path: str
    uid: int
    volume: str
    def __init__(self, volume: _Optional[str] = ..., path: _Optional[str] = ..., uid: _Optional[int] = ..., gid: _Optional[int] = ..., mode: _Optional[int] = ...) -> None: ...

class SetVolumeFileAttributesResponse(_message.Message):
    __slots__ = ["file"]
    FILE_FIELD_NUMBER: _ClassVar[int]
    file: FileInfo
    def __init__(self, file: _Optional[_Union[FileInfo, _Mapping]] = ...) -> None: ...

class Snapshot(_message.Message):
    __slots__ = ["created_at", "level", "name", "reason", "sandbox_id", "size_bytes", "snapshot_id", "tenant"]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    created_at: _timestamp_pb2.Timestamp
    level: str
    name: str
    reason: str
    sandbox_id: str
    size_bytes: int
    snapshot_id: str
    tenant: str
    def __init__(self, snapshot_id: _Optional[str] = ..., name: _Optional[str] = ..., tenant: _Optional[str] = ..., sandbox_id: _Optional[str] = ..., level: _Optional[str] = ..., reason: _Optional[str] = ..., size_bytes: _Optional[int] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class SnapshotInfo(_message.Message):
    __slots__ = ["level", "reason", "size_bytes", "taken_at"]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    TAKEN_AT_FIELD_NUMBER: _ClassVar[int]
    level: str
    reason: str
    size_bytes: int
    taken_at: _timestamp_pb2.Timestamp
    def __init__(self, level: _Optional[str] = ..., size_bytes: _Optional[int] = ..., taken_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class Started(_message.Message):
    __slots__ = ["context_id", "language", "time", "wake"]
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    WAKE_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    language: str
    time: _timestamp_pb2.Timestamp
    wake: WakeInfo
    def __init__(self, language: _Optional[str] = ..., time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., context_id: _Optional[str] = ..., wake: _Optional[_Union[WakeInfo, _Mapping]] = ...) -> None: ...

class StatVolumeFileRequest(_message.Message):
    __slots__ = ["path", "volume"]
    PATH_FIELD_NUMBER: _ClassVar[int]
    VOLUME_FIELD_NUMBER: _ClassVar[int]
    path: str
    volume: str
    def __init__(self, volume: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class StatVolumeFileResponse(_message.Message):
    __slots__ = ["file"]
    FILE_FIELD_NUMBER: _ClassVar[int]
    file: FileInfo
    def __init__(self, file: _Optional[_Union[FileInfo, _Mapping]] = ...) -> None: ...

class StreamCommandRequest(_message.Message):
    __slots__ = ["after_seq", "command_id", "sandbox_id"]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    after_seq: int
    command_id: str
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ..., command_id: _Optional[str] = ..., after_seq: _Optional[int] = ...) -> None: ...

class Template(_message.Message):
    __slots__ = ["created_at", "id", "name", "tenant", "versions"]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    created_at: _timestamp_pb2.Timestamp
    id: str
    name: str
    tenant: str
    versions: _containers.RepeatedCompositeFieldContainer[TemplateVersion]
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., tenant: _Optional[str] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., versions: _Optional[_Iterable[_Union[TemplateVersion, _Mapping]]] = ...) -> None: ...

class TemplateBuildLine(_message.Message):
    __slots__ = ["line", "seq", "time"]
    LINE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    line: str
    seq: int
    time: _timestamp_pb2.Timestamp
    def __init__(self, seq: _Optional[int] = ..., time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., line: _Optional[str] = ...) -> None: ...

class TemplateBuildStarted(_message.Message):
    __slots__ = ["template", "version"]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    template: Template
    version: TemplateVersion
    def __init__(self, template: _Optional[_Union[Template, _Mapping]] = ..., version: _Optional[_Union[TemplateVersion, _Mapping]] = ...) -> None: ...

class TemplateSpec(_message.Message):
    __slots__ = ["base", "steps"]
    BASE_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    base: str
    steps: _containers.RepeatedCompositeFieldContainer[TemplateStep]
    def __init__(self, base: _Optional[str] = ..., steps: _Optional[_Iterable[_Union[TemplateStep, _Mapping]]] = ...) -> None: ...

class TemplateStep(_message.Message):
    __slots__ = ["apt", "copy", "env", "run", "user", "workdir"]
    APT_FIELD_NUMBER: _ClassVar[int]
    COPY_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    WORKDIR_FIELD_NUMBER: _ClassVar[int]
    apt: AptStep
    copy: CopyStep
    env: EnvStep
    run: str
    user: str
    workdir: str
    def __init__(self, apt: _Optional[_Union[AptStep, _Mapping]] = ..., copy: _Optional[_Union[CopyStep, _Mapping]] = ..., env: _Optional[_Union[EnvStep, _Mapping]] = ..., workdir: _Optional[str] = ..., user: _Optional[str] = ..., run: _Optional[str] = ...) -> None: ...

class TemplateVersion(_message.Message):
    __slots__ = ["cached", "finished_at", "reason", "size_bytes", "spec_hash", "started_at", "state", "used_by", "version"]
    CACHED_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SPEC_HASH_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    USED_BY_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    cached: bool
    finished_at: _timestamp_pb2.Timestamp
    reason: str
    size_bytes: int
    spec_hash: str
    started_at: _timestamp_pb2.Timestamp
    state: TemplateState
    used_by: int
    version: int
    def __init__(self, version: _Optional[int] = ..., spec_hash: _Optional[str] = ..., state: _Optional[_Union[TemplateState, str]] = ..., reason: _Optional[str] = ..., cached: bool = ..., started_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., size_bytes: _Optional[int] = ..., used_by: _Optional[int] = ...) -> None: ...

class UpdateNetworkPolicyRequest(_message.Message):
    __slots__ = ["policy", "sandbox_id"]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    policy: NetworkPolicy
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ..., policy: _Optional[_Union[NetworkPolicy, _Mapping]] = ...) -> None: ...

class UpdateNetworkPolicyResponse(_message.Message):
    __slots__ = ["sandbox"]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: Sandbox
    def __init__(self, sandbox: _Optional[_Union[Sandbox, _Mapping]] = ...) -> None: ...

class UploadFileHeader(_message.Message):
    __slots__ = ["path", "sandbox_id"]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    path: str
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class UploadFileRequest(_message.Message):
    __slots__ = ["chunk", "header"]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    HEADER_FIELD_NUMBER: _ClassVar[int]
    chunk: bytes
    header: UploadFileHeader
    def __init__(self, header: _Optional[_Union[UploadFileHeader, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class UploadFileResponse(_message.Message):
    __slots__ = ["file"]
    FILE_FIELD_NUMBER: _ClassVar[int]
    file: FileInfo
    def __init__(self, file: _Optional[_Union[FileInfo, _Mapping]] = ...) -> None: ...

class UploadTemplateFileHeader(_message.Message):
    __slots__ = ["key"]
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    def __init__(self, key: _Optional[str] = ...) -> None: ...

class UploadTemplateFileRequest(_message.Message):
    __slots__ = ["chunk", "header"]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    HEADER_FIELD_NUMBER: _ClassVar[int]
    chunk: bytes
    header: UploadTemplateFileHeader
    def __init__(self, header: _Optional[_Union[UploadTemplateFileHeader, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class UploadTemplateFileResponse(_message.Message):
    __slots__ = ["existed"]
    EXISTED_FIELD_NUMBER: _ClassVar[int]
    existed: bool
    def __init__(self, existed: bool = ...) -> None: ...

class UploadVolumeFileHeader(_message.Message):
    __slots__ = ["overwrite", "path", "volume"]
    OVERWRITE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    VOLUME_FIELD_NUMBER: _ClassVar[int]
    overwrite: bool
    path: str
    volume: str
    def __init__(self, volume: _Optional[str] = ..., path: _Optional[str] = ..., overwrite: bool = ...) -> None: ...

class UploadVolumeFileRequest(_message.Message):
    __slots__ = ["chunk", "header"]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    HEADER_FIELD_NUMBER: _ClassVar[int]
    chunk: bytes
    header: UploadVolumeFileHeader
    def __init__(self, header: _Optional[_Union[UploadVolumeFileHeader, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class UploadVolumeFileResponse(_message.Message):
    __slots__ = ["file"]
    FILE_FIELD_NUMBER: _ClassVar[int]
    file: FileInfo
    def __init__(self, file: _Optional[_Union[FileInfo, _Mapping]] = ...) -> None: ...

class Volume(_message.Message):
    __slots__ = ["created_at", "id", "mounted_by", "name", "size_bytes", "tenant", "used_bytes"]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    MOUNTED_BY_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    created_at: _timestamp_pb2.Timestamp
    id: str
    mounted_by: _containers.RepeatedScalarFieldContainer[str]
    name: str
    size_bytes: int
    tenant: str
    used_bytes: int
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., tenant: _Optional[str] = ..., size_bytes: _Optional[int] = ..., used_bytes: _Optional[int] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., mounted_by: _Optional[_Iterable[str]] = ...) -> None: ...

class VolumeMount(_message.Message):
    __slots__ = ["mount_path", "read_only", "volume"]
    MOUNT_PATH_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    VOLUME_FIELD_NUMBER: _ClassVar[int]
    mount_path: str
    read_only: bool
    volume: str
    def __init__(self, volume: _Optional[str] = ..., mount_path: _Optional[str] = ..., read_only: bool = ...) -> None: ...

class WakeInfo(_message.Message):
    __slots__ = ["level", "lost", "reason", "restored_names", "time"]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RESTORED_NAMES_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    level: str
    lost: _containers.RepeatedCompositeFieldContainer[LostName]
    reason: str
    restored_names: _containers.RepeatedScalarFieldContainer[str]
    time: _timestamp_pb2.Timestamp
    def __init__(self, level: _Optional[str] = ..., restored_names: _Optional[_Iterable[str]] = ..., lost: _Optional[_Iterable[_Union[LostName, _Mapping]]] = ..., reason: _Optional[str] = ..., time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class WakeSandboxRequest(_message.Message):
    __slots__ = ["sandbox_id"]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ...) -> None: ...

class WakeSandboxResponse(_message.Message):
    __slots__ = ["sandbox", "woke"]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    WOKE_FIELD_NUMBER: _ClassVar[int]
    sandbox: Sandbox
    woke: WakeInfo
    def __init__(self, sandbox: _Optional[_Union[Sandbox, _Mapping]] = ..., woke: _Optional[_Union[WakeInfo, _Mapping]] = ...) -> None: ...

class WatchDirectoryRequest(_message.Message):
    __slots__ = ["path", "recursive", "sandbox_id"]
    PATH_FIELD_NUMBER: _ClassVar[int]
    RECURSIVE_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    path: str
    recursive: bool
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ..., path: _Optional[str] = ..., recursive: bool = ...) -> None: ...

class WatchDirectoryResponse(_message.Message):
    __slots__ = ["dropped", "event"]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    dropped: int
    event: WatchEvent
    def __init__(self, event: _Optional[_Union[WatchEvent, _Mapping]] = ..., dropped: _Optional[int] = ...) -> None: ...

class WatchEvent(_message.Message):
    __slots__ = ["path", "time", "type"]
    PATH_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    path: str
    time: _timestamp_pb2.Timestamp
    type: WatchEventType
    def __init__(self, type: _Optional[_Union[WatchEventType, str]] = ..., path: _Optional[str] = ..., time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class SandboxState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class CommandStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class IdleAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class TemplateState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class FileType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class WatchEventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class CommandState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class NetworkDenialKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
