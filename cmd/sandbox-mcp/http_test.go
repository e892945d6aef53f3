package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The HTTP endpoint's checks and limits, in this process and without
// sandboxd: tools/call is answered by a stand-in (fakeTools) that records
// the calls that reached the MCP server, so a test can tell that a refused
// call ran nothing.

// fakeTools answers every tools/call itself, after delay, and records the
// code of each call that reached it.
type fakeTools struct {
	delay time.Duration
	mu    sync.Mutex
	ran   []string
}

func (f *fakeTools) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "tools/call" {
			return next(ctx, method, req)
		}
		p := req.GetParams().(*mcp.CallToolParamsRaw)
		f.mu.Lock()
		f.ran = append(f.ran, string(p.Arguments))
		f.mu.Unlock()
		select {
		case <-time.After(f.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ran " + p.Name}}}, nil
	}
}

// calls is the code of the calls that ran.
func (f *fakeTools) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.ran...)
}

// endpoint serves cfg (on 127.0.0.1:0 unless cfg.addr says otherwise)
// until the test ends and returns its URL and the stand-in tools.
func endpoint(t *testing.T, cfg httpConfig, delay time.Duration) (string, *fakeTools) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	svc := &service{user: "u", timeout: time.Minute, log: log}
	server := svc.newServer()
	tools := &fakeTools{delay: delay}
	server.AddReceivingMiddleware(tools.middleware)
	if cfg.addr == "" {
		cfg.addr = "127.0.0.1:0"
	}
	e, err := listenHTTP(cfg, server, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("the endpoint did not shut down within 15s")
		}
	})
	return e.URL(), tools
}

// mcpClient posts JSON-RPC messages to an endpoint as a client does, with
// the session ID from its initialize.
type mcpClient struct {
	t       *testing.T
	url     string
	header  http.Header // sent with every request
	session string
	http    http.Client
}

func newMCPClient(t *testing.T, url string, header http.Header) *mcpClient {
	return &mcpClient{t: t, url: url, header: header, http: http.Client{Timeout: 30 * time.Second}}
}

// post sends body with c's headers and extra, and returns the response
// (its body read whole).
func (c *mcpClient) post(body string, extra http.Header, host string) (*http.Response, string) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.url, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.session != "" {
		req.Header.Set("Mcp-Session-Id", c.session)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	}
	for _, h := range []http.Header{c.header, extra} {
		for k, vs := range h {
			req.Header[k] = vs
		}
	}
	if host != "" {
		req.Host = host
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("POST %s: %v", c.url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("reading the response to %.80s: %v", body, err)
	}
	return resp, string(b)
}

// initialize opens a session.
func (c *mcpClient) initialize() {
	c.t.Helper()
	resp, body := c.post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"test","version":"0"}}}`, nil, "")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Mcp-Session-Id") == "" {
		c.t.Fatalf("initialize: %s (session %q): %s", resp.Status, resp.Header.Get("Mcp-Session-Id"), body)
	}
	c.session = resp.Header.Get("Mcp-Session-Id")
	if resp, body := c.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil, ""); resp.StatusCode != http.StatusAccepted {
		c.t.Fatalf("notifications/initialized: %s: %s", resp.Status, body)
	}
}

// runCode calls run_code with code, with extra headers (and Host, when not
// empty), and returns the response.
func (c *mcpClient) runCode(code string, extra http.Header, host string) (*http.Response, string) {
	c.t.Helper()
	return c.post(fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_code","arguments":{"language":"python","code":%q}}}`, code), extra, host)
}

func origin(o string) http.Header { return http.Header{"Origin": {o}} }

