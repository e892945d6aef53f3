package core

// The ports between the doors and the backends, one per capability
// (port_*.go): what a caller can do to sandboxes, in the domain's own
// types. The Docker backend (orchestrator/backend/docker) and the
// Kubernetes backend (orchestrator/backend/kube) implement them; the gRPC
// door (orchestrator/door/grpcapi), the E2B door (orchestrator/door/e2bapi)
// and the ports front (orchestrator/door/ports) call them. sandboxd puts
// Validating in front of the backend, so every method's arguments have
// passed the domain's request rules (validate.go) and the Policy before a
// backend sees them.
//
// The caller travels in ctx (WithCaller): every method acts within what
// that caller may see, and another tenant's sandbox answers exactly as one
// that does not exist. Every error wraps exactly one Class (or is the
// caller's own context error).

// Backend is what every backend implements: sandboxes, the commands run in
// them and their files. The other capabilities are optional: a backend
// has those it implements (and does not say it Lacks).
type Backend interface {
	Sandboxes
	Commands
	Files
}

// Manager is every capability, as the doors call them. A backend becomes
// one through Complete, which answers each call of a capability the
// backend lacks with Unsupported: the one place "not here" is said, so
// every door (gRPC, E2B, MCP through gRPC) says it with the same class and
// words.
type Manager interface {
	Backend
	Network
	Snapshots
	Volumes
	Templates
	Monitoring
}

// Parts is a Manager taken apart by capability; a Parts with every field
// set is itself a Manager (its methods are its fields'). Decorators
// (Validating, audit.Audited) build one from a wrapper per capability, so
// each wraps only the methods of its capability and a new method is added
// in one place.
type Parts struct {
	Sandboxes
	Commands
	Files
	Network
	Snapshots
	Volumes
	Templates
	Monitoring
}

// PartsOf takes m apart by capability.
func PartsOf(m Manager) Parts {
	if p, ok := m.(Parts); ok {
		return p
	}
	return Parts{Sandboxes: m, Commands: m, Files: m, Network: m, Snapshots: m, Volumes: m, Templates: m, Monitoring: m}
}

// Capability names an optional capability, as Unsupported's message
// names the feature a backend lacks.
type Capability string

// The optional capabilities.
const (
	CapNetwork    Capability = "networked sandboxes and their ports"
	CapSnapshots  Capability = "snapshots and forks"
	CapVolumes    Capability = "volumes"
	CapTemplates  Capability = "templates"
	CapMonitoring Capability = "per-sandbox metrics"
)

// Capabilities lists the optional capabilities, in the order of Manager.
func Capabilities() []Capability {
	return []Capability{CapNetwork, CapSnapshots, CapVolumes, CapTemplates, CapMonitoring}
}

// Lacker is implemented by a backend whose capabilities depend on its
// configuration (the Kubernetes backend has volumes only with a storage
// class for their claims): Lacks returns the error every call of c
// answers, Unsupported naming what is missing, or nil when the backend
// has c.
type Lacker interface {
	Lacks(c Capability) error
}

// Complete returns b as a Manager: each optional capability is b's when b
// implements it and does not say it Lacks it, otherwise every call of it
// answers the Lacks error or Unsupported(backend, the capability).
func Complete(backend string, b Backend) Manager {
	lacks := func(c Capability) error {
		if l, ok := b.(Lacker); ok {
			return l.Lacks(c)
		}
		return nil
	}
	missing := func(c Capability) error {
		if err := lacks(c); err != nil {
			return err
		}
		return Unsupported(backend, string(c))
	}
	p := Parts{Sandboxes: b, Commands: b, Files: b}
	if n, ok := b.(Network); ok && lacks(CapNetwork) == nil {
		p.Network = n
	} else {
		p.Network = unsupportedNetwork{missing(CapNetwork)}
	}
	if s, ok := b.(Snapshots); ok && lacks(CapSnapshots) == nil {
		p.Snapshots = s
	} else {
		p.Snapshots = unsupportedSnapshots{missing(CapSnapshots)}
	}
	if v, ok := b.(Volumes); ok && lacks(CapVolumes) == nil {
		p.Volumes = v
	} else {
		p.Volumes = unsupportedVolumes{missing(CapVolumes)}
	}
	if t, ok := b.(Templates); ok && lacks(CapTemplates) == nil {
		p.Templates = t
	} else {
		p.Templates = unsupportedTemplates{missing(CapTemplates)}
	}
	if m, ok := b.(Monitoring); ok && lacks(CapMonitoring) == nil {
		p.Monitoring = m
	} else {
		p.Monitoring = unsupportedMonitoring{missing(CapMonitoring)}
	}
	return p
}
