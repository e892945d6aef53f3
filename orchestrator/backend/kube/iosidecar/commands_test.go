package iosidecar

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/cmdlog"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/iolog"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	sandboxiov1 "github.com/sandboxd/sandboxd/proto/sandboxio/v1"
)

// ListCommands through a real sidecar: five commands (one finished, one
// running, three queued, with stdin and a terminal among them) listed two
// at a time, newest first, each page's token continuing the last, the
// phases and what the done event says carried across; a bad page size or
// token is INVALID_ARGUMENT with the Docker backend's words (cmdlog).
func TestListCommands(t *testing.T) {
	sc := startSidecar(t)
	ctx := ctxT(t)
	bash := func(id string, stdin bool, pty ioproto.PtySize) ioproto.Record {
		return ioproto.Record{Type: ioproto.KindExec, CommandID: id, Language: ioproto.LanguageBash, Code: "cat", Stdin: stdin, Pty: pty}
	}
	for _, rec := range []ioproto.Record{execRec("c1", "1"), bash("c2", true, ioproto.PtySize{}), bash("c3", true, ioproto.PtySize{Rows: 24, Cols: 80}), execRec("c4", "4"), execRec("c5", "5")} {
		if _, err := sc.c.Append(ctx, rec); err != nil {
			t.Fatalf("append %s: %v", rec.CommandID, err)
		}
	}
	started := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	exit := 3
	sc.writeEvents(t, "c1",
		ioproto.Event{Seq: 1, Type: ioproto.EventStarted, CommandID: "c1", Language: ioproto.LanguagePython, Time: started},
		ioproto.Event{Seq: 2, Type: ioproto.EventDone, Status: ioproto.StatusError, ExitCode: &exit, DurationMS: 1500, Time: started.Add(1500 * time.Millisecond)})
	sc.writeEvents(t, "c2", ioproto.Event{Seq: 1, Type: ioproto.EventStarted, CommandID: "c2", Language: ioproto.LanguageBash, Time: started})

	type row struct {
		id    string
		phase core.CommandPhase
	}
	wantPages := [][]row{
		{{"c5", core.CommandQueued}, {"c4", core.CommandQueued}},
		{{"c3", core.CommandQueued}, {"c2", core.CommandRunning}},
		{{"c1", core.CommandFinished}},
	}
	wantTokens := []string{"3", "1", ""}
	var all []core.CommandInfo
	page := cmdlog.Page{Size: 2}
	for i, want := range wantPages {
		got, err := sc.c.ListCommands(ctx, page)
		if err != nil {
			t.Fatalf("page %d: %v", i, err)
		}
		if got.Total != 5 || got.NextPageToken != wantTokens[i] || len(got.Commands) != len(want) {
			t.Fatalf("page %d: total %d, next %q, %d commands; want 5, %q, %d", i, got.Total, got.NextPageToken, len(got.Commands), wantTokens[i], len(want))
		}
		for j, w := range want {
			if c := got.Commands[j]; c.ID != w.id || c.Phase != w.phase || c.ContextID != ioproto.DefaultContext {
				t.Errorf("page %d, command %d: %s in phase %d (context %q); want %s in phase %d", i, j, c.ID, c.Phase, c.ContextID, w.id, w.phase)
			}
		}
		all = append(all, got.Commands...)
		if got.NextPageToken != "" {
			var ok bool
			if page.Before, ok = cmdlog.ParseToken(got.NextPageToken); !ok {
				t.Fatalf("page %d: token %q does not parse", i, got.NextPageToken)
			}
		}
	}
	c1, c2, c3 := all[4], all[3], all[2]
	if c1.Status != ioproto.StatusError || c1.ExitCode == nil || *c1.ExitCode != 3 || c1.Duration != 1500*time.Millisecond ||
		!c1.StartedAt.Equal(started) || !c1.FinishedAt.Equal(started.Add(1500*time.Millisecond)) || !c1.OutputAvailable || c1.Language != ioproto.LanguagePython {
		t.Errorf("the finished command: %+v", c1)
	}
	if !c2.Stdin || c2.Pty || !c2.StartedAt.Equal(started) || c2.Status != "" || c2.ExitCode != nil || !c2.FinishedAt.IsZero() {
		t.Errorf("the running command with stdin: %+v", c2)
	}
	if !c3.Stdin || !c3.Pty || c3.OutputAvailable || !c3.StartedAt.IsZero() {
		t.Errorf("the queued command on a terminal: %+v", c3)
	}

	// A token beyond the log lists from the newest, as iolog does.
	if got, err := sc.c.ListCommands(ctx, cmdlog.Page{Size: 1, Before: 99}); err != nil || len(got.Commands) != 1 || got.Commands[0].ID != "c5" || got.NextPageToken != "4" {
		t.Errorf("a token beyond the log: %+v, %v", got, err)
	}

	// The sidecar checks the page itself (the package doc says why).
	_, err := sc.c.ListCommands(ctx, cmdlog.Page{Size: core.MaxCommandPage + 1})
	wantClass(t, "page size 201", err, core.ErrInvalidArgument, "page_size 201 is outside 0-200")
	_, err = sc.c.rpc.ListCommands(ctx, &sandboxiov1.ListCommandsRequest{PageToken: "forged"})
	err = errorOf(ctx, callList, err)
	wantClass(t, "a forged token", err, core.ErrInvalidArgument, `page_token "forged" is not one this server made`)
	var e *Error
	if !errors.As(err, &e) || e.Reason != "INVALID_ARGUMENT" {
		t.Errorf("a forged token: %#v; want the reason INVALID_ARGUMENT", err)
	}

	// The default page and an empty log's.
	if got, err := startSidecar(t).c.ListCommands(ctx, cmdlog.Page{Size: core.DefaultCommandPage}); err != nil || got.Total != 0 || len(got.Commands) != 0 || got.NextPageToken != "" {
		t.Errorf("an empty log: %+v, %v", got, err)
	}
}

