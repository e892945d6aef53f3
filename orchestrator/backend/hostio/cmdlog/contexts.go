package cmdlog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/iolog"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Contexts are several independent interpreters in one sandbox, each with
// its own globals, language and working directory, sharing the sandbox's
// files (ioproto/context.go, PROTOCOL.md "Contexts"). Commands of one
// context queue; different contexts run in parallel. A context operation
// is a context record appended to the command log, answered by the
// driver's done like a command; the driver's io/contexts.json (read
// bounded and sanitised by iolog) is what listings and the checks before
// an append see. The operations are written here once, over Log, which
// each backend gives: the Docker backend on the host, the Kubernetes
// backend through the io sidecar.

// ContextOpTimeout bounds the wait for the driver's answer to a context
// record: a restart starts a new interpreter (at most 30 s), a delete may
// wait for a bash command's 2 s grace period.
const ContextOpTimeout = 45 * time.Second

// Why an exec record's context refused it, as CheckExecContext says it.
// They carry no sandbox ID (the io sidecar does not know it);
// ExecContextError words them on the side that does.
var (
	// ErrUnknownContext: the record names a context the sandbox lacks.
	ErrUnknownContext = errors.New("no such context")
	// ErrContextLanguage: the context runs another language (and the
	// record is not bash, which every context also runs).
	ErrContextLanguage = errors.New("the context runs another language")
	// ErrContextsUnreadable: the driver's list of contexts cannot be read
	// (the sandbox altered it).
	ErrContextsUnreadable = errors.New("the list of contexts cannot be read")
)

// ReadContexts reads d's contexts (bounded, sanitised by iolog), the
// default one first. A list that cannot be read is ErrContextsUnreadable.
func ReadContexts(d *iolog.Dir) ([]core.ContextInfo, error) {
	list, err := d.ReadContexts()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrContextsUnreadable, err)
	}
	out := make([]core.ContextInfo, 0, len(list))
	for _, c := range list {
		out = append(out, core.ContextInfo{ID: c.ID, Language: c.Language, Cwd: c.Cwd, CreatedAt: c.CreatedAt})
	}
	return out, nil
}

// FindContext returns the context of list named id.
func FindContext(list []core.ContextInfo, id string) (core.ContextInfo, bool) {
	for _, c := range list {
		if c.ID == id {
			return c, true
		}
	}
	return core.ContextInfo{}, false
}

// ResolveExecLanguage gives exec record rec its context's language when
// the caller named none (defaultLanguage), from list (read before the
// append, outside the log's lock: CheckExecContext checks again under it).
func ResolveExecLanguage(list []core.ContextInfo, rec *ioproto.Record, defaultLanguage bool) {
	if rec.ContextID == "" || !defaultLanguage {
		return
	}
	if c, ok := FindContext(list, rec.ContextID); ok {
		rec.Language = c.Language
	}
}

// CheckExecContext is an exec record's check against its context, made
// with appends held (iolog.Dir.AppendContext's ready), so that a retried
// Submit of a command already in the log replays it even if its context
// is gone since: the context must exist (ErrUnknownContext) and run the
// record's language or the record be bash (ErrContextLanguage). A record
// without a context passes.
func CheckExecContext(d *iolog.Dir, rec ioproto.Record) error {
	if rec.Type != ioproto.KindExec || rec.ContextID == "" {
		return nil
	}
	list, err := ReadContexts(d)
	if err != nil {
		return err
	}
	c, ok := FindContext(list, rec.ContextID)
	switch {
	case !ok:
		return fmt.Errorf("context %s: %w", rec.ContextID, ErrUnknownContext)
	case rec.Language != c.Language && rec.Language != ioproto.LanguageBash:
		return fmt.Errorf("context %s runs %s, not %s: %w", c.ID, c.Language, rec.Language, ErrContextLanguage)
	}
	return nil
}

