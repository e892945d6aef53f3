package docker

import (
	"context"
	"errors"
	"io/fs"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/orchestrator/iolog"
)

// prunedCheckDelay is how long a follower whose command has no events file
// waits before it reads the driver's state to learn whether the output was
// pruned. A command that runs soon creates its file well within it.
const prunedCheckDelay = 50 * time.Millisecond

// Follow streams a command's events with Seq > afterSeq, in order, calling fn
// for each, and returns nil once it has delivered the done event (at once, if
// done's seq is not above afterSeq: there is nothing left to send; afterSeq
// 0, or below, streams from the first event). Events
// whose values the driver moved to artifact files come with those values
// back in Data (base64 for binary MIME types) and no Refs.
//
// A command that is queued has no events yet: Follow waits for them. It
// wakes on inotify events for the sandbox's io/out directory, and re-checks
// every second in case notifications were lost. Follow returns
//   - ErrNotFound if the command is not in the sandbox's log, its output has
//     been pruned (noticed at the first re-check, after prunedCheckDelay),
//     or the sandbox is deleted meanwhile;
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
	return m.follow(ctx, sb, commandID, afterSeq, fn)
}

// follow is Follow on a sandbox already looked up.
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
	// Subscribe before the first read: a write between the read and the
	// wait then still wakes us.
	sub := m.watch.Subscribe(sb.io, commandID)
	defer sub.Cancel()

	// The first re-check comes after prunedCheckDelay, the others every
	// m.recheck.
	tick := time.NewTicker(min(prunedCheckDelay, m.recheck))
	defer tick.Stop()
	recheck := false
	for {
		// Look at the sandbox's state before reading: if it was already dead,
		// everything its driver wrote is in the file, and a read that finds no
		// done means there will never be one.
		dead := isClosed(sb.deadCh)
		done, err := evs.Drain(fn)
		if err != nil || done {
			return eventsError(sb, commandID, err)
		}
		if dead {
			return core.Preconditionf("sandbox %s died before command %s finished: %s; acquire a new sandbox", sb.id, commandID, sb.reasonOrUnknown())
		}
		// A missing events file means that the command has not started yet
		// or that its output was pruned. Telling the two apart costs a read
		// of the driver's state file, so only the re-checks do it, not every
		// pass: a command about to start (as after nearly every Submit) never
		// pays for it, and pruned output is reported after prunedCheckDelay.
		if recheck && evs.Pruned() {
			return core.OutputPruned(commandID, sb.id)
		}
		recheck = false
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.closing:
			return core.ShuttingDown()
		case <-sb.goneCh:
			return core.SandboxDeleted(sb.id, commandID)
		case <-sub.C:
		case <-sb.deadCh:
		case <-tick.C:
			tick.Reset(m.recheck)
			recheck = true
			m.reg.touch(sb)
		}
	}
}

// eventsError classifies a failure to read a command's events: a file the
// sandbox replaced is its fault, and the output cannot be read. fn's own
// errors pass through.
func eventsError(sb *sandbox, cmd string, err error) error {
	switch {
	case errors.Is(err, iolog.ErrTampered):
		return core.Preconditionf("the events file of command %s in sandbox %s was altered from inside the sandbox; its output cannot be read: %v", cmd, sb.id, err)
	case errors.Is(err, iolog.ErrClosed):
		return core.SandboxDeleted(sb.id, cmd)
	}
	return err
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
