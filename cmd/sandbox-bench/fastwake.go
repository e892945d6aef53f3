package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/labels"
	"github.com/sandboxd/sandboxd/orchestrator/metrics"
)

// Fast wake figures: a hibernated sandbox woken in a started warm-pool
// container (sandboxd --warm-pool, fast wake on), next to the ordinary
// wake of the same namespace and the cold create, all in the same run.
var (
	mFastWakeSmall = metric{"fast_wake_small_first_result", "fast wake to first result, numpy/pandas namespace (level globals)", "ms", true, "faster", "slower"}
	mFastWakeLarge = metric{"fast_wake_100mb_first_result", "fast wake to first result, ~100 MB of numpy/pandas (level globals)", "ms", true, "faster", "slower"}
	mPoolMemory    = metric{"warm_pool_sandbox_memory", "memory of an idle warm-pool sandbox that can carry a fast wake", "MiB", true, "less", "more"}
)

// fastWakeRounds is how many hibernate/wake rounds each namespace gets,
// on each path.
const fastWakeRounds = 5

// A small namespace that imported numpy and pandas (the case).
const (
	fwSmallSetup = "import numpy as np, pandas as pd\nx = 21\nv = np.arange(3)\nframe = pd.DataFrame({'a': [1, 2]})\n"
	fwSmallCheck = "x * 2 + int(v.sum() + frame.a.sum()) - 6"
)

// fastWake measures the fast wake (its own sandboxd, with make run's
// default warm pool) and the ordinary wake (the main sandboxd, without a pool) of the
// same namespaces, fastWakeRounds each, and an idle pool sandbox's memory.
func (b *bench) fastWake(ctx context.Context) error {
	all := []metric{mFastWakeSmall, mFastWakeLarge, mPoolMemory}
	if b.d == nil {
		for _, m := range all {
			b.rep.add(row(m, nan, "", nan, nil, "not measured: needs a self-started sandboxd (no --addr) to run one with --warm-pool"))
		}
		return nil
	}
	pd, err := b.startPoolDaemon(ctx, "fastwake-state")
	if err != nil {
		b.fail(err, all...)
		return err
	}
	defer pd.stop()
	c, cfg, metricsAddr, made := pd.c, pd.cfg, pd.metricsAddr, &pd.made

	// An idle pool sandbox: what keeping one ready costs.
	if err := waitPoolReady(ctx, metricsAddr, 3*time.Minute); err != nil {
		b.fail(err, all...)
		return err
	}
	if mem, err := poolMemory(ctx, cfg.stateDir); err == nil {
		idle := nan
		for _, r := range b.rep.Rows {
			if r.Key == mIdleMemory.key && r.Value != nil {
				idle = *r.Value
			}
		}
		b.rep.add(row(mPoolMemory, float64(mem.workingSet)/mib, "idle running sandbox", idle, nil,
			"working set of its container ("+mem.source+"): its kernel imported dill, numpy and pandas for the wakes it may carry"))
	} else {
		b.fail(err, mPoolMemory)
	}

	for _, k := range []struct {
		name, setup, check, want string
		m                        metric
		target                   func(cold float64) *target
	}{
		{"fw-small", fwSmallSetup, fwSmallCheck, "42", mFastWakeSmall, func(cold float64) *target {
			limit, text := 150.0, "≤ 150 ms"
			if !math.IsNaN(cold) {
				limit, text = math.Min(150, cold/2), fmt.Sprintf("≤ 150 ms and ≤ 0.5× cold (%s ms)", fmtNum(cold/2))
			}
			return atMost(limit, text)
		}},
		{"fw-large", hibLargeSetup, "len(big) + len(frame)", "8000000", mFastWakeLarge, func(cold float64) *target {
			if math.IsNaN(cold) {
				return nil
			}
			return atMost(cold, fmt.Sprintf("≤ cold create (%s ms)", fmtNum(cold)))
		}},
	} {
		var fast, plain latencies
		// The ordinary wake, on the main sandboxd (no pool).
		id, err := b.newSandbox(ctx, k.name+"-plain", nil)
		if err == nil {
			_, err = b.c.exec(ctx, id, "python", k.setup)
		}
		for i := 0; err == nil && i < fastWakeRounds; i++ {
			if _, err = b.c.sb.Hibernate(ctx, id); err != nil {
				break
			}
			var dur time.Duration
			if dur, err = b.c.expect(ctx, id, k.check, k.want); err == nil {
				plain = append(plain, dur)
			}
		}
		if err != nil {
			b.fail(err, k.m)
			return err
		}
		// The fast wake, on the pool's sandboxd: each wake once the pool
		// has a ready sandbox, and only wakes that took the pool's count.
		id, err = c.acquire(ctx, b.user(k.name+"-fast"), nil)
		if err == nil {
			*made = append(*made, id)
			_, err = c.exec(ctx, id, "python", k.setup)
		}
		slow := 0
		for err == nil && len(fast) < fastWakeRounds && slow < fastWakeRounds {
			if _, err = c.sb.Hibernate(ctx, id); err != nil {
				break
			}
			if err = waitPoolReady(ctx, metricsAddr, 3*time.Minute); err != nil {
				break
			}
			var dur time.Duration
			if dur, err = c.expect(ctx, id, k.check, k.want); err != nil {
				break
			}
			if carried, cerr := wokeInPool(ctx, id); cerr != nil {
				err = cerr
			} else if carried {
				fast = append(fast, dur)
			} else {
				slow++
			}
		}
		if err == nil && len(fast) == 0 {
			err = fmt.Errorf("none of %d wakes took a pool container", slow)
		}
		if err != nil {
			b.fail(err, k.m)
			return err
		}
		note := fmt.Sprintf("p50 of %d hibernate/wake rounds each, sandboxd with make run's defaults (a warm pool of 2): Execute on the hibernated sandbox woken in a started pool container (its kernel had imported numpy and pandas), then the command; max %s ms; the ordinary wake: a new container", len(fast), fmtNum(ms(fast.percentile(100))))
		if slow > 0 {
			note += fmt.Sprintf("; %d wakes found the pool still refilling and were not counted", slow)
		}
		if !math.IsNaN(b.coldP50) {
			note += fmt.Sprintf("; cold create in this run %s ms", fmtNum(b.coldP50))
		}
		b.rep.add(row(k.m, ms(fast.percentile(50)), "ordinary wake (same run, p50)", ms(plain.percentile(50)), k.target(b.coldP50), note))
	}
	return nil
}

