package kube

import (
	"context"
	"errors"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/cmdlog"
	"github.com/sandboxd/sandboxd/orchestrator/core"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandboxd/sandboxd/ioproto"
)

// Submit queues a command in a sandbox and returns its ID, exactly as the
// Docker backend does: the command ID is the idempotency key, kept by the
// sandbox's io sidecar, the command log's only writer, so a retry through
// any replica never runs a command twice. A command naming a context is
// checked against it by the sidecar, next to the log (cmdlog's rules).
func (m *Manager) Submit(ctx context.Context, req core.ExecRequest) (string, error) {
	p, c, rec, runs, err := m.prepare(ctx, req)
	if err != nil {
		return "", err
	}
	appended, err := c.Append(ctx, rec)
	if err != nil {
		return "", m.submitError(req.SandboxID, rec, runs, err)
	}
	m.submitted(p, rec, appended)
	return rec.CommandID, nil
}

// Execute is Submit then Follow from the first event in one call to the
// sandbox's io sidecar (its Run): the command is appended and its events
// stream back in one round trip, where two calls cost two (the sidecar
// hop, docs/benchmarks-history.md). Its rules and errors are Submit's until the
// command is in the log, Follow's after.
func (m *Manager) Execute(ctx context.Context, req core.ExecRequest, submitted func(string), fn func(core.Event) error) error {
	p, c, rec, runs, err := m.prepare(ctx, req)
	if err != nil {
		return err
	}
	queued := false
	return m.follow(ctx, p, req.SandboxID, rec.CommandID, func(fctx context.Context, fn func(core.Event) error) error {
		err := c.Run(fctx, rec, func(appended bool) {
			queued = true
			m.submitted(p, rec, appended)
			submitted(rec.CommandID)
		}, fn)
		if err != nil && !queued {
			// A context's refusal is worded here; the rest as any
			// sidecar error (follow's ioError), as Submit does.
			return cmdlog.ExecContextError(req.SandboxID, rec, runs, err)
		}
		return err
	}, fn)
}

// prepare is what Submit and Execute do before the command is sent: the
// sandbox's ready Pod and sidecar, the record, its context's language
// resolved and checked against the image (runs is the context's language,
// for messages).
func (m *Manager) prepare(ctx context.Context, req core.ExecRequest) (*corev1.Pod, IOConn, ioproto.Record, string, error) {
	rec := core.ExecRecord(req)
	p, err := m.live(ctx, req.SandboxID)
	if err != nil {
		return nil, nil, rec, "", err
	}
	c, err := m.io(ctx, p)
	if err != nil {
		return nil, nil, rec, "", err
	}
	runs, err := m.execContext(ctx, req.SandboxID, c, &rec, req.Language == "")
	if err != nil {
		return nil, nil, rec, "", err
	}
	if err := cmdlog.ImageHasLanguage(req.SandboxID, rec.Language, func() (ioproto.DriverStatus, error) { return c.DriverStatus(ctx) }); err != nil {
		return nil, nil, rec, "", err
	}
	return p, c, rec, runs, nil
}

// submitError says why the sidecar refused to append command rec.
func (m *Manager) submitError(sandboxID string, rec ioproto.Record, runs string, err error) error {
	switch {
	case errors.Is(err, cmdlog.ErrUnknownContext), errors.Is(err, cmdlog.ErrContextLanguage), errors.Is(err, cmdlog.ErrContextsUnreadable):
		return cmdlog.ExecContextError(sandboxID, rec, runs, err)
	}
	return m.ioError(sandboxID, rec.CommandID, err)
}

// submitted records that command rec is in p's log.
func (m *Manager) submitted(p *corev1.Pod, rec ioproto.Record, appended bool) {
	m.touch(p.Labels[labelSandboxID], p)
	if appended {
		m.log.Debug("command submitted", "sandbox_id", p.Labels[labelSandboxID], "command_id", rec.CommandID, "language", rec.Language)
	}
}

