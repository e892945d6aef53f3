package main

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/backend/docker"
)

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// dockerConfig is the Docker backend's config as sandboxd starts it: its
// own settings and the shared policy.
func dockerConfig(c config) docker.Config {
	mc := c.docker
	mc.Policy = c.policy
	return mc
}

func TestParseConfigDefaults(t *testing.T) {
	c, err := parseConfig(nil, env("HOME", "/root"), io.Discard)
	if err != nil {
		t.Fatalf("parseConfig: %v", err)
	}
	mc := dockerConfig(c)
	checks := []struct {
		name      string
		got, want any
	}{
		{"listen", c.listen, "127.0.0.1:50051"},
		{"state dir", mc.StateDir, "/root/.local/state/sandboxd"},
		{"idle ttl", mc.IdleTTL, 30 * time.Minute},
		{"max lifetime", mc.MaxLifetime, time.Duration(0)},
		{"max idle ttl (automatic)", mc.MaxIdleTTL, time.Duration(0)},
		{"image", mc.Image, "sandboxd-sandbox:latest"},
		{"default memory", mc.DefaultLimits.MemoryBytes, int64(1 << 30)},
		{"default cpus", mc.DefaultLimits.NanoCPUs, int64(1e9)},
		{"max cpus", mc.MaxLimits.NanoCPUs, int64(runtime.NumCPU()) * 1e9},
		{"default pids", mc.DefaultLimits.PidsLimit, int64(256)},
		{"log level", c.logLevel.Level, slog.LevelInfo},
		{"shutdown", c.shutdownTimeout, 10 * time.Second},
		{"auth", c.authTokens, ""},
		{"insecure", c.insecure, false},
		{"per-tenant cap", mc.MaxSandboxesPerTenant, 0},
		{"warm pool (automatic, Docker)", mc.WarmPool, 2},
		{"warm pool with network (no network)", mc.WarmPoolNetwork, 0},
		{"max code", mc.MaxCodeBytes, 1 << 20},
		{"network", mc.AllowNetwork, false},
		{"disk volumes", mc.NoDiskVolumes, false},
		{"default disk", mc.DefaultLimits.DiskBytes, int64(1 << 30)},
		{"max disk", mc.MaxLimits.DiskBytes, int64(16 << 30)},
		{"io disk", mc.IODiskBytes, int64(1 << 30)},
		{"max watches", mc.MaxWatches, 64},
		{"max watches per tenant (derived)", mc.MaxWatchesPerTenant, 0},
		{"max watch dirs", mc.MaxWatchDirs, 32000},
		{"max watch dirs per call (derived)", mc.MaxWatchDirsPerCall, 0},
		{"audit", c.audit, auditFlags{enabled: true, maxFileBytes: 100 << 20, maxFiles: 10}},
		{"metrics sample interval", mc.MetricsSampleInterval, 5 * time.Second},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}
}

