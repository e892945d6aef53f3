package main

import (
	"bytes"
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

// configEnv names the configuration file when --config is not given.
const configEnv = envPrefix + "CONFIG"

// config is sandboxd's parsed configuration.
type config struct {
	listen          string
	authTokens      string // token file; empty: no authentication
	insecure        bool   // allow serving without tokens beyond loopback
	tlsCert, tlsKey string
	logLevel        logLevel
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
	// policy is what both backends apply and core.Validating enforces in
	// front of them: limits, TTLs, caps, the warm pool, egress.
	policy core.Policy
	// docker is the Docker backend's own settings; its Policy is policy,
	// set when the backend starts.
	docker      docker.Config
	egress      egressFlags
	egressRoots []byte // --egress-ca-file's certificates, for the Kubernetes backend's gateways

	// Settings given in another form than their owners take; finish
	// converts them.
	maxCode                               byteSize
	warmPoolTemplates, templateBuildAllow string
	diskVolumes, fastWake                 bool
}

// logLevel is --log-level: slog's level, written in lower case as the
// flag's help and the configuration file spell it.
type logLevel struct{ slog.Level }

func (l logLevel) MarshalText() ([]byte, error) {
	b, err := l.Level.MarshalText()
	return bytes.ToLower(b), err
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

// newConfig is a config at its defaults, with the flag set and the
// settings table that set it. Usage goes to out.
func newConfig(out io.Writer) (*config, *flag.FlagSet, *registry) {
	fs := flag.NewFlagSet("sandboxd", flag.ContinueOnError)
	fs.SetOutput(out)
	c := &config{}
	r := newRegistry(fs)
	c.register(r)
	return c, fs, r
}

// parseConfig reads flags from args, falling back to SANDBOXD_* variables
// (via getenv) for flags not given, then to the configuration file
// (--config, SANDBOXD_CONFIG), then to the defaults. Usage goes to out.
func parseConfig(args []string, getenv func(string) string, out io.Writer) (config, error) {
	c, fs, r := newConfig(out)
	var configPath string
	fs.StringVar(&configPath, "config", "", "TOML configuration `file` (also "+configEnv+"): one table per section, one key per flag; flags and SANDBOXD_* variables win over it. sandboxd config default prints every key at its default")
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: sandboxd [flags]\n       sandboxd config default|check FILE|doc\n       %s\n\nServes the sandboxd gRPC API (sandbox.v1.SandboxService).\nEvery flag can also be set with an environment variable (--idle-ttl is %sIDLE_TTL)\nor in the configuration file --config names (see sandboxd config default).\nFlags win over the environment, which wins over the file.\n\nFlags:\n", egressUsage, envPrefix)
		fs.PrintDefaults()
	}

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return config{}, errHelp
		}
		return config{}, usageError{err}
	}
	if fs.NArg() > 0 {
		return config{}, usageError{fmt.Errorf("unexpected argument %q; sandboxd takes flags only (or: %s; or: sandboxd config default|check FILE|doc)", fs.Arg(0), egressUsage)}
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if !given["config"] {
		configPath = getenv(configEnv)
	}
	if errs := c.load(r, given, getenv, configPath); errs != nil {
		return config{}, usageError{errs}
	}
	return *c, nil
}

// load sets the settings not given as flags (given) from their variables
// and the file at configPath (none if empty), then finishes c. It reports
// every problem: of the file's keys and types, of the values, and of the
// checks of the whole.
func (c *config) load(r *registry, given map[string]bool, getenv func(string) string, configPath string) problems {
	var file *configFile
	var errs problems
	if configPath != "" {
		if file, errs = loadConfigFile(configPath, r); file == nil {
			return errs
		}
	}
	errs = append(errs, r.apply(given, getenv, file)...)
	errs = append(errs, c.finish(getenv, file, r)...)
	if len(errs) == 0 {
		return nil
	}
	sortProblems(errs)
	return errs
}

// apply sets every setting not given as a flag from its environment
// variable, if that is set, else from the file, if it has the key. It
// reports every bad value, not just the first.
func (r *registry) apply(given map[string]bool, getenv func(string) string, file *configFile) problems {
	var errs problems
	for _, sec := range r.sections {
		for _, st := range sec.settings {
			name := st.flag.Name
			if given[name] {
				continue
			}
			if v := getenv(st.env()); v != "" {
				if err := r.set(st, v); err != nil {
					errs = append(errs, fmt.Errorf("%s=%q: %v", st.env(), v, err))
				}
				continue
			}
			if file == nil {
				continue
			}
			if fv, ok := file.values[name]; ok {
				if err := r.set(st, fv.text); err != nil {
					errs = append(errs, fileError{file.path, fv.line, fmt.Sprintf("%s = %s: %v", st.path(), fv.raw, err)})
				} else {
					file.applied[name] = true
				}
			}
		}
	}
	sortProblems(errs)
	return errs
}

