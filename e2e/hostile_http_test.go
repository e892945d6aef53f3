package e2e

// The hostile-HTTP suite: what a client of sandboxd's HTTP door (the
// E2B-compatible API, --e2b-listen) can do to the service by what it sends,
// or does not send, over the wire, against the real sandboxd binary run
// with a limit of 256 descriptors (as a small deployment might have):
//
//   - env-flood: eight concurrent /execute with the sandbox's access token,
//     each an 8 MiB body of ~650,000 env_vars names: each answered 400 and
//     sandboxd's peak RSS (VmHWM, reset for the case) grows by less than
//     the eight bodies' size, 64 MiB (the bodies are refused at their
//     257th name, not decoded whole: +464–508 MiB before);
//   - silent-bodies: 300 connections sending `POST /sandboxes` with
//     Content-Length 1000 and no API key, then nothing: each answered 401
//     at once and disconnected (before, the 401 waited for the body, and
//     they stayed open);
//   - silent-connections: 300 connections that send nothing at all, held
//     open: the E2B door holds at most half of the descriptors, the rest
//     wait in the kernel's backlog.
//
// Throughout every case, a new gRPC connection's health check must answer
// within 5 s (before, with 300 connections held, it timed out: sandboxd
// had no descriptor left to accept it), and after it a real E2B client
// runs code. The suite reports one line, e.g.
//
//	hostile-HTTP suite: 3 cases, 0 harmed the service; env-flood +1 MiB peak RSS (from 41 MiB); 300 silent bodies answered 401 in ≤ 2009.9 ms; 300 silent connections held; a new connection's health check ≤ 36.4 ms during the cases
//
// (The slowest 401 waits behind the 128 connections the door holds at
// once under 256 descriptors, each closed a second and a half after its
// refusal.) Before the fixes: env-flood +562 MiB, no 401 within 30 s, and
// health checks timed out in every case.
//
// It runs under the default runtime only: nothing in it reaches a
// sandbox's interior.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sandboxd/sandboxd/internal/sandboxdproc"
)

// Bounds of the hostile-HTTP suite.
const (
	// httpFloodRSSBound: sandboxd's RSS may grow by less than the eight
	// 8 MiB bodies it is sent.
	httpFloodRSSBound = 64 << 20
	// httpSilent is the number of silent connections of a case (more than
	// the 256 descriptors sandboxd has).
	httpSilent = 300
	// httpNoFile is sandboxd's descriptor limit in the suite.
	httpNoFile = 256
	// httpHealthBound: a new gRPC connection's health check answers
	// within it, whatever the case does.
	httpHealthBound = 5 * time.Second
)

var e2bServingLine = regexp.MustCompile(`msg="serving the E2B API" e2b_listen=(\S+)`)

// httpSuite is the suite's run.
type httpSuite struct {
	t         *testing.T
	proc      *sandboxdproc.Process
	grpcAddr  string
	e2bURL    string
	key       string
	sandboxID string
	token     string
	notes     []string
	healthMax time.Duration
	mu        sync.Mutex
}

