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
	return Parts{
		Sandboxes: b, Commands: b, Files: b,
		Network:    part(backend, b, CapNetwork, func(err error) Network { return unsupportedNetwork{err} }),
		Snapshots:  part(backend, b, CapSnapshots, func(err error) Snapshots { return unsupportedSnapshots{err} }),
		Volumes:    part(backend, b, CapVolumes, func(err error) Volumes { return unsupportedVolumes{err} }),
		Templates:  part(backend, b, CapTemplates, func(err error) Templates { return unsupportedTemplates{err} }),
		Monitoring: part(backend, b, CapMonitoring, func(err error) Monitoring { return unsupportedMonitoring{err} }),
	}
}

// part is b's capability c, the port T, when b implements it and does not
// say it Lacks it; otherwise the stand-in answering every call with the
// Lacks error or Unsupported(backend, c).
func part[T any](backend string, b Backend, c Capability, standIn func(error) T) T {
	var lacks error
	if l, ok := b.(Lacker); ok {
		lacks = l.Lacks(c)
	}
	if p, ok := any(b).(T); ok && lacks == nil {
		return p
	}
	if lacks == nil {
		lacks = Unsupported(backend, string(c))
	}
	return standIn(lacks)
}