// hostPort is the host:port of an endpoint URL.
func hostPort(t *testing.T, endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// A request from a foreign Origin is refused with 403 before the tool
// runs; the listen address's own origins, --allow-origin's and requests
// without an Origin work.
func TestHTTPOrigin(t *testing.T) {
	u, tools := endpoint(t, httpConfig{allowOrigins: []string{"https://App.Example:443"}}, 0)
	port := strings.TrimPrefix(hostPort(t, u), "127.0.0.1:")
	c := newMCPClient(t, u, nil)
	c.initialize()

	for _, o := range []string{"http://evil.example", "http://evil.example:" + port, "null", "http://localhost:1",
		"https://127.0.0.1:" + port, "http://app.example", "not a url"} {
		resp, body := c.runCode("print('from "+o+"')", origin(o), "")
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("Origin %q: %s, want 403 Forbidden: %s", o, resp.Status, body)
		}
	}
	if ran := tools.calls(); len(ran) != 0 {
		t.Fatalf("calls from foreign origins ran: %q", ran)
	}
	// Refused before initialize too: a foreign page gets no session.
	resp, _ := newMCPClient(t, u, origin("http://evil.example")).post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}`, nil, "")
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Mcp-Session-Id") != "" {
		t.Errorf("initialize from a foreign origin: %s (session %q), want 403 and no session", resp.Status, resp.Header.Get("Mcp-Session-Id"))
	}

	allowed := []string{"", "http://127.0.0.1:" + port, "http://localhost:" + port, "http://LOCALHOST:" + port, "http://[::1]:" + port, "https://app.example"}
	for _, o := range allowed {
		var h http.Header
		if o != "" {
			h = origin(o)
		}
		resp, body := c.runCode("print('from "+o+"')", h, "")
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, "ran run_code") {
			t.Errorf("Origin %q: %s, want 200 and the tool's result: %s", o, resp.Status, body)
		}
	}
	if ran := tools.calls(); len(ran) != len(allowed) {
		t.Errorf("%d calls ran, want %d (one per allowed origin): %q", len(ran), len(allowed), ran)
	}
}

// On loopback, a Host that is not a loopback name (DNS rebinding: a
// foreign name resolving to 127.0.0.1) is refused before the tool runs.
func TestHTTPHostRebinding(t *testing.T) {
	u, tools := endpoint(t, httpConfig{}, 0)
	port := strings.TrimPrefix(hostPort(t, u), "127.0.0.1:")
	c := newMCPClient(t, u, nil)
	c.initialize()
	resp, body := c.runCode("print('rebound')", nil, "evil.example:"+port)
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("Host evil.example:%s: %s, want 403: %s", port, resp.Status, body)
	}
	if ran := tools.calls(); len(ran) != 0 {
		t.Fatalf("a call with a foreign Host ran: %q", ran)
	}
	for _, host := range []string{"localhost:" + port, "127.0.0.1:" + port} {
		if resp, body := c.runCode("print('ok')", nil, host); resp.StatusCode != http.StatusOK {
			t.Errorf("Host %s: %s: %s", host, resp.Status, body)
		}
	}
}

const testToken = "test-token-0123456789abcdef"

func bearer(token string) http.Header { return http.Header{"Authorization": {"Bearer " + token}} }

// With a token, a request without it or with another is refused with 401
// and WWW-Authenticate: Bearer; with it, the tools work.
func TestHTTPToken(t *testing.T) {
	u, tools := endpoint(t, httpConfig{token: testToken}, 0)
	for name, h := range map[string]http.Header{
		"none":   nil,
		"wrong":  bearer(testToken + "x"),
		"prefix": bearer(testToken[:len(testToken)-1]),
		"basic":  {"Authorization": {"Basic " + testToken}},
	} {
		resp, body := newMCPClient(t, u, h).post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}`, nil, "")
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("token %s: %s, WWW-Authenticate %q; want 401 with a Bearer challenge: %s", name, resp.Status, resp.Header.Get("WWW-Authenticate"), body)
		}
		if resp.Header.Get("Mcp-Session-Id") != "" {
			t.Errorf("token %s: a session was opened", name)
		}
	}
	c := newMCPClient(t, u, bearer(testToken))
	c.initialize()
	// A session ID is no credential: the token is needed on every request.
	c.header = nil
	if resp, _ := c.runCode("print('no token')", nil, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("tools/call in a session without the token: %s, want 401", resp.Status)
	}
	if ran := tools.calls(); len(ran) != 0 {
		t.Fatalf("calls without the token ran: %q", ran)
	}
	c.header = bearer(testToken)
	if resp, body := c.runCode("print('with token')", nil, ""); resp.StatusCode != http.StatusOK || !strings.Contains(body, "ran run_code") {
		t.Errorf("tools/call with the token: %s: %s", resp.Status, body)
	}
}

