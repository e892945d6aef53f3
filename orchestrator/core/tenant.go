package core

import (
	"context"
	"regexp"
)

// Tenants partition the sandboxes among the API's callers, the way
// containerd's namespaces partition its objects: the caller travels in the
// context (WithCaller), and every Manager method acts within what that
// caller may see. User IDs are scoped by tenant, so tenant A's "alice" and
// tenant B's "alice" are two users with two sandboxes.
//
// Visibility is the only rule, applied at every lookup: a caller sees the
// sandboxes of its own tenant, an admin sees all. Another tenant's sandbox
// answers exactly as a sandbox that does not exist (ErrNotFound, same
// message), so IDs leak nothing across tenants.

// DefaultTenant is the single implicit tenant of a server without
// authentication, and the tenant of sandboxes created before tenants existed.
const DefaultTenant = "default"

// MaxTenantLen bounds a tenant name.
const MaxTenantLen = 64

// tenantPattern: tenant names appear in container labels, logs and token
// files, so they use a conservative character set.
var tenantPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// ValidateTenant checks a tenant name: 1 to 64 characters from
// [A-Za-z0-9._-], starting with a letter or digit. Errors wrap
// ErrInvalidArgument.
func ValidateTenant(name string) error {
	return checkName("tenant name", name, MaxTenantLen, tenantPattern, "must start with a letter or digit and use only [A-Za-z0-9._-]")
}

// Caller is who calls the Manager: a tenant, and whether the caller is an
// admin (sees every tenant's sandboxes). An admin still belongs to a tenant:
// the sandboxes it acquires are created there.
//
// Name says which credential the caller presented, for the audit trail
// (orchestrator/audit): a token's NAME from the token file, or its
// fingerprint (tokens.Fingerprint) when the file names none; never the
// token itself. It is empty for a caller without a token (a server without
// --auth-tokens); the doors' own calls on a sandbox's behalf name
// themselves (e.g. "ports-front"). It decides nothing: visibility is
// Tenant's and Admin's alone.
type Caller struct {
	Tenant string
	Admin  bool
	Name   string
}

// DefaultCaller is the caller assumed for a context without one: the
// implicit tenant, with admin rights. It is what a server without
// authentication gives every request, and what in-process users of the
// package (tests, tools) get without further ado. A server with
// authentication always sets the caller explicitly.
var DefaultCaller = Caller{Tenant: DefaultTenant, Admin: true}

type callerKey struct{}

// WithCaller returns a context that carries c to the Manager's methods.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the caller ctx carries, and whether it carries one.
func CallerFrom(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}

// callerOf returns ctx's caller, DefaultCaller when there is none.
func CallerOf(ctx context.Context) Caller {
	if c, ok := CallerFrom(ctx); ok {
		return c
	}
	return DefaultCaller
}

// sees reports whether c may see sandboxes of tenant.
func (c Caller) Sees(tenant string) bool {
	return c.Admin || c.Tenant == tenant
}
