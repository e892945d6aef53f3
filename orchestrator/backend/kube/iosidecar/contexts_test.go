package iosidecar

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/cmdlog"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	sandboxiov1 "github.com/sandboxd/sandboxd/proto/sandboxio/v1"
)

// writeContexts writes the driver's io/contexts.json as the sandbox could.
func (sc *sidecar) writeContexts(t *testing.T, b []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(sc.io, ioproto.ContextsFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func contextsJSON(t *testing.T, list ...ioproto.ContextInfo) []byte {
	t.Helper()
	b, err := json.Marshal(ioproto.Contexts{Version: 1, Contexts: list})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ListContexts and a command's context through a real sidecar: a new
// sandbox has the default context only; the driver's list comes back
// sanitised (an entry with a bad ID dropped, as iolog drops it under
// Docker); a context record is appended; a command is appended only in a
// context that exists and runs its language or bash (the refusals cross
// by reason: UNKNOWN_CONTEXT, CONTEXT_LANGUAGE), while a retry of a
// command already in the log is answered as appended before even after
// its context is gone; a list the sandbox broke is CONTEXTS_UNREADABLE on
// both calls.
func TestListContexts(t *testing.T) {
	sc := startSidecar(t)
	ctx := ctxT(t)
	list, err := sc.c.ListContexts(ctx)
	if err != nil || len(list) != 1 || list[0].ID != core.DefaultContextID || list[0].Language != ioproto.LanguagePython || list[0].Cwd != "." {
		t.Fatalf("ListContexts of a new sandbox = %+v, %v; want the default python context in .", list, err)
	}
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	sc.writeContexts(t, contextsJSON(t,
		ioproto.ContextInfo{ID: ioproto.DefaultContext, Language: ioproto.LanguagePython, Cwd: ".", CreatedAt: created},
		ioproto.ContextInfo{ID: "ctx-sh", Language: ioproto.LanguageBash, Cwd: "proj", CreatedAt: created},
		ioproto.ContextInfo{ID: "../bad", Language: ioproto.LanguageBash, Cwd: "."},
		ioproto.ContextInfo{ID: "ctx-py", Language: ioproto.LanguagePython, Cwd: "."}))
	list, err = sc.c.ListContexts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []core.ContextInfo{{ID: "default", Language: "python", Cwd: ".", CreatedAt: created}, {ID: "ctx-sh", Language: "bash", Cwd: "proj", CreatedAt: created}, {ID: "ctx-py", Language: "python", Cwd: "."}}
	if len(list) != len(want) {
		t.Fatalf("ListContexts = %+v; want %+v", list, want)
	}
	for i := range want {
		if list[i].ID != want[i].ID || list[i].Language != want[i].Language || list[i].Cwd != want[i].Cwd || !list[i].CreatedAt.Equal(want[i].CreatedAt) {
			t.Errorf("context %d = %+v; want %+v", i, list[i], want[i])
		}
	}

	if _, err := sc.c.Append(ctx, ioproto.Record{Type: ioproto.KindContext, CommandID: "ctxop-1", Op: ioproto.ContextCreate, ContextID: "ctx-new", Language: "python", Cwd: "."}); err != nil {
		t.Errorf("append a context record: %v", err)
	}
	inCtx := func(id, ctxID, lang string) ioproto.Record {
		return ioproto.Record{Type: ioproto.KindExec, CommandID: id, Language: lang, Code: "1", ContextID: ctxID}
	}
	for _, rec := range []ioproto.Record{inCtx("c1", "ctx-py", "python"), inCtx("c2", "ctx-py", "bash"), inCtx("c3", "ctx-sh", "bash")} {
		if ok, err := sc.c.Append(ctx, rec); !ok || err != nil {
			t.Errorf("append %s in %s (%s) = %v, %v; want appended", rec.CommandID, rec.ContextID, rec.Language, ok, err)
		}
	}
	for _, tc := range []struct {
		rec    ioproto.Record
		kind   error
		reason string
	}{
		{inCtx("c4", "ctx-nope", "python"), cmdlog.ErrUnknownContext, "UNKNOWN_CONTEXT"},
		{inCtx("c5", "ctx-sh", "python"), cmdlog.ErrContextLanguage, "CONTEXT_LANGUAGE"},
	} {
		_, err := sc.c.Append(ctx, tc.rec)
		var e *Error
		if !errors.Is(err, tc.kind) || !errors.As(err, &e) || e.Reason != tc.reason {
			t.Errorf("append %s in %s: %v; want %v by reason %s", tc.rec.CommandID, tc.rec.ContextID, err, tc.kind, tc.reason)
		}
	}
	// ctx-py is gone: a new command in it is refused, a retry of c1 is not.
	sc.writeContexts(t, contextsJSON(t, ioproto.ContextInfo{ID: "ctx-sh", Language: ioproto.LanguageBash, Cwd: "proj"}))
	if ok, err := sc.c.Append(ctx, inCtx("c1", "ctx-py", "python")); ok || err != nil {
		t.Errorf("retry of c1 after its context went = %v, %v; want not appended, no error", ok, err)
	}
	if _, err := sc.c.Append(ctx, inCtx("c6", "ctx-py", "python")); !errors.Is(err, cmdlog.ErrUnknownContext) {
		t.Errorf("a new command in a deleted context: %v; want ErrUnknownContext", err)
	}

	sc.writeContexts(t, []byte(`{"contexts":[`))
	if _, err := sc.c.ListContexts(ctx); !errors.Is(err, cmdlog.ErrContextsUnreadable) {
		t.Errorf("ListContexts of a broken file: %v; want ErrContextsUnreadable", err)
	}
	if _, err := sc.c.Append(ctx, inCtx("c7", "ctx-sh", "bash")); !errors.Is(err, cmdlog.ErrContextsUnreadable) {
		t.Errorf("a command in a context with a broken file: %v; want ErrContextsUnreadable", err)
	}
	if ok, err := sc.c.Append(ctx, execRec("c8", "1")); !ok || err != nil {
		t.Errorf("a command in the default context with a broken file = %v, %v; want appended (no context to check)", ok, err)
	}
}

// A lying sidecar's list of contexts is refused, bounded: none at all, too
// many, the default one missing, out of place or not python in
// /workspace, a context twice, or one no context record may be (bad ID,
// unknown language, a directory outside /workspace or not canonical, a
// creation time no driver writes). Its reasons are believed only on the
// calls that may answer them.
func TestHostileListContexts(t *testing.T) {
	def := &sandboxiov1.ContextInfo{ContextId: "default", Language: "python", Cwd: "."}
	ctxOf := func(f func(*sandboxiov1.ContextInfo)) *sandboxiov1.ContextInfo {
		c := &sandboxiov1.ContextInfo{ContextId: "ctx-a", Language: "bash", Cwd: "proj"}
		if f != nil {
			f(c)
		}
		return c
	}
	many := []*sandboxiov1.ContextInfo{def}
	for i := range ioproto.MaxContexts + 1 {
		many = append(many, ctxOf(func(c *sandboxiov1.ContextInfo) { c.ContextId = "ctx-" + strings.Repeat("a", i+1) }))
	}
	for name, list := range map[string][]*sandboxiov1.ContextInfo{
		"none":                      nil,
		"too many":                  many,
		"no default":                {ctxOf(nil)},
		"the default second":        {ctxOf(nil), def},
		"the default twice":         {def, def},
		"a default running bash":    {{ContextId: "default", Language: "bash", Cwd: "."}},
		"a default elsewhere":       {{ContextId: "default", Language: "python", Cwd: "proj"}},
		"a context twice":           {def, ctxOf(nil), ctxOf(nil)},
		"a missing context":         {def, nil},
		"a bad ID":                  {def, ctxOf(func(c *sandboxiov1.ContextInfo) { c.ContextId = "../../etc" })},
		"a long ID":                 {def, ctxOf(func(c *sandboxiov1.ContextInfo) { c.ContextId = strings.Repeat("a", 1<<20) })},
		"an unknown language":       {def, ctxOf(func(c *sandboxiov1.ContextInfo) { c.Language = "cobol" })},
		"a directory outside":       {def, ctxOf(func(c *sandboxiov1.ContextInfo) { c.Cwd = "../etc" })},
		"an absolute directory":     {def, ctxOf(func(c *sandboxiov1.ContextInfo) { c.Cwd = "/etc" })},
		"a directory not canonical": {def, ctxOf(func(c *sandboxiov1.ContextInfo) { c.Cwd = "proj/../proj/" })},
		"a creation before 2000":    {def, ctxOf(func(c *sandboxiov1.ContextInfo) { c.CreatedAtUnixNano = 1 })},
	} {
		t.Run(name, func(t *testing.T) {
			c := startHostile(t, &hostileSidecar{contexts: list})
			got, err := c.ListContexts(ctxT(t))
			wantBounded(t, "ListContexts", err, ErrBadResponse)
			if len(got) != 0 {
				t.Errorf("a refused answer still gave %d contexts", len(got))
			}
		})
	}
	for _, tc := range []struct {
		code   codes.Code
		reason string
		kind   error
	}{
		{codes.FailedPrecondition, "CONTEXTS_UNREADABLE", cmdlog.ErrContextsUnreadable},
		{codes.NotFound, "UNKNOWN_CONTEXT", ErrInternal},
		{codes.NotFound, "UNKNOWN_COMMAND", ErrInternal},
		{codes.NotFound, "NOT_FOUND", ErrInternal},
	} {
		c := startHostile(t, &hostileSidecar{err: withReason(tc.code, tc.reason, "sandbox sb-bbbbbbbbbbbbbbbbbbbb is gone")})
		if _, err := c.ListContexts(ctxT(t)); !errors.Is(err, tc.kind) {
			t.Errorf("ListContexts answering %s: %v; want %v", tc.reason, err, tc.kind)
		}
	}
}
