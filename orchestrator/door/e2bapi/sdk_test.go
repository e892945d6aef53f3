package e2bapi_test

import (
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

	"github.com/sandboxd/sandboxd/internal/e2bsdk"
	"github.com/sandboxd/sandboxd/internal/sandboxdproc"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

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
		"--metrics-sample-interval", "1s", // getMetrics' test waits for samples
		"--warm-pool", "0"}
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
	total, failed := e2bsdk.Run(t, node, dir, e2bsdk.Door{Addr: addr, Key: key, OtherKey: other,
		Env: []string{"SANDBOXD_PORTS_ADDR=" + d.portsAddr}}, files)
	summary := e2bsdk.Summary(total, failed)
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
	node, dir = e2bsdk.Need(t)
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
