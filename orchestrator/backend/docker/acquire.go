package docker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
)

// Acquire returns the user's current sandbox, creating one if the user has
// none. The user is userID within the caller's tenant (see WithCaller).
// Concurrent calls for one user are serialised, so they all get the same
// sandbox.
//
// A new sandbox is taken from the warm pool when the pool has one and opts
// ask for nothing a pool sandbox lacks (no env, no network, the default
// limits); otherwise a container is created and started for it. Either way
// the result says Created.
//
// If the current sandbox is dead (its container exited or was removed), a
// new one is created and the result says so: Created, ReplacedID and
// ReplacedReason tell the caller that the Python state is gone, never a
// silent swap. The dead sandbox stays visible (StateDead, with its reason)
// until it expires or is deleted.
//
// opts (resolved by core.Validating) apply only when a sandbox is created.
// An existing sandbox keeps its metadata and its idle TTL (being acquired
// restarts that TTL; it never resets it to the server's default).
// A new sandbox beyond Config.MaxSandboxesPerTenant or Config.MaxSandboxes
// is ErrResourceExhausted, naming the cap.
func (m *Manager) Acquire(ctx context.Context, userID string, opts core.Options) (core.AcquireResult, error) {
	start := time.Now()
	caller := core.CallerOf(ctx)
	if err := m.checkOpen(); err != nil {
		return core.AcquireResult{}, err
	}
	var from *snapFile
	if opts.FromSnapshot != "" {
		if m.cfg.NoDiskVolumes {
			// Its /workspace is a volume image; a plain directory cannot
			// take it.
			return core.AcquireResult{}, core.Preconditionf("starting from a snapshot needs disk volumes (sandboxd --disk-volumes, the default)")
		}
		// Resolved before anything is made: another tenant's is not found.
		f, err := m.snaps.resolve(caller, opts.FromSnapshot, true)
		if err != nil {
			return core.AcquireResult{}, err
		}
		from = &f
		// The snapshot's env and network unless the caller gave its own,
		// checked by the server's policy as the caller's were (it may no
		// longer allow the snapshot's network).
		if opts, err = m.cfg.Policy.ResolveOptions(f.startOptions(opts)); err != nil {
			return core.AcquireResult{}, core.Preconditionf("snapshot %s was taken of a sandbox whose options this server no longer allows: %v", f.ID, err)
		}
	}
	spec := m.newSpec(userKey{caller.Tenant, userID}, opts)
	if from != nil {
		f := *from
		spec.from = from
		if opts.Template == "" && f.Template != "" {
			// The snapshot's sandbox's image, whatever its template has
			// become since.
			spec.image, spec.template, spec.templateVersion = f.Image, f.Template, f.TemplateVersion
		}
		spec.limits.DiskBytes = f.WorkspaceBytes // the snapshot's /workspace, whole
		if len(opts.Volumes) == 0 {
			// The snapshot's sandbox's volumes, by reference: those that
			// still exist.
			for _, vm := range mountsFromMeta(f.Volumes) {
				if m.vols.exists(vm.Volume) {
					opts.Volumes = append(opts.Volumes, vm)
				}
			}
		}
	}
	// Resolved and pinned before anything is made: a missing volume is
	// not found, and one being deleted cannot vanish under the creation.
	if opts.Template != "" {
		var err error
		spec.template, spec.templateVersion, spec.image, err = m.resolveTemplate(caller, opts.Template)
		if err != nil {
			return core.AcquireResult{}, err
		}
	}
	vols, unpin, err := m.vols.pin(caller, opts.Volumes)
	if err != nil {
		return core.AcquireResult{}, err
	}
	defer unpin()
	spec.volumes = vols

	unlock, err := m.userLocks.lock(ctx, spec.user.String())
	if err != nil {
		return core.AcquireResult{}, err
	}
	defer unlock()

	var replaced *sandbox
	if cur := m.reg.currentOf(spec.user); cur != nil {
		if err := m.refresh(ctx, cur); err != nil {
			return core.AcquireResult{}, err
		}
		if cur.asleep() {
			w, err := m.wakeLocked(ctx, cur)
			if err != nil {
				return core.AcquireResult{}, err
			}
			if m.reg.touch(cur) {
				m.cfg.Metrics.Acquired(core.AcquireExisting, time.Since(start))
				return core.AcquireResult{Sandbox: m.snapshot(cur), Woke: w}, nil
			}
		}
		if st, _ := cur.status(); st == core.StateRunning && m.reg.touch(cur) {
			m.cfg.Metrics.Acquired(core.AcquireExisting, time.Since(start))
			return core.AcquireResult{Sandbox: m.snapshot(cur)}, nil
		}
		replaced = cur
	}
	sb, kind, err := m.newSandboxFor(ctx, spec)
	if err != nil {
		return core.AcquireResult{}, err
	}
	var restored *core.WakeInfo
	if spec.from != nil {
		restored = m.restoreFrom(ctx, sb, spec.from)
	}
	m.cfg.Metrics.Acquired(kind, time.Since(start))
	res := core.AcquireResult{Sandbox: m.snapshot(sb), Created: true, Woke: restored}
	log := m.log.With("sandbox_id", sb.id, "tenant", spec.user.tenant, "user_id", userID)
	if replaced != nil {
		_, reason := replaced.status()
		res.ReplacedID, res.ReplacedReason = replaced.id, reason
		log.Info("sandbox created, replacing a dead one", "replaced_id", replaced.id, "replaced_reason", reason)
	} else {
		log.Info("sandbox created")
	}
	m.publish(sb, core.LifecycleCreated, "")
	return res, nil
}

