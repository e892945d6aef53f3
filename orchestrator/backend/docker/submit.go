package docker

import (
	"context"
	"errors"

	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/cmdlog"
	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/iolog"
)

// Submit queues a command in a sandbox and returns its ID. The command runs
// after those submitted before it; its output is read with Follow.
//
// The command ID is the caller's idempotency key (generated when empty): if
// the same command (language and code) with that ID is already in
// the sandbox's log, Submit returns the ID and appends nothing, so a retried
// Submit never runs a command twice. The ID re-used for a different command
// is ErrAlreadyExists: answering with the other command's output would be
// wrong. This holds across sandboxd restarts, because the log itself is the
// record.
//
// Language is "python" (the default), "bash", "javascript", "typescript",
// "r" or "java" (aliases "js", "ts", "R"); a language the sandbox's image lacks is
// ErrFailedPrecondition naming it. Env applies to this command only. Code is at most
// Config.MaxCodeBytes of UTF-8; Timeout 0 means the server's default and may not
// exceed its maximum. A dead sandbox refuses new commands with
// ErrFailedPrecondition.
func (m *Manager) Submit(ctx context.Context, req core.ExecRequest) (string, error) {
	rec := core.ExecRecord(req)
	var sb *sandbox
	var appended bool
	var err error
	// A hibernation that begins between the lookup and the append refuses
	// the append (errAsleep): the command then waits for the wake.
	for attempt := 0; ; attempt++ {
		sb, err = m.use(ctx, req.SandboxID)
		if err != nil {
			return "", err
		}
		var ready func() error
		ready, err = m.execContext(sb, &rec, req.Language == "")
		if err != nil {
			return "", err
		}
		if err := imageHasLanguage(sb, rec.Language); err != nil {
			return "", err
		}
		appended, err = sb.io.AppendContext(ctx, rec, ready)
		if !errors.Is(err, errAsleep) || attempt >= 3 {
			break
		}
	}
	if errors.Is(err, iolog.ErrConflict) {
		return "", core.CommandIDReused(rec.CommandID, sb.id)
	}
	if err != nil {
		return "", m.appendError(sb, err)
	}
	if appended {
		m.log.Debug("command submitted", "sandbox_id", sb.id, "command_id", rec.CommandID,
			"language", rec.Language, "code_bytes", len(rec.Code), "timeout_ms", rec.TimeoutMS)
	}
	return rec.CommandID, nil
}

// Interrupt asks the driver to stop a command: a running one gets SIGINT
// (SIGKILL 2 seconds later if it persists), a queued one never starts, and a
// finished one is unaffected. The command's done event tells what happened.
// An unknown command is ErrNotFound.
func (m *Manager) Interrupt(ctx context.Context, sandboxID, commandID string) error {
	sb, err := m.use(ctx, sandboxID)
	if err != nil {
		return err
	}
	_, err = sb.io.AppendContext(ctx, ioproto.Record{Type: ioproto.KindInterrupt, CommandID: commandID}, func() error { return m.appendable(sb) })
	if errors.Is(err, iolog.ErrUnknownCommand) {
		return core.CommandNotFound(commandID, sb.id)
	}
	if err != nil {
		return m.appendError(sb, err)
	}
	m.log.Info("command interrupt requested", "sandbox_id", sb.id, "command_id", commandID)
	return nil
}

// errAsleep refuses an append to a sandbox that hibernates or is being
// woken; the caller wakes it and tries again.
var errAsleep = core.Unavailablef("the sandbox is hibernating; try again")

// appendable checks, with appends held, that sb may get new records.
func (m *Manager) appendable(sb *sandbox) error {
	sb.mu.Lock()
	removing := sb.removing || sb.gone
	sb.mu.Unlock()
	if removing {
		return core.NotFoundf("sandbox %s was deleted", sb.id)
	}
	if sb.asleep() {
		return errAsleep
	}
	if st, _ := sb.status(); st == core.StateDead {
		return sb.deadError()
	}
	return nil
}

// appendError classifies a failed append: a record the protocol refuses is
// the caller's, anything else is the log's (logError).
func (m *Manager) appendError(sb *sandbox, err error) error {
	switch {
	case core.IsClassified(err):
		return err // from appendable, or the caller's context
	case errors.Is(err, ioproto.ErrMalformed):
		return core.Invalidf("%v", err)
	case errors.Is(err, iolog.ErrLogFull):
		return core.LogFull(sb.id, err)
	}
	return m.logError(sb, err)
}

// imageHasLanguage refuses a language the sandbox's image lacks
// (cmdlog.ImageHasLanguage), from /io/driver.json read on the host.
func imageHasLanguage(sb *sandbox, lang string) error {
	return cmdlog.ImageHasLanguage(sb.id, lang, func() (ioproto.DriverStatus, error) {
		ds, _, err := sb.io.ReadDriverStatus()
		return ds, err
	})
}
