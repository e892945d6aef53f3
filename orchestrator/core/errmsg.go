package core

import "errors"

// The errors both backends return for the same situation, each with its
// one message: a caller cannot tell which backend answered, and a message
// changed here changes everywhere.

// SandboxNotFound is the one answer for a sandbox a caller cannot use,
// whether it never existed, is gone, or belongs to another tenant (so IDs
// leak nothing across tenants).
func SandboxNotFound(sandboxID string) error {
	return NotFoundf("sandbox %s not found: it never existed, expired or was deleted", sandboxID)
}

// SandboxDead refuses an operation on a sandbox whose container or Pod
// died; reason says why.
func SandboxDead(sandboxID, reason string) error {
	return Preconditionf("sandbox %s is dead: %s; acquire a new one", sandboxID, reason)
}

// SandboxDeleted ends a Follow whose sandbox was deleted meanwhile.
func SandboxDeleted(sandboxID, commandID string) error {
	return NotFoundf("sandbox %s was deleted while following command %s", sandboxID, commandID)
}

// TenantCapReached refuses a new sandbox past Policy.MaxSandboxesPerTenant.
func TenantCapReached(tenant string, max int) error {
	return Exhaustedf("tenant %s runs its maximum of %d sandboxes (sandboxd --max-sandboxes-per-tenant); delete one or try again later", tenant, max)
}

// ServerCapReached refuses a new sandbox past Policy.MaxSandboxes.
func ServerCapReached(max int) error {
	return Exhaustedf("the server runs its maximum of %d sandboxes (sandboxd --max-sandboxes); try again later", max)
}

// CommandNotFound: no command of that ID in the sandbox.
func CommandNotFound(commandID, sandboxID string) error {
	return NotFoundf("command %s not found in sandbox %s", commandID, sandboxID)
}

// CommandIDReused refuses a command ID already used for another command.
func CommandIDReused(commandID, sandboxID string) error {
	return AlreadyExistsf("command ID %s is already used in sandbox %s for a different command (other language or code); use a new command ID, or resend the same command to replay it", commandID, sandboxID)
}

// OutputPruned: the command ran, but its output was pruned to keep /io
// within its budget.
func OutputPruned(commandID, sandboxID string) error {
	return NotFoundf("the output of command %s in sandbox %s is no longer available: it was pruned", commandID, sandboxID)
}

// LogFull refuses a command to a sandbox whose command log reached its
// bounds (cause says which).
func LogFull(sandboxID string, cause error) error {
	return Exhaustedf("sandbox %s takes no more commands: %v; acquire a new one", sandboxID, cause)
}

// Tampered reports a sandbox whose /io files sandboxd refuses to read
// (what names them: "its command log", "its /io files"): it altered them
// from inside, and is unusable.
func Tampered(sandboxID, what string, cause error) error {
	return Preconditionf("sandbox %s tampered with %s (altered from inside the sandbox): %v; it is unusable: delete it and acquire a new one", sandboxID, what, cause)
}

// ContextNotFound: no context of that ID in the sandbox.
func ContextNotFound(contextID, sandboxID string) error {
	return NotFoundf("context %s not found in sandbox %s (never created, or deleted)", contextID, sandboxID)
}

// ShuttingDown refuses work once sandboxd is stopping.
func ShuttingDown() error { return Unavailablef("sandboxd is shutting down") }

// Unsupported is the one way a backend says it lacks an operation the API
// has (this server's configuration lacks it, another backend has it),
// naming the backend and the feature: ErrNotImplemented, which every door
// answers the same (gRPC's UNIMPLEMENTED, the E2B door's 501).
func Unsupported(backend, feature string) error {
	return Errorf(ErrNotImplemented, "%s are not supported by sandboxd's %s backend yet (--backend %s)", feature, backend, backend)
}

// IsUnsupported reports whether err is (or wraps) one of Unsupported's,
// for a door that answers a lacking feature in a way of its own (the E2B
// door's snapshot start and template calls).
func IsUnsupported(err error) bool { return errors.Is(err, ErrNotImplemented) }

