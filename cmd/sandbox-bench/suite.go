package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// The figures, in the order of the table.
var (
	mWarmP50       = metric{"warm_p50", "warm exec round trip p50 (x * 2, with state)", "ms", true, "faster", "slower"}
	mWarmP90       = metric{"warm_p90", "warm exec round trip p90", "ms", true, "faster", "slower"}
	mWarmP99       = metric{"warm_p99", "warm exec round trip p99", "ms", true, "faster", "slower"}
	mWarmRun       = metric{"warm_vs_docker_run", "warm exec round trip p50", "ms", true, "faster", "slower"}
	mWarmJupyter50 = metric{"warm_vs_jupyter_p50", "warm exec round trip p50", "ms", true, "faster", "slower"}
	mWarmJupyter99 = metric{"warm_vs_jupyter_p99", "warm exec round trip p99", "ms", true, "faster", "slower"}
	mCold          = metric{"cold_first_result", "new user's first result, no pool (p50)", "ms", true, "faster", "slower"}
	mPool          = metric{"pool_first_result", "new user's first result, warm pool (p50)", "ms", true, "faster", "slower"}
	mThroughput    = metric{"throughput", "aggregate executions/s", "exec/s", false, "more", "fewer"}
	mIdleMemory    = metric{"idle_memory", "memory per idle sandbox (cgroup working set)", "MiB", true, "less", "more"}
	mIdleFit       = metric{"idle_fit", "idle sandboxes that fit in the budget", "sandboxes", false, "more", "fewer"}
	mReattach      = metric{"reattach_serving", "restart to health SERVING", "ms", true, "faster", "slower"}
	mReattachGet   = metric{"reattach_first_get", "restart to first successful GetSandbox", "ms", true, "faster", "slower"}
	mStream        = metric{"stream_throughput", "streamed output of one command", "MB/s", false, "faster", "slower"}
	mStreamRSS     = metric{"stream_peak_rss", "sandboxd peak RSS while streaming", "MiB", true, "less", "more"}

	// The Kubernetes backend (kube.go): sandboxd replicas with
	// --backend kubernetes, compared with the Docker backend's figures of
	// the same run.
	mKubeWarmP50 = metric{"kube_warm_p50", "kubernetes: warm exec round trip p50 (x * 2, with state)", "ms", true, "faster", "slower"}
	mKubeWarmP99 = metric{"kube_warm_p99", "kubernetes: warm exec round trip p99", "ms", true, "faster", "slower"}
	// With --kube-baseline-image: the same round trip through an earlier
	// build's io sidecar, interleaved with the current one's.
	mKubeWarmBase = metric{"kube_warm_p50_vs_baseline", "kubernetes: warm exec round trip p50, this build's sidecar vs --kube-baseline-image's", "ms", true, "faster", "slower"}
	mKubeCold     = metric{"kube_cold_first_result", "kubernetes: new user's first result, no pool (p50)", "ms", true, "faster", "slower"}
	mKubePool     = metric{"kube_pool_first_result", "kubernetes: new user's first result, warm pool (p50)", "ms", true, "faster", "slower"}
	// Its name gets the number of users (--kube-acquires).
	mKubeAcquire = metric{"kube_acquire_100", "kubernetes: %d new users' AcquireSandbox at once over two replicas (wall time)", "ms", true, "faster", "slower"}
	// Hibernation with --kube-storage-class (kube_hibernate.go), beside the
	// Docker backend's, interleaved.
	mKubeHib  = metric{"kube_hibernate_small", "kubernetes: hibernate, small namespace (level globals, p50)", "ms", true, "faster", "slower"}
	mKubeWake = metric{"kube_wake_small_first_result", "kubernetes: wake to first result, small namespace (p50)", "ms", true, "faster", "slower"}
)

// RowKeys lists every row a complete report has, in order.
var RowKeys = []string{
	mWarmP50.key, mWarmP90.key, mWarmP99.key, mWarmRun.key, mWarmJupyter50.key, mWarmJupyter99.key,
	mCold.key, mPool.key, mThroughput.key, mIdleMemory.key, mIdleFit.key,
	mReattach.key, mReattachGet.key, mStream.key, mStreamRSS.key,
	mHibSmall.key, mWakeSmall.key, mHibLarge.key, mWakeLarge.key, mSnapLarge.key,
	mHibMemory.key, mHibDisk.key, mHibRSS.key, mHibListLatency.key, mHibRSSFresh.key, mHibRestart.key,
	mKubeWarmP50.key, mKubeWarmP99.key, mKubeWarmBase.key, mKubeCold.key, mKubePool.key, mKubeAcquire.key, mKubeHib.key, mKubeWake.key, mKubeSnapTake.key, mKubeSnapFirst.key, mKubeFork.key, mKubeVolFirst.key, mKubeVolMount.key, mKubeVolUpload.key,
	mKubeEgressGetP50.key, mKubeEgressDownload.key, mKubeEgressRuleP50.key, mKubeIngressP50.key,
	mEgressGetP50.key, mEgressGetP90.key, mEgressDownload.key, mIngressP50.key, mIngressRPS.key,
	mSamplingCPU.key, mSamplingOne.key,
	mHookOK.key, mHookHung.key,
	mSnapTake.key, mSnapSize.key, mSnapFirst.key, mForkWall.key,
	mPoolMemory.key, mFastWakeSmall.key, mFastWakeLarge.key,
	mVolWrite.key, mVolRead.key, mVolUpload.key, mVolDownload.key,
	mTplFirstBuild.key, mTplCacheHit.key, mTplFirstSandbox.key,
}

