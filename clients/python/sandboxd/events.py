"""A command's events as plain dataclasses, mirroring the proto's
ExecuteEvent oneof: Started, Stdout, Stderr, Display, Result, Error, Done.

Every event has `seq` (1, 2, 3, ... without gaps within a command) and
`command_id`. Rich outputs (Display, Result) are MIME bundles as in Jupyter:
text types hold text, binary types (image/png, image/jpeg) hold base64.
"""

import base64
import datetime
import enum
from dataclasses import dataclass, field
from typing import Dict, List, Optional

__all__ = [
    "CommandStatus",
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
    "CommandInfo",
    "NetworkPolicy",
    "NetworkCounters",
    "NetworkDenial",
    "NetworkStatus",
    "HostInfo",
    "AuditEvent",
    "event_from_proto",
]


class CommandStatus(str, enum.Enum):
    """How a command ended (Done.status). UNSPECIFIED also stands for any
    value this client does not know, and like it should count as a
    failure."""

    UNSPECIFIED = "UNSPECIFIED"
    OK = "OK"
    ERROR = "ERROR"
    TIMEOUT = "TIMEOUT"
    INTERRUPTED = "INTERRUPTED"
    KILLED = "KILLED"

    @classmethod
    def from_proto(cls, value):
        from ._gen.sandbox.v1 import sandbox_pb2

        try:
            name = sandbox_pb2.CommandStatus.Name(value)
        except ValueError:
            return cls.UNSPECIFIED
        return cls.__members__.get(name[len("COMMAND_STATUS_"):], cls.UNSPECIFIED)


def _time(ts) -> Optional[datetime.datetime]:
    """A google.protobuf.Timestamp as an aware UTC datetime; None if unset."""
    if ts is None or (ts.seconds == 0 and ts.nanos == 0):
        return None
    return ts.ToDatetime(tzinfo=datetime.timezone.utc)


class _MimeBundle:
    """Helpers shared by Display and Result (which have `data`)."""

    data: Dict[str, str]

    @property
    def text(self) -> Optional[str]:
        """The text/plain representation, if any."""
        return self.data.get("text/plain")

    def decode(self, mime: str) -> Optional[bytes]:
        """The decoded content of a binary MIME type (image/png,
        image/jpeg), or None if the bundle lacks it."""
        value = self.data.get(mime)
        return None if value is None else base64.b64decode(value)

    @property
    def png(self) -> Optional[bytes]:
        """The image/png content, decoded, or None."""
        return self.decode("image/png")


@dataclass(frozen=True)
class Event:
    """Base of all events."""

    seq: int
    command_id: str


@dataclass(frozen=True)
class Started(Event):
    """Always the first event (seq 1): the sandbox took the command."""

    language: str
    time: Optional[datetime.datetime]


@dataclass(frozen=True)
class Stdout(Event):
    """A chunk of standard output (not necessarily whole lines)."""

    text: str


@dataclass(frozen=True)
class Stderr(Event):
    """A chunk of standard error (not necessarily whole lines)."""

    text: str


@dataclass(frozen=True)
class Display(_MimeBundle, Event):
    """A rich output shown while running (display(obj), a matplotlib
    figure)."""

    data: Dict[str, str]


@dataclass(frozen=True)
class Result(_MimeBundle, Event):
    """The value of the code's final expression (Python, when not None);
    `data` always has text/plain."""

    data: Dict[str, str]


@dataclass(frozen=True)
class Error(Event):
    """An exception raised by the code, or a problem with the command."""

    ename: str
    evalue: str
    traceback: List[str]

    def format(self) -> str:
        """The traceback as printed by Python."""
        return "".join(t if t.endswith("\n") else t + "\n" for t in self.traceback)


@dataclass(frozen=True)
class FileRef:
    """A file under /workspace (path relative to it) and its size."""

    path: str
    size: int


