package core

import "sync"

// Caps that protect what sandboxes share (the host's inotify instances,
// sandboxd's open files) are per tenant before they are global: a sandbox
// has its cap, a tenant its cap over all its sandboxes, and the server a
// cap over all tenants that exists only to protect the host, sized so that
// no single tenant reaches it (by default a tenant may take a quarter).
// Usage does the counting; a refusal names the scope whose cap it met,
// and an error constructor of errmsg.go turns that into the message.

// Scope is where a cap applies.
type Scope int

const (
	// ScopeSandbox: one sandbox.
	ScopeSandbox Scope = iota + 1
	// ScopeTenant: every sandbox of one tenant.
	ScopeTenant
	// ScopeServer: every sandbox of every tenant on this server.
	ScopeServer
)

func (s Scope) String() string {
	switch s {
	case ScopeSandbox:
		return "sandbox"
	case ScopeTenant:
		return "tenant"
	case ScopeServer:
		return "server"
	}
	return "unknown scope"
}

// Caps are one resource's caps at each scope; 0 is no cap at that scope.
type Caps struct {
	PerSandbox, PerTenant, Server int
}

// Of returns the cap at scope s.
func (c Caps) Of(s Scope) int {
	switch s {
	case ScopeSandbox:
		return c.PerSandbox
	case ScopeTenant:
		return c.PerTenant
	case ScopeServer:
		return c.Server
	}
	return 0
}

// Usage counts one resource in use per sandbox, per tenant and on the
// server. The zero value is ready; it is safe for concurrent use.
type Usage struct {
	mu        sync.Mutex
	bySandbox map[string]int
	byTenant  map[string]int
	server    int
}

// Take reserves n of the resource for sandboxID of tenant, unless that
// would pass one of caps; then it reserves nothing and returns the scope
// whose cap it would pass, checking the sandbox's first, then the
// tenant's, then the server's, so that the refusal names the narrowest
// cap: the one the caller can free itself.
func (u *Usage) Take(caps Caps, sandboxID, tenant string, n int) (refused Scope, ok bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case caps.PerSandbox > 0 && u.bySandbox[sandboxID]+n > caps.PerSandbox:
		return ScopeSandbox, false
	case caps.PerTenant > 0 && u.byTenant[tenant]+n > caps.PerTenant:
		return ScopeTenant, false
	case caps.Server > 0 && u.server+n > caps.Server:
		return ScopeServer, false
	}
	if u.bySandbox == nil {
		u.bySandbox, u.byTenant = map[string]int{}, map[string]int{}
	}
	u.bySandbox[sandboxID] += n
	u.byTenant[tenant] += n
	u.server += n
	return 0, true
}

// Release gives back n taken for sandboxID of tenant.
func (u *Usage) Release(sandboxID, tenant string, n int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.bySandbox[sandboxID] -= n; u.bySandbox[sandboxID] <= 0 {
		delete(u.bySandbox, sandboxID)
	}
	if u.byTenant[tenant] -= n; u.byTenant[tenant] <= 0 {
		delete(u.byTenant, tenant)
	}
	u.server -= n
}

// InUse returns what is in use by sandboxID, by tenant and on the server.
func (u *Usage) InUse(sandboxID, tenant string) (sandbox, ofTenant, server int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.bySandbox[sandboxID], u.byTenant[tenant], u.server
}