func init() {
	// The shapes phase's rows, after the fast wake's.
	i := slices.Index(RowKeys, mFastWakeLarge.key) + 1
	RowKeys = slices.Insert(RowKeys, i, shapeKeys()...)
}

const mib = 1 << 20

// nan marks a figure that was not measured.
var nan = math.NaN()

// bench is one run of the suite.
type bench struct {
	cfg   config
	log   io.Writer
	rep   *Report
	runID string
	tmp   string // temporary directory (binary, state)

	dcfg daemonConfig // when self-started
	d    *daemon      // nil with --addr
	c    *client
	net  netState // the network phase's test host and sandboxd flags

	mu      sync.Mutex
	created []string // sandboxes to delete at the end (with --addr)

	// Figures later phases compare with.
	coldP50      float64
	dockerRunP50 float64
	warmP50      float64 // the Docker backend's, for the kubernetes rows
	warmP99      float64
	poolP50      float64
	jupyterRSS   int64
	errs         []error
}

// run measures everything and returns the report, also when some figure
// failed (the error then says which).
func run(ctx context.Context, cfg config, progress io.Writer) (*Report, error) {
	b := &bench{cfg: cfg, log: progress, runID: randomID(), coldP50: nan, dockerRunP50: nan, warmP50: nan, warmP99: nan, poolP50: nan}
	b.rep = &Report{Date: time.Now().UTC(), CPUs: runtime.NumCPU(), Kernel: kernelRelease(), Runtime: cfg.runtime,
		Image: cfg.image, Sizes: cfg.Sizes, DockerVersion: dockerVersion(ctx)}
	tmp, err := os.MkdirTemp("", "sandbox-bench-")
	if err != nil {
		return nil, err
	}
	b.tmp = tmp
	defer os.RemoveAll(tmp)

	// The test host goes after sandboxd stopped (defers run last first).
	defer b.netCleanup()
	// The kubernetes phase's networking rows and the shapes phase's
	// networked shape use the test host too.
	if cfg.phases["network"] || cfg.phases["kubernetes"] || (cfg.phases["shapes"] && wantsNetShape(cfg.shapes)) {
		b.netSetup()
	}
	if err := b.connect(ctx); err != nil {
		return nil, err
	}
	defer b.cleanup()

	if cfg.phases["warm"] {
		b.phase(ctx, "warm round trips", b.warm)
	}
	if cfg.phases["cold"] {
		b.phase(ctx, "cold starts", b.cold)
	}
	if cfg.phases["fleet"] {
		fleet, err := b.fleet(ctx)
		if err != nil {
			b.fail(err, mThroughput, mIdleMemory, mIdleFit, mReattach, mReattachGet)
		} else {
			b.phase(ctx, "throughput", func(ctx context.Context) error { return b.throughput(ctx, fleet[:b.cfg.Users]) })
			b.phase(ctx, "idle memory", func(ctx context.Context) error { return b.idleMemory(ctx, fleet[:b.cfg.IdleSandboxes]) })
			b.phase(ctx, "reattach", func(ctx context.Context) error { return b.reattach(ctx, fleet[:b.cfg.Reattach]) })
		}
	}
	for _, p := range []struct {
		key, name string
		fn        func(context.Context) error
	}{
		{"streaming", "streaming", b.stream},
		{"pool", "warm pool", b.warmPool},
		{"hibernation", "hibernation", b.hibernation},
		{"kubernetes", "kubernetes", b.kubernetes},
		{"network", "network", b.network},
		{"sampling", "metrics sampling", b.sampling},
		{"webhooks", "webhooks", b.webhooks},
		{"snapshots", "snapshots and forks", b.snapshots},
		{"fastwake", "fast wake", b.fastWake},
		{"shapes", "shapes from the warm pool", b.shapes},
		{"volumes", "volumes", b.volumes},
		{"templates", "templates", b.templates},
	} {
		if cfg.phases[p.key] {
			b.phase(ctx, p.name, p.fn)
		}
	}
	b.sortRows()
	return b.rep, errors.Join(append(b.errs, ctx.Err())...)
}

