package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// The egress gateway's series, read at scrape time (WatchEgress).
//
// Per sandbox: every networked sandbox the gateway serves has its own
// series, labelled by sandbox_id and tenant and by fixed sets (direction,
// result), never by a domain, an address or a user: their number is
// bounded by the sandboxes alive (sandboxd --max-sandboxes), and a
// sandbox's series go when the gateway stops serving it (deleted,
// hibernated). A sandbox's counters start again at each attach (a wake,
// sandboxd's start), which Prometheus's rate() takes as a counter reset.
//
// Server-wide: the gateway's totals since sandboxd started, gone
// sandboxes' included, so that they only grow.
const (
	SandboxEgressBytesName        = "sandbox_egress_bytes_total"
	SandboxEgressConnectionsName  = "sandbox_egress_connections_total"
	SandboxEgressDNSName          = "sandbox_egress_dns_queries_total"
	SandboxEgressOpenName         = "sandbox_egress_connections_open"
	SandboxEgressRuleRequestsName = "sandbox_egress_rule_requests_total"

	EgressBytesName        = "egress_bytes_total"
	EgressConnectionsName  = "egress_connections_total"
	EgressDNSName          = "egress_dns_queries_total"
	EgressOpenName         = "egress_connections_open"
	EgressRuleRequestsName = "egress_rule_requests_total"
	EgressSandboxesName    = "egress_sandboxes"
	EgressDNSInFlightName  = "egress_dns_in_flight"
)

// EgressSource is what the egress series read: *docker.Manager.
type EgressSource interface {
	// EgressCounters returns each served sandbox's counters and the
	// gateway's totals; ok is false while the gateway has not started.
	EgressCounters() (per []core.SandboxEgress, totals core.EgressTotals, ok bool)
}

// SandboxEgressSource is what the per-sandbox egress series alone read:
// *kube.Manager, whose gateways run in the sandboxes' Pods, so that it has
// no server-wide totals. A source that is also a Reporter reports only
// while Reporting says so (the leader).
type SandboxEgressSource interface {
	// SandboxEgress returns each networked sandbox's counters.
	SandboxEgress() []core.SandboxEgress
}

// WatchSandboxEgress registers the per-sandbox egress series alone, read
// from src at scrape time.
func (m *Metrics) WatchSandboxEgress(src SandboxEgressSource) {
	m.reg.MustRegister(&sandboxEgressCollector{src: src})
}

// WatchEgress registers the egress gateway's series, read from src at
// scrape time.
func (m *Metrics) WatchEgress(src EgressSource) {
	m.reg.MustRegister(&egressCollector{src: src})
}

var (
	sbLabels = []string{"sandbox_id", "tenant"}

	sandboxEgressBytesDesc = prometheus.NewDesc(Name(SandboxEgressBytesName),
		"Bytes a networked sandbox's egress carried through the gateway since it was last attached (created, woken, sandboxd started), by direction: out (to the world) or in.",
		append(sbLabels, "direction"), nil)
	sandboxEgressConnsDesc = prometheus.NewDesc(Name(SandboxEgressConnectionsName),
		"A networked sandbox's TCP connections judged by the gateway since it was last attached, by result: allowed, denied (by its policy or the server's bounds; GetNetworkStatus says why) or refused_at_cap (past its or the server's cap on open connections).",
		append(sbLabels, "result"), nil)
	sandboxEgressDNSDesc = prometheus.NewDesc(Name(SandboxEgressDNSName),
		"A networked sandbox's DNS queries to the gateway since it was last attached, by result: answered, denied (NXDOMAIN or REFUSED for a name or type it may not have) or rate_limited (dropped past its rate; those the kernel drops first are not counted).",
		append(sbLabels, "result"), nil)
	sandboxEgressOpenDesc = prometheus.NewDesc(Name(SandboxEgressOpenName),
		"A networked sandbox's connections open through the gateway now.", sbLabels, nil)
	sandboxEgressRuleDesc = prometheus.NewDesc(Name(SandboxEgressRuleRequestsName),
		"HTTPS requests of a networked sandbox sent on with a rule's headers since it was last attached.", sbLabels, nil)

	egressBytesDesc = prometheus.NewDesc(Name(EgressBytesName),
		"Bytes the egress gateway carried for every sandbox since sandboxd started, by direction: out or in.", []string{"direction"}, nil)
	egressConnsDesc = prometheus.NewDesc(Name(EgressConnectionsName),
		"TCP connections the egress gateway judged since sandboxd started, by result: allowed, denied, refused_at_cap, or stray (from no sandbox it serves: closed unread).", []string{"result"}, nil)
	egressDNSDesc = prometheus.NewDesc(Name(EgressDNSName),
		"DNS queries the egress gateway received since sandboxd started, by result: answered, denied, rate_limited, or stray (from no sandbox it serves: dropped unread).", []string{"result"}, nil)
	egressOpenDesc = prometheus.NewDesc(Name(EgressOpenName),
		"Connections open through the egress gateway now, all sandboxes.", nil, nil)
	egressRuleDesc = prometheus.NewDesc(Name(EgressRuleRequestsName),
		"HTTPS requests sent on with a rule's headers since sandboxd started.", nil, nil)
	egressSandboxesDesc = prometheus.NewDesc(Name(EgressSandboxesName),
		"Networked sandboxes the egress gateway serves now (hibernated ones are not served).", nil, nil)
	egressDNSInFlightDesc = prometheus.NewDesc(Name(EgressDNSInFlightName),
		"DNS queries the egress gateway is answering now, all sandboxes.", nil, nil)
)

