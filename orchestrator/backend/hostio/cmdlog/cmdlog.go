// Package cmdlog holds the domain's rules on a sandbox's command log that
// need both core and iolog: ListCommands' pages, what a command must be
// to take input, execution contexts (contexts.go), and what a driver's
// status says of the sandbox's health (health.go). Each host of the
// log runs the checks next to it, the Docker backend on the host and the
// io sidecar inside a Pod on Kubernetes, so both backends page, refuse and
// word their errors alike; the context operations run in sandboxd on
// either backend, over the log as it reaches it (Log). iolog stays
// free of the domain (it imports ioproto only); this package is the one
// place the two meet.
//
// Errors: the domain's (core's classes, with the backends' messages) for
// what the caller asked; iolog's, as they are, for the log itself, which
// each host turns into its own (the Docker backend's appendError, the
// sidecar's logError).
package cmdlog

import (
	"cmp"
	"context"
	"strconv"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/iolog"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Page is a ListCommands request, checked.
type Page struct {
	// Size is the most commands listed, 1 to core.MaxCommandPage.
	Size int
	// Before is the log position to list below; 0 lists from the newest.
	Before int
}

// ParsePage checks ListCommands' pageSize (0: core.DefaultCommandPage; at
// most core.MaxCommandPage) and pageToken (a previous page's
// NextPageToken: a log position, which stays valid because the log only
// grows), before any sandbox is looked at.
func ParsePage(pageSize int, pageToken string) (Page, error) {
	switch {
	case pageSize < 0 || pageSize > core.MaxCommandPage:
		return Page{}, core.Invalidf("page_size %d is outside 0-%d", pageSize, core.MaxCommandPage)
	case pageSize == 0:
		pageSize = core.DefaultCommandPage
	}
	p := Page{Size: pageSize}
	if pageToken != "" {
		n, ok := ParseToken(pageToken)
		if !ok {
			return Page{}, core.Invalidf("page_token %q is not one this server made", core.Truncate(pageToken, 32))
		}
		p.Before = n
	}
	return p, nil
}

// ParseToken reads a page token: a log position, 1 to
// iolog.MaxLogRecords. ok is false for anything else.
func ParseToken(token string) (before int, ok bool) {
	n, err := strconv.Atoi(token)
	if err != nil || n < 1 || n > iolog.MaxLogRecords {
		return 0, false
	}
	return n, true
}

// Token is the page token continuing below log position index.
func Token(index int) string { return strconv.Itoa(index) }

// List reads one page of d's commands, newest first. Each listed command
// costs a bounded read of its events file's head and tail
// (iolog.Dir.Progress).
func List(ctx context.Context, d *iolog.Dir, p Page) (core.CommandPage, error) {
	entries, total, err := d.Commands(ctx, p.Before, p.Size)
	if err != nil {
		return core.CommandPage{}, err
	}
	prog, err := d.Progress(ctx, entries)
	if err != nil {
		return core.CommandPage{}, err
	}
	page := core.CommandPage{Total: total, Commands: make([]core.CommandInfo, len(entries))}
	for i, e := range entries {
		pr := prog[i]
		info := core.CommandInfo{ID: e.ID, Language: e.Language, ContextID: cmp.Or(e.ContextID, ioproto.DefaultContext), Phase: core.CommandPhase(pr.Phase), StartedAt: pr.StartedAt,
			OutputAvailable: pr.OutputAvailable, Stdin: e.Stdin, Pty: e.Pty}
		if dn := pr.Done; dn != nil {
			info.Status, info.FinishedAt, info.ExitCode = dn.Status, dn.Time, dn.ExitCode
			info.Duration = time.Duration(max(dn.DurationMS, 0)) * time.Millisecond
		}
		page.Commands[i] = info
	}
	if n := len(entries); n > 0 && entries[n-1].Index > 0 {
		page.NextPageToken = Token(entries[n-1].Index)
	}
	return page, nil
}
