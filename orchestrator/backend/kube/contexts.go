package kube

import (
	"context"
	"errors"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/cmdlog"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Contexts, as the Docker backend has them (cmdlog/contexts.go, where the
// operations are written once for both backends): the context records go
// through the sandbox's io sidecar, the log's only writer, which also
// lists the driver's contexts and checks a command's context next to the
// log. Whether the image has a language is checked here, from the
// driver's status as the sidecar reads it, where the Docker backend checks
// it on the host: the same function on the same file.

// sidecarLog is a sandbox's command log through its io sidecar, as
// cmdlog's context operations reach it.
type sidecarLog struct {
	m  *Manager
	id string
	c  IOConn
}

func (l sidecarLog) SandboxID() string { return l.id }

func (l sidecarLog) Contexts(ctx context.Context) ([]core.ContextInfo, error) {
	return l.m.contexts(ctx, l.id, l.c)
}

func (l sidecarLog) DriverStatus(ctx context.Context) (ioproto.DriverStatus, error) {
	return l.c.DriverStatus(ctx)
}

func (l sidecarLog) Append(ctx context.Context, rec ioproto.Record) error {
	if _, err := l.c.Append(ctx, rec); err != nil {
		return l.m.ioError(l.id, rec.CommandID, err)
	}
	l.m.log.Info("context "+rec.Op+" requested", "sandbox_id", l.id, "context_id", rec.ContextID, "command_id", rec.CommandID)
	return nil
}

func (l sidecarLog) Follow(ctx context.Context, commandID string, fn func(core.Event) error) error {
	err := l.c.Follow(ctx, commandID, 0, fn)
	if err != nil && ctx.Err() == nil {
		return l.m.ioError(l.id, commandID, err)
	}
	return err
}

// contexts lists sandbox id's contexts through its sidecar c.
func (m *Manager) contexts(ctx context.Context, id string, c IOConn) ([]core.ContextInfo, error) {
	list, err := c.ListContexts(ctx)
	switch {
	case errors.Is(err, cmdlog.ErrContextsUnreadable):
		return nil, cmdlog.ContextsError(id, err)
	case err != nil:
		return nil, m.ioError(id, "", err)
	}
	return list, nil
}

// sidecarLog returns sandbox id's command log through its live Pod's
// sidecar, and records a use.
func (m *Manager) sidecarLog(ctx context.Context, id string) (sidecarLog, error) {
	p, err := m.live(ctx, id)
	if err != nil {
		return sidecarLog{}, err
	}
	c, err := m.io(ctx, p)
	if err != nil {
		return sidecarLog{}, err
	}
	m.touch(id, p)
	return sidecarLog{m: m, id: id, c: c}, nil
}

// CreateContext creates a context in a sandbox, as the Docker backend's
// CreateContext does.
func (m *Manager) CreateContext(ctx context.Context, sandboxID, language, cwd string) (core.ContextInfo, error) {
	language, clean, err := cmdlog.CreateContextRequest(language, cwd)
	if err != nil {
		return core.ContextInfo{}, err
	}
	l, err := m.sidecarLog(ctx, sandboxID)
	if err != nil {
		return core.ContextInfo{}, err
	}
	return cmdlog.CreateContext(ctx, l, language, clean)
}

// ListContexts lists a sandbox's contexts, the default one first, then in
// order of creation.
func (m *Manager) ListContexts(ctx context.Context, sandboxID string) ([]core.ContextInfo, error) {
	l, err := m.sidecarLog(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	return l.Contexts(ctx)
}

// RestartContext gives a context a fresh interpreter, as the Docker
// backend's RestartContext does.
func (m *Manager) RestartContext(ctx context.Context, sandboxID, contextID string) error {
	return m.contextChange(ctx, sandboxID, contextID, ioproto.ContextRestart)
}

// DeleteContext ends a context, as the Docker backend's DeleteContext
// does.
func (m *Manager) DeleteContext(ctx context.Context, sandboxID, contextID string) error {
	return m.contextChange(ctx, sandboxID, contextID, ioproto.ContextDelete)
}

func (m *Manager) contextChange(ctx context.Context, sandboxID, contextID, op string) error {
	if err := cmdlog.CheckContextChange(contextID, op); err != nil {
		return err
	}
	l, err := m.sidecarLog(ctx, sandboxID)
	if err != nil {
		return err
	}
	return cmdlog.ChangeContext(ctx, l, contextID, op)
}

// execContext resolves exec record rec's context before the sidecar
// appends it, as the Docker backend's execContext does: a command without
// a language takes its context's. It returns the context's language, for
// the wording of the sidecar's refusal (cmdlog.ExecContextError).
func (m *Manager) execContext(ctx context.Context, id string, c IOConn, rec *ioproto.Record, defaultLanguage bool) (string, error) {
	if rec.ContextID == "" {
		return "", nil
	}
	list, err := m.contexts(ctx, id, c)
	if err != nil {
		return "", err
	}
	cmdlog.ResolveExecLanguage(list, rec, defaultLanguage)
	info, _ := cmdlog.FindContext(list, rec.ContextID)
	return info.Language, nil
}