func TestHostileHTTP(t *testing.T) {
	env := needE2E(t)
	dir := t.TempDir()
	key := "e2b_" + strings.Repeat("5a", 20)
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte(key+" acme user\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--listen", "127.0.0.1:0", "--e2b-listen", "127.0.0.1:0", "--auth-tokens", tokens, "--warm-pool", "0",
		"--state-dir", env.stateDir, "--image", env.image, "--default-memory", "512MiB", "--shutdown-timeout", "5s"}
	if env.runtime != "" {
		args = append(args, "--runtime", env.runtime)
	}
	// sh sets the limit (soft and hard: the Go runtime cannot raise it)
	// and becomes sandboxd, with the same pid.
	proc, err := sandboxdproc.Start(context.Background(), sandboxdproc.Config{
		Binary: "/bin/sh",
		Args:   append([]string{"-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, httpNoFile), env.sandboxd}, args...),
		Env:    append(os.Environ(), "SANDBOXD_LISTEN=", "SANDBOXD_E2B_LISTEN="),
	})
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
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", proc.Cmd().Process.Pid)); err == nil && !regexp.MustCompile(fmt.Sprintf(`Max open files\s+%d\s`, httpNoFile)).Match(b) {
		t.Fatalf("sandboxd's descriptor limit is not %d:\n%s", httpNoFile, b)
	}
	s.createSandbox()

	var harmed []string
	run := func(name string, f func(t *testing.T)) {
		ok := t.Run(name, func(t *testing.T) {
			stop := s.probeHealth(t)
			defer stop()
			f(t)
		})
		if ok {
			// After every case, a real client runs code.
			if out := s.runCode(t, "print(6 * 7)"); !strings.Contains(out, `"text":"42\n"`) {
				t.Errorf("after %s, a real client's run: %s", name, out)
				ok = false
			}
		}
		if !ok {
			harmed = append(harmed, name)
		}
	}
	run("env-flood", s.envFlood)
	run("silent-bodies", s.silentBodies)
	run("silent-connections", s.silentConnections)
	which := ""
	if len(harmed) > 0 {
		which = " (" + strings.Join(harmed, ", ") + ")"
	}
	reportSummary(t, "hostile-HTTP suite: 3 cases, %d harmed the service%s; %s; a new connection's health check ≤ %s during the cases",
		len(harmed), which, strings.Join(s.notes, "; "), fmtMS(s.healthMax))
	if err := proc.Stop(30 * time.Second); err != nil {
		t.Errorf("stopping sandboxd after the suite: %v", err)
	}
}

func (s *httpSuite) note(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notes = append(s.notes, fmt.Sprintf(format, args...))
}

// createSandbox creates the sandbox the cases use, through the E2B API.
func (s *httpSuite) createSandbox() {
	t := s.t
	req, _ := http.NewRequest("POST", s.e2bURL+"/sandboxes", strings.NewReader(`{"templateID":"base"}`))
	req.Header.Set("X-API-KEY", s.key)
	resp, err := (&http.Client{Timeout: 3 * time.Minute}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var created struct {
		SandboxID       string `json:"sandboxID"`
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	if resp.StatusCode != http.StatusCreated || json.NewDecoder(resp.Body).Decode(&created) != nil {
		t.Fatalf("creating a sandbox through the E2B API: %s", resp.Status)
	}
	s.sandboxID, s.token = created.SandboxID, created.EnvdAccessToken
}

// execute is an /execute request of the suite's sandbox.
func (s *httpSuite) execute(body io.Reader) *http.Request {
	req, _ := http.NewRequest("POST", s.e2bURL+"/execute", body)
	req.Header.Set("E2b-Sandbox-Id", s.sandboxID)
	req.Header.Set("E2b-Sandbox-Port", "49999")
	req.Header.Set("X-Access-Token", s.token)
	req.Header.Set("Content-Type", "application/json")
	return req
}

// runCode runs code through /execute and returns the NDJSON answer.
func (s *httpSuite) runCode(t *testing.T, code string) string {
	b, _ := json.Marshal(map[string]string{"code": code})
	resp, err := (&http.Client{Timeout: time.Minute}).Do(s.execute(bytes.NewReader(b)))
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.Status + " " + string(out)
}

// probeHealth checks, every 200 ms until stop, that a new gRPC connection's
// health check answers within httpHealthBound.
func (s *httpSuite) probeHealth(t *testing.T) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		for {
			start := time.Now()
			err := s.healthCheck()
			took := time.Since(start)
			s.mu.Lock()
			s.healthMax = max(s.healthMax, took)
			s.mu.Unlock()
			if err != nil {
				t.Errorf("a new connection's health check failed after %v: %v", took, err)
			}
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond): // the probe's pace
			}
		}
	}()
	return func() { close(done); <-finished }
}

func (s *httpSuite) healthCheck() error {
	ctx, cancel := context.WithTimeout(context.Background(), httpHealthBound)
	defer cancel()
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	res, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err == nil && res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		err = fmt.Errorf("status %v", res.GetStatus())
	}
	return err
}

