"""The sandboxd client: Client (a connection), Sandbox (one user's sandbox),
Execution (one command's events, resumed transparently) and Files."""

import datetime
import hashlib
import os
import tarfile
import tempfile
import time
import uuid
from typing import Iterator, List, Optional, Union

import grpc
from google.protobuf import duration_pb2

from ._gen.sandbox.v1 import sandbox_pb2 as pb
from ._gen.sandbox.v1 import sandbox_pb2_grpc as pb_grpc
from .errors import SandboxdError, Unavailable, from_code, from_rpc_error
from .events import (
    AuditEvent,
    CommandInfo,
    CommandStatus,
    Display,
    Done,
    Error,
    Event,
    FileInfo,
    HostInfo,
    MetricsSample,
    NetworkPolicy,
    NetworkStatus,
    Result,
    SandboxInfo,
    SnapshotInfo,
    Stderr,
    Stdout,
    TemplateBuild,
    TemplateBuildLine,
    TemplateInfo,
    TemplateVersion,
    VolumeInfo,
    VolumeMount,
    WatchEvent,
    event_from_proto,
)

__all__ = ["Client", "Sandbox", "Execution", "Files", "VolumeFiles", "Watch", "connect", "MAX_MESSAGE_SIZE"]

# MAX_MESSAGE_SIZE is the largest message sandboxd sends (a plot inline in
# one event); the client's receive limit is raised to it.
MAX_MESSAGE_SIZE = 64 << 20

# Uploads are sent in chunks of this size, well under the server's 4 MiB
# receive limit.
UPLOAD_CHUNK = 1 << 20

# Codes on which a command's stream is resumed rather than the error raised.
# CANCELLED counts too: a server that shuts down may reset its streams with
# it (the client cancels a stream only once it stopped reading it).
_RESUMABLE = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.ABORTED, grpc.StatusCode.CANCELLED}
)


def _sandbox_options(*, memory_bytes=0, cpus=0, pids_limit=0, disk_bytes=0, env=None, network=False, metadata=None,
                     idle_timeout=None, network_policy=None, from_snapshot="", volumes=None, template="") -> pb.SandboxOptions:
    """A SandboxOptions from Sandbox.acquire's keyword arguments."""
    opts = pb.SandboxOptions(
        limits=pb.ResourceLimits(
            memory_bytes=int(memory_bytes),
            nano_cpus=int(round(cpus * 1e9)),
            pids_limit=int(pids_limit),
            disk_bytes=int(disk_bytes),
        ),
        env=env or {},
        network=network,
        metadata=dict(metadata or {}),
        from_snapshot=from_snapshot,
        volumes=[VolumeMount.of(v).to_proto() for v in (volumes or ())],
        template=template,
    )
    d = _duration(idle_timeout)
    if d is not None:
        opts.idle_timeout.CopyFrom(d)
    if network_policy is not None:
        opts.network_policy.CopyFrom(NetworkPolicy.of(network_policy).to_proto())
    return opts


def _duration(value) -> Optional[duration_pb2.Duration]:
    if value is None:
        return None
    d = duration_pb2.Duration()
    if isinstance(value, datetime.timedelta):
        d.FromTimedelta(value)
    else:
        d.FromNanoseconds(int(round(float(value) * 1e9)))
    return d


