package e2bapi_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/sandboxdproc"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// The SDK versions the Makefile's e2b-sdk-tools installs (E2B_SDK_VERSION,
// E2B_CI_SDK_VERSION); the suites are written against them.
const (
	sdkVersion   = "2.51.0"
	ciSDKVersion = "2.8.0"
)

// sdkDir is where e2b-sdk-tools installed the SDKs: E2B_SDK_DIR (the
// Makefile exports it), else the Makefile's default.
func sdkDir(t *testing.T) string {
	if d := os.Getenv("E2B_SDK_DIR"); d != "" {
		return d
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		testenv.Unavailable(t, "no cache directory for the E2B SDKs: %v", err)
	}
	return filepath.Join(cache, "sandboxd", "npm", "e2b-"+sdkVersion+"-ci-"+ciSDKVersion)
}

var e2bServing = regexp.MustCompile(`msg="serving the E2B API" e2b_listen=(\S+)`)

// daemon is a sandboxd the SDK suites run against.
type daemon struct {
	bin, state string
	args       []string
	proc       *sandboxdproc.Process
	portsAddr  string // the ports front's address, once started
}

// portsDomain is the ports front's domain in the suites' sandboxd
// (getHost's URLs are PORT-SANDBOXID.portsDomain; the suites dial the front
// and send that Host, so the name needs no resolver).
const portsDomain = "sandboxes.test"

var portsServing = regexp.MustCompile(`msg="serving the ports front" ports_listen=(\S+)`)

// start runs it and returns its E2B address.
func (d *daemon) start(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	proc, err := sandboxdproc.Start(ctx, sandboxdproc.Config{Binary: d.bin, Args: d.args,
		Env: append(os.Environ(), "SANDBOXD_LISTEN=", "SANDBOXD_E2B_LISTEN=")})
	if err != nil {
		t.Fatalf("starting sandboxd: %v", err)
	}
	d.proc = proc
	m := e2bServing.FindStringSubmatch(proc.Log().String())
	if m == nil {
		t.Fatalf("sandboxd did not log the E2B address:\n%s", proc.Log())
	}
	p := portsServing.FindStringSubmatch(proc.Log().String())
	if p == nil {
		t.Fatalf("sandboxd did not log the ports front's address:\n%s", proc.Log())
	}
	d.portsAddr = p[1]
	return m[1]
}

// startSandboxd runs a real sandboxd with --e2b-listen, the ports front and
// two API keys in two tenants, and returns it, its E2B address and the keys.
func startSandboxd(t *testing.T) (d *daemon, addr, key, otherKey string) {
	d, key, otherKey = newDaemon(t, "127.0.0.1:0")
	return d, d.start(t), key, otherKey
}

