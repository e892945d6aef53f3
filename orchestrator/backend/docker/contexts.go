package docker

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/google/uuid"

	"github.com/sandboxd/sandboxd/ioproto"
)

// Contexts are several independent interpreters in one sandbox, each with
// its own globals, language and working directory, sharing the sandbox's
// files (ioproto/context.go, PROTOCOL.md "Contexts"). Commands of one
// context queue; different contexts run in parallel. The host appends a
// context record to the command log and waits for the driver's done, like
// a command; the driver's io/contexts.json (read bounded and sanitised by
// iolog) is what ListContexts and the checks before an append see.

// contextOpTimeout bounds the wait for the driver's answer to a context
// record: a restart starts a new interpreter (at most 30 s), a delete may
// wait for a bash command's 2 s grace period.
const contextOpTimeout = 45 * time.Second

// contexts reads sb's contexts (bounded, sanitised).
func (m *Manager) contexts(sb *sandbox) ([]core.ContextInfo, error) {
	list, err := sb.io.ReadContexts()
	if err != nil {
		return nil, core.Preconditionf("sandbox %s: its list of contexts cannot be read (altered from inside the sandbox?): %v", sb.id, err)
	}
	out := make([]core.ContextInfo, 0, len(list))
	for _, c := range list {
		out = append(out, core.ContextInfo{ID: c.ID, Language: c.Language, Cwd: c.Cwd, CreatedAt: c.CreatedAt})
	}
	return out, nil
}

func findContext(list []core.ContextInfo, id string) (core.ContextInfo, bool) {
	for _, c := range list {
		if c.ID == id {
			return c, true
		}
	}
	return core.ContextInfo{}, false
}

// execContext resolves the context of an exec record before it is
// appended: a command without a language takes its context's, and a
// command in a context that does not exist is NOT_FOUND (checked in the
// returned ready function, with appends held, so a retried Submit of a
// command already in the log replays it even if its context is gone since).
func (m *Manager) execContext(sb *sandbox, rec *ioproto.Record, defaultLanguage bool) (func() error, error) {
	plain := func() error { return m.appendable(sb) }
	if rec.ContextID == "" {
		return plain, nil
	}
	list, err := m.contexts(sb)
	if err != nil {
		return nil, err
	}
	c, ok := findContext(list, rec.ContextID)
	if ok && defaultLanguage {
		rec.Language = c.Language
	}
	return func() error {
		if err := m.appendable(sb); err != nil {
			return err
		}
		list, err := m.contexts(sb)
		if err != nil {
			return err
		}
		c, ok := findContext(list, rec.ContextID)
		if !ok {
			return core.ContextNotFound(rec.ContextID, sb.id)
		}
		if rec.Language != c.Language && rec.Language != ioproto.LanguageBash {
			return core.Preconditionf("context %s runs %s, not %s; run %s in another context", c.ID, c.Language, rec.Language, rec.Language)
		}
		return nil
	}, nil
}

