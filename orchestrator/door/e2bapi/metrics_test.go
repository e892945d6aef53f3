package e2bapi

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// metricsFake adds SandboxMetrics to fakeManager: two samples, and the
// since it was asked for.
type metricsFake struct {
	*fakeManager
	t0    time.Time
	since []time.Time
}

func (f *metricsFake) SandboxMetrics(ctx context.Context, id string, since time.Time) ([]core.SandboxMetrics, error) {
	f.since = append(f.since, since)
	all := []core.SandboxMetrics{
		{Time: f.t0, CPUUsedCores: 0.25, CPULimitCores: 0.5, MemoryUsedBytes: 100, MemoryCacheBytes: 30, MemoryLimitBytes: 512 << 20,
			Workspace: core.DiskUsage{UsedBytes: 4096, LimitBytes: 1 << 30}, IO: core.DiskUsage{UsedBytes: 1, LimitBytes: 2}},
		{Time: f.t0.Add(5 * time.Second), CPUUsedCores: 2, CPULimitCores: 2},
	}
	var out []core.SandboxMetrics
	for _, s := range all {
		if s.Time.After(since) {
			out = append(out, s)
		}
	}
	return out, nil
}

// TestMetricsRoute: getMetrics' route answers E2B's SandboxMetric fields
// (CPU as a share of the limit, cpuCount the limit rounded up to a whole
// CPU, disk as /workspace's), start inclusive, end by the second; a bad
// start is 400; another tenant's sandbox is 404.
func TestMetricsRoute(t *testing.T) {
	s, fm := newTestServer(t)
	t0 := time.Unix(1_800_000_000, 0)
	mf := &metricsFake{fakeManager: fm, t0: t0}
	s.m = mf
	const id = "sb-aaaaaaaaaaaaaaaaaaaa"
	fm.sandboxes[id] = core.Sandbox{ID: id, Tenant: "acme", State: core.StateRunning}
	fm.sandboxes["sb-bbbbbbbbbbbbbbbbbbbb"] = core.Sandbox{ID: "sb-bbbbbbbbbbbbbbbbbbbb", Tenant: "beta", State: core.StateRunning}
	key := map[string]string{"X-API-KEY": testKey}
	get := func(q string) []e2bMetric {
		t.Helper()
		w := do(s, "GET", "/sandboxes/"+id+"/metrics"+q, key, "")
		var out []e2bMetric
		if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &out) != nil {
			t.Fatalf("metrics%s: %d %s", q, w.Code, w.Body)
		}
		return out
	}
	all := get("")
	want := e2bMetric{Timestamp: t0.UTC().Format(time.RFC3339Nano), TimestampUnix: t0.Unix(), CPUCount: 1, CPUUsedPct: 50,
		MemUsed: 100, MemTotal: 512 << 20, MemCache: 30, DiskUsed: 4096, DiskTotal: 1 << 30}
	if len(all) != 2 || all[0] != want || all[1].CPUCount != 2 || all[1].CPUUsedPct != 100 {
		t.Fatalf("metrics = %+v; want first %+v", all, want)
	}
	if got := get("?start=1800000005"); len(got) != 1 || got[0].TimestampUnix != t0.Unix()+5 {
		t.Errorf("start at the second sample: %+v", got)
	}
	if got := get("?end=1800000004"); len(got) != 1 || got[0].TimestampUnix != t0.Unix() {
		t.Errorf("end before the second sample: %+v", got)
	}
	if w := do(s, "GET", "/sandboxes/"+id+"/metrics?start=yesterday", key, ""); w.Code != http.StatusBadRequest {
		t.Errorf("bad start: %d %s", w.Code, w.Body)
	}
	if w := do(s, "GET", "/sandboxes/sb-bbbbbbbbbbbbbbbbbbbb/metrics", key, ""); w.Code != http.StatusNotFound {
		t.Errorf("another tenant's sandbox: %d %s", w.Code, w.Body)
	}
}