// newDaemon prepares a sandboxd serving E2B on e2bAddr (stopped and
// cleaned up when t ends), and returns it with its two API keys.
func newDaemon(t *testing.T, e2bAddr string) (d *daemon, key, otherKey string) {
	t.Helper()
	image := testenv.NeedDocker(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := sandboxdproc.Build(ctx, dir, sandboxdproc.Package)
	if err != nil {
		t.Fatal(err)
	}
	key, otherKey = "e2b_"+randHex(t), "e2b_"+randHex(t)
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte(fmt.Sprintf("%s acme user\n%s beta user\n", key, otherKey)), 0o600); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	args := []string{"--listen", "127.0.0.1:0", "--e2b-listen", e2bAddr, "--auth-tokens", tokens,
		"--state-dir", state, "--image", image, "--default-memory", "512MiB", "--shutdown-timeout", "5s",
		"--metrics-sample-interval", "1s"} // getMetrics' test waits for samples
	if rt := os.Getenv("SANDBOXD_E2E_RUNTIME"); rt != "" {
		args = append(args, "--runtime", rt)
	}
	// Networked sandboxes (network.test.mjs) under either runtime (runsc's
	// run under runsc-net), on network objects of this sandboxd's own.
	egress, err := sandboxdproc.NewEgressNet('s', netip.MustParsePrefix("100.124.0.0/16"))
	if err != nil {
		t.Fatal(err)
	}
	args = append(append(args, "--allow-network", "--ports-listen", "127.0.0.1:0", "--ports-domain", portsDomain), egress.Flags()...)
	d = &daemon{bin: bin, state: state, args: args}
	t.Cleanup(func() {
		if err := egress.Remove(); err != nil { // after sandboxd and its containers: cleanups run last first
			t.Logf("removing sandboxd's network objects: %v", err)
		}
	})
	t.Cleanup(func() {
		if d.proc != nil {
			if err := d.proc.Stop(10 * time.Second); err != nil {
				t.Logf("stopping sandboxd: %v", err)
			}
			if t.Failed() {
				t.Logf("sandboxd's log:\n%s", d.proc.Log())
			}
		}
		cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer ccancel()
		if err := sandboxdproc.Cleanup(cctx, state); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	return d, key, otherKey
}

func randHex(t *testing.T) string {
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// tapResult is one test of node's TAP output.
type tapResult struct {
	name string
	ok   bool
	why  string
	skip bool // ok, skipped (# SKIP: why says why)
}

var tapLine = regexp.MustCompile(`^(\s*)(not ok|ok) \d+ - (.*?)(?: # (SKIP|TODO).*)?$`)

// parseTAP returns the leaf tests of node --test's TAP output (suites are
// reported as tests too; a suite is a line followed by deeper lines, which
// is told by indentation).
func parseTAP(out []byte) []tapResult {
	type line struct {
		indent int
		r      tapResult
	}
	var lines []line
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var last *tapResult
	errNext := false // the line after "error: |-" holds the message
	for sc.Scan() {
		text := sc.Text()
		m := tapLine.FindStringSubmatch(text)
		if m == nil {
			switch {
			case last == nil || last.ok || last.why != "":
			case errNext:
				last.why = strings.TrimSpace(text)
				errNext = false
			case strings.Contains(text, "error: "):
				why := strings.TrimSpace(strings.SplitN(text, "error: ", 2)[1])
				if why == "|-" || why == "|" || why == ">-" {
					errNext = true
				} else {
					last.why = strings.Trim(why, `'"`)
				}
			}
			continue
		}
		errNext = false
		r := tapResult{name: m[3], ok: m[2] == "ok"}
		if m[4] == "SKIP" {
			r.skip, r.why = true, strings.TrimSpace(strings.SplitN(text, "# SKIP", 2)[1])
		}
		lines = append(lines, line{indent: len(m[1]), r: r})
		last = &lines[len(lines)-1].r
	}
	// TAP prints children before their parent, at a deeper indentation: a
	// line is a suite if the line before it is deeper.
	var leaves []tapResult
	for i, l := range lines {
		if i > 0 && lines[i-1].indent > l.indent {
			continue
		}
		leaves = append(leaves, l.r)
	}
	return leaves
}

// TestSDK runs the suites in sdktest/ (node --test, the official SDKs,
// unmodified) against a real sandboxd: scenarios.test.mjs must pass in
// full; the ports of the SDKs' own tests (ported_*.test.mjs) report their
// counts, and fail the test only for cases not listed in knownFailures.
func TestSDK(t *testing.T) {
	node, dir := needSDK(t)
	d, addr, key, other := startSandboxd(t)
	files, err := filepath.Glob("sdktest/*.test.mjs")
	if err != nil || len(files) == 0 {
		t.Fatalf("no suites in sdktest/: %v", err)
	}
	var total, failed int
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".test.mjs")
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=tap", f)
			cmd.Env = append(os.Environ(), "E2B_SDK_DIR="+dir, "E2B_API_URL=http://"+addr, "E2B_SANDBOX_URL=http://"+addr,
				"E2B_VOLUME_API_URL=http://"+addr, // the volume content API (volumes.test.mjs)
				"E2B_API_KEY="+key, "E2B_API_KEY_OTHER="+other, "E2B_DEBUG=", "E2B_DOMAIN=", "SANDBOXD_PORTS_ADDR="+d.portsAddr)
			out, err := cmd.CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("%s did not finish within 15 minutes:\n%s", f, out)
			}
			results := parseTAP(out)
			if len(results) == 0 {
				t.Fatalf("no test results from %s (%v):\n%s", f, err, out)
			}
			pass := 0
			for _, r := range results {
				switch {
				case r.ok && r.skip:
					pass++
					t.Logf("skipped %s: %s", r.name, r.why)
				case r.ok:
					pass++
				case knownFailures[name+"/"+r.name] != "":
					t.Logf("known failure %s: %s (%s)", r.name, knownFailures[name+"/"+r.name], r.why)
				default:
					t.Errorf("FAIL %s: %s", r.name, r.why)
				}
			}
			total += len(results)
			failed += len(results) - pass
			t.Logf("e2b sdk %s: %d passed, %d failed", name, pass, len(results)-pass)
			if t.Failed() {
				t.Logf("node output:\n%s", out)
			}
		})
	}
	summary := fmt.Sprintf("e2b sdk: %d passed, %d failed", total-failed, failed)
	t.Log(summary)
	if path := os.Getenv("SANDBOXD_SUITE_SUMMARY"); path != "" {
		if f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintln(f, summary)
			f.Close()
		}
	}
}