// sandboxSpec is what a new sandbox is made of.
type sandboxSpec struct {
	user    userKey // zero for a warm-pool sandbox
	pool    bool
	limits  core.Limits
	env     map[string]string
	network bool
	// netPolicy is Options.NetworkPolicy, checked and normalised (never
	// nil with network: Validating gives a sandbox with network a policy).
	netPolicy *core.NetworkPolicy
	// metadata and idleTTL are Options.Metadata and Options.IdleTimeout,
	// validated (lifetime.go).
	metadata map[string]string
	idleTTL  time.Duration
	// onIdle is Options.OnIdle, validated.
	onIdle string
	// from is the named snapshot the sandbox starts from (Options.FromSnapshot).
	from *snapFile
	// volumes are its named volumes' mounts, resolved to IDs and pinned.
	volumes []core.VolumeMount
	// image is a template version's image (its ID), with template and
	// templateVersion naming it; "" for the server's image.
	image           string
	template        string
	templateVersion int
}

// newSpec is the spec of a new sandbox of user, from opts as
// core.Policy.ResolveOptions resolved them.
func (m *Manager) newSpec(user userKey, opts core.Options) sandboxSpec {
	return sandboxSpec{user: user, limits: opts.Limits, env: opts.Env, network: opts.Network, netPolicy: opts.NetworkPolicy,
		metadata: opts.Metadata, idleTTL: opts.IdleTimeout, onIdle: opts.OnIdle}
}

// poolSpec is the spec of a sandbox of the server's warm pool p: the
// server defaults, no env, no owner yet, and no network unless p is the
// networked pool, whose sandboxes are plumbed and sealed by the gateway
// until their claim (shape.go).
func (m *Manager) poolSpec(p *warmPool) sandboxSpec {
	spec := sandboxSpec{pool: true, limits: m.cfg.DefaultLimits}
	if p.network {
		spec.network, spec.netPolicy = true, sealedPolicy()
	}
	return spec
}