func TestParseConfigFlagsEnvPrecedence(t *testing.T) {
	c, err := parseConfig(
		[]string{"--listen", ":6000", "--default-memory", "512MiB", "--max-cpus=2.5", "--log-level", "debug",
			"--warm-pool", "3", "--allow-network", "--max-code", "64KiB", "--default-disk", "256m", "--tls-cert", "c.pem", "--tls-key", "k.pem",
			"--snapshot-disk-budget", "64MiB"},
		env("SANDBOXD_LISTEN", "ignored:1", "SANDBOXD_IDLE_TTL", "5m", "SANDBOXD_MAX_MEMORY", "2g",
			"XDG_STATE_HOME", "/var/state", "SANDBOXD_DEFAULT_CPUS", "0.5", "SANDBOXD_AUTH_TOKENS", "/etc/sandboxd/tokens",
			"SANDBOXD_MAX_SANDBOXES_PER_TENANT", "7", "SANDBOXD_DISK_VOLUMES", "false", "SANDBOXD_SNAPSHOT_DISK_BUDGET_PER_TENANT", "16MiB",
			"SANDBOXD_METRICS_SAMPLE_INTERVAL", "0"),
		io.Discard)
	if err != nil {
		t.Fatalf("parseConfig: %v", err)
	}
	mc := dockerConfig(c)
	checks := []struct {
		name      string
		got, want any
	}{
		{"listen (flag beats env)", c.listen, ":6000"},
		{"idle ttl (env)", mc.IdleTTL, 5 * time.Minute},
		{"default memory", mc.DefaultLimits.MemoryBytes, int64(512 << 20)},
		{"max memory (env)", mc.MaxLimits.MemoryBytes, int64(2 << 30)},
		{"default cpus (env)", mc.DefaultLimits.NanoCPUs, int64(5e8)},
		{"max cpus", mc.MaxLimits.NanoCPUs, int64(25e8)},
		{"state dir (XDG)", mc.StateDir, "/var/state/sandboxd"},
		{"log level", c.logLevel.Level, slog.LevelDebug},
		{"auth (env)", c.authTokens, "/etc/sandboxd/tokens"},
		{"warm pool", mc.WarmPool, 3},
		{"warm pool with network (automatic, network)", mc.WarmPoolNetwork, 2},
		{"per-tenant cap (env)", mc.MaxSandboxesPerTenant, 7},
		{"network", mc.AllowNetwork, true},
		{"max code", mc.MaxCodeBytes, 64 << 10},
		{"default disk", mc.DefaultLimits.DiskBytes, int64(256 << 20)},
		{"disk volumes (env)", mc.NoDiskVolumes, true},
		{"tls", c.tlsCert + "," + c.tlsKey, "c.pem,k.pem"},
		{"snapshot budget", mc.SnapshotDiskBudget, int64(64 << 20)},
		{"snapshot budget per tenant (env)", mc.SnapshotDiskBudgetPerTenant, int64(16 << 20)},
		{"metrics sampling off (env)", mc.MetricsSampleInterval, time.Duration(0)},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{"--default-memory", "lots"}, nil, "invalid size"},
		{[]string{"--default-cpus", "-1"}, nil, "invalid CPU count"},
		{[]string{"--default-cpus", "NaN"}, nil, "invalid CPU count"},
		{[]string{"--default-memory", "9g", "--max-memory", "8g"}, nil, "above --max-memory"},
		{[]string{"--default-timeout", "2h"}, nil, "above --max-timeout"},
		{[]string{"--idle-ttl", "0"}, nil, "--idle-ttl must be positive"},
		{[]string{"--max-lifetime", "-1s"}, nil, "negative"},
		{[]string{"--log-level", "chatty"}, nil, "log-level"},
		{[]string{"--log-format", "xml"}, nil, "log-format"},
		{[]string{"extra"}, nil, "unexpected argument"},
		{[]string{"--no-such-flag"}, nil, "no-such-flag"},
		{nil, []string{"SANDBOXD_IDLE_TTL", "soon"}, "SANDBOXD_IDLE_TTL"},
		{nil, []string{"HOME", ""}, "--state-dir is empty"},
		{[]string{"--tls-cert", "c.pem"}, nil, "--tls-cert and --tls-key go together"},
		{[]string{"--max-code", "2MiB"}, nil, "--max-code must be between 1 and 1048576 bytes"},
		{[]string{"--warm-pool", "5", "--max-sandboxes", "4"}, nil, "--warm-pool 5 is above --max-sandboxes 4"},
		{[]string{"--max-sandboxes-per-tenant", "-1"}, nil, "--max-sandboxes-per-tenant -1 is negative"},
		{[]string{"--warm-pool", "-2"}, nil, "--warm-pool -2 is negative"},
		{[]string{"--default-disk", "20g"}, nil, "--default-disk is above --max-disk"},
		{[]string{"--io-disk", "1m"}, nil, "at least 16MiB"},
		{[]string{"--idle-ttl", "2h", "--max-idle-ttl", "1h"}, nil, "--max-idle-ttl 1h0m0s must be 0 (automatic) or at least --idle-ttl 2h0m0s"},
		{[]string{"--max-idle-ttl", "-1s"}, nil, "--max-idle-ttl -1s"},
		{[]string{"--max-watches-per-tenant", "65"}, nil, "--max-watches-per-tenant 65 exceeds --max-watches 64"},
		{[]string{"--max-watches", "8", "--max-watches-per-sandbox", "4"}, nil, "--max-watches-per-sandbox 4 exceeds --max-watches-per-tenant 2"},
		{[]string{"--max-watch-dirs-per-call", "-1"}, nil, "--max-watch-dirs-per-call -1 is negative"},
		{nil, []string{"SANDBOXD_MAX_WATCH_DIRS_PER_TENANT", "40000"}, "--max-watch-dirs-per-tenant 40000 exceeds --max-watch-dirs 32000"},
		{[]string{"--audit-max-size", "512k"}, nil, "--audit-max-size must be at least 1MiB"},
		{[]string{"--audit-max-files", "1"}, nil, "--audit-max-files at least 2"},
		{[]string{"--template-builds", "4", "--template-builds-per-tenant", "5"}, nil, "--template-builds-per-tenant 5 must be between 0 (derived) and --template-builds 4"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(append(tt.args, tt.env...), " "), func(t *testing.T) {
			kv := tt.env
			if len(kv) == 0 || kv[0] != "HOME" {
				kv = append([]string{"HOME", "/root"}, kv...)
			}
			_, err := parseConfig(tt.args, env(kv...), io.Discard)
			var ue usageError
			if !errors.As(err, &ue) {
				t.Fatalf("error = %v, want a usage error", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not mention %q", err, tt.want)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	var out strings.Builder
	_, err := parseConfig([]string{"--help"}, env("HOME", "/root"), &out)
	if !errors.Is(err, errHelp) {
		t.Fatalf("error = %v, want errHelp", err)
	}
	for _, want := range []string{"-listen", "SANDBOXD_IDLE_TTL", "-default-memory", "-auth-tokens", "-insecure", "-tls-cert",
		"-max-sandboxes-per-tenant", "-warm-pool", "-allow-network", "-default-disk", "-disk-volumes", "-max-code",
		"-max-watches", "-max-watches-per-tenant", "-max-watches-per-sandbox", "-max-watch-dirs", "-max-watch-dirs-per-tenant", "-max-watch-dirs-per-sandbox", "-max-watch-dirs-per-call"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, out.String())
		}
	}
}

func TestParseConfigMetricsAndTraces(t *testing.T) {
	c, err := parseConfig(nil, env("HOME", "/root"), io.Discard)
	if err != nil {
		t.Fatalf("parseConfig: %v", err)
	}
	if c.metricsListen != "" || c.otlpEndpoint != "" {
		t.Errorf("metrics %q, otlp %q by default, want both off", c.metricsListen, c.otlpEndpoint)
	}
	c, err = parseConfig([]string{"--metrics-listen", "127.0.0.1:9090"},
		env("HOME", "/root", "SANDBOXD_METRICS_LISTEN", "ignored:1", "SANDBOXD_OTLP_ENDPOINT", "http://127.0.0.1:4318"), io.Discard)
	if err != nil {
		t.Fatalf("parseConfig: %v", err)
	}
	if c.metricsListen != "127.0.0.1:9090" {
		t.Errorf("metrics listen = %q, want the flag's 127.0.0.1:9090", c.metricsListen)
	}
	if c.otlpEndpoint != "http://127.0.0.1:4318" {
		t.Errorf("otlp endpoint = %q, want the environment's", c.otlpEndpoint)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--metrics-listen", "9090"}, "--metrics-listen"},
		{[]string{"--otlp-endpoint", "127.0.0.1:4318"}, "--otlp-endpoint"},
		{[]string{"--otlp-endpoint", "ftp://collector"}, "--otlp-endpoint"},
	} {
		_, err := parseConfig(tt.args, env("HOME", "/root"), io.Discard)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error = %v, want a usage error about %s", tt.args, err, tt.want)
		}
	}
	var out strings.Builder
	_, _ = parseConfig([]string{"--help"}, env("HOME", "/root"), &out)
	for _, want := range []string{"-metrics-listen", "-otlp-endpoint"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage lacks %q", want)
		}
	}
}

