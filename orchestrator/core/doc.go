// Package core is the domain of sandboxd: what a sandbox is and what a
// caller may do with it, in terms neither Docker, Kubernetes nor gRPC
// knows. Everything else in orchestrator/ is a door that calls it, a
// backend that implements it, or a helper of one of those.
//
// What it holds:
//
//   - The ports, one small interface per capability (port_*.go):
//     Sandboxes, Commands and Files, which every backend has (Backend), and
//     Network, Snapshots, Volumes, Templates and Monitoring, which a backend
//     may lack. Manager (manager.go) is all of them, as the doors
//     (orchestrator/door/...) call them; Complete makes one of a backend
//     (orchestrator/backend/docker, orchestrator/backend/kube), answering
//     the calls of what it lacks with Unsupported (unsupported.go), the one
//     place "not here" is said. Decorators wrap each capability on its own
//     (Parts): Validating here, audit.Audited in orchestrator/audit.
//   - The domain's types: sandboxes and their options (types.go), commands
//     and their events (commands.go), contexts, files and paths (path.go),
//     hibernation and snapshots, volumes, templates, network policies and
//     ports, per-sandbox metrics, tenants and callers (tenant.go).
//   - The error classes (errors.go, errclass.go): every error a Manager
//     returns wraps exactly one Class, each one of containerd's errdefs
//     classes; the doors map a class to their protocol's code with
//     errdefs' own mappings (errgrpc, beside this package so that core
//     imports no gRPC, wraps errdefs/pkg/errgrpc; the E2B door uses
//     errdefs/pkg/errhttp).
//   - The request rules and the Policy (validate.go, policy.go): each rule
//     said once, here; Validating (validating*.go) applies them and the
//     Policy's defaults and caps in front of whichever backend runs, so
//     both backends refuse a bad request with the same message.
//   - What the backends report to the rest of sandboxd, Metrics and
//     LifecycleSink (lifecycle webhooks), and Usage, the per-sandbox,
//     per-tenant and server-wide counts behind the Policy's caps.
//
// What it may import: the standard library, ioproto (the /io protocol's
// records and events, which its command types carry) and small leaf
// libraries (uuid, github.com/containerd/errdefs: the error classes, not
// its pkg/ mappings, which import gRPC). Never a backend's SDK, a door's protocol or another
// orchestrator package; they import core. Test fakes of the port live in
// coretest, not here.
package core