// newSandboxFor gives spec.user a new sandbox, from the warm pool when spec
// allows, after checking the caps, and says which it did. The caller holds
// the user's lock.
func (m *Manager) newSandboxFor(ctx context.Context, spec sandboxSpec) (*sandbox, core.AcquireKind, error) {
	var all int
	release, ok := m.acquiring.reserve(spec.user.tenant, m.cfg.MaxSandboxesPerTenant, func() int {
		var ofTenant int
		all, ofTenant = m.reg.countRunning(spec.user.tenant)
		return ofTenant
	})
	if !ok {
		return nil, "", core.TenantCapReached(spec.user.tenant, m.cfg.MaxSandboxesPerTenant)
	}
	defer release() // once registered, or failed
	if pool, miss := m.poolFor(spec); pool != nil {
		sb, err := m.claimFrom(ctx, pool, spec)
		if sb != nil || err != nil {
			return sb, core.AcquireWarmPool, err
		}
	} else if miss != "" {
		m.cfg.Metrics.PoolMissed(miss)
	}
	// (A start from a snapshot that poolFor let through is carried by a
	// pool container: create, startCarried.)
	// Counted from before the cap check until the sandbox is registered, so
	// that the pool's refill sees it too.
	m.creating.Add(1)
	defer m.creating.Add(-1)
	// held is what the server holds besides this request: live sandboxes,
	// others being created or claimed, and the pool.
	held := func() int { return all + int(m.creating.Load()) - 1 + m.pooled() }
	if c := m.cfg.MaxSandboxes; c > 0 && held() >= c {
		// Pool sandboxes count against the cap: they hold memory too. One
		// that this request cannot use makes room for it instead.
		from := m.pool
		victim := from.take()
		if victim == nil {
			from = m.netPool
			victim = from.take()
		}
		if victim == nil || held() >= c {
			if victim != nil {
				from.putBack(victim)
			}
			return nil, "", core.ServerCapReached(c)
		}
		m.discardPooled(ctx, victim, "removed to make room under --max-sandboxes")
	}
	sb, err := m.create(ctx, spec)
	if err != nil {
		return nil, "", err
	}
	kind := core.AcquireCold
	if sb.carried() {
		kind = core.AcquireWarmPool
	}
	// The idle TTL counts from when the caller gets the sandbox, not from
	// when its creation began: a container start slower than a short TTL
	// (a loaded machine) must not expire the sandbox before anyone could
	// use it. meta.json has the creation time until the next save.
	sb.mu.Lock()
	sb.lastActive, sb.dirty = time.Now().UTC(), true
	sb.mu.Unlock()
	if !m.reg.add(sb, true) {
		// Only possible with an absurdly short IdleTTL.
		m.discardCreated(ctx, sb)
		return nil, "", errors.New("new sandbox expired before it was registered")
	}
	return sb, kind, nil
}

