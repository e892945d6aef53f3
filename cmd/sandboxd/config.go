package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/url"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/audit"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/webhooks"

	"github.com/docker/go-units"

	"github.com/sandboxd/sandboxd/orchestrator/backend/docker"
)

// envPrefix names the environment equivalents of the flags: --idle-ttl is
// SANDBOXD_IDLE_TTL. Containers and systemd units configure daemons through
// the environment more easily than through arguments.
const envPrefix = "SANDBOXD_"

// config is sandboxd's parsed command line.
type config struct {
	listen          string
	authTokens      string // token file; empty: no authentication
	insecure        bool   // allow serving without tokens beyond loopback
	tlsCert, tlsKey string
	logLevel        slog.Level
	logFormat       string
	shutdownTimeout time.Duration
	metricsListen   string // Prometheus /metrics address; empty: off
	e2bListen       string // E2B-compatible HTTP API address; empty: off
	ports           portsFlags
	otlpEndpoint    string // OTLP/HTTP traces URL; empty: off
	backend         string // docker or kubernetes
	kube            kubeConfig
	audit           auditFlags
	webhooks        webhookFlags
	docker          docker.Config // the backends' shared policy (embedded) and the Docker backend's own settings
	egressRoots     []byte        // --egress-ca-file's certificates, for the Kubernetes backend's gateways
}

// auditFlags are the audit trail's settings (--audit*).
type auditFlags struct {
	enabled      bool
	maxFileBytes int64
	maxFiles     int
}

// webhookFlags are the lifecycle webhooks' settings (--webhook*).
type webhookFlags struct {
	file    string // --webhooks; empty: no webhooks
	timeout time.Duration
	maxAge  time.Duration
}

// errHelp is returned for -h/--help: usage was printed, exit 0.
var errHelp = flag.ErrHelp

