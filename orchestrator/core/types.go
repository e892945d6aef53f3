package core

import (
	"cmp"
	"io/fs"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

// State is a sandbox's lifecycle state as callers see it.
type State string

const (
	// StateRunning: the container runs and accepts commands.
	StateRunning State = "running"
	// StateDead: the container stopped or vanished; the Python state is lost.
	// The sandbox stays visible (with a reason) until it expires or is
	// deleted, so callers learn what happened instead of seeing a silent swap.
	StateDead State = "dead"
	// StateHibernated: no container runs and no memory is used; the
	// volumes and a snapshot of the state stay on disk, and the next
	// Acquire, command or other use wakes it (hibernate.go).
	StateHibernated State = "hibernated"
)

// Limits are a sandbox's resource limits. Zero means "the server's default".
type Limits struct {
	// MemoryBytes caps the container's memory (RAM; swap is disabled).
	MemoryBytes int64
	// NanoCPUs caps CPU time in billionths of a CPU (1e9 = one core).
	NanoCPUs int64
	// PidsLimit caps the number of processes and threads in the container.
	PidsLimit int64
	// DiskBytes caps what the sandbox can store in /workspace: the size of
	// its workspace volume. Zero in a sandbox's limits means unbounded (a
	// server with Config.NoDiskVolumes).
	DiskBytes int64
}

// Options are what a caller may choose when a sandbox is created.
type Options struct {
	// Limits requested; zero fields take the server default, and requests
	// above the server maximum are refused with ErrInvalidArgument.
	Limits Limits
	// Env is set in the sandbox's processes. A warm-pool sandbox takes it
	// after its claim, by an env record (ioproto/PROTOCOL.md, *Sandbox
	// environment*), unless it names a driver variable.
	Env map[string]string
	// Network gives the sandbox outbound network access, through the egress
	// gateway and under NetworkPolicy. Refused with ErrInvalidArgument
	// unless Policy.AllowNetwork.
	Network bool
	// NetworkPolicy is the sandbox's egress policy (network.go); setting it
	// implies Network. Validating hands a backend a sandbox with network
	// always with one (Policy.ResolveOptions): the caller's, checked and
	// normalised, else the server's default (Policy.EgressDefault), else an
	// empty one (every public destination). It holds the rules' header
	// values, which are secrets: a backend keeps them on the host only.
	NetworkPolicy *NetworkPolicy
	// Metadata is the caller's labels for the sandbox, returned with it and
	// matched by ListFilter.Metadata; bounded by validateMetadata
	// (lifetime.go). Unlike Env it does not keep a sandbox from the warm
	// pool: it lives in meta.json, not in the container.
	Metadata map[string]string
	// IdleTimeout replaces Config.IdleTTL for this sandbox; zero means the
	// server default. Bounded as in SetTimeout.
	IdleTimeout time.Duration
	// OnIdle replaces Config.OnIdle for this sandbox (OnIdleHibernate or
	// OnIdleDelete); empty means the server default. The E2B door sets it
	// from lifecycle.onTimeout, whose default is to kill.
	OnIdle string
	// FromSnapshot starts a new sandbox from a named snapshot of the
	// caller's tenant (its ID or name): /workspace copied, the globals
	// restored before Acquire returns (AcquireResult.Woke says how). Where
	// sandboxes wake fast it runs in a warm-pool container.
	FromSnapshot string
	// Volumes are mounted in the sandbox (volume.go), checked by
	// ValidateVolumeMounts; a backend resolves each to its volume's ID,
	// and a missing one is VolumeNotFound. A backend whose containers see
	// mounts made after they started mounts them into a claimed warm-pool
	// sandbox.
	Volumes []VolumeMount
	// Template is a template of the caller's tenant (its ID or name): the
	// sandbox runs its latest ready version's image instead of the
	// server's. A missing one is NotFound, one never built ready
	// FailedPrecondition. Only the warm pool kept for that template
	// (Config.WarmPoolTemplates) serves it.
	Template string
}

// Sandbox describes one sandbox.
type Sandbox struct {
	ID string
	// Tenant owns the sandbox; UserID is unique within it.
	Tenant string
	UserID string
	State  State
	// StateReason says why a sandbox is dead (e.g. "container exited with code 137").
	StateReason string
	// HealthReason is empty while a running sandbox is healthy; otherwise it
	// says what is wrong (e.g. "/io is full: ..."), as the sandbox's driver
	// reported it in /io/driver.json (cmdlog.HealthReason). Always empty
	// when dead.
	HealthReason string
	CreatedAt    time.Time
	LastActiveAt time.Time
	// ExpiresAt is when the sandbox is removed unless used again: the
	// earlier of LastActiveAt+idle TTL and CreatedAt+max lifetime.
	ExpiresAt time.Time
	Image     string
	Limits    Limits
	// Network is true when the sandbox has outbound network access.
	Network bool
	// NetworkPolicy is the egress policy in force of a sandbox with
	// network, redacted (NetworkPolicy.Redacted: rule keys and header
	// names, never a header's value); nil without network.
	NetworkPolicy *NetworkPolicy
	ContainerID   string
	// Volumes are the sandbox's mounts, each naming its volume by ID.
	Volumes []VolumeMount
	// Template is the template the sandbox was created from (its ID, ""
	// for the server's image) and TemplateVersion which of its versions.
	Template        string
	TemplateVersion int
	// Metadata is what Options.Metadata set at creation (nil when none); a
	// copy, which the caller may keep.
	Metadata map[string]string
	// IdleTimeout is the idle TTL in force for this sandbox: its own (set
	// at creation or with SetTimeout) or the server's default.
	IdleTimeout time.Duration
	// OnIdle is what the idle TTL does to this sandbox: its own
	// Options.OnIdle, else Config.OnIdle.
	OnIdle string
	// Snapshot is the state a hibernated sandbox keeps (nil when it has
	// never been hibernated); HibernatedAt when it was hibernated.
	Snapshot     *SnapshotInfo
	HibernatedAt time.Time
	// LastWake is how the state came back at the sandbox's last wake.
	LastWake *WakeInfo
}

// CompareSandboxes is the order List returns sandboxes in, which the API
// promises: oldest first, then by ID.
func CompareSandboxes(a, b Sandbox) int {
	return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
}

// AcquireResult is the outcome of Acquire.
type AcquireResult struct {
	Sandbox Sandbox
	// Created is true when a new sandbox was made for this call.
	Created bool
	// ReplacedID is the user's previous sandbox when it had died and this
	// new one replaces it; its Python state is lost. Empty otherwise.
	ReplacedID string
	// ReplacedReason says why the previous sandbox died.
	ReplacedReason string
	// Woke is set when this call woke the user's hibernated sandbox: how
	// its state came back.
	Woke *WakeInfo
}

// ListFilter narrows List. Empty fields match everything (everything the
// caller may see: List never shows another tenant's sandboxes to a caller
// that is not an admin).
type ListFilter struct {
	Tenant string
	UserID string
	State  State
	// Metadata, when not empty, keeps only sandboxes whose metadata has
	// every one of its pairs.
	Metadata map[string]string
}

// ExecRequest submits one command.
type ExecRequest struct {
	SandboxID string
	// CommandID is the caller's idempotency key; generated when empty.
	CommandID string
	// Language is "python" (default when empty), "bash", "javascript" (or
	// "js"), "typescript" (or "ts"), "r" (or "R") or "java"; the last four
	// only in images that have their interpreter.
	Language string
	Code     string
	// Timeout is the command's wall-clock limit; zero means the server default.
	Timeout time.Duration
	// Stdin keeps a bash command's input open for SendStdin (commands.go).
	Stdin bool
	// Pty, when not zero, runs a bash command on a terminal of that size.
	Pty PtySize
	// Env sets environment variables for this command only, overriding the
	// sandbox's for its duration (ioproto.ValidateEnv gives the bounds).
	Env map[string]string
	// ContextID is the context to run in (contexts.go); empty means the
	// default context.
	ContextID string
}

// Event is one event of a command, as in the /io protocol, with large
// artifacts already read back into Data (Refs is always empty).
type Event = ioproto.Event

// FileInfo describes an entry under /workspace.
type FileInfo struct {
	// Path is relative to /workspace, with forward slashes.
	Path    string
	Size    int64
	IsDir   bool
	ModTime time.Time
	// Mode is the file's type and permission bits, as Lstat reports them
	// (a symbolic link is a link, never what it points to).
	Mode fs.FileMode
	// Type is the kind of file, from Mode (zero when unknown).
	Type FileType
	// UID and GID are the numeric owner and group, the same inside the
	// sandbox as on the host.
	UID, GID uint32
}

// FileType is the kind of a file in a FileInfo.
type FileType int

// The kinds of file; the zero FileType is unknown.
const (
	FileRegular FileType = iota + 1
	FileDirectory
	FileSymlink
	FileOther
)

// FileTypeOf classifies a file mode.
func FileTypeOf(m fs.FileMode) FileType {
	switch {
	case m.IsRegular():
		return FileRegular
	case m.IsDir():
		return FileDirectory
	case m&fs.ModeSymlink != 0:
		return FileSymlink
	}
	return FileOther
}

// WatchOp is the kind of a WatchEvent.
type WatchOp int

// The kinds of WatchEvent.
const (
	WatchCreate WatchOp = iota + 1
	WatchWrite
	WatchRemove
	WatchRename
)

// WatchEvent is one change under a watched directory.
type WatchEvent struct {
	Op WatchOp
	// Path is relative to /workspace, with forward slashes.
	Path string
	// Time is when sandboxd saw the change (for coalesced writes, the first).
	Time time.Time
}

// WatchUpdate is what WatchDirectory passes to its callback: first one with
// no Event once the watch is in place, then one per event. Dropped counts
// the events dropped since the previous update.
type WatchUpdate struct {
	Event   *WatchEvent
	Dropped uint64
}

// CompareFiles is the order ListFiles returns entries in: by path.
func CompareFiles(a, b FileInfo) int { return strings.Compare(a.Path, b.Path) }
