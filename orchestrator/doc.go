// Package orchestrator owns sandboxes: one long-lived Docker container per end
// user, its /io and /workspace directories on the host, the per-user registry
// with idle expiry, crash-safe reattachment after a restart, and command
// submission and output following over the /io protocol (ioproto), whose
// file handling is in orchestrator/iolog.
//
// The package knows nothing about gRPC: orchestrator/grpcapi translates.
package orchestrator