@dataclass(frozen=True)
class Done(Event):
    """The last event: how the command ended."""

    status: CommandStatus
    duration: datetime.timedelta
    state_lost: bool
    reason: str
    exit_code: Optional[int]
    files: List[FileRef]
    time: Optional[datetime.datetime]
    output_truncated: bool
    #: The Python kernel's cell counter, as Jupyter's execution_count (None
    #: for bash, and when the kernel died during the command).
    execution_count: Optional[int] = None

    @property
    def ok(self) -> bool:
        return self.status is CommandStatus.OK


@dataclass(frozen=True)
class FileInfo:
    """A file or directory under /workspace (path relative to it).

    `type` is "FILE", "DIRECTORY", "SYMLINK" (links are never followed) or
    "OTHER" (FIFO, socket, device); `mode` the permission bits (0o7777 at
    most); `uid`/`gid` the numeric owner as seen inside the sandbox (1000
    is the sandbox user)."""

    path: str
    size: int
    is_dir: bool
    mod_time: Optional[datetime.datetime]
    type: str = "UNSPECIFIED"
    mode: int = 0
    uid: int = 0
    gid: int = 0

    @classmethod
    def from_proto(cls, m):
        return cls(path=m.path, size=m.size, is_dir=m.is_dir, mod_time=_time(m.mod_time),
                   type=_enum_name("FileType", m.type, "FILE_TYPE_"),
                   mode=m.mode, uid=m.uid, gid=m.gid)


@dataclass(frozen=True)
class WatchEvent:
    """One change under a watched directory (Files.watch). `type` is
    "CREATE", "WRITE", "REMOVE" or "RENAME"; `path` is relative to
    /workspace; `dropped` counts events dropped before this one because the
    reader was too slow."""

    type: str
    path: str
    time: Optional[datetime.datetime]
    dropped: int = 0

    @classmethod
    def from_proto(cls, m):
        return cls(type=_enum_name("WatchEventType", m.event.type, "WATCH_EVENT_TYPE_"),
                   path=m.event.path, time=_time(m.event.time), dropped=m.dropped)


def _enum_name(enum: str, value: int, prefix: str) -> str:
    """A proto enum value's name without its prefix ("FILE"), or
    "UNSPECIFIED" for a value this client does not know."""
    from ._gen.sandbox.v1 import sandbox_pb2

    try:
        return getattr(sandbox_pb2, enum).Name(value)[len(prefix):]
    except ValueError:
        return "UNSPECIFIED"


@dataclass(frozen=True)
class SandboxInfo:
    """A sandbox's description (GetSandbox, ListSandboxes). `state` is
    "RUNNING" or "DEAD"; `limits` maps memory_bytes, nano_cpus, pids_limit
    and disk_bytes to the limits in force; `health_reason` is empty unless a
    running sandbox reports a problem (e.g. "/io is full: ...")."""

    id: str
    user_id: str
    state: str
    state_reason: str
    created_at: Optional[datetime.datetime]
    last_active_at: Optional[datetime.datetime]
    expires_at: Optional[datetime.datetime]
    image: str
    limits: Dict[str, int] = field(default_factory=dict)
    tenant: str = ""
    network: bool = False
    health_reason: str = ""
    #: The string map set at creation (AcquireSandbox's metadata).
    metadata: Dict[str, str] = field(default_factory=dict)
    #: The sandbox's own idle timeout (SetSandboxTimeout), None when it
    #: follows the server's default.
    idle_timeout: Optional[datetime.timedelta] = None
    #: A networked sandbox's egress policy, redacted: its rules' header
    #: names with empty values (sandboxd never returns them); None
    #: without network.
    network_policy: Optional["NetworkPolicy"] = None
    #: The volumes mounted in the sandbox, each by volume ID.
    volumes: List["VolumeMount"] = field(default_factory=list)
    #: The template the sandbox was created from, by ID ("" for the
    #: server's image), and which of its versions it runs.
    template: str = ""
    template_version: int = 0

    @classmethod
    def from_proto(cls, m):
        from ._gen.sandbox.v1 import sandbox_pb2

        try:
            state = sandbox_pb2.SandboxState.Name(m.state)[len("SANDBOX_STATE_"):]
        except ValueError:
            state = "UNSPECIFIED"
        limits = {
            "memory_bytes": m.limits.memory_bytes,
            "nano_cpus": m.limits.nano_cpus,
            "pids_limit": m.limits.pids_limit,
            "disk_bytes": m.limits.disk_bytes,
        }
        return cls(
            id=m.sandbox_id,
            user_id=m.user_id,
            state=state,
            state_reason=m.state_reason,
            created_at=_time(m.created_at),
            last_active_at=_time(m.last_active_at),
            expires_at=_time(m.expires_at),
            image=m.image,
            limits=limits,
            tenant=m.tenant,
            network=m.network,
            health_reason=m.health_reason,
            metadata=dict(m.metadata),
            idle_timeout=m.idle_timeout.ToTimedelta() if m.HasField("idle_timeout") else None,
            network_policy=NetworkPolicy.from_proto(m.network_policy) if m.HasField("network_policy") else None,
            volumes=[VolumeMount.from_proto(v) for v in m.volumes],
            template=m.template,
            template_version=m.template_version,
        )


