package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

type fakeSource struct {
	counts []core.SandboxCount
	pool   int
}

func (f *fakeSource) SandboxCounts() []core.SandboxCount { return f.counts }
func (f *fakeSource) PoolSize() int                      { return f.pool }

func TestDomainSeries(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := New(reg)
	m.Acquired(core.AcquireCold, 2*time.Second)
	m.Acquired(core.AcquireCold, time.Second)
	m.Acquired(core.AcquireExisting, time.Millisecond)
	m.PoolRefilled()
	m.DockerError("container_create")
	m.Reconciled(core.ReconcileAdopted, 3)
	m.Reconciled(core.ReconcileOrphanContainer, 1)

	checks := []struct {
		name      string
		got, want float64
	}{
		{"acquires cold", testutil.ToFloat64(m.acquires.WithLabelValues("cold")), 2},
		{"acquires existing", testutil.ToFloat64(m.acquires.WithLabelValues("existing")), 1},
		{"acquires warm_pool (initialised)", testutil.ToFloat64(m.acquires.WithLabelValues("warm_pool")), 0},
		{"refills", testutil.ToFloat64(m.poolRefills), 1},
		{"docker errors", testutil.ToFloat64(m.dockerErrors.WithLabelValues("container_create")), 1},
		{"adopted", testutil.ToFloat64(m.reconciled.WithLabelValues("adopted")), 3},
		{"orphans", testutil.ToFloat64(m.reconciled.WithLabelValues("orphan_container")), 1},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.acquireDuration); n != 2 {
		t.Errorf("acquire duration series = %d, want 2 (cold, existing)", n)
	}
	// The pedantic registry checks every series is consistent with its
	// description (names, HELP, labels).
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("gather: %v", err)
	}
}

func TestCommandsAndStreamedAreBounded(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := New(reg)
	m.CommandDone("python", "ok", 1500*time.Millisecond)
	m.CommandDone("python", "error", 10*time.Millisecond)
	m.CommandDone("bash", "ok", 0)
	m.CommandDone("cobol", "exploded", time.Second) // a misbehaving driver
	m.Streamed(StreamStdout, 5)
	m.Streamed(StreamResult, 7)
	m.Streamed("secret-user-42", 1)
	m.Streamed(StreamStderr, 0)

	if got := testutil.ToFloat64(m.commands.WithLabelValues("python", "ok")); got != 1 {
		t.Errorf("python ok = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.commands.WithLabelValues("other", "other")); got != 1 {
		t.Errorf("unknown language and status = %v, want 1 as other/other", got)
	}
	if n := testutil.CollectAndCount(m.commands); n != 4 {
		t.Errorf("command series = %d, want 4", n)
	}
	if n := testutil.CollectAndCount(m.commandDuration); n != 4 {
		t.Errorf("command duration series = %d, want 4", n)
	}
	for kind, want := range map[string]float64{"stdout": 5, "stderr": 0, "display": 0, "result": 7, "other": 1} {
		if got := testutil.ToFloat64(m.streamed.WithLabelValues(kind)); got != want {
			t.Errorf("streamed %s = %v, want %v", kind, got, want)
		}
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("gather: %v", err)
	}
}

func TestStateGaugesReadAtScrapeTime(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := New(reg)
	src := &fakeSource{pool: 2, counts: []core.SandboxCount{
		{Tenant: "acme", State: core.StateRunning, N: 3},
		{Tenant: "acme", State: core.StateDead, N: 1},
	}}
	m.Watch(src)
	want := `# HELP sandboxd_sandboxes Registered sandboxes (unclaimed warm-pool ones excluded), by tenant and state (running, dead, hibernated).
# TYPE sandboxd_sandboxes gauge
sandboxd_sandboxes{state="dead",tenant="acme"} 1
sandboxd_sandboxes{state="running",tenant="acme"} 3
# HELP sandboxd_warm_pool_size Started, unclaimed sandboxes ready in the warm pool.
# TYPE sandboxd_warm_pool_size gauge
sandboxd_warm_pool_size 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), Name(SandboxesName), Name(PoolSizeName)); err != nil {
		t.Error(err)
	}
	// No drift: the next scrape sees the source as it is then.
	src.counts, src.pool = src.counts[:1], 0
	src.counts[0].N = 1
	want = `# HELP sandboxd_sandboxes Registered sandboxes (unclaimed warm-pool ones excluded), by tenant and state (running, dead, hibernated).
# TYPE sandboxd_sandboxes gauge
sandboxd_sandboxes{state="running",tenant="acme"} 1
# HELP sandboxd_warm_pool_size Started, unclaimed sandboxes ready in the warm pool.
# TYPE sandboxd_warm_pool_size gauge
sandboxd_warm_pool_size 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), Name(SandboxesName), Name(PoolSizeName)); err != nil {
		t.Error(err)
	}
}

func TestNilMetricsDiscard(t *testing.T) {
	var m *Metrics
	m.Acquired(core.AcquireCold, time.Second)
	m.PoolRefilled()
	m.DockerError("x")
	m.Reconciled(core.ReconcileDead, 1)
	m.CommandDone("python", "ok", time.Second)
	m.Streamed(StreamStdout, 1)
}

func TestEverySeriesHasHelp(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	m.Watch(&fakeSource{})
	m.Acquired(core.AcquireCold, time.Second)
	m.DockerError("container_start")
	m.CommandDone("python", "ok", time.Second)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if !strings.HasPrefix(f.GetName(), Namespace+"_") {
			t.Errorf("%s lacks the %s_ prefix", f.GetName(), Namespace)
		}
		if f.GetHelp() == "" {
			t.Errorf("%s has no HELP", f.GetName())
		}
	}
}

// leaderSource is a Source that reports only while it leads, as a replica
// of the Kubernetes backend does.
type leaderSource struct {
	fakeSource
	leading bool
}

func (l *leaderSource) Reporting() bool { return l.leading }

// TestGaugesOnlyFromTheReporter: a Reporter that does not report (a
// Kubernetes replica that does not lead) exports no gauges, so that the
// sum over a deployment's instances counts each sandbox once; once it
// reports, they are there.
func TestGaugesOnlyFromTheReporter(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := New(reg)
	src := &leaderSource{fakeSource: fakeSource{pool: 1, counts: []core.SandboxCount{{Tenant: "acme", State: core.StateHibernated, N: 2}}}}
	m.Watch(src)
	if n, err := testutil.GatherAndCount(reg, Name(SandboxesName), Name(PoolSizeName)); err != nil || n != 0 {
		t.Fatalf("a replica that does not lead exports %d gauge series (%v); want none", n, err)
	}
	src.leading = true
	want := `# HELP sandboxd_sandboxes Registered sandboxes (unclaimed warm-pool ones excluded), by tenant and state (running, dead, hibernated).
# TYPE sandboxd_sandboxes gauge
sandboxd_sandboxes{state="hibernated",tenant="acme"} 2
# HELP sandboxd_warm_pool_size Started, unclaimed sandboxes ready in the warm pool.
# TYPE sandboxd_warm_pool_size gauge
sandboxd_warm_pool_size 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), Name(SandboxesName), Name(PoolSizeName)); err != nil {
		t.Error(err)
	}
}
