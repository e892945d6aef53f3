package main

import (
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "sandboxd.toml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConfigFilePrecedence: flags beat SANDBOXD_* variables, which beat
// the file, which beats the defaults; --config beats SANDBOXD_CONFIG.
func TestConfigFilePrecedence(t *testing.T) {
	file := writeConfig(t, `
[server]
listen = "127.0.0.1:7000"   # the flag wins
log_level = "debug"         # the file wins

[hibernation]
idle_ttl = "7m"             # the variable wins
hibernated_ttl = "48h"      # the file wins

[limits]
max_memory = "2GiB"
default_cpus = 0.5
max_pids = 1000

[egress]
allow_network = true
default_allow = ["pypi.org", "*.example.com"]

[pool]
size = 0
`)
	c, err := parseConfig([]string{"--config", file, "--listen", "127.0.0.1:6000"},
		env("HOME", "/root", "SANDBOXD_IDLE_TTL", "5m", "SANDBOXD_LISTEN", "127.0.0.1:6500", "SANDBOXD_MAX_PIDS", "2000"), io.Discard)
	if err != nil {
		t.Fatalf("parseConfig: %v", err)
	}
	for _, ch := range []struct {
		name      string
		got, want any
	}{
		{"listen (flag beats env and file)", c.listen, "127.0.0.1:6000"},
		{"idle ttl (env beats file)", c.policy.IdleTTL, 5 * time.Minute},
		{"max pids (env beats file)", c.policy.MaxLimits.PidsLimit, int64(2000)},
		{"log level (file)", c.logLevel.Level, slog.LevelDebug},
		{"hibernated ttl (file)", c.policy.HibernatedTTL, 48 * time.Hour},
		{"max memory (file)", c.policy.MaxLimits.MemoryBytes, int64(2 << 30)},
		{"default cpus (file)", c.policy.DefaultLimits.NanoCPUs, int64(5e8)},
		{"network (file)", c.policy.AllowNetwork, true},
		{"default allow (file)", strings.Join(c.policy.EgressDefault.AllowOut, ","), "pypi.org,*.example.com"},
		{"warm pool 0 (file)", c.policy.WarmPool, 0},
		{"default memory (default)", c.policy.DefaultLimits.MemoryBytes, int64(1 << 30)},
		{"image (default)", c.policy.Image, "sandboxd-sandbox:latest"},
	} {
		if !reflect.DeepEqual(ch.got, ch.want) {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}

	// SANDBOXD_CONFIG names the file when --config does not.
	other := writeConfig(t, "[server]\nlisten = \"127.0.0.1:7100\"\n")
	c, err = parseConfig(nil, env("HOME", "/root", "SANDBOXD_CONFIG", other), io.Discard)
	if err != nil || c.listen != "127.0.0.1:7100" {
		t.Errorf("SANDBOXD_CONFIG: listen %q, %v; want the file's 127.0.0.1:7100", c.listen, err)
	}
	c, err = parseConfig([]string{"--config", file}, env("HOME", "/root", "SANDBOXD_CONFIG", other), io.Discard)
	if err != nil || c.listen != "127.0.0.1:7000" {
		t.Errorf("--config and SANDBOXD_CONFIG: listen %q, %v; want --config's 127.0.0.1:7000", c.listen, err)
	}
}

// TestConfigDefaultRoundTrip: sandboxd config default passes config check
// and, loaded, gives exactly the defaults.
func TestConfigDefaultRoundTrip(t *testing.T) {
	var out strings.Builder
	if err := configCommand([]string{"default"}, env(), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	file := writeConfig(t, out.String())
	if ps := checkConfigFile(file, env("HOME", "/root")); ps != nil {
		t.Fatalf("config check of config default:\n%v", ps)
	}
	want, err := parseConfig(nil, env("HOME", "/root"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseConfig([]string{"--config", file}, env("HOME", "/root"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("config default, loaded:\n%+v\nwant the defaults:\n%+v", got, want)
	}
	// Every setting is in it, once.
	for _, sec := range defaultTable().sections {
		for _, st := range sec.settings {
			if n := strings.Count(out.String(), "\n"+st.key+" = "); n < 1 {
				t.Errorf("config default lacks %s", st.path())
			}
		}
	}
	var sb strings.Builder
	if err := configCommand([]string{"check", file}, env("HOME", "/root"), &sb, io.Discard); err != nil || !strings.Contains(sb.String(), "valid") {
		t.Errorf("config check: %v, %q", err, sb.String())
	}
}

// TestConfigCheckNamesEveryProblem: config check names every bad key and
// value at its line, not just the first, and exits non-zero.
func TestConfigCheckNamesEveryProblem(t *testing.T) {
	file := writeConfig(t, `[server]
listen = "127.0.0.1:50051"
log_format = "xml"
bogus = 1

[limits]
default_memory = "9g"
max_memory = "8g"
max_pids = "4096"
max-cpus = 2
default_cpus = "lots"

[hibernation]
idle_ttl = "soon"
on_idle = 3

[nothing]
a = 1

[audit]
max_size = "lots"
`)
	var stderr strings.Builder
	err := configCommand([]string{"check", file}, env("HOME", "/root"), io.Discard, &stderr)
	if err == nil {
		t.Fatal("config check of a bad file: no error")
	}
	got := stderr.String()
	for _, want := range []string{
		`:3: server.log_format "xml": want text or json`,
		`:4: unknown key server.bogus`,
		`:7: limits.default_memory is above limits.max_memory`,
		`:9: limits.max_pids: want integer, got string "4096"`,
		`:10: unknown key limits.max-cpus; did you mean limits.max_cpus (--max-cpus)?`,
		`:11: limits.default_cpus: want number, got string "lots"`,
		`:14: hibernation.idle_ttl = "soon": invalid value "soon": want duration string`,
		`:15: hibernation.on_idle: want string, got integer 3`,
		`:17: unknown section [nothing]`,
		`:21: audit.max_size = "lots": invalid size`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("config check does not say %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "\n"); n != 10 {
		t.Errorf("%d problems, want 10:\n%s", n, got)
	}
	// sandboxd refuses to start with the same file, naming the same.
	_, err = parseConfig([]string{"--config", file}, env("HOME", "/root"), io.Discard)
	var ue usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "unknown key server.bogus") || !strings.Contains(err.Error(), "limits.default_memory is above") {
		t.Errorf("start with a bad file: %v", err)
	}
}

// TestConfigFileOddInput: whatever the file holds, the answer is an
// error naming it, never a panic or a silent default.
func TestConfigFileOddInput(t *testing.T) {
	for _, tt := range []struct{ text, want string }{
		{"[server]\nlisten = \n", ":2: not valid TOML"},
		{"listen = \"x\"\n", ":1: unknown key listen: every setting belongs to a section; did you mean server.listen"},
		{"server = 1\n", ":1: server: want a table ([server]), got integer 1"},
		{"[[server]]\nlisten = \"x\"\n", ":1: server: want a table"},
		{"[server.tls]\ncert = \"x\"\n", ":1: unknown key server.tls"},
		{"server = { listen = \"127.0.0.1:1\", bogus = true }\n", ":1: unknown key server.bogus"},
		{"[server]\nshutdown_timeout = 1979-05-27T07:32:00Z\n", ":2: server.shutdown_timeout: want duration string"},
		{"[limits]\nmax_pids = 99999999999999999999\n", ":2: not valid TOML"},
		{"[egress]\ndefault_allow = [1, 2]\n", ":2: egress.default_allow: want array of strings, got array"},
		{"[egress]\nallow_network = true\ndefault_allow = [\"not a destination!\"]\n", ":3: egress.default_allow"},
		{"[pool]\nsize = 5\n[sandboxes]\nmax_sandboxes = 4\n", ":2: pool.size 5 is above sandboxes.max_sandboxes 4"},
		{"[server]\nlisten = \"a\"\n[server]\nlisten = \"b\"\n", "not valid TOML"},
		{"\x00\xff", "not valid TOML"},
	} {
		file := writeConfig(t, tt.text)
		ps := checkConfigFile(file, env("HOME", "/root"))
		if !strings.Contains(ps.Error(), tt.want) {
			t.Errorf("%q: %v; want %q", tt.text, ps, tt.want)
		}
	}
	if ps := checkConfigFile(filepath.Join(t.TempDir(), "none.toml"), env()); ps == nil || !strings.Contains(ps.Error(), "no such file") {
		t.Errorf("a missing file: %v", ps)
	}
}

// TestSettingsTable: every flag but --config has exactly one key, every
// key one flag, keys are snake_case, and each has help.
func TestSettingsTable(t *testing.T) {
	_, fs, r := newConfig(io.Discard)
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		if r.byFlag[f.Name] == nil {
			t.Errorf("--%s has no key in the configuration file", f.Name)
		}
	})
	key := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	m := 0
	for _, sec := range r.sections {
		if !key.MatchString(sec.name) || sec.doc == "" {
			t.Errorf("section %q: want a snake_case name and a doc", sec.name)
		}
		for _, st := range sec.settings {
			m++
			if !key.MatchString(st.key) || len(st.flag.Usage) < 10 {
				t.Errorf("%s: want a snake_case key and help", st.path())
			}
		}
	}
	if n != m || n < 100 {
		t.Errorf("%d flags, %d keys; want one key per flag (and over 100 of them)", n, m)
	}
}

// TestConfigurationDocGenerated: docs/configuration.md's reference is the
// one the settings table generates (go generate ./cmd/sandboxd), and it
// names every flag sandboxd --help lists but --config.
func TestConfigurationDocGenerated(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "configuration.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := spliceReference(doc)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != string(doc) {
		t.Errorf("%s's reference is not the settings table's: run go generate ./cmd/sandboxd", path)
	}
	var out strings.Builder
	if _, err := parseConfig([]string{"--help"}, env("HOME", "/root"), &out); !errors.Is(err, errHelp) {
		t.Fatalf("--help: %v", err)
	}
	flags := regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`).FindAllStringSubmatch(out.String(), -1)
	if len(flags) < 100 {
		t.Fatalf("found %d flags in --help; the pattern no longer matches its layout:\n%s", len(flags), out.String())
	}
	for _, f := range flags {
		if f[1] != "config" && !strings.Contains(string(doc), "| `--"+f[1]+"`, ") {
			t.Errorf("--%s has no row in %s", f[1], path)
		}
	}
}
