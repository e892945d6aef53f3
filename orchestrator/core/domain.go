package core

import (
	"maps"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

// The rules of the domain that every backend applies, exported for the
// Kubernetes backend (orchestrator/backend/kube), which keeps its sandboxes in Pods
// instead of this package's state directory but must answer callers exactly
// as the Docker backend does: the same validation, the same defaults, the
// same error classes and messages. Each rule is still said once, here or in
// the file it is named after; the Docker Manager calls the same functions.

// Policy is the part of a server's configuration that decides which
// Options a caller may ask for.
type Policy struct {
	DefaultLimits, MaxLimits Limits
	// AllowNetwork: Options.Network may be true.
	AllowNetwork bool
	// NoDiskLimit: the backend cannot enforce Limits.DiskBytes, which is
	// then 0 in the limits in force.
	NoDiskLimit bool
	// MaxIdleTTL caps Options.IdleTimeout.
	MaxIdleTTL time.Duration
	// Runtime is the container runtime, for its own limits (gVisor's).
	Runtime string
}

// Resolved is a new sandbox's options, validated and with the server's
// defaults applied.
type Resolved struct {
	Limits      Limits
	Env         map[string]string
	Network     bool
	Metadata    map[string]string
	IdleTimeout time.Duration // 0: the server's
	OnIdle      string        // "": the server's
}

// ResolveOptions validates opts for a new sandbox under p and applies p's
// defaults. Errors wrap ErrInvalidArgument and say what is wrong.
func ResolveOptions(opts Options, p Policy) (Resolved, error) {
	if err := validateEnv(opts.Env); err != nil {
		return Resolved{}, err
	}
	if opts.Network && !p.AllowNetwork {
		return Resolved{}, Invalidf("network access is not allowed on this server: sandboxes have no network unless sandboxd is started with --allow-network")
	}
	req := opts.Limits
	if p.NoDiskLimit {
		req.DiskBytes = 0 // not enforceable here; the limits in force say 0
	}
	limits, err := ResolveLimits(req, p.DefaultLimits, p.MaxLimits)
	if err != nil {
		return Resolved{}, err
	}
	if err := CheckRuntimeLimits(p.Runtime, limits); err != nil {
		return Resolved{}, err
	}
	if err := ValidateMetadata(opts.Metadata); err != nil {
		return Resolved{}, err
	}
	if opts.IdleTimeout != 0 {
		if err := CheckIdleTimeout(opts.IdleTimeout, p.MaxIdleTTL); err != nil {
			return Resolved{}, err
		}
	}
	if err := checkOnIdle(opts.OnIdle); err != nil {
		return Resolved{}, err
	}
	return Resolved{Limits: limits, Env: opts.Env, Network: opts.Network,
		Metadata: maps.Clone(opts.Metadata), IdleTimeout: opts.IdleTimeout, OnIdle: opts.OnIdle}, nil
}

// CheckIdleTimeout checks an idle TTL a caller asks for against
// MinIdleTimeout and the server's maximum.
func CheckIdleTimeout(d, maxTTL time.Duration) error {
	switch {
	case d < MinIdleTimeout:
		return Invalidf("idle timeout %v is below the minimum of %v", d, MinIdleTimeout)
	case d > maxTTL:
		return Invalidf("idle timeout %v exceeds the server's maximum of %v (sandboxd --max-idle-ttl)", d, maxTTL)
	}
	return nil
}

// CommandPolicy is the part of a server's configuration that bounds
// commands.
type CommandPolicy struct {
	MaxCodeBytes               int
	DefaultTimeout, MaxTimeout time.Duration
}

// ExecRecord builds the /io exec record of req (validated with
// ExecRequest.Validate first), checking it against p and applying its
// defaults; an empty command ID gets a fresh one.
func ExecRecord(req ExecRequest, p CommandPolicy) (ioproto.Record, error) {
	if err := req.Validate(); err != nil {
		return ioproto.Record{}, err
	}
	return execRecord(req, p)
}
