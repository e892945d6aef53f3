package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/termsafe"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// cmdSetTimeout sets a sandbox's idle timeout and prints its new expiry.
func cmdSetTimeout(ctx context.Context, c *cli, args []string) int {
	fs := flag.NewFlagSet("set-timeout", flag.ContinueOnError)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return usageErr(c.stderr, "set-timeout", err)
	}
	if len(pos) != 2 {
		return usageErr(c.stderr, "set-timeout", fmt.Errorf("want SANDBOX_ID DURATION, got %d arguments", len(pos)))
	}
	d, err := time.ParseDuration(pos[1])
	if err != nil {
		return usageErr(c.stderr, "set-timeout", fmt.Errorf("DURATION %q: want e.g. 90s, 30m or 2h", pos[1]))
	}
	rctx, cancel := rpcCtx(ctx)
	defer cancel()
	sb, err := c.sandboxd.SetTimeout(rctx, pos[0], d)
	if err != nil {
		return c.fail("set-timeout "+pos[0], err)
	}
	fmt.Fprintf(c.stdout, "%s\tidle timeout %v\texpires %s\n", termsafe.Field(sb.GetSandboxId()), sb.GetIdleTimeout().AsDuration(), formatTime(sb.GetExpiresAt()))
	return exitOK
}

// metadataFlag collects repeated --metadata K=V flags.
type metadataFlag map[string]string

func (m metadataFlag) String() string { return formatMetadata(m) }

func (m metadataFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q: want KEY=VALUE", s)
	}
	m[k] = v
	return nil
}

// filter is the flags' pairs, or nil for none.
func (m metadataFlag) filter() map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}

// anyMetadata reports whether any of sbs has metadata.
func anyMetadata(sbs []*sandboxv1.Sandbox) bool {
	return slices.ContainsFunc(sbs, func(sb *sandboxv1.Sandbox) bool { return len(sb.GetMetadata()) > 0 })
}

// formatMetadata prints metadata as k=v pairs sorted by key, comma-separated,
// with values quoted when they hold anything but plain characters (keys
// escaped, termsafe.Field); "-" for none.
func formatMetadata(md map[string]string) string {
	if len(md) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(md))
	for _, k := range slices.Sorted(maps.Keys(md)) {
		v := md[k]
		if v == "" || strings.ContainsFunc(v, func(r rune) bool { return r <= ' ' || r == ',' || r == '=' || r == '"' || r > '~' }) {
			v = fmt.Sprintf("%q", v)
		}
		parts = append(parts, termsafe.Field(k)+"="+v)
	}
	return strings.Join(parts, ",")
}
