package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

// warm measures the warm round trip and its peers.
func (b *bench) warm(ctx context.Context) error {
	sb, err := b.newSandbox(ctx, "warm", nil)
	if err != nil {
		b.fail(err, mWarmP50, mWarmP90, mWarmP99, mWarmRun, mWarmJupyter50, mWarmJupyter99)
		return err
	}
	if _, err := b.c.exec(ctx, sb, "python", "x = 21"); err != nil {
		b.fail(err, mWarmP50, mWarmP90, mWarmP99, mWarmRun, mWarmJupyter50, mWarmJupyter99)
		return err
	}
	var ours latencies
	for i := range b.cfg.Warmup + b.cfg.Iterations {
		d, err := b.c.expect(ctx, sb, "x * 2", "42")
		if err != nil {
			b.fail(err, mWarmP50, mWarmP90, mWarmP99, mWarmRun, mWarmJupyter50, mWarmJupyter99)
			return err
		}
		if i >= b.cfg.Warmup {
			ours = append(ours, d)
		}
	}

	b.progress("peer: docker exec")
	var peerErrs []error
	execPeer := latencies(nil)
	ctr, err := containerOf(ctx, sb)
	if err == nil {
		execPeer, err = dockerExecLatency(ctx, ctr, b.cfg.PeerIterations)
	}
	execNote := ""
	if err != nil {
		execNote, peerErrs = "docker exec peer failed: "+err.Error(), append(peerErrs, err)
	}
	pv := func(l latencies, p float64) float64 {
		if l == nil {
			return nan
		}
		return ms(l.percentile(p))
	}
	b.warmP50, b.warmP99 = ms(ours.percentile(50)), ms(ours.percentile(99))
	const execPeerName = "docker exec … python3 -c (per call)"
	b.rep.add(row(mWarmP50, ms(ours.percentile(50)), execPeerName, pv(execPeer, 50), both(atMost(1, "≤ 1 ms"), ratioAtLeast(50, "≥ 50× docker exec")), execNote))
	b.rep.add(row(mWarmP90, ms(ours.percentile(90)), execPeerName, pv(execPeer, 90), nil, ""))
	b.rep.add(row(mWarmP99, ms(ours.percentile(99)), execPeerName, pv(execPeer, 99), atMost(5, "≤ 5 ms"), ""))

	b.progress("peer: docker run --rm")
	runPeer, err := dockerRunLatency(ctx, b.cfg.image, b.cfg.runtime, b.cfg.PeerIterations)
	runNote := ""
	if err != nil {
		runNote, peerErrs = "docker run peer failed: "+err.Error(), append(peerErrs, err)
	}
	b.dockerRunP50 = pv(runPeer, 50)
	b.rep.add(row(mWarmRun, ms(ours.percentile(50)), "docker run --rm … python3 -c (p50)", b.dockerRunP50, nil, runNote))

	b.progress("peer: Jupyter kernel")
	jup, rss, err := jupyterLatency(ctx, b.cfg.jupyterPython, b.cfg.Iterations, b.cfg.Warmup)
	jupNote := ""
	switch {
	case errors.Is(err, errNoJupyter):
		jupNote = "Jupyter peer not measured: " + err.Error()
	case err != nil:
		jupNote, peerErrs = "Jupyter peer failed: "+err.Error(), append(peerErrs, err)
	default:
		b.jupyterRSS = rss
	}
	b.rep.add(row(mWarmJupyter50, ms(ours.percentile(50)), "local Jupyter kernel (jupyter_client, p50)", pv(jup, 50), &target{text: "faster than Jupyter", ok: func(_ float64, r *float64) bool { return r != nil && *r > 1 }}, jupNote))
	b.rep.add(row(mWarmJupyter99, ms(ours.percentile(99)), "local Jupyter kernel (p99)", pv(jup, 99), nil, ""))
	return errors.Join(peerErrs...)
}

// cold measures a new user's first result without a warm pool: acquire
// (which creates and starts a container) and run a first command, whose
// result needs the sandbox's Python to be up.
func (b *bench) cold(ctx context.Context) error {
	var total, acquire latencies
	for i := range b.cfg.Cold {
		start := time.Now()
		sb, err := b.newSandbox(ctx, fmt.Sprintf("cold-%d", i), nil)
		a := time.Since(start)
		if err == nil {
			_, err = b.c.expect(ctx, sb, "1 + 1", "2")
		}
		if err != nil {
			b.fail(err, mCold)
			return err
		}
		total, acquire = append(total, time.Since(start)), append(acquire, a)
		// Leave the machine as it was: later figures must not pay for these.
		if err := b.deleteSandbox(ctx, sb); err != nil {
			return err
		}
	}
	b.coldP50 = ms(total.percentile(50))
	note := fmt.Sprintf("over %d new users; AcquireSandbox alone (all sandboxd does to create and start a sandbox) p50 %s ms, the rest waits for the sandbox's Python to start; max %s ms",
		b.cfg.Cold, fmtNum(ms(acquire.percentile(50))), fmtNum(ms(total.percentile(100))))
	b.rep.add(row(mCold, b.coldP50, "docker run --rm … python3 -c (p50)", b.dockerRunP50, atMost(400, "≤ 400 ms"), note))
	return nil
}

