package docker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/system"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Fast wake: a hibernated sandbox wakes in a warm-pool container that is
// already running, its driver up and its Python kernel started with the
// image's data stack imported (pool.go's warm-up), instead of in a new
// container that boots a fresh kernel. What the pool sandbox gives is its
// container and the two directories bound into it; the waking sandbox keeps
// its own ID, volumes, command log and everything else.
//
// The mechanism, with P the pool sandbox and X the waking one:
//
//   - A pool container binds P's io/ and workspace/ with rslave propagation,
//     and those two mount points (P's volumes) are shared mounts on the
//     host (makeShared), so a mount the host stacks on them appears in the
//     container, also after Docker restarts it (the bind source resolves to
//     the topmost mount). Its driver runs with ioproto.EnvPoolDriver.
//   - The wake records P as X's carrier in X's meta.json (the commit point
//     of "P belongs to X's wake"), removes P's meta.json (P is no sandbox
//     any more), bind-mounts X's io/ and workspace/ on P's (stack), and
//     appends an adopt record to P's own command log through a descriptor
//     opened before the stack hid it. The driver starts over on the /io it
//     now sees, X's, keeping its kernel (ioproto/PROTOCOL.md, *Adoption*).
//   - From there on it is an ordinary wake: X names the container, its
//     restore record goes into X's log, the restore loads X's globals into
//     the kernel that already imported numpy and pandas.
//
// The carrier lives as long as X's container: hibernating or deleting X
// removes the container and then releases the carrier (unstacks and
// removes P's directory). Reconcile keeps a carrier named by a sandbox,
// releases one whose sandbox no longer runs in it, and stacks X again on a
// carrier that lost it (a host reboot) before restarting its container.
//
// Only where a stacked mount is seen and the pool's container fits the
// sandbox: runc (gVisor's gofer never sees mounts made after the container
// started), disk volumes (their mount points can be made shared), and a
// sandbox a pool container can be shaped to (no network, no volumes, the
// server's image and runtime; its limits are set on the carrier in place
// and its env given by an env record, as a claim's are: shape.go).
// Anything else, or an empty pool, wakes as before.

// carrierMeta names the warm-pool sandbox whose container and directories
// carry a fast-woken sandbox.
type carrierMeta struct {
	ID          string `json:"id"`
	ContainerID string `json:"container_id"`
}

// Steps of a fast wake (Config.AtStep), between stepWakeBegun and
// stepWakeRunning.
const (
	stepFastWakeCarrier = "fastwake:carrier" // the carrier recorded in meta.json, not stacked
	stepFastWakeStacked = "fastwake:stacked" // the volumes stacked, the adopt record appended
)

// FastWakeSteps are the fast wake's steps, for fault tests.
var FastWakeSteps = []string{stepFastWakeCarrier, stepFastWakeStacked}

// fastWakeOn reports whether this server's pool sandboxes can carry wakes
// (see above): decided at start (decideFastWake).
func (m *Manager) fastWakeOn() bool { return m.carriesWakes }

// runtimeIsRunc: an empty runtime is the engine's default, runc unless the
// operator changed it; decideFastWake asks the engine.
func runtimeIsRunc(rt string) bool { return rt == "" || rt == "runc" }

// engineInfo is the part of the Docker client that says the engine's
// default runtime.
type engineInfo interface {
	Info(ctx context.Context) (system.Info, error)
}

// decideFastWake says whether pool sandboxes carry wakes on this server,
// and logs why not when a pool was asked for and it cannot.
func (m *Manager) decideFastWake(ctx context.Context) bool {
	if m.cfg.NoFastWake || m.cfg.WarmPool == 0 {
		return false
	}
	why := m.laterMountsWhyNot(ctx)
	if m.cfg.NoDiskVolumes {
		why = "it needs disk volumes (--disk-volumes=false)"
	}
	if why != "" {
		m.log.Info("fast wake is off: "+why+"; hibernated sandboxes wake in new containers", "warm_pool", m.cfg.WarmPool)
		return false
	}
	return true
}

