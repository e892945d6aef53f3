package main

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"

	"github.com/docker/go-units"

	"github.com/sandboxd/sandboxd/internal/termsafe"
)

// cmdSnapshot manages named snapshots: snapshot create|ls|rm.
func cmdSnapshot(ctx context.Context, c *cli, args []string) int {
	if len(args) == 0 {
		return usageErr(c.stderr, "snapshot", fmt.Errorf("want a subcommand: create, ls or rm"))
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("snapshot "+sub, flag.ContinueOnError)
	name := fs.String("name", "", "the snapshot's name (unique in the tenant)")
	sandbox := fs.String("sandbox", "", "ls: only this sandbox's snapshots")
	var format formatFlag
	format.register(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return usageErr(c.stderr, "snapshot "+sub, err)
	}
	want := map[string]int{"create": 1, "ls": 0, "rm": 1}
	n, ok := want[sub]
	switch {
	case !ok:
		return usageErr(c.stderr, "snapshot", fmt.Errorf("unknown subcommand %q (want create, ls or rm)", sub))
	case len(pos) != n:
		return usageErr(c.stderr, "snapshot "+sub, fmt.Errorf("want %d argument(s), got %d", n, len(pos)))
	}
	rctx, cancel := rpcCtx(ctx)
	defer cancel()
	switch sub {
	case "create":
		s, err := c.sandboxd.CreateSnapshot(rctx, pos[0], *name)
		if err != nil {
			return c.fail("snapshot create", err)
		}
		if format == "json" {
			if err := writeJSON(c.stdout, s); err != nil {
				return c.fail("snapshot create", err)
			}
			return exitOK
		}
		fmt.Fprintf(c.stdout, "%s\t%s\tlevel %s\t%s\n", termsafe.Field(s.GetSnapshotId()), termsafe.Field(s.GetName()), termsafe.Field(s.GetLevel()), units.BytesSize(float64(s.GetSizeBytes())))
	case "ls":
		list, err := c.sandboxd.ListSnapshots(rctx, *sandbox)
		if err != nil {
			return c.fail("snapshot ls", err)
		}
		if format == "json" {
			if err := writeJSONList(c.stdout, list); err != nil {
				return c.fail("snapshot ls", err)
			}
			return exitOK
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SNAPSHOT\tNAME\tTENANT\tSANDBOX\tLEVEL\tSIZE\tCREATED")
		for _, s := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", termsafe.Field(s.GetSnapshotId()), termsafe.Field(s.GetName()), termsafe.Field(s.GetTenant()),
				termsafe.Field(s.GetSandboxId()), termsafe.Field(s.GetLevel()), units.BytesSize(float64(s.GetSizeBytes())), formatTime(s.GetCreatedAt()))
		}
		if err := tw.Flush(); err != nil {
			return c.fail("snapshot ls", err)
		}
	case "rm":
		if err := c.sandboxd.DeleteSnapshot(rctx, pos[0]); err != nil {
			return c.fail("snapshot rm", err)
		}
	}
	return exitOK
}

// userList is a repeatable --user flag.
type userList []string

func (u *userList) String() string     { return fmt.Sprint([]string(*u)) }
func (u *userList) Set(s string) error { *u = append(*u, s); return nil }

// cmdFork forks a sandbox and prints each fork (or why it failed).
func cmdFork(ctx context.Context, c *cli, args []string) int {
	fs := flag.NewFlagSet("fork", flag.ContinueOnError)
	count := fs.Int("count", 1, "how many forks (1 to 20)")
	var users userList
	fs.Var(&users, "user", "a fork's user (repeat: one per fork; default generated)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return usageErr(c.stderr, "fork", err)
	}
	if len(pos) != 1 {
		return usageErr(c.stderr, "fork", fmt.Errorf("want SANDBOX_ID, got %d arguments", len(pos)))
	}
	if len(users) > 0 && !isFlagSet(fs, "count") {
		*count = len(users)
	}
	rctx, cancel := rpcCtx(ctx)
	defer cancel()
	forks, err := c.sandboxd.ForkSandbox(rctx, pos[0], *count, users)
	if err != nil {
		return c.fail("fork", err)
	}
	code := exitOK
	for i, f := range forks {
		if f.Err != nil {
			code = c.fail(fmt.Sprintf("fork %d", i+1), f.Err)
			continue
		}
		fmt.Fprintf(c.stdout, "%s\t%s\t%s\n", termsafe.Field(f.Sandbox.GetSandboxId()), termsafe.Field(f.Sandbox.GetUserId()), wakeSummary(f.Woke))
	}
	return code
}

// isFlagSet reports whether the command line set flag name.
func isFlagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