// silentPost sends a POST's headers (Content-Length 1000) to the endpoint
// and then nothing, and returns the response read within wait and how long
// it took to come; an error if there was none, or if the server did not
// then close the connection within wait.
func silentPost(t *testing.T, endpoint string, extra http.Header, wait time.Duration) (*http.Response, time.Duration, error) {
	t.Helper()
	conn, err := net.Dial("tcp", hostPort(t, endpoint))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var req bytes.Buffer
	fmt.Fprintf(&req, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 1000\r\n", hostPort(t, endpoint))
	for k, vs := range extra {
		for _, v := range vs {
			fmt.Fprintf(&req, "%s: %s\r\n", k, v)
		}
	}
	req.WriteString("\r\n")
	if _, err := conn.Write(req.Bytes()); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	conn.SetReadDeadline(start.Add(wait))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("no response within %v: %w", wait, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	// The connection must end, not wait for the rest of the body.
	conn.SetReadDeadline(time.Now().Add(wait))
	if n, err := br.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		return resp, took, fmt.Errorf("after the %s response, the connection was not closed within %v (read %d bytes, %v)", resp.Status, wait, n, err)
	}
	t.Logf("%s after %v, closed %v later", resp.Status, took, time.Since(start)-took)
	return resp, took, nil
}

// A client that sends a POST's headers without the token and then nothing
// gets its 401 at once, and the connection is closed: the refusal waits
// neither for the body nor for its deadline.
func TestHTTPUnauthorizedSilentBody(t *testing.T) {
	// Waiting for the body, or for its deadline, would exceed the test's
	// bounds by far.
	u, _ := endpoint(t, httpConfig{token: testToken, limits: httpLimits{bodyTimeout: time.Hour}}, 0)
	resp, took, err := silentPost(t, u, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
		t.Errorf("%s, WWW-Authenticate %q; want 401 with a Bearer challenge", resp.Status, resp.Header.Get("WWW-Authenticate"))
	}
	if took > 3*time.Second {
		t.Errorf("the 401 came after %v: it waited for something", took)
	}
	// The same for a foreign origin's 403.
	resp, _, err = silentPost(t, u, origin("http://evil.example"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("foreign origin: %s, want 403", resp.Status)
	}
	// A client that sent its whole body reads its 401 as well (not reset).
	resp, body := newMCPClient(t, u, nil).post(`{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"`+strings.Repeat("x", 100<<10)+`"}}`, nil, "")
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a 100 KiB body without the token: %s: %s", resp.Status, body)
	}
}

// An authorized client whose body never comes is cut off by the body's
// deadline: it gets an error and the connection is closed.
func TestHTTPBodyDeadline(t *testing.T) {
	const deadline = 300 * time.Millisecond
	u, tools := endpoint(t, httpConfig{token: testToken, limits: httpLimits{bodyTimeout: deadline}}, 0)
	resp, took, err := silentPost(t, u, bearer(testToken), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode < 400 {
		t.Errorf("a silent body got %s, want an error status", resp.Status)
	}
	if took < deadline {
		t.Errorf("cut off after %v, before the body's deadline %v", took, deadline)
	}
	if ran := tools.calls(); len(ran) != 0 {
		t.Errorf("calls ran: %q", ran)
	}
}

// The body's deadline ends with the body: a tool call whose streamed
// response lasts much longer than the deadline gets its result.
func TestHTTPStreamOutlivesBodyDeadline(t *testing.T) {
	const deadline = 200 * time.Millisecond
	u, tools := endpoint(t, httpConfig{limits: httpLimits{bodyTimeout: deadline}}, 5*deadline)
	c := newMCPClient(t, u, nil)
	c.initialize()
	start := time.Now()
	resp, body := c.runCode("import time; time.sleep(1)", nil, "")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "ran run_code") {
		t.Fatalf("a call lasting %v: %s: %s", time.Since(start), resp.Status, body)
	}
	if took := time.Since(start); took < 5*deadline {
		t.Errorf("the call took %v, less than the stand-in's delay %v: the test proves nothing", took, 5*deadline)
	}
	if len(tools.calls()) != 1 {
		t.Errorf("calls: %q", tools.calls())
	}
	// The connection, kept alive, serves the next request too.
	if resp, body := c.runCode("print(1)", nil, ""); resp.StatusCode != http.StatusOK {
		t.Errorf("the next call: %s: %s", resp.Status, body)
	}
}

// Bodies are read a bounded number at a time: with one place, held by a
// silent client, another request waits briefly and gets 503; once the
// silent one is cut off, requests are served again.
func TestHTTPBodyReadsBounded(t *testing.T) {
	u, _ := endpoint(t, httpConfig{limits: httpLimits{maxBodyReads: 1, readQueueWait: 100 * time.Millisecond, bodyTimeout: 2 * time.Second}}, 0)
	held := make(chan error, 1)
	conn, err := net.Dial("tcp", hostPort(t, u))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n{", hostPort(t, u))
	go func() {
		conn.SetReadDeadline(time.Now().Add(time.Minute))
		_, err := http.ReadResponse(bufio.NewReader(conn), nil)
		held <- err
	}()
	// The silent client holds the place until its deadline: meanwhile
	// another request is refused. Until the server has taken the silent
	// request in, a request may still find the place free: poll.
	c := newMCPClient(t, u, nil)
	var got503 bool
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end) && !got503; {
		c.session = ""
		resp, body := c.post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}`, nil, "")
		switch resp.StatusCode {
		case http.StatusServiceUnavailable:
			got503 = resp.Header.Get("Retry-After") != ""
			if !got503 {
				t.Errorf("503 without Retry-After: %s", body)
			}
		case http.StatusOK:
		default:
			t.Fatalf("initialize while a body is held: %s: %s", resp.Status, body)
		}
	}
	if !got503 {
		t.Fatal("no 503 while the only place to read a body was held by a silent client")
	}
	select {
	case err := <-held:
		if err != nil {
			t.Fatalf("the silent client got no response: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the silent client was not cut off within 30s")
	}
	c.session = ""
	c.initialize()
}

// Beyond loopback the command refuses to serve without a token, and serves
// with one.
func TestHTTPBeyondLoopbackNeedsToken(t *testing.T) {
	var stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := run(ctx, []string{"--http", "0.0.0.0:0"}, func(string) string { return "" }, strings.NewReader(""), io.Discard, &stderr)
	if err == nil || !strings.Contains(err.Error(), "refusing to serve MCP on") || !strings.Contains(err.Error(), "SANDBOX_MCP_HTTP_TOKEN") {
		t.Fatalf("--http 0.0.0.0:0 without a token: %v, want a refusal naming the token", err)
	}
	err = run(ctx, []string{"--http", ":0"}, func(string) string { return "" }, strings.NewReader(""), io.Discard, &stderr)
	if err == nil || !strings.Contains(err.Error(), "refusing") {
		t.Fatalf("--http :0 without a token: %v, want a refusal", err)
	}

	// With a token (from a file), it serves; reached over loopback.
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	log := &lineWriter{t: t, lines: make(chan string, 100)}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- run(sctx, []string{"--http", "0.0.0.0:0", "--http-token-file", file}, func(string) string { return "" }, strings.NewReader(""), io.Discard, log)
	}()
	var port string
	for port == "" {
		select {
		case l := <-log.lines:
			if m := regexp.MustCompile(`url=http://\S*:(\d+)/mcp`).FindStringSubmatch(l); m != nil {
				port = m[1]
			}
		case err := <-done:
			t.Fatalf("with a token: %v", err)
		case <-ctx.Done():
			t.Fatal("not serving within 30s")
		}
	}
	u := "http://127.0.0.1:" + port + "/mcp"
	newMCPClient(t, u, bearer(testToken)).initialize()
	if resp, _ := newMCPClient(t, u, nil).post(`{"jsonrpc":"2.0","id":1,"method":"ping"}`, nil, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without the token: %s, want 401", resp.Status)
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Error("run did not return within 15s of its context's end")
	}
}

