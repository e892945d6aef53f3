package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
)

// The sampling figures: what per-sandbox metrics cost sandboxd. One
// sampler goroutine reads each running sandbox's cgroup files and volumes
// every --metrics-sample-interval; its cost is sandboxd's CPU time with N
// running sandboxes sampled, next to the same sandboxes with sampling off,
// both in this run.
var (
	// Its name gets N (--sampling-sandboxes) and the interval.
	mSamplingCPU = metric{"sampling_cpu", "sandboxd CPU, %d running sandboxes sampled every %v", "% of a core", true, "less", "more"}
	mSamplingOne = metric{"sampling_cost_per_sample", "sandboxd CPU per sandbox sample (sampled less unsampled)", "µs", true, "less", "more"}
)

// samplingInterval is sandboxd's default --metrics-sample-interval, the one
// measured.
const samplingInterval = 5 * time.Second

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture sandboxd runs on.
const clockTicks = 100

// sampling restarts the self-started sandboxd with sampling off, then on,
// with b.cfg.SamplingSandboxes running sandboxes, and measures its CPU
// over b.cfg.SamplingWindow each time. sandboxd is left as the suite
// started it (sampling on, at the default interval).
func (b *bench) sampling(ctx context.Context) error {
	mOn := mSamplingCPU
	mOn.name = fmt.Sprintf(mOn.name, b.cfg.SamplingSandboxes, samplingInterval)
	if b.d == nil {
		note := "not measured: needs a self-started sandboxd (no --addr), which it restarts with sampling off and on"
		b.rep.add(row(mOn, nan, "", nan, nil, note))
		b.rep.add(row(mSamplingOne, nan, "", nan, nil, note))
		return nil
	}
	fail := func(err error) error {
		b.fail(err, mOn, mSamplingOne)
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	ids := make([]string, b.cfg.SamplingSandboxes)
	for i := range ids {
		g.Go(func() error {
			id, err := b.newSandbox(gctx, fmt.Sprintf("sampled-%d", i), nil)
			ids[i] = id
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return fail(err)
	}
	running, err := containersOf(ctx, b.dcfg.stateDir, false)
	if err != nil {
		return fail(err)
	}
	measure := func(interval time.Duration) (float64, error) {
		if err := b.restartWith(ctx, "--metrics-sample-interval", interval.String()); err != nil {
			return 0, err
		}
		return cpuOver(ctx, b.d.pid(), b.cfg.SamplingWindow)
	}
	off, err := measure(0)
	if err != nil {
		return fail(err)
	}
	on, err := measure(samplingInterval)
	if err != nil {
		return fail(err)
	}
	// The sampler ran: a sandbox has samples.
	samples, err := b.c.sb.SandboxMetrics(ctx, ids[0], time.Time{})
	if err != nil {
		return fail(err)
	}
	if len(samples) == 0 && b.cfg.SamplingWindow >= samplingInterval {
		return fail(errors.New("no samples of a running sandbox after the window with sampling on"))
	}
	window := b.cfg.SamplingWindow.Seconds()
	rounds := window / samplingInterval.Seconds()
	perSample := (on - off) / 100 * window / (rounds * float64(len(running))) * 1e6
	b.rep.add(row(mOn, on, "the same, sampling off (--metrics-sample-interval 0)", off, nil,
		fmt.Sprintf("utime+stime of sandboxd over %v each (from /proc/PID/stat), %d containers running, after a restart with each setting; %d samples kept of one sandbox",
			b.cfg.SamplingWindow, len(running), len(samples))))
	b.rep.add(row(mSamplingOne, max(perSample, 0), "", nan, nil,
		fmt.Sprintf("(sampled − unsampled CPU) / samples taken (%d sandboxes × %.0f rounds); 0 when the difference is below the noise", len(running), rounds)))
	return nil
}

// restartWith restarts the self-started sandboxd on its address with
// extra flags after its own (the last of a repeated flag wins) and
// reconnects.
func (b *bench) restartWith(ctx context.Context, extra ...string) error {
	addr := b.d.addr
	if err := b.d.stop(); err != nil {
		return err
	}
	b.c.close()
	cfg := b.dcfg
	cfg.extra = append(append([]string(nil), cfg.extra...), extra...)
	d, err := startDaemon(ctx, cfg, addr)
	if err != nil {
		return err
	}
	b.d = d
	c, err := dial(addr, b.runID)
	if err != nil {
		return err
	}
	b.c = c
	return nil
}

// cpuOver is the CPU process pid uses over window, in percent of a core.
func cpuOver(ctx context.Context, pid int, window time.Duration) (float64, error) {
	before, err := cpuTicks(pid)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(window): // the measurement's window, not a wait for an event
	}
	after, err := cpuTicks(pid)
	if err != nil {
		return 0, err
	}
	return 100 * float64(after-before) / clockTicks / time.Since(start).Seconds(), nil
}

// cpuTicks is a process's utime+stime, in clock ticks.
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatTicks(b)
}

// parseStatTicks reads utime and stime (fields 14 and 15) of a
// /proc/PID/stat line; the command name (field 2) may hold spaces and
// parentheses, so the fields are counted after its last ')'.
func parseStatTicks(b []byte) (int64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("/proc/PID/stat: no command name")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("/proc/PID/stat: too few fields")
	}
	// f[0] is field 3 (state): utime is field 14, f[11].
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/PID/stat: %w", err)
	}
	return u + s, nil
}