// Interrupt asks the driver to stop a command (see the Docker backend's).
func (m *Manager) Interrupt(ctx context.Context, sandboxID, commandID string) error {
	_, c, err := m.commandSidecar(ctx, sandboxID, commandID)
	if err != nil {
		return err
	}
	if _, err := c.Append(ctx, ioproto.Record{Type: ioproto.KindInterrupt, CommandID: commandID}); err != nil {
		return m.ioError(sandboxID, commandID, err)
	}
	m.log.Info("command interrupt requested", "sandbox_id", sandboxID, "command_id", commandID)
	return nil
}

// Follow streams a command's events with seq above afterSeq until its done
// event, as the Docker backend's Follow does, through the sandbox's io
// sidecar. The sandbox's death ends it with ErrFailedPrecondition naming
// the reason; each second of it counts as a use of the sandbox.
func (m *Manager) Follow(ctx context.Context, sandboxID, commandID string, afterSeq int64, fn func(core.Event) error) error {
	p, c, err := m.commandSidecar(ctx, sandboxID, commandID)
	if err != nil {
		return err
	}
	m.touch(sandboxID, p)
	return m.follow(ctx, p, sandboxID, commandID, func(fctx context.Context, fn func(core.Event) error) error {
		return c.Follow(fctx, commandID, afterSeq, fn)
	}, fn)
}

// follow runs stream, a call to p's sidecar that delivers command
// commandID's events, while watching the sandbox: its death or deletion
// ends the call with that reason, and each second of it is a use. The
// command's end is published.
func (m *Manager) follow(ctx context.Context, p *corev1.Pod, sandboxID, commandID string,
	stream func(context.Context, func(core.Event) error) error, fn func(core.Event) error) error {
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		m.watchWhileFollowing(fctx, sandboxID, commandID, cancel)
	}()
	err := stream(fctx, func(e core.Event) error {
		if e.Type == ioproto.EventDone {
			m.publishCommandEnd(p, commandID, e)
		}
		return fn(e)
	})
	cancel(nil)
	<-watched
	if cause := context.Cause(fctx); err != nil && cause != nil && core.ClassOf(cause) != nil {
		return cause // the sandbox died or was deleted
	}
	if err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
		err = m.ioError(sandboxID, commandID, err)
		if core.ClassOf(err) == core.ErrUnavailable {
			// A sidecar that goes away mid-stream is most often its Pod's
			// end (evicted, OOM-killed, deleted), which the cache shows a
			// moment later: name the death rather than say "try again".
			if end := m.deathWithin(ctx, sandboxID, commandID, sidecarGoneWait); end != nil {
				return end
			}
		}
		return err
	}
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// SendStdin appends data for a command's standard input, as the Docker
// backend does: the sidecar appends it only to a command started with
// stdin or a pty and not finished (cmdlog.AppendInput), and the refusal
// comes back by reason and is worded here (cmdlog.InputError).
func (m *Manager) SendStdin(ctx context.Context, sandboxID, commandID string, data []byte) error {
	rec, err := cmdlog.StdinRecord(commandID, data)
	if err != nil {
		return err
	}
	return m.appendInput(ctx, sandboxID, commandID, rec)
}

// CloseStdin ends a command's standard input after the data sent before.
func (m *Manager) CloseStdin(ctx context.Context, sandboxID, commandID string) error {
	return m.appendInput(ctx, sandboxID, commandID, cmdlog.CloseRecord(commandID))
}

// ResizePty resizes a command's terminal.
func (m *Manager) ResizePty(ctx context.Context, sandboxID, commandID string, size core.PtySize) error {
	return m.appendInput(ctx, sandboxID, commandID, cmdlog.ResizeRecord(commandID, size))
}

// appendInput has the sandbox's sidecar append input record rec.
func (m *Manager) appendInput(ctx context.Context, sandboxID, commandID string, rec ioproto.Record) error {
	p, c, err := m.commandSidecar(ctx, sandboxID, commandID)
	if err != nil {
		return err
	}
	if _, err := c.Append(ctx, rec); err != nil {
		return m.ioError(sandboxID, commandID, err)
	}
	m.touch(sandboxID, p)
	return nil
}

