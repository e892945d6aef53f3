package docker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/egress"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/iolog"
)

// Config configures a Manager: the policy every backend shares
// (core.Policy, embedded, so its fields read as the Config's) and what is
// the Docker backend's own. Zero fields take the defaults given.
type Config struct {
	core.Policy

	// StateDir is the root of all state; sandboxes live in
	// StateDir/sandboxes/<id>/{meta.json,io/,workspace/}. Required.
	StateDir string
	// NoDiskVolumes keeps each sandbox's /io and /workspace as plain
	// directories of the host's file system instead of size-limited
	// volumes (volume.go): sandboxed code can then fill the host's disk. For
	// hosts where sandboxd cannot loop-mount (not root, no loop devices) and
	// for tests that do not need disk limits. It sets Policy.NoDiskLimit.
	NoDiskVolumes bool
	// NoFastWake wakes hibernated sandboxes in new containers even when a
	// warm-pool container could carry them (carrier.go).
	NoFastWake bool
	// Logger receives structured logs; default slog.Default().
	Logger *slog.Logger
	// Metrics receives events for monitoring (core.Metrics); nil discards.
	Metrics core.Metrics
	// Lifecycle receives the sandboxes' lifecycle events (created,
	// hibernated, woken, killed, expired, died, command.finished), for
	// sandboxd's webhooks; nil discards.
	Lifecycle core.LifecycleSink
	// MemorySnapshots lets a hibernation checkpoint the whole container
	// (level memory: every process exactly) under the runsc runtime, with
	// dockerd in experimental mode; the globals snapshot is still taken as
	// the fallback. Off by default: a checkpoint takes seconds.
	MemorySnapshots bool
	// Snapshots stores hibernation snapshots; default LocalSnapshots.
	Snapshots SnapshotStore
	// TemplateBuildAllow are the only destinations (core.NetworkPolicy's
	// AllowOut form) a template build's steps may reach, through the
	// egress gateway, when AllowNetwork is set; default: the hosts of the
	// host's apt sources (its Debian mirrors). Without AllowNetwork builds
	// have no network.
	TemplateBuildAllow []string
	// WarmPoolTemplates keeps, per "TENANT/NAME" template, that many
	// started sandboxes of its current version for its new users
	// (template_pool.go); they count against MaxSandboxes as the server's
	// pool does.
	WarmPoolTemplates map[string]int
	// SnapshotDiskBudget bounds the bytes all hibernated sandboxes'
	// snapshots of their globals take together; past it snapshots are
	// dropped, those of the tenant whose snapshots take the most first,
	// its oldest first (hibernate_budget.go). Their sandboxes then wake at
	// level files, and say so. 0 = no bound.
	SnapshotDiskBudget int64
	// SnapshotDiskBudgetPerTenant bounds the bytes one tenant's hibernated
	// sandboxes' snapshots take together; past it the tenant's oldest are
	// dropped. 0 = no bound but SnapshotDiskBudget. A snapshot larger than
	// the smaller bound is dropped alone, at once.
	SnapshotDiskBudgetPerTenant int64

	// EgressSubnet is the IPv4 block networked sandboxes are addressed
	// from (sandboxd --egress-subnet): the egress gateway takes its first
	// address and each sandbox a /31 pair of it (network.go). It must not
	// overlap the host's own networks (the networking's start refuses one
	// that overlaps an address or a route of the host, checkOverlap); no
	// sandbox reaches it through the gateway. Default DefaultEgressSubnet.
	EgressSubnet netip.Prefix

	// EgressInstance, when set, names this sandboxd's host-side network
	// objects (sandboxd --egress-instance): its nftables table, the bridge
	// holding the gateway's address and its interfaces' prefix
	// (instanceNetNames), so that several sandboxd processes on one host
	// (tests, private deployments) each keep their own; each needs its own
	// EgressSubnet too. Empty: table sandboxd, bridge sandboxd0,
	// interfaces sbx-*.
	EgressInstance string

	// Egress configures the egress gateway (its Bounds.SandboxNet is
	// EgressSubnet); it runs when AllowNetwork is set or a networked
	// sandbox exists.
	Egress egress.Config
	// NewGateway makes the gateway; default the egress package's
	// (newEgressGateway). Tests substitute one that observes connections.
	NewGateway func(egress.Config) Gateway

	// Ports is sandboxd's HTTP front for sandbox ports (sandboxd
	// --ports-listen): GetHost answers with its URLs and traffic tokens.
	// Nil: the front is off, and GetHost is FAILED_PRECONDITION saying so.
	Ports *core.PortsFront

	// netNames and netKernel replace the host-side names and the kernel
	// plumbing, for in-package tests (zero: defaultNetNames, the real
	// kernel).
	netNames  netNames
	netKernel netKernel
	// mountKernel replaces the kernel's side of mounting volumes into
	// running containers, for in-package tests (zero: linuxMounts).
	mountKernel mountKernel

	// AtStep, when set, is called at each named step of a hibernation, a
	// wake or a snapshot (HibernateSteps, WakeSteps, SnapshotSteps) once
	// the step's state is on disk, before the next action. It is a test
	// hook: only the test build of sandboxd (tag sandboxd_testhooks, cmd/sandboxd/testhooks.go)
	// sets it, to kill itself at the step its environment names, so that
	// the e2e tests can check that every step is crash safe.
	AtStep func(step string)

	// MetricsSampleInterval is how often each running sandbox's resource
	// use is sampled for SandboxMetrics (sandboxd
	// --metrics-sample-interval, 5s by default there); 0 samples nothing,
	// and SandboxMetrics then answers no samples.
	MetricsSampleInterval time.Duration

	// recheck replaces recheckInterval, for in-package tests (0: the
	// interval).
	recheck time.Duration
}

