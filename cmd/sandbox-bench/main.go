// Command sandbox-bench measures sandboxd against what its users would
// otherwise use, side by side in one run on one machine, and prints one
// table (or JSON, or Markdown for BENCHMARKS.md).
//
// It drives sandboxd only through its public gRPC API: a running one
// (--addr), or one it builds and starts itself with a temporary state
// directory (the default), which also lets it measure a restart's reattach
// time, sandboxd's memory while streaming and, when sandboxd has
// --warm-pool, a new user's first result from a warm pool. The peers are
// measured in the same run: `docker exec` and `docker run --rm` per call,
// and a local Jupyter kernel when Debian's python3-ipykernel and
// python3-jupyter-client are installed.
//
// The Kubernetes backend is measured in the same run (unless --kube=false):
// two sandboxd replicas with --backend kubernetes on a local API server
// (envtest's binaries, `make envtest-assets`) whose Pods two real nodes on
// this machine run (kubelets with containerd, `make kube-node`; with
// --kube-nodes test, the test kubelet on the Docker engine); its rows are
// compared with the Docker backend's.
//
// The networking rows (network.go) compare a networked sandbox's egress
// through sandboxd's gateway with a `docker run --network bridge`
// container's, and a port reached through sandboxd's ports front with the
// same port reached directly; they need root (the test host is a network
// namespace on 198.18.0.0/15) and a self-started sandboxd.
//
// The sampling rows (sampling.go) measure what per-sandbox metrics cost:
// sandboxd's CPU with --sampling-sandboxes running sandboxes, restarted
// with sampling off and then on; they need a self-started sandboxd.
//
// The webhook rows (webhooks.go) measure what lifecycle webhooks cost the
// calls that cause them: a user's round with webhooks off, with an
// endpoint answering and with it hanging; they need a self-started
// sandboxd.
//
// The template rows (templates.go) measure a template build, first and
// from the step cache, and a new user's first result from a template next
// to one from sandboxd's own image.
//
// --phases runs part of the suite, e.g. --phases network.
//
// Every size is a flag, so CI can smoke-run it in seconds:
//
//	sandbox-bench --iterations 5 --users 2 --idle-sandboxes 2 --reattach 2 --stream-mb 1
//
// Timings are reported, never asserted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/docker/go-units"
)

// Sizes are the amounts of work the benchmark does.
type Sizes struct {
	Iterations        int           `json:"iterations"`      // timed warm round trips (sandboxd and Jupyter)
	Warmup            int           `json:"warmup"`          // untimed round trips before them
	PeerIterations    int           `json:"peer_iterations"` // docker exec and docker run calls
	Cold              int           `json:"cold"`            // cold sandbox creations
	WarmPool          int           `json:"warm_pool"`       // sandboxd --warm-pool size
	PoolAcquisitions  int           `json:"pool_acquisitions"`
	Users             int           `json:"users"` // concurrent users for throughput
	Duration          time.Duration `json:"duration"`
	IdleSandboxes     int           `json:"idle_sandboxes"`
	MemoryBudgetBytes int64         `json:"memory_budget_bytes"`
	Reattach          int           `json:"reattach"`
	StreamMB          int           `json:"stream_mb"`
	Hibernated        int           `json:"hibernated"`         // hibernated sandboxes sandboxd holds for its RSS and list figures
	KubeAcquires      int           `json:"kube_acquires"`      // concurrent new users of the kubernetes acquire figure
	NetRequests       int           `json:"net_requests"`       // sequential GETs of the egress and ingress latency figures
	NetDownloadMB     int           `json:"net_download_mb"`    // MiB of the egress download
	NetClients        int           `json:"net_clients"`        // concurrent clients of the ingress requests/s figure
	SamplingSandboxes int           `json:"sampling_sandboxes"` // running sandboxes of the sampling figures
	SamplingWindow    time.Duration `json:"sampling_window"`    // how long sandboxd's CPU is measured, sampling off and on
	WebhookRounds     int           `json:"webhook_rounds"`     // timed rounds of each webhook figure
	SnapshotMB        int           `json:"snapshot_mb"`        // MB of the file in the snapshotted /workspace
	VolumeMB          int           `json:"volume_mb"`          // MB written and read by the volume figures
	TemplateRounds    int           `json:"template_rounds"`    // rounds of each template figure (builds and first sandboxes)
	ShapeRounds       int           `json:"shape_rounds"`       // rounds of each shape's first result and wake
}

