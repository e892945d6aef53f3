package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	sandboxclient "github.com/sandboxd/sandboxd/client"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// Hibernation figures: what hibernating an idle sandbox costs and saves,
// next to the cold create of the same run.
var (
	mHibSmall       = metric{"hibernate_small", "hibernate, small namespace (level globals)", "ms", true, "faster", "slower"}
	mWakeSmall      = metric{"wake_small_first_result", "wake to first result, small namespace (level globals)", "ms", true, "faster", "slower"}
	mHibLarge       = metric{"hibernate_100mb", "hibernate, ~100 MB of numpy/pandas (level globals)", "ms", true, "faster", "slower"}
	mWakeLarge      = metric{"wake_100mb_first_result", "wake to first result, ~100 MB of numpy/pandas (level globals)", "ms", true, "faster", "slower"}
	mSnapLarge      = metric{"snapshot_100mb_size", "snapshot size, ~100 MB of numpy/pandas", "MiB", true, "less", "more"}
	mHibMemory      = metric{"hibernated_memory", "memory of a hibernated sandbox (no container)", "MiB", true, "less", "more"}
	mHibDisk        = metric{"hibernated_disk", "disk per hibernated sandbox (small namespace, volumes and snapshot allocated)", "MiB", true, "less", "more"}
	mHibRSS         = metric{"hibernated_sandboxd_rss", "sandboxd RSS holding the hibernated sandboxes", "MiB", true, "less", "more"}
	mHibListLatency = metric{"hibernated_list", "ListSandboxes with the hibernated sandboxes", "ms", true, "faster", "slower"}
	mHibRSSFresh    = metric{"hibernated_sandboxd_rss_restarted", "sandboxd RSS holding the hibernated sandboxes, after a restart", "MiB", true, "less", "more"}
	mHibRestart     = metric{"hibernated_restart", "restart of sandboxd to SERVING holding the hibernated sandboxes", "ms", true, "faster", "slower"}
)

const (
	hibSmallSetup = "x = 21\nwords = ['a', 'b']\ndef f(v):\n    return 2 * v\n"
	// ~100 MB: 48 MB of float64 array and a 3-column frame of 2M rows (48 MB).
	hibLargeSetup = "import numpy as np, pandas as pd\nbig = np.random.default_rng(1).random(6_000_000)\n" +
		"frame = pd.DataFrame({'a': np.arange(2_000_000, dtype=np.float64), 'b': np.ones(2_000_000), 'c': np.zeros(2_000_000)})\n"
)