// applyDefaults fills zero fields and checks the result: the policy's own
// checks (core.Policy.ApplyDefaults), then what only this backend knows.
func (c *Config) applyDefaults() error {
	if c.StateDir == "" {
		return core.Invalidf("config: StateDir is required")
	}
	abs, err := filepath.Abs(c.StateDir)
	if err != nil {
		return core.Invalidf("config: StateDir: %v", err)
	}
	c.StateDir = abs
	c.NoDiskLimit = c.NoDiskLimit || c.NoDiskVolumes
	if err := c.Policy.ApplyDefaults(); err != nil {
		return err
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Snapshots == nil {
		c.Snapshots = LocalSnapshots{}
	}
	c.Metrics = core.MetricsOrNoop(c.Metrics) // metrics hook
	c.Lifecycle = core.LifecycleOrNoop(c.Lifecycle)
	if !c.EgressSubnet.IsValid() {
		c.EgressSubnet = DefaultEgressSubnet
	}
	switch {
	case !c.EgressSubnet.Addr().Is4() || c.EgressSubnet.Bits() < 8 || c.EgressSubnet.Bits() > 28:
		return core.Invalidf("config: EgressSubnet %s: want an IPv4 block of /8 to /28 (room for the gateway and a /31 per sandbox)", c.EgressSubnet)
	case c.EgressSubnet != c.EgressSubnet.Masked():
		return core.Invalidf("config: EgressSubnet %s has host bits set; did you mean %s?", c.EgressSubnet, c.EgressSubnet.Masked())
	}
	switch {
	case c.MetricsSampleInterval < 0:
		return core.Invalidf("config: MetricsSampleInterval must not be negative")
	case c.SnapshotDiskBudget < 0:
		return core.Invalidf("config: SnapshotDiskBudget must not be negative")
	case c.SnapshotDiskBudgetPerTenant < 0:
		return core.Invalidf("config: SnapshotDiskBudgetPerTenant must not be negative")
	}
	if c.netNames == (netNames{}) {
		c.netNames = defaultNetNames
		if c.EgressInstance != "" {
			n, err := instanceNetNames(c.EgressInstance)
			if err != nil {
				return err
			}
			c.netNames = n
		}
	}
	if c.mountKernel == nil {
		c.mountKernel = linuxMounts{}
	}
	if c.netKernel == nil {
		c.netKernel = linuxKernel{}
	}
	if c.NewGateway == nil {
		c.NewGateway = newEgressGateway
	}
	return nil
}

// DefaultEgressSubnet addresses networked sandboxes unless configured: a
// block of the shared address space (RFC 6598, 100.64.0.0/10), which is
// rarely a host's own and is a special range no sandbox reaches.
var DefaultEgressSubnet = netip.MustParsePrefix("100.127.0.0/16")

// Timings of background work.
const (
	// flushInterval throttles meta.json writes of last activity to one per
	// sandbox per interval.
	flushInterval = time.Second
	// recheckInterval is how often a follower re-reads its file and checks
	// the sandbox without a file notification, in case inotify events were
	// lost (queue overflow) or the watch could not be set up.
	recheckInterval = time.Second
	// removeRetry is how long an expired sandbox whose removal failed
	// (Docker unreachable) waits before the next attempt.
	removeRetry = 30 * time.Second
	// removeTimeout bounds one removal done in the background.
	removeTimeout = time.Minute
	// containerRemoveTimeout bounds the forced removal of a container in
	// any removal, whatever the caller's context: the engine kills it.
	containerRemoveTimeout = 30 * time.Second
	// ioCloseTimeout bounds how long a removal waits for the reads of the
	// sandbox's io/ to stop before unmounting. Reads check between lines
	// and chunks, so they stop within milliseconds; the bound is for the
	// unexpected (a host disk stalled).
	ioCloseTimeout = 5 * time.Second
)

// Manager owns the sandboxes. All its methods are safe for concurrent use;
// the locks they take nest in the order documented on sandbox (handle.go).
//
// Every sandbox operation on an ID (SetTimeout, Submit, the start of Follow,
// Interrupt, the file operations) and Acquire refresh the sandbox's idle
// TTL; Get and List only look. Sandboxes outlive the Manager: Close leaves their containers running
// and New finds them again.
type Manager struct {
	cfg         Config
	log         *slog.Logger
	docker      DockerAPI
	closeDocker func() error
	lock        *os.File // holds the state directory's exclusive lock

	reg  *registry
	pool *warmPool
	// netPool is the warm pool of sandboxes with their network plumbing
	// (Config.WarmPoolNetwork; shape.go).
	netPool *warmPool
	// carriers maps a carrier's pool-sandbox ID to the sandbox it carries
	// (carrier.go), for Docker's events, which name the former.
	carriers sync.Map
	// carriesWakes: pool sandboxes carry wakes (decideFastWake, at start).
	carriesWakes bool
	// mountsLater: the containers see mounts made after they started
	// (runc), so volumes can be mounted into a pool sandbox at its claim
	// (shape_volumes.go); decided at start.
	mountsLater bool
	creating    atomic.Int32 // sandboxes being created or claimed for users, not yet registered
	userLocks   keyedMutex   // by userKey.String()
	watch       *iolog.Watcher
	// watchCalls and watchDirs count WatchDirectory's calls in progress
	// and the directories they watch, against Policy.WatchCaps (watch.go).
	watchCalls, watchDirs core.Usage
	// acquiring counts, per tenant, what creating counts (acquire.go).
	acquiring tenantAcquires

	// recheck is recheckInterval, or Config.recheck.
	recheck time.Duration
	// snapshots is Config.Snapshots.
	snapshots SnapshotStore
	// snaps is the named snapshots (snapshots.go).
	snaps *snapshots
	// vols is the store of named volumes (volumes.go).
	vols *volumes
	// tpls is the store of templates (templates.go); tplEngine the engine
	// calls that build them, nil when the engine client lacks them.
	tpls      *templates
	tplEngine templateEngine
	// tplPools are the templates' warm pools (template_pool.go); nil
	// without Config.WarmPoolTemplates.
	tplPools *tplPools
	// checkpoints is the Docker client's checkpoint API, when it has one.
	checkpoints checkpointer
	// net is the sandboxes' networking (network.go): addresses, the
	// host-side plumbing and the egress gateway, started on first need.
	net *netState
	// sampler keeps the sandboxes' metrics (sampler.go); nil with
	// sampling off.
	sampler *sampler

	bgCtx     context.Context // background work; cancelled by Close
	bgCancel  context.CancelFunc
	wg        sync.WaitGroup // background goroutines
	closing   chan struct{}  // closed by Close
	closeOnce sync.Once
}

// New returns a Manager that has rebuilt its registry from the sandbox
// directories under cfg.StateDir and the containers Docker has, and removed
// what is left of interrupted creations and deletions, expired sandboxes and
// orphan containers, all before it returns: once New returns, every
// surviving sandbox is served as before the restart.
//
// docker is the Docker API to use; nil connects to the engine named by the
// environment (DOCKER_HOST etc.), with API version negotiation. New fails
// with ErrUnavailable when the engine cannot be reached.
func New(ctx context.Context, cfg Config, docker DockerAPI) (*Manager, error) {
	if err := cfg.applyDefaults(); err != nil {
		return nil, err
	}
	m := &Manager{
		cfg:     cfg,
		log:     cfg.Logger,
		docker:  docker,
		reg:     newRegistry(cfg.IdleTTL, cfg.MaxLifetime),
		pool:    newWarmPool(cfg.WarmPool, false),
		netPool: newWarmPool(cfg.WarmPoolNetwork, true),
		recheck: cmp.Or(cfg.recheck, recheckInterval),
		closing: make(chan struct{}),

		snapshots: cfg.Snapshots,
	}
	m.reg.hibernatedTTL = cfg.HibernatedTTL
	m.net = newNetState(cfg)
	if docker == nil {
		c, err := newDockerClient()
		if err != nil {
			return nil, err
		}
		m.docker, m.closeDocker = c, c.Close
	}
	m.checkpoints, _ = m.docker.(checkpointer)
	m.tplEngine, _ = m.docker.(templateEngine)
	m.carriesWakes = m.decideFastWake(ctx)
	m.mountsLater = m.laterMountsWhyNot(ctx) == ""
	m.reg.maxIdleTTL = cfg.MaxIdleTTL
	m.docker = countDockerErrors(m.docker, cfg.Metrics) // metrics hook
	fail := func(err error) (*Manager, error) {
		m.net.close()
		if m.watch != nil {
			m.watch.Close()
		}
		if m.lock != nil {
			m.lock.Close()
		}
		if m.closeDocker != nil {
			m.closeDocker()
		}
		return nil, err
	}
	if !cfg.NoDiskVolumes {
		if err := checkVolumeSupport(); err != nil {
			return fail(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(cfg.StateDir, sandboxesDir), 0o700); err != nil {
		return fail(fmt.Errorf("create state directory: %w", err))
	}
	lock, err := lockStateDir(cfg.StateDir)
	if err != nil {
		return fail(err)
	}
	m.lock = lock
	// Before reconcile: a volume a killed sandboxd left frozen mid-snapshot
	// is thawed here.
	if m.snaps, err = loadSnapshots(cfg.StateDir, m.log); err != nil {
		return fail(fmt.Errorf("load snapshots: %w", err))
	}
	// Before reconcile too: the containers it starts bind the volumes'
	// mounts.
	if m.vols, err = loadVolumes(ctx, cfg.StateDir, cfg.NoDiskVolumes, m.log); err != nil {
		return fail(fmt.Errorf("load volumes: %w", err))
	}
	if m.tpls, err = loadTemplates(cfg.StateDir, m.log); err != nil {
		return fail(fmt.Errorf("load templates: %w", err))
	}
	w, err := iolog.NewWatcher(m.log)
	if err != nil {
		return fail(fmt.Errorf("file watcher: %w", err))
	}
	m.watch = w
	warnHostWatchLimits(cfg.Policy, m.log)

	// Docker replays events since this instant when the monitor subscribes,
	// so a container that dies while reconcile runs is not missed.
	since := time.Now()
	if err := m.reconcile(ctx); err != nil {
		return fail(err)
	}
	if _, err := m.docker.ImageInspect(ctx, cfg.Image); err != nil {
		// Not fatal: the image may be built after sandboxd starts. Acquire
		// reports it to callers as a failed precondition.
		m.log.Warn("sandbox image is not available yet", "image", cfg.Image, "error", err)
	}

	if cfg.AllowNetwork {
		// At start, not at the first networked sandbox: the table must be
		// in place before any sandbox can have a veth.
		if err := m.net.start(); err != nil {
			return fail(err)
		}
	}
	m.bgCtx, m.bgCancel = context.WithCancel(context.Background())
	m.reg.start(m.onExpired)
	m.wg.Add(2)
	go func() { defer m.wg.Done(); m.flushLoop(m.bgCtx) }()
	go func() { defer m.wg.Done(); m.monitor(m.bgCtx, since) }()
	if m.tplEngine != nil {
		m.removeBuildDebris(ctx)
		m.wg.Add(1)
		go func() { defer m.wg.Done(); m.templateGCLoop(m.bgCtx) }()
		if len(cfg.WarmPoolTemplates) > 0 {
			m.tplPools = newTemplatePools(cfg.WarmPoolTemplates)
			m.wg.Add(1)
			go func() { defer m.wg.Done(); m.templatePoolLoop(m.bgCtx) }()
		}
	}
	if cfg.MetricsSampleInterval > 0 {
		m.sampler = newSampler(cfg.MetricsSampleInterval)
		m.wg.Add(1)
		go func() { defer m.wg.Done(); m.sampleLoop(m.bgCtx) }()
	}
	for _, p := range []*warmPool{m.pool, m.netPool} {
		if p.want > 0 {
			m.wg.Add(1)
			go func() { defer m.wg.Done(); m.refillLoop(m.bgCtx, p) }()
			p.signal()
		}
	}
	m.log.Info("orchestrator ready", "state_dir", cfg.StateDir, "image", cfg.Image,
		"runtime", cfg.Runtime, "sandboxes", len(m.reg.all()), "idle_ttl", cfg.IdleTTL,
		"warm_pool", cfg.WarmPool, "warm_pool_network", cfg.WarmPoolNetwork, "disk_volumes", !cfg.NoDiskVolumes)
	return m, nil
}

// Policy is the policy this Manager applies, its defaults filled in: what
// core.Validating in front of it must enforce.
func (m *Manager) Policy() core.Policy { return m.cfg.Policy }

// Close stops the Manager's background work in order: the expiry loop (and
// the removals it has started, which are waited for), the Docker event
// monitor, the metadata flusher and the warm pool's refill (a creation in
// flight is abandoned and cleaned up), the file watcher; then it writes
// every sandbox's metadata a last time so idle TTLs resume where they
// stopped. Containers keep running, warm-pool ones included. Callers must stop calling other methods first
// (in-flight Follow calls return ErrUnavailable).
func (m *Manager) Close() error {
	var err error
	m.closeOnce.Do(func() {
		close(m.closing)
		m.reg.stop()
		m.bgCancel()
		m.wg.Wait()
		err = m.watch.Close()
		err = cmp.Or(err, m.net.close())
		for _, sb := range m.reg.all() {
			if perr := sb.persist(false); perr != nil {
				m.log.Error("persist sandbox metadata", "sandbox_id", sb.id, "error", perr)
				err = cmp.Or(err, perr)
			}
		}
		if m.closeDocker != nil {
			err = cmp.Or(err, m.closeDocker())
		}
		m.lock.Close() // releases the state directory for the next sandboxd
		m.log.Info("orchestrator closed; sandboxes keep running")
	})
	return err
}

// checkOpen refuses work after Close.
func (m *Manager) checkOpen() error {
	select {
	case <-m.closing:
		return core.ShuttingDown()
	default:
		return nil
	}
}

// use looks up a sandbox for an operation on it by the caller in ctx and
// refreshes its idle TTL. Another tenant's sandbox is not found, exactly as
// one that does not exist (and its TTL is not refreshed).

func (m *Manager) use(ctx context.Context, sandboxID string) (*sandbox, error) {
	if err := m.checkOpen(); err != nil {
		return nil, err
	}
	sb := m.reg.get(sandboxID)
	if sb == nil || !core.CallerOf(ctx).Sees(sb.tenant) || !m.reg.touch(sb) {
		return nil, core.SandboxNotFound(sandboxID)
	}
	// Using a hibernated sandbox wakes it (hibernate.go); the first command
	// after the wake reports how the state came back.
	if _, err := m.ensureAwake(ctx, sb); err != nil {
		return nil, err
	}
	return sb, nil
}

// snapshot describes sb for callers.
func (m *Manager) snapshot(sb *sandbox) core.Sandbox {
	vols := m.volumesOf(sb) // sb.volumes is fixed; the store's lock is a leaf
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return core.Sandbox{
		ID:              sb.id,
		Tenant:          sb.tenant,
		UserID:          sb.userID,
		State:           sb.state,
		StateReason:     sb.reason,
		HealthReason:    sb.healthReasonLocked(),
		CreatedAt:       sb.createdAt,
		LastActiveAt:    sb.lastActive,
		ExpiresAt:       m.reg.deadlineLocked(sb),
		Image:           sb.image,
		Limits:          sb.limits,
		Network:         sb.network,
		NetworkPolicy:   redacted(sb.netPolicy),
		ContainerID:     sb.containerID,
		Metadata:        maps.Clone(sb.metadata),
		Template:        sb.template,
		TemplateVersion: sb.templateVersion,
		Volumes:         vols,
		IdleTimeout:     m.reg.idleOf(sb.idleTTL),
		OnIdle:          m.onIdleOf(sb),
		Snapshot:        sb.hib.snapshotInfo(),
		HibernatedAt:    sb.hib.HibernatedAt,
		LastWake:        sb.hib.Wake.Clone(),
	}
}

// Get returns a sandbox without refreshing its idle TTL: looking at a
// sandbox is not using it, so a client polling its state does not keep it
// alive (the API documents last_active_at as acquire, commands and file
// operations). The container is inspected so that a death is reported even
// if the event monitor has not seen it yet.
func (m *Manager) Get(ctx context.Context, sandboxID string) (core.Sandbox, error) {
	sb, err := m.lookup(ctx, sandboxID)
	if err != nil {
		return core.Sandbox{}, err
	}
	if err := m.refresh(ctx, sb); err != nil {
		return core.Sandbox{}, err
	}
	return m.snapshot(sb), nil
}

// List returns the sandboxes matching f that the caller may see, oldest
// first, without refreshing their TTLs. States are brought up to date with a
// single ContainerList.
func (m *Manager) List(ctx context.Context, f core.ListFilter) ([]core.Sandbox, error) {
	if err := m.checkOpen(); err != nil {
		return nil, err
	}
	if err := m.refreshAll(ctx); err != nil {
		return nil, err
	}
	caller := core.CallerOf(ctx)
	var out []core.Sandbox
	for _, sb := range m.reg.all() {
		if !caller.Sees(sb.tenant) || (f.Tenant != "" && sb.tenant != f.Tenant) {
			continue
		}
		s := m.snapshot(sb)
		if (f.UserID == "" || s.UserID == f.UserID) && (f.State == "" || s.State == f.State) && core.HasMetadata(s.Metadata, f.Metadata) {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, core.CompareSandboxes)
	return out, nil
}

// Delete removes a sandbox now: its container (forcibly, if running) and its
// host directories. Followers of its commands return ErrNotFound.
func (m *Manager) Delete(ctx context.Context, sandboxID string) error {
	if err := m.checkOpen(); err != nil {
		return err
	}
	sb := m.reg.get(sandboxID)
	if sb == nil || !core.CallerOf(ctx).Sees(sb.tenant) || !m.claimRemoval(sb, false) {
		return core.SandboxNotFound(sandboxID)
	}
	if err := m.destroy(ctx, sb, "deleted on request"); err != nil {
		return err
	}
	m.publish(sb, core.LifecycleKilled, "deleted on request")
	return nil
}

// claimRemoval marks sb as being removed, so that no other removal, command
// append or metadata write happens meanwhile. It reports false when another
// removal already has it, or, for an expiry (expired=true), when the sandbox
// was used again just as it expired (touch re-registered it) and must live.
func (m *Manager) claimRemoval(sb *sandbox, expired bool) bool {
	if !m.reg.claim(sb, expired, sb.markRemoving) {
		return false
	}
	// With the registry released (see the lock rule on sandbox): wait for
	// an append that passed its check before the mark. Appends hold the
	// lock only for a bounded write, never while reading the log.
	sb.io.HoldAppends(func() {})
	return true
}

// destroy removes a sandbox claimed with claimRemoval: meta.json first (the
// commit point: if sandboxd dies now, reconcile finds a directory without
// metadata and a container without a sandbox, and removes both), then the
// container, then the directory. If the container cannot be removed (Docker
// unreachable), the metadata is restored and the sandbox stays as it was.
func (m *Manager) destroy(ctx context.Context, sb *sandbox, why string) error {
	log := m.log.With("sandbox_id", sb.id, "tenant", sb.tenant, "user_id", sb.userID)
	sb.metaMu.Lock()
	err := os.Remove(filepath.Join(sb.dir, metaFile))
	sb.metaMu.Unlock()
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		sb.unmarkRemoving()
		return fmt.Errorf("remove sandbox metadata: %w", err)
	}
	// Bounded whatever the caller's context: the container is killed
	// (Force) by the engine, which does not wait on the sandbox.
	rctx, cancel := context.WithTimeout(ctx, containerRemoveTimeout)
	sb.mu.Lock()
	containerID := sb.containerID
	sb.mu.Unlock()
	err = nil
	if containerID != "" { // none while hibernated
		err = m.docker.ContainerRemove(rctx, containerID, container.RemoveOptions{Force: true, RemoveVolumes: true})
	}
	cancel()
	if err != nil && !isDockerNotFound(err) {
		sb.unmarkRemoving()
		if perr := sb.persist(true); perr != nil {
			log.Error("restore sandbox metadata after a failed removal", "error", perr)
		}
		return dockerError("remove container", err)
	}
	sb.markGone()
	m.reg.remove(sb)
	m.removeNet(ctx, sb) // its holder, then its address
	// A fast-woken sandbox's carrier before its own directory: the
	// carrier's mounts hold the sandbox's volumes (carrier.go).
	m.dropCarrier(ctx, sb)
	m.watch.Forget(sb.io)
	// Stop every read of the sandbox's io/ (a follower in the middle of a
	// huge events file, a load of a forged log) and wait, bounded, for
	// their files to be closed: an open file keeps the volume busy, and a
	// busy volume is only detached lazily, its loop device left attached.
	if !sb.io.Close(ioCloseTimeout) {
		log.Warn("readers of the sandbox's io directory still open; its volume is detached lazily", "waited", ioCloseTimeout)
	}
	if err := removeSandboxDir(sb.dir); err != nil {
		// The sandbox is gone for callers; the debris has no meta.json and is
		// removed by the next reconcile.
		log.Error("remove sandbox directory", "dir", sb.dir, "error", err)
	}
	log.Info("sandbox removed", "reason", why)
	return nil
}

// onExpired removes a sandbox whose TTL ran out; the registry calls it.
func (m *Manager) onExpired(sb *sandbox) {
	if m.hibernateExpired(sb) {
		return
	}
	if !m.claimRemoval(sb, true) {
		return
	}
	sb.mu.Lock()
	why := fmt.Sprintf("idle for %v", m.reg.idleOf(sb.idleTTL))
	if sb.state == core.StateHibernated {
		why = fmt.Sprintf("hibernated for %v", m.cfg.HibernatedTTL)
	}
	if m.cfg.MaxLifetime > 0 && !time.Now().Before(sb.createdAt.Add(m.cfg.MaxLifetime)) {
		why = fmt.Sprintf("maximum lifetime of %v reached", m.cfg.MaxLifetime)
	}
	sb.mu.Unlock()
	// Not a context Close cancels: Close waits for this removal to finish
	// instead.
	ctx, cancel := context.WithTimeout(context.Background(), removeTimeout)
	defer cancel()
	if err := m.destroy(ctx, sb, "expired: "+why); err != nil {
		m.log.Error("remove expired sandbox; will retry", "sandbox_id", sb.id, "retry_in", removeRetry, "error", err)
		m.reg.rearm(sb, removeRetry)
		return
	}
	m.publish(sb, core.LifecycleExpired, why)
}

// flushLoop writes changed metadata (last activity) at most once per
// flushInterval per sandbox.
func (m *Manager) flushLoop(ctx context.Context) {
	t := time.NewTicker(flushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			for _, sb := range m.reg.all() {
				if err := sb.persist(false); err != nil {
					m.log.Error("persist sandbox metadata", "sandbox_id", sb.id, "error", err)
				}
			}
		}
	}
}
