package e2bapi

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/door/e2bapi/envdproto/process/processconnect"
	"github.com/sandboxd/sandboxd/orchestrator/door/tokens"
)

const otherKey = "e2b_fedcba9876543210fedc"

// What clients send is bounded as it is read: the door's own tests, over
// loopback, with the fake domain behind the validating layer (as the
// backends are), so that a request reaching the domain is refused there as
// it would be in sandboxd.

// hostileServer is the door over the fake domain, served on loopback with
// the door's own http.Server and listener; a running sandbox of tenant
// acme is there; testKey is acme's API key, otherKey beta's. Its limits
// are the door's defaults but for cfg's.
func hostileServer(t *testing.T, cfg Config) (srv *httptest.Server, s *Server, sandboxID string) {
	t.Helper()
	toks, err := tokens.Parse(strings.NewReader(testKey + " acme user\n" + otherKey + " beta user\n"))
	if err != nil {
		t.Fatal(err)
	}
	fm := &uploadManager{fakeManager: fakeManager{sandboxes: map[string]core.Sandbox{}}}
	cfg.Tokens, cfg.Secret = toks, []byte("0123456789abcdef0123456789abcdef")
	s, err = New(core.Validating(fm, core.DefaultPolicy()), cfg)
	if err != nil {
		t.Fatal(err)
	}
	sandboxID = "sb-ffffffffffffffffffff"
	fm.sandboxes[sandboxID] = core.Sandbox{ID: sandboxID, Tenant: "acme", State: core.StateRunning}
	srv = httptest.NewUnstartedServer(s)
	srv.Config = s.HTTPServer()
	srv.Listener = s.LimitListener(srv.Listener)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, s, sandboxID
}

// uploadManager is the fake domain with uploads, which read the body,
// safe for concurrent use.
type uploadManager struct {
	fakeManager
	mu sync.Mutex
}

func (u *uploadManager) Get(ctx context.Context, id string) (core.Sandbox, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.fakeManager.Get(ctx, id)
}

func (u *uploadManager) Acquire(ctx context.Context, user string, opts core.Options) (core.AcquireResult, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.fakeManager.Acquire(ctx, user, opts)
}

func (u *uploadManager) Upload(ctx context.Context, sandboxID, path string, body io.Reader) (core.FileInfo, error) {
	n, err := io.Copy(io.Discard, body)
	return core.FileInfo{Path: path, Size: n}, err
}

// envFlood is an /execute body just under the door's 8 MiB cap: code "1"
// and as many empty env_vars as fit (about 650,000).
func envFlood() []byte {
	var b bytes.Buffer
	b.WriteString(`{"code":"1","env_vars":{`)
	for i := 0; b.Len() < maxExecuteBody-32; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k%d":""`, i)
	}
	b.WriteString(`}}`)
	return b.Bytes()
}

// memDuring runs f and returns the bytes allocated meanwhile (the whole
// process's: the server's and the test's clients') and the peak growth of
// the heap in use, sampled every millisecond.
func memDuring(f func()) (allocated, peak uint64) {
	runtime.GC()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)
	stop, done := make(chan struct{}), make(chan uint64)
	go func() {
		var top uint64
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			top = max(top, m.HeapInuse)
			select {
			case <-stop:
				done <- top
				return
			case <-t.C:
			}
		}
	}()
	f()
	close(stop)
	top := <-done
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)
	if top > m0.HeapInuse {
		peak = top - m0.HeapInuse
	}
	return m1.TotalAlloc - m0.TotalAlloc, peak
}