// rss reads a memory figure (VmRSS, VmHWM) of sandboxd, in bytes.
func (s *httpSuite) rss(t *testing.T, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.proc.Cmd().Process.Pid))
	if err != nil {
		t.Fatalf("reading sandboxd's /proc status: %v", err)
	}
	m := regexp.MustCompile(field + `:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("sandboxd's /proc status has no %s line", field)
	}
	var kb int64
	fmt.Sscan(string(m[1]), &kb)
	return kb << 10
}

func (s *httpSuite) envFlood(t *testing.T) {
	var b bytes.Buffer
	b.WriteString(`{"code":"1","env_vars":{`)
	for i := 0; b.Len() < 8<<20-32; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k%d":""`, i)
	}
	b.WriteString(`}}`)
	body := b.Bytes()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", s.proc.Cmd().Process.Pid), []byte("5"), 0); err != nil {
		t.Fatalf("resetting sandboxd's peak RSS: %v", err)
	}
	start := s.rss(t, "VmRSS")
	statuses := make([]string, 8)
	var wg sync.WaitGroup
	for i := range statuses {
		wg.Go(func() {
			resp, err := (&http.Client{Timeout: time.Minute}).Do(s.execute(bytes.NewReader(body)))
			if err != nil {
				statuses[i] = err.Error()
				return
			}
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
			resp.Body.Close()
			statuses[i] = fmt.Sprintf("%d %s", resp.StatusCode, bytes.TrimSpace(msg))
		})
	}
	wg.Wait()
	grew := s.rss(t, "VmHWM") - start
	s.note("env-flood %+d MiB peak RSS (from %d MiB)", grew>>20, start>>20)
	t.Logf("8 × %.1f MiB /execute bodies of env names: peak RSS %+d MiB from %d MiB; answers %q", float64(len(body))/(1<<20), grew>>20, start>>20, statuses)
	for i, st := range statuses {
		if !strings.HasPrefix(st, "400 ") || !strings.Contains(st, "256") {
			t.Errorf("request %d: %s; want 400 naming the limit of 256 variables", i, st)
		}
	}
	if grew >= httpFloodRSSBound {
		t.Errorf("sandboxd's RSS peaked %d MiB above its start; the bound is %d MiB (the eight bodies' size)", grew>>20, httpFloodRSSBound>>20)
	}
}

func (s *httpSuite) silentBodies(t *testing.T) {
	addr := strings.TrimPrefix(s.e2bURL, "http://")
	type result struct {
		status string
		took   time.Duration
		closed bool
	}
	results := make([]result, httpSilent)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			conn, err := net.DialTimeout("tcp", addr, 30*time.Second)
			if err != nil {
				results[i].status = err.Error()
				return
			}
			defer conn.Close()
			start := time.Now()
			fmt.Fprintf(conn, "POST /sandboxes HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n", addr)
			conn.SetReadDeadline(start.Add(30 * time.Second))
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				results[i].status = err.Error()
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			results[i].status, results[i].took = resp.Status, time.Since(start)
			_, err = br.Read(make([]byte, 1))
			results[i].closed = err == io.EOF
		})
	}
	wg.Wait()
	var slowest time.Duration
	bad := 0
	for _, r := range results {
		slowest = max(slowest, r.took)
		if !strings.HasPrefix(r.status, "401") || !r.closed || r.took > 10*time.Second {
			if bad++; bad <= 3 {
				t.Errorf("a silent body without a key: %s after %v, connection closed: %v; want 401 at once, and closed", r.status, r.took, r.closed)
			}
		}
	}
	s.note("%d silent bodies answered 401 in ≤ %s", httpSilent-bad, fmtMS(slowest))
	if bad > 0 {
		t.Errorf("%d of %d silent bodies were not refused at once and disconnected", bad, httpSilent)
	}
}

func (s *httpSuite) silentConnections(t *testing.T) {
	addr := strings.TrimPrefix(s.e2bURL, "http://")
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range httpSilent {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatalf("connecting: %v", err)
		}
		conns = append(conns, c)
	}
	// Held for a few health checks (the probe runs every 200 ms), less than
	// the header timeout (10 s) that ends them.
	for range 5 {
		if err := s.healthCheck(); err != nil {
			t.Errorf("a health check with %d connections held: %v", httpSilent, err)
		}
	}
	s.note("%d silent connections held", httpSilent)
}