// usageError is a bad command line; main exits 2 for it, as flag does.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// parseConfig reads flags from args, falling back to SANDBOXD_* variables
// (via getenv) for flags not given, then to the defaults. Usage goes to out.
func parseConfig(args []string, getenv func(string) string, out io.Writer) (config, error) {
	fs := flag.NewFlagSet("sandboxd", flag.ContinueOnError)
	fs.SetOutput(out)

	c := config{logLevel: slog.LevelInfo}
	mc := &c.docker
	defMem, maxMem := byteSize(1<<30), byteSize(8<<30)
	defCPUs, maxCPUs := cpus(1e9), cpus(int64(runtime.NumCPU())*1e9)
	maxUpload := byteSize(core.DefaultMaxUploadBytes)
	maxVolume := byteSize(core.DefaultMaxVolumeBytes)
	maxCode := byteSize(core.MaxCodeBytes)
	maxTemplateFile := byteSize(core.DefaultMaxTemplateFileBytes)
	var templateBuildAllow, warmPoolTemplates string
	defDisk, maxDisk := byteSize(core.DefaultDiskBytes), byteSize(core.DefaultMaxDiskBytes)
	ioDisk := byteSize(core.DefaultIODiskBytes)
	snapBudget, snapTenantBudget := byteSize(0), byteSize(0)
	diskVolumes := true

	fs.StringVar(&c.listen, "listen", "127.0.0.1:50051", "`address` to serve gRPC on (host:port); an address beyond loopback needs --auth-tokens (or --insecure)")
	fs.StringVar(&c.authTokens, "auth-tokens", "", "token `file` enabling authentication: one \"TOKEN TENANT ROLE\" per line (role user or admin; # comments); each call then needs \"authorization: Bearer TOKEN\" and sees only its tenant's sandboxes (admin: all)")
	fs.BoolVar(&c.insecure, "insecure", false, "serve without --auth-tokens on an address beyond loopback: anyone who can connect controls every sandbox")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "TLS certificate `file` (PEM); with --tls-key, serve TLS instead of plaintext")
	fs.StringVar(&c.tlsKey, "tls-key", "", "TLS private key `file` (PEM), for --tls-cert")
	fs.StringVar(&mc.StateDir, "state-dir", defaultStateDir(getenv), "`directory` for the sandboxes' /io and /workspace directories and the registry")
	fs.DurationVar(&mc.IdleTTL, "idle-ttl", core.DefaultIdleTTL, "hibernate (or, with --on-idle delete, remove) a sandbox after this long without use")
	fs.StringVar(&mc.OnIdle, "on-idle", core.OnIdleHibernate, "what --idle-ttl does to a running sandbox: hibernate (globals and files kept on disk, no memory used; woken by its next use) or delete")
	fs.DurationVar(&mc.HibernatedTTL, "hibernated-ttl", core.DefaultHibernatedTTL, "delete a hibernated sandbox after this long hibernated")
	fs.BoolVar(&mc.MemorySnapshots, "memory-snapshots", false, "under --runtime runsc with dockerd in experimental mode, hibernate at level memory: checkpoint the whole container (docker checkpoint; every process kept exactly), with the globals snapshot as fallback")
	fs.Var(&snapBudget, "snapshot-disk-budget", "most disk all hibernated sandboxes' snapshots of their globals may take together (`size`; 0: no bound). Past it snapshots are dropped, and their sandboxes wake with their files only, saying so: one larger than the budget (or the per-tenant budget) alone and at once; otherwise the tenant whose snapshots take the most loses its oldest first")
	fs.Var(&snapTenantBudget, "snapshot-disk-budget-per-tenant", "most disk one tenant's hibernated sandboxes' snapshots may take together (`size`; 0: no bound but --snapshot-disk-budget); past it the tenant's oldest are dropped")
	fs.DurationVar(&mc.MaxLifetime, "max-lifetime", 0, "remove a sandbox this long after its creation, however busy (0: no limit)")
	fs.DurationVar(&mc.MaxIdleTTL, "max-idle-ttl", 0, "the longest idle timeout a caller may give one sandbox (SetSandboxTimeout, options.idle_timeout); 0: 24h, or --idle-ttl if longer")
	fs.StringVar(&mc.Image, "image", "sandboxd-sandbox:latest", "container `image` of new sandboxes")
	fs.IntVar(&mc.MaxSandboxes, "max-sandboxes", 0, "most sandboxes alive at once, warm-pool ones included; further users get RESOURCE_EXHAUSTED (0: no cap)")
	fs.IntVar(&mc.MaxSandboxesPerTenant, "max-sandboxes-per-tenant", 0, "most sandboxes one tenant may have alive at once; further users of the tenant get RESOURCE_EXHAUSTED (0: no cap)")
	fs.IntVar(&mc.MaxWatches, "max-watches", core.DefaultMaxWatches, "most WatchDirectory calls in progress on the server, all tenants together: each holds an inotify instance of sandboxd's (Linux allows 128 per user by default, fs.inotify.max_user_instances). Only protects the host; keep it well above --max-watches-per-tenant")
	fs.IntVar(&mc.MaxWatchesPerTenant, "max-watches-per-tenant", 0, "most WatchDirectory calls in progress of one tenant, over all its sandboxes (0: a quarter of --max-watches, or all of it when the server has one tenant: no --auth-tokens, or a token file naming one)")
	fs.IntVar(&mc.MaxWatchesPerSandbox, "max-watches-per-sandbox", 0, fmt.Sprintf("most WatchDirectory calls in progress on one sandbox (0: %d, or --max-watches-per-tenant if lower)", core.DefaultMaxWatchesPerSandbox))
	fs.IntVar(&mc.MaxWatchDirs, "max-watch-dirs", core.DefaultMaxWatchDirs, "most directories all WatchDirectory calls on the server watch together: each holds an inotify watch (fs.inotify.max_user_watches) and an open descriptor of sandboxd's. Only protects the host; keep it well above --max-watch-dirs-per-tenant")
	fs.IntVar(&mc.MaxWatchDirsPerTenant, "max-watch-dirs-per-tenant", 0, "most directories one tenant's WatchDirectory calls watch, over all its sandboxes (0: a quarter of --max-watch-dirs, or all of it when the server has one tenant)")
	fs.IntVar(&mc.MaxWatchDirsPerSandbox, "max-watch-dirs-per-sandbox", 0, fmt.Sprintf("most directories the WatchDirectory calls on one sandbox watch (0: %d, or --max-watch-dirs-per-tenant if lower)", core.DefaultMaxWatchDirsPerSandbox))
	fs.IntVar(&mc.MaxWatchDirsPerCall, "max-watch-dirs-per-call", 0, fmt.Sprintf("most directories one WatchDirectory call watches (0: %d, or --max-watch-dirs-per-sandbox if lower)", core.DefaultMaxWatchDirsPerCall))
	fs.IntVar(&mc.MaxStreams, "max-streams", core.DefaultMaxStreams, "most streams in progress on the server, all tenants together (an Execute or StreamCommand following output, a download, an upload): each holds descriptors of sandboxd's. Only protects the host; keep it well above --max-streams-per-tenant")
	fs.IntVar(&mc.MaxStreamsPerTenant, "max-streams-per-tenant", 0, "most streams in progress of one tenant's callers (0: a quarter of --max-streams, or all of it when the server has one tenant)")
	fs.IntVar(&mc.MaxStreamsPerSandbox, "max-streams-per-sandbox", 0, fmt.Sprintf("most streams in progress on one sandbox (0: %d, or --max-streams-per-tenant if lower)", core.DefaultMaxStreamsPerSandbox))
	fs.IntVar(&mc.WarmPool, "warm-pool", autoWarmPool, fmt.Sprintf("keep this many started, unclaimed sandboxes so a new user's first AcquireSandbox skips container start-up and a hibernated sandbox wakes in a started container (requests with env, network or non-default limits still start their own); %d: %d on the Docker backend (at most --max-sandboxes), 0 on Kubernetes; 0: no pool", autoWarmPool, defaultDockerWarmPool))
	fastWake := true
	fs.BoolVar(&fastWake, "fast-wake", true, "wake a hibernated sandbox in a started warm-pool container whose Python already imported numpy and pandas, instead of a new container (needs --warm-pool, disk volumes and runc; sandboxes with network, env or non-default limits wake as before); the pool's sandboxes then hold those imports")
	fs.Var(&maxUpload, "max-upload", "largest file UploadFile and UploadVolumeFile accept (`size`); larger uploads are INVALID_ARGUMENT")
	fs.Var(&maxVolume, "max-volume-size", "largest volume CreateVolume accepts (`size`); larger ones are INVALID_ARGUMENT")
	fs.IntVar(&mc.MaxVolumesPerTenant, "max-volumes-per-tenant", core.DefaultMaxVolumesPerTenant, "most volumes one tenant may have; further ones are RESOURCE_EXHAUSTED")
	fs.IntVar(&mc.TemplateBuilds, "template-builds", core.DefaultTemplateBuilds, "most template builds running at once, all tenants together; further BuildTemplate calls are RESOURCE_EXHAUSTED. Keep it above --template-builds-per-tenant")
	fs.IntVar(&mc.MaxTemplateBuildsPerTenant, "template-builds-per-tenant", 0, "most template builds of one tenant running at once; further BuildTemplate calls of the tenant are RESOURCE_EXHAUSTED (0: a quarter of --template-builds, at least 1, or all of them when the server has one tenant: no --auth-tokens, or a token file naming one)")
	fs.DurationVar(&mc.TemplateBuildTimeout, "template-build-timeout", core.DefaultTemplateBuildTimeout, "longest a template build may run; past it the build fails as DEADLINE_EXCEEDED and the previous version stays in service")
	fs.Var(&maxTemplateFile, "max-template-file", "largest archive UploadTemplateFile accepts (`size`); larger ones are RESOURCE_EXHAUSTED")
	fs.IntVar(&mc.MaxTemplatesPerTenant, "max-templates-per-tenant", core.DefaultMaxTemplatesPerTenant, "most templates one tenant may have; further ones are RESOURCE_EXHAUSTED")
	fs.StringVar(&warmPoolTemplates, "warm-pool-template", "", "comma-separated `TENANT/NAME=N`: keep N started sandboxes of that template's current version for its tenant's new users, as --warm-pool does for the server's image (they count against --max-sandboxes)")
	fs.StringVar(&templateBuildAllow, "template-build-allow", "", "comma-separated `destinations` (domains, *.domains, addresses, CIDRs) a template build's steps may reach through the egress gateway, with --allow-network (empty: the hosts of this host's apt sources, its Debian mirrors); without --allow-network builds have no network")
	fs.Var(&maxCode, "max-code", "largest code of one command (`size`, at most 1MiB); longer code is INVALID_ARGUMENT")
	fs.BoolVar(&mc.AllowNetwork, "allow-network", false, "let callers give a sandbox outbound network access (options.network, options.network_policy), through sandboxd's egress gateway under the sandbox's policy; without it sandboxes have no network. Under --runtime runsc, networked sandboxes run under the runsc-net runtime (make runsc registers it)")
	var egress egressFlags
	egress.register(fs)
	fs.BoolVar(&diskVolumes, "disk-volumes", true, "give each sandbox size-limited volumes for /workspace and /io (sparse ext4 images, loop-mounted: needs root, loop devices and mkfs.ext4); false: plain directories with no disk limit")
	fs.Var(&defDisk, "default-disk", "/workspace size of a sandbox that asks for none (`size`)")
	fs.Var(&maxDisk, "max-disk", "largest /workspace size a caller may ask for (`size`)")
	fs.Var(&ioDisk, "io-disk", "size of each sandbox's /io volume, which holds its command log and outputs (`size`)")
	fs.StringVar(&mc.Runtime, "runtime", "", "Docker `runtime` for sandboxes, e.g. runsc for gVisor (empty: the engine's default)")
	fs.Var(&defMem, "default-memory", "memory limit of a sandbox that asks for none (`size`: bytes, or 512m, 1g, 1GiB; binary units)")
	fs.Var(&maxMem, "max-memory", "largest memory limit a caller may ask for (`size`)")
	fs.Var(&defCPUs, "default-cpus", "CPU limit of a sandbox that asks for none, in `cores` (fractions allowed)")
	fs.Var(&maxCPUs, "max-cpus", "largest CPU limit a caller may ask for, in `cores` (the default is the host's CPU count)")
	fs.Int64Var(&mc.DefaultLimits.PidsLimit, "default-pids", 256, "process and thread limit of a sandbox that asks for none (under --runtime runsc at least 128: it also counts gVisor's own threads)")
	fs.Int64Var(&mc.MaxLimits.PidsLimit, "max-pids", 4096, "largest process limit a caller may ask for")
	fs.DurationVar(&mc.DefaultTimeout, "default-timeout", core.DefaultCommandTimeout, "wall-clock limit of a command that asks for none")
	fs.DurationVar(&mc.MaxTimeout, "max-timeout", core.DefaultMaxTimeout, "largest command timeout a caller may ask for")
	fs.TextVar(&c.logLevel, "log-level", slog.LevelInfo, "log `level`: debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "text", "log `format`: text or json (both to stderr)")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 10*time.Second, "on SIGINT/SIGTERM, the longest the shutdown takes: calls (including Execute streams) get this less a fifth (at most 2s) to end before they are cut off, closing the sandbox manager the rest")
	fs.StringVar(&c.metricsListen, "metrics-listen", "", "`address` to serve Prometheus metrics on, at /metrics over plain HTTP (host:port; empty: no metrics). The series name tenants: keep it on loopback or a monitoring network")
	fs.DurationVar(&mc.MetricsSampleInterval, "metrics-sample-interval", 5*time.Second, "sample each running sandbox's CPU, memory, disk, processes and network this often, for GetSandboxMetrics, sandboxctl top and the E2B door's getMetrics (the last 10 minutes are kept per sandbox; 0: no sampling, no samples)")
	fs.StringVar(&c.e2bListen, "e2b-listen", "", "`address` to serve the E2B-compatible HTTP API on (host:port; empty: off): the official E2B SDKs work against it with E2B_API_URL and E2B_SANDBOX_URL set to http://ADDRESS. API keys are --auth-tokens tokens; beyond loopback it needs them as --listen does")
	c.ports.register(fs)
	fs.StringVar(&c.otlpEndpoint, "otlp-endpoint", "", "OpenTelemetry collector `URL` to export traces of the gRPC calls to over OTLP/HTTP, e.g. http://127.0.0.1:4318 (the path defaults to /v1/traces; empty: no tracing)")
	fs.StringVar(&c.backend, "backend", backendDocker, "where sandboxes run: docker (containers on this host's engine) or kubernetes (a Pod each, with --kube-* settings; replicas of sandboxd may run side by side)")
	c.kube.register(fs)
	auditSize := byteSize(audit.DefaultMaxFileBytes)
	fs.BoolVar(&c.audit.enabled, "audit", true, "record every mutating call (who, what, which sandbox, outcome; never code, env values or file contents) to STATE_DIR/audit/audit.jsonl, readable with ListAuditEvents and sandboxctl audit")
	fs.Var(&auditSize, "audit-max-size", "size at which the audit log is rotated (`size`, whole MiB)")
	fs.IntVar(&c.audit.maxFiles, "audit-max-files", audit.DefaultMaxFiles, "most audit log files kept, the current one included (at least 2); the oldest is deleted past it, so the trail takes at most about this times --audit-max-size")
	fs.StringVar(&c.webhooks.file, "webhooks", "", "JSON `file` of lifecycle webhook endpoints ({\"endpoints\": [{\"name\", \"url\", \"secret\": \"whsec_...\", \"tenants\", \"events\", \"max_queue\"}]}): events (created, hibernated, woken, killed, expired, died, command.finished) are signed (Standard Webhooks) and delivered at least once, in order, from a durable queue in STATE_DIR/webhooks.db (empty: no webhooks)")
	fs.DurationVar(&c.webhooks.timeout, "webhook-timeout", webhooks.DefaultTimeout, "bound on one webhook delivery attempt (connect, send, answer); a slower endpoint is retried with backoff")
	fs.DurationVar(&c.webhooks.maxAge, "webhook-max-age", webhooks.DefaultMaxAge, "how long an undelivered webhook event is retried before it is dropped (counted in sandboxd_webhook_events_dropped_total and logged)")
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: sandboxd [flags]\n       %s\n\nServes the sandboxd gRPC API (sandbox.v1.SandboxService).\nEvery flag can also be set with an environment variable: --idle-ttl is %sIDLE_TTL.\nFlags on the command line win over the environment.\n\nFlags:\n", egressUsage, envPrefix)
		fs.PrintDefaults()
	}

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return config{}, errHelp
		}
		return config{}, usageError{err}
	}
	if fs.NArg() > 0 {
		return config{}, usageError{fmt.Errorf("unexpected argument %q; sandboxd takes flags only (or: %s)", fs.Arg(0), egressUsage)}
	}
	if err := applyEnv(fs, getenv); err != nil {
		return config{}, usageError{err}
	}

	mc.DefaultLimits.MemoryBytes, mc.MaxLimits.MemoryBytes = int64(defMem), int64(maxMem)
	mc.DefaultLimits.NanoCPUs, mc.MaxLimits.NanoCPUs = int64(defCPUs), int64(maxCPUs)
	mc.MaxUploadBytes = int64(maxUpload)
	mc.MaxVolumeBytes = int64(maxVolume)
	mc.MaxCodeBytes = int(maxCode)
	mc.MaxTemplateFileBytes = int64(maxTemplateFile)
	for _, kv := range strings.Split(warmPoolTemplates, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		key, n, ok := strings.Cut(kv, "=")
		size, err := strconv.Atoi(n)
		if !ok || err != nil {
			return config{}, usageError{fmt.Errorf("--warm-pool-template %q: want TENANT/NAME=N", kv)}
		}
		if err := docker.ValidateWarmPoolTemplate(key, size); err != nil {
			return config{}, usageError{fmt.Errorf("--warm-pool-template: %v", err)}
		}
		if mc.WarmPoolTemplates == nil {
			mc.WarmPoolTemplates = map[string]int{}
		}
		mc.WarmPoolTemplates[key] = size
	}
	for _, d := range strings.Split(templateBuildAllow, ",") {
		if d = strings.TrimSpace(d); d != "" {
			mc.TemplateBuildAllow = append(mc.TemplateBuildAllow, d)
		}
	}
	mc.NoDiskVolumes = !diskVolumes
	mc.NoFastWake = !fastWake
	if mc.WarmPool == autoWarmPool {
		mc.WarmPool = c.defaultWarmPool()
	}
	mc.DefaultLimits.DiskBytes, mc.MaxLimits.DiskBytes, mc.IODiskBytes = int64(defDisk), int64(maxDisk), int64(ioDisk)
	mc.SnapshotDiskBudget, mc.SnapshotDiskBudgetPerTenant = int64(snapBudget), int64(snapTenantBudget)
	c.audit.maxFileBytes = int64(auditSize)
	if c.audit.maxFileBytes < 1<<20 || c.audit.maxFiles < 2 {
		return config{}, usageError{fmt.Errorf("--audit-max-size must be at least 1MiB and --audit-max-files at least 2 (the current file and one rotated)")}
	}
	if c.webhooks.timeout <= 0 || c.webhooks.maxAge <= 0 {
		return config{}, usageError{fmt.Errorf("--webhook-timeout and --webhook-max-age must be positive")}
	}
	if err := egress.apply(mc); err != nil {
		return config{}, usageError{err}
	}
	c.egressRoots = egress.roots
	if err := c.check(); err != nil {
		return config{}, usageError{err}
	}
	return c, nil
}