// hibernation measures hibernate and wake for a small and a ~100 MB
// namespace, a hibernated sandbox's memory and disk, and sandboxd holding
// b.cfg.Hibernated hibernated sandboxes.
func (b *bench) hibernation(ctx context.Context) error {
	all := []metric{mHibSmall, mWakeSmall, mHibLarge, mWakeLarge, mSnapLarge, mHibMemory, mHibDisk, mHibRSS, mHibListLatency, mHibRSSFresh, mHibRestart}
	type kase struct {
		name, setup, check, want string
		hib, wake                metric
	}
	var smallID string
	for _, k := range []kase{
		{"hib-small", hibSmallSetup, "f(x)", "42", mHibSmall, mWakeSmall},
		{"hib-large", hibLargeSetup, "len(big) + len(frame)", "8000000", mHibLarge, mWakeLarge},
	} {
		id, err := b.newSandbox(ctx, k.name, nil)
		if err == nil {
			_, err = b.c.exec(ctx, id, "python", k.setup)
		}
		if err != nil {
			b.fail(err, all...)
			return err
		}
		start := time.Now()
		sb, err := b.c.sb.Hibernate(ctx, id)
		hib := time.Since(start)
		if err != nil {
			b.fail(err, all...)
			return err
		}
		snap := sb.GetSnapshot()
		note := fmt.Sprintf("level %s, snapshot %.1f MiB", snap.GetLevel(), float64(snap.GetSizeBytes())/mib)
		b.rep.add(row(k.hib, ms(hib), "", nan, nil, note))
		d, err := b.c.expect(ctx, id, k.check, k.want)
		if err != nil {
			b.fail(err, all...)
			return err
		}
		b.rep.add(row(k.wake, ms(d), "cold create, first result (p50)", b.coldP50, nil,
			"Execute on the hibernated sandbox: new container on its volumes, globals unpickled, then the command; level files (no globals) costs a container start, like a cold create"))
		if k.name == "hib-large" {
			b.rep.add(row(mSnapLarge, float64(snap.GetSizeBytes())/mib, "", nan, nil, "pickled by dill inside the sandbox, on its /io volume"))
		} else {
			smallID = id
		}
	}

	// A hibernated sandbox has no container, so no memory: checked, not assumed.
	if _, err := b.c.sb.Hibernate(ctx, smallID); err != nil {
		b.fail(err, mHibMemory, mHibDisk, mHibRSS, mHibListLatency)
		return err
	}
	idle := nan
	for _, r := range b.rep.Rows {
		if r.Key == mIdleMemory.key && r.Value != nil {
			idle = *r.Value
		}
	}
	if _, err := containerOf(ctx, smallID); err != nil && strings.Contains(err.Error(), "has 0 containers") {
		b.rep.add(row(mHibMemory, 0, "idle running sandbox", idle, nil, "no container exists while hibernated (docker ps shows none)"))
	} else {
		b.rep.add(row(mHibMemory, nan, "idle running sandbox", idle, nil, fmt.Sprintf("not measured: the hibernated sandbox still has a container (%v)", err)))
	}
	if b.d != nil {
		bytes, err := allocatedUnder(filepath.Join(b.dcfg.stateDir, "sandboxes", smallID))
		if err != nil {
			b.rep.add(row(mHibDisk, nan, "", nan, nil, "not measured: "+err.Error()))
		} else {
			b.rep.add(row(mHibDisk, float64(bytes)/mib, "", nan, nil, "blocks allocated by its sparse /io and /workspace images and meta.json"))
		}
	} else {
		b.rep.add(row(mHibDisk, nan, "", nan, nil, "not measured: needs a self-started sandboxd (no --addr)"))
	}

	// Many hibernated sandboxes, made for real (a container each, Python
	// started, hibernated), eight at a time: sandboxd's memory, the list's
	// latency and a restart's.
	many := []metric{mHibRSS, mHibListLatency, mHibRSSFresh, mHibRestart}
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range b.cfg.Hibernated {
		g.Go(func() error {
			id, err := b.newSandbox(gctx, fmt.Sprintf("hib-many-%d", i), nil)
			if err == nil {
				_, err = b.c.exec(gctx, id, "python", "1")
			}
			if err == nil {
				_, err = b.c.sb.Hibernate(gctx, id)
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		b.fail(err, many...)
		return err
	}
	b.progress("%d sandboxes made and hibernated in %v", b.cfg.Hibernated, time.Since(start).Round(time.Second))
	var lat latencies
	for range 20 {
		start := time.Now()
		if _, err := b.c.sb.List(ctx, sandboxclient.ListFilter{}); err != nil {
			b.fail(err, mHibRSS, mHibListLatency)
			return err
		}
		lat = append(lat, time.Since(start))
	}
	n := b.cfg.Hibernated + 2
	b.rep.add(row(mHibListLatency, ms(lat.percentile(50)), "", nan, atMost(100, "< 100 ms"), fmt.Sprintf("p50 of 20 lists, %d hibernated sandboxes among the live ones", n)))
	pid := b.cfg.pid
	if b.d != nil {
		pid = b.d.pid()
	}
	if rss, _, err := processMemory(pid); pid > 0 && err == nil {
		b.rep.add(row(mHibRSS, float64(rss)/mib, "", nan, atMost(100, "< 100 MiB"), fmt.Sprintf("VmRSS with %d hibernated sandboxes (goal: 1,000), of the process that made them (the Go heap it grew then is returned to the system lazily)", n)))
	} else {
		b.rep.add(row(mHibRSS, nan, "", nan, atMost(100, "< 100 MiB"), "not measured: no sandboxd process ID (--pid)"))
	}
	if b.d == nil {
		note := "not measured: needs a self-started sandboxd (no --addr) to restart"
		b.rep.add(row(mHibRSSFresh, nan, "", nan, atMost(100, "< 100 MiB"), note))
		b.rep.add(row(mHibRestart, nan, "", nan, atMost(2000, "< 2 s"), note))
		return nil
	}
	restart := time.Now()
	if err := b.restartWith(ctx); err != nil {
		b.fail(err, mHibRSSFresh, mHibRestart)
		return err
	}
	took := time.Since(restart)
	list, err := b.c.sb.List(ctx, sandboxclient.ListFilter{})
	if err != nil {
		b.fail(err, mHibRSSFresh, mHibRestart)
		return err
	}
	hibernated := 0
	for _, s := range list {
		if s.State == sandboxv1.SandboxState_SANDBOX_STATE_HIBERNATED {
			hibernated++
		}
	}
	if hibernated < b.cfg.Hibernated {
		err := fmt.Errorf("after the restart %d sandboxes are hibernated, of the %d made", hibernated, b.cfg.Hibernated)
		b.fail(err, mHibRSSFresh, mHibRestart)
		return err
	}
	// The restarted process after a few lists, as it holds them from then on.
	for range 20 {
		if _, err := b.c.sb.List(ctx, sandboxclient.ListFilter{}); err != nil {
			b.fail(err, mHibRSSFresh, mHibRestart)
			return err
		}
	}
	if rss, _, err := processMemory(b.d.pid()); err == nil {
		b.rep.add(row(mHibRSSFresh, float64(rss)/mib, "", nan, atMost(100, "< 100 MiB"),
			fmt.Sprintf("VmRSS of the restarted sandboxd with %d hibernated sandboxes, after 21 lists of them", n)))
	} else {
		b.fail(err, mHibRSSFresh)
	}
	b.rep.add(row(mHibRestart, ms(took), "", nan, atMost(2000, "< 2 s"),
		fmt.Sprintf("SIGTERM, then a new process on the same state directory until its health check says SERVING, with %d hibernated sandboxes; every one listed hibernated after", n)))
	return nil
}

// allocatedUnder sums the blocks allocated to the regular files directly
// in dir (a sandbox's images and metadata; the mounted volumes' contents
// are inside the images).
func allocatedUnder(dir string) (int64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(dir, e.Name()), &st); err != nil {
			return 0, err
		}
		total += st.Blocks * 512
	}
	if total == 0 {
		return 0, fmt.Errorf("no files in %s", dir)
	}
	return total, nil
}