// Eight concurrent /execute of a tenant, each an 8 MiB body of ~650,000
// env names: each is refused (400) once the 257th name is read, and
// serving them costs less memory than holding the eight bodies once
// (64 MiB); before, each body was decoded whole into a map of 650,000
// names (~60 MB each) before the 256-variable cap applied.
func TestExecuteEnvFloodIsBounded(t *testing.T) {
	srv, s, id := hostileServer(t, Config{})
	body := envFlood()
	const clients = 8
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: clients}}
	defer client.CloseIdleConnections()
	statuses := make([]string, clients)
	allocated, peak := memDuring(func() {
		var wg sync.WaitGroup
		for i := range clients {
			wg.Go(func() {
				req, _ := http.NewRequest("POST", srv.URL+"/execute", bytes.NewReader(body))
				req.Header.Set("E2b-Sandbox-Id", id)
				req.Header.Set("E2b-Sandbox-Port", InterpreterPort)
				req.Header.Set("X-Access-Token", s.accessToken(id))
				resp, err := client.Do(req)
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
	})
	t.Logf("%d × %.1f MiB /execute bodies of env names: %d MiB allocated, heap in use peaked %d MiB above its start", clients, float64(len(body))/(1<<20), allocated>>20, peak>>20)
	for i, st := range statuses {
		if !strings.HasPrefix(st, "400 ") || !strings.Contains(st, "256") {
			t.Errorf("request %d: %s; want 400 naming the limit of 256 variables", i, st)
		}
	}
	const bound = clients * maxExecuteBody
	if allocated > bound {
		t.Errorf("serving them allocated %d MiB; the bound is %d MiB (the bodies' own size)", allocated>>20, bound>>20)
	}
}

// The same flood through envd's Process.Start (Connect, JSON as the SDK
// sends it): refused before the map is built.
func TestProcessStartEnvFloodIsBounded(t *testing.T) {
	srv, s, id := hostileServer(t, Config{})
	var b bytes.Buffer
	b.WriteString(`{"process":{"cmd":"/bin/bash","args":["-l","-c","true"],"envs":{`)
	for i := 0; b.Len() < maxRPCBody-32; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k%d":""`, i)
	}
	b.WriteString(`}}}`)
	body := b.Bytes()
	// A server-streaming call: one enveloped message.
	env := append([]byte{0, byte(len(body) >> 24), byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}, body...)
	var status string
	allocated, _ := memDuring(func() {
		req, _ := http.NewRequest("POST", srv.URL+processconnect.ProcessStartProcedure, bytes.NewReader(env))
		req.Header.Set("Content-Type", "application/connect+json")
		req.Header.Set("E2b-Sandbox-Id", id)
		req.Header.Set("E2b-Sandbox-Port", EnvdPort)
		req.Header.Set("X-Access-Token", s.accessToken(id))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			status = err.Error()
			return
		}
		out, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		status = fmt.Sprintf("%d %q", resp.StatusCode, out)
	})
	t.Logf("a %.1f MiB Process.Start of env names: %d MiB allocated; %s", float64(len(body))/(1<<20), allocated>>20, status)
	if !strings.Contains(status, "invalid_argument") && !strings.Contains(status, "resource_exhausted") {
		t.Errorf("answer %s; want an invalid_argument or resource_exhausted end of stream", status)
	}
	// connect reads the message into a buffer that grows to twice its size
	// (its copies allocated on the way): a few times the message, far
	// below what the map of 650,000 names cost before (149 MiB).
	if allocated > 5*maxRPCBody {
		t.Errorf("serving it allocated %d MiB; the bound is %d MiB (five times the message)", allocated>>20, 5*maxRPCBody>>20)
	}
}

// A create whose metadata has more entries than any sandbox may have is
// refused as it is read.
func TestCreateMetadataFloodIsRefused(t *testing.T) {
	srv, _, _ := hostileServer(t, Config{})
	var b bytes.Buffer
	b.WriteString(`{"templateID":"base","metadata":{`)
	for i := 0; b.Len() < maxControlBody-32; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k%d":""`, i)
	}
	b.WriteString(`}}`)
	req, _ := http.NewRequest("POST", srv.URL+"/sandboxes", &b)
	req.Header.Set("X-API-KEY", testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(msg), "metadata") {
		t.Errorf("%s %s; want 400 about the metadata", resp.Status, msg)
	}
}