// A lying sidecar's listings are refused: each answer below contradicts
// the request or the protocol, and the client says so (ErrBadResponse,
// bounded) rather than passing it on.
func TestHostileListCommands(t *testing.T) {
	cmd := func(id string) *sandboxiov1.CommandInfo {
		return &sandboxiov1.CommandInfo{CommandId: id, Language: "python", ContextId: "default", Phase: sandboxiov1.CommandPhase_COMMAND_PHASE_QUEUED}
	}
	with := func(f func(*sandboxiov1.CommandInfo)) *sandboxiov1.CommandInfo {
		c := cmd("x")
		f(c)
		return c
	}
	resp := func(total uint32, next string, cmds ...*sandboxiov1.CommandInfo) *sandboxiov1.ListCommandsResponse {
		return &sandboxiov1.ListCommandsResponse{Total: total, NextPageToken: next, Commands: cmds}
	}
	many := make([]*sandboxiov1.CommandInfo, 3)
	for i := range many {
		many[i] = cmd(fmt.Sprint("m", i))
	}
	page2 := cmdlog.Page{Size: 2}
	for name, tc := range map[string]struct {
		page cmdlog.Page
		resp *sandboxiov1.ListCommandsResponse
	}{
		"more than the page":         {page2, resp(10, "7", many...)},
		"fewer than the log has":     {page2, resp(10, "9", cmd("a"))},
		"more than the total":        {page2, resp(1, "", cmd("a"), cmd("b"))},
		"a total beyond the log cap": {page2, resp(iolog.MaxLogRecords+1, "", cmd("a"), cmd("b"))},
		"a token out of place":       {page2, resp(10, "2", cmd("a"), cmd("b"))},
		"a token on the last page":   {page2, resp(2, "1", cmd("a"), cmd("b"))},
		"no token with more left":    {page2, resp(10, "", cmd("a"), cmd("b"))},
		"a token not below ours":     {cmdlog.Page{Size: 2, Before: 4}, resp(10, "8", cmd("a"), cmd("b"))},
		"a command twice":            {page2, resp(2, "", cmd("a"), cmd("a"))},
		"a missing command":          {page2, resp(2, "", cmd("a"), nil)},
		"a bad command ID":           {page2, resp(2, "", cmd("a"), cmd("../../etc/passwd"))},
		"a long command ID":          {page2, resp(2, "", cmd("a"), cmd(strings.Repeat("a", 1<<20)))},
		"an unknown language":        {page2, resp(2, "", cmd("a"), with(func(c *sandboxiov1.CommandInfo) { c.Language = "cobol" }))},
		"a bad context":              {page2, resp(2, "", cmd("a"), with(func(c *sandboxiov1.CommandInfo) { c.ContextId = "" }))},
		"an unknown phase":           {page2, resp(2, "", cmd("a"), with(func(c *sandboxiov1.CommandInfo) { c.Phase = 7 }))},
		"a status while queued":      {page2, resp(2, "", cmd("a"), with(func(c *sandboxiov1.CommandInfo) { c.Status = "ok" }))},
		"an unknown status": {page2, resp(2, "", cmd("a"), with(func(c *sandboxiov1.CommandInfo) {
			c.Phase, c.Status = sandboxiov1.CommandPhase_COMMAND_PHASE_FINISHED, "pwned"
		}))},
		"a negative duration":      {page2, resp(2, "", cmd("a"), with(func(c *sandboxiov1.CommandInfo) { c.DurationMs = -1 }))},
		"a terminal without input": {page2, resp(2, "", cmd("a"), with(func(c *sandboxiov1.CommandInfo) { c.Pty = true }))},
	} {
		t.Run(name, func(t *testing.T) {
			c := startHostile(t, &hostileSidecar{commands: tc.resp})
			got, err := c.ListCommands(ctxT(t), tc.page)
			wantBounded(t, "ListCommands", err, ErrBadResponse)
			if len(got.Commands) != 0 {
				t.Errorf("a refused answer still gave %d commands", len(got.Commands))
			}
		})
	}
	// An honest answer of the same shape passes: the checks above are
	// what fails them, not the fixture.
	ok := resp(10, "2", cmd("a"), with(func(c *sandboxiov1.CommandInfo) {
		c.Phase, c.Status, c.ExitCode, c.Stdin, c.Pty = sandboxiov1.CommandPhase_COMMAND_PHASE_FINISHED, "ok", proto.Int32(0), true, true
	}))
	if got, err := startHostile(t, &hostileSidecar{commands: ok}).ListCommands(ctxT(t), cmdlog.Page{Size: 2, Before: 4}); err != nil || len(got.Commands) != 2 || got.NextPageToken != "2" {
		t.Errorf("an honest page: %+v, %v", got, err)
	}
	// Reasons a listing may not answer are not believed.
	for _, tc := range []struct {
		reason string
		code   codes.Code
		want   error
	}{
		{"TAMPERED", codes.FailedPrecondition, iolog.ErrTampered},
		{"LOG_FULL", codes.ResourceExhausted, ErrInternal},
		{"UNKNOWN_COMMAND", codes.NotFound, ErrInternal},
		{"NOT_FOUND", codes.NotFound, ErrInternal},
	} {
		c := startHostile(t, &hostileSidecar{err: withReason(tc.code, tc.reason, "sandbox sb-bbbbbbbbbbbbbbbbbbbb is gone")})
		_, err := c.ListCommands(ctxT(t), page2)
		if !errors.Is(err, tc.want) {
			t.Errorf("ListCommands answering %s: %v; want %v", tc.reason, err, tc.want)
		}
	}
}
