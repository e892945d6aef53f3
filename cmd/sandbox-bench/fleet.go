package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/go-units"
	"golang.org/x/sync/errgroup"
)

// fleet creates the sandboxes the throughput, memory and reattach figures
// share, each with Python started and x = 21 defined, and returns their IDs.
func (b *bench) fleet(ctx context.Context) ([]string, error) {
	n := max(b.cfg.Users, b.cfg.IdleSandboxes, b.cfg.Reattach)
	b.progress("creating %d sandboxes", n)
	ids := make([]string, n)
	var made atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	// A few at a time: Docker serialises much of container creation anyway,
	// and sandboxd must stay responsive for the figures.
	g.SetLimit(4)
	for i := range n {
		g.Go(func() error {
			sb, err := b.newSandbox(gctx, fmt.Sprintf("fleet-%d", i), nil)
			if err != nil {
				return err
			}
			if _, err := b.c.exec(gctx, sb, "python", "x = 21"); err != nil {
				return err
			}
			ids[i] = sb
			if k := made.Add(1); k%25 == 0 {
				b.progress("%d of %d sandboxes ready", k, n)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("creating %d sandboxes: %w", n, err)
	}
	return ids, nil
}

// throughput runs x * 2 from one client per sandbox, all at once, for the
// configured duration, and compares with docker exec doing the same.
func (b *bench) throughput(ctx context.Context, sbs []string) error {
	var ok, failed atomic.Int64
	var mu sync.Mutex
	var all latencies
	var firstErr error
	start := time.Now()
	deadline := start.Add(b.cfg.Duration)
	var wg sync.WaitGroup
	for _, sb := range sbs {
		wg.Go(func() {
			var mine latencies
			for time.Now().Before(deadline) {
				d, err := b.c.expect(ctx, sb, "x * 2", "42")
				if err != nil {
					failed.Add(1)
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					continue
				}
				ok.Add(1)
				mine = append(mine, d)
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	rate := float64(ok.Load()) / time.Since(start).Seconds()
	errs := failed.Load()

	b.progress("peer: docker exec with %d users", len(sbs))
	var ctrs []string
	for _, sb := range sbs {
		c, err := containerOf(ctx, sb)
		if err != nil {
			return err
		}
		ctrs = append(ctrs, c)
	}
	peerRate, peerErrs, err := dockerExecThroughput(ctx, ctrs, b.cfg.Duration)
	peer := nan
	note := fmt.Sprintf("%d users for %v, one sandbox each; under load p50 %s ms, p99 %s ms; %d errors", len(sbs), b.cfg.Duration,
		fmtNum(ms(all.percentile(50))), fmtNum(ms(all.percentile(99))), errs)
	if firstErr != nil {
		note += " (first: " + firstErr.Error() + ")"
	}
	if err != nil {
		note += "; docker exec peer failed: " + err.Error()
	} else {
		peer = peerRate
		note += fmt.Sprintf("; docker exec peer: %d errors", peerErrs)
	}
	t := &target{text: "≥ 1000/s, 0 errors", ok: func(v float64, _ *float64) bool { return v >= 1000 && errs == 0 }}
	b.rep.add(row(mThroughput, rate, fmt.Sprintf("docker exec, %d users", len(sbs)), peer, t, note))
	if firstErr != nil {
		return fmt.Errorf("%d of %d executions failed; first: %w", errs, errs+ok.Load(), firstErr)
	}
	return err
}

// idleMemory reads idle sandboxes' memory from their cgroups and says how
// many fit in the budget, next to idle Jupyter kernels.
func (b *bench) idleMemory(ctx context.Context, sbs []string) error {
	var ws, total []float64
	source := ""
	var ctrs []string
	for _, sb := range sbs {
		c, err := containerOf(ctx, sb)
		if err != nil {
			b.fail(err, mIdleMemory, mIdleFit)
			return err
		}
		ctrs = append(ctrs, c)
		m, err := readContainerMemory(ctx, c)
		if err != nil {
			b.fail(err, mIdleMemory, mIdleFit)
			return err
		}
		ws, total, source = append(ws, float64(m.workingSet)/mib), append(total, float64(m.total)/mib), m.source
	}
	mean := func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += x
		}
		return s / float64(len(v))
	}
	perSandbox := mean(ws)
	idleCPU := b.idleCPU(ctx, ctrs)
	jupyter := nan
	if b.jupyterRSS > 0 {
		jupyter = float64(b.jupyterRSS) / mib
	}
	note := fmt.Sprintf("mean over %d idle sandboxes (Python started, x defined), max %s MiB; cgroup total including page cache: mean %s MiB; from %s; the peer is the idle kernel process's RSS; %s",
		len(sbs), fmtNum(slices.Max(ws)), fmtNum(mean(total)), source, idleCPU)
	b.rep.add(row(mIdleMemory, perSandbox, "idle local Jupyter kernel (RSS)", jupyter, atMost(30, "≤ 30 MiB"), note))

	budget := float64(b.cfg.MemoryBudgetBytes) / mib
	fit := float64(int(budget / perSandbox))
	jfit := nan
	if !math.IsNaN(jupyter) {
		jfit = float64(int(budget / jupyter))
	}
	// The target: ≥ 500 per 16 GiB, scaled to the budget.
	want := float64(int(500 * float64(b.cfg.MemoryBudgetBytes) / (16 << 30)))
	budgetText := units.BytesSize(float64(b.cfg.MemoryBudgetBytes))
	b.rep.add(row(mIdleFit, fit, "idle Jupyter kernels", jfit, atLeast(want, fmt.Sprintf("≥ %.0f per %s", want, budgetText)),
		fmt.Sprintf("budget %s divided by the mean working set", budgetText)))
	return nil
}

// idleCPU measures the CPU the idle sandboxes use over the run's duration,
// from their cgroups, and says it in words: idle sandboxes cost CPU too,
// which also bounds how many a host keeps.
func (b *bench) idleCPU(ctx context.Context, ctrs []string) string {
	read := func() (time.Duration, error) {
		var sum time.Duration
		for _, c := range ctrs {
			d, err := readContainerCPU(c)
			if err != nil {
				return 0, err
			}
			sum += d
		}
		return sum, nil
	}
	before, err := read()
	if err != nil {
		return "idle CPU not measured: " + err.Error()
	}
	start := time.Now()
	select {
	case <-ctx.Done():
		return "idle CPU not measured: " + ctx.Err().Error()
	case <-time.After(b.cfg.Duration):
	}
	after, err := read()
	if err != nil {
		return "idle CPU not measured: " + err.Error()
	}
	perSec := float64(after-before) / float64(len(ctrs)) / time.Since(start).Seconds() / float64(time.Millisecond)
	return fmt.Sprintf("idle CPU %s ms per second per sandbox (cgroup CPU time over %v)", fmtNum(perSec), b.cfg.Duration)
}