// laterMountsWhyNot says why this server's containers do not see mounts
// made after they started ("" when they do: runc, the runtime given or the
// engine's default).
func (m *Manager) laterMountsWhyNot(ctx context.Context) string {
	switch rt := m.cfg.Runtime; {
	case !runtimeIsRunc(rt):
		return "runtime " + rt + " does not see mounts made after a container started"
	case rt == "":
		ei, ok := m.docker.(engineInfo)
		if !ok {
			return ""
		}
		info, err := ei.Info(ctx)
		switch {
		case err != nil:
			return "the engine's default runtime is unknown (" + err.Error() + ")"
		case info.DefaultRuntime != "" && info.DefaultRuntime != "runc":
			return "the engine's default runtime is " + info.DefaultRuntime + ", which does not see mounts made after a container started"
		}
	}
	return ""
}

// fastWakeable reports whether a pool container could carry sb's wake: a
// networked sandbox needs the pool with network (carryNet).
func (m *Manager) fastWakeable(sb *sandbox) bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	networked := sb.net != nil || sb.network
	return m.fastWakeOn() && (!networked || m.poolsNetwork()) && shapeableEnv(sb.env) &&
		sb.image == m.cfg.Image && sb.runtime == m.cfg.Runtime &&
		hasVolume(sb.dir, ioDir) && hasVolume(sb.dir, workspaceDir)
}

// poolsNetwork reports whether the server keeps a pool with network.
func (m *Manager) poolsNetwork() bool { return m.netPool != nil && m.netPool.want > 0 }

// carrierPoolFor is the server's pool whose containers can carry sb: the
// one with network for a networked sandbox.
func (m *Manager) carrierPoolFor(sb *sandbox) *warmPool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.net != nil {
		return m.netPool
	}
	return m.pool
}

// fastWake gives sb, waking with its user's lock held and its volumes
// mounted, a pool container. It returns the container's ID, or "" when no
// pool sandbox could carry it (the caller starts a container as before).
func (m *Manager) fastWake(ctx context.Context, sb *sandbox) string {
	log := m.log.With("sandbox_id", sb.id)
	// Counted as a creation meanwhile, as a claim is (claimPooled).
	m.creating.Add(1)
	defer m.creating.Add(-1)
	pool := m.carrierPoolFor(sb)
	defer pool.signal()
	p, err := m.takeLiveFrom(ctx, pool)
	if err != nil {
		log.Warn("fast wake: inspect a warm-pool container; waking in a new one", "error", err)
	}
	if p == nil {
		return ""
	}
	cid, err := m.carry(ctx, sb, p)
	if err != nil {
		log.Warn("fast wake failed; waking in a new container", "pool_sandbox_id", p.id, "error", err)
		return ""
	}
	return cid
}