@dataclass(frozen=True)
class CommandInfo:
    """One command of a sandbox (Sandbox.list_commands). `state` is
    "QUEUED", "RUNNING", "FINISHED" or "UNSPECIFIED" (its files are
    unreadable); `status` how a finished command ended (None while it runs,
    and when its output was pruned: `output_available` is then False)."""

    command_id: str
    language: str
    state: str
    status: Optional[CommandStatus]
    started_at: Optional[datetime.datetime]
    finished_at: Optional[datetime.datetime]
    duration: Optional[datetime.timedelta]
    exit_code: Optional[int]
    output_available: bool
    stdin: bool = False
    pty: bool = False
    context_id: str = "default"

    @classmethod
    def from_proto(cls, m):
        return cls(
            context_id=m.context_id or "default",
            command_id=m.command_id,
            language=m.language,
            state=_enum_name("CommandState", m.state, "COMMAND_STATE_"),
            status=CommandStatus.from_proto(m.status) if m.status else None,
            started_at=_time(m.started_at),
            finished_at=_time(m.finished_at),
            duration=m.duration.ToTimedelta() if m.HasField("duration") else None,
            exit_code=m.exit_code if m.HasField("exit_code") else None,
            output_available=m.output_available,
            stdin=m.stdin,
            pty=m.pty,
        )


@dataclass(frozen=True)
class NetworkPolicy:
    """A sandbox's egress policy (sandbox.proto's NetworkPolicy has the
    whole contract). E2B's words and precedence: an allow_out entry beats
    a deny_out one, a destination neither matches is allowed, so
    deny_out=["0.0.0.0/0"] with allow_out is an allow-list and the empty
    policy allows every public destination. Entries are domains
    ("example.com", "*.example.com"), IP addresses and CIDR blocks.

    `rules` maps a domain pattern to the HTTP headers sandboxd's egress
    gateway sets on each HTTPS request to it: a credential the sandbox
    never sees. A rule grants no access. Policies sandboxd returns show the
    header names with empty values. `allow_public_traffic` lets the
    sandbox's port URLs answer without its traffic token."""

    allow_out: List[str] = field(default_factory=list)
    deny_out: List[str] = field(default_factory=list)
    rules: Dict[str, Dict[str, str]] = field(default_factory=dict)
    allow_public_traffic: bool = False

    def to_proto(self):
        from ._gen.sandbox.v1 import sandbox_pb2

        p = sandbox_pb2.NetworkPolicy(allow_out=list(self.allow_out), deny_out=list(self.deny_out),
                                      allow_public_traffic=self.allow_public_traffic)
        for domain, headers in self.rules.items():
            p.rules[domain].headers.update(dict(headers or {}))
        return p

    @classmethod
    def from_proto(cls, m):
        return cls(
            allow_out=list(m.allow_out),
            deny_out=list(m.deny_out),
            rules={k: dict(r.headers) for k, r in m.rules.items()},
            allow_public_traffic=m.allow_public_traffic,
        )

    @classmethod
    def of(cls, value) -> "NetworkPolicy":
        """A NetworkPolicy, or one from a dict with the same keys."""
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            unknown = set(value) - {"allow_out", "deny_out", "rules", "allow_public_traffic"}
            if unknown:
                raise ValueError("network policy: unknown keys %s" % sorted(unknown))
            return cls(**value)
        raise TypeError("network policy: want a NetworkPolicy or a dict, not %s" % type(value).__name__)


