package core

import "time"

// LifecycleKind names a change in a sandbox's life that its tenant may
// want to hear about (sandboxd's webhooks send them; see
// orchestrator/webhooks). The names are part of the public contract: they
// appear in webhook bodies and in sandboxd's --webhooks file.
type LifecycleKind string

// The lifecycle events.
const (
	// LifecycleCreated: a new sandbox was made for a user (Acquire).
	LifecycleCreated LifecycleKind = "created"
	// LifecycleHibernated: the sandbox was hibernated, on request or when
	// idle; Reason says which.
	LifecycleHibernated LifecycleKind = "hibernated"
	// LifecycleWoken: a hibernated sandbox runs again; Reason says what
	// of its state was restored when not all.
	LifecycleWoken LifecycleKind = "woken"
	// LifecycleKilled: the sandbox was deleted on request.
	LifecycleKilled LifecycleKind = "killed"
	// LifecycleExpired: the sandbox was removed because its idle TTL, its
	// hibernation TTL or the maximum lifetime ran out; Reason says which.
	LifecycleExpired LifecycleKind = "expired"
	// LifecycleDied: the sandbox's container stopped or vanished; Reason
	// says why, as far as sandboxd knows.
	LifecycleDied LifecycleKind = "died"
	// LifecycleCommandFinished: sandboxd read a command's end (its done
	// event). Sent when sandboxd reads it: for every command a caller
	// follows to its end (Execute, RunCode, a follow of a submitted
	// command). Its event ID is derived from the sandbox and command, so
	// several readings of one end are one event to a receiver.
	LifecycleCommandFinished LifecycleKind = "command.finished"
)

// LifecycleKinds is every kind, in a stable order.
var LifecycleKinds = []LifecycleKind{
	LifecycleCreated, LifecycleHibernated, LifecycleWoken, LifecycleKilled,
	LifecycleExpired, LifecycleDied, LifecycleCommandFinished,
}

// LifecycleEvent is one change in a sandbox's life, as a backend reports
// it to its LifecycleSink.
type LifecycleEvent struct {
	Kind LifecycleKind
	// ID identifies the event to receivers; empty: the sink makes a new
	// one. Set only where one change may be reported more than once
	// (command.finished), so that receivers see one ID.
	ID        string
	Time      time.Time
	Tenant    string
	UserID    string
	SandboxID string
	// Metadata is the sandbox's metadata (Options.Metadata); not to be
	// modified.
	Metadata map[string]string
	// Reason says why, for the kinds that have one.
	Reason string
	// Command is command.finished's command.
	Command *CommandEnd
}

// CommandEndEventID is the event ID of a command's end: one per command,
// however many times the end is read.
func CommandEndEventID(sandboxID, commandID string) string {
	return "cmd_" + sandboxID + "_" + commandID
}

// CommandEnd is how a command ended, for LifecycleCommandFinished.
type CommandEnd struct {
	CommandID string
	// Status is the done event's ioproto status ("ok", "error",
	// "interrupted", ...); ExitCode the shell's exit code, nil for a
	// command of an interpreter.
	Status   string
	ExitCode *int
}

// LifecycleSink receives a backend's lifecycle events. Publish is called
// right after the change is committed (in meta.json, or the API server),
// from the operation that made it: it must return quickly and never wait on
// anything a receiver controls, and must be safe for concurrent use.
// Events of one sandbox are published in the order they happened.
type LifecycleSink interface {
	Publish(LifecycleEvent)
}

// NoLifecycle discards events: the default sink.
type NoLifecycle struct{}

// Publish discards e.
func (NoLifecycle) Publish(LifecycleEvent) {}

// LifecycleOrNoop is s, or a sink that discards.
func LifecycleOrNoop(s LifecycleSink) LifecycleSink {
	if s == nil {
		return NoLifecycle{}
	}
	return s
}

// WebhookStats is what the delivery of lifecycle events to one endpoint
// has done since sandboxd started (orchestrator/webhooks), for metrics.
type WebhookStats struct {
	Endpoint  string
	Queued    int    // waiting now
	Delivered uint64 // answered 2xx
	Failures  uint64 // attempts that failed (retried)
	// DroppedFull and DroppedExpired count events dropped because the
	// endpoint's queue was full (the oldest) and because they were not
	// delivered within the maximum age.
	DroppedFull, DroppedExpired uint64
	// LastError is the last failed attempt's error; empty after a success.
	LastError string
}