// lineWriter passes the log's lines to the test log and a channel.
type lineWriter struct {
	t     *testing.T
	mu    sync.Mutex
	lines chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.t.Log(l)
		select {
		case w.lines <- l:
		default:
		}
	}
	return len(p), nil
}

func TestHTTPTokenFlags(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, short, spaced := write("good", testToken+"\n"), write("short", "abc\n"), write("spaced", "0123456789 abcdefgh\n")
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	for _, c := range []struct {
		name    string
		args    []string
		env     func(string) string
		token   string
		wantErr string
	}{
		{"file", []string{"--http", "127.0.0.1:0", "--http-token-file", good}, env(), testToken, ""},
		{"file from env", []string{"--http", "127.0.0.1:0"}, env("SANDBOX_MCP_HTTP_TOKEN_FILE", good), testToken, ""},
		{"token from env", []string{"--http", "127.0.0.1:0"}, env("SANDBOX_MCP_HTTP_TOKEN", testToken), testToken, ""},
		{"none", []string{"--http", "127.0.0.1:0"}, env(), "", ""},
		{"stdio ignores the env", nil, env("SANDBOX_MCP_HTTP_TOKEN", testToken), "", ""},
		{"short", []string{"--http", "127.0.0.1:0", "--http-token-file", short}, env(), "", "at least 16"},
		{"white space inside", []string{"--http", "127.0.0.1:0", "--http-token-file", spaced}, env(), "", "printable ASCII"},
		{"short env", []string{"--http", "127.0.0.1:0"}, env("SANDBOX_MCP_HTTP_TOKEN", "abc"), "", "at least 16"},
		{"both", []string{"--http", "127.0.0.1:0", "--http-token-file", good}, env("SANDBOX_MCP_HTTP_TOKEN", testToken), "", "give one"},
		{"missing file", []string{"--http", "127.0.0.1:0", "--http-token-file", filepath.Join(dir, "nope")}, env(), "", "no such file"},
		{"file without --http", []string{"--http-token-file", good}, env(), "", "only with --http"},
		{"origin without --http", []string{"--allow-origin", "http://a.example"}, env(), "", "only with --http"},
	} {
		cfg, err := parseFlags(c.args, c.env, io.Discard)
		switch {
		case c.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%s: error %v, want one with %q", c.name, err, c.wantErr)
			} else if strings.Contains(err.Error(), testToken) {
				t.Errorf("%s: the error shows the token: %v", c.name, err)
			}
		case err != nil:
			t.Errorf("%s: %v", c.name, err)
		case cfg.httpToken != c.token:
			t.Errorf("%s: token %q, want %q", c.name, cfg.httpToken, c.token)
		}
	}
	// A malformed --allow-origin fails the start.
	cfg, err := parseFlags([]string{"--http", "127.0.0.1:0", "--allow-origin", "http://a.example/path"}, env(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := listenHTTP(httpConfig{addr: cfg.httpAddr, allowOrigins: cfg.allowOrigins}, nil, slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil || !strings.Contains(err.Error(), "--allow-origin") {
		t.Errorf("--allow-origin with a path: %v, want an error", err)
	}
}

func TestNormalizeOrigin(t *testing.T) {
	for in, want := range map[string]string{
		"http://Example.COM":       "http://example.com",
		"http://example.com:80":    "http://example.com",
		"https://example.com:443":  "https://example.com",
		"https://example.com:8443": "https://example.com:8443",
		"http://127.0.0.1:8080/":   "http://127.0.0.1:8080",
		"http://[::1]:8080":        "http://[::1]:8080",
		"HTTP://localhost:9":       "http://localhost:9",
		"null":                     "",
		"file://x":                 "",
		"http://a.example/path":    "",
		"http://a.example?q":       "",
		"http://u@a.example":       "",
		"http://a.example:99999":   "",
		"http://":                  "",
	} {
		got, err := normalizeOrigin(in)
		if (err != nil) != (want == "") || got != want {
			t.Errorf("normalizeOrigin(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