@dataclass(frozen=True)
class NetworkCounters:
    """A sandbox's egress counters since sandboxd last attached its network
    (its creation or wake, or sandboxd's start)."""

    bytes_out: int = 0
    bytes_in: int = 0
    connections_allowed: int = 0
    connections_denied: int = 0
    dns_allowed: int = 0
    dns_denied: int = 0
    connections_open: int = 0
    rule_requests: int = 0
    denials_dropped: int = 0
    dns_rate_limited: int = 0
    connections_refused_at_cap: int = 0

    @classmethod
    def from_proto(cls, m):
        return cls(**{f: getattr(m, f) for f in cls.__dataclass_fields__})


@dataclass(frozen=True)
class NetworkDenial:
    """One refused connection or DNS query: `kind` is "DNS" or "TCP",
    `name` what it asked for or carried (from the sandbox), `address` the
    destination ("198.51.100.7:443") when known, `reason` what refused it."""

    time: Optional[datetime.datetime]
    kind: str
    name: str
    address: str
    reason: str

    @classmethod
    def from_proto(cls, m):
        return cls(
            time=_time(m.time),
            kind=_enum_name("NetworkDenialKind", m.kind, "NETWORK_DENIAL_KIND_"),
            name=m.name,
            address=m.address,
            reason=m.reason,
        )


@dataclass(frozen=True)
class NetworkStatus:
    """A networked sandbox's egress (Sandbox.network_status): its policy
    (redacted), its counters and its recent denials, oldest first."""

    policy: NetworkPolicy
    counters: NetworkCounters
    denials: List[NetworkDenial]

    @classmethod
    def from_proto(cls, m):
        return cls(
            policy=NetworkPolicy.from_proto(m.policy),
            counters=NetworkCounters.from_proto(m.counters),
            denials=[NetworkDenial.from_proto(d) for d in m.denials],
        )


@dataclass(frozen=True)
class HostInfo:
    """How to reach a port of a sandbox (Sandbox.get_host): `url` on
    sandboxd's HTTP front and, when `token_required`, the `traffic_token`
    to send in the header `token_header`."""

    url: str
    token_required: bool
    traffic_token: str
    token_header: str

    @classmethod
    def from_proto(cls, m):
        return cls(url=m.url, token_required=m.token_required, traffic_token=m.traffic_token, token_header=m.token_header)


@dataclass(frozen=True)
class SnapshotInfo:
    """A named snapshot (Client.create_snapshot, Client.snapshots): a
    sandbox's globals (`level` "globals", or "files" with `reason`) and
    /workspace, kept apart from it until deleted."""

    id: str
    name: str
    tenant: str
    sandbox_id: str
    level: str
    reason: str
    size_bytes: int
    created_at: Optional[datetime.datetime]

    @classmethod
    def from_proto(cls, m):
        return cls(id=m.snapshot_id, name=m.name, tenant=m.tenant, sandbox_id=m.sandbox_id, level=m.level,
                   reason=m.reason, size_bytes=m.size_bytes, created_at=_time(m.created_at))


@dataclass(frozen=True)
class VolumeInfo:
    """A named volume (Client.create_volume, Client.volumes): a size-capped
    file system of a tenant that outlives sandboxes. `size_bytes` is its
    capacity, `used_bytes` what its files take, `mounted_by` the sandboxes
    (running or hibernated) that mount it."""

    id: str
    name: str
    tenant: str
    size_bytes: int
    used_bytes: int
    created_at: Optional[datetime.datetime]
    mounted_by: List[str] = field(default_factory=list)

    @classmethod
    def from_proto(cls, m):
        return cls(id=m.id, name=m.name, tenant=m.tenant, size_bytes=m.size_bytes, used_bytes=m.used_bytes,
                   created_at=_time(m.created_at), mounted_by=list(m.mounted_by))


