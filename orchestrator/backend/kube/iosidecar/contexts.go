package iosidecar

import (
	"context"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/cmdlog"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	sandboxiov1 "github.com/sandboxd/sandboxd/proto/sandboxio/v1"
)

// Contexts: the operations are context records sent with Append and
// followed like commands (cmdlog's, run by the kube Manager); the sidecar
// only lists the driver's contexts, next to /io, and checks a command's
// context in Append.

// ListContexts lists the driver's contexts (cmdlog.ReadContexts: iolog's
// bounded, sanitised read). A list that cannot be read is
// CONTEXTS_UNREADABLE.
func (s *Server) ListContexts(ctx context.Context, _ *sandboxiov1.ListContextsRequest) (*sandboxiov1.ListContextsResponse, error) {
	list, err := cmdlog.ReadContexts(s.dir)
	if err != nil {
		return nil, err // the table's reason (errors.go)
	}
	resp := &sandboxiov1.ListContextsResponse{Contexts: make([]*sandboxiov1.ContextInfo, len(list))}
	for i, c := range list {
		resp.Contexts[i] = &sandboxiov1.ContextInfo{ContextId: c.ID, Language: c.Language, Cwd: c.Cwd, CreatedAtUnixNano: unixNano(c.CreatedAt)}
	}
	return resp, nil
}

// ListContexts lists the sandbox's contexts, the default one first. The
// answer is checked as iolog checks the driver's file, but refused rather
// than cleaned (a sidecar that sends what iolog drops is lying): the
// default context first, with its language and directory; then at most
// ioproto.MaxContexts others, each once, with an ID, language and
// directory a context record may have (the directory in canonical form),
// and a creation time a driver writes. Anything else is ErrBadResponse.
func (c *Client) ListContexts(ctx context.Context) ([]core.ContextInfo, error) {
	resp, err := c.rpc.ListContexts(ctx, &sandboxiov1.ListContextsRequest{})
	if err != nil {
		return nil, errorOf(ctx, callContexts, err)
	}
	return checkContexts(resp.GetContexts())
}

// checkContexts checks a ListContexts answer and turns it into the
// domain's.
func checkContexts(list []*sandboxiov1.ContextInfo) ([]core.ContextInfo, error) {
	switch {
	case len(list) == 0:
		return nil, badResponse("list contexts: no default context")
	case len(list) > 1+ioproto.MaxContexts:
		return nil, badResponse("list contexts: %d contexts; a sandbox has at most %d besides the default one", len(list), ioproto.MaxContexts)
	}
	out := make([]core.ContextInfo, len(list))
	seen := make(map[string]bool, len(list))
	for i, p := range list {
		info, err := checkContext(i, p)
		if err != nil {
			return nil, err
		}
		if seen[info.ID] {
			return nil, badResponse("list contexts: context %s listed twice", info.ID)
		}
		seen[info.ID] = true
		out[i] = info
	}
	return out, nil
}

// checkContext checks the i-th listed context.
func checkContext(i int, p *sandboxiov1.ContextInfo) (core.ContextInfo, error) {
	if p == nil {
		return core.ContextInfo{}, badResponse("list contexts: context %d is missing", i)
	}
	id, lang, cwd := p.GetContextId(), p.GetLanguage(), p.GetCwd()
	if !utf8.ValidString(id) || ioproto.ValidateContextID(id) != nil {
		return core.ContextInfo{}, badResponse("list contexts: context ID %q is not one the log takes", core.Truncate(id, 64))
	}
	bad := func(format string, args ...any) (core.ContextInfo, error) {
		return core.ContextInfo{}, badResponse("list contexts: context %s: "+format, append([]any{id}, args...)...)
	}
	created := timeOf(p.GetCreatedAtUnixNano())
	if !created.IsZero() && (created.Year() < 2000 || created.Year() > 9999) {
		return bad("created at %d ns", p.GetCreatedAtUnixNano())
	}
	if !created.IsZero() {
		created = created.UTC()
	}
	info := core.ContextInfo{ID: id, Language: lang, Cwd: cwd, CreatedAt: created}
	switch {
	case (i == 0) != (id == ioproto.DefaultContext):
		return bad("at position %d; the default context comes first, once", i)
	case i == 0 && (lang != ioproto.LanguagePython || cwd != "."):
		return bad("runs %q in %q; the default context runs python in /workspace", core.Truncate(lang, 32), core.Truncate(cwd, 64))
	case i == 0:
		return info, nil
	}
	// The rules of a context record, as iolog applies them to the file.
	probe := ioproto.Record{Type: ioproto.KindContext, CommandID: "check", Op: ioproto.ContextCreate, ContextID: id, Language: lang, Cwd: cwd}
	if err := probe.Validate(); err != nil {
		return bad("%v", err)
	}
	if probe.Cwd != cwd {
		return bad("directory %q is not in canonical form", core.Truncate(cwd, 64))
	}
	return info, nil
}