// create makes and starts a new sandbox; the caller registers it (or puts
// it in the pool). Order matters for crash safety: directories and volumes,
// container, start, and meta.json last; anything interrupted before
// meta.json is written is debris that reconcile removes.
func (m *Manager) create(ctx context.Context, spec sandboxSpec) (*sandbox, error) {
	img := cmp.Or(spec.image, m.cfg.Image)
	if err := m.checkImageFor(ctx, img, spec.template); err != nil {
		return nil, err
	}
	id := core.NewSandboxID()
	now := time.Now().UTC()
	sb := newSandbox(sandboxDir(m.cfg.StateDir, id), meta{
		ID:              id,
		Tenant:          spec.user.tenant,
		UserID:          spec.user.user,
		Pool:            spec.pool,
		Network:         spec.network,
		Image:           img,
		Template:        spec.template,
		TemplateVersion: spec.templateVersion,
		Runtime:         m.cfg.Runtime,
		Limits:          spec.limits,
		CreatedAt:       now,
		LastActiveAt:    now,
		Metadata:        spec.metadata,
		IdleTTL:         spec.idleTTL,
		OnIdle:          spec.onIdle,
		Env:             spec.env,
		NetworkPolicy:   policyToMeta(spec.netPolicy),
		Volumes:         mountsToMeta(spec.volumes),
	})
	log := m.log.With("sandbox_id", id, "tenant", spec.user.tenant, "user_id", spec.user.user, "pool", spec.pool)

	// Cleanup must happen even when the caller has given up.
	cleanup := func(containerID string) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
		defer cancel()
		if containerID != "" {
			if err := m.docker.ContainerRemove(cctx, containerID, container.RemoveOptions{Force: true}); err != nil && !isDockerNotFound(err) {
				log.Error("remove container of a failed creation", "container_id", containerID, "error", err)
			}
		}
		m.removeNet(cctx, sb)
		if err := removeSandboxDir(sb.dir); err != nil {
			log.Error("remove directory of a failed creation; the next start removes it", "dir", sb.dir, "error", err)
		}
	}

	sizes := volumeSizes{io: m.cfg.IODiskBytes, workspace: spec.limits.DiskBytes}
	if spec.from != nil {
		sizes.workspaceFrom = filepath.Join(m.snaps.dir, spec.from.ID, snapWorkspaceFile)
	}
	if err := prepareDirs(ctx, sb.dir, sizes); err != nil {
		cleanup("")
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("prepare sandbox directories: %w", err)
	}
	if spec.network {
		// Its address and CA (network.go); its holder and veth below, or
		// a carrier's (carrier_net.go).
		if err := m.prepareNet(sb); err != nil {
			cleanup("")
			return nil, fmt.Errorf("prepare the sandbox's network: %w", err)
		}
	}
	if spec.from != nil {
		// The globals, where the driver reads a restore's snapshot; the
		// restore record is named in meta.json (WakeRecord) before the
		// sandbox is registered, so a crash before its answer is finished
		// by start-up recovery as a wake's is (hibernate_recover.go).
		if err := m.prepareRestore(sb, spec.from); err != nil {
			cleanup("")
			return nil, fmt.Errorf("prepare the snapshot's restore: %w", err)
		}
	}
	if spec.from != nil && m.fastWakeable(sb) {
		// A start from a snapshot runs in a warm-pool container, as a fast
		// wake does (carrier.go), when the pool has one.
		if ok, err := m.startCarried(ctx, sb); err != nil || ok {
			if err != nil {
				cleanup("")
				return nil, err
			}
			return sb, nil
		}
	}
	if spec.network {
		// Its holder and veth, before its container joins them.
		if err := m.upNet(ctx, sb); err != nil {
			cleanup("")
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("set up the sandbox's network: %w", err)
		}
	}
	cfg, hostCfg := containerSpec(sb, m.cfg.Runtime, m.cfg.StateDir, spec.env)
	hostCfg.Binds = append(hostCfg.Binds, m.volumeBinds(sb)...)
	if spec.pool && m.mountsLater {
		// Where volumes are mounted after its claim (shape_volumes.go).
		if err := poolMountPoints(sb.dir, hostCfg); err != nil {
			cleanup("")
			return nil, err
		}
	}
	if spec.pool && m.fastWakeOn() {
		if err := makeShared(sb.dir); err != nil {
			cleanup("")
			return nil, err
		}
		carrierSpec(sb.dir, cfg, hostCfg)
	}
	resp, err := m.docker.ContainerCreate(ctx, cfg, hostCfg, nil, nil, containerNamePrefix+id)
	if err != nil {
		cleanup("")
		switch {
		case isDockerNotFound(err):
			// The image vanished since checkImage.
			return nil, m.imageMissing()
		case cerrdefs.IsInvalidArgument(err):
			// Docker refused the spec: e.g. an unknown runtime, or more CPUs
			// than the host has. A server setup problem, not the request's.
			return nil, core.Preconditionf("docker refused to create the sandbox container: %v", err)
		}
		return nil, dockerError("create container", err)
	}
	sb.containerID = resp.ID
	for _, w := range resp.Warnings {
		log.Warn("docker warning on container create", "warning", w)
	}
	if spec.network {
		// The image's roots, read from the container before anything of
		// the image runs (network.go).
		if err := m.writeBundle(ctx, sb, resp.ID); err != nil {
			cleanup(resp.ID)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("write the sandbox's CA bundle: %w", err)
		}
	}
	if err := m.docker.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		cleanup(resp.ID)
		if cerrdefs.IsInvalidArgument(err) || cerrdefs.IsUnknown(err) || cerrdefs.IsInternal(err) {
			// The engine failed to start it (e.g. the runtime is broken).
			return nil, core.Preconditionf("docker could not start the sandbox container: %v", err)
		}
		return nil, dockerError("start container", err)
	}
	m.noteBoot(ctx, sb) // gVisor's boot with its address (network.go)
	sb.mu.Lock()
	md := sb.metaLocked()
	sb.mu.Unlock()
	if err := writeMeta(sb.dir, md); err != nil {
		cleanup(resp.ID)
		return nil, fmt.Errorf("write sandbox metadata: %w", err)
	}
	return sb, nil
}