func (s Sizes) String() string {
	return fmt.Sprintf("iterations=%d warmup=%d peer-iterations=%d cold=%d warm-pool=%d pool-acquisitions=%d users=%d duration=%v idle-sandboxes=%d memory-budget=%s reattach=%d stream-mb=%d hibernated=%d kube-acquires=%d net-requests=%d net-download-mb=%d net-clients=%d sampling-sandboxes=%d sampling-window=%v webhook-rounds=%d snapshot-mb=%d volume-mb=%d template-rounds=%d shape-rounds=%d",
		s.Iterations, s.Warmup, s.PeerIterations, s.Cold, s.WarmPool, s.PoolAcquisitions, s.Users, s.Duration,
		s.IdleSandboxes, units.BytesSize(float64(s.MemoryBudgetBytes)), s.Reattach, s.StreamMB, s.Hibernated, s.KubeAcquires,
		s.NetRequests, s.NetDownloadMB, s.NetClients, s.SamplingSandboxes, s.SamplingWindow, s.WebhookRounds, s.SnapshotMB, s.VolumeMB, s.TemplateRounds, s.ShapeRounds)
}

// config is the parsed command line.
type config struct {
	Sizes
	addr          string // running sandboxd; empty: start one
	pid           int    // its process, for RSS (with addr)
	sandboxd      string // binary to start; empty: go build it
	image         string
	runtime       string
	jupyterPython string
	format        string // table, json or markdown
	kube          bool   // measure the Kubernetes backend too (kube.go)
	kubeNodes     string // real (internal/kubetest/node) or test (the test kubelet)
	kubeBaseline  string // an earlier build's sandbox image, for the A/B warm round trip
	phases        map[string]bool
	shapes        map[string]bool // the shapes phase's shapes to measure
}

// phaseNames are the parts of the suite --phases chooses from, in the
// order they run. "fleet" is the throughput, idle-memory and reattach
// figures, which share one fleet of sandboxes.
var phaseNames = []string{"warm", "cold", "fleet", "streaming", "pool", "hibernation", "kubernetes", "network", "sampling", "webhooks", "snapshots", "fastwake", "shapes", "volumes", "templates"}