// warmPool measures a new user's first result when sandboxd keeps a warm
// pool: it starts a second sandboxd with --warm-pool and, before each new
// user, waits until the pool is full again and idle, so each figure is what
// a user arriving at a steady pool gets.
func (b *bench) warmPool(ctx context.Context) error {
	switch {
	case b.d == nil:
		b.rep.add(row(mPool, nan, "", nan, atMost(30, "≤ 30 ms"), "not measured: needs a self-started sandboxd (no --addr) to run one with --warm-pool"))
		return nil
	case b.cfg.WarmPool == 0:
		b.rep.add(row(mPool, nan, "", nan, atMost(30, "≤ 30 ms"), "not measured: --warm-pool 0"))
		return nil
	}
	cfg := b.dcfg
	cfg.stateDir = filepath.Join(b.tmp, "pool-state")
	cfg.extra = []string{"--warm-pool", fmt.Sprint(b.cfg.WarmPool)}
	d, err := startDaemon(ctx, cfg, "127.0.0.1:0")
	if errors.Is(err, errFlagUnsupported) {
		b.rep.add(row(mPool, nan, "", nan, atMost(30, "≤ 30 ms"), "not measured: this sandboxd has no --warm-pool flag"))
		return nil
	}
	if err != nil {
		b.removeLeftovers(cfg.stateDir)
		b.fail(err, mPool)
		return err
	}
	c, err := dial(d.addr, b.runID)
	if err != nil {
		d.kill()
		b.removeLeftovers(cfg.stateDir)
		b.fail(err, mPool)
		return err
	}
	var claimed []string
	defer func() {
		deleteAll(c, claimed, b.progress)
		c.close()
		b.drainPool(d, cfg)
	}()
	var first latencies
	for i := range b.cfg.PoolAcquisitions {
		// i users hold a sandbox each; the pool holds WarmPool more.
		if err := waitIdle(ctx, cfg.stateDir, i+b.cfg.WarmPool, 3*time.Minute); err != nil {
			b.fail(err, mPool)
			return err
		}
		start := time.Now()
		sb, err := c.acquire(ctx, b.user(fmt.Sprintf("pool-%d", i)), nil)
		if err == nil {
			claimed = append(claimed, sb)
			_, err = c.expect(ctx, sb, "1 + 1", "2")
		}
		if err != nil {
			b.fail(err, mPool)
			return err
		}
		first = append(first, time.Since(start))
	}
	note := fmt.Sprintf("sandboxd --warm-pool %d, %d new users, each after the pool refilled; max %s ms",
		b.cfg.WarmPool, b.cfg.PoolAcquisitions, fmtNum(ms(first.percentile(100))))
	b.poolP50 = ms(first.percentile(50))
	b.rep.add(row(mPool, b.poolP50, "no pool (cold, same run, p50)", b.coldP50, atMost(30, "≤ 30 ms"), note))
	return nil
}

// drainPool stops the pool's sandboxd and has a sandboxd without a pool
// remove the pool's sandboxes (at start-up it removes pool sandboxes beyond
// its pool size), since only sandboxd can remove everything they hold.
func (b *bench) drainPool(d *daemon, cfg daemonConfig) {
	defer b.removeLeftovers(cfg.stateDir)
	if err := d.stop(); err != nil {
		b.progress("stopping the warm-pool sandboxd: %v", err)
		return
	}
	cfg.extra = nil
	d, err := startDaemon(context.Background(), cfg, "127.0.0.1:0")
	if err != nil {
		b.progress("restarting sandboxd to empty the warm pool: %v", err)
		return
	}
	if err := d.stop(); err != nil {
		b.progress("stopping sandboxd: %v", err)
	}
}

// waitIdle waits until at least n sandboxes under stateDir are idle by the
// /io protocol: the driver runs Python (driver.json), has taken every record
// of the command log (state.json) and every command it took is done. A
// warm-pool sandbox is idle once its warm-up command finished.
func waitIdle(ctx context.Context, stateDir string, n int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		ready := 0
		ios, _ := filepath.Glob(filepath.Join(stateDir, "sandboxes", "*", "io"))
		for _, io := range ios {
			if idle(io) {
				ready++
			}
		}
		if ready >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d sandboxes were idle after %v", ready, n, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// idle reports whether the sandbox with this /io directory is idle.
func idle(io string) bool {
	var st ioproto.DriverStatus
	if ioproto.ReadJSONFile(filepath.Join(io, ioproto.DriverStatusFile), &st) != nil || st.KernelPID == 0 {
		return false
	}
	var state ioproto.State
	log, err := os.Stat(filepath.Join(io, ioproto.StdinFile))
	if err != nil || log.Size() == 0 || ioproto.ReadJSONFile(filepath.Join(io, ioproto.StateFile), &state) != nil || state.Offset != log.Size() {
		return false
	}
	files, _ := filepath.Glob(filepath.Join(io, ioproto.OutDir, "*"+ioproto.EventsFileName("")))
	for _, f := range files {
		if !endsWithDone(f) {
			return false
		}
	}
	return len(files) > 0
}

// endsWithDone reports whether an events file's last event is done.
func endsWithDone(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	lines := bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
	ev, err := ioproto.ParseEvent(lines[len(lines)-1])
	return err == nil && ev.Type == ioproto.EventDone
}

// deleteSandbox deletes a sandbox the run no longer needs.
func (b *bench) deleteSandbox(ctx context.Context, id string) error {
	if err := b.c.delete(ctx, id); err != nil {
		return fmt.Errorf("delete sandbox %s: %w", id, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, c := range b.created {
		if c == id {
			b.created = append(b.created[:i], b.created[i+1:]...)
			break
		}
	}
	return nil
}