// The warm pool's size when --warm-pool is not given. On Docker a small
// pool is what makes the defaults fast: a new user's first AcquireSandbox
// is a claim (milliseconds, not a container start), and a wake lands in a
// started container whose Python already imported numpy and pandas (fast
// wake) instead of booting a new one, which without a pool took longer
// than a cold start. Two, so that a second new user or wake within the
// refill (about a second) is served too; each idle pool sandbox costs the
// memory BENCHMARKS.md gives. On Kubernetes a pool is Pods the cluster
// schedules before anyone asks, a capacity decision left to its operator.
const (
	autoWarmPool          = -1
	defaultDockerWarmPool = 2
)

// defaultWarmPool is --warm-pool's value when it was not given.
func (c *config) defaultWarmPool() int {
	if c.backend == backendKubernetes {
		return 0
	}
	n := defaultDockerWarmPool
	if m := c.docker.MaxSandboxes; m > 0 && m < n {
		n = m
	}
	return n
}

// applyEnv sets every flag not given on the command line from its
// environment variable, if that is set.
func applyEnv(fs *flag.FlagSet, getenv func(string) string) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil {
			return
		}
		name := envName(f.Name)
		if v := getenv(name); v != "" {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("%s=%q: %v", name, v, serr)
			}
		}
	})
	return err
}