// TestFitTenantCaps: on a single-tenant server a tenant's caps on watches
// not given are the server's; with several tenants they stay derived (a
// quarter), and --max-sandboxes without a lower per-tenant cap is warned
// about.
func TestFitTenantCaps(t *testing.T) {
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	c, err := parseConfig([]string{"--max-watch-dirs-per-tenant", "100"}, env("HOME", "/root"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	p := c.policy
	fitTenantCaps(&p, 1, log)
	if p.MaxWatchesPerTenant != 64 || p.MaxWatchDirsPerTenant != 100 || p.MaxTemplateBuildsPerTenant != 2 {
		t.Errorf("one tenant: %d watches, %d directories, %d template builds per tenant; want 64 (the server's), 100 (given), 2 (the server's)",
			p.MaxWatchesPerTenant, p.MaxWatchDirsPerTenant, p.MaxTemplateBuildsPerTenant)
	}
	p = c.policy
	p.MaxSandboxes = 10
	fitTenantCaps(&p, 2, log)
	if p.MaxWatchesPerTenant != 0 || p.MaxTemplateBuildsPerTenant != 0 || !strings.Contains(logs.String(), "one tenant can take every sandbox") {
		t.Errorf("two tenants: %d watches, %d template builds per tenant (want 0: derived); log %q", p.MaxWatchesPerTenant, p.MaxTemplateBuildsPerTenant, logs.String())
	}
	logs.Reset()
	p.MaxSandboxesPerTenant = 5
	fitTenantCaps(&p, 2, log)
	if logs.Len() != 0 {
		t.Errorf("warned with a per-tenant cap below the server's: %s", logs.String())
	}
}

func TestParseConfigPorts(t *testing.T) {
	c, err := parseConfig([]string{"--allow-network", "--ports-listen", "127.0.0.1:8090", "--ports-domain", "localhost"}, env("HOME", "/root"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.ports.listen != "127.0.0.1:8090" || c.ports.domain != "localhost" || c.ports.maxPerSandbox != 0 || c.ports.maxPerTenant != 0 || c.ports.max != 4096 || c.ports.responseTimeout != 2*time.Minute {
		t.Errorf("ports flags: %+v", c.ports)
	}
	if got := c.ports.baseURL("127.0.0.1:8090"); got != "http://127.0.0.1:8090" {
		t.Errorf("base URL %q", got)
	}
	// A tenant's cap not given: the front's with one tenant, derived (0:
	// a quarter) with several; one given stays.
	for _, tc := range []struct{ given, tenants, want int }{{0, 1, 4096}, {0, 3, 0}, {100, 1, 100}, {100, 3, 100}} {
		p := c.ports
		p.maxPerTenant = tc.given
		if p.fitTenants(tc.tenants); p.maxPerTenant != tc.want {
			t.Errorf("--ports-max-requests-per-tenant %d with %d tenants: %d; want %d", tc.given, tc.tenants, p.maxPerTenant, tc.want)
		}
	}
	c, err = parseConfig([]string{"--allow-network", "--ports-listen", ":8443", "--ports-tls-cert", "c", "--ports-tls-key", "k"},
		env("HOME", "/root", "SANDBOXD_PORTS_URL", "https://front.example.com"), io.Discard)
	if err != nil || c.ports.baseURL("[::]:8443") != "https://front.example.com" {
		t.Errorf("--ports-url from the environment: %+v, %v", c.ports, err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--ports-listen", "127.0.0.1:8090"}, "--ports-listen needs --allow-network"},
		{[]string{"--warm-pool-network", "1"}, "--warm-pool-network 1 needs --allow-network"},
		{[]string{"--allow-network", "--max-sandboxes", "3", "--warm-pool", "2", "--warm-pool-network", "2"}, "are above --max-sandboxes 3 together"},
		{[]string{"--ports-domain", "localhost"}, "need --ports-listen"},
		{[]string{"--allow-network", "--ports-listen", "8090"}, "--ports-listen \"8090\""},
		{[]string{"--allow-network", "--ports-listen", ":8090", "--ports-domain", "bad_name.com"}, "not a DNS name"},
		{[]string{"--allow-network", "--ports-listen", ":8090", "--ports-url", "127.0.0.1:8090"}, "want http:// or https://"},
		{[]string{"--allow-network", "--ports-listen", ":8090", "--ports-tls-cert", "c"}, "--ports-tls-cert and --ports-tls-key go together"},
		{[]string{"--allow-network", "--ports-listen", ":8090", "--ports-max-requests", "10", "--ports-max-requests-per-tenant", "20"}, "--ports-max-requests-per-tenant 20 is above --ports-max-requests 10"},
		{[]string{"--allow-network", "--ports-listen", ":8090", "--ports-max-requests", "10", "--ports-max-requests-per-sandbox", "5"}, "--ports-max-requests-per-sandbox 5 is above the tenant's cap"},
		{[]string{"--allow-network", "--ports-listen", ":8090", "--ports-max-requests-per-tenant", "8", "--ports-max-requests-per-sandbox", "9"}, "--ports-max-requests-per-sandbox 9 is above the tenant's cap"},
		{[]string{"--allow-network", "--ports-listen", ":8090", "--ports-response-timeout", "0s"}, "--ports-response-timeout must be positive"},
	} {
		_, err := parseConfig(tt.args, env("HOME", "/root"), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v; want %q", tt.args, err, tt.want)
		}
	}
}

// TestWarmPoolDefault: without --warm-pool, Docker keeps a small pool (what
// makes make run's acquires and wakes fast), never above --max-sandboxes;
// Kubernetes keeps none; an explicit size, 0 included, wins, also from the
// environment.
func TestWarmPoolDefault(t *testing.T) {
	token := filepath.Join(t.TempDir(), "io-token")
	if err := os.WriteFile(token, []byte("io-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		env  []string
		want int
	}{
		{nil, nil, 2},
		{[]string{"--max-sandboxes", "1"}, nil, 1},
		{[]string{"--max-sandboxes", "5"}, nil, 2},
		{[]string{"--warm-pool", "0"}, nil, 0},
		{[]string{"--warm-pool", "3"}, nil, 3},
		{nil, []string{"SANDBOXD_WARM_POOL", "0"}, 0},
		{[]string{"--warm-pool", "-1"}, nil, 2},
		{[]string{"--backend", "kubernetes", "--kube-io-token-file", token}, nil, 0},
		{[]string{"--backend", "kubernetes", "--kube-io-token-file", token, "--warm-pool", "3"}, nil, 3},
	}
	for _, tt := range tests {
		t.Run(strings.Join(append(tt.args, tt.env...), " "), func(t *testing.T) {
			c, err := parseConfig(tt.args, env(append([]string{"HOME", "/root"}, tt.env...)...), io.Discard)
			if err != nil {
				t.Fatalf("parseConfig: %v", err)
			}
			if c.policy.WarmPool != tt.want {
				t.Errorf("warm pool %d, want %d", c.policy.WarmPool, tt.want)
			}
		})
	}
}

// TestWarmPoolNetworkDefault: the pool with network keeps two with
// --allow-network, within --max-sandboxes beside --warm-pool, none when
// --warm-pool 0 turns pooling off (unless asked for), none without
// network.
func TestWarmPoolNetworkDefault(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want int
	}{
		{nil, 0},
		{[]string{"--allow-network"}, 2},
		{[]string{"--allow-network", "--warm-pool", "0"}, 0},
		{[]string{"--allow-network", "--warm-pool", "0", "--warm-pool-network", "1"}, 1},
		{[]string{"--allow-network", "--max-sandboxes", "3"}, 1},
		{[]string{"--allow-network", "--max-sandboxes", "2"}, 0},
		{[]string{"--allow-network", "--warm-pool-network", "3"}, 3},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			c, err := parseConfig(tt.args, env("HOME", "/root"), io.Discard)
			if err != nil {
				t.Fatalf("parseConfig: %v", err)
			}
			if got := c.policy.WarmPoolNetwork; got != tt.want {
				t.Errorf("warm pool with network %d, want %d", got, tt.want)
			}
		})
	}
}
