package e2e

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// metricsLine is what sandboxd logs once its metrics listener is up, before
// it serves gRPC (so it is in the log when start returns).
var metricsLine = regexp.MustCompile(`msg="serving metrics" metrics_listen=(\S+)`)

// metricsURLs are the /metrics URLs the daemons ds logged.
func metricsURLs(t *testing.T, ds ...*daemon) []string {
	t.Helper()
	var urls []string
	for _, d := range ds {
		m := metricsLine.FindStringSubmatch(d.logs.String())
		if m == nil {
			t.Fatalf("sandboxd did not log its metrics address:\n%s", d.logs)
		}
		urls = append(urls, "http://"+m[1]+"/metrics")
	}
	return urls
}

// TestMetricsEndToEnd runs known traffic through the real sandboxd and
// checks what its /metrics says about it.
func TestMetricsEndToEnd(t *testing.T) {
	env := needE2E(t)
	d := env.start(t, "--metrics-listen", "127.0.0.1:0")
	m := metricsLine.FindStringSubmatch(d.logs.String())
	if m == nil {
		t.Fatalf("sandboxd did not log its metrics address; log:\n%s", d.logs)
	}
	metricsURL := "http://" + m[1] + "/metrics"
	c, _ := d.client(t)
	ctx := e2eCtx(t)

	// Two users, three commands: python ok, python raising, bash ok.
	alice := acquire(t, ctx, c, "alice").GetSandbox().GetSandboxId()
	bob := acquire(t, ctx, c, "bob").GetSandbox().GetSandboxId()
	t.Cleanup(func() { deleteQuietly(c, alice); deleteQuietly(c, bob) })
	mustOK(t, execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: alice, Code: "print('hello metrics')"}), "print")
	if o := execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: alice, Code: "raise ValueError('boom')"}); o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_ERROR {
		t.Fatalf("raising command ended %v, want error", o.done.GetStatus())
	}
	mustOK(t, execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: bob, Language: "bash", Code: "echo hi from bash"}), "bash")

	fams := scrape(t, ctx, metricsURL)
	checks := []struct {
		what string
		got  float64
		want float64
	}{
		{"AcquireSandbox handled OK", value(fams, "grpc_server_handled_total", "grpc_method", "AcquireSandbox", "grpc_code", "OK"), 2},
		{"Execute handled OK", value(fams, "grpc_server_handled_total", "grpc_method", "Execute", "grpc_code", "OK"), 3},
		{"sandboxes running", value(fams, "sandboxd_sandboxes", "state", "running"), 2},
		{"sandboxes dead", value(fams, "sandboxd_sandboxes", "state", "dead"), 0},
		{"cold acquires", value(fams, "sandboxd_acquires_total", "kind", "cold"), 2},
		{"existing acquires", value(fams, "sandboxd_acquires_total", "kind", "existing"), 0},
		{"python ok", value(fams, "sandboxd_commands_total", "language", "python", "status", "ok"), 1},
		{"python error", value(fams, "sandboxd_commands_total", "language", "python", "status", "error"), 1},
		{"bash ok", value(fams, "sandboxd_commands_total", "language", "bash", "status", "ok"), 1},
		{"commands", value(fams, "sandboxd_commands_total"), 3},
		{"command durations", value(fams, "sandboxd_command_duration_seconds"), 3},
		{"acquire durations", value(fams, "sandboxd_acquire_duration_seconds", "kind", "cold"), 2},
		{"warm pool", value(fams, "sandboxd_warm_pool_size"), 0},
		{"adopted at start", value(fams, "sandboxd_reconciled_total", "result", "adopted"), 0},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.what, ch.got, ch.want)
		}
	}
	if got := value(fams, "sandboxd_streamed_bytes_total", "kind", "stdout"); got < float64(len("hello metrics\nhi from bash\n")) {
		t.Errorf("stdout bytes streamed = %v, want at least both commands' output", got)
	}
	if value(fams, "grpc_server_handling_seconds", "grpc_method", "Execute") != 3 {
		t.Errorf("Execute handling-time observations = %v, want 3", value(fams, "grpc_server_handling_seconds", "grpc_method", "Execute"))
	}
	if t.Failed() {
		t.Logf("scraped families: %d", len(fams))
	}
}

// scrape reads and parses a /metrics page in the text format.
func scrape(t *testing.T, ctx context.Context, url string) map[string]*dto.MetricFamily {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return fams
}

// value sums the series of family name whose labels match the given
// name/value pairs: counters' and gauges' values, histograms' sample
// counts. A family or series that does not exist sums to 0.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	f, ok := fams[name]
	if !ok {
		return 0
	}
	var sum float64
series:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if have[labels[i]] != labels[i+1] {
				continue series
			}
		}
		switch {
		case m.GetCounter() != nil:
			sum += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			sum += m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		default:
			panic(fmt.Sprintf("%s: unexpected metric type", name))
		}
	}
	return sum
}