// ExecContextError words CheckExecContext's refusals (and a list that
// cannot be read) for sandbox sandboxID as both backends answer them;
// runs is the context's language as the caller read it (a context keeps
// its language for its life). Any other error is returned as it is.
func ExecContextError(sandboxID string, rec ioproto.Record, runs string, err error) error {
	switch {
	case errors.Is(err, ErrUnknownContext):
		return core.ContextNotFound(rec.ContextID, sandboxID)
	case errors.Is(err, ErrContextLanguage):
		return core.Preconditionf("context %s runs %s, not %s; run %s in another context", rec.ContextID, runs, rec.Language, rec.Language)
	case errors.Is(err, ErrContextsUnreadable):
		return ContextsError(sandboxID, err)
	}
	return err
}

// ContextsError is a list of contexts that cannot be read, for sandbox
// sandboxID.
func ContextsError(sandboxID string, err error) error {
	return core.Preconditionf("sandbox %s: its list of contexts cannot be read (altered from inside the sandbox?): %v", sandboxID, err)
}

// ImageHasLanguage refuses a language the sandbox's image lacks, from the
// languages its driver lists in its status (status reads it; its error
// means no check). Python and bash are in every image and need no read. A
// driver that lists none predates the field and has only those two.
func ImageHasLanguage(sandboxID, lang string, status func() (ioproto.DriverStatus, error)) error {
	if lang == ioproto.LanguagePython || lang == ioproto.LanguageBash {
		return nil
	}
	ds, err := status()
	if err != nil {
		return nil
	}
	have := ds.Languages
	if len(have) == 0 {
		have = []string{ioproto.LanguagePython, ioproto.LanguageBash}
	}
	if slices.Contains(have, lang) {
		return nil
	}
	safe := make([]string, 0, len(have))
	for _, l := range have {
		if ioproto.KnownLanguage(l) {
			safe = append(safe, l)
		}
	}
	return core.Preconditionf("language %q is not available in sandbox %s: its image has no %s interpreter (it supports %s)", lang, sandboxID, lang, strings.Join(safe, ", "))
}

// Log is one sandbox's command log as a backend reaches it, for the
// context operations. Its errors are the domain's, each backend's own
// wording of its log's failures.
type Log interface {
	// SandboxID names the sandbox in messages.
	SandboxID() string
	// Contexts lists the sandbox's contexts, the default one first.
	Contexts(ctx context.Context) ([]core.ContextInfo, error)
	// DriverStatus reads the driver's status (ImageHasLanguage).
	DriverStatus(ctx context.Context) (ioproto.DriverStatus, error)
	// Append appends a context record, with the backend's check that the
	// sandbox takes records.
	Append(ctx context.Context, rec ioproto.Record) error
	// Follow calls fn for each event of command commandID until its done.
	Follow(ctx context.Context, commandID string, fn func(core.Event) error) error
}

// CreateContextRequest checks CreateContext's arguments before any sandbox
// is looked at: the language canonical, cwd a directory under /workspace
// given relative to it (INVALID_ARGUMENT otherwise).
func CreateContextRequest(language, cwd string) (lang, clean string, err error) {
	clean, err = ioproto.CleanContextCwd(cwd)
	if err != nil {
		return "", "", core.Invalidf("%v", err)
	}
	return core.CanonicalLanguage(language), clean, nil
}

