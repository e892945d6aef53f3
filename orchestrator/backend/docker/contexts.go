package docker

import (
	"context"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/cmdlog"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Contexts are several interpreters in one sandbox (cmdlog/contexts.go,
// where the operations are written once for both backends). Here the
// command log is on the host: hostLog gives it to cmdlog.

// hostLog is sb's command log on the host, as cmdlog's context
// operations reach it.
type hostLog struct {
	m  *Manager
	sb *sandbox
}

func (h hostLog) SandboxID() string { return h.sb.id }

func (h hostLog) Contexts(context.Context) ([]core.ContextInfo, error) { return h.m.contexts(h.sb) }

func (h hostLog) DriverStatus(context.Context) (ioproto.DriverStatus, error) {
	ds, _, err := h.sb.io.ReadDriverStatus()
	return ds, err
}

func (h hostLog) Append(ctx context.Context, rec ioproto.Record) error {
	if _, err := h.sb.io.AppendContext(ctx, rec, func() error { return h.m.appendable(h.sb) }); err != nil {
		return h.m.appendError(h.sb, err)
	}
	h.m.log.Info("context "+rec.Op+" requested", "sandbox_id", h.sb.id, "context_id", rec.ContextID, "command_id", rec.CommandID)
	return nil
}

func (h hostLog) Follow(ctx context.Context, commandID string, fn func(core.Event) error) error {
	return h.m.follow(ctx, h.sb, commandID, 0, fn)
}

// contexts reads sb's contexts (bounded, sanitised).
func (m *Manager) contexts(sb *sandbox) ([]core.ContextInfo, error) {
	list, err := cmdlog.ReadContexts(sb.io)
	if err != nil {
		return nil, cmdlog.ContextsError(sb.id, err)
	}
	return list, nil
}

// execContext resolves the context of an exec record before it is
// appended: a command without a language takes its context's, and the
// returned ready function checks the context with appends held
// (cmdlog.CheckExecContext).
func (m *Manager) execContext(sb *sandbox, rec *ioproto.Record, defaultLanguage bool) (func() error, error) {
	plain := func() error { return m.appendable(sb) }
	if rec.ContextID == "" {
		return plain, nil
	}
	list, err := m.contexts(sb)
	if err != nil {
		return nil, err
	}
	cmdlog.ResolveExecLanguage(list, rec, defaultLanguage)
	return func() error {
		if err := m.appendable(sb); err != nil {
			return err
		}
		err := cmdlog.CheckExecContext(sb.io, *rec)
		if err == nil {
			return nil
		}
		c, _ := cmdlog.FindContext(list, rec.ContextID)
		return cmdlog.ExecContextError(sb.id, *rec, c.Language, err)
	}, nil
}

// CreateContext creates a context in a sandbox: a fresh interpreter of
// language (any ExecuteRequest takes) whose working directory is cwd, a
// directory under /workspace given relative to it (empty for /workspace).
// Errors: INVALID_ARGUMENT for a bad language or cwd path,
// FAILED_PRECONDITION when cwd is not an existing directory under
// /workspace, RESOURCE_EXHAUSTED past ioproto.MaxContexts.
func (m *Manager) CreateContext(ctx context.Context, sandboxID, language, cwd string) (core.ContextInfo, error) {
	language, clean, err := cmdlog.CreateContextRequest(language, cwd)
	if err != nil {
		return core.ContextInfo{}, err
	}
	sb, err := m.use(ctx, sandboxID)
	if err != nil {
		return core.ContextInfo{}, err
	}
	return cmdlog.CreateContext(ctx, hostLog{m, sb}, language, clean)
}

// ListContexts lists a sandbox's contexts, the default one first, then in
// order of creation.
func (m *Manager) ListContexts(ctx context.Context, sandboxID string) ([]core.ContextInfo, error) {
	sb, err := m.use(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	return m.contexts(sb)
}

// RestartContext gives a context a fresh interpreter (same ID, language
// and directory): its globals are gone, a command running in it ends
// killed (Python) or interrupted (bash), and commands queued in it run in
// the new interpreter. It returns once the new interpreter is ready.
// NOT_FOUND for an unknown context.
func (m *Manager) RestartContext(ctx context.Context, sandboxID, contextID string) error {
	return m.contextChange(ctx, sandboxID, contextID, ioproto.ContextRestart)
}

// DeleteContext ends a context: its interpreter is stopped, a running
// command ends, queued ones are answered as interrupted, and later
// commands naming it are NOT_FOUND. The default context cannot be deleted
// (FAILED_PRECONDITION); an unknown one is NOT_FOUND.
func (m *Manager) DeleteContext(ctx context.Context, sandboxID, contextID string) error {
	return m.contextChange(ctx, sandboxID, contextID, ioproto.ContextDelete)
}

func (m *Manager) contextChange(ctx context.Context, sandboxID, contextID, op string) error {
	if err := cmdlog.CheckContextChange(contextID, op); err != nil {
		return err
	}
	sb, err := m.use(ctx, sandboxID)
	if err != nil {
		return err
	}
	return cmdlog.ChangeContext(ctx, hostLog{m, sb}, contextID, op)
}
