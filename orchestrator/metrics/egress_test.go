package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

type fakeEgress struct {
	per    []core.SandboxEgress
	totals core.EgressTotals
	ok     bool
}

func (f *fakeEgress) EgressCounters() ([]core.SandboxEgress, core.EgressTotals, bool) {
	return f.per, f.totals, f.ok
}

// TestEgressSeries: the gateway's series as a scrape sees them: none
// before it starts; a sandbox's series with its ID and tenant and fixed
// label values only, gone with it; the totals.
func TestEgressSeries(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := New(reg)
	src := &fakeEgress{}
	m.WatchEgress(src)
	if n := countPrefixed(t, reg, "sandboxd_egress_", "sandboxd_sandbox_egress_"); n != 0 {
		t.Errorf("%d egress series before the gateway started", n)
	}

	src.ok = true
	src.per = []core.SandboxEgress{
		{SandboxID: "sb-a", Tenant: "acme", NetworkCounters: core.NetworkCounters{BytesOut: 10, BytesIn: 2000, ConnsAllowed: 3, ConnsDenied: 2,
			ConnsRefusedAtCap: 1, DNSAllowed: 4, DNSDenied: 5, DNSRateLimited: 6, ConnsOpen: 1, RuleRequests: 7}},
		{SandboxID: "sb-b", Tenant: "beta"},
	}
	src.totals = core.EgressTotals{NetworkCounters: core.NetworkCounters{BytesOut: 110, BytesIn: 3000, ConnsAllowed: 9, ConnsDenied: 8,
		ConnsRefusedAtCap: 1, DNSAllowed: 40, DNSDenied: 50, DNSRateLimited: 60, ConnsOpen: 1, RuleRequests: 7},
		Sandboxes: 2, DNSInFlight: 3, StrayConns: 11, StrayDNS: 12}
	want := `
# HELP sandboxd_sandbox_egress_bytes_total Bytes a networked sandbox's egress carried through the gateway since it was last attached (created, woken, sandboxd started), by direction: out (to the world) or in.
# TYPE sandboxd_sandbox_egress_bytes_total counter
sandboxd_sandbox_egress_bytes_total{direction="in",sandbox_id="sb-a",tenant="acme"} 2000
sandboxd_sandbox_egress_bytes_total{direction="in",sandbox_id="sb-b",tenant="beta"} 0
sandboxd_sandbox_egress_bytes_total{direction="out",sandbox_id="sb-a",tenant="acme"} 10
sandboxd_sandbox_egress_bytes_total{direction="out",sandbox_id="sb-b",tenant="beta"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), Name(SandboxEgressBytesName)); err != nil {
		t.Error(err)
	}
	for _, c := range []struct {
		series string
		labels map[string]string
		want   float64
	}{
		{SandboxEgressConnectionsName, map[string]string{"sandbox_id": "sb-a", "result": "allowed"}, 3},
		{SandboxEgressConnectionsName, map[string]string{"sandbox_id": "sb-a", "result": "denied"}, 2},
		{SandboxEgressConnectionsName, map[string]string{"sandbox_id": "sb-a", "result": "refused_at_cap"}, 1},
		{SandboxEgressDNSName, map[string]string{"sandbox_id": "sb-a", "result": "answered"}, 4},
		{SandboxEgressDNSName, map[string]string{"sandbox_id": "sb-a", "result": "denied"}, 5},
		{SandboxEgressDNSName, map[string]string{"sandbox_id": "sb-a", "result": "rate_limited"}, 6},
		{SandboxEgressOpenName, map[string]string{"sandbox_id": "sb-a"}, 1},
		{SandboxEgressRuleRequestsName, map[string]string{"sandbox_id": "sb-a", "tenant": "acme"}, 7},
		{EgressBytesName, map[string]string{"direction": "out"}, 110},
		{EgressConnectionsName, map[string]string{"result": "denied"}, 8},
		{EgressConnectionsName, map[string]string{"result": "stray"}, 11},
		{EgressDNSName, map[string]string{"result": "rate_limited"}, 60},
		{EgressDNSName, map[string]string{"result": "stray"}, 12},
		{EgressOpenName, nil, 1},
		{EgressRuleRequestsName, nil, 7},
		{EgressSandboxesName, nil, 2},
		{EgressDNSInFlightName, nil, 3},
	} {
		if got := gathered(t, reg, Name(c.series), c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.series, c.labels, got, c.want)
		}
	}

	// sb-a is gone: its series with it.
	src.per = src.per[1:]
	if got := countLabelled(t, reg, "sandbox_id", "sb-a"); got != 0 {
		t.Errorf("%d series of a sandbox that is gone", got)
	}
	if got := countLabelled(t, reg, "sandbox_id", "sb-b"); got != 10 {
		t.Errorf("%d series of sb-b, want 10", got)
	}
}

// gathered sums the samples of series name whose labels include labels.
func gathered(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

func countPrefixed(t *testing.T, reg *prometheus.Registry, prefixes ...string) int {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range fams {
		for _, p := range prefixes {
			if strings.HasPrefix(f.GetName(), p) {
				n += len(f.GetMetric())
			}
		}
	}
	return n
}

func countLabelled(t *testing.T, reg *prometheus.Registry, label, value string) int {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					n++
				}
			}
		}
	}
	return n
}

type fakeSandboxEgress struct {
	per     []core.SandboxEgress
	leading bool
}

func (f *fakeSandboxEgress) SandboxEgress() []core.SandboxEgress { return f.per }
func (f *fakeSandboxEgress) Reporting() bool                     { return f.leading }

// TestSandboxEgressSeries: a source of per-sandbox counters alone (the
// Kubernetes backend's, whose gateways are in the Pods) gives the
// per-sandbox series and no server-wide ones, and only while it reports
// (the leader).
func TestSandboxEgressSeries(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := New(reg)
	src := &fakeSandboxEgress{per: []core.SandboxEgress{{SandboxID: "sb-a", Tenant: "acme",
		NetworkCounters: core.NetworkCounters{BytesOut: 10, ConnsAllowed: 3, DNSDenied: 5}}}}
	m.WatchSandboxEgress(src)
	if n := countPrefixed(t, reg, "sandboxd_egress_", "sandboxd_sandbox_egress_"); n != 0 {
		t.Errorf("%d egress series from a replica that does not lead", n)
	}
	src.leading = true
	for _, c := range []struct {
		series string
		labels map[string]string
		want   float64
	}{
		{SandboxEgressBytesName, map[string]string{"sandbox_id": "sb-a", "direction": "out"}, 10},
		{SandboxEgressConnectionsName, map[string]string{"sandbox_id": "sb-a", "tenant": "acme", "result": "allowed"}, 3},
		{SandboxEgressDNSName, map[string]string{"sandbox_id": "sb-a", "result": "denied"}, 5},
	} {
		if got := gathered(t, reg, Name(c.series), c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.series, c.labels, got, c.want)
		}
	}
	if got := countLabelled(t, reg, "sandbox_id", "sb-a"); got != 10 {
		t.Errorf("%d series of sb-a, want 10", got)
	}
	if n := countPrefixed(t, reg, "sandboxd_egress_"); n != 0 {
		t.Errorf("%d server-wide egress series from a per-sandbox source; want none", n)
	}
}