// discardCreated removes a sandbox create made that could not be used.
func (m *Manager) discardCreated(ctx context.Context, sb *sandbox) {
	m.discard(ctx, sb, "unusable new sandbox", "discarded after creation")
}

// discard removes a sandbox nobody uses (what says which, in the log),
// even when the caller has given up: a removal that fails is logged, and
// the next start removes what is left.
func (m *Manager) discard(ctx context.Context, sb *sandbox, what, why string) {
	if !m.claimRemoval(sb, false) {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
	defer cancel()
	if err := m.destroy(cctx, sb, why); err != nil {
		m.log.Error("remove "+what+"; the next start removes it", "sandbox_id", sb.id, "error", err)
	}
}

// checkImage makes sure the sandbox image exists, so a missing image is
// reported as such rather than as a confusing create failure.
func (m *Manager) checkImage(ctx context.Context) error { return m.checkImageFor(ctx, m.cfg.Image, "") }

// checkImageFor is checkImage for img, a template's when template is set.
func (m *Manager) checkImageFor(ctx context.Context, img, template string) error {
	_, err := m.docker.ImageInspect(ctx, img)
	switch {
	case err == nil:
		return nil
	case isDockerNotFound(err) && template != "":
		return core.Preconditionf("the image of template %s is gone from the Docker engine; build the template again", template)
	case isDockerNotFound(err):
		return m.imageMissing()
	}
	return dockerError("inspect image", err)
}

func (m *Manager) imageMissing() error {
	return core.Preconditionf("sandbox image %q is not present; build it with \"make image\"", m.cfg.Image)
}

// isDockerNotFound reports whether a Docker API error means "no such
// object". Errors already classified by us are not Docker's.
func isDockerNotFound(err error) bool {
	return err != nil && !core.IsClassified(err) && cerrdefs.IsNotFound(err)
}

// tenantAcquires counts, per tenant, the new sandboxes being created or
// claimed from the pool for its users and not yet registered, so that
// acquires for a tenant's users running at once cannot pass its cap
// (Config.MaxSandboxesPerTenant) together, which they did when each
// counted only the registered ones: a tenant with a cap of 2 got 6
// sandboxes from 6 concurrent acquires, and could take the whole server's
// cap from other tenants.
type tenantAcquires struct {
	mu sync.Mutex
	n  map[string]int
}

// reserve counts one more new sandbox of tenant in progress, unless its
// registered ones (registered, called under the lock) and those in
// progress reach max (0: no cap). A sandbox registered before its release
// is counted twice meanwhile, never missed.
func (t *tenantAcquires) reserve(tenant string, max int, registered func() int) (release func(), ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := registered() + t.n[tenant]; max > 0 && n >= max {
		return nil, false
	}
	if t.n == nil {
		t.n = map[string]int{}
	}
	t.n[tenant]++
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.n[tenant]--; t.n[tenant] == 0 {
			delete(t.n, tenant)
		}
	}, true
}