func parseConfig(args []string, out io.Writer) (config, error) {
	fs := flag.NewFlagSet("sandbox-bench", flag.ContinueOnError)
	fs.SetOutput(out)
	var c config
	budget := "16GiB"
	var asJSON, asMarkdown bool
	fs.StringVar(&c.addr, "addr", "", "`address` of a running sandboxd to measure; empty: build and start one with a temporary state directory")
	fs.IntVar(&c.pid, "pid", 0, "process ID of the sandboxd at --addr, to measure its memory while streaming")
	fs.StringVar(&c.sandboxd, "sandboxd", "", "sandboxd `binary` to start (empty: go build ./cmd/sandboxd, which needs the repository)")
	fs.StringVar(&c.image, "image", envOr("SANDBOX_IMAGE", core.DefaultImage), "sandbox `image` (env SANDBOX_IMAGE), also used by the docker run peer")
	fs.StringVar(&c.runtime, "runtime", "", "Docker `runtime` for sandboxes and peers, e.g. runsc (empty: the engine's default)")
	fs.StringVar(&c.jupyterPython, "jupyter-python", defaultJupyterPython(), "`python` with jupyter_client and ipykernel, for the Jupyter peer")
	fs.IntVar(&c.Iterations, "iterations", 1000, "timed warm round trips, for sandboxd and the Jupyter peer")
	fs.IntVar(&c.Warmup, "warmup", 50, "untimed round trips before the timed ones")
	fs.IntVar(&c.PeerIterations, "peer-iterations", 30, "calls of the docker exec and docker run peers")
	fs.IntVar(&c.Cold, "cold", 10, "cold sandbox creations to time")
	fs.IntVar(&c.WarmPool, "warm-pool", 4, "sandboxd --warm-pool size for the warm-pool figure (0: skip it)")
	fs.IntVar(&c.PoolAcquisitions, "pool-acquisitions", 10, "new users served from the warm pool to time")
	fs.IntVar(&c.Users, "users", 20, "concurrent users for the throughput figure")
	fs.DurationVar(&c.Duration, "duration", 10*time.Second, "how long the throughput figures (ours and the peer's) run")
	fs.IntVar(&c.IdleSandboxes, "idle-sandboxes", 20, "idle sandboxes whose memory is measured")
	fs.StringVar(&budget, "memory-budget", budget, "memory `size` for the \"idle sandboxes that fit\" figure")
	fs.IntVar(&c.Reattach, "reattach", 100, "live sandboxes a restarted sandboxd reattaches")
	fs.IntVar(&c.StreamMB, "stream-mb", 100, "megabytes (10^6 bytes) of output streamed by one command")
	fs.IntVar(&c.Hibernated, "hibernated", 20, "hibernated sandboxes sandboxd holds while its RSS and ListSandboxes are measured")
	fs.BoolVar(&c.kube, "kube", true, "also measure the Kubernetes backend: sandboxd replicas on a local API server (make envtest-assets) and --kube-nodes")
	fs.StringVar(&c.kubeBaseline, "kube-baseline-image", "", "an earlier build's sandbox `image` (its io sidecar): the kubernetes phase measures the warm round trip through it too, interleaved with --image's, so the two builds' sidecar hops compare in one run (empty: not measured)")
	fs.StringVar(&c.kubeNodes, "kube-nodes", "real", "what runs the kubernetes phase's Pods: real (two real kubelets with containerd on this machine; make kube-node) or test (the test kubelet on Docker)")
	fs.IntVar(&c.KubeAcquires, "kube-acquires", 100, "new users acquiring at once through two kubernetes replicas")
	fs.IntVar(&c.NetRequests, "net-requests", 200, "sequential HTTP GETs of the egress and ingress latency figures")
	fs.IntVar(&c.NetDownloadMB, "net-download-mb", 64, "MiB of the egress download figure")
	fs.IntVar(&c.NetClients, "net-clients", 8, "concurrent clients of the ingress requests/s figure (which runs --duration each way)")
	fs.IntVar(&c.SamplingSandboxes, "sampling-sandboxes", 100, "running sandboxes while sandboxd's CPU is measured with metrics sampling off and on")
	fs.DurationVar(&c.SamplingWindow, "sampling-window", time.Minute, "how long sandboxd's CPU is measured with sampling off, then on")
	fs.IntVar(&c.WebhookRounds, "webhook-rounds", 30, "timed rounds (acquire, run, delete) with webhooks off, an endpoint answering, and an endpoint hanging")
	fs.IntVar(&c.SnapshotMB, "snapshot-mb", 200, "MB (10^6 bytes) of random data in the snapshotted sandbox's /workspace")
	fs.IntVar(&c.VolumeMB, "volume-mb", 256, "MB (10^6 bytes) each volume figure writes and reads")
	shapes := strings.Join(shapeKeysOf(), ",")
	fs.StringVar(&shapes, "shapes", shapes, "comma-separated `shapes` the shapes phase measures (the others' rows say not measured): "+strings.Join(shapeKeysOf(), ", "))
	fs.IntVar(&c.ShapeRounds, "shape-rounds", 5, "rounds of each shape's first result and wake (the shapes phase); the median is reported")
	fs.IntVar(&c.TemplateRounds, "template-rounds", 3, "rounds of each template figure (a first build, a cached build, a first sandbox from the template and from sandboxd's image); the median is reported")
	phases := strings.Join(phaseNames, ",")
	fs.StringVar(&phases, "phases", phases, "comma-separated `phases` to run (the others' rows are left out): "+strings.Join(phaseNames, ", "))
	fs.BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	fs.BoolVar(&asMarkdown, "markdown", false, "print a Markdown table (as in BENCHMARKS.md)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	n, err := units.RAMInBytes(budget)
	if err != nil || n <= 0 {
		return c, fmt.Errorf("--memory-budget %q: want a size such as 16GiB", budget)
	}
	c.MemoryBudgetBytes = n
	switch {
	case asJSON && asMarkdown:
		return c, errors.New("--json and --markdown exclude each other")
	case asJSON:
		c.format = "json"
	case asMarkdown:
		c.format = "markdown"
	default:
		c.format = "table"
	}
	for _, v := range []struct {
		name string
		n    int
	}{{"iterations", c.Iterations}, {"peer-iterations", c.PeerIterations}, {"cold", c.Cold}, {"users", c.Users},
		{"idle-sandboxes", c.IdleSandboxes}, {"reattach", c.Reattach}, {"stream-mb", c.StreamMB}, {"kube-acquires", c.KubeAcquires},
		{"net-requests", c.NetRequests}, {"net-download-mb", c.NetDownloadMB}, {"net-clients", c.NetClients},
		{"sampling-sandboxes", c.SamplingSandboxes}, {"webhook-rounds", c.WebhookRounds}, {"snapshot-mb", c.SnapshotMB}, {"volume-mb", c.VolumeMB}, {"template-rounds", c.TemplateRounds}, {"shape-rounds", c.ShapeRounds}} {
		if v.n < 1 {
			return c, fmt.Errorf("--%s must be at least 1", v.name)
		}
	}
	if c.Warmup < 0 || c.WarmPool < 0 || c.PoolAcquisitions < 1 {
		return c, errors.New("--warmup and --warm-pool must not be negative, --pool-acquisitions must be at least 1")
	}
	if c.Duration <= 0 || c.SamplingWindow <= 0 {
		return c, errors.New("--duration and --sampling-window must be positive")
	}
	if c.kubeNodes != "real" && c.kubeNodes != "test" {
		return c, fmt.Errorf("--kube-nodes %q: want real or test", c.kubeNodes)
	}
	c.shapes = map[string]bool{}
	for _, sh := range strings.Split(shapes, ",") {
		if sh = strings.TrimSpace(sh); sh == "" {
			continue
		}
		if !slices.Contains(shapeKeysOf(), sh) {
			return c, fmt.Errorf("--shapes: unknown shape %q; want some of %s", sh, strings.Join(shapeKeysOf(), ","))
		}
		c.shapes[sh] = true
	}
	c.phases = map[string]bool{}
	for _, p := range strings.Split(phases, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !slices.Contains(phaseNames, p) {
			return c, fmt.Errorf("--phases: unknown phase %q; want some of %s", p, strings.Join(phaseNames, ","))
		}
		c.phases[p] = true
	}
	if len(c.phases) == 0 {
		return c, errors.New("--phases names no phase")
	}
	if c.pid != 0 && c.addr == "" {
		return c, errors.New("--pid only goes with --addr")
	}
	return c, nil
}

// defaultJupyterPython prefers Debian's interpreter, where apt installs
// jupyter_client, over whatever python3 comes first on PATH.
func defaultJupyterPython() string {
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	return "python3"
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func main() {
	cfg, err := parseConfig(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandbox-bench: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, cfg, os.Stderr)
	if rep != nil {
		var werr error
		switch cfg.format {
		case "json":
			werr = rep.WriteJSON(os.Stdout)
		case "markdown":
			werr = rep.WriteMarkdown(os.Stdout)
		default:
			werr = rep.WriteTable(os.Stdout)
		}
		err = errors.Join(err, werr)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandbox-bench: %v\n", strings.TrimSpace(err.Error()))
		os.Exit(1)
	}
}
