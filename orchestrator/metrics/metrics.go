// Package metrics implements sandboxd's Prometheus metrics: the domain's
// (core.Metrics), the API's view of commands and streamed bytes, and
// gauges of the Manager's state computed at scrape time.
//
// Everything is registered on the prometheus.Registerer given to New, never
// on the global default registry, so tests and several servers in one
// process stay apart. Labels are bounded: tenants (bounded by the token
// file), states, kinds, languages and statuses from fixed sets; never user
// IDs, domains or addresses. Sandbox IDs label the per-sandbox egress
// series alone (egress.go): one set per networked sandbox the gateway
// serves, gone with it, so their number is bounded by the sandboxes alive.
package metrics

import (
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/ioproto"
)

// Namespace prefixes every series of this package.
const Namespace = "sandboxd"

// Series names, without the namespace's prefix applied (use Name).
const (
	SandboxesName       = "sandboxes"
	AcquiresName        = "acquires_total"
	AcquireDurationName = "acquire_duration_seconds"
	CommandsName        = "commands_total"
	CommandDurationName = "command_duration_seconds"
	StreamedBytesName   = "streamed_bytes_total"
	PoolSizeName        = "warm_pool_size"
	PoolRefillsName     = "warm_pool_refills_total"
	PoolMissesName      = "warm_pool_misses_total"
	DockerErrorsName    = "docker_errors_total"
	ReconciledName      = "reconciled_total"
)

// Name is the full name of a series of this package.
func Name(n string) string { return Namespace + "_" + n }

// Source is what the scrape-time gauges read: *docker.Manager, or
// *kube.Manager.
type Source interface {
	SandboxCounts() []core.SandboxCount
	PoolSize() int
}

// Reporter is a Source that reports only while it holds a role: a replica
// of the Kubernetes backend sees the whole cluster's sandboxes, and only
// its leader reports them, so that a sum over instances counts each once.
// Elsewhere the gauges are absent.
type Reporter interface {
	Reporting() bool
}

// Metrics holds sandboxd's series. It implements core.Metrics; its
// methods are safe for concurrent use. A nil *Metrics discards (so the API
// can call it unconditionally).
type Metrics struct {
	reg prometheus.Registerer

	acquires        *prometheus.CounterVec
	acquireDuration *prometheus.HistogramVec
	commands        *prometheus.CounterVec
	commandDuration *prometheus.HistogramVec
	streamed        *prometheus.CounterVec
	poolRefills     prometheus.Counter
	poolMisses      *prometheus.CounterVec
	dockerErrors    *prometheus.CounterVec
	reconciled      *prometheus.CounterVec
}

var _ core.Metrics = (*Metrics)(nil)

// New creates the series and registers them on reg. Series that are
// labelled by a fixed set are initialised to zero for every label value,
// so dashboards and rate() see them before the first event.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		reg: reg,
		acquires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: AcquiresName,
			Help: "Successful AcquireSandbox calls, by how the sandbox was found: existing (the user's live sandbox), warm_pool (claimed from the warm pool) or cold (container created for the call).",
		}, []string{"kind"}),
		acquireDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: AcquireDurationName,
			Help:    "Duration of successful AcquireSandbox calls in the domain, by kind.",
			Buckets: []float64{.001, .005, .025, .1, .25, .5, 1, 2, 4, 8, 15, 30, 60},
		}, []string{"kind"}),
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: CommandsName,
			Help: "Commands whose done event an Execute stream delivered, by language and final status (ok, error, timeout, interrupted, killed).",
		}, []string{"language", "status"}),
		commandDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: CommandDurationName,
			Help:    "Run time of commands as their done event reports it, for those counted by sandboxd_commands_total, by language and status.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600},
		}, []string{"language", "status"}),
		streamed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: StreamedBytesName,
			Help: "Payload bytes of command events sent to clients (Execute and StreamCommand), by kind: stdout and stderr text, display and result MIME-bundle values.",
		}, []string{"kind"}),
		poolRefills: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: PoolRefillsName,
			Help: "Sandboxes created and warmed up for the warm pool.",
		}),
		poolMisses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: PoolMissesName,
			Help: "New sandboxes created cold although a warm pool was configured for their image, by reason: empty (none ready), network, volumes, snapshot, template (no pool of its own), disk (another /workspace size), limits (other limits, under a runtime that cannot change them in place: gVisor), env (naming a variable of the driver's own), shaping_failed (the claimed sandbox could not take the request's limits or env).",
		}, []string{"reason"}),
		dockerErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: DockerErrorsName,
			Help: "Failed Docker API calls, by operation (not-found answers and calls abandoned by their caller excluded).",
		}, []string{"op"}),
		reconciled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: ReconciledName,
			Help: "What start-up reconciliation did: sandboxes adopted (and of those, dead), removed as expired, orphan containers and directories removed.",
		}, []string{"result"}),
	}
	for _, k := range []core.AcquireKind{core.AcquireExisting, core.AcquireWarmPool, core.AcquireCold} {
		m.acquires.WithLabelValues(string(k))
	}
	for _, r := range core.PoolMisses() {
		m.poolMisses.WithLabelValues(string(r))
	}
	for _, k := range streamKinds {
		m.streamed.WithLabelValues(k)
	}
	for _, r := range []core.ReconcileResult{core.ReconcileAdopted, core.ReconcileDead, core.ReconcileExpired,
		core.ReconcileOrphanContainer, core.ReconcileOrphanDir, core.ReconcileHalfShaped} {
		m.reconciled.WithLabelValues(string(r))
	}
	reg.MustRegister(m.acquires, m.acquireDuration, m.commands, m.commandDuration, m.streamed, m.poolRefills, m.poolMisses, m.dockerErrors, m.reconciled)
	return m
}