// CreateContext creates a context in a sandbox: a fresh interpreter of
// language (any ExecuteRequest takes) whose working directory is cwd, a
// directory under /workspace given relative to it (empty for /workspace).
// Errors: INVALID_ARGUMENT for a bad language or cwd path,
// FAILED_PRECONDITION when cwd is not an existing directory under
// /workspace, RESOURCE_EXHAUSTED past ioproto.MaxContexts.
func (m *Manager) CreateContext(ctx context.Context, sandboxID, language, cwd string) (core.ContextInfo, error) {
	language = core.CanonicalLanguage(language)
	clean, err := ioproto.CleanContextCwd(cwd)
	if err != nil {
		return core.ContextInfo{}, core.Invalidf("%v", err)
	}
	sb, err := m.use(ctx, sandboxID)
	if err != nil {
		return core.ContextInfo{}, err
	}
	if err := imageHasLanguage(sb, language); err != nil {
		return core.ContextInfo{}, err
	}
	list, err := m.contexts(sb)
	if err != nil {
		return core.ContextInfo{}, err
	}
	if n := len(list) - 1; n >= ioproto.MaxContexts {
		return core.ContextInfo{}, core.Exhaustedf("sandbox %s has %d contexts besides the default one; the limit is %d (delete one first)", sb.id, n, ioproto.MaxContexts)
	}
	id := "ctx-" + strings.ReplaceAll(uuid.NewString(), "-", "")[:16]
	rec := ioproto.Record{Type: ioproto.KindContext, Op: ioproto.ContextCreate, ContextID: id, Language: language, Cwd: clean}
	if err := m.contextOp(ctx, sb, rec); err != nil {
		return core.ContextInfo{}, err
	}
	list, err = m.contexts(sb)
	if err != nil {
		return core.ContextInfo{}, err
	}
	if c, ok := findContext(list, id); ok {
		return c, nil
	}
	return core.ContextInfo{ID: id, Language: language, Cwd: clean, CreatedAt: time.Now().UTC()}, nil
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
	if op == ioproto.ContextDelete && contextID == core.DefaultContextID {
		return core.Preconditionf("the default context cannot be deleted; restart it for fresh globals")
	}
	sb, err := m.use(ctx, sandboxID)
	if err != nil {
		return err
	}
	list, err := m.contexts(sb)
	if err != nil {
		return err
	}
	if _, ok := findContext(list, contextID); !ok {
		return core.ContextNotFound(contextID, sb.id)
	}
	return m.contextOp(ctx, sb, ioproto.Record{Type: ioproto.KindContext, Op: op, ContextID: contextID})
}

// contextOp appends a context record under a new ID and waits, bounded,
// for the driver's done, which it turns into the error of its class.
func (m *Manager) contextOp(ctx context.Context, sb *sandbox, rec ioproto.Record) error {
	rec.CommandID = "ctxop-" + uuid.NewString()
	if _, err := sb.io.AppendContext(ctx, rec, func() error { return m.appendable(sb) }); err != nil {
		return m.appendError(sb, err)
	}
	m.log.Info("context "+rec.Op+" requested", "sandbox_id", sb.id, "context_id", rec.ContextID, "command_id", rec.CommandID)
	wctx, cancel := context.WithTimeout(ctx, contextOpTimeout)
	defer cancel()
	var done *core.Event
	var ename string
	err := m.follow(wctx, sb, rec.CommandID, 0, func(e core.Event) error {
		switch e.Type {
		case ioproto.EventError:
			ename = e.EName
		case ioproto.EventDone:
			done = &e
		}
		return nil
	})
	switch {
	case err != nil && ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, context.DeadlineExceeded):
		return core.Unavailablef("sandbox %s did not answer the context %s of %s within %s; it may still take effect (list the contexts to see)", sb.id, rec.Op, rec.ContextID, contextOpTimeout)
	case err != nil:
		return err
	case done == nil:
		return core.Unavailablef("sandbox %s ended the context %s of %s without an answer", sb.id, rec.Op, rec.ContextID)
	case done.Status == ioproto.StatusOK:
		return nil
	}
	// The reason is the sandbox's text: valid UTF-8 and short before it
	// enters a status message.
	reason := core.Truncate(strings.ToValidUTF8(done.Reason, "\uFFFD"), 512)
	switch ename {
	case ioproto.ContextErrUnknown:
		return core.NotFoundf("sandbox %s: %s", sb.id, reason)
	case ioproto.ContextErrExists:
		return core.AlreadyExistsf("sandbox %s: %s", sb.id, reason)
	case ioproto.ContextErrTooMany:
		return core.Exhaustedf("sandbox %s: %s", sb.id, reason)
	}
	return core.Preconditionf("sandbox %s: context %s of %s failed: %s", sb.id, rec.Op, rec.ContextID, reason)
}