// envName is the environment variable for a flag.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// check catches settings that would only fail later, or confusingly.
func (c *config) check() error {
	mc := &c.docker
	if mc.StateDir == "" && c.backend != backendKubernetes {
		return errors.New("--state-dir is empty and no default could be derived (set HOME or XDG_STATE_HOME)")
	}
	if mc.Image == "" {
		return errors.New("--image is empty")
	}
	switch c.backend {
	case backendDocker:
	case backendKubernetes:
		if err := c.kube.check(); err != nil {
			return err
		}
		if (c.kube.egressCNI || len(c.kube.egressDeny) > 0) && !mc.AllowNetwork {
			return errors.New("--kube-egress-cni and --kube-egress-deny need --allow-network")
		}
	default:
		return fmt.Errorf("--backend %q: want docker or kubernetes", c.backend)
	}
	if c.logFormat != "text" && c.logFormat != "json" {
		return fmt.Errorf("--log-format %q: want text or json", c.logFormat)
	}
	if mc.MaxLifetime < 0 {
		return fmt.Errorf("--max-lifetime %v is negative", mc.MaxLifetime)
	}
	if mc.MaxIdleTTL < 0 || (mc.MaxIdleTTL > 0 && mc.MaxIdleTTL < mc.IdleTTL) {
		return fmt.Errorf("--max-idle-ttl %v must be 0 (automatic) or at least --idle-ttl %v", mc.MaxIdleTTL, mc.IdleTTL)
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"max-sandboxes", mc.MaxSandboxes}, {"max-sandboxes-per-tenant", mc.MaxSandboxesPerTenant}, {"warm-pool", mc.WarmPool}} {
		if n.v < 0 {
			return fmt.Errorf("--%s %d is negative", n.name, n.v)
		}
	}
	if err := checkCaps(mc.Policy); err != nil {
		return err
	}
	if err := checkEgress(mc); err != nil {
		return err
	}
	if mc.MaxSandboxes > 0 && mc.WarmPool > mc.MaxSandboxes {
		return fmt.Errorf("--warm-pool %d is above --max-sandboxes %d", mc.WarmPool, mc.MaxSandboxes)
	}
	if c.metricsListen != "" {
		if _, _, err := net.SplitHostPort(c.metricsListen); err != nil {
			return fmt.Errorf("--metrics-listen %q: %v", c.metricsListen, err)
		}
	}
	if c.e2bListen != "" {
		if _, _, err := net.SplitHostPort(c.e2bListen); err != nil {
			return fmt.Errorf("--e2b-listen %q: %v", c.e2bListen, err)
		}
	}
	if err := c.ports.check(c); err != nil {
		return err
	}
	if c.otlpEndpoint != "" {
		u, err := url.Parse(c.otlpEndpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--otlp-endpoint %q: want an http:// or https:// URL such as http://127.0.0.1:4318", c.otlpEndpoint)
		}
	}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if mc.MaxCodeBytes <= 0 || mc.MaxCodeBytes > core.MaxCodeBytes {
		return fmt.Errorf("--max-code must be between 1 and %d bytes (1MiB)", core.MaxCodeBytes)
	}
	// In docker.Config a zero means "the built-in default", not "none",
	// so a zero here would silently mean something else than it says.
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"idle-ttl", mc.IdleTTL}, {"default-timeout", mc.DefaultTimeout}, {"max-timeout", mc.MaxTimeout}, {"shutdown-timeout", c.shutdownTimeout}} {
		if d.v <= 0 {
			return fmt.Errorf("--%s must be positive, got %v", d.name, d.v)
		}
	}
	if mc.MaxUploadBytes <= 0 {
		return errors.New("--max-upload must be positive")
	}
	if mc.MaxVolumeBytes < core.MinVolumeBytes {
		return fmt.Errorf("--max-volume-size must be at least %d bytes (16MiB)", core.MinVolumeBytes)
	}
	if mc.MaxVolumesPerTenant <= 0 {
		return errors.New("--max-volumes-per-tenant must be positive")
	}
	if mc.TemplateBuilds <= 0 || mc.TemplateBuildTimeout <= 0 || mc.MaxTemplateFileBytes <= 0 || mc.MaxTemplatesPerTenant <= 0 {
		return errors.New("--template-builds, --template-build-timeout, --max-template-file and --max-templates-per-tenant must be positive")
	}
	if mc.MaxTemplateBuildsPerTenant < 0 || mc.MaxTemplateBuildsPerTenant > mc.TemplateBuilds {
		return fmt.Errorf("--template-builds-per-tenant %d must be between 0 (derived) and --template-builds %d", mc.MaxTemplateBuildsPerTenant, mc.TemplateBuilds)
	}
	if _, err := core.CompileNetworkPolicy(core.NetworkPolicy{AllowOut: mc.TemplateBuildAllow}); err != nil {
		return fmt.Errorf("--template-build-allow: %v", err)
	}
	limits := []struct {
		name     string
		def, max int64
	}{
		{"memory", mc.DefaultLimits.MemoryBytes, mc.MaxLimits.MemoryBytes},
		{"cpus", mc.DefaultLimits.NanoCPUs, mc.MaxLimits.NanoCPUs},
		{"pids", mc.DefaultLimits.PidsLimit, mc.MaxLimits.PidsLimit},
	}
	if !mc.NoDiskVolumes {
		limits = append(limits, struct {
			name     string
			def, max int64
		}{"disk", mc.DefaultLimits.DiskBytes, mc.MaxLimits.DiskBytes})
		if mc.IODiskBytes < 16<<20 || mc.DefaultLimits.DiskBytes < 16<<20 {
			return errors.New("--default-disk and --io-disk must be at least 16MiB")
		}
	}
	for _, l := range limits {
		switch {
		case l.def <= 0:
			return fmt.Errorf("--default-%s must be positive", l.name)
		case l.max <= 0:
			return fmt.Errorf("--max-%s must be positive", l.name)
		case l.def > l.max:
			return fmt.Errorf("--default-%s is above --max-%s", l.name, l.name)
		}
	}
	if mc.DefaultTimeout > mc.MaxTimeout {
		return fmt.Errorf("--default-timeout %v is above --max-timeout %v", mc.DefaultTimeout, mc.MaxTimeout)
	}
	return nil
}