class Client:
    """A connection to sandboxd.

    addr is "host:port". token, when given, is sent as "authorization:
    Bearer TOKEN" on every call (servers started with --auth-tokens). tls=True
    connects with TLS using the system's root certificates; ca_file (a PEM
    file) trusts that CA instead and implies TLS.

    resume_timeout bounds, in seconds, how long a command's stream keeps
    trying to resume without receiving anything (sandboxd down or
    restarting) before Execution raises Unavailable. call_timeout, when
    set, is the deadline in seconds of each unary call (AcquireSandbox can
    take seconds when it starts a container).

    Use it as a context manager, or call close(), to close the channel.
    """

    def __init__(
        self,
        addr: str,
        token: Optional[str] = None,
        tls: bool = False,
        ca_file: Optional[str] = None,
        *,
        resume_timeout: float = 120.0,
        call_timeout: Optional[float] = None,
        channel_options=(),
    ):
        self.addr = addr
        self.resume_timeout = resume_timeout
        self.call_timeout = call_timeout
        self._metadata = (("authorization", "Bearer " + token),) if token else None
        options = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_SIZE),
            # gRPC's default reconnect backoff grows to two minutes; capped
            # so that a restarted sandboxd is found again within seconds.
            ("grpc.initial_reconnect_backoff_ms", 200),
            ("grpc.max_reconnect_backoff_ms", 2000),
        ]
        options.extend(channel_options)
        if tls or ca_file:
            root = None
            if ca_file:
                with open(ca_file, "rb") as f:
                    root = f.read()
            creds = grpc.ssl_channel_credentials(root_certificates=root)
            self._channel = grpc.secure_channel(addr, creds, options=options)
        else:
            self._channel = grpc.insecure_channel(addr, options=options)
        self._stub = pb_grpc.SandboxServiceStub(self._channel)
        self.closed = False

    # -- plumbing

    def _call(self, method, request, timeout=None):
        """Runs a unary (or client-streaming) call, mapping errors."""
        try:
            return method(request, metadata=self._metadata, timeout=timeout or self.call_timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from e

    # -- sandboxes

    def acquire(self, user_id: str, **options) -> "Sandbox":
        """The user's sandbox, created if the user has none; see
        Sandbox.acquire for the options."""
        return Sandbox.acquire(self, user_id, **options)

    def sandbox(self, sandbox_id: str) -> "Sandbox":
        """Reattaches to a sandbox by ID (GetSandbox). NotFound when it
        expired or was deleted."""
        return Sandbox.attach(self, sandbox_id)

    def list(self, user_id: str = "", state: str = "", tenant: str = "",
             metadata: Optional[dict] = None) -> List[SandboxInfo]:
        """Lists sandboxes, optionally of one user, in one state ("RUNNING",
        "DEAD"), of one tenant, or whose metadata has every given pair."""
        req = pb.ListSandboxesRequest(user_id=user_id, tenant=tenant, metadata=dict(metadata or {}))
        if state:
            req.state = pb.SandboxState.Value("SANDBOX_STATE_" + state.upper())
        resp = self._call(self._stub.ListSandboxes, req)
        return [SandboxInfo.from_proto(s) for s in resp.sandboxes]

    def audit_events(self, tenant: str = "", sandbox_id: str = "", action: str = "",
                     since: Optional[datetime.datetime] = None, until: Optional[datetime.datetime] = None,
                     limit: int = 1000) -> List[AuditEvent]:
        """The audit trail, oldest first (ListAuditEvents, following pages
        up to limit events): the mutating calls of a tenant, a sandbox or an
        action, between since (included) and until (excluded). A user token
        reads its own tenant's only: naming another is PermissionDenied.
        FailedPrecondition when the server's trail is off."""
        out: List[AuditEvent] = []
        token = ""
        while len(out) < limit:
            req = pb.ListAuditEventsRequest(tenant=tenant, sandbox_id=sandbox_id, action=action,
                                            page_size=min(1000, limit - len(out)), page_token=token)
            if since is not None:
                req.since.FromDatetime(since)
            if until is not None:
                req.until.FromDatetime(until)
            resp = self._call(self._stub.ListAuditEvents, req)
            out.extend(AuditEvent.from_proto(e) for e in resp.events)
            token = resp.next_page_token
            if not token:
                break
        return out

    def create_snapshot(self, sandbox_id: str, name: str = "") -> SnapshotInfo:
        """Saves a running sandbox's globals and /workspace as a snapshot of
        its tenant (CreateSnapshot); the sandbox keeps running.
        AlreadyExists when the tenant has one of that name;
        ResourceExhausted past the server's snapshot budget."""
        resp = self._call(self._stub.CreateSnapshot, pb.CreateSnapshotRequest(sandbox_id=sandbox_id, name=name))
        return SnapshotInfo.from_proto(resp.snapshot)

    def snapshots(self, sandbox_id: str = "") -> List[SnapshotInfo]:
        """The caller's snapshots, newest first (of one sandbox, if given)."""
        resp = self._call(self._stub.ListSnapshots, pb.ListSnapshotsRequest(sandbox_id=sandbox_id))
        return [SnapshotInfo.from_proto(s) for s in resp.snapshots]

    def delete_snapshot(self, snapshot: str) -> None:
        """Deletes a snapshot by ID or name; NotFound when there is none."""
        self._call(self._stub.DeleteSnapshot, pb.DeleteSnapshotRequest(snapshot=snapshot))

    # -- volumes

    def create_volume(self, name: str, size_bytes: int = 0) -> VolumeInfo:
        """Makes an empty volume of the caller's tenant (CreateVolume): a
        file system of size_bytes (0: the server's default, 1 GiB) that
        outlives sandboxes; mount it with acquire(volumes=[...]).
        AlreadyExists when the tenant has a volume of that name,
        InvalidArgument for a bad name or size."""
        resp = self._call(self._stub.CreateVolume, pb.CreateVolumeRequest(name=name, size_bytes=int(size_bytes)))
        return VolumeInfo.from_proto(resp.volume)

    def volume(self, volume: str) -> VolumeInfo:
        """A volume by ID or name (GetVolume); NotFound when the caller
        has none by that reference."""
        resp = self._call(self._stub.GetVolume, pb.GetVolumeRequest(volume=volume))
        return VolumeInfo.from_proto(resp.volume)

    def volumes(self, tenant: str = "") -> List[VolumeInfo]:
        """The caller's volumes by tenant and name (an admin's: every
        tenant's, or tenant's)."""
        resp = self._call(self._stub.ListVolumes, pb.ListVolumesRequest(tenant=tenant))
        return [VolumeInfo.from_proto(v) for v in resp.volumes]

    def delete_volume(self, volume: str, force: bool = False) -> None:
        """Deletes a volume and its files (DeleteVolume).
        FailedPrecondition while sandboxes mount it, unless force: they
        then keep running without it."""
        self._call(self._stub.DeleteVolume, pb.DeleteVolumeRequest(volume=volume, force=force))

    def volume_files(self, volume: str) -> "VolumeFiles":
        """The files of a volume (by ID or name), without a sandbox."""
        return VolumeFiles(self, volume)

    # -- templates

    def upload_template_file(self, data) -> str:
        """Uploads an archive that template specs copy from
        (UploadTemplateFile) and returns its key, the SHA-256 of its bytes,
        for a copy step's "archive". data is the archive: bytes, a binary
        file object, or the path (str or os.PathLike) of a tar file (plain
        or gzip); the path of a directory is packed first as a tar whose
        one top entry is the directory's name. Keys are immutable: an
        archive the tenant has already is not sent again."""
        key, f = _spool_archive(data)
        with f:
            def requests():
                yield pb.UploadTemplateFileRequest(header=pb.UploadTemplateFileHeader(key=key))
                for chunk in _chunks(f):
                    yield pb.UploadTemplateFileRequest(chunk=chunk)

            self._call(self._stub.UploadTemplateFile, requests())
        return key

    def build_template(self, name: str, spec, force: bool = False, on_log=None, base_dir: Optional[str] = None) -> TemplateBuild:
        """Builds the template name (created if new) from spec and waits for
        the build (BuildTemplate), calling on_log (when given) with each
        TemplateBuildLine of its log. Returns the TemplateBuild: the
        template as it started, the version as it finished.

        spec is a pb.TemplateSpec or a dict as sandboxctl's YAML spec
        reads: {"base": "", "steps": [{"apt": ["jq"]}, {"copy": {"src":
        "./tool", "dest": "/opt/tool/", "mode": 0o644, "owner":
        "sandbox"}}, {"env": {"K": "V"}}, {"workdir": "/opt/tool"},
        {"user": "sandbox"}, {"run": "make"}]}. A copy step without an
        "archive" key copies a local file or directory (src, relative to
        base_dir or the working directory): it is packed, uploaded
        (upload_template_file) and named by its base name; one with an
        "archive" copies src from that uploaded archive.

        A failed build raises its error with the finished version as the
        error's `template_version`: FailedPrecondition for a failed step
        (the version's reason names it), ResourceExhausted past a bound,
        DeadlineExceeded past the server's time limit, Unavailable when the
        engine failed. A stream broken before the build finished is
        followed again (FollowTemplateBuild) after the last line received,
        for up to resume_timeout seconds."""
        req = pb.BuildTemplateRequest(name=name, spec=_template_spec(self, spec, base_dir), force=force)
        started, done, last = None, None, 0
        try:
            for msg in self._stub.BuildTemplate(req, metadata=self._metadata):
                kind = msg.WhichOneof("event")
                if kind == "started":
                    started = msg.started
                elif kind == "line" and msg.line.seq > last:
                    last = msg.line.seq
                    if on_log is not None:
                        on_log(TemplateBuildLine.from_proto(msg.line))
                elif kind == "done":
                    done = TemplateVersion.from_proto(msg.done)
        except grpc.RpcError as e:
            if done is not None or started is None or e.code() not in _RESUMABLE:
                err = from_rpc_error(e)
                err.template_version = done
                raise err from e
            done = self._refollow(started.template.id, started.version.version, last, on_log, from_rpc_error(e))
        if started is None:
            raise Unavailable("the build's stream ended before it started")
        if done is None:
            done = self._refollow(started.template.id, started.version.version, last, on_log, None)
        template = TemplateInfo.from_proto(started.template)
        versions = [done if v.version == done.version else v for v in template.versions]
        if done.version not in [v.version for v in versions]:
            versions.append(done)
        return TemplateBuild(template=TemplateInfo(template.id, template.name, template.tenant, template.created_at, versions),
                             version=done)

    def follow_template_build(self, template: str, version: int = 0, after_seq: int = 0, on_log=None) -> TemplateVersion:
        """Follows a build of a template (version 0: its latest) until it
        finishes (FollowTemplateBuild), calling on_log with its log's lines
        after after_seq; returns the version as it finished, or raises the
        build's error as build_template does. A finished build returns at
        once, after its lines."""
        return self._refollow(template, version, after_seq, on_log, None)

    def _refollow(self, template: str, version: int, after_seq: int, on_log, broke) -> TemplateVersion:
        """Follows a build after after_seq, again after each broken stream
        for up to resume_timeout seconds; broke is the error (a
        SandboxdError) that broke an earlier one (None: none)."""
        deadline = None
        backoff = 0.1
        last = after_seq
        while True:
            if broke is not None:
                if deadline is None:
                    deadline = time.monotonic() + self.resume_timeout
                if time.monotonic() > deadline:
                    raise broke
                time.sleep(backoff)
                backoff = min(2 * backoff, 2.0)
            done = None
            try:
                for msg in self._stub.FollowTemplateBuild(
                        pb.FollowTemplateBuildRequest(template=template, version=version, after_seq=last), metadata=self._metadata):
                    kind = msg.WhichOneof("event")
                    if kind == "line" and msg.line.seq > last:
                        last = msg.line.seq
                        if on_log is not None:
                            on_log(TemplateBuildLine.from_proto(msg.line))
                    elif kind == "done":
                        done = TemplateVersion.from_proto(msg.done)
            except grpc.RpcError as e:
                if done is not None or e.code() not in _RESUMABLE:
                    err = from_rpc_error(e)
                    err.template_version = done
                    raise err from e
                broke = from_rpc_error(e)
                continue
            if done is not None:
                return done
            broke = Unavailable("the build's stream ended before its done message")

    def template(self, template: str) -> TemplateInfo:
        """A template by ID or name, with its versions (GetTemplate);
        NotFound when the caller has none by that reference."""
        resp = self._call(self._stub.GetTemplate, pb.GetTemplateRequest(template=template))
        return TemplateInfo.from_proto(resp.template)

    def templates(self, tenant: str = "") -> List[TemplateInfo]:
        """The caller's templates by tenant and name (an admin's: every
        tenant's, or tenant's)."""
        resp = self._call(self._stub.ListTemplates, pb.ListTemplatesRequest(tenant=tenant))
        return [TemplateInfo.from_proto(t) for t in resp.templates]

    def delete_template(self, template: str) -> None:
        """Deletes a template (DeleteTemplate): no new sandbox can use it, a
        build of it that runs is cancelled; sandboxes created from it keep
        running."""
        self._call(self._stub.DeleteTemplate, pb.DeleteTemplateRequest(template=template))

    def run_stateless(self, code: str, language: str = "python", timeout=None, **options) -> "StatelessRun":
        """Runs code once in a sandbox of its own (RunStateless) and returns
        its StatelessRun: iterate over it for the events, or call wait().
        The sandbox is new (from the server's warm pool, shaped to the
        options, when it can) and deleted once the command is done, or when
        the call ends first: no user, no state kept. options are
        Sandbox.acquire's (memory_bytes, cpus, env, network, from_snapshot,
        template, volumes, ...); timeout is the command's, as for run()."""
        req = pb.RunStatelessRequest(language=language, code=code, options=_sandbox_options(**options))
        d = _duration(timeout)
        if d is not None:
            req.timeout.CopyFrom(d)
        return StatelessRun(self._stub.RunStateless(req, metadata=self._metadata))

    def fork(self, sandbox_id: str, count: int = 1, user_ids: Optional[List[str]] = None) -> List[Union["Sandbox", SandboxdError]]:
        """count (1 to 20) copies of a running sandbox's state (ForkSandbox),
        each a new sandbox of its own user (given, one per fork, or
        generated). Each fork succeeds or fails on its own: the list holds
        a Sandbox, or the error that fork met."""
        resp = self._call(self._stub.ForkSandbox,
                          pb.ForkSandboxRequest(sandbox_id=sandbox_id, count=count, user_ids=list(user_ids or [])))
        out: List[Union[Sandbox, SandboxdError]] = []
        for r in resp.results:
            if r.error_code:
                out.append(from_code(r.error_code, r.error_message))
            else:
                out.append(Sandbox(self, SandboxInfo.from_proto(r.sandbox), created=True))
        return out

    def delete(self, sandbox_id: str) -> None:
        """Stops and removes a sandbox with its files. NotFound when it does
        not exist."""
        self._call(self._stub.DeleteSandbox, pb.DeleteSandboxRequest(sandbox_id=sandbox_id))

    def close(self) -> None:
        """Closes the channel; streams still open end with Cancelled."""
        self.closed = True
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return "Client(%r)" % self.addr


class Sandbox:
    """One user's sandbox: a container with a persistent Python interpreter
    and a /workspace directory.

    A sandbox outlives this object, the client and sandboxd itself: it is
    removed only after the server's idle TTL, by delete(), or on exit of a
    `with` block when created with delete_on_exit=True. Leaving a `with`
    block otherwise keeps it (so the user's variables and files are there
    next time) and closes the client only if the Sandbox owns it (see
    connect()).
    """

    def __init__(self, client: Client, info: SandboxInfo, *, created=False, state_lost=False,
                 replaced_sandbox_id="", replaced_reason="", delete_on_exit=False, owns_client=False):
        self.client = client
        self.info = info
        self.created = created
        self.state_lost = state_lost
        self.replaced_sandbox_id = replaced_sandbox_id
        self.replaced_reason = replaced_reason
        self.delete_on_exit = delete_on_exit
        self._owns_client = owns_client
        self.files = Files(self)

    @property
    def id(self) -> str:
        return self.info.id

    @classmethod
    def acquire(
        cls,
        client: Client,
        user_id: str,
        *,
        memory_bytes: int = 0,
        cpus: float = 0,
        pids_limit: int = 0,
        disk_bytes: int = 0,
        env: Optional[dict] = None,
        network: bool = False,
        metadata: Optional[dict] = None,
        idle_timeout=None,
        network_policy=None,
        from_snapshot: str = "",
        volumes=None,
        template: str = "",
        delete_on_exit: bool = False,
    ) -> "Sandbox":
        """The user's sandbox (AcquireSandbox), created if the user has none.

        The options apply only when a sandbox is created: limits (0 is the
        server's default; cpus in cores, e.g. 0.5), environment variables,
        outbound network (under the server's default egress policy, or
        network_policy: a NetworkPolicy or a dict of its fields, which
        implies network), metadata (a string map returned on every
        SandboxInfo and filterable in Client.list), idle_timeout (seconds
        or a timedelta; None is the server's default), volumes (mounts:
        VolumeMount or (volume, mount_path[, read_only]) tuples, paths
        under /mnt or /data), template (a template of the tenant, by ID or
        name: the sandbox runs its latest ready version's image). `created` says whether this call created it;
        `state_lost` (with `replaced_sandbox_id`, `replaced_reason`) that
        the user's previous sandbox had died, so variables and files built
        earlier are gone.
        """
        opts = _sandbox_options(memory_bytes=memory_bytes, cpus=cpus, pids_limit=pids_limit, disk_bytes=disk_bytes,
                                env=env, network=network, metadata=metadata, idle_timeout=idle_timeout,
                                network_policy=network_policy, from_snapshot=from_snapshot, volumes=volumes,
                                template=template)
        resp = client._call(client._stub.AcquireSandbox, pb.AcquireSandboxRequest(user_id=user_id, options=opts))
        return cls(
            client,
            SandboxInfo.from_proto(resp.sandbox),
            created=resp.created,
            state_lost=resp.state_lost,
            replaced_sandbox_id=resp.replaced_sandbox_id,
            replaced_reason=resp.replaced_reason,
            delete_on_exit=delete_on_exit,
        )

    @classmethod
    def attach(cls, client: Client, sandbox_id: str) -> "Sandbox":
        """An existing sandbox by ID (GetSandbox); NotFound when gone."""
        resp = client._call(client._stub.GetSandbox, pb.GetSandboxRequest(sandbox_id=sandbox_id))
        return cls(client, SandboxInfo.from_proto(resp.sandbox))

    def refresh(self) -> SandboxInfo:
        """Describes the sandbox anew (its state, expiry) and returns it."""
        resp = self.client._call(self.client._stub.GetSandbox, pb.GetSandboxRequest(sandbox_id=self.id))
        self.info = SandboxInfo.from_proto(resp.sandbox)
        return self.info

    def set_timeout(self, timeout) -> SandboxInfo:
        """Sets this sandbox's idle timeout (SetSandboxTimeout; seconds or a
        timedelta, from 1 s to the server's maximum): it expires timeout
        after its last use, counted from now. Returns the updated info."""
        d = _duration(timeout)
        if d is None:
            raise ValueError("set_timeout: a timeout is required")
        resp = self.client._call(self.client._stub.SetSandboxTimeout,
                                 pb.SetSandboxTimeoutRequest(sandbox_id=self.id, timeout=d))
        self.info = SandboxInfo.from_proto(resp.sandbox)
        return self.info

    def list_commands(self, limit: int = 50) -> List[CommandInfo]:
        """The sandbox's most recent commands, newest first (ListCommands,
        following pages up to limit), so a caller that lost its command IDs
        can find them and resume() one."""
        out: List[CommandInfo] = []
        token = ""
        while len(out) < limit:
            resp = self.client._call(self.client._stub.ListCommands, pb.ListCommandsRequest(
                sandbox_id=self.id, page_size=min(200, limit - len(out)), page_token=token))
            out.extend(CommandInfo.from_proto(c) for c in resp.commands)
            token = resp.next_page_token
            if not token:
                break
        return out

    # -- network

    def update_network_policy(self, policy) -> SandboxInfo:
        """Replaces this sandbox's egress policy, whole (UpdateNetworkPolicy;
        a NetworkPolicy or a dict of its fields; NetworkPolicy() allows
        every public destination). New connections follow it at once, open
        ones it refuses are closed. InvalidArgument names a bad entry;
        FailedPrecondition for a sandbox created without network. Returns
        the updated info, its policy redacted."""
        resp = self.client._call(self.client._stub.UpdateNetworkPolicy, pb.UpdateNetworkPolicyRequest(
            sandbox_id=self.id, policy=NetworkPolicy.of(policy).to_proto()))
        self.info = SandboxInfo.from_proto(resp.sandbox)
        return self.info

    def network_status(self) -> NetworkStatus:
        """The sandbox's egress (GetNetworkStatus): its policy (redacted),
        counters and recent denials, each with why."""
        resp = self.client._call(self.client._stub.GetNetworkStatus, pb.GetNetworkStatusRequest(sandbox_id=self.id))
        return NetworkStatus.from_proto(resp)

    def get_host(self, port: int) -> HostInfo:
        """The URL of a port of the sandbox on sandboxd's HTTP front, and the
        traffic token a request needs unless its policy allows public
        traffic (GetHost). FailedPrecondition where sandboxd serves no
        ports."""
        if not 1 <= int(port) <= 65535:
            raise ValueError("get_host: port %r is outside 1-65535" % (port,))
        resp = self.client._call(self.client._stub.GetHost, pb.GetHostRequest(sandbox_id=self.id, port=int(port)))
        return HostInfo.from_proto(resp)

    def metrics(self, since: Optional[datetime.datetime] = None) -> List[MetricsSample]:
        """The samples of the sandbox's resource use taken after since
        (None: all kept, the last 10 minutes), oldest first
        (GetSandboxMetrics). A poller passes the newest sample's time."""
        req = pb.GetSandboxMetricsRequest(sandbox_id=self.id)
        if since is not None:
            if since.tzinfo is not None:
                since = since.astimezone(datetime.timezone.utc).replace(tzinfo=None)
            req.since.FromDatetime(since)
        resp = self.client._call(self.client._stub.GetSandboxMetrics, req)
        return [MetricsSample.from_proto(s) for s in resp.samples]

    # -- commands

    def run(self, code: str, language: str = "python", timeout=None, command_id: Optional[str] = None,
            env: Optional[dict] = None) -> "Execution":
        """Starts a command and returns its Execution: iterate over it for
        the events as they come (Started, Stdout, ..., Done), or call
        wait() for the finished outcome.

        language is "python" (variables persist between commands),
        "bash", "javascript" or "typescript" (one Node.js interpreter whose
        globals persist, shared by both), "r" (one R session) or "java"
        (one JShell); the last four only in images that have them. env sets environment variables
        for this command only. timeout (seconds or a timedelta) is the command's wall-clock
        limit; None is the server's default. command_id is the idempotency
        key: a fresh UUID unless given; running again with the ID of an
        existing command runs nothing and replays that command's events.

        A dropped stream (network, sandboxd restarted) is resumed by command
        ID where it stopped, without running the code twice; see Execution.
        """
        if command_id is None:
            command_id = str(uuid.uuid4())
        req = pb.ExecuteRequest(sandbox_id=self.id, command_id=command_id, language=language, code=code,
                                env=dict(env or {}))
        d = _duration(timeout)
        if d is not None:
            req.timeout.CopyFrom(d)
        return Execution(self, command_id, execute=req)

    def run_collect(self, code: str, **kwargs) -> "Execution":
        """run(code, ...).wait(): the finished command, with .stdout,
        .stderr, .results, .displays, .error, .status."""
        return self.run(code, **kwargs).wait()

    def resume(self, command_id: str, after_seq: int = 0) -> "Execution":
        """Follows an existing command's events with seq above after_seq
        (StreamCommand), e.g. one started by a process that crashed.
        NotFound when the command is unknown."""
        return Execution(self, command_id, after_seq=after_seq)

    def interrupt(self, command_id: str) -> None:
        """Asks a command to stop, like Ctrl-C (KeyboardInterrupt in Python;
        killed if still running 2 s later). Its stream then ends with Done
        status INTERRUPTED or KILLED. A finished command is left alone."""
        self.client._call(
            self.client._stub.InterruptCommand,
            pb.InterruptCommandRequest(sandbox_id=self.id, command_id=command_id),
        )

    # -- lifecycle

    def delete(self, missing_ok: bool = False) -> None:
        """Stops and removes the sandbox with its files. NotFound when it no
        longer exists, unless missing_ok."""
        from .errors import NotFound

        try:
            self.client.delete(self.id)
        except NotFound:
            if not missing_ok:
                raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            if self.delete_on_exit:
                self.delete(missing_ok=True)
        finally:
            if self._owns_client:
                self.client.close()
        return False

    def __repr__(self):
        return "Sandbox(id=%r, user_id=%r)" % (self.id, self.info.user_id)


class _Outcome:
    """A command's events as they are read (iterate, or wait()), and the
    summaries of those received so far (`events`, `done`): what Execution
    and StatelessRun share."""

    events: List[Event]
    done: Optional[Done]
    _gen: Iterator[Event]  # the events still to read

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        return next(self._gen)

    def wait(self):
        """Reads the remaining events; returns self once Done arrived."""
        for _ in self:
            pass
        return self

    def _take(self, ev: Event) -> bool:
        """Records a received event; True when it is the Done event."""
        self.events.append(ev)
        if isinstance(ev, Done):
            self.done = ev
            return True
        return False

    @property
    def stdout(self) -> str:
        return "".join(e.text for e in self.events if isinstance(e, Stdout))

    @property
    def stderr(self) -> str:
        return "".join(e.text for e in self.events if isinstance(e, Stderr))

    @property
    def results(self) -> List[Result]:
        return [e for e in self.events if isinstance(e, Result)]

    @property
    def displays(self) -> List[Display]:
        return [e for e in self.events if isinstance(e, Display)]

    @property
    def errors(self) -> List[Error]:
        return [e for e in self.events if isinstance(e, Error)]

    @property
    def error(self) -> Optional[Error]:
        errs = self.errors
        return errs[0] if errs else None

    @property
    def status(self) -> Optional[CommandStatus]:
        """How the command ended; None until Done arrived."""
        return self.done.status if self.done else None

    @property
    def ok(self) -> bool:
        return self.done is not None and self.done.ok



class Execution(_Outcome):
    """One command's events, in order, each exactly once: iterate over it,
    or call wait().

    Resumption: the command is sent once, with Execute and its command ID.
    When the stream fails with UNAVAILABLE, ABORTED or CANCELLED, or ends
    without Done (a dropped connection, sandboxd killed or restarted), the
    client waits (backoff from 0.1 s doubling to 2 s) and resumes with
    StreamCommand after the last event received, for as long as the client's
    resume_timeout allows without receiving anything; then it raises
    Unavailable. Execute is sent again only when the server answers that it
    does not know the command (NOT_FOUND) and no event arrived, i.e. the
    first Execute never reached it; since Execute is idempotent by command
    ID, even that cannot run the code twice. Other errors raise the matching
    SandboxdError.

    While iterating, and after wait(), the events received so far are in
    `events`, and the summaries below describe them.
    """

    INITIAL_BACKOFF = 0.1
    MAX_BACKOFF = 2.0

    def __init__(self, sandbox: Sandbox, command_id: str, *, execute=None, after_seq: int = 0):
        self.sandbox = sandbox
        self.command_id = command_id
        self.events: List[Event] = []
        self.done: Optional[Done] = None
        # resumes counts the streams opened after the first one.
        self.resumes = 0
        self._request = execute
        self._last_seq = after_seq
        stream = None
        if execute is not None:
            # Started at once (gRPC sends it now), so run() starts the
            # command even if the caller iterates later or never.
            client = sandbox.client
            stream = client._stub.Execute(execute, metadata=client._metadata)
        self._gen = self._follow(stream)

    def interrupt(self) -> None:
        """Interrupts this command (see Sandbox.interrupt)."""
        self.sandbox.interrupt(self.command_id)

    def close(self) -> None:
        """Stops reading (the command keeps running on the server)."""
        self._gen.close()

    def __repr__(self):
        return "Execution(command_id=%r, events=%d, status=%s)" % (
            self.command_id, len(self.events), self.status.value if self.status else None)

    # -- the stream

    def _open(self, execute: bool):
        client = self.sandbox.client
        if execute:
            return client._stub.Execute(self._request, metadata=client._metadata)
        req = pb.StreamCommandRequest(
            sandbox_id=self.sandbox.id, command_id=self.command_id, after_seq=self._last_seq)
        return client._stub.StreamCommand(req, metadata=client._metadata)

    def _follow(self, stream):
        client = self.sandbox.client
        execute = stream is not None  # the stream at hand is an Execute
        failing_since = None
        backoff = self.INITIAL_BACKOFF
        while True:
            if stream is None:
                stream = self._open(execute)
            try:
                for msg in stream:
                    if msg.seq <= self._last_seq:
                        continue  # already delivered (a replay from the start)
                    ev = event_from_proto(msg)
                    self._last_seq = msg.seq
                    failing_since, backoff = None, self.INITIAL_BACKOFF
                    done = self._take(ev)
                    yield ev
                    if done:
                        return
                last_error = "the stream ended before the command's Done event"
                execute = False
            except grpc.RpcError as e:
                code = e.code()
                if client.closed:
                    raise from_rpc_error(e) from e
                if (code == grpc.StatusCode.NOT_FOUND and not execute
                        and self._request is not None and self._last_seq == 0):
                    # The server does not know the command: the Execute sent
                    # earlier never reached it. Send it again (idempotent).
                    execute = True
                elif code in _RESUMABLE:
                    execute = False
                else:
                    raise from_rpc_error(e) from e
                last_error = "%s: %s" % (code.name, e.details())
            finally:
                stream.cancel()  # no-op on a finished call
            stream = None
            now = time.monotonic()
            if failing_since is None:
                failing_since = now
            elif now - failing_since > client.resume_timeout:
                raise Unavailable(
                    "command %s: no event for %.0f s while resuming after seq %d (last error: %s)"
                    % (self.command_id, now - failing_since, self._last_seq, last_error),
                    grpc.StatusCode.UNAVAILABLE,
                )
            time.sleep(backoff)
            backoff = min(backoff * 2, self.MAX_BACKOFF)
            self.resumes += 1


class StatelessRun(_Outcome):
    """A stateless run's events (Client.run_stateless), in order: iterate
    over it, or call wait(). Its sandbox is gone once the run ends, so a
    broken stream cannot be resumed: it raises Unavailable, and `events`
    holds what arrived before."""

    def __init__(self, stream):
        self.command_id = ""
        self.events: List[Event] = []
        self.done: Optional[Done] = None
        self._stream = stream
        self._gen = self._read()

    def __repr__(self):
        return "StatelessRun(command_id=%r, events=%d, status=%s)" % (
            self.command_id, len(self.events), self.status.value if self.status else None)

    def _read(self):
        try:
            for msg in self._stream:
                if not self.command_id:
                    self.command_id = msg.command_id
                ev = event_from_proto(msg)
                done = self._take(ev)
                yield ev
                if done:
                    return
        except grpc.RpcError as e:
            raise from_rpc_error(e) from e
        finally:
            self._stream.cancel()
        raise Unavailable("stateless run: the stream ended before the command did; its sandbox is gone, nothing to resume",
                          grpc.StatusCode.UNAVAILABLE)


# Template archives up to this size are spooled in memory while hashed,
# larger ones to a temporary file.
_SPOOL_MEMORY = 64 << 20

_STEP_KINDS = ("apt", "copy", "env", "workdir", "user", "run")


def _spool_archive(data):
    """(key, file): data's bytes spooled (a directory packed as a tar
    first) while hashed with SHA-256, the file rewound."""
    h = hashlib.sha256()
    f = tempfile.SpooledTemporaryFile(max_size=_SPOOL_MEMORY)
    try:
        if isinstance(data, (str, os.PathLike)):
            path = os.fspath(data)
            if os.path.isdir(path):
                _pack(path, f)
                f.seek(0)
                src = f
                f = tempfile.SpooledTemporaryFile(max_size=_SPOOL_MEMORY)
                with src:
                    _hash_copy(src, f, h)
            else:
                with open(path, "rb") as src:
                    _hash_copy(src, f, h)
        elif hasattr(data, "read"):
            _hash_copy(data, f, h)
        else:
            for chunk in _chunks(data):
                h.update(chunk)
                f.write(chunk)
        f.seek(0)
    except BaseException:
        f.close()
        raise
    return h.hexdigest(), f


def _hash_copy(src, dst, h):
    while True:
        chunk = src.read(UPLOAD_CHUNK)
        if not chunk:
            return
        if isinstance(chunk, str):
            raise TypeError("upload_template_file: the file must be opened in binary mode ('rb')")
        h.update(chunk)
        dst.write(chunk)


def _pack(path: str, out) -> None:
    """Writes path (a file or a directory, with what it holds) to out as a
    tar whose one top entry is path's base name: entries in lexical order,
    owned by root, with their permission bits and time 0, so that the same
    files make the same archive (and key). Symbolic links stay links;
    other kinds of files are refused."""
    path = os.path.normpath(path)
    base = os.path.basename(path)
    if base in ("", ".", ".."):
        raise ValueError("%s: name a file or directory by its own name" % path)
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        def add(p, arcname):
            info = tar.gettarinfo(p, arcname)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            info.mode &= 0o777
            if info.isreg():
                with open(p, "rb") as f:
                    tar.addfile(info, f)
            elif info.isdir():
                tar.addfile(info)
                for name in sorted(os.listdir(p)):
                    add(os.path.join(p, name), arcname + "/" + name)
            elif info.issym():
                tar.addfile(info)
            else:
                raise ValueError("%s: not a regular file, directory or symbolic link" % p)

        add(path, base)


def _template_spec(client: "Client", spec, base_dir: Optional[str]):
    """A spec for BuildTemplate: a pb.TemplateSpec as it is, or a dict as
    Client.build_template describes, its local copies uploaded."""
    if isinstance(spec, pb.TemplateSpec):
        return spec
    if not isinstance(spec, dict):
        raise TypeError("a template spec is a dict or a pb.TemplateSpec, not %r" % (type(spec).__name__,))
    unknown = set(spec) - {"base", "steps"}
    if unknown:
        raise ValueError("template spec: unknown field(s) %s (want base and steps)" % ", ".join(sorted(unknown)))
    out = pb.TemplateSpec(base=spec.get("base") or "")
    uploaded = {}
    for i, step in enumerate(spec.get("steps") or [], 1):
        if not isinstance(step, dict) or len(step) != 1 or next(iter(step)) not in _STEP_KINDS:
            raise ValueError("template spec step %d: want a dict of exactly one of %s, not %r" % (i, ", ".join(_STEP_KINDS), step))
        kind, value = next(iter(step.items()))
        if kind == "apt":
            out.steps.add().apt.packages.extend(value if isinstance(value, (list, tuple)) else [value])
        elif kind == "env":
            out.steps.add().env.vars.update({str(k): str(v) for k, v in (value or {}).items()})
            if not value:
                out.steps[-1].env.SetInParent()
        elif kind == "copy":
            c = dict(value)
            unknown = set(c) - {"archive", "src", "dest", "mode", "owner"}
            if unknown:
                raise ValueError("template spec step %d: copy: unknown field(s) %s" % (i, ", ".join(sorted(unknown))))
            mode = c.get("mode") or 0
            if isinstance(mode, str):
                mode = int(mode[2:] if mode.lower().startswith("0o") else mode, 8)
            src = c.get("src") or ""
            archive = c.get("archive") or ""
            if not archive:
                if not src:
                    raise ValueError("template spec step %d: copy needs src (a local file or directory) or an archive" % i)
                local = src if base_dir is None or os.path.isabs(src) else os.path.join(base_dir, src)
                local = os.path.normpath(local)
                if local not in uploaded:
                    uploaded[local] = client.upload_template_file(local)
                archive, src = uploaded[local], os.path.basename(local)
            out.steps.add().copy.CopyFrom(pb.CopyStep(archive=archive, src=src, dest=c.get("dest") or "",
                                                       mode=int(mode), owner=c.get("owner") or ""))
        else:
            setattr(out.steps.add(), kind, str(value))
    return out


def _chunks(data) -> Iterator[bytes]:
    """An upload's content in chunks of UPLOAD_CHUNK: data is bytes (or
    bytearray, memoryview), a str (UTF-8) or a binary file object."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    if hasattr(data, "read"):
        while True:
            chunk = data.read(UPLOAD_CHUNK)
            if not chunk:
                return
            if isinstance(chunk, str):
                raise TypeError("upload: the file must be opened in binary mode ('rb')")
            yield chunk
    else:
        view = memoryview(data).cast("B")
        for i in range(0, len(view), UPLOAD_CHUNK):
            yield bytes(view[i:i + UPLOAD_CHUNK])


def _download(client: "Client", method, request) -> bytes:
    """A download stream's content, its errors mapped."""
    parts = []
    try:
        for msg in method(request, metadata=client._metadata):
            parts.append(msg.chunk)
    except grpc.RpcError as e:
        raise from_rpc_error(e) from e
    return b"".join(parts)


class Files:
    """Files under the sandbox's /workspace. Paths are relative to it
    ("data/in.csv") or absolute under it ("/workspace/data/in.csv")."""

    def __init__(self, sandbox: Sandbox):
        self._sandbox = sandbox

    def upload(self, path: str, data) -> FileInfo:
        """Writes a file, replacing any file at path and creating missing
        directories. data is bytes (or bytearray, memoryview), a str
        (written as UTF-8) or a binary file object (read to its end), e.g.
        open("local.csv", "rb")."""
        sb = self._sandbox

        def requests():
            yield pb.UploadFileRequest(header=pb.UploadFileHeader(sandbox_id=sb.id, path=path))
            for chunk in _chunks(data):
                yield pb.UploadFileRequest(chunk=chunk)

        resp = sb.client._call(sb.client._stub.UploadFile, requests())
        return FileInfo.from_proto(resp.file)

    def download(self, path: str) -> bytes:
        """A regular file's content. NotFound when it does not exist,
        InvalidArgument for a directory."""
        sb = self._sandbox
        return _download(sb.client, sb.client._stub.DownloadFile, pb.DownloadFileRequest(sandbox_id=sb.id, path=path))

    def list(self, path: str = "", depth: int = 1) -> List[FileInfo]:
        """A directory's entries, sorted by path; for a file, just that
        file. "" is /workspace itself. depth 1 lists the direct children, 2
        their children too, and so on up to 10 (symbolic links are listed,
        not followed); ResourceExhausted past 10000 entries."""
        sb = self._sandbox
        resp = sb.client._call(sb.client._stub.ListFiles,
                               pb.ListFilesRequest(sandbox_id=sb.id, path=path, depth=depth))
        return [FileInfo.from_proto(f) for f in resp.files]

    def mkdir(self, path: str, parents: bool = False) -> FileInfo:
        """Creates a directory. With parents, missing parents are created
        and an existing directory is fine (mkdir -p); without, AlreadyExists
        when path exists and NotFound when its parent does not."""
        sb = self._sandbox
        resp = sb.client._call(sb.client._stub.MakeDirectory,
                               pb.MakeDirectoryRequest(sandbox_id=sb.id, path=path, parents=parents))
        return FileInfo.from_proto(resp.file)

    def remove(self, path: str, recursive: bool = False) -> None:
        """Removes a file, a link or an empty directory; with recursive, a
        directory with everything in it. NotFound when path does not
        exist; FailedPrecondition for a non-empty directory without
        recursive."""
        sb = self._sandbox
        sb.client._call(sb.client._stub.Remove,
                        pb.RemoveRequest(sandbox_id=sb.id, path=path, recursive=recursive))

    def rename(self, src: str, dst: str, overwrite: bool = False) -> FileInfo:
        """Moves src to dst within /workspace and returns it at its new
        path. AlreadyExists when dst exists, unless overwrite."""
        sb = self._sandbox
        resp = sb.client._call(sb.client._stub.Rename,
                               pb.RenameRequest(sandbox_id=sb.id, to=dst, overwrite=overwrite, **{"from": src}))
        return FileInfo.from_proto(resp.file)

    def watch(self, path: str = "", recursive: bool = False, timeout=None) -> "Watch":
        """Watches a directory: returns once the watch is in place, so
        every change made after it is reported (with recursive, also in
        subdirectories, those created later included). Iterate over the
        result for WatchEvents; close() it (or leave its `with` block) to
        stop. timeout (seconds or a timedelta) ends the watch with
        DeadlineExceeded; None watches until closed."""
        sb = self._sandbox
        client = sb.client
        if isinstance(timeout, datetime.timedelta):
            timeout = timeout.total_seconds()
        call = client._stub.WatchDirectory(
            pb.WatchDirectoryRequest(sandbox_id=sb.id, path=path, recursive=recursive),
            metadata=client._metadata, timeout=timeout)
        watch = Watch(call)
        try:
            next(call)  # the first message says the watch is in place
        except grpc.RpcError as e:
            call.cancel()
            raise from_rpc_error(e) from e
        except StopIteration:
            raise Unavailable("WatchDirectory ended before the watch was in place",
                              grpc.StatusCode.UNAVAILABLE) from None
        return watch


class VolumeFiles:
    """The files of a volume, without a sandbox (Client.volume_files).
    Paths are relative to the volume's root: "/a/b" and "a/b" are the same
    file, "" and "/" the root. File names are written by sandboxes: one
    that is not valid UTF-8 is listed with U+FFFD in its path (see
    FileInfo). A sandbox mounting the volume sees what these calls write at
    once under the runc runtime."""

    def __init__(self, client: Client, volume: str):
        self.client = client
        self.volume = volume

    def upload(self, path: str, data, overwrite: bool = False) -> FileInfo:
        """Writes a file (as Files.upload: bytes, a str or a binary file
        object), creating missing directories. AlreadyExists when path
        exists, unless overwrite; ResourceExhausted when the volume is
        full."""
        volume = self.volume

        def requests():
            yield pb.UploadVolumeFileRequest(header=pb.UploadVolumeFileHeader(volume=volume, path=path, overwrite=overwrite))
            for chunk in _chunks(data):
                yield pb.UploadVolumeFileRequest(chunk=chunk)

        resp = self.client._call(self.client._stub.UploadVolumeFile, requests())
        return FileInfo.from_proto(resp.file)

    def download(self, path: str) -> bytes:
        """A regular file's content. NotFound when it does not exist,
        InvalidArgument for a directory."""
        return _download(self.client, self.client._stub.DownloadVolumeFile,
                         pb.DownloadVolumeFileRequest(volume=self.volume, path=path))

    def list(self, path: str = "", depth: int = 1) -> List[FileInfo]:
        """A directory's entries (depth levels, up to 10), sorted by path;
        for a file, just that file. "" is the root."""
        resp = self.client._call(self.client._stub.ListVolumeFiles,
                                 pb.ListVolumeFilesRequest(volume=self.volume, path=path, depth=depth))
        return [FileInfo.from_proto(f) for f in resp.files]

    def stat(self, path: str = "") -> FileInfo:
        """One file or directory (a link itself, not its target); NotFound
        when it does not exist. "" is the root."""
        resp = self.client._call(self.client._stub.StatVolumeFile,
                                 pb.StatVolumeFileRequest(volume=self.volume, path=path))
        return FileInfo.from_proto(resp.file)

    def mkdir(self, path: str, parents: bool = False) -> FileInfo:
        """Creates a directory, as Files.mkdir does (parents: mkdir -p)."""
        resp = self.client._call(self.client._stub.MakeVolumeDirectory,
                                 pb.MakeVolumeDirectoryRequest(volume=self.volume, path=path, parents=parents))
        return FileInfo.from_proto(resp.file)

    def remove(self, path: str, recursive: bool = False) -> None:
        """Removes a file, a link or a directory, as Files.remove does; the
        root cannot be removed (InvalidArgument)."""
        self.client._call(self.client._stub.RemoveVolumeFile,
                          pb.RemoveVolumeFileRequest(volume=self.volume, path=path, recursive=recursive))

    def set_attributes(self, path: str, uid: Optional[int] = None, gid: Optional[int] = None,
                       mode: Optional[int] = None) -> FileInfo:
        """Sets a file's owner, group or permission bits (chown, chmod; None
        leaves it as it is), e.g. mode=0o640. A link's owner is its own and
        it has no mode; setuid and setgid bits are InvalidArgument."""
        req = pb.SetVolumeFileAttributesRequest(volume=self.volume, path=path)
        if uid is not None:
            req.uid = uid
        if gid is not None:
            req.gid = gid
        if mode is not None:
            req.mode = mode
        resp = self.client._call(self.client._stub.SetVolumeFileAttributes, req)
        return FileInfo.from_proto(resp.file)

    def __repr__(self):
        return "VolumeFiles(%r)" % self.volume


class Watch:
    """A WatchDirectory stream: an iterator of WatchEvents that ends when
    the sandbox goes away, or raises the server's error. close() stops it
    from any thread."""

    def __init__(self, call):
        self._call = call

    def __iter__(self) -> Iterator[WatchEvent]:
        try:
            for msg in self._call:
                if msg.HasField("event"):
                    yield WatchEvent.from_proto(msg)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.CANCELLED:
                return
            raise from_rpc_error(e) from e

    def close(self) -> None:
        self._call.cancel()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def connect(addr: str, user_id: str, token: Optional[str] = None, tls: bool = False,
            ca_file: Optional[str] = None, **acquire_options) -> Sandbox:
    """A Client for addr and the user's sandbox in one step. The Sandbox owns
    the client: leaving its `with` block (or calling sb.client.close())
    closes the channel; the sandbox itself is kept unless
    delete_on_exit=True."""
    client = Client(addr, token=token, tls=tls, ca_file=ca_file)
    try:
        sb = Sandbox.acquire(client, user_id, **acquire_options)
    except BaseException:
        client.close()
        raise
    sb._owns_client = True
    return sb
