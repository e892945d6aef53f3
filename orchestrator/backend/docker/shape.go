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
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Claim, then shape. A warm-pool sandbox is made before anyone asks for
// it, with the server's defaults (pool.go). A claim gives it what the
// request asks for that a running container can take:
//
//   - the owner, metadata, idle timeout and on-idle action (meta.json);
//   - limits of memory, CPUs and processes, by changing the container's
//     cgroups in place (docker update; not under gVisor, whose runsc has
//     no update);
//   - env, by an env record in its command log (ioproto/PROTOCOL.md,
//     *Sandbox environment*): the driver sets the variables for itself,
//     every kernel and every process before any later command, and again
//     whenever it starts over on the log (a restart, a wake), as if the
//     container had been created with them. The record comes before any
//     command of the user's, so none runs without them;
//   - network, when the sandbox comes from the pool with network
//     (Config.WarmPoolNetwork): its plumbing was made with it (holder,
//     address, veth, its own CA and bundle, the CA's env) and the gateway
//     attached it with sealedPolicy, so until the claim it reaches
//     nothing; the claim gives the gateway the request's policy (allow-
//     and deny-lists, header rules, public traffic). A request without
//     network is never given one of these: it gets the sealed pool's,
//     whose containers have no network at all. Unclaimed ones are removed
//     at a restart (reconcile) and the pool refills with sandboxes this
//     sandboxd attached.
//
// What a running container cannot take sends the request to a cold
// create, counted by reason (core.PoolMiss,
// sandboxd_warm_pool_misses_total): network without a pool with network,
// with a template, or from a snapshot; volumes; a start from a
// snapshot where sandboxes do not wake fast (gVisor, no disk volumes) or
// of a template's sandbox; a template without a pool of its own; another
// /workspace size; other limits under gVisor; env naming a variable of
// the driver's own (ioproto.DriverEnv: only a container's creation sets
// those).
//
// A claim that shapes commits in two steps. meta.json is written first as
// the user's with Shaping set: from then on the sandbox is never a pool
// sandbox again, whatever happens. Then it is shaped, and meta.json written
// again without Shaping. reconcile removes a sandbox it finds with Shaping
// set (core.ReconcileHalfShaped): the Acquire that claimed it never
// returned it, and a retry gets another. So no half-shaped sandbox is ever
// handed out, and no pool sandbox keeps another tenant's shaping. A
// shaping that fails discards the sandbox (core.PoolMissShaping) and the
// request is created cold, as without a pool.

// A start from a snapshot (a fork among them) is not a claim: its
// /workspace is the snapshot's own volume and its globals the snapshot's.
// It runs in a pool container the way a fast wake does (carrier.go): its
// volumes made from the snapshot as for a cold start, then stacked on a
// pool container's, whose driver adopts them; limits and env are the
// carrier's as for a wake. startCarried does it when the new sandbox
// could be woken fast and the pool has a sandbox ready.