// set sets st to v. A bad value leaves the default in place (the flag
// package's own values zero themselves on one), so that the checks that
// follow judge the rest, and its error says what was wanted.
func (r *registry) set(st *setting, v string) error {
	err := r.fs.Set(st.flag.Name, v)
	if err == nil {
		return nil
	}
	_ = r.fs.Set(st.flag.Name, st.flag.DefValue)
	switch st.kind {
	case kindBool, kindInt, kindFloat, kindDuration:
		if strings.HasSuffix(err.Error(), "parse error") || strings.HasSuffix(err.Error(), "out of range") {
			return fmt.Errorf("invalid value %q: want %s", v, st.kind.tomlType())
		}
	}
	return err
}

// finish converts the settings given in another form than their owners
// take, fills in the derived defaults, and checks the whole; it reports
// every problem, each at its line of the file when the file gave it.
func (c *config) finish(getenv func(string) string, file *configFile, r *registry) problems {
	var errs problems
	add := func(err error) {
		if err == nil {
			return
		}
		var ps problems
		if errors.As(err, &ps) {
			for _, e := range ps {
				errs = append(errs, file.locate(e, r))
			}
			return
		}
		errs = append(errs, file.locate(err, r))
	}
	p := &c.policy
	if p.MaxLimits.NanoCPUs == 0 {
		p.MaxLimits.NanoCPUs = int64(runtime.NumCPU()) * 1e9
	}
	if c.docker.StateDir == "" {
		c.docker.StateDir = defaultStateDir(getenv)
	}
	p.MaxCodeBytes = int(c.maxCode)
	for _, kv := range strings.Split(c.warmPoolTemplates, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		key, n, ok := strings.Cut(kv, "=")
		size, err := strconv.Atoi(n)
		if !ok || err != nil {
			add(fmt.Errorf("--warm-pool-template %q: want TENANT/NAME=N", kv))
			continue
		}
		if err := docker.ValidateWarmPoolTemplate(key, size); err != nil {
			add(fmt.Errorf("--warm-pool-template: %v", err))
			continue
		}
		if c.docker.WarmPoolTemplates == nil {
			c.docker.WarmPoolTemplates = map[string]int{}
		}
		c.docker.WarmPoolTemplates[key] = size
	}
	for _, d := range strings.Split(c.templateBuildAllow, ",") {
		if d = strings.TrimSpace(d); d != "" {
			c.docker.TemplateBuildAllow = append(c.docker.TemplateBuildAllow, d)
		}
	}
	c.docker.NoDiskVolumes = !c.diskVolumes
	c.docker.NoFastWake = !c.fastWake
	if p.WarmPool == autoWarmPool {
		p.WarmPool = c.defaultWarmPool()
	}
	if p.WarmPoolNetwork == autoWarmPool {
		p.WarmPoolNetwork = c.defaultWarmPoolNetwork()
	}
	if c.audit.maxFileBytes < 1<<20 || c.audit.maxFiles < 2 {
		add(fmt.Errorf("--audit-max-size must be at least 1MiB and --audit-max-files at least 2 (the current file and one rotated)"))
	}
	if c.webhooks.timeout <= 0 || c.webhooks.maxAge <= 0 {
		add(fmt.Errorf("--webhook-timeout and --webhook-max-age must be positive"))
	}
	add(c.egress.apply(p, &c.docker))
	c.egressRoots = c.egress.roots
	add(c.check())
	if len(errs) == 0 {
		return nil
	}
	sortProblems(errs)
	return errs
}