// carry makes pool sandbox p the carrier of sb (see the top of the file).
// On failure p is gone and sb is as it was.
func (m *Manager) carry(ctx context.Context, sb, p *sandbox) (string, error) {
	containerID := p.currentContainer()
	c := &carrierMeta{ID: p.id, ContainerID: containerID}
	undo := func() {
		sb.mu.Lock()
		sb.carrier, sb.volsMounted = nil, false
		moved := sb.net != nil && sb.net.Holder != ""
		sb.mu.Unlock()
		if moved {
			// carryNet gave sb the carrier's holder: it goes with the
			// carrier, and sb's address stays its own.
			if err := m.downNet(context.WithoutCancel(ctx), sb); err != nil {
				m.log.Warn("remove the network of a failed fast wake; the next start removes it", "sandbox_id", sb.id, "error", err)
			}
		}
		m.releaseCarrier(context.WithoutCancel(ctx), c, sb.id)
		if err := sb.persist(true); err != nil {
			m.log.Error("persist sandbox metadata", "sandbox_id", sb.id, "error", err)
		}
	}
	sb.mu.Lock()
	sb.carrier = c
	sb.mu.Unlock()
	m.carriers.Store(p.id, sb.id)
	if err := sb.persist(true); err != nil {
		undo()
		return "", fmt.Errorf("record the carrier: %w", err)
	}
	m.step(stepFastWakeCarrier)
	// p is no sandbox from here on: its registry-less record goes, its
	// directory is sb's carrier.
	p.markGone()
	m.watch.Forget(p.io)
	p.io.Close(ioCloseTimeout)
	if err := os.Remove(filepath.Join(p.dir, metaFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		undo()
		return "", fmt.Errorf("remove the pool sandbox's metadata: %w", err)
	}
	// The adopt record goes into the log the driver reads now, P's, which
	// the stack is about to hide: opened before, written after.
	line, err := ioproto.EncodeRecord(ioproto.Record{Type: ioproto.KindAdopt, CommandID: "sbx-adopt-" + randomSuffix()})
	if err != nil {
		undo()
		return "", err
	}
	logf, err := os.OpenFile(filepath.Join(p.dir, ioDir, ioproto.StdinFile), os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0)
	if err != nil {
		undo()
		return "", fmt.Errorf("open the pool sandbox's command log: %w", err)
	}
	defer logf.Close()
	// The carrier takes sb's limits (shape.go), before sb's files reach
	// it; its /workspace is sb's own volume, whatever its size.
	sb.mu.Lock()
	want := sb.limits
	sb.mu.Unlock()
	p.mu.Lock()
	have := p.limits
	p.mu.Unlock()
	if !sameCgroupLimits(have, want) {
		if err := m.setCgroupLimits(ctx, containerID, want); err != nil {
			undo()
			return "", err
		}
	}
	if err := m.carryNet(ctx, sb, p); err != nil {
		undo()
		return "", err
	}
	// Its volumes, mounted into the carrier's container, and a mounts
	// record in its log before the adopt record (shape_volumes.go).
	sb.mu.Lock()
	vols := slices.Clone(sb.volumes)
	sb.mu.Unlock()
	if err := m.mountVolumes(ctx, sb, containerID, vols); err != nil {
		undo()
		return "", err
	}
	if len(sb.env) > 0 {
		// Its env, for the carrier's driver, which started without it:
		// an env record in sb's own log, which the driver reads after it
		// adopts, before the restore and every later command. (A sandbox
		// shaped at its claim has one already; the variables are the same.)
		sb.mu.Lock()
		env := maps.Clone(sb.env)
		sb.mu.Unlock()
		if _, err := sb.io.AppendEnv(ctx, env, nil); err != nil {
			undo()
			return "", fmt.Errorf("append the env record: %w", err)
		}
	}
	if err := stackOn(sb.dir, p.dir); err != nil {
		undo()
		return "", err
	}
	if _, err := logf.Write(line); err != nil {
		undo()
		return "", fmt.Errorf("append the adopt record: %w", err)
	}
	m.step(stepFastWakeStacked)
	return containerID, nil
}

// stackOn bind-mounts dir's io/ and workspace/ on carrier's, unless they
// are there already.
func stackOn(dir, carrier string) error {
	for _, name := range []string{ioDir, workspaceDir} {
		src, dst := filepath.Join(dir, name), filepath.Join(carrier, name)
		if stacked(src, dst) {
			continue
		}
		if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("stack %s on %s: %w", src, dst, err)
		}
	}
	return nil
}

// stacked reports whether dst shows src (the same directory: one is bound
// on the other).
func stacked(src, dst string) bool {
	a, err1 := os.Stat(src)
	b, err2 := os.Stat(dst)
	return err1 == nil && err2 == nil && os.SameFile(a, b)
}

// makeShared makes a pool sandbox's volume mount points shared mounts, so
// that what the host stacks on them reaches its container (rslave binds).
func makeShared(dir string) error {
	for _, name := range []string{ioDir, workspaceDir} {
		if err := unix.Mount("", filepath.Join(dir, name), "", unix.MS_SHARED, ""); err != nil {
			return fmt.Errorf("make %s a shared mount: %w", filepath.Join(dir, name), err)
		}
	}
	return nil
}

