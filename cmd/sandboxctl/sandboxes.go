package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/termsafe"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// cmdList lists sandboxes as a table, or as a JSON array with --json.
func cmdList(ctx context.Context, c *cli, args []string) int {
	fs := flag.NewFlagSet("list", flag.ContinueOnError)
	tenant := fs.String("tenant", "", "only this tenant's sandboxes")
	user := fs.String("user", "", "only this user's sandboxes")
	state := fs.String("state", "", "only sandboxes in this state: running or dead")
	md := metadataFlag{}
	fs.Var(md, "metadata", "only sandboxes with this metadata pair, K=V (repeatable)")
	asJSON := fs.Bool("json", false, "print JSON instead of a table (the same as -o json)")
	var format formatFlag
	format.register(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return usageErr(c.stderr, "list", err)
	}
	if len(pos) > 0 {
		return usageErr(c.stderr, "list", fmt.Errorf("unexpected argument %q", pos[0]))
	}
	st, err := parseState(*state)
	if err != nil {
		return usageErr(c.stderr, "list", err)
	}

	rctx, cancel := rpcCtx(ctx)
	defer cancel()
	sbs, err := c.sandboxd.List(rctx, client.ListFilter{Tenant: *tenant, UserID: *user, State: st, Metadata: md.filter()})
	if err != nil {
		return c.fail("list", err)
	}
	switch {
	case *asJSON || format == "json":
		err = writeJSONList(c.stdout, sbs)
	case len(sbs) == 0:
		fmt.Fprintln(c.stdout, "No sandboxes"+filterNote(*tenant, *user, *state, md)+".")
	default:
		err = writeTable(c.stdout, sbs, format == "wide")
	}
	if err != nil {
		return c.fail("list", err)
	}
	return exitOK
}

// parseState maps the --state flag to the filter enum ("" is any state).
func parseState(s string) (sandboxv1.SandboxState, error) {
	switch s {
	case "":
		return sandboxv1.SandboxState_SANDBOX_STATE_UNSPECIFIED, nil
	case "running":
		return sandboxv1.SandboxState_SANDBOX_STATE_RUNNING, nil
	case "dead":
		return sandboxv1.SandboxState_SANDBOX_STATE_DEAD, nil
	case "hibernated":
		return sandboxv1.SandboxState_SANDBOX_STATE_HIBERNATED, nil
	}
	return 0, fmt.Errorf("--state %q: want running, dead or hibernated", s)
}

// cmdInspect prints one sandbox as JSON.
func cmdInspect(ctx context.Context, c *cli, args []string) int {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return usageErr(c.stderr, "inspect", err)
	}
	if len(pos) != 1 {
		return usageErr(c.stderr, "inspect", fmt.Errorf("want exactly one SANDBOX_ID, got %d arguments", len(pos)))
	}
	rctx, cancel := rpcCtx(ctx)
	defer cancel()
	sb, err := c.sandboxd.Get(rctx, pos[0])
	if err != nil {
		return c.fail("inspect "+pos[0], err)
	}
	if err := writeJSON(c.stdout, sb); err != nil {
		return c.fail("inspect "+pos[0], err)
	}
	return exitOK
}

// cmdKill deletes the named sandboxes, or all of --user's (in every tenant
// the token sees, or only --tenant's). Every sandbox is attempted even when
// one fails; each deleted ID is printed on stdout, each
// failure on stderr, and the status is non-zero if any failed.
func cmdKill(ctx context.Context, c *cli, args []string) int {
	fs := flag.NewFlagSet("kill", flag.ContinueOnError)
	user := fs.String("user", "", "delete all of this user's sandboxes")
	tenant := fs.String("tenant", "", "with --user: only in this tenant")
	ids, err := parseArgs(fs, args)
	if err != nil {
		return usageErr(c.stderr, "kill", err)
	}
	switch {
	case *user == "" && len(ids) == 0:
		return usageErr(c.stderr, "kill", fmt.Errorf("give SANDBOX_IDs or --user USER"))
	case *user != "" && len(ids) > 0:
		return usageErr(c.stderr, "kill", fmt.Errorf("give SANDBOX_IDs or --user USER, not both"))
	case *tenant != "" && *user == "":
		return usageErr(c.stderr, "kill", fmt.Errorf("--tenant goes with --user"))
	}

	if *user != "" {
		rctx, cancel := rpcCtx(ctx)
		sbs, err := c.sandboxd.List(rctx, client.ListFilter{Tenant: *tenant, UserID: *user})
		cancel()
		if err != nil {
			return c.fail("kill --user "+*user, err)
		}
		for _, sb := range sbs {
			ids = append(ids, sb.GetSandboxId())
		}
		if len(ids) == 0 {
			fmt.Fprintf(c.stderr, "sandboxctl: kill --user %s: the user has no sandboxes\n", *user)
			return exitOK
		}
	}

	code := exitOK
	for _, id := range ids {
		if ctx.Err() != nil {
			fmt.Fprintf(c.stderr, "sandboxctl: kill %s: interrupted\n", id)
			return exitInterrupted
		}
		rctx, cancel := rpcCtx(ctx)
		err := c.sandboxd.Delete(rctx, id)
		cancel()
		if err != nil {
			code = c.fail("kill "+id, err)
			continue
		}
		fmt.Fprintln(c.stdout, termsafe.Field(id))
	}
	return code
}

// filterNote says which filters an empty list was for.
func filterNote(tenant, user, state string, md metadataFlag) string {
	var parts []string
	if tenant != "" {
		parts = append(parts, "tenant "+tenant)
	}
	if user != "" {
		parts = append(parts, "user "+user)
	}
	if state != "" {
		parts = append(parts, "state "+state)
	}
	if len(md) > 0 {
		parts = append(parts, "metadata "+formatMetadata(md))
	}
	if len(parts) == 0 {
		return ""
	}
	return " match " + strings.Join(parts, ", ")
}