// CreateContext creates a context of language in cwd (CreateContextRequest's
// answers) and returns it as the driver lists it: the image must have the
// language, the sandbox fewer than ioproto.MaxContexts contexts besides the
// default one (RESOURCE_EXHAUSTED), and the driver's refusal is the
// error of its class (FAILED_PRECONDITION for a cwd that is not a
// directory).
func CreateContext(ctx context.Context, l Log, language, cwd string) (core.ContextInfo, error) {
	if err := ImageHasLanguage(l.SandboxID(), language, func() (ioproto.DriverStatus, error) { return l.DriverStatus(ctx) }); err != nil {
		return core.ContextInfo{}, err
	}
	list, err := l.Contexts(ctx)
	if err != nil {
		return core.ContextInfo{}, err
	}
	if n := len(list) - 1; n >= ioproto.MaxContexts {
		return core.ContextInfo{}, core.Exhaustedf("sandbox %s has %d contexts besides the default one; the limit is %d (delete one first)", l.SandboxID(), n, ioproto.MaxContexts)
	}
	id := "ctx-" + strings.ReplaceAll(uuid.NewString(), "-", "")[:16]
	rec := ioproto.Record{Type: ioproto.KindContext, Op: ioproto.ContextCreate, ContextID: id, Language: language, Cwd: cwd}
	if err := contextOp(ctx, l, rec); err != nil {
		return core.ContextInfo{}, err
	}
	list, err = l.Contexts(ctx)
	if err != nil {
		return core.ContextInfo{}, err
	}
	if c, ok := FindContext(list, id); ok {
		return c, nil
	}
	return core.ContextInfo{ID: id, Language: language, Cwd: cwd, CreatedAt: time.Now().UTC()}, nil
}

// CheckContextChange refuses, before any sandbox is looked at, what no
// sandbox allows: deleting the default context.
func CheckContextChange(contextID, op string) error {
	if op == ioproto.ContextDelete && contextID == core.DefaultContextID {
		return core.Preconditionf("the default context cannot be deleted; restart it for fresh globals")
	}
	return nil
}

// ChangeContext restarts or deletes (op) context contextID once it is
// found (NOT_FOUND otherwise), and returns once the driver answered.
func ChangeContext(ctx context.Context, l Log, contextID, op string) error {
	list, err := l.Contexts(ctx)
	if err != nil {
		return err
	}
	if _, ok := FindContext(list, contextID); !ok {
		return core.ContextNotFound(contextID, l.SandboxID())
	}
	return contextOp(ctx, l, ioproto.Record{Type: ioproto.KindContext, Op: op, ContextID: contextID})
}

// contextOp appends a context record under a new ID and waits, bounded,
// for the driver's done, which it turns into the error of its class.
func contextOp(ctx context.Context, l Log, rec ioproto.Record) error {
	rec.CommandID = "ctxop-" + uuid.NewString()
	if err := l.Append(ctx, rec); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, ContextOpTimeout)
	defer cancel()
	var done *core.Event
	var ename string
	err := l.Follow(wctx, rec.CommandID, func(e core.Event) error {
		switch e.Type {
		case ioproto.EventError:
			ename = e.EName
		case ioproto.EventDone:
			done = &e
		}
		return nil
	})
	id := l.SandboxID()
	switch {
	case err != nil && ctx.Err() != nil:
		return ctx.Err()
	case err != nil && wctx.Err() != nil:
		return core.Unavailablef("sandbox %s did not answer the context %s of %s within %s; it may still take effect (list the contexts to see)", id, rec.Op, rec.ContextID, ContextOpTimeout)
	case err != nil:
		return err
	case done == nil:
		return core.Unavailablef("sandbox %s ended the context %s of %s without an answer", id, rec.Op, rec.ContextID)
	case done.Status == ioproto.StatusOK:
		return nil
	}
	// The reason is the sandbox's text: valid UTF-8 and short before it
	// enters a status message.
	reason := core.Truncate(strings.ToValidUTF8(done.Reason, "\uFFFD"), 512)
	switch ename {
	case ioproto.ContextErrUnknown:
		return core.NotFoundf("sandbox %s: %s", id, reason)
	case ioproto.ContextErrExists:
		return core.AlreadyExistsf("sandbox %s: %s", id, reason)
	case ioproto.ContextErrTooMany:
		return core.Exhaustedf("sandbox %s: %s", id, reason)
	}
	return core.Preconditionf("sandbox %s: context %s of %s failed: %s", id, rec.Op, rec.ContextID, reason)
}