// poolDaemon is a sandboxd of the bench's own with make run's default
// warm pool (--warm-pool unset: two on Docker) and metrics, for the phases
// that measure the pool; the main sandboxd runs with --warm-pool 0.
type poolDaemon struct {
	b           *bench
	d           *daemon
	c           *client
	cfg         daemonConfig
	metricsAddr string
	made        []string // sandboxes to delete at stop
}

// startPoolDaemon starts a poolDaemon on a state directory of its own.
func (b *bench) startPoolDaemon(ctx context.Context, stateDir string, extra ...string) (*poolDaemon, error) {
	cfg := b.dcfg
	cfg.stateDir = filepath.Join(b.tmp, stateDir)
	metricsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cfg.extra = append([]string{"--warm-pool", "-1", "--metrics-listen", metricsAddr}, extra...)
	d, err := startDaemon(ctx, cfg, "127.0.0.1:0")
	if err != nil {
		b.removeLeftovers(cfg.stateDir)
		return nil, err
	}
	c, err := dial(d.addr, b.runID)
	if err != nil {
		d.kill()
		b.removeLeftovers(cfg.stateDir)
		return nil, err
	}
	return &poolDaemon{b: b, d: d, c: c, cfg: cfg, metricsAddr: metricsAddr}, nil
}

// stop deletes the sandboxes made, then stops the sandboxd and empties
// its pool.
func (p *poolDaemon) stop() {
	deleteAll(p.c, p.made, p.b.progress)
	p.c.close()
	p.b.drainPool(p.d, p.cfg)
}

// waitPoolReady waits until sandboxd's warm pool (metrics at addr) holds
// a ready sandbox.
func waitPoolReady(ctx context.Context, addr string, limit time.Duration) error {
	return waitPoolAt(ctx, addr, 1, limit)
}

// poolSize reads sandboxd_warm_pool_size from the metrics at addr.
func poolSize(ctx context.Context, addr string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, metrics.Name(metrics.PoolSizeName)+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, errors.New("no warm-pool size in sandboxd's metrics")
}

// freeAddr returns a loopback address with a port free just now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// wokeInPool reports whether sandbox id runs in a container made for
// another (a pool sandbox's, labelled with that one's ID).
func wokeInPool(ctx context.Context, id string) (bool, error) {
	_, err := containerOf(ctx, id)
	switch {
	case err == nil:
		return false, nil
	case strings.Contains(err.Error(), "has 0 containers"):
		return true, nil
	}
	return false, err
}

// poolMemory reads the memory of the container of a ready pool sandbox
// under stateDir.
func poolMemory(ctx context.Context, stateDir string) (containerMemory, error) {
	metas, _ := filepath.Glob(filepath.Join(stateDir, "sandboxes", "*", "meta.json"))
	for _, m := range metas {
		b, err := os.ReadFile(m)
		if err != nil || !strings.Contains(string(b), `"pool":true`) {
			continue
		}
		cid, err := containerOf(ctx, filepath.Base(filepath.Dir(m)))
		if err != nil {
			return containerMemory{}, err
		}
		return readContainerMemory(ctx, cid)
	}
	return containerMemory{}, errors.New("no warm-pool sandbox (label " + labels.Pool + ")")
}
