package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/termsafe"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// cmdAudit prints the audit trail: who did what to which sandbox, oldest
// first. The trail is read page by page; with --limit only the newest N
// of the events selected are printed, which is what one usually wants of
// a log read from its beginning.
func cmdAudit(ctx context.Context, c *cli, args []string) int {
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	var f client.AuditFilter
	fs.StringVar(&f.SandboxID, "sandbox", "", "only this sandbox's events")
	fs.StringVar(&f.Action, "action", "", "only this action's events (acquire, execute, write_file, delete, ...)")
	fs.StringVar(&f.Tenant, "tenant", "", "only this tenant's events (a user token: its own only)")
	since := fs.String("since", "24h", "only events since this long ago (a duration, e.g. 1h) or this time (RFC 3339); 0: all")
	limit := fs.Int("limit", 100, "print the newest N events selected; 0: all")
	var format formatFlag
	format.register(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return usageErr(c.stderr, "audit", err)
	}
	if len(pos) != 0 {
		return usageErr(c.stderr, "audit", fmt.Errorf("unexpected argument %q", pos[0]))
	}
	if *limit < 0 {
		return usageErr(c.stderr, "audit", fmt.Errorf("--limit %d is negative", *limit))
	}
	if f.Since, err = parseSince(*since, time.Now()); err != nil {
		return usageErr(c.stderr, "audit", err)
	}
	var all []*sandboxv1.AuditEvent
	for token := ""; ; {
		rctx, cancel := rpcCtx(ctx)
		es, next, err := c.sandboxd.ListAuditEvents(rctx, f, 1000, token)
		cancel()
		if err != nil {
			return c.fail("audit", err)
		}
		all = append(all, es...)
		if *limit > 0 && len(all) > *limit {
			all = append(all[:0], all[len(all)-*limit:]...)
		}
		if next == "" {
			break
		}
		token = next
	}
	if format == "json" {
		if err := writeJSONList(c.stdout, all); err != nil {
			return c.fail("audit", err)
		}
		return exitOK
	}
	if len(all) == 0 {
		fmt.Fprintln(c.stdout, "No audit events match.")
		return exitOK
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tTENANT\tTOKEN\tACTION\tSANDBOX\tDETAIL\tOUTCOME\tDURATION")
	for _, e := range all {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", formatTime(e.GetTime()), orDash(termsafe.Field(e.GetTenant())), orDash(tokenLabel(e)),
			termsafe.Field(e.GetAction()), orDash(termsafe.Field(e.GetSandboxId())), orDash(auditDetail(e)), termsafe.Field(e.GetOutcome()),
			e.GetDuration().AsDuration().Round(time.Millisecond))
	}
	if err := tw.Flush(); err != nil {
		return c.fail("audit", err)
	}
	return exitOK
}

// parseSince reads --since: a duration back from now, a time, or 0.
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "0" || s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("--since %q: want a positive duration (1h), an RFC 3339 time or 0", s)
}

// tokenLabel is the token's name, marked for an admin token.
func tokenLabel(e *sandboxv1.AuditEvent) string {
	if e.GetAdmin() {
		return termsafe.Field(e.GetTokenName()) + " (admin)"
	}
	return termsafe.Field(e.GetTokenName())
}

// auditDetail is what an event says besides its sandbox, in one cell;
// each value is escaped (termsafe.Field): a record holds what a caller
// sent, refused requests' included.
func auditDetail(e *sandboxv1.AuditEvent) string {
	var d []string
	add := func(k, v string) {
		if v != "" {
			d = append(d, k+"="+termsafe.Field(v))
		}
	}
	add("user", e.GetUserId())
	add("path", e.GetPath())
	add("to", e.GetToPath())
	add("command", e.GetCommandId())
	add("context", e.GetContextId())
	add("snapshot", e.GetSnapshot())
	add("volume", e.GetVolume())
	add("template", e.GetTemplate())
	if e.GetCount() > 0 {
		add("count", fmt.Sprint(e.GetCount()))
	}
	add("language", e.GetLanguage())
	if e.GetBytes() > 0 {
		add("bytes", fmt.Sprint(e.GetBytes()))
	}
	if e.GetDroppedCount() > 0 {
		add("dropped", fmt.Sprint(e.GetDroppedCount()))
	}
	if e.GetMessage() != "" {
		d = append(d, "error="+strconv.QuoteToGraphic(e.GetMessage()))
	}
	return strings.Join(d, " ")
}
