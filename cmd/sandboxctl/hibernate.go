package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/sandboxd/sandboxd/internal/termsafe"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// cmdHibernate hibernates each named sandbox and prints its snapshot.
func cmdHibernate(ctx context.Context, c *cli, args []string) int {
	fs := flag.NewFlagSet("hibernate", flag.ContinueOnError)
	ids, err := parseArgs(fs, args)
	if err != nil {
		return usageErr(c.stderr, "hibernate", err)
	}
	if len(ids) == 0 {
		return usageErr(c.stderr, "hibernate", fmt.Errorf("give one or more SANDBOX_IDs"))
	}
	code := exitOK
	for _, id := range ids {
		rctx, cancel := rpcCtx(ctx)
		sb, err := c.sandboxd.Hibernate(rctx, id)
		cancel()
		if err != nil {
			code = c.fail("hibernate "+id, err)
			continue
		}
		fmt.Fprintf(c.stdout, "%s\t%s\n", termsafe.Field(sb.GetSandboxId()), sandboxStateLabel(sb))
	}
	return code
}

// cmdWake wakes each named sandbox and prints how its state came back.
func cmdWake(ctx context.Context, c *cli, args []string) int {
	fs := flag.NewFlagSet("wake", flag.ContinueOnError)
	ids, err := parseArgs(fs, args)
	if err != nil {
		return usageErr(c.stderr, "wake", err)
	}
	if len(ids) == 0 {
		return usageErr(c.stderr, "wake", fmt.Errorf("give one or more SANDBOX_IDs"))
	}
	code := exitOK
	for _, id := range ids {
		rctx, cancel := rpcCtx(ctx)
		sb, w, err := c.sandboxd.Wake(rctx, id)
		cancel()
		if err != nil {
			code = c.fail("wake "+id, err)
			continue
		}
		fmt.Fprintf(c.stdout, "%s\t%s\t%s\n", termsafe.Field(sb.GetSandboxId()), stateName(sb.GetState()), wakeSummary(w))
	}
	return code
}

// wakeSummary is one line on how a wake brought the state back; the
// names lost and the reason are the sandbox's, escaped.
func wakeSummary(w *sandboxv1.WakeInfo) string {
	if w == nil {
		return "was running"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "level %s, %d names restored", termsafe.Field(w.GetLevel()), len(w.GetRestoredNames()))
	if n := len(w.GetLost()); n > 0 {
		lost := make([]string, 0, n)
		for _, l := range w.GetLost() {
			lost = append(lost, termsafe.Field(l.GetName()))
		}
		fmt.Fprintf(&b, ", lost: %s", strings.Join(lost, ", "))
	}
	if r := w.GetReason(); r != "" {
		fmt.Fprintf(&b, " (%s)", termsafe.Line(r))
	}
	return b.String()
}

// sandboxStateLabel is the STATE column of `list`: the state, and for a
// hibernated sandbox its snapshot's level and size.
func sandboxStateLabel(sb *sandboxv1.Sandbox) string {
	name := stateName(sb.GetState())
	if sb.GetState() == sandboxv1.SandboxState_SANDBOX_STATE_HIBERNATED {
		if s := sb.GetSnapshot(); s != nil {
			return fmt.Sprintf("%s(%s,%s)", name, termsafe.Field(s.GetLevel()), formatBytes(s.GetSizeBytes()))
		}
	}
	return name
}

// formatBytes prints a size with a binary unit.
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
