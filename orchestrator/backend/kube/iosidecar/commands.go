package iosidecar

import (
	"context"
	"math"
	"time"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/cmdlog"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/iolog"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	sandboxiov1 "github.com/sandboxd/sandboxd/proto/sandboxio/v1"
)

// The command log's queries, by cmdlog's rules: the sidecar runs them next
// to the log, as the Docker backend does on the host, and the Client
// checks what comes back against the request it made.

// ListCommands lists one page of the command log (cmdlog.List). The page
// is checked again here (the package doc says why).
func (s *Server) ListCommands(ctx context.Context, req *sandboxiov1.ListCommandsRequest) (*sandboxiov1.ListCommandsResponse, error) {
	page, err := cmdlog.ParsePage(int(req.GetPageSize()), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	list, err := cmdlog.List(ctx, s.dir, page)
	if err != nil {
		return nil, s.logError(err)
	}
	resp := &sandboxiov1.ListCommandsResponse{NextPageToken: list.NextPageToken, Total: uint32(list.Total),
		Commands: make([]*sandboxiov1.CommandInfo, len(list.Commands))}
	for i, c := range list.Commands {
		pc := &sandboxiov1.CommandInfo{CommandId: c.ID, Language: c.Language, ContextId: c.ContextID, Phase: sandboxiov1.CommandPhase(c.Phase),
			Status: c.Status, DurationMs: c.Duration.Milliseconds(), OutputAvailable: c.OutputAvailable, Stdin: c.Stdin, Pty: c.Pty,
			StartedAtUnixNano: unixNano(c.StartedAt), FinishedAtUnixNano: unixNano(c.FinishedAt)}
		if c.ExitCode != nil {
			code := int32(*c.ExitCode)
			pc.ExitCode = &code
		}
		resp.Commands[i] = pc
	}
	return resp, nil
}

// unixNano is t in nanoseconds since the Unix epoch, 0 for the zero time
// (whose UnixNano is undefined).
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// timeOf is unixNano's inverse.
func timeOf(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// ListCommands lists one page of the sandbox's command log, newest first.
// page is what cmdlog.ParsePage made of the caller's request. The answer
// is checked against it: the log lists consecutive positions below the
// page's, so the page's length, its next token and the total must agree
// with one another; each command's ID, context, language, phase and
// status must be ones the protocol has. Anything else is ErrBadResponse.
func (c *Client) ListCommands(ctx context.Context, page cmdlog.Page) (core.CommandPage, error) {
	req := &sandboxiov1.ListCommandsRequest{PageSize: uint32(page.Size)}
	if page.Before > 0 {
		req.PageToken = cmdlog.Token(page.Before)
	}
	resp, err := c.rpc.ListCommands(ctx, req)
	if err != nil {
		return core.CommandPage{}, errorOf(ctx, callList, err)
	}
	return checkPage(page, resp)
}

// checkPage checks a ListCommands answer against the request (page) and
// turns it into the domain's.
func checkPage(page cmdlog.Page, resp *sandboxiov1.ListCommandsResponse) (core.CommandPage, error) {
	total, n := int(resp.GetTotal()), len(resp.GetCommands())
	if total > iolog.MaxLogRecords {
		return core.CommandPage{}, badResponse("list commands: a total of %d; a log holds at most %d", total, iolog.MaxLogRecords)
	}
	top := total // the position the page starts below, as iolog.Dir.Commands takes it
	if page.Before > 0 && page.Before <= total {
		top = page.Before
	}
	if want := min(page.Size, top); n != want {
		return core.CommandPage{}, badResponse("list commands: %d commands below position %d of %d, in pages of %d; want %d", n, top, total, page.Size, want)
	}
	wantToken := ""
	if top-n > 0 {
		wantToken = cmdlog.Token(top - n)
	}
	if resp.GetNextPageToken() != wantToken {
		return core.CommandPage{}, badResponse("list commands: next page token %q; want %q", core.Truncate(resp.GetNextPageToken(), 32), wantToken)
	}
	out := core.CommandPage{Total: total, NextPageToken: wantToken, Commands: make([]core.CommandInfo, n)}
	seen := make(map[string]bool, n)
	for i, p := range resp.GetCommands() {
		info, err := checkCommand(p)
		if err != nil {
			return core.CommandPage{}, err
		}
		if seen[info.ID] {
			return core.CommandPage{}, badResponse("list commands: command %s listed twice", info.ID)
		}
		seen[info.ID] = true
		out.Commands[i] = info
	}
	return out, nil
}

// statuses are a done event's statuses.
var statuses = map[string]bool{ioproto.StatusOK: true, ioproto.StatusError: true, ioproto.StatusTimeout: true,
	ioproto.StatusInterrupted: true, ioproto.StatusKilled: true}

// checkCommand checks one listed command and turns it into the domain's.
func checkCommand(p *sandboxiov1.CommandInfo) (core.CommandInfo, error) {
	if p == nil {
		return core.CommandInfo{}, badResponse("list commands: a command is missing")
	}
	id := p.GetCommandId()
	if !utf8.ValidString(id) || ioproto.ValidateCommandID(id) != nil {
		return core.CommandInfo{}, badResponse("list commands: command ID %q is not one the log takes", core.Truncate(id, 64))
	}
	bad := func(format string, args ...any) (core.CommandInfo, error) {
		return core.CommandInfo{}, badResponse("list commands: command %s: "+format, append([]any{id}, args...)...)
	}
	phase := p.GetPhase()
	switch {
	case p.GetLanguage() != "" && !ioproto.KnownLanguage(p.GetLanguage()):
		return bad("language %q is not one of the protocol's", core.Truncate(p.GetLanguage(), 32))
	case ioproto.ValidateContextID(p.GetContextId()) != nil:
		return bad("context ID %q is not one the log takes", core.Truncate(p.GetContextId(), 64))
	case phase < sandboxiov1.CommandPhase_COMMAND_PHASE_UNSPECIFIED || phase > sandboxiov1.CommandPhase_COMMAND_PHASE_FINISHED:
		return bad("phase %d is not one of the protocol's", phase)
	case p.GetStatus() != "" && (!statuses[p.GetStatus()] || phase != sandboxiov1.CommandPhase_COMMAND_PHASE_FINISHED):
		return bad("status %q in phase %v", core.Truncate(p.GetStatus(), 32), phase)
	case p.GetDurationMs() < 0 || p.GetDurationMs() > math.MaxInt64/int64(time.Millisecond):
		return bad("a duration of %d ms", p.GetDurationMs())
	case p.GetPty() && !p.GetStdin():
		return bad("a terminal without input")
	}
	info := core.CommandInfo{ID: id, Language: p.GetLanguage(), ContextID: p.GetContextId(), Phase: core.CommandPhase(phase), Status: p.GetStatus(),
		StartedAt: timeOf(p.GetStartedAtUnixNano()), FinishedAt: timeOf(p.GetFinishedAtUnixNano()),
		Duration: time.Duration(p.GetDurationMs()) * time.Millisecond, OutputAvailable: p.GetOutputAvailable(), Stdin: p.GetStdin(), Pty: p.GetPty()}
	if p.ExitCode != nil {
		code := int(p.GetExitCode())
		info.ExitCode = &code
	}
	return info, nil
}