@dataclass(frozen=True)
class TemplateVersion:
    """One build of a template. `state` is "BUILDING", "READY" or
    "FAILED" (`reason` says why); `cached` that it was ready at once from
    an earlier build of the same spec; `used_by` counts the sandboxes
    created from it."""

    version: int
    spec_hash: str
    state: str
    reason: str
    cached: bool
    started_at: Optional[datetime.datetime]
    finished_at: Optional[datetime.datetime]
    size_bytes: int
    used_by: int

    @classmethod
    def from_proto(cls, m):
        return cls(version=m.version, spec_hash=m.spec_hash, state=_enum_name("TemplateState", m.state, "TEMPLATE_STATE_"),
                   reason=m.reason, cached=m.cached, started_at=_time(m.started_at), finished_at=_time(m.finished_at),
                   size_bytes=m.size_bytes, used_by=m.used_by)


@dataclass(frozen=True)
class TemplateInfo:
    """A template (Client.template, Client.templates): a tenant's own
    sandbox image, built from a spec (Client.build_template). `versions`
    are its builds as kept, oldest first; `current` is the latest ready
    one, which new sandboxes get (Client.acquire(template=...))."""

    id: str
    name: str
    tenant: str
    created_at: Optional[datetime.datetime]
    versions: List[TemplateVersion] = field(default_factory=list)

    @property
    def current(self) -> Optional[TemplateVersion]:
        return next((v for v in reversed(self.versions) if v.state == "READY"), None)

    @property
    def latest(self) -> Optional[TemplateVersion]:
        return self.versions[-1] if self.versions else None

    @classmethod
    def from_proto(cls, m):
        return cls(id=m.id, name=m.name, tenant=m.tenant, created_at=_time(m.created_at),
                   versions=[TemplateVersion.from_proto(v) for v in m.versions])


@dataclass(frozen=True)
class TemplateBuildLine:
    """One line of a template build's log; `seq` numbers them from 1."""

    seq: int
    time: Optional[datetime.datetime]
    line: str

    @classmethod
    def from_proto(cls, m):
        return cls(seq=m.seq, time=_time(m.time), line=m.line)


@dataclass(frozen=True)
class TemplateBuild:
    """A finished build (Client.build_template): the template as the build
    started and the version as it finished."""

    template: TemplateInfo
    version: TemplateVersion


@dataclass(frozen=True)
class VolumeMount:
    """A volume in a sandbox: `volume` (its ID or name; SandboxInfo.volumes
    gives the ID) at `mount_path`, under /mnt or /data, read-only or not.
    Sandbox.acquire(volumes=[...]) takes these, or (volume, mount_path) and
    (volume, mount_path, read_only) tuples."""

    volume: str
    mount_path: str
    read_only: bool = False

    @classmethod
    def of(cls, v) -> "VolumeMount":
        if isinstance(v, cls):
            return v
        if isinstance(v, (tuple, list)) and len(v) in (2, 3):
            return cls(*v)
        raise TypeError("a volume mount is a VolumeMount or a (volume, mount_path[, read_only]) tuple, not %r" % (v,))

    @classmethod
    def from_proto(cls, m):
        return cls(volume=m.volume, mount_path=m.mount_path, read_only=m.read_only)

    def to_proto(self):
        from ._gen.sandbox.v1 import sandbox_pb2

        return sandbox_pb2.VolumeMount(volume=self.volume, mount_path=self.mount_path, read_only=self.read_only)