// defaultStateDir follows the XDG base directory spec: state that should
// survive restarts but is not worth backing up. For root that is
// /root/.local/state/sandboxd.
func defaultStateDir(getenv func(string) string) string {
	if x := getenv("XDG_STATE_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "sandboxd")
	}
	// $HOME is what os.UserHomeDir reads on Unix; reading it through getenv
	// keeps the function testable.
	home := getenv("HOME")
	if home == "" {
		return ""
	}
	return filepath.Join(home, ".local", "state", "sandboxd")
}

// byteSize is a flag.Value for sizes in Docker's notation (RAM sizes use
// binary units: 512m and 512MiB are both 512*2^20 bytes).
type byteSize int64

// String implements flag.Value.
func (b *byteSize) String() string {
	if *b == 0 {
		return "0"
	}
	return units.BytesSize(float64(*b))
}

// Set implements flag.Value.
func (b *byteSize) Set(s string) error {
	n, err := units.RAMInBytes(strings.TrimSpace(s))
	if err != nil || n < 0 {
		return fmt.Errorf("invalid size %q: want bytes or a number with a unit such as 512m, 1g, 1GiB", s)
	}
	*b = byteSize(n)
	return nil
}

// cpus is a flag.Value for a number of cores, stored in nano-CPUs as Docker
// takes it.
type cpus int64

