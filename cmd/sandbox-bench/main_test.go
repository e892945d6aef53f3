package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/internal/kubetest"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// needDocker skips (or, under CI=true, fails) when Docker or the sandbox
// image is unavailable, and returns the image.
func needDocker(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs Docker; skipped in -short mode")
	}
	unavailable := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and %s", msg)
		}
		t.Skip(msg)
	}
	image := envOr("SANDBOX_IMAGE", core.DefaultImage)
	if _, err := exec.LookPath("docker"); err != nil {
		unavailable("the docker CLI is not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "image", "inspect", "--format", "{{.Id}}", image).CombinedOutput(); err != nil {
		unavailable("Docker or image %s is unavailable (make image): %v: %s", image, err, bytes.TrimSpace(out))
	}
	return image
}

// haveAPIServer reports whether the Kubernetes rows can be measured: the
// envtest binaries are there. Without them the smoke run passes --kube=false
// (under CI=true it fails instead, as internal/testenv's rule says).
func haveAPIServer(t *testing.T) bool {
	t.Helper()
	dir := kubetest.AssetsDir()
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			if testenv.InCI() {
				t.Fatalf("CI=true and the envtest binary %s is missing (make envtest-assets)", filepath.Join(dir, name))
			}
			t.Logf("the envtest binary %s is missing (make envtest-assets): the kubernetes rows are not measured", filepath.Join(dir, name))
			return false
		}
	}
	return true
}

