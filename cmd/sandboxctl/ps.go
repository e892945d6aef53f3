package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/sandboxd/sandboxd/internal/termsafe"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// cmdPs lists a sandbox's commands in a table: ID, language, state, how a
// finished one ended, when it started, how long it ran, and whether its
// output can still be streamed (resume).
func cmdPs(ctx context.Context, c *cli, args []string) int {
	fs := flag.NewFlagSet("ps", flag.ContinueOnError)
	limit := fs.Int("limit", 50, "most commands to list; 0 lists all")
	var format formatFlag
	format.register(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return usageErr(c.stderr, "ps", err)
	}
	if len(pos) != 1 {
		return usageErr(c.stderr, "ps", fmt.Errorf("want SANDBOX_ID, got %d arguments", len(pos)))
	}
	if *limit < 0 {
		return usageErr(c.stderr, "ps", fmt.Errorf("--limit %d is negative", *limit))
	}
	var all []*sandboxv1.CommandInfo
	token := ""
	for {
		size := 200
		if *limit > 0 {
			size = min(size, *limit-len(all))
		}
		rctx, cancel := rpcCtx(ctx)
		cmds, next, err := c.sandboxd.ListCommands(rctx, pos[0], size, token)
		cancel()
		if err != nil {
			return c.fail("ps "+pos[0], err)
		}
		all = append(all, cmds...)
		if next == "" || (*limit > 0 && len(all) >= *limit) {
			break
		}
		token = next
	}
	if format == "json" {
		if err := writeJSONList(c.stdout, all); err != nil {
			return c.fail("ps", err)
		}
		return exitOK
	}
	if len(all) == 0 {
		fmt.Fprintf(c.stdout, "No commands in sandbox %s yet.\n", termsafe.Field(pos[0]))
		return exitOK
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COMMAND_ID\tLANGUAGE\tSTATE\tSTATUS\tEXIT\tSTARTED\tDURATION\tOUTPUT")
	for _, cmd := range all {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", termsafe.Field(cmd.GetCommandId()), orDash(languageLabel(cmd)), stateLabel(cmd.GetState()),
			statusLabel(cmd.GetStatus()), exitLabel(cmd), formatTime(cmd.GetStartedAt()), durationLabel(cmd), outputLabel(cmd))
	}
	if err := tw.Flush(); err != nil {
		return c.fail("ps", err)
	}
	return exitOK
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// languageLabel is the language (escaped: a command's is as its caller
// sent it), marked when the command reads input.
func languageLabel(c *sandboxv1.CommandInfo) string {
	l := termsafe.Field(c.GetLanguage())
	switch {
	case c.GetPty():
		return l + "+pty"
	case c.GetStdin():
		return l + "+stdin"
	}
	return l
}

func stateLabel(s sandboxv1.CommandState) string {
	if s == sandboxv1.CommandState_COMMAND_STATE_UNSPECIFIED {
		return "unknown"
	}
	return strings.ToLower(strings.TrimPrefix(s.String(), "COMMAND_STATE_"))
}

func statusLabel(s sandboxv1.CommandStatus) string {
	if s == sandboxv1.CommandStatus_COMMAND_STATUS_UNSPECIFIED {
		return "-"
	}
	return strings.ToLower(strings.TrimPrefix(s.String(), "COMMAND_STATUS_"))
}

func exitLabel(c *sandboxv1.CommandInfo) string {
	if c.ExitCode == nil {
		return "-"
	}
	return strconv.Itoa(int(c.GetExitCode()))
}

func durationLabel(c *sandboxv1.CommandInfo) string {
	if c.GetDuration() == nil {
		return "-"
	}
	return c.GetDuration().AsDuration().String()
}

func outputLabel(c *sandboxv1.CommandInfo) string {
	switch {
	case c.GetOutputAvailable():
		return "yes"
	case c.GetState() == sandboxv1.CommandState_COMMAND_STATE_QUEUED:
		return "-"
	}
	return "pruned"
}