// releaseCarrier removes carrier c of sandbox owner: its container, then
// every mount on its directories (owner's stacked volumes, then its own),
// then the directory. Idempotent: reconcile repeats what a crash cut short.
func (m *Manager) releaseCarrier(ctx context.Context, c *carrierMeta, owner string) {
	log := m.log.With("sandbox_id", owner, "carrier", c.ID)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), containerRemoveTimeout)
	defer cancel()
	if c.ContainerID != "" {
		if err := m.removeContainer(rctx, c.ContainerID); err != nil {
			log.Error("remove the carrier's container; the next start removes it", "error", err)
		}
	}
	if m.net != nil {
		// A carrier from the pool with network whose holder was not (or
		// no longer is) its sandbox's: by name, idempotently (carryNet).
		if err := m.docker.ContainerRemove(rctx, holderNamePrefix+c.ID, container.RemoveOptions{Force: true}); err != nil && !isDockerNotFound(err) {
			log.Error("remove the carrier's network holder; the next start removes it", "error", err)
		}
		m.net.pool.releaseID(c.ID)
	}
	if err := removeSandboxDir(sandboxDir(m.cfg.StateDir, c.ID)); err != nil {
		log.Error("remove the carrier's directory; the next start removes it", "error", err)
	}
	m.carriers.Delete(c.ID)
}

// dropCarrier releases sb's carrier once its container is gone
// (hibernation, deletion) and forgets it.
func (m *Manager) dropCarrier(ctx context.Context, sb *sandbox) {
	sb.mu.Lock()
	c := sb.carrier
	sb.carrier = nil
	sb.mu.Unlock()
	if c == nil {
		return
	}
	m.releaseCarrier(ctx, c, sb.id)
}

// carrierOwner returns the sandbox a carrier's ID belongs to, or id itself:
// Docker's events name a carrier's container by its pool sandbox's label.
func (m *Manager) carrierOwner(id string) string {
	if owner, ok := m.carriers.Load(id); ok {
		return owner.(string)
	}
	return id
}

// restack puts sb's volumes back on its carrier after a host reboot
// unmounted everything, and reports whether it had to (the container then
// runs without them and must restart). The carrier's own volumes are
// mounted and made shared again first.
func (m *Manager) restack(ctx context.Context, sb *sandbox) (bool, error) {
	sb.mu.Lock()
	c := sb.carrier
	sb.mu.Unlock()
	if c == nil {
		return false, nil
	}
	cdir := sandboxDir(m.cfg.StateDir, c.ID)
	if stacked(filepath.Join(sb.dir, ioDir), filepath.Join(cdir, ioDir)) &&
		stacked(filepath.Join(sb.dir, workspaceDir), filepath.Join(cdir, workspaceDir)) {
		return false, nil
	}
	if _, err := ensureMounted(ctx, cdir); err != nil {
		return false, err
	}
	if err := makeShared(cdir); err != nil {
		return false, err
	}
	return true, stackOn(sb.dir, cdir)
}

// unmountStack unmounts every mount stacked on mp, the topmost first, at most
// a few layers (a carrier has two: the sandbox's, then its own). It fails
// rather than leave something mounted, so a removal never walks into a
// volume.
func unmountStack(mp string) error {
	for range 4 {
		mounted, err := mountinfo.Mounted(mp)
		if errors.Is(err, fs.ErrNotExist) || (err == nil && !mounted) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("check mount %s: %w", mp, err)
		}
		err = syscall.Unmount(mp, 0)
		if errors.Is(err, syscall.EBUSY) {
			err = syscall.Unmount(mp, syscall.MNT_DETACH)
		}
		if err != nil && !errors.Is(err, syscall.EINVAL) { // EINVAL: not mounted (any more)
			return fmt.Errorf("unmount %s: %w", mp, err)
		}
	}
	return fmt.Errorf("unmount %s: still mounted after 4 unmounts", mp)
}

// reconcileCarrier settles sb's carrier at start-up, once sb's recovery is
// done: a sandbox that does not run (any more) releases it; one that runs
// in it keeps it, and its container's events are routed to it.
func (m *Manager) reconcileCarrier(ctx context.Context, sb *sandbox) error {
	sb.mu.Lock()
	c, st := sb.carrier, sb.state
	sb.mu.Unlock()
	if c == nil {
		return nil
	}
	if st == core.StateRunning {
		m.carriers.Store(c.ID, sb.id)
		return nil
	}
	m.log.Info("releasing the carrier of a sandbox that does not run in it", "sandbox_id", sb.id, "carrier", c.ID, "state", st)
	m.dropCarrier(ctx, sb)
	return sb.persist(true)
}
