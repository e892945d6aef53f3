// Package docker is the Docker backend of the domain (orchestrator/core):
// one long-lived Docker container per end user, its /io and /workspace
// volumes on the host, the per-user registry with idle expiry, crash-safe
// reattachment after a restart, hibernation, and command submission and
// output following over the /io protocol (ioproto), whose host half is
// orchestrator/backend/hostio/iolog.
//
// Its Manager implements core.Manager. It applies no request rules of its
// own: requests reach it through core's validating layer, and the rules
// and error messages it shares with the Kubernetes backend live in core.
// It knows nothing about gRPC: the doors (orchestrator/door/...) translate.
package docker
