package main

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"

	"github.com/sandboxd/sandboxd/internal/termsafe"
)

// cmdCtx manages a sandbox's contexts: ctx create|ls|restart|rm.
func cmdCtx(ctx context.Context, c *cli, args []string) int {
	if len(args) == 0 {
		return usageErr(c.stderr, "ctx", fmt.Errorf("want a subcommand: create, ls, restart or rm"))
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("ctx "+sub, flag.ContinueOnError)
	language := fs.String("language", "python", "the context's language")
	cwd := fs.String("cwd", "", "working directory, relative to /workspace")
	var format formatFlag
	format.register(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return usageErr(c.stderr, "ctx "+sub, err)
	}
	want := map[string]int{"create": 1, "ls": 1, "restart": 2, "rm": 2}
	n, ok := want[sub]
	switch {
	case !ok:
		return usageErr(c.stderr, "ctx", fmt.Errorf("unknown subcommand %q (want create, ls, restart or rm)", sub))
	case len(pos) != n && n == 1:
		return usageErr(c.stderr, "ctx "+sub, fmt.Errorf("want SANDBOX_ID, got %d arguments", len(pos)))
	case len(pos) != n:
		return usageErr(c.stderr, "ctx "+sub, fmt.Errorf("want SANDBOX_ID CONTEXT_ID, got %d arguments", len(pos)))
	}
	rctx, cancel := rpcCtx(ctx)
	defer cancel()
	switch sub {
	case "create":
		cx, err := c.sandboxd.CreateContext(rctx, pos[0], *language, *cwd)
		if err != nil {
			return c.fail("ctx create", err)
		}
		fmt.Fprintln(c.stdout, termsafe.Field(cx.GetContextId()))
	case "ls":
		list, err := c.sandboxd.ListContexts(rctx, pos[0])
		if err != nil {
			return c.fail("ctx ls", err)
		}
		if format == "json" {
			if err := writeJSONList(c.stdout, list); err != nil {
				return c.fail("ctx ls", err)
			}
			return exitOK
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CONTEXT\tLANGUAGE\tCWD\tCREATED")
		for _, cx := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", termsafe.Field(cx.GetContextId()), termsafe.Field(cx.GetLanguage()), termsafe.Field(cx.GetCwd()), formatTime(cx.GetCreatedAt()))
		}
		if err := tw.Flush(); err != nil {
			return c.fail("ctx ls", err)
		}
	case "restart":
		if err := c.sandboxd.RestartContext(rctx, pos[0], pos[1]); err != nil {
			return c.fail("ctx restart "+pos[1], err)
		}
	case "rm":
		if err := c.sandboxd.DeleteContext(rctx, pos[0], pos[1]); err != nil {
			return c.fail("ctx rm "+pos[1], err)
		}
	}
	return exitOK
}