// Registerer is the registry New registered on, for further series (the
// gRPC server's).
func (m *Metrics) Registerer() prometheus.Registerer { return m.reg }

// Watch registers the gauges read from src at scrape time: sandboxes by
// tenant and state, and the warm pool's size.
func (m *Metrics) Watch(src Source) {
	m.reg.MustRegister(&stateCollector{src: src})
}

// Acquired implements core.Metrics.
func (m *Metrics) Acquired(kind core.AcquireKind, d time.Duration) {
	if m == nil {
		return
	}
	m.acquires.WithLabelValues(string(kind)).Inc()
	m.acquireDuration.WithLabelValues(string(kind)).Observe(d.Seconds())
}

// PoolRefilled implements core.Metrics.
func (m *Metrics) PoolRefilled() {
	if m == nil {
		return
	}
	m.poolRefills.Inc()
}

// PoolMissed implements core.Metrics.
func (m *Metrics) PoolMissed(reason core.PoolMiss) {
	if m == nil {
		return
	}
	m.poolMisses.WithLabelValues(string(reason)).Inc()
}

// DockerError implements core.Metrics.
func (m *Metrics) DockerError(op string) {
	if m == nil {
		return
	}
	m.dockerErrors.WithLabelValues(op).Inc()
}

// Reconciled implements core.Metrics.
func (m *Metrics) Reconciled(result core.ReconcileResult, n int) {
	if m == nil {
		return
	}
	m.reconciled.WithLabelValues(string(result)).Add(float64(n))
}

// CommandDone counts a command whose done event was delivered, with the run
// time the event reports. Languages and statuses outside the known sets are
// counted as "other", so a misbehaving driver cannot grow the label space.
func (m *Metrics) CommandDone(language, status string, d time.Duration) {
	if m == nil {
		return
	}
	language = bounded(language, ioproto.Languages...)
	status = bounded(status, ioproto.StatusOK, ioproto.StatusError, ioproto.StatusTimeout, ioproto.StatusInterrupted, ioproto.StatusKilled)
	m.commands.WithLabelValues(language, status).Inc()
	m.commandDuration.WithLabelValues(language, status).Observe(d.Seconds())
}

// Stream kinds of Streamed.
const (
	StreamStdout  = "stdout"
	StreamStderr  = "stderr"
	StreamDisplay = "display"
	StreamResult  = "result"
)

var streamKinds = []string{StreamStdout, StreamStderr, StreamDisplay, StreamResult}

// Streamed counts n payload bytes of kind (one of the Stream* constants)
// sent to a client.
func (m *Metrics) Streamed(kind string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.streamed.WithLabelValues(bounded(kind, streamKinds...)).Add(float64(n))
}

// bounded is v if it is one of known, else "other".
func bounded(v string, known ...string) string {
	for _, k := range known {
		if v == k {
			return v
		}
	}
	return "other"
}

// stateCollector reports the Manager's current state at each scrape, so the
// gauges never drift from what the registry holds.
type stateCollector struct {
	src Source
}

var (
	sandboxesDesc = prometheus.NewDesc(Name(SandboxesName),
		"Registered sandboxes (unclaimed warm-pool ones excluded), by tenant and state (running, dead, hibernated).",
		[]string{"tenant", "state"}, nil)
	poolSizeDesc = prometheus.NewDesc(Name(PoolSizeName),
		"Started, unclaimed sandboxes ready in the warm pool.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sandboxesDesc
	ch <- poolSizeDesc
}

// Collect implements prometheus.Collector.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	if r, ok := c.src.(Reporter); ok && !r.Reporting() {
		return
	}
	for _, sc := range c.src.SandboxCounts() {
		ch <- prometheus.MustNewConstMetric(sandboxesDesc, prometheus.GaugeValue, float64(sc.N), sc.Tenant, string(sc.State))
	}
	ch <- prometheus.MustNewConstMetric(poolSizeDesc, prometheus.GaugeValue, float64(c.src.PoolSize()))
}