// connect starts sandboxd (unless --addr) and connects to it.
func (b *bench) connect(ctx context.Context) error {
	addr := b.cfg.addr
	if addr == "" {
		bin := b.cfg.sandboxd
		if bin == "" {
			b.progress("building sandboxd")
			var err error
			if bin, err = buildSandboxd(ctx, b.tmp); err != nil {
				return err
			}
		}
		b.dcfg = daemonConfig{binary: bin, stateDir: filepath.Join(b.tmp, "state"), image: b.cfg.image, runtime: b.cfg.runtime, extra: b.net.flags}
		b.progress("starting sandboxd")
		d, err := startDaemon(ctx, b.dcfg, "127.0.0.1:0")
		if errors.Is(err, errFlagUnsupported) && len(b.net.flags) > 0 {
			// An older sandboxd, without networking: the other phases
			// can still measure it.
			b.net.skip = "this sandboxd has no networking flags (--allow-network, --ports-listen): " + err.Error()
			b.dcfg.extra = nil
			d, err = startDaemon(ctx, b.dcfg, "127.0.0.1:0")
		}
		if err != nil {
			removeContainers(b.dcfg.stateDir)
			return err
		}
		b.d, addr = d, d.addr
		b.rep.Sandboxd = "self-started (" + bin + ")"
	} else {
		b.rep.Sandboxd = "at " + addr
	}
	c, err := dial(addr, b.runID)
	if err != nil {
		return err
	}
	b.c = c
	return nil
}

// cleanup removes everything the run created. Sandboxes are deleted
// through the API, also when sandboxd was self-started, because sandboxd
// owns more than the containers (e.g. loop-mounted volumes).
func (b *bench) cleanup() {
	deleteAll(b.c, b.created, b.progress)
	b.c.close()
	if b.d == nil {
		return
	}
	if err := b.d.stop(); err != nil {
		b.progress("stopping sandboxd: %v", err)
	}
	b.removeLeftovers(b.dcfg.stateDir)
}

// deleteAll deletes sandboxes through c, a few at a time.
func deleteAll(c *client, ids []string, progress func(string, ...any)) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for _, id := range ids {
		g.Go(func() error {
			if err := c.delete(gctx, id); err != nil {
				progress("deleting sandbox %s: %v", id, err)
			}
			return nil
		})
	}
	g.Wait()
}

// removeLeftovers is the safety net after a self-started sandboxd stopped:
// containers and mounts of its state directory that a failed run left, and
// the images it built (templates and their step cache, labelled with the
// directory), which would otherwise outlive the run, one per run.
func (b *bench) removeLeftovers(stateDir string) {
	if err := removeContainers(stateDir); err != nil {
		b.progress("removing containers: %v", err)
	}
	if err := removeImages(stateDir); err != nil {
		b.progress("removing images: %v", err)
	}
	if err := unmountUnder(stateDir); err != nil {
		b.progress("unmounting volumes: %v", err)
	}
}

// phase runs one part of the suite, recording its failure.
func (b *bench) phase(ctx context.Context, name string, fn func(context.Context) error) {
	if ctx.Err() != nil {
		return // interrupted: run reports ctx's error once
	}
	b.progress("%s", name)
	start := time.Now()
	if err := fn(ctx); err != nil {
		b.errs = append(b.errs, fmt.Errorf("%s: %w", name, err))
		b.progress("%s failed: %v", name, err)
		return
	}
	b.progress("%s done in %v", name, time.Since(start).Round(time.Millisecond))
}

// fail records rows for figures an earlier failure left unmeasured.
func (b *bench) fail(err error, ms ...metric) {
	b.errs = append(b.errs, err)
	for _, m := range ms {
		b.rep.add(row(m, nan, "", nan, nil, "not measured: "+err.Error()))
	}
}

func (b *bench) progress(format string, args ...any) {
	fmt.Fprintf(b.log, "sandbox-bench: "+format+"\n", args...)
}

// user names a benchmark user; the run ID keeps runs against one long-lived
// sandboxd apart.
func (b *bench) user(name string) string { return "bench-" + b.runID + "-" + name }

// newSandbox acquires a sandbox for a new user and remembers it for cleanup.
func (b *bench) newSandbox(ctx context.Context, name string, env map[string]string) (string, error) {
	id, err := b.c.acquire(ctx, b.user(name), env)
	if err != nil {
		return "", err
	}
	b.mu.Lock()
	b.created = append(b.created, id)
	b.mu.Unlock()
	return id, nil
}

// sortRows puts the rows in RowKeys order (phases may add them out of it).
func (b *bench) sortRows() {
	order := map[string]int{}
	for i, k := range RowKeys {
		order[k] = i
	}
	rows := b.rep.Rows
	sorted := make([]Row, 0, len(rows))
	for _, k := range RowKeys {
		for _, r := range rows {
			if r.Key == k {
				sorted = append(sorted, r)
			}
		}
	}
	for _, r := range rows {
		if _, known := order[r.Key]; !known {
			sorted = append(sorted, r)
		}
	}
	b.rep.Rows = sorted
}

// randomID names one run.
func randomID() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func kernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return runtime.GOOS
	}
	return "Linux " + strings.TrimSpace(string(b))
}

func dockerVersion(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "docker", "version", "--format", "{{.Server.Version}}").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}