type egressCollector struct {
	src EgressSource
}

// Describe implements prometheus.Collector.
func (c *egressCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{sandboxEgressBytesDesc, sandboxEgressConnsDesc, sandboxEgressDNSDesc, sandboxEgressOpenDesc,
		sandboxEgressRuleDesc, egressBytesDesc, egressConnsDesc, egressDNSDesc, egressOpenDesc, egressRuleDesc, egressSandboxesDesc,
		egressDNSInFlightDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *egressCollector) Collect(ch chan<- prometheus.Metric) {
	per, t, ok := c.src.EgressCounters()
	if !ok {
		return
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v int, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	collectSandboxEgress(ch, per)
	counter(egressBytesDesc, t.BytesOut, "out")
	counter(egressBytesDesc, t.BytesIn, "in")
	counter(egressConnsDesc, t.ConnsAllowed, "allowed")
	counter(egressConnsDesc, t.ConnsDenied, "denied")
	counter(egressConnsDesc, t.ConnsRefusedAtCap, "refused_at_cap")
	counter(egressConnsDesc, t.StrayConns, "stray")
	counter(egressDNSDesc, t.DNSAllowed, "answered")
	counter(egressDNSDesc, t.DNSDenied, "denied")
	counter(egressDNSDesc, t.DNSRateLimited, "rate_limited")
	counter(egressDNSDesc, t.StrayDNS, "stray")
	gauge(egressOpenDesc, t.ConnsOpen)
	counter(egressRuleDesc, t.RuleRequests)
	gauge(egressSandboxesDesc, t.Sandboxes)
	gauge(egressDNSInFlightDesc, t.DNSInFlight)
}

// collectSandboxEgress sends the per-sandbox series of per.
func collectSandboxEgress(ch chan<- prometheus.Metric, per []core.SandboxEgress) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, s := range per {
		id, tenant := s.SandboxID, s.Tenant
		counter(sandboxEgressBytesDesc, s.BytesOut, id, tenant, "out")
		counter(sandboxEgressBytesDesc, s.BytesIn, id, tenant, "in")
		counter(sandboxEgressConnsDesc, s.ConnsAllowed, id, tenant, "allowed")
		counter(sandboxEgressConnsDesc, s.ConnsDenied, id, tenant, "denied")
		counter(sandboxEgressConnsDesc, s.ConnsRefusedAtCap, id, tenant, "refused_at_cap")
		counter(sandboxEgressDNSDesc, s.DNSAllowed, id, tenant, "answered")
		counter(sandboxEgressDNSDesc, s.DNSDenied, id, tenant, "denied")
		counter(sandboxEgressDNSDesc, s.DNSRateLimited, id, tenant, "rate_limited")
		ch <- prometheus.MustNewConstMetric(sandboxEgressOpenDesc, prometheus.GaugeValue, float64(s.ConnsOpen), id, tenant)
		counter(sandboxEgressRuleDesc, s.RuleRequests, id, tenant)
	}
}

// sandboxEgressCollector sends the per-sandbox series alone.
type sandboxEgressCollector struct {
	src SandboxEgressSource
}

// Describe implements prometheus.Collector.
func (c *sandboxEgressCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{sandboxEgressBytesDesc, sandboxEgressConnsDesc, sandboxEgressDNSDesc, sandboxEgressOpenDesc, sandboxEgressRuleDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *sandboxEgressCollector) Collect(ch chan<- prometheus.Metric) {
	if r, ok := c.src.(Reporter); ok && !r.Reporting() {
		return
	}
	collectSandboxEgress(ch, c.src.SandboxEgress())
}
