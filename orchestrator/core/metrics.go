package core

import (
	"cmp"
	"slices"
	"time"
)

// Metrics receives what the Manager does, for monitoring (sandboxd
// implements it with Prometheus in orchestrator/metrics; the domain knows no
// metrics library). Methods are called synchronously from the operations
// they describe and must be quick and safe for concurrent use. Gauges of the
// current state (sandboxes by state, the pool's size) are not pushed
// through it: the Manager answers SandboxCounts and PoolSize at scrape time,
// so they cannot drift.
type Metrics interface {
	// Acquired reports a successful Acquire: how its sandbox was found
	// (kind) and how long the call took.
	Acquired(kind AcquireKind, d time.Duration)
	// PoolRefilled reports a sandbox added to the warm pool.
	PoolRefilled()
	// PoolMissed reports a new sandbox that a warm pool could not serve
	// (there is one, for the server's image or the template), and why:
	// the sandbox was created cold instead.
	PoolMissed(reason PoolMiss)
	// DockerError reports a failed Docker API call, by operation (the
	// DockerAPI method's name). "Not found" answers and calls cancelled by
	// their caller are not failures of the engine and are not reported.
	DockerError(op string)
	// Reconciled reports what New found and did at start-up: n sandboxes
	// (or containers, or directories) with the given result.
	Reconciled(result ReconcileResult, n int)
}

// AcquireKind says how Acquire found the sandbox it returned.
type AcquireKind string

// Acquire kinds.
const (
	// AcquireExisting: the user's current sandbox, alive.
	AcquireExisting AcquireKind = "existing"
	// AcquireWarmPool: a new sandbox claimed from the warm pool.
	AcquireWarmPool AcquireKind = "warm_pool"
	// AcquireCold: a new sandbox whose container was created and started
	// for the call.
	AcquireCold AcquireKind = "cold"
)

// PoolMiss says why a new sandbox did not come from a warm pool: what a
// pool sandbox cannot take after its claim (docs/configuration.md lists
// them), or that the pool had none ready.
type PoolMiss string

// Pool misses.
const (
	// PoolMissEmpty: the pool had no ready sandbox (it refills in the
	// background).
	PoolMissEmpty PoolMiss = "empty"
	// PoolMissNetwork: a sandbox with network.
	PoolMissNetwork PoolMiss = "network"
	// PoolMissVolumes: a sandbox that mounts volumes.
	PoolMissVolumes PoolMiss = "volumes"
	// PoolMissSnapshot: a start from a named snapshot.
	PoolMissSnapshot PoolMiss = "snapshot"
	// PoolMissTemplate: a template without a pool of its own.
	PoolMissTemplate PoolMiss = "template"
	// PoolMissDisk: a /workspace of another size than the pool's.
	PoolMissDisk PoolMiss = "disk"
	// PoolMissLimits: limits of memory, CPUs or processes other than the
	// pool's, under a runtime that cannot change them in place (gVisor's
	// runsc has no update).
	PoolMissLimits PoolMiss = "limits"
	// PoolMissEnv: env naming a variable the sandbox's driver reads for
	// itself, which only a container's creation sets.
	PoolMissEnv PoolMiss = "env"
	// PoolMissShaping: the claimed sandbox could not take the request's
	// options (its limits or env); it was discarded.
	PoolMissShaping PoolMiss = "shaping_failed"
)

// PoolMisses lists every PoolMiss, for metrics that start each at zero.
func PoolMisses() []PoolMiss {
	return []PoolMiss{PoolMissEmpty, PoolMissNetwork, PoolMissVolumes, PoolMissSnapshot, PoolMissTemplate, PoolMissDisk, PoolMissLimits, PoolMissEnv, PoolMissShaping}
}

// ReconcileResult names what reconciliation did with a sandbox at start-up.
type ReconcileResult string

// Reconcile results.
const (
	// ReconcileAdopted: a sandbox registered again, alive or dead.
	ReconcileAdopted ReconcileResult = "adopted"
	// ReconcileDead: of the adopted, those whose container is gone or
	// stopped.
	ReconcileDead ReconcileResult = "dead"
	// ReconcileExpired: removed, having expired while sandboxd was down.
	ReconcileExpired ReconcileResult = "expired"
	// ReconcileOrphanContainer: a container without a sandbox, removed.
	ReconcileOrphanContainer ReconcileResult = "orphan_container"
	// ReconcileOrphanDir: a sandbox directory without metadata, removed.
	ReconcileOrphanDir ReconcileResult = "orphan_dir"
	// ReconcileHalfShaped: a warm-pool sandbox claimed but not yet shaped
	// to its request when sandboxd stopped, removed: the Acquire that
	// claimed it never returned it.
	ReconcileHalfShaped ReconcileResult = "half_shaped"
)

// noMetrics is the default Metrics: it discards.
type NoMetrics struct{}

func (NoMetrics) Acquired(AcquireKind, time.Duration) {}

func (NoMetrics) PoolRefilled() {}

func (NoMetrics) PoolMissed(PoolMiss) {}

func (NoMetrics) DockerError(string) {}

func (NoMetrics) Reconciled(ReconcileResult, int) {}

// metricsOrNoop is c's Metrics, or one that discards.
func MetricsOrNoop(mt Metrics) Metrics {
	if mt == nil {
		return NoMetrics{}
	}
	return mt
}

// SandboxCount is how many registered sandboxes of a tenant are in a state.
type SandboxCount struct {
	Tenant string
	State  State
	N      int
}

// CountKey is what SandboxCounts are counted by.
type CountKey struct {
	Tenant string
	State  State
}

// SortedCounts turns counts into SandboxCounts ordered by tenant, then
// state: what every backend's scrape-time gauges report.
func SortedCounts(counts map[CountKey]int) []SandboxCount {
	out := make([]SandboxCount, 0, len(counts))
	for k, n := range counts {
		out = append(out, SandboxCount{Tenant: k.Tenant, State: k.State, N: n})
	}
	slices.SortFunc(out, func(a, b SandboxCount) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.State, b.State))
	})
	return out
}

// SandboxEgress is one networked sandbox's egress counters as the
// gateway holds them now, for the per-sandbox metrics: the counters start
// again at each attach (creation, wake, sandboxd's start), and a sandbox
// the gateway does not serve (hibernated, deleted) has none.
type SandboxEgress struct {
	SandboxID, Tenant string
	NetworkCounters
}

// EgressTotals are the egress gateway's counters since it started, every
// sandbox's summed, those gone included, so that they only grow.
type EgressTotals struct {
	// NetworkCounters sums every sandbox's; ConnsOpen is the connections
	// open now.
	NetworkCounters
	// Sandboxes is the number of sandboxes the gateway serves now.
	Sandboxes int
	// DNSInFlight is the number of DNS queries being answered now.
	DNSInFlight int
	// StrayConns and StrayDNS count connections and DNS packets that came
	// from no sandbox the gateway serves, closed or dropped unread.
	StrayConns, StrayDNS uint64
}