// ListCommands lists a sandbox's commands, newest first, a page at a
// time, as the Docker backend does: the page is checked here by cmdlog's
// rules (before the sandbox is looked at, as there), and read by the
// sandbox's io sidecar with the same code next to the log.
func (m *Manager) ListCommands(ctx context.Context, sandboxID string, pageSize int, pageToken string) (core.CommandPage, error) {
	page, err := cmdlog.ParsePage(pageSize, pageToken)
	if err != nil {
		return core.CommandPage{}, err
	}
	p, err := m.live(ctx, sandboxID)
	if err != nil {
		return core.CommandPage{}, err
	}
	c, err := m.io(ctx, p)
	if err != nil {
		return core.CommandPage{}, err
	}
	list, err := c.ListCommands(ctx, page)
	if err != nil {
		return core.CommandPage{}, m.ioError(sandboxID, "", err)
	}
	m.touch(sandboxID, p)
	return list, nil
}

// commandSidecar returns the sandbox's ready Pod and its sidecar
// connection, for an operation on a command. The IDs are not checked here:
// core.Validating did in front of this backend, and the sidecar does again
// on what it receives (iosidecar's package doc).
func (m *Manager) commandSidecar(ctx context.Context, sandboxID, commandID string) (*corev1.Pod, IOConn, error) {
	p, err := m.live(ctx, sandboxID)
	if err != nil {
		return nil, nil, err
	}
	c, err := m.io(ctx, p)
	if err != nil {
		return nil, nil, err
	}
	return p, c, nil
}

// followEnd is what a Follow of command cmd ends with when sandbox id's
// Pod p (nil: none) says the sandbox is deleted or dead, or nil while it
// lives.
func (m *Manager) followEnd(p *corev1.Pod, id, cmd string) error {
	if p == nil {
		if m.claims() {
			if c, err := m.pvcs.PersistentVolumeClaims(m.cfg.Namespace).Get(podName(id)); err == nil && c.Annotations[annHibernated] != "" {
				return hibernatedWhileFollowed(id, cmd)
			}
		}
		return core.SandboxDeleted(id, cmd)
	}
	gone, dead, reason, _ := podState(p)
	switch {
	case gone && p.Annotations[annDeleting] == hibernatedMark:
		return hibernatedWhileFollowed(id, cmd)
	case gone:
		return core.SandboxDeleted(id, cmd)
	case dead:
		return core.Errorf(core.ErrFailedPrecondition, "sandbox %s died before the command finished: %s; acquire a new sandbox", id, reason)
	}
	return nil
}

// hibernatedWhileFollowed ends a Follow whose sandbox was hibernated: its
// output is kept, and following again wakes it.
func hibernatedWhileFollowed(id, cmd string) error {
	return core.Errorf(core.ErrUnavailable, "sandbox %s was hibernated while command %s was followed; follow again (the sandbox wakes, its output is kept)", id, cmd)
}

// sidecarGoneWait is how long a Follow whose io sidecar went away waits
// for the cache to say whether the sandbox died.
const sidecarGoneWait = 3 * time.Second

// deathWithin waits at most d for sandbox id to show as deleted or dead,
// and returns what its Follow should end with then (nil if it lives on).
func (m *Manager) deathWithin(ctx context.Context, id, cmd string, d time.Duration) error {
	var end error
	m.untilPod(ctx, id, d, func(string) (*corev1.Pod, bool) {
		p, err := m.pod(ctx, id)
		return p, err == nil
	}, func(p *corev1.Pod) bool {
		end = m.followEnd(p, id, cmd)
		return end != nil
	})
	return end
}

// watchWhileFollowing ends a Follow (through cancel) when its sandbox dies
// or is deleted, and records a use each second, until ctx ends.
func (m *Manager) watchWhileFollowing(ctx context.Context, id, cmd string, cancel context.CancelCauseFunc) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		ch := m.changed()
		// The cache may not have a Pod another replica just created: the
		// API server is asked then.
		p, err := m.pod(ctx, id)
		if err != nil {
			if ctx.Err() == nil {
				cancel(err)
			}
			return
		}
		if end := m.followEnd(p, id, cmd); end != nil {
			cancel(end)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-m.closed:
			cancel(errClosing)
			return
		case <-ch:
		case <-tick.C:
			m.touch(id, p)
		}
	}
}
