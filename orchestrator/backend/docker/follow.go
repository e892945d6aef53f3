package docker

import (
	"context"
	"errors"
	"io/fs"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/iolog"
)

// Execute is Submit then Follow: the log is on this host, so the two
// calls cost nothing one would save.
func (m *Manager) Execute(ctx context.Context, req core.ExecRequest, submitted func(string), fn func(core.Event) error) error {
	return core.SubmitThenFollow(ctx, m, req, submitted, fn)
}

// Follow streams a command's events with Seq > afterSeq, in order, calling fn
// for each, and returns nil once it has delivered the done event (at once, if
// done's seq is not above afterSeq: there is nothing left to send; afterSeq
// 0, or below, streams from the first event). Events
// whose values the driver moved to artifact files come with those values
// back in Data (base64 for binary MIME types) and no Refs.
//
// A command that is queued has no events yet: Follow waits for them
// (iolog's Events.Follow). It wakes on inotify events for the sandbox's
// io/out directory, and re-checks every second in case notifications were
// lost. Follow returns
//   - ErrNotFound if the command is not in the sandbox's log, its output has
//     been pruned (noticed at the first re-check, after
//     iolog.PrunedCheckDelay), or the sandbox is deleted meanwhile;
//   - ErrFailedPrecondition if the sandbox dies before the command is done;
//   - fn's error, if fn fails;
//   - ctx.Err() when ctx ends.
//
// The start of a Follow, and each second of it, refresh the sandbox's idle
// TTL: a sandbox being watched is in use even while a long command prints
// nothing.
func (m *Manager) Follow(ctx context.Context, sandboxID, commandID string, afterSeq int64, fn func(core.Event) error) error {
	sb, err := m.use(ctx, sandboxID)
	if err != nil {
		return err
	}
	// A caller's command's end is a lifecycle event (command.finished);
	// the records sandboxd itself appends (hibernation's, contexts') are
	// followed with follow, unreported.
	return m.follow(ctx, sb, commandID, afterSeq, func(e core.Event) error {
		if e.Type == ioproto.EventDone {
			m.publishCommandEnd(sb, commandID, e)
		}
		return fn(e)
	})
}

// follow is Follow on a sandbox already looked up: iolog's follow loop,
// with what this backend knows of the sandbox (its death, its deletion,
// sandboxd's shutdown) and its errors said for the caller.
func (m *Manager) follow(ctx context.Context, sb *sandbox, commandID string, afterSeq int64, fn func(core.Event) error) error {
	evs, err := sb.io.EventsContext(ctx, commandID, afterSeq, m.log.With("sandbox_id", sb.id))
	switch {
	case errors.Is(err, iolog.ErrUnknownCommand):
		return core.CommandNotFound(commandID, sb.id)
	case errors.Is(err, iolog.ErrClosed):
		return core.SandboxDeleted(sb.id, commandID)
	case err != nil:
		return m.logError(sb, err)
	}
	defer evs.Close()
	err = evs.Follow(m.watch, iolog.FollowOptions{
		Recheck:   m.recheck,
		Stop:      m.closing,
		Gone:      sb.goneCh,
		Dead:      sb.deadCh,
		OnRecheck: func() { m.reg.touch(sb) },
	}, fn)
	switch {
	case errors.Is(err, iolog.ErrTampered):
		// A file the sandbox replaced is its fault, and the output cannot
		// be read.
		return core.Preconditionf("the events file of command %s in sandbox %s was altered from inside the sandbox; its output cannot be read: %v", commandID, sb.id, err)
	case errors.Is(err, iolog.ErrClosed):
		return core.SandboxDeleted(sb.id, commandID)
	case errors.Is(err, iolog.ErrDied):
		return core.Preconditionf("sandbox %s died before command %s finished: %s; acquire a new sandbox", sb.id, commandID, sb.reasonOrUnknown())
	case errors.Is(err, iolog.ErrPruned):
		return core.OutputPruned(commandID, sb.id)
	case errors.Is(err, iolog.ErrStopped):
		return core.ShuttingDown()
	}
	return err // nil, fn's error, or ctx's
}

// logError classifies a failure to read or append the command log: a log
// that is missing or was replaced makes the sandbox unusable.
func (m *Manager) logError(sb *sandbox, err error) error {
	switch {
	case errors.Is(err, iolog.ErrTampered) || errors.Is(err, fs.ErrNotExist):
		// Logged once per sandbox at most in practice: a refused log stays
		// refused (iolog caches the verdict), and callers stop using it.
		m.log.Error("command log tampered with", "sandbox_id", sb.id, "error", err)
		return core.Tampered(sb.id, "its command log", err)
	case errors.Is(err, iolog.ErrClosed):
		return core.SandboxNotFound(sb.id)
	}
	return err
}

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