@dataclass(frozen=True)
class AuditEvent:
    """One recorded call of the audit trail (Client.audit_events): who
    (`tenant`, `token_name`, `admin`) did what (`action`, e.g. "execute")
    to which sandbox, and how it ended (`outcome`: "ok" or the error's
    kind, `message`). Never a secret: `bytes` stands for code and contents.
    `dropped_count` is set on the server's "dropped" events."""

    time: Optional[datetime.datetime]
    tenant: str
    token_name: str
    admin: bool
    action: str
    sandbox_id: str
    user_id: str
    path: str
    to_path: str
    command_id: str
    context_id: str
    language: str
    bytes: int
    outcome: str
    message: str
    duration: Optional[datetime.timedelta]
    dropped_count: int
    #: create_snapshot's and delete_snapshot's snapshot, acquire's
    #: from_snapshot; fork's number of forks.
    snapshot: str = ""
    count: int = 0
    #: build_template's and delete_template's template, upload_template_file's
    #: archive key, acquire's template.
    template: str = ""

    @classmethod
    def from_proto(cls, m):
        return cls(snapshot=m.snapshot, count=m.count, template=m.template, time=_time(m.time), tenant=m.tenant, token_name=m.token_name, admin=m.admin, action=m.action,
                   sandbox_id=m.sandbox_id, user_id=m.user_id, path=m.path, to_path=m.to_path,
                   command_id=m.command_id, context_id=m.context_id, language=m.language, bytes=m.bytes,
                   outcome=m.outcome, message=m.message,
                   duration=m.duration.ToTimedelta() if m.HasField("duration") else None,
                   dropped_count=m.dropped_count)


@dataclass(frozen=True)
class MetricsSample:
    """One sample of a sandbox's resource use (Sandbox.metrics). Memory
    used leaves out the page cache the kernel can reclaim at once, as
    docker stats does; disk is (used, limit) in bytes, limit 0 when the
    directory has none; network is (bytes_in, bytes_out) for a networked
    sandbox, else None. A figure sandboxd could not read is 0."""

    time: Optional[datetime.datetime]
    cpu_used_cores: float
    cpu_limit_cores: float
    memory_used_bytes: int
    memory_cache_bytes: int
    memory_limit_bytes: int
    workspace: tuple
    io: tuple
    pids: int
    pids_limit: int
    network: Optional[tuple]

    @property
    def cpu_used_percent(self) -> float:
        """CPU used as a percentage of the limit (of one core without one)."""
        return 100 * self.cpu_used_cores / (self.cpu_limit_cores or 1)

    @classmethod
    def from_proto(cls, m):
        return cls(
            time=_time(m.time), cpu_used_cores=m.cpu_used_cores, cpu_limit_cores=m.cpu_limit_cores,
            memory_used_bytes=m.memory_used_bytes, memory_cache_bytes=m.memory_cache_bytes,
            memory_limit_bytes=m.memory_limit_bytes,
            workspace=(m.workspace.used_bytes, m.workspace.limit_bytes), io=(m.io.used_bytes, m.io.limit_bytes),
            pids=m.pids, pids_limit=m.pids_limit,
            network=(m.network.bytes_in, m.network.bytes_out) if m.HasField("network") else None,
        )


def event_from_proto(ev) -> Event:
    """Converts a sandbox.v1.ExecuteEvent into its dataclass. An event kind
    this client does not know (a newer server) comes back as a bare Event."""
    kind = ev.WhichOneof("event")
    seq, cid = ev.seq, ev.command_id
    if kind == "started":
        return Started(seq, cid, ev.started.language, _time(ev.started.time))
    if kind == "stdout":
        return Stdout(seq, cid, ev.stdout.text)
    if kind == "stderr":
        return Stderr(seq, cid, ev.stderr.text)
    if kind == "display":
        return Display(seq, cid, dict(ev.display.data))
    if kind == "result":
        return Result(seq, cid, dict(ev.result.data))
    if kind == "error":
        e = ev.error
        return Error(seq, cid, e.ename, e.evalue, list(e.traceback))
    if kind == "done":
        d = ev.done
        return Done(
            seq,
            cid,
            status=CommandStatus.from_proto(d.status),
            duration=d.duration.ToTimedelta(),
            state_lost=d.state_lost,
            reason=d.reason,
            exit_code=d.exit_code if d.HasField("exit_code") else None,
            files=[FileRef(f.path, f.size) for f in d.files],
            time=_time(d.time),
            output_truncated=d.output_truncated,
            execution_count=d.execution_count if d.HasField("execution_count") else None,
        )
    return Event(seq, cid)