// register builds the settings table: each section, in the order the
// reference and `sandboxd config default` list them, with its settings'
// keys, flags, defaults and help. The sections of subsystems with code of
// their own in this package register there (kube.go, egress.go, ports.go).
func (c *config) register(r *registry) {
	p, dc := &c.policy, &c.docker

	s := r.section("server", "The gRPC server: where it listens, who may call it, its logs, its shutdown, its state and its backend.")
	s.String("listen", &c.listen, "listen", "127.0.0.1:50051", "`address` to serve gRPC on (host:port); an address beyond loopback needs --auth-tokens (or --insecure)")
	s.String("auth_tokens", &c.authTokens, "auth-tokens", "", "token `file` enabling authentication: one \"TOKEN TENANT ROLE [NAME]\" per line (role user or admin; # comments; NAME, 1-64 of [A-Za-z0-9._@-], names the token in the audit trail); each call then needs \"authorization: Bearer TOKEN\" and sees only its tenant's sandboxes (admin: all). Empty: no authentication")
	s.Bool("insecure", &c.insecure, "insecure", false, "serve without --auth-tokens on an address beyond loopback: anyone who can connect controls every sandbox")
	s.String("tls_cert", &c.tlsCert, "tls-cert", "", "TLS certificate `file` (PEM); with --tls-key, serve TLS instead of plaintext (sandboxctl then connects with --tls or --ca FILE)")
	s.String("tls_key", &c.tlsKey, "tls-key", "", "TLS private key `file` (PEM), for --tls-cert")
	s.Text("log_level", &c.logLevel, "log-level", logLevel{slog.LevelInfo}, "log `level`: debug, info, warn or error")
	s.String("log_format", &c.logFormat, "log-format", "text", "log `format`: text or json (both to stderr)")
	s.Duration("shutdown_timeout", &c.shutdownTimeout, "shutdown-timeout", 10*time.Second, "on SIGINT/SIGTERM, the longest the shutdown takes: calls (including Execute streams) get this less a fifth (at most 2s) to end before they are cut off, closing the sandbox manager the rest")
	s.String("state_dir", &dc.StateDir, "state-dir", "", "`directory` of sandboxd's state: the sandboxes' /io and /workspace volumes and metadata, the registry, the audit trail and the webhooks' queue (empty: $XDG_STATE_HOME/sandboxd, else ~/.local/state/sandboxd)")
	s.String("backend", &c.backend, "backend", backendDocker, "where sandboxes run: docker (containers on this host's engine) or kubernetes (a Pod each, with the [kubernetes] settings; replicas of sandboxd may run side by side)")

	s = r.section("doors", "The other doors to the same sandboxes, beside gRPC.")
	s.String("e2b_listen", &c.e2bListen, "e2b-listen", "", "`address` to serve the E2B-compatible HTTP API on (host:port; empty: off): the official E2B SDKs work against it with E2B_API_URL and E2B_SANDBOX_URL set to http://ADDRESS. API keys are --auth-tokens tokens; beyond loopback it needs them as --listen does")

	s = r.section("sandboxes", "What a sandbox is started from, how many may live, and for how long.")
	s.String("image", &p.Image, "image", core.DefaultImage, "container `image` of new sandboxes (make image builds the default)")
	s.Int("max_sandboxes", &p.MaxSandboxes, "max-sandboxes", 0, "most sandboxes alive at once, warm-pool ones included; further users get RESOURCE_EXHAUSTED naming the cap (0: no cap)")
	s.Int("max_sandboxes_per_tenant", &p.MaxSandboxesPerTenant, "max-sandboxes-per-tenant", 0, "most sandboxes one tenant may have alive at once; further users of the tenant get RESOURCE_EXHAUSTED (0: no cap). With several tenants, set it below --max-sandboxes, or one tenant can take them all")
	s.Duration("max_lifetime", &p.MaxLifetime, "max-lifetime", 0, "remove a sandbox this long after its creation, however busy (0: no limit)")

	s = r.section("limits", "Each sandbox's resources: what one gets when it asks for none, and the most a caller may ask for. Sizes take bytes or units (512m, 1g, 1GiB; binary units).")
	s.Size("default_memory", &p.DefaultLimits.MemoryBytes, "default-memory", 1<<30, "memory limit (no swap) of a sandbox that asks for none (`size`: bytes, or 512m, 1g, 1GiB; binary units)")
	s.Size("max_memory", &p.MaxLimits.MemoryBytes, "max-memory", 8<<30, "largest memory limit a caller may ask for (`size`)")
	p.DefaultLimits.NanoCPUs = 1e9
	s.Var("default_cpus", (*cpus)(&p.DefaultLimits.NanoCPUs), kindFloat, "default-cpus", "CPU limit of a sandbox that asks for none, in `cores` (fractions allowed)")
	s.Var("max_cpus", (*cpus)(&p.MaxLimits.NanoCPUs), kindFloat, "max-cpus", "largest CPU limit a caller may ask for, in `cores` (0: the host's CPU count)")
	s.Int64("default_pids", &p.DefaultLimits.PidsLimit, "default-pids", 256, "process and thread limit of a sandbox that asks for none (under --runtime runsc at least 128: it also counts gVisor's own threads)")
	s.Int64("max_pids", &p.MaxLimits.PidsLimit, "max-pids", 4096, "largest process limit a caller may ask for")
	s.Size("default_disk", &p.DefaultLimits.DiskBytes, "default-disk", core.DefaultDiskBytes, "/workspace size of a sandbox that asks for none (`size`, limits.disk_bytes); writing past it fails inside the sandbox with \"No space left on device\", the host's disk never fills")
	s.Size("max_disk", &p.MaxLimits.DiskBytes, "max-disk", core.DefaultMaxDiskBytes, "largest /workspace size a caller may ask for (`size`)")
	s.Size("io_disk", &p.IODiskBytes, "io-disk", core.DefaultIODiskBytes, "size of each sandbox's /io volume, which holds its command log and outputs (`size`)")

	s = r.section("commands", "Commands run in a sandbox.")
	s.Duration("default_timeout", &p.DefaultTimeout, "default-timeout", core.DefaultCommandTimeout, "wall-clock limit of a command that asks for none")
	s.Duration("max_timeout", &p.MaxTimeout, "max-timeout", core.DefaultMaxTimeout, "largest command timeout a caller may ask for")
	c.maxCode = byteSize(core.MaxCodeBytes)
	s.Var("max_code", &c.maxCode, kindSize, "max-code", "largest code of one command (`size`, at most 1MiB); longer code is INVALID_ARGUMENT")

	s = r.section("files", "Files moved in and out of sandboxes.")
	s.Size("max_upload", &p.MaxUploadBytes, "max-upload", core.DefaultMaxUploadBytes, "largest file UploadFile and UploadVolumeFile accept (`size`); larger uploads are INVALID_ARGUMENT")

	s = r.section("hibernation", "Idle sandboxes: when they hibernate (globals and files kept on disk, no memory used) or go, and the disk their snapshots may take. See docs/hibernation.md.")
	s.Duration("idle_ttl", &p.IdleTTL, "idle-ttl", core.DefaultIdleTTL, "hibernate (or, with --on-idle delete, remove) a sandbox after this long without use")
	s.String("on_idle", &p.OnIdle, "on-idle", core.OnIdleHibernate, "what --idle-ttl does to a running sandbox: hibernate (globals and files kept on disk, no memory used; woken by its next use; see docs/hibernation.md) or delete (container, volumes and state gone)")
	s.Duration("hibernated_ttl", &p.HibernatedTTL, "hibernated-ttl", core.DefaultHibernatedTTL, "delete a hibernated sandbox after this long hibernated")
	s.Duration("max_idle_ttl", &p.MaxIdleTTL, "max-idle-ttl", 0, "the longest idle timeout a caller may give one sandbox (SetSandboxTimeout, options.idle_timeout); 0: 24h, or --idle-ttl if longer")
	s.Size("snapshot_disk_budget", &dc.SnapshotDiskBudget, "snapshot-disk-budget", 0, "most disk all hibernated sandboxes' snapshots of their globals may take together (`size`; 0: no bound). Past it snapshots are dropped, and their sandboxes wake with their files only (/workspace kept), saying so: one larger than the budget (or the per-tenant budget) alone and at once; otherwise the tenant whose snapshots take the most loses its oldest first")
	s.Size("snapshot_disk_budget_per_tenant", &dc.SnapshotDiskBudgetPerTenant, "snapshot-disk-budget-per-tenant", 0, "most disk one tenant's hibernated sandboxes' snapshots may take together (`size`; 0: no bound but --snapshot-disk-budget); past it the tenant's oldest are dropped")

	s = r.section("pool", "Started, unclaimed sandboxes kept ready for new users and wakes.")
	s.Int("size", &p.WarmPool, "warm-pool", autoWarmPool, fmt.Sprintf("keep this many started, unclaimed sandboxes so a new user's first AcquireSandbox skips container start-up (milliseconds) and a hibernated sandbox wakes in a started container; a claimed pool sandbox is shaped to the request (env, limits of memory, CPUs and processes, named volumes under runc, metadata, timeouts), and forks and starts from a snapshot run in pool containers too; requests with network come from --warm-pool-network's pool; those with another disk size or a template without a pool of its own start their own (sandboxd_warm_pool_misses_total counts them by reason); %d: %d on the Docker backend (at most --max-sandboxes), 0 on Kubernetes (Pods scheduled before anyone asks are the cluster operator's decision); 0: no pool", autoWarmPool, defaultDockerWarmPool))
	s.Int("network_size", &p.WarmPoolNetwork, "warm-pool-network", autoWarmPool, fmt.Sprintf("keep this many more started, unclaimed sandboxes with their network plumbing made (holder, address, CA), sealed by the egress gateway until a request with network claims one and its policy, header rules and public traffic take effect (milliseconds, where a cold start with network takes a second or more); a request without network never gets one of them; needs --allow-network; %d: %d on the Docker backend with --allow-network and a --warm-pool (within --max-sandboxes), else 0; 0: requests with network start their own", autoWarmPool, defaultDockerWarmPoolNetwork))
	s.List("templates", &c.warmPoolTemplates, "warm-pool-template", "", "comma-separated `TENANT/NAME=N` (in the file, an array of them): keep N started sandboxes of that template's current version for its tenant's new users, as --warm-pool does for the server's image (they count against --max-sandboxes); see docs/templates.md")

	s = r.section("docker", "The Docker backend's own settings (--backend docker).")
	s.String("runtime", &p.Runtime, "runtime", "", "Docker `runtime` for sandboxes, e.g. runsc for gVisor (empty: the engine's default)")
	s.Bool("disk_volumes", &c.diskVolumes, "disk-volumes", true, "give each sandbox size-limited volumes for /workspace and /io (sparse ext4 images, loop-mounted: needs root, loop devices and mkfs.ext4); false: plain directories with no disk limit")
	s.Bool("memory_snapshots", &dc.MemorySnapshots, "memory-snapshots", false, "under --runtime runsc with dockerd in experimental mode, hibernate at level memory: checkpoint the whole container (docker checkpoint; every process kept exactly; seconds per hibernation), with the globals snapshot as fallback")
	s.Bool("fast_wake", &c.fastWake, "fast-wake", true, "wake a hibernated sandbox in a started warm-pool container whose Python already imported numpy and pandas, instead of a new container (needs --warm-pool, disk volumes and runc; the pool container takes the sandbox's env and limits in place; sandboxes with network, volumes or a template's image wake as before); the pool's sandboxes then hold those imports")

	c.kube.register(r.section("kubernetes", "The Kubernetes backend's settings (--backend kubernetes). See docs/kubernetes.md."))
	c.egress.register(r.section("egress", "Sandboxes' outbound network, through sandboxd's egress gateway under each sandbox's policy. See docs/networking.md."), p)
	c.ports.register(r.section("ports", "The HTTP front for networked sandboxes' ports (GetHost's URLs). See docs/networking.md#ports."))

	s = r.section("templates", "Templates: images built from a Dockerfile-like recipe, per tenant. See docs/templates.md.")
	s.Int("builds", &p.TemplateBuilds, "template-builds", core.DefaultTemplateBuilds, "most template builds running at once, all tenants together; further BuildTemplate calls are RESOURCE_EXHAUSTED. Keep it above --template-builds-per-tenant")
	s.Int("builds_per_tenant", &p.MaxTemplateBuildsPerTenant, "template-builds-per-tenant", 0, "most template builds of one tenant running at once; further BuildTemplate calls of the tenant are RESOURCE_EXHAUSTED (0: a quarter of --template-builds, at least 1, or all of them when the server has one tenant: no --auth-tokens, or a token file naming one)")
	s.Duration("build_timeout", &p.TemplateBuildTimeout, "template-build-timeout", core.DefaultTemplateBuildTimeout, "longest a template build may run; past it the build fails as DEADLINE_EXCEEDED and the previous version stays in service")
	s.Size("max_file", &p.MaxTemplateFileBytes, "max-template-file", core.DefaultMaxTemplateFileBytes, "largest archive UploadTemplateFile accepts (`size`); larger ones are RESOURCE_EXHAUSTED")
	s.Int("max_per_tenant", &p.MaxTemplatesPerTenant, "max-templates-per-tenant", core.DefaultMaxTemplatesPerTenant, "most templates one tenant may have; further ones are RESOURCE_EXHAUSTED")
	s.List("build_allow", &c.templateBuildAllow, "template-build-allow", "", "comma-separated `destinations` (in the file, an array; domains, *.domains, addresses, CIDRs) a template build's steps may reach through the egress gateway, with --allow-network (empty: the hosts of this host's apt sources, its Debian mirrors); without --allow-network builds have no network")

	s = r.section("volumes", "Named volumes, which outlive sandboxes.")
	s.Size("max_size", &p.MaxVolumeBytes, "max-volume-size", core.DefaultMaxVolumeBytes, "largest volume CreateVolume accepts (`size`, at least 16MiB); larger ones are INVALID_ARGUMENT")
	s.Int("max_per_tenant", &p.MaxVolumesPerTenant, "max-volumes-per-tenant", core.DefaultMaxVolumesPerTenant, "most volumes one tenant may have; further ones are RESOURCE_EXHAUSTED")

	s = r.section("watches", "WatchDirectory calls: each holds an inotify instance of sandboxd's, and an inotify watch and a descriptor per directory. The server-wide caps only protect the host.")
	s.Int("max", &p.MaxWatches, "max-watches", core.DefaultMaxWatches, "most WatchDirectory calls in progress on the server, all tenants together: each holds an inotify instance of sandboxd's (Linux allows 128 per user by default, fs.inotify.max_user_instances, shared with root's other processes: the default is half of that). Only protects the host; keep it well above --max-watches-per-tenant")
	s.Int("max_per_tenant", &p.MaxWatchesPerTenant, "max-watches-per-tenant", 0, "most WatchDirectory calls in progress of one tenant, over all its sandboxes (0: a quarter of --max-watches, or all of it when the server has one tenant: no --auth-tokens, or a token file naming one)")
	s.Int("max_per_sandbox", &p.MaxWatchesPerSandbox, "max-watches-per-sandbox", 0, fmt.Sprintf("most WatchDirectory calls in progress on one sandbox (0: %d, or --max-watches-per-tenant if lower)", core.DefaultMaxWatchesPerSandbox))
	s.Int("max_dirs", &p.MaxWatchDirs, "max-watch-dirs", core.DefaultMaxWatchDirs, "most directories all WatchDirectory calls on the server watch together: each holds an inotify watch (fs.inotify.max_user_watches) and an open descriptor of sandboxd's. Only protects the host; keep it well above --max-watch-dirs-per-tenant")
	s.Int("max_dirs_per_tenant", &p.MaxWatchDirsPerTenant, "max-watch-dirs-per-tenant", 0, "most directories one tenant's WatchDirectory calls watch, over all its sandboxes (0: a quarter of --max-watch-dirs, or all of it when the server has one tenant)")
	s.Int("max_dirs_per_sandbox", &p.MaxWatchDirsPerSandbox, "max-watch-dirs-per-sandbox", 0, fmt.Sprintf("most directories the WatchDirectory calls on one sandbox watch (0: %d, or --max-watch-dirs-per-tenant if lower)", core.DefaultMaxWatchDirsPerSandbox))
	s.Int("max_dirs_per_call", &p.MaxWatchDirsPerCall, "max-watch-dirs-per-call", 0, fmt.Sprintf("most directories one WatchDirectory call watches (0: %d, or --max-watch-dirs-per-sandbox if lower)", core.DefaultMaxWatchDirsPerCall))

	s = r.section("streams", "Streams in progress: a command's output followed (Execute, StreamCommand), a download, an upload; each holds descriptors of sandboxd's. The server-wide cap only protects the host.")
	s.Int("max", &p.MaxStreams, "max-streams", core.DefaultMaxStreams, "most streams in progress on the server, all tenants together (an Execute or StreamCommand following output, a download, an upload): each holds one or two descriptors of sandboxd's; past a cap the call is RESOURCE_EXHAUSTED naming it, and a gRPC Execute refused so has run nothing. Only protects the host; keep it well above --max-streams-per-tenant")
	s.Int("max_per_tenant", &p.MaxStreamsPerTenant, "max-streams-per-tenant", 0, "most streams in progress of one tenant's callers (0: a quarter of --max-streams, or all of it when the server has one tenant)")
	s.Int("max_per_sandbox", &p.MaxStreamsPerSandbox, "max-streams-per-sandbox", 0, fmt.Sprintf("most streams in progress on one sandbox (0: %d, or --max-streams-per-tenant if lower)", core.DefaultMaxStreamsPerSandbox))

	s = r.section("audit", "The audit trail of mutating calls. See docs/observability.md#audit-trail.")
	s.Bool("enabled", &c.audit.enabled, "audit", true, "record every mutating call (who, what, which sandbox, outcome; never code, env values or file contents) to STATE_DIR/audit/audit.jsonl, readable with ListAuditEvents and sandboxctl audit; false: no trail, and ListAuditEvents answers FAILED_PRECONDITION")
	s.Size("max_size", &c.audit.maxFileBytes, "audit-max-size", audit.DefaultMaxFileBytes, "size at which the audit log is rotated (`size`, whole MiB, at least 1MiB)")
	s.Int("max_files", &c.audit.maxFiles, "audit-max-files", audit.DefaultMaxFiles, "most audit log files kept, the current one included (at least 2); the oldest is deleted past it, so the trail takes at most about this times --audit-max-size")

	s = r.section("webhooks", "Lifecycle webhooks. See docs/observability.md.")
	s.String("file", &c.webhooks.file, "webhooks", "", "JSON `file` of lifecycle webhook endpoints ({\"endpoints\": [{\"name\", \"url\", \"secret\": \"whsec_...\", \"tenants\", \"events\", \"max_queue\"}]}): events (created, hibernated, woken, killed, expired, died, command.finished) are signed (Standard Webhooks) and delivered at least once, in order, from a durable queue in STATE_DIR/webhooks.db (empty: no webhooks)")
	s.Duration("timeout", &c.webhooks.timeout, "webhook-timeout", webhooks.DefaultTimeout, "bound on one webhook delivery attempt (connect, send, answer); a slower endpoint is retried with backoff")
	s.Duration("max_age", &c.webhooks.maxAge, "webhook-max-age", webhooks.DefaultMaxAge, "how long an undelivered webhook event is retried before it is dropped (counted in sandboxd_webhook_events_dropped_total and logged)")

	s = r.section("metrics", "Metrics and traces. See docs/observability.md#metrics-and-traces.")
	s.String("listen", &c.metricsListen, "metrics-listen", "", "`address` to serve Prometheus metrics on, at /metrics over plain HTTP with no authentication (host:port; empty: no metrics). The series name tenants: keep it on loopback or a monitoring network")
	s.Duration("sample_interval", &dc.MetricsSampleInterval, "metrics-sample-interval", 5*time.Second, "sample each running sandbox's CPU, memory, disk, processes and network this often, for GetSandboxMetrics, sandboxctl top and the E2B door's getMetrics (the last 10 minutes are kept per sandbox; 0: no sampling, no samples)")
	s.String("otlp_endpoint", &c.otlpEndpoint, "otlp-endpoint", "", "OpenTelemetry collector `URL` to export traces of the gRPC calls to over OTLP/HTTP, e.g. http://127.0.0.1:4318 (the path defaults to /v1/traces; empty: no tracing)")
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
// The pool with network keeps two by default, as the sealed pool does and
// for the same reason: a second new user, wake or fork within the refill
// is served too (a fork of 2 takes two at once). Each also holds a holder
// container and an address.
const (
	autoWarmPool                 = -1
	defaultDockerWarmPool        = 2
	defaultDockerWarmPoolNetwork = 2
)

// defaultWarmPool is --warm-pool's value when it was not given.
func (c *config) defaultWarmPool() int {
	if c.backend == backendKubernetes {
		return 0
	}
	n := defaultDockerWarmPool
	if m := c.policy.MaxSandboxes; m > 0 && m < n {
		n = m
	}
	return n
}

// defaultWarmPoolNetwork is --warm-pool-network's value when it was not
// given: defaultDockerWarmPoolNetwork on the Docker backend with
// --allow-network, as far as --max-sandboxes leaves room beside
// --warm-pool.
func (c *config) defaultWarmPoolNetwork() int {
	p := &c.policy
	if c.backend == backendKubernetes || !p.AllowNetwork || p.WarmPool == 0 {
		// --warm-pool 0 turns pooling off, this pool included, unless
		// --warm-pool-network is given.
		return 0
	}
	n := defaultDockerWarmPoolNetwork
	if m := p.MaxSandboxes; m > 0 {
		n = max(0, min(n, m-p.WarmPool))
	}
	return n
}

// envName is the environment variable for a flag.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// check catches settings that would only fail later, or confusingly; it
// reports every such problem, not just the first.
func (c *config) check() error {
	p, mc := &c.policy, &c.docker
	var errs problems
	if mc.StateDir == "" && c.backend != backendKubernetes {
		errs = append(errs, errors.New("--state-dir is empty and no default could be derived (set HOME or XDG_STATE_HOME)"))
	}
	if p.Image == "" {
		errs = append(errs, errors.New("--image is empty"))
	}
	switch c.backend {
	case backendDocker:
	case backendKubernetes:
		errs = appendErr(errs, c.kube.check())
		if (c.kube.egressCNI || len(c.kube.egressDeny) > 0) && !p.AllowNetwork {
			errs = append(errs, errors.New("--kube-egress-cni and --kube-egress-deny need --allow-network"))
		}
	default:
		errs = append(errs, fmt.Errorf("--backend %q: want docker or kubernetes", c.backend))
	}
	if c.logFormat != "text" && c.logFormat != "json" {
		errs = append(errs, fmt.Errorf("--log-format %q: want text or json", c.logFormat))
	}
	if p.MaxLifetime < 0 {
		errs = append(errs, fmt.Errorf("--max-lifetime %v is negative", p.MaxLifetime))
	}
	if p.MaxIdleTTL < 0 || (p.MaxIdleTTL > 0 && p.MaxIdleTTL < p.IdleTTL) {
		errs = append(errs, fmt.Errorf("--max-idle-ttl %v must be 0 (automatic) or at least --idle-ttl %v", p.MaxIdleTTL, p.IdleTTL))
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"max-sandboxes", p.MaxSandboxes}, {"max-sandboxes-per-tenant", p.MaxSandboxesPerTenant}, {"warm-pool", p.WarmPool}, {"warm-pool-network", p.WarmPoolNetwork}} {
		if n.v < 0 {
			errs = append(errs, fmt.Errorf("--%s %d is negative", n.name, n.v))
		}
	}
	errs = appendErr(errs, checkCaps(*p))
	errs = appendErr(errs, checkEgress(p, mc.EgressSubnet))
	if p.MaxSandboxes > 0 && p.WarmPool > p.MaxSandboxes {
		errs = append(errs, fmt.Errorf("--warm-pool %d is above --max-sandboxes %d", p.WarmPool, p.MaxSandboxes))
	} else if p.MaxSandboxes > 0 && p.WarmPool+p.WarmPoolNetwork > p.MaxSandboxes {
		errs = append(errs, fmt.Errorf("--warm-pool %d and --warm-pool-network %d are above --max-sandboxes %d together", p.WarmPool, p.WarmPoolNetwork, p.MaxSandboxes))
	}
	if p.WarmPoolNetwork > 0 && !p.AllowNetwork {
		errs = append(errs, fmt.Errorf("--warm-pool-network %d needs --allow-network", p.WarmPoolNetwork))
	}
	if p.WarmPoolNetwork > 0 && c.backend == backendKubernetes {
		errs = append(errs, errors.New("--warm-pool-network is the Docker backend's (a Kubernetes pool Pod has no network: its sidecar's arguments are fixed when it is made)"))
	}
	if c.metricsListen != "" {
		if _, _, err := net.SplitHostPort(c.metricsListen); err != nil {
			errs = append(errs, fmt.Errorf("--metrics-listen %q: %v", c.metricsListen, err))
		}
	}
	if c.e2bListen != "" {
		if _, _, err := net.SplitHostPort(c.e2bListen); err != nil {
			errs = append(errs, fmt.Errorf("--e2b-listen %q: %v", c.e2bListen, err))
		}
	}
	errs = appendErr(errs, c.ports.check(c))
	if c.otlpEndpoint != "" {
		u, err := url.Parse(c.otlpEndpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("--otlp-endpoint %q: want an http:// or https:// URL such as http://127.0.0.1:4318", c.otlpEndpoint))
		}
	}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		errs = append(errs, errors.New("--tls-cert and --tls-key go together"))
	}
	if p.MaxCodeBytes <= 0 || p.MaxCodeBytes > core.MaxCodeBytes {
		errs = append(errs, fmt.Errorf("--max-code must be between 1 and %d bytes (1MiB)", core.MaxCodeBytes))
	}
	// In core.Policy a zero means "the built-in default", not "none",
	// so a zero here would silently mean something else than it says.
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"idle-ttl", p.IdleTTL}, {"default-timeout", p.DefaultTimeout}, {"max-timeout", p.MaxTimeout}, {"shutdown-timeout", c.shutdownTimeout}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("--%s must be positive, got %v", d.name, d.v))
		}
	}
	if p.MaxUploadBytes <= 0 {
		errs = append(errs, errors.New("--max-upload must be positive"))
	}
	if p.MaxVolumeBytes < core.MinVolumeBytes {
		errs = append(errs, fmt.Errorf("--max-volume-size must be at least %d bytes (16MiB)", core.MinVolumeBytes))
	}
	if p.MaxVolumesPerTenant <= 0 {
		errs = append(errs, errors.New("--max-volumes-per-tenant must be positive"))
	}
	if p.TemplateBuilds <= 0 || p.TemplateBuildTimeout <= 0 || p.MaxTemplateFileBytes <= 0 || p.MaxTemplatesPerTenant <= 0 {
		errs = append(errs, errors.New("--template-builds, --template-build-timeout, --max-template-file and --max-templates-per-tenant must be positive"))
	}
	if p.MaxTemplateBuildsPerTenant < 0 || p.MaxTemplateBuildsPerTenant > p.TemplateBuilds {
		errs = append(errs, fmt.Errorf("--template-builds-per-tenant %d must be between 0 (derived) and --template-builds %d", p.MaxTemplateBuildsPerTenant, p.TemplateBuilds))
	}
	if _, err := core.CompileNetworkPolicy(core.NetworkPolicy{AllowOut: mc.TemplateBuildAllow}); err != nil {
		errs = append(errs, fmt.Errorf("--template-build-allow: %v", err))
	}
	limits := []struct {
		name     string
		def, max int64
	}{
		{"memory", p.DefaultLimits.MemoryBytes, p.MaxLimits.MemoryBytes},
		{"cpus", p.DefaultLimits.NanoCPUs, p.MaxLimits.NanoCPUs},
		{"pids", p.DefaultLimits.PidsLimit, p.MaxLimits.PidsLimit},
	}
	if !mc.NoDiskVolumes {
		limits = append(limits, struct {
			name     string
			def, max int64
		}{"disk", p.DefaultLimits.DiskBytes, p.MaxLimits.DiskBytes})
		if p.IODiskBytes < 16<<20 || p.DefaultLimits.DiskBytes < 16<<20 {
			errs = append(errs, errors.New("--default-disk and --io-disk must be at least 16MiB"))
		}
	}
	for _, l := range limits {
		switch {
		case l.def <= 0:
			errs = append(errs, fmt.Errorf("--default-%s must be positive", l.name))
		case l.max <= 0:
			errs = append(errs, fmt.Errorf("--max-%s must be positive", l.name))
		case l.def > l.max:
			errs = append(errs, fmt.Errorf("--default-%s is above --max-%s", l.name, l.name))
		}
	}
	if p.DefaultTimeout > p.MaxTimeout {
		errs = append(errs, fmt.Errorf("--default-timeout %v is above --max-timeout %v", p.DefaultTimeout, p.MaxTimeout))
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}

// appendErr appends err, or each of its problems, to errs.
func appendErr(errs problems, err error) problems {
	var ps problems
	switch {
	case err == nil:
		return errs
	case errors.As(err, &ps):
		return append(errs, ps...)
	}
	return append(errs, err)
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