// String implements flag.Value.
func (c *cpus) String() string {
	return strconv.FormatFloat(float64(*c)/1e9, 'f', -1, 64)
}

// Set implements flag.Value.
func (c *cpus) Set(s string) error {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(f) || f < 0 || f > 1e6 {
		return fmt.Errorf("invalid CPU count %q: want a non-negative number of cores such as 1 or 0.5", s)
	}
	*c = cpus(math.Round(f * 1e9))
	return nil
}

// capFlags names the flag of each watch and stream cap of core.Policy, the
// longer names first (a replacer takes the first that matches).
var capFlags = strings.NewReplacer(
	"MaxWatchesPerSandbox", "--max-watches-per-sandbox", "MaxWatchesPerTenant", "--max-watches-per-tenant", "MaxWatches", "--max-watches",
	"MaxWatchDirsPerCall", "--max-watch-dirs-per-call", "MaxWatchDirsPerSandbox", "--max-watch-dirs-per-sandbox",
	"MaxWatchDirsPerTenant", "--max-watch-dirs-per-tenant", "MaxWatchDirs", "--max-watch-dirs",
	"MaxStreamsPerSandbox", "--max-streams-per-sandbox", "MaxStreamsPerTenant", "--max-streams-per-tenant", "MaxStreams", "--max-streams")

