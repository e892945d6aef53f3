package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/termsafe"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// cmdTop shows the newest metrics sample of every sandbox the caller sees
// (or of one), as a table refreshed each --interval until interrupted
// (--once: one table). Each round asks a sandbox only for the samples
// taken since the last one shown, so a refresh costs one List and one
// small answer per sandbox.
func cmdTop(ctx context.Context, c *cli, args []string) int {
	fs := flag.NewFlagSet("top", flag.ContinueOnError)
	interval := fs.Duration("interval", 5*time.Second, "refresh every `duration` (sandboxd samples every --metrics-sample-interval, 5s by default)")
	once := fs.Bool("once", false, "print one table and exit")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return usageErr(c.stderr, "top", err)
	}
	if len(pos) > 1 {
		return usageErr(c.stderr, "top", fmt.Errorf("want at most one SANDBOX_ID, got %d arguments", len(pos)))
	}
	if *interval <= 0 {
		return usageErr(c.stderr, "top", fmt.Errorf("--interval %v: want a positive duration", *interval))
	}
	id := ""
	if len(pos) == 1 {
		id = pos[0]
	}
	last := map[string]*sandboxv1.SandboxMetricsSample{}
	t := time.NewTicker(*interval)
	defer t.Stop()
	for {
		rows, err := topRound(ctx, c.sandboxd, id, last)
		if err != nil {
			return c.fail("top", err)
		}
		if !*once {
			fmt.Fprint(c.stdout, "\x1b[H\x1b[2J") // clear the terminal: a live table
		}
		if err := writeTop(c.stdout, rows); err != nil {
			return c.fail("top", err)
		}
		if *once {
			return exitOK
		}
		select {
		case <-ctx.Done():
			return exitOK // interrupted: the table on screen is the last
		case <-t.C:
		}
	}
}

// topRow is a sandbox and its newest sample (nil: none yet, or the
// server has none for it).
type topRow struct {
	sb     *sandboxv1.Sandbox
	sample *sandboxv1.SandboxMetricsSample
}

// topRound fetches the sandboxes (one, or all) and their samples since
// those in last, which it updates.
func topRound(ctx context.Context, sd *client.Client, id string, last map[string]*sandboxv1.SandboxMetricsSample) ([]topRow, error) {
	rctx, cancel := rpcCtx(ctx)
	defer cancel()
	var sbs []*sandboxv1.Sandbox
	if id != "" {
		sb, err := sd.Get(rctx, id)
		if err != nil {
			return nil, err
		}
		sbs = []*sandboxv1.Sandbox{sb}
	} else {
		var err error
		if sbs, err = sd.List(rctx, client.ListFilter{}); err != nil {
			return nil, err
		}
	}
	rows := make([]topRow, 0, len(sbs))
	seen := make(map[string]bool, len(sbs))
	for _, sb := range sbs {
		sid := sb.GetSandboxId()
		seen[sid] = true
		var since time.Time
		if s := last[sid]; s != nil {
			since = s.GetTime().AsTime()
		}
		samples, err := sd.SandboxMetrics(rctx, sid, since)
		switch {
		case err == nil:
			if len(samples) > 0 {
				last[sid] = samples[len(samples)-1]
			}
		case id != "" || errors.Is(err, client.ErrNotImplemented) || errors.Is(err, client.ErrFailedPrecondition):
			// Asked for this one, or a server without metrics (UNIMPLEMENTED;
			// FAILED_PRECONDITION from a sandboxd before that).
			return nil, err
		default:
			// Gone between the listing and now: shown without figures.
		}
		rows = append(rows, topRow{sb: sb, sample: last[sid]})
	}
	for sid := range last {
		if !seen[sid] {
			delete(last, sid)
		}
	}
	return rows, nil
}

// writeTop prints the table.
func writeTop(w io.Writer, rows []topRow) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "No sandboxes.")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SANDBOX_ID\tTENANT\tUSER\tSTATE\tCPU\tMEMORY\tDISK\tPIDS\tNET_IN/OUT")
	for _, r := range rows {
		sb, s := r.sb, r.sample
		cpu, mem, disk, pids, netIO := "-", "-", "-", "-", "-"
		if s != nil {
			cpu = fmt.Sprintf("%.1f%% of %g", cpuPercent(s), s.GetCpuLimitCores())
			mem = usedOf(s.GetMemoryUsedBytes(), s.GetMemoryLimitBytes())
			disk = usedOf(s.GetWorkspace().GetUsedBytes(), s.GetWorkspace().GetLimitBytes())
			pids = fmt.Sprint(s.GetPids())
			if n := s.GetNetwork(); n != nil {
				netIO = formatBytes(int64(min(n.GetBytesIn(), 1<<62))) + "/" + formatBytes(int64(min(n.GetBytesOut(), 1<<62)))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", termsafe.Field(sb.GetSandboxId()), orDash(termsafe.Field(sb.GetTenant())), orDash(termsafe.Field(sb.GetUserId())),
			stateName(sb.GetState()), cpu, mem, disk, pids, netIO)
	}
	return tw.Flush()
}

// cpuPercent is the CPU used as a share of the limit (of one core without
// one).
func cpuPercent(s *sandboxv1.SandboxMetricsSample) float64 {
	if l := s.GetCpuLimitCores(); l > 0 {
		return 100 * s.GetCpuUsedCores() / l
	}
	return 100 * s.GetCpuUsedCores()
}

// usedOf prints "used/limit", or used alone without a limit.
func usedOf(used, limit int64) string {
	if limit <= 0 {
		return formatBytes(used)
	}
	return formatBytes(used) + "/" + formatBytes(limit)
}
