package grpcapi

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/orchestrator/metrics"
)

type stateSource struct{}

func (stateSource) SandboxCounts() []core.SandboxCount {
	return []core.SandboxCount{{Tenant: "t", State: core.StateRunning, N: 1}}
}
func (stateSource) PoolSize() int { return 0 }

// TestDashboardQueriesExistingSeries checks that every query of the Grafana
// dashboard names series sandboxd serves, grouped by labels they have.
func TestDashboardQueriesExistingSeries(t *testing.T) {
	raw, err := os.ReadFile("../../../deploy/grafana/sandboxd.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard is not valid JSON: %v", err)
	}

	// Every series exists once something happened: run traffic through a
	// server with metrics and report one of each domain event.
	reg := prometheus.NewPedanticRegistry()
	m := metrics.New(reg)
	m.Watch(stateSource{})
	m.DockerError("container_create")
	m.PoolRefilled()
	m.Acquired(core.AcquireCold, time.Second)
	env := newTestEnv(t, observedFake(), WithMetrics(m))
	runObservedTraffic(t, testCtx(t), env)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]map[string]bool{} // family → its label names
	for _, f := range fams {
		ls := map[string]bool{}
		for _, s := range f.GetMetric() {
			for _, lp := range s.GetLabel() {
				ls[lp.GetName()] = true
			}
		}
		labels[f.GetName()] = ls
	}

	series := regexp.MustCompile(`\b(?:sandboxd|grpc_server)_[a-z_]+`)
	by := regexp.MustCompile(`by \(([^)]*)\)`)
	queries := 0
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			queries++
			names := series.FindAllString(tg.Expr, -1)
			if len(names) == 0 {
				t.Errorf("panel %q: %q names no sandboxd series", p.Title, tg.Expr)
			}
			for _, n := range names {
				fam := n
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if _, ok := labels[fam]; !ok {
						fam = strings.TrimSuffix(fam, suf)
					}
				}
				ls, ok := labels[fam]
				if !ok {
					t.Errorf("panel %q: series %s does not exist", p.Title, n)
					continue
				}
				for _, g := range by.FindAllStringSubmatch(tg.Expr, -1) {
					for _, l := range strings.Split(g[1], ",") {
						if l = strings.TrimSpace(l); l != "le" && !ls[l] {
							t.Errorf("panel %q: %s has no label %q", p.Title, fam, l)
						}
					}
				}
			}
		}
	}
	if queries < 10 {
		t.Errorf("dashboard has %d queries; expected a panel for each area", queries)
	}
}