// silentPost sends a POST's headers (Content-Length 1000) and then
// nothing, and returns the response read within wait, how long it took,
// and whether the server then closed the connection within wait.
func silentPost(t *testing.T, srv *httptest.Server, path string, header map[string]string, wait time.Duration) (*http.Response, time.Duration, bool) {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var req bytes.Buffer
	fmt.Fprintf(&req, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n", path)
	for k, v := range header {
		fmt.Fprintf(&req, "%s: %s\r\n", k, v)
	}
	req.WriteString("\r\n")
	// The clock starts before the headers go: the server's deadline
	// starts once it has them, so took is never less than it (taken after
	// Write, a preempted client saw 299 ms of a 300 ms deadline).
	start := time.Now()
	if _, err := conn.Write(req.Bytes()); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(start.Add(wait))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("POST %s with a silent body: no response within %v: %v", path, wait, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	conn.SetReadDeadline(time.Now().Add(wait))
	_, err = br.Read(make([]byte, 1))
	return resp, took, errors.Is(err, io.EOF)
}

// A client that sends a POST's headers without an API key and then nothing
// gets its 401 at once and is disconnected; so is one with a wrong access
// token to a sandbox.
func TestSilentBodyRefusedAtOnce(t *testing.T) {
	srv, s, id := hostileServer(t, Config{BodyTimeout: time.Hour})
	for _, c := range []struct {
		what, path string
		header     map[string]string
	}{
		{"no API key", "/sandboxes", nil},
		{"a wrong API key", "/v2/sandboxes", map[string]string{"X-API-KEY": "e2b_wrong_wrong_wrong_wrong"}},
		{"a wrong access token", "/execute", map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": InterpreterPort, "X-Access-Token": s.accessToken("sb-0000000000000000000a")}},
		{"an unknown path", "/nope", nil},
	} {
		resp, took, closed := silentPost(t, srv, c.path, c.header, 5*time.Second)
		t.Logf("%s: %s after %v, closed %v", c.what, resp.Status, took, closed)
		if resp.StatusCode < 400 || took > 3*time.Second || !closed {
			t.Errorf("%s: %s after %v, connection closed: %v; want a refusal at once, and the connection closed", c.what, resp.Status, took, closed)
		}
	}
}

// An authorized client whose body does not come is cut off at the body's
// deadline, on the control plane and on a sandbox.
func TestSilentBodyCutAtDeadline(t *testing.T) {
	const deadline = 300 * time.Millisecond
	srv, s, id := hostileServer(t, Config{BodyTimeout: deadline})
	for _, c := range []struct {
		what, path string
		header     map[string]string
	}{
		{"create", "/sandboxes", map[string]string{"X-API-KEY": testKey}},
		{"execute", "/execute", map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": InterpreterPort, "X-Access-Token": s.accessToken(id)}},
		{"upload", "/files?path=a.txt", map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": EnvdPort, "X-Access-Token": s.accessToken(id), "Content-Type": "application/octet-stream"}},
	} {
		resp, took, closed := silentPost(t, srv, c.path, c.header, 10*time.Second)
		t.Logf("%s: %s after %v, closed %v", c.what, resp.Status, took, closed)
		if resp.StatusCode < 400 || took < deadline || took > deadline+5*time.Second || !closed {
			t.Errorf("%s: %s after %v, connection closed: %v; want an error after the %v deadline, and the connection closed", c.what, resp.Status, took, closed, deadline)
		}
	}
}

// Many silent clients, anonymous and authorized, do not stop a real client
// from being served.
func TestSilentClientsDoNotStopOthers(t *testing.T) {
	srv, s, id := hostileServer(t, Config{BodyTimeout: time.Minute})
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	var answered atomic.Int32
	hold := func(header string, length int) {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s\r\n", "/execute", length, header)
		go func() {
			conn.SetReadDeadline(time.Now().Add(time.Minute))
			if _, err := http.ReadResponse(bufio.NewReader(conn), nil); err == nil {
				answered.Add(1)
			}
		}()
	}
	sandbox := fmt.Sprintf("E2b-Sandbox-Id: %s\r\nE2b-Sandbox-Port: %s\r\nX-Access-Token: %s\r\n", id, InterpreterPort, s.accessToken(id))
	for range 100 {
		hold("", 1000) // anonymous: answered and closed at once
	}
	for range 20 {
		hold(sandbox, maxExecuteBody) // the tenant's own, holding its places
	}
	for end := time.Now().Add(10 * time.Second); answered.Load() < 100; {
		if time.Now().After(end) {
			t.Fatalf("%d of the 100 anonymous silent clients answered within 10 s", answered.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Another tenant's client, and the silent tenant's own with a small
	// body, create sandboxes at once (the fake domain is instant).
	for _, key := range []string{otherKey, testKey} {
		start := time.Now()
		req, _ := http.NewRequest("POST", srv.URL+"/sandboxes", strings.NewReader(`{"templateID":"base"}`))
		req.Header.Set("X-API-KEY", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated || time.Since(start) > 5*time.Second {
			t.Errorf("a real client among silent ones: %s after %v", resp.Status, time.Since(start))
		}
	}
}

// A body is done with once it is decoded: it is read to its end, also
// past the object, so its place among the bodies being read is given back
// and its deadline lifted while the execution streams on. Three executions
// of one tenant with bodies over 64 KiB (two places per tenant) all start,
// and their streams outlive the deadline.
func TestExecuteStreamOutlivesBodyDeadline(t *testing.T) {
	const deadline = 200 * time.Millisecond
	s, fm := newTestServer(t)
	base, err := New(fm, Config{Tokens: s.tokens, Secret: s.secret, BodyTimeout: deadline})
	if err != nil {
		t.Fatal(err)
	}
	em := &execManager{fakeManager: *fm, release: make(chan struct{}), interrupted: make(chan string, 3)}
	base.m = em
	id := "sb-eeeeeeeeeeeeeeeeeeee"
	em.sandboxes[id] = core.Sandbox{ID: id, Tenant: "acme", State: core.StateRunning}
	srv := httptest.NewUnstartedServer(base)
	srv.Config = base.HTTPServer()
	srv.Start()
	defer srv.Close()
	// 100 KiB of white space after the object, which decoding it need not
	// read: the body is read to its end all the same.
	body := `{"code":"x"}` + strings.Repeat(" ", 100<<10)
	type stream struct {
		resp *http.Response
		br   *bufio.Reader
	}
	var streams []stream
	for range 3 {
		req, _ := http.NewRequest("POST", srv.URL+"/execute", strings.NewReader(body))
		req.Header.Set("E2b-Sandbox-Id", id)
		req.Header.Set("E2b-Sandbox-Port", InterpreterPort)
		req.Header.Set("X-Access-Token", base.accessToken(id))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		if line, err := br.ReadString('\n'); resp.StatusCode != http.StatusOK || err != nil || !strings.Contains(line, "stdout") {
			t.Fatalf("execution %d: %s, first line %q, %v", len(streams)+1, resp.Status, line, err)
		}
		streams = append(streams, stream{resp, br})
	}
	time.Sleep(3 * deadline) // the commands run past the bodies' deadline
	close(em.release)
	for i, st := range streams {
		rest, err := io.ReadAll(st.br)
		if err != nil || !strings.Contains(string(rest), "end_of_execution") {
			t.Errorf("execution %d after the deadline: %q, %v", i+1, rest, err)
		}
	}
	select {
	case id := <-em.interrupted:
		t.Errorf("%s was interrupted: its request was cancelled", id)
	default:
	}
}