// TestSmoke runs the whole benchmark with tiny sizes against the real
// sandboxd, Docker and image, as CI does: it must complete and report every
// figure in every format. Timings are not checked; that is what the
// benchmark is for.
func TestSmoke(t *testing.T) {
	image := needDocker(t)
	args := []string{"--image", image, "--iterations", "5", "--warmup", "1", "--peer-iterations", "1",
		"--cold", "1", "--warm-pool", "1", "--pool-acquisitions", "1", "--users", "2", "--duration", "300ms",
		"--idle-sandboxes", "2", "--reattach", "3", "--stream-mb", "1", "--kube-acquires", "3",
		"--net-requests", "5", "--net-download-mb", "1", "--net-clients", "2",
		"--sampling-sandboxes", "2", "--sampling-window", "6s", "--webhook-rounds", "2", "--snapshot-mb", "1", "--volume-mb", "1", "--template-rounds", "1", "--shape-rounds", "1", "--shapes", "allowlist"}
	kube := haveAPIServer(t)
	if !kube {
		args = append(args, "--kube=false")
	} else {
		// The A/B row, between two builds of the sidecar in a real run,
		// here between one and itself.
		args = append(args, "--kube-baseline-image", image)
	}
	cfg, err := parseConfig(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	rep, err := run(t.Context(), cfg, &progress)
	if err != nil {
		t.Fatalf("run: %v\nprogress:\n%s", err, progress.String())
	}

	if len(rep.Rows) != len(RowKeys) {
		t.Errorf("%d rows, want %d", len(rep.Rows), len(RowKeys))
	}
	for i, r := range rep.Rows {
		if i < len(RowKeys) && r.Key != RowKeys[i] {
			t.Errorf("row %d is %q, want %q", i, r.Key, RowKeys[i])
		}
		if r.Value == nil && r.Note == "" {
			t.Errorf("row %s has no value and no note saying why", r.Key)
		}
		if r.Value != nil && r.Target != "" && r.Met == nil {
			t.Errorf("row %s has a value and a target but no verdict", r.Key)
		}
	}
	// The figures every machine with Docker can produce are there.
	for _, k := range []string{mWarmP50.key, mWarmP99.key, mCold.key, mThroughput.key, mIdleMemory.key, mIdleFit.key,
		mReattach.key, mReattachGet.key, mStream.key, mStreamRSS.key, mSamplingCPU.key, mSamplingOne.key, mHookOK.key, mHookHung.key,
		mTplFirstBuild.key, mTplCacheHit.key, mTplFirstSandbox.key} {
		if r := find(rep, k); r == nil || r.Value == nil {
			t.Errorf("row %s was not measured: %+v", k, r)
		}
	}
	if r := find(rep, mWarmP50.key); r != nil && r.PeerValue == nil {
		t.Errorf("the docker exec peer was not measured: %s", r.Note)
	}
	if kube {
		for _, m := range kubeMetrics {
			if r := find(rep, m.key); r == nil || r.Value == nil {
				t.Errorf("kubernetes row %s was not measured: %+v", m.key, r)
			}
		}
		// The kubernetes rows are compared with the Docker backend's.
		for _, k := range []string{mKubeWarmP50.key, mKubeWarmP99.key, mKubeCold.key, mKubePool.key} {
			if r := find(rep, k); r != nil && r.PeerValue == nil {
				t.Errorf("kubernetes row %s has no figure to compare with: %+v", k, r)
			}
		}
		if r := find(rep, mKubeAcquire.key); r != nil && !strings.Contains(r.Metric, "3 new users") {
			t.Errorf("the acquire row does not say how many users: %q", r.Metric)
		}
	} else {
		for _, m := range kubeMetrics {
			if r := find(rep, m.key); r == nil || r.Value != nil || !strings.Contains(r.Note, "--kube=false") {
				t.Errorf("with --kube=false, row %s is %+v; want not measured, saying why", m.key, r)
			}
		}
	}

	// The network rows need root (the test host is a network namespace);
	// without it they say so, and CI, which has root, must measure them.
	switch {
	case os.Geteuid() == 0:
		for _, m := range netMetrics {
			if r := find(rep, m.key); r == nil || r.Value == nil || r.PeerValue == nil {
				t.Errorf("network row %s was not measured with its peer: %+v", m.key, r)
			}
		}
		if r := find(rep, mIngressRPS.key); r != nil && !strings.Contains(r.Metric, "2 clients") {
			t.Errorf("the ingress requests/s row does not say how many clients: %q", r.Metric)
		}
	case testenv.InCI():
		t.Errorf("CI=true and not root: the network rows cannot be measured")
	default:
		for _, m := range netMetrics {
			if r := find(rep, m.key); r == nil || r.Value != nil || !strings.Contains(r.Note, "root") {
				t.Errorf("without root, network row %s is %+v; want not measured, saying why", m.key, r)
			}
		}
	}

	var table, md, js bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Rows {
		for name, out := range map[string]string{"table": table.String(), "markdown": md.String()} {
			if !strings.Contains(out, r.Metric) {
				t.Errorf("%s output lacks %q:\n%s", name, r.Metric, out)
			}
		}
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back.Rows) != len(rep.Rows) {
		t.Errorf("JSON output does not decode to the report: %v\n%s", err, js.String())
	}
	t.Logf("\n%s", table.String())
}

// TestPercentileNearestRank pins the percentile definition the table uses:
// a reported p99 is a sample that occurred, never an interpolation.
func TestPercentileNearestRank(t *testing.T) {
	var l latencies
	for i := 100; i >= 1; i-- { // unsorted on purpose
		l = append(l, time.Duration(i)*time.Millisecond)
	}
	for p, want := range map[float64]time.Duration{50: 50 * time.Millisecond, 90: 90 * time.Millisecond, 99: 99 * time.Millisecond, 100: 100 * time.Millisecond, 0.1: time.Millisecond} {
		if got := l.percentile(p); got != want {
			t.Errorf("p%v = %v, want %v", p, got, want)
		}
	}
	if got := (latencies{7 * time.Millisecond, 3 * time.Millisecond}).percentile(99); got != 7*time.Millisecond {
		t.Errorf("p99 of two samples = %v, want the larger", got)
	}
}

// TestRowRatioAndVerdict checks the ratio's direction for both kinds of
// figure and that ratio targets judge the ratio, not the value.
func TestRowRatioAndVerdict(t *testing.T) {
	r := row(mWarmP50, 2, "peer", 200, both(atMost(1, "≤ 1 ms"), ratioAtLeast(50, "≥ 50×")), "")
	if r.Ratio == nil || *r.Ratio != 100 || r.RatioText != "100× faster" {
		t.Errorf("latency ratio = %v %q, want 100 \"100× faster\"", r.Ratio, r.RatioText)
	}
	if r.Met == nil || *r.Met {
		t.Errorf("2 ms met a ≤ 1 ms target: %+v", r)
	}
	r = row(mThroughput, 50, "peer", 100, ratioAtLeast(1, "more than the peer"), "")
	if r.Ratio == nil || *r.Ratio != 0.5 || r.RatioText != "2.00× fewer" || r.Met == nil || *r.Met {
		t.Errorf("throughput half the peer's: %+v", r)
	}
	r = row(mIdleMemory, nan, "peer", 10, atMost(30, "≤ 30 MiB"), "failed")
	if r.Value != nil || r.Ratio != nil || r.Met != nil {
		t.Errorf("an unmeasured figure got a value, ratio or verdict: %+v", r)
	}
}

// TestPhases checks --phases: a run of some phases reports only their
// rows, and an unknown phase is refused. The network phase against a
// running sandboxd (--addr) says why it is not measured, without setting
// anything up.
func TestPhases(t *testing.T) {
	if _, err := parseConfig([]string{"--phases", "network,nope"}, io.Discard); err == nil || !strings.Contains(err.Error(), `unknown phase "nope"`) {
		t.Errorf("--phases network,nope: %v", err)
	}
	if _, err := parseConfig([]string{"--phases", ","}, io.Discard); err == nil {
		t.Error("--phases naming no phase was accepted")
	}
	cfg, err := parseConfig([]string{"--phases", "network", "--addr", "127.0.0.1:1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.phases) != 1 || !cfg.phases["network"] {
		t.Fatalf("phases %v, want network only", cfg.phases)
	}
	b := &bench{cfg: cfg, log: io.Discard, rep: &Report{}}
	b.netSetup()
	if err := b.network(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(b.rep.Rows) != len(netMetrics) {
		t.Fatalf("%d rows, want %d", len(b.rep.Rows), len(netMetrics))
	}
	for _, r := range b.rep.Rows {
		if r.Value != nil || !strings.Contains(r.Note, "needs a self-started sandboxd") {
			t.Errorf("with --addr, row %s is %+v; want not measured, saying why", r.Key, r)
		}
	}
}

// TestParseStatTicks: utime and stime are counted after the command
// name's last ')', whatever the name holds.
func TestParseStatTicks(t *testing.T) {
	line := "4242 (sand) box (d)) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0 100 1000000 500 18446744073709551615\n"
	if n, err := parseStatTicks([]byte(line)); err != nil || n != 300 {
		t.Errorf("parseStatTicks = %d, %v; want 300", n, err)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 ten 12"} {
		if _, err := parseStatTicks([]byte(bad)); err == nil {
			t.Errorf("parseStatTicks(%q) accepted", bad)
		}
	}
}