// needSDK returns node and the SDKs' directory, or skips (fails under
// CI=true) without them or Docker.
func needSDK(t *testing.T) (node, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Unavailable(t, "node is not installed (needed for the E2B SDK suites)")
	}
	dir = sdkDir(t)
	for _, pkg := range []string{"e2b", "@e2b/code-interpreter"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
			testenv.Unavailable(t, "the E2B SDK %s is not installed in %s (run `make e2b-sdk-tools`)", pkg, dir)
		}
	}
	testenv.NeedDocker(t)
	return node, dir
}

// TestSDKAcrossRestart: work started through the SDK survives a sandboxd
// restart. A background command started before is reattached by its pid
// after, its output whole and once, the command run once, the
// interpreter's state kept, the same access secret in force.
func TestSDKAcrossRestart(t *testing.T) {
	node, dir := needSDK(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e2bAddr := lis.Addr().String()
	lis.Close() // sandboxd binds it next; the same address after the restart
	d, key, _ := newDaemon(t, e2bAddr)
	d.start(t)
	run := func(args ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, node, append([]string{"sdktest/restart.mjs"}, args...)...)
		cmd.Env = append(os.Environ(), "E2B_SDK_DIR="+dir, "E2B_API_URL=http://"+e2bAddr, "E2B_SANDBOX_URL=http://"+e2bAddr,
			"E2B_API_KEY="+key, "E2B_DEBUG=", "E2B_DOMAIN=")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("restart.mjs %s: %v\n%s%s", args[0], err, out, stderr.String())
		}
		return strings.TrimSpace(string(out))
	}
	state := run("before")
	if err := d.proc.Stop(10 * time.Second); err != nil {
		t.Fatalf("stopping sandboxd: %v", err)
	}
	d.start(t)
	if got := run("after", state); got != "ok" {
		t.Fatalf("after the restart: %s", got)
	}
}

// knownFailures are ported SDK tests that fail against sandboxd by design,
// with why (reported, not failed). Keyed "file/test name".
var knownFailures = map[string]string{
	"ported_ci/create context with options": "the context's cwd /root is outside /workspace; sandboxd's contexts work under /workspace",
	"ported_ci/list contexts":               "sandboxd has one default context for every language (listed once, as python), not one default context per language",
	"ported_ci/get data":                    "the sandbox's Python does not pre-import pandas as pd, as E2B's template does",
	"ported_ci/bash":                        "IPython's !cmd shell escape is not Python; sandboxd runs plain Python (bash runs with language: 'bash'), and the home is /workspace",
	"ported_sdk/list directory":             "paths come back under /workspace, sandboxd's workspace, not E2B's /home/user",
}

func TestParseTAP(t *testing.T) {
	out := []byte(`TAP version 13
# Subtest: suite
    # Subtest: passes
    ok 1 - passes
      ---
      duration_ms: 1
      ...
    # Subtest: fails
    not ok 2 - fails
      ---
      error: |-
        expected 1 to equal 2
      ...
    1..2
not ok 1 - suite
# Subtest: top
ok 2 - top
# Subtest: later
ok 3 - later # SKIP no templates here
`)
	got := parseTAP(out)
	want := []tapResult{{name: "passes", ok: true}, {name: "fails", why: "expected 1 to equal 2"}, {name: "top", ok: true}, {name: "later", ok: true, skip: true, why: "no templates here"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("parseTAP = %+v, want %+v", got, want)
	}
}
