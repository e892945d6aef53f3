package core

import (
	"context"
)

// Commands is running code in a sandbox, exactly once per command ID, and
// its contexts (interpreters whose globals last across commands): every
// backend has it. A command's events can be followed again from any
// point, by any caller of its tenant, for as long as the sandbox lives.
type Commands interface {
	// Submit queues a command, exactly once per command ID, and returns
	// its ID (generated when req has none).
	Submit(ctx context.Context, req ExecRequest) (commandID string, err error)

	// Follow calls fn with the command's events after afterSeq, in order,
	// until its done event (or fn's error, or ctx).
	Follow(ctx context.Context, sandboxID, commandID string, afterSeq int64, fn func(Event) error) error

	// Execute is Submit, then Follow from the command's first event, as
	// one operation: submitted is called with the command's ID once it is
	// in the sandbox's log, before any event; then fn with each event.
	// An error before submitted is Submit's, after it Follow's. A backend
	// that reaches the log over a network does both in one round trip
	// (the Kubernetes backend's io sidecar); SubmitThenFollow is the two
	// calls, for the others.
	Execute(ctx context.Context, req ExecRequest, submitted func(commandID string), fn func(Event) error) error

	Interrupt(ctx context.Context, sandboxID, commandID string) error
	SendStdin(ctx context.Context, sandboxID, commandID string, data []byte) error
	CloseStdin(ctx context.Context, sandboxID, commandID string) error
	ResizePty(ctx context.Context, sandboxID, commandID string, size PtySize) error
	ListCommands(ctx context.Context, sandboxID string, pageSize int, pageToken string) (CommandPage, error)
	CreateContext(ctx context.Context, sandboxID, language, cwd string) (ContextInfo, error)
	ListContexts(ctx context.Context, sandboxID string) ([]ContextInfo, error)
	RestartContext(ctx context.Context, sandboxID, contextID string) error
	DeleteContext(ctx context.Context, sandboxID, contextID string) error
}
