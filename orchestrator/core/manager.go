package core

import (
	"context"
	"io"
	"time"
)

// Manager is the port between the doors and the backends: everything a
// caller can do to sandboxes, in the domain's own types. The Docker backend
// (orchestrator/backend/docker) and the Kubernetes backend
// (orchestrator/backend/kube) implement it; the gRPC door
// (orchestrator/door/grpcapi) and the E2B door (orchestrator/door/e2bapi)
// call it. sandboxd puts Validating in front of the backend, so every
// method's arguments have passed the domain's request rules (validate.go)
// and the Policy before a backend sees them.
//
// The caller travels in ctx (WithCaller): every method acts within what
// that caller may see, and another tenant's sandbox answers exactly as one
// that does not exist. Every error wraps exactly one Class (or is the
// caller's own context error). A backend that lacks an operation answers
// it with Unsupported, naming itself and the feature.
type Manager interface {
	// Acquire returns the user's current sandbox, creating one (or waking
	// a hibernated one) if needed; concurrent calls for one user yield one
	// sandbox. opts apply only to a new sandbox.
	Acquire(ctx context.Context, userID string, opts Options) (AcquireResult, error)
	Get(ctx context.Context, sandboxID string) (Sandbox, error)
	List(ctx context.Context, f ListFilter) ([]Sandbox, error)
	Delete(ctx context.Context, sandboxID string) error
	// SetTimeout sets a sandbox's own idle TTL, counted from now.
	SetTimeout(ctx context.Context, sandboxID string, d time.Duration) (Sandbox, error)
	Hibernate(ctx context.Context, sandboxID string) (Sandbox, error)
	Wake(ctx context.Context, sandboxID string) (Sandbox, *WakeInfo, error)
	// CreateSnapshot saves a running sandbox's state (globals as a
	// hibernation saves them, and /workspace) as a named snapshot of its
	// tenant, kept until DeleteSnapshot (snapshot.go). The sandbox keeps
	// running.
	CreateSnapshot(ctx context.Context, sandboxID, name string) (Snapshot, error)
	// ListSnapshots lists the snapshots the caller may see, newest first.
	ListSnapshots(ctx context.Context, f SnapshotFilter) ([]Snapshot, error)
	// DeleteSnapshot deletes a snapshot by ID or name.
	DeleteSnapshot(ctx context.Context, ref string) error
	// Fork makes req.Count new sandboxes with a copy of the source's state;
	// each succeeds or fails on its own (ForkResult.Err).
	Fork(ctx context.Context, sandboxID string, req ForkRequest) ([]ForkResult, error)
	// SandboxMetrics returns the samples of the sandbox's resource use
	// taken after since, oldest first: those of the last minutes while it
	// runs, only its last one once it is hibernated or dead. It neither
	// wakes a hibernated sandbox nor counts as a use.
	SandboxMetrics(ctx context.Context, sandboxID string, since time.Time) ([]SandboxMetrics, error)

	// The network of a sandbox created with one (Options.Network). A
	// sandbox without network answers NoNetwork; a server without
	// networking NetworkNotEnabled (Validating).
	//
	// UpdateNetworkPolicy replaces the sandbox's egress policy (checked and
	// normalised by Validating, as Options.NetworkPolicy is) and returns the
	// sandbox with it, redacted. The policy is persisted before it is
	// applied: new connections follow it at once, open ones it refuses are
	// closed. A hibernated sandbox keeps it for its wake, without waking;
	// a dead one is SandboxDead.
	UpdateNetworkPolicy(ctx context.Context, sandboxID string, p NetworkPolicy) (Sandbox, error)
	// NetworkStatus returns the sandbox's policy (redacted), its egress
	// counters and its recent denials. It does not wake a hibernated
	// sandbox (its counters are then zero).
	NetworkStatus(ctx context.Context, sandboxID string) (NetworkStatus, error)
	// GetHost returns the URL at which port of the sandbox is served by
	// sandboxd's HTTP front, and the traffic token it needs unless the
	// sandbox's policy allows public traffic. It does not wake a
	// hibernated sandbox: a request to the URL does.
	GetHost(ctx context.Context, sandboxID string, port int) (HostInfo, error)
	// PortTarget tells sandboxd's ports front (orchestrator/door/ports)
	// how to reach port of a networked sandbox, and whether a request
	// without the sandbox's traffic token may (PortTarget.Public). token
	// says that the request carried the sandbox's token (the front checks
	// it, PortsFront.CheckToken). The front authorises a request before it
	// acts on the answer; an authorised one (token, or Public) to a running
	// sandbox counts as a use of it, as a command does, and nothing else
	// changes anything. PortTarget never wakes a hibernated sandbox (the
	// front calls Wake once it has authorised the request) and reports the
	// sandbox's state rather than failing for it; a sandbox without
	// network is NoNetwork.
	PortTarget(ctx context.Context, sandboxID string, port int, token bool) (PortTarget, error)

	// Submit queues a command, exactly once per command ID, and returns
	// its ID (generated when req has none).
	Submit(ctx context.Context, req ExecRequest) (commandID string, err error)
	// Follow calls fn with the command's events after afterSeq, in order,
	// until its done event (or fn's error, or ctx).
	Follow(ctx context.Context, sandboxID, commandID string, afterSeq int64, fn func(Event) error) error
	// Execute is Submit, then Follow from the command's first event, as
	// one operation: submitted is called with the command's ID once it is
	// in the sandbox's log, before any event; then fn with each event.
	// An error before submitted is Submit's, after it Follow's. A backend
	// that reaches the log over a network does both in one round trip
	// (the Kubernetes backend's io sidecar); SubmitThenFollow is the two
	// calls, for the others.
	Execute(ctx context.Context, req ExecRequest, submitted func(commandID string), fn func(Event) error) error
	Interrupt(ctx context.Context, sandboxID, commandID string) error
	SendStdin(ctx context.Context, sandboxID, commandID string, data []byte) error
	CloseStdin(ctx context.Context, sandboxID, commandID string) error
	ResizePty(ctx context.Context, sandboxID, commandID string, size PtySize) error
	ListCommands(ctx context.Context, sandboxID string, pageSize int, pageToken string) (CommandPage, error)

	CreateContext(ctx context.Context, sandboxID, language, cwd string) (ContextInfo, error)
	ListContexts(ctx context.Context, sandboxID string) ([]ContextInfo, error)
	RestartContext(ctx context.Context, sandboxID, contextID string) error
	DeleteContext(ctx context.Context, sandboxID, contextID string) error

	// The files API, under /workspace. Paths are relative to /workspace
	// or absolute under it (ValidatePath); Validating hands backends the
	// clean relative form.
	Upload(ctx context.Context, sandboxID, path string, r io.Reader) (FileInfo, error)
	Download(ctx context.Context, sandboxID, path string) (io.ReadCloser, FileInfo, error)
	ListFiles(ctx context.Context, sandboxID, path string) ([]FileInfo, error)
	ListFilesDepth(ctx context.Context, sandboxID, path string, depth int) ([]FileInfo, error)
	MakeDirectory(ctx context.Context, sandboxID, path string, parents bool) (FileInfo, error)
	Remove(ctx context.Context, sandboxID, path string, recursive bool) error
	Rename(ctx context.Context, sandboxID, from, to string, overwrite bool) (FileInfo, error)
	// WatchDirectory calls fn once the watch is in place (an update with
	// no Event), then once per change, until ctx ends or fn fails.
	WatchDirectory(ctx context.Context, sandboxID, path string, recursive bool, fn func(WatchUpdate) error) error

	// Volumes (volume.go): named file systems of the caller's tenant. A
	// reference (ref) is a volume's ID or name.
	//
	// CreateVolume makes an empty volume of sizeBytes (Validating turns 0
	// into the default); a name the tenant already uses is AlreadyExists.
	CreateVolume(ctx context.Context, name string, sizeBytes int64) (Volume, error)
	GetVolume(ctx context.Context, ref string) (Volume, error)
	// ListVolumes lists the volumes the caller may see (an admin: of
	// tenant, or all when tenant is ""), by tenant and name.
	ListVolumes(ctx context.Context, tenant string) ([]Volume, error)
	// DeleteVolume deletes a volume and its files. While sandboxes mount it
	// it is VolumeInUse, unless force: then they keep running without it
	// (their view of it is detached, and gone at their next start).
	DeleteVolume(ctx context.Context, ref string, force bool) error
	// The files of a volume, without a sandbox: paths are relative to its
	// root (CleanVolumePath; Validating hands backends the clean form).
	// What they create belongs to the sandbox user, as if a sandbox had
	// written it.
	VolumeUpload(ctx context.Context, ref, path string, r io.Reader, overwrite bool) (FileInfo, error)
	VolumeDownload(ctx context.Context, ref, path string) (io.ReadCloser, FileInfo, error)
	VolumeStat(ctx context.Context, ref, path string) (FileInfo, error)
	VolumeListFiles(ctx context.Context, ref, path string, depth int) ([]FileInfo, error)
	VolumeMakeDirectory(ctx context.Context, ref, path string, parents bool) (FileInfo, error)
	VolumeRemove(ctx context.Context, ref, path string, recursive bool) error
	// VolumeSetAttributes sets a file's owner, group or permission bits
	// on a volume (FileAttributes; nil fields are left as they are), as
	// chown and chmod would; a symlink's owner is its own, and its mode
	// cannot be set.
	VolumeSetAttributes(ctx context.Context, ref, path string, a FileAttributes) (FileInfo, error)

	// Templates (template.go): a tenant's own sandbox images, built from a
	// spec. A reference (ref) is a template's ID or name.
	//
	// PutTemplateFile stores an archive a spec's Copy steps name, under
	// key, for the caller's tenant. Keys are immutable: when key exists
	// already the upload is not read and existed is true.
	PutTemplateFile(ctx context.Context, key string, r io.Reader) (existed bool, err error)
	// HasTemplateFile reports whether the tenant has an archive under key.
	HasTemplateFile(ctx context.Context, key string) (bool, error)
	// BuildTemplate starts a build of the template name (created if new)
	// from spec and returns at once, the new version building or, when
	// the spec's hash was built before and force is false, already ready
	// (Cached). Follow it with FollowTemplateBuild. A template whose build
	// is running is FailedPrecondition; too many builds at once
	// ResourceExhausted.
	BuildTemplate(ctx context.Context, name string, spec TemplateSpec, force bool) (Template, TemplateVersion, error)
	// FollowTemplateBuild calls fn with the build log's lines after
	// afterSeq, then with the event that says how it finished, waiting
	// while it runs. It returns nil once the version is ready, and the
	// build's failure (classed, with its reason) if it failed.
	FollowTemplateBuild(ctx context.Context, ref string, version int, afterSeq int64, fn func(TemplateBuildEvent) error) error
	// TemplateBuildLog returns, without waiting, up to limit of the build
	// log's lines after afterSeq, and the version as it stands (for a
	// caller that polls, as E2B's SDK does).
	TemplateBuildLog(ctx context.Context, ref string, version int, afterSeq int64, limit int) ([]TemplateBuildEvent, TemplateVersion, error)
	GetTemplate(ctx context.Context, ref string) (Template, error)
	// ListTemplates lists the templates the caller may see (an admin: of
	// tenant, or all when tenant is ""), by tenant and name.
	ListTemplates(ctx context.Context, tenant string) ([]Template, error)
	// DeleteTemplate deletes a template: no new sandbox can use it (a
	// running build is cancelled), and its images go once no sandbox uses
	// them. A template another template is built on may still be deleted:
	// the built images stand on their own.
	DeleteTemplate(ctx context.Context, ref string) error
}