// WatchesCapReached refuses a WatchDirectory call past the cap at scope
// on the calls in progress (Policy.MaxWatchesPerSandbox,
// MaxWatchesPerTenant, MaxWatches); who names the sandbox or the tenant.
func WatchesCapReached(scope Scope, who string, max int) error {
	switch scope {
	case ScopeSandbox:
		return Exhaustedf("sandbox %s has reached its cap of %d watches in progress (sandboxd --max-watches-per-sandbox); end one of its watches first", who, max)
	case ScopeTenant:
		return Exhaustedf("tenant %s has reached its cap of %d watches in progress over all its sandboxes (sandboxd --max-watches-per-tenant); end one of its watches first", who, max)
	default:
		return Exhaustedf("the server has reached its cap of %d watches in progress for all tenants together (sandboxd --max-watches); try again later", max)
	}
}

// WatchDirsCapReached refuses a directory to watch past the cap at scope
// on the directories watched (Policy.MaxWatchDirsPerSandbox,
// MaxWatchDirsPerTenant, MaxWatchDirs); who names the sandbox or the
// tenant.
func WatchDirsCapReached(scope Scope, who string, max int) error {
	switch scope {
	case ScopeSandbox:
		return Exhaustedf("sandbox %s has reached its cap of %d watched directories (sandboxd --max-watch-dirs-per-sandbox); end one of its watches or watch a smaller tree", who, max)
	case ScopeTenant:
		return Exhaustedf("tenant %s has reached its cap of %d watched directories over all its sandboxes (sandboxd --max-watch-dirs-per-tenant); end one of its watches or watch a smaller tree", who, max)
	default:
		return Exhaustedf("the server has reached its cap of %d watched directories for all tenants together (sandboxd --max-watch-dirs); try again later", max)
	}
}

// WatchDirsPerCallReached refuses a watch that would cover more than
// Policy.MaxWatchDirsPerCall directories.
func WatchDirsPerCallReached(max int) error {
	return Exhaustedf("a watch has reached its cap of %d watched directories (sandboxd --max-watch-dirs-per-call); watch a smaller tree, or not recursively", max)
}

// HostWatchLimit refuses a watch because the host's own limit (what
// names it: "inotify instances (fs.inotify.max_user_instances)") is used
// up, below sandboxd's caps: the operator should raise it or lower the
// caps.
func HostWatchLimit(what string) error {
	return Exhaustedf("the host's %s are used up, below sandboxd's caps on watches; try again later (operators: raise the limit or lower --max-watches and --max-watch-dirs)", what)
}

// StreamsCapReached refuses a stream (a Follow, a Download, an Upload) past
// the cap at scope on streams in progress (Policy.MaxStreamsPerSandbox,
// MaxStreamsPerTenant, MaxStreams); who is the sandbox or the tenant.
func StreamsCapReached(scope Scope, who string, max int) error {
	switch scope {
	case ScopeSandbox:
		return Exhaustedf("sandbox %s has reached its cap of %d streams in progress (sandboxd --max-streams-per-sandbox); end one of its streams first (a command's output can be resumed later by its ID)", who, max)
	case ScopeTenant:
		return Exhaustedf("tenant %s has reached its cap of %d streams in progress over all its sandboxes (sandboxd --max-streams-per-tenant); end one of its streams first (a command's output can be resumed later by its ID)", who, max)
	default:
		return Exhaustedf("the server has reached its cap of %d streams in progress for all tenants together (sandboxd --max-streams); try again later", max)
	}
}

// NetworkNotEnabled refuses a network operation on a server that gives
// sandboxes no network (Policy.AllowNetwork false).
func NetworkNotEnabled() error {
	return Preconditionf("networking is not enabled on this server: sandboxes have no network unless sandboxd is started with --allow-network")
}

// NoNetwork refuses a network operation on a sandbox created without
// network: its network is fixed when it is created.
func NoNetwork(sandboxID string) error {
	return Preconditionf("sandbox %s has no network: a sandbox's network is chosen when it is created (options.network or options.network_policy); delete it and acquire a new one with network", sandboxID)
}