// checkCaps applies core.Policy's rules for the watch and stream caps (none
// negative, none above the wider one, zeros derived) to the flags' values
// and names the flags in the error.
func checkCaps(p core.Policy) error {
	w := core.Policy{MaxWatches: p.MaxWatches, MaxWatchesPerTenant: p.MaxWatchesPerTenant, MaxWatchesPerSandbox: p.MaxWatchesPerSandbox,
		MaxWatchDirs: p.MaxWatchDirs, MaxWatchDirsPerTenant: p.MaxWatchDirsPerTenant, MaxWatchDirsPerSandbox: p.MaxWatchDirsPerSandbox, MaxWatchDirsPerCall: p.MaxWatchDirsPerCall,
		MaxStreams: p.MaxStreams, MaxStreamsPerTenant: p.MaxStreamsPerTenant, MaxStreamsPerSandbox: p.MaxStreamsPerSandbox}
	if err := w.ApplyDefaults(); err != nil {
		return errors.New(capFlags.Replace(strings.TrimPrefix(err.Error(), "config: ")))
	}
	return nil
}

// fitTenantCaps fits the per-tenant caps to the number of tenants the
// server has. With one (no --auth-tokens, or a token file naming one
// tenant), the caps on watches, streams and template builds have no
// other tenant to keep apart, so a tenant's caps not given are the
// server's. With several, it warns when --max-sandboxes is set without a
// lower --max-sandboxes-per-tenant: one tenant could then take every
// sandbox.
func fitTenantCaps(p *core.Policy, tenants int, log *slog.Logger) {
	if tenants <= 1 {
		if p.MaxWatchesPerTenant == 0 {
			p.MaxWatchesPerTenant = p.MaxWatches
		}
		if p.MaxWatchDirsPerTenant == 0 {
			p.MaxWatchDirsPerTenant = p.MaxWatchDirs
		}
		if p.MaxStreamsPerTenant == 0 {
			p.MaxStreamsPerTenant = p.MaxStreams
		}
		if p.MaxTemplateBuildsPerTenant == 0 {
			p.MaxTemplateBuildsPerTenant = p.TemplateBuilds
		}
		return
	}
	if p.MaxSandboxes > 0 && (p.MaxSandboxesPerTenant == 0 || p.MaxSandboxesPerTenant >= p.MaxSandboxes) {
		log.Warn("--max-sandboxes is set without a lower --max-sandboxes-per-tenant: one tenant can take every sandbox of the server from the others",
			"max_sandboxes", p.MaxSandboxes, "max_sandboxes_per_tenant", p.MaxSandboxesPerTenant, "tenants", tenants)
	}
}