// startCarried starts sb, a new sandbox from a snapshot whose volumes and
// restore are prepared (create), in a ready pool container, and reports
// whether it did. false without an error: nothing was changed, and the
// caller starts a container of its own. An error: the caller cleans up.
func (m *Manager) startCarried(ctx context.Context, sb *sandbox) (bool, error) {
	pool := m.carrierPoolFor(sb)
	p, err := m.takeLiveFrom(ctx, pool)
	if err != nil {
		m.log.Warn("start from a snapshot: inspect a warm-pool container; starting a new one", "sandbox_id", sb.id, "error", err)
		return false, nil
	}
	if p == nil {
		m.cfg.Metrics.PoolMissed(core.PoolMissEmpty)
		return false, nil
	}
	defer pool.signal()
	sb.mu.Lock()
	sb.containerID = p.currentContainer()
	sb.mu.Unlock()
	if _, err := m.carry(ctx, sb, p); err != nil {
		// carry recorded sb with the carrier and undid it: the carrier
		// is gone, and so must be that meta.json, written before create's
		// own (its commit point).
		m.log.Warn("start from a snapshot in a warm-pool container failed; starting a new one", "sandbox_id", sb.id, "pool_sandbox_id", p.id, "error", err)
		m.cfg.Metrics.PoolMissed(core.PoolMissShaping)
		sb.mu.Lock()
		sb.containerID = ""
		sb.mu.Unlock()
		if err := os.Remove(filepath.Join(sb.dir, metaFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("remove the metadata of a failed start in a pool container: %w", err)
		}
		return false, nil
	}
	return true, nil
}

// Steps of a claim that shapes (Config.AtStep), for fault tests.
const (
	stepClaimRecorded = "claim:recorded" // the claim in meta.json with Shaping set, nothing shaped yet
	stepClaimShaped   = "claim:shaped"   // shaped, meta.json still saying Shaping
)

// ClaimSteps are a shaping claim's steps, for fault tests.
var ClaimSteps = []string{stepClaimRecorded, stepClaimShaped}

// poolMiss says why spec cannot be served by a sandbox of a warm pool for
// its image, "" when it can.
func (m *Manager) poolMiss(spec sandboxSpec) core.PoolMiss {
	switch {
	case spec.network && (spec.image != "" || (spec.from != nil && !m.poolsNetwork())):
		// Only the server's image has a pool with network plumbing
		// (poolFor), whose containers carry a start from a snapshot with
		// network (carrier_net.go).
		return core.PoolMissNetwork
	case len(spec.volumes) > 0 && !m.mountsLater:
		// Mounted into the claimed sandbox's container where containers
		// see mounts made after they started (shape_volumes.go).
		return core.PoolMissVolumes
	case spec.from != nil && (!m.fastWakeOn() || spec.image != ""):
		// A start from a snapshot runs in a pool container as a fast
		// wake does (startCarried), where one can.
		return core.PoolMissSnapshot
	case spec.limits.DiskBytes != m.cfg.DefaultLimits.DiskBytes:
		return core.PoolMissDisk
	case !sameCgroupLimits(spec.limits, m.cfg.DefaultLimits) && m.cfg.Runtime == core.RuntimeGVisor:
		// runsc has no update: Docker refuses to change a running
		// gVisor sandbox's limits.
		return core.PoolMissLimits
	case !shapeableEnv(spec.env):
		return core.PoolMissEnv
	}
	return ""
}

// pooling reports whether the server keeps any warm pool, so that a
// request no pool serves is worth counting.
func (m *Manager) pooling() bool {
	return m.cfg.WarmPool > 0 || (m.tplPools != nil && len(m.tplPools.pools) > 0)
}

// needsShaping reports whether a pool sandbox claimed for spec must change
// beyond its meta.json.
func (m *Manager) needsShaping(sb *sandbox, spec sandboxSpec) bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return !sameCgroupLimits(sb.limits, spec.limits) || len(spec.env) > 0 || spec.network || len(spec.volumes) > 0
}

// shapeableEnv reports whether an env record can carry env: it names no
// variable the driver reads for itself (ioproto.IsDriverEnv).
func shapeableEnv(env map[string]string) bool {
	for k := range env {
		if ioproto.IsDriverEnv(k) {
			return false
		}
	}
	return true
}

// sameCgroupLimits reports whether a and b set the same cgroup limits
// (the disk is a volume's size, not a cgroup's).
func sameCgroupLimits(a, b core.Limits) bool {
	return a.MemoryBytes == b.MemoryBytes && a.NanoCPUs == b.NanoCPUs && a.PidsLimit == b.PidsLimit
}

