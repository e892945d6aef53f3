package e2e

// A body past its cap, against the real sandboxd's E2B door: a 20 MiB
// create or connect declared so (Content-Length, Expect: 100-continue, as
// curl sends it) is answered 413 naming the cap, never 100 Continue;
// eight concurrent /execute bodies of 8 MiB and a little more, sent whole
// (declared or chunked) before anything is read, as the SDKs send them,
// each read their 413 rather than a reset connection, and sandboxd's peak
// RSS stays within what the tenant's two places hold. Before, each was asked
// for (100 Continue), read to the cap, and the connection closed on the
// rest: curl reported status 100, the SDKs a network error.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/httpguard/guardtest"
	"github.com/sandboxd/sandboxd/internal/sandboxdproc"
)

func TestBodyCapsAnswered(t *testing.T) {
	env := needE2E(t)
	dir := t.TempDir()
	key := "e2b_" + strings.Repeat("5b", 20)
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte(key+" acme user\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--listen", "127.0.0.1:0", "--e2b-listen", "127.0.0.1:0", "--auth-tokens", tokens, "--warm-pool", "0",
		"--state-dir", env.stateDir, "--image", env.image, "--default-memory", "512MiB", "--shutdown-timeout", "5s"}
	if env.runtime != "" {
		args = append(args, "--runtime", env.runtime)
	}
	proc, err := sandboxdproc.Start(context.Background(), sandboxdproc.Config{Binary: env.sandboxd, Args: args,
		Env: append(os.Environ(), "SANDBOXD_LISTEN=", "SANDBOXD_E2B_LISTEN=")})
	if err != nil {
		t.Fatalf("starting sandboxd: %v", err)
	}
	t.Cleanup(func() {
		proc.Kill()
		if t.Failed() {
			t.Logf("sandboxd log:\n%s", proc.Log())
		}
	})
	m := e2bServingLine.FindStringSubmatch(proc.Log().String())
	if m == nil {
		t.Fatalf("sandboxd did not log the E2B address:\n%s", proc.Log())
	}
	s := &httpSuite{t: t, proc: proc, grpcAddr: proc.Addr, e2bURL: "http://" + m[1], key: key}
	s.createSandbox()

	const controlCap, executeCap = 256 << 10, 8 << 20
	api := http.Header{"X-Api-Key": {key}, "Content-Type": {"application/json"}}
	for _, path := range []string{"/sandboxes", "/sandboxes/" + s.sandboxID + "/connect"} {
		q := guardtest.Request{URL: s.e2bURL + path, Header: api, Size: 20 << 20, Prefix: `{"metadata":{"a":"`}
		guardtest.CheckRefused(t, "POST "+path+", declared", guardtest.Declared(t, q, 10*time.Second), controlCap, true)
		guardtest.CheckRefused(t, "POST "+path+", sent whole", guardtest.Sent(t, q, time.Minute), controlCap, false)
	}

	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", proc.Cmd().Process.Pid), []byte("5"), 0); err != nil {
		t.Fatalf("resetting sandboxd's peak RSS: %v", err)
	}
	start := s.rss(t, "VmRSS")
	header := http.Header{"E2b-Sandbox-Id": {s.sandboxID}, "E2b-Sandbox-Port": {"49999"},
		"X-Access-Token": {s.token}, "Content-Type": {"application/json"}}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			q := guardtest.Request{URL: s.e2bURL + "/execute", Header: header, Size: executeCap + 64, Prefix: `{"code":"`}
			switch i % 3 {
			case 0:
				guardtest.CheckRefused(t, fmt.Sprint("/execute, declared ", i), guardtest.Declared(t, q, 10*time.Second), executeCap, true)
			case 1:
				guardtest.CheckRefused(t, fmt.Sprint("/execute, sent whole ", i), guardtest.Sent(t, q, time.Minute), executeCap, false)
			default:
				q.Chunked = true
				guardtest.CheckRefused(t, fmt.Sprint("/execute, chunked ", i), guardtest.Sent(t, q, time.Minute), executeCap, false)
			}
		})
	}
	wg.Wait()
	grew := s.rss(t, "VmHWM") - start
	t.Logf("8 concurrent /execute bodies of 8 MiB + 64 B: peak RSS %+d MiB from %d MiB", grew>>20, start>>20)
	// The bodies sent are read two at a time (the tenant's places), each
	// held as its code string and the decoder's buffer of up to twice it
	// (3 × 8 MiB); as much again for the collector's lag.
	const bound = 2 * 2 * 3 * executeCap
	if grew >= bound {
		t.Errorf("sandboxd's RSS peaked %d MiB above its start; the bound is %d MiB", grew>>20, bound>>20)
	}
	if out := s.runCode(t, "print(6 * 7)"); !strings.Contains(out, `"text":"42\n"`) {
		t.Errorf("after the bodies, a real client's run: %s", out)
	}
	if err := proc.Stop(30 * time.Second); err != nil {
		t.Errorf("stopping sandboxd: %v", err)
	}
}