// shapeClaimed shapes sb, claimed for spec with Shaping recorded, and
// records it shaped: only then may it be handed out.
func (m *Manager) shapeClaimed(ctx context.Context, sb *sandbox, spec sandboxSpec) error {
	m.step(stepClaimRecorded)
	if err := m.shape(ctx, sb, spec); err != nil {
		return err
	}
	m.step(stepClaimShaped)
	sb.mu.Lock()
	sb.shaping = false
	sb.mu.Unlock()
	if err := sb.persist(true); err != nil {
		return fmt.Errorf("record the sandbox shaped: %w", err)
	}
	return nil
}

// shapeTimeout bounds a claim's shaping: a claim is meant to take
// milliseconds, and a cold create is the fallback.
const shapeTimeout = 10 * time.Second

// shape gives a claimed pool sandbox spec's limits, network policy and
// env. The caller has written meta.json with Shaping set, and writes it
// again once shape succeeds.
func (m *Manager) shape(ctx context.Context, sb *sandbox, spec sandboxSpec) error {
	ctx, cancel := context.WithTimeout(ctx, shapeTimeout)
	defer cancel()
	sb.mu.Lock()
	have, cid := sb.limits, sb.containerID
	sb.mu.Unlock()
	if !sameCgroupLimits(have, spec.limits) {
		if err := m.setCgroupLimits(ctx, cid, spec.limits); err != nil {
			return err
		}
		sb.mu.Lock()
		sb.limits.MemoryBytes, sb.limits.NanoCPUs, sb.limits.PidsLimit = spec.limits.MemoryBytes, spec.limits.NanoCPUs, spec.limits.PidsLimit
		sb.dirty = true
		sb.mu.Unlock()
	}
	if len(spec.volumes) > 0 {
		if err := m.mountVolumes(ctx, sb, cid, spec.volumes); err != nil {
			return err
		}
		sb.mu.Lock()
		sb.volumes, sb.dirty = slices.Clone(spec.volumes), true
		sb.mu.Unlock()
	}
	if spec.network {
		// The request's policy replaces the sealed one: its allow-list,
		// header rules (with the sandbox's own CA, made with it) and
		// public traffic take effect for every connection from now on.
		var p core.NetworkPolicy
		if spec.netPolicy != nil {
			p = spec.netPolicy.Clone()
		}
		sb.mu.Lock()
		sb.netPolicy, sb.dirty = &p, true
		sb.mu.Unlock()
		if err := m.applyNetworkPolicy(sb); err != nil {
			return err
		}
	}
	if len(spec.env) > 0 {
		if _, err := sb.io.AppendEnv(ctx, spec.env, func() error { return m.appendable(sb) }); err != nil {
			return fmt.Errorf("append the env record: %w", err)
		}
		sb.mu.Lock()
		sb.env = maps.Clone(spec.env)
		sb.dirty = true
		sb.mu.Unlock()
	}
	return nil
}

// setCgroupLimits changes running container cid's limits of memory, CPUs
// and processes to l's (docker update, kept by the engine across the
// container's restarts). Memory and its swap together, as at creation
// (container.go): no swap; the runtime orders the writes.
func (m *Manager) setCgroupLimits(ctx context.Context, cid string, l core.Limits) error {
	pids := l.PidsLimit
	_, err := m.docker.ContainerUpdate(ctx, cid, container.UpdateConfig{Resources: container.Resources{
		Memory: l.MemoryBytes, MemorySwap: l.MemoryBytes, NanoCPUs: l.NanoCPUs, PidsLimit: &pids,
	}})
	if err != nil {
		m.cfg.Metrics.DockerError("ContainerUpdate")
		// Its first line only: an engine's error may hold a runtime's
		// whole usage text.
		first, _, _ := strings.Cut(err.Error(), "\n")
		return fmt.Errorf("update the container's limits: %s", core.Truncate(first, 200))
	}
	return nil
}

// sealedPolicy is the policy of a networked pool sandbox until its claim:
// nothing out (the gateway refuses every connection and name), whatever
// the server's ceiling allows.
func sealedPolicy() *core.NetworkPolicy {
	return &core.NetworkPolicy{DenyOut: []string{"0.0.0.0/0", "::/0"}}
}
