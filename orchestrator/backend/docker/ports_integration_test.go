package docker

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/door/ports"
)

// portApp is a web server for a sandbox's Python kernel, on a port of
// 0.0.0.0: GET / echoes the path and what the front forwarded; /events
// streams three server-sent events, each after the client asked for it
// (/next), so that their arriving one by one proves the front flushes;
// /ws is a WebSocket echo (a raw handshake: the image has no websockets
// package); POST answers the body's length. It survives a hibernation
// at level globals: the object's pickle is its port, and unpickling it
// starts the server again in the woken kernel.
const portApp = `
class PortApp:
    def __init__(self, port):
        self.port = port
        self.start()

    def __reduce__(self):
        return (PortApp, (self.port,))

    def start(self):
        import base64, hashlib, http.server, socketserver, struct, threading
        nxt = threading.Event()

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def text(self, s):
                b = s.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(b)))
                self.end_headers()
                self.wfile.write(b)

            def do_GET(self):
                if self.path == "/events":
                    return self.events()
                if self.path == "/next":
                    nxt.set()
                    return self.text("ok")
                if self.path == "/ws":
                    return self.ws()
                self.text("hello %s prefix=%s token=%s cookie=%s" % (self.path, self.headers.get("X-Forwarded-Prefix", ""),
                          self.headers.get("Sandboxd-Traffic-Token", ""), self.headers.get("Cookie", "")))

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                self.text("got %d" % len(body))

            def events(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                for i in range(3):
                    self.wfile.write(b"data: %d\n\n" % i)
                    self.wfile.flush()
                    if i < 2:
                        nxt.wait(60)
                        nxt.clear()
                self.close_connection = True

            def ws(self):
                acc = base64.b64encode(hashlib.sha1((self.headers["Sec-WebSocket-Key"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
                self.send_response(101)
                self.send_header("Upgrade", "websocket")
                self.send_header("Connection", "Upgrade")
                self.send_header("Sec-WebSocket-Accept", acc)
                self.end_headers()
                self.wfile.flush()
                r = self.rfile
                while True:
                    h = r.read(2)
                    if len(h) < 2:
                        break
                    op, n = h[0] & 15, h[1] & 127
                    if n == 126:
                        n = struct.unpack(">H", r.read(2))[0]
                    elif n == 127:
                        n = struct.unpack(">Q", r.read(8))[0]
                    mask = r.read(4) if h[1] & 128 else b"\0\0\0\0"
                    data = bytes(b ^ mask[i % 4] for i, b in enumerate(r.read(n)))
                    if op == 8:
                        self.wfile.write(b"\x88\x00")
                        self.wfile.flush()
                        break
                    if op == 1:
                        out = b"echo " + data
                        head = bytes([0x81, len(out)]) if len(out) < 126 else bytes([0x81, 126]) + struct.pack(">H", len(out))
                        self.wfile.write(head + out)
                        self.wfile.flush()
                self.close_connection = True

        class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        srv = S(("0.0.0.0", self.port), H)
        threading.Thread(target=srv.serve_forever, daemon=True).start()

app = PortApp(8000)
print("serving")
`

// portsWorld is a real Manager with networking (its own table, bridge
// and prefix) and the ports front over it, served on loopback.
type portsWorld struct {
	m      *validated
	front  *core.PortsFront
	srv    *ports.Server
	addr   string // the front's host:port
	client *http.Client
}

func newPortsWorld(t *testing.T, runtime string, configure ...func(*ports.Config)) *portsWorld {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w := &portsWorld{addr: lis.Addr().String(),
		client: &http.Client{Timeout: 2 * time.Minute, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	if w.front, err = core.NewPortsFront("http://"+w.addr, "sandboxes.test", []byte("integration secret of 32 bytes..")); err != nil {
		t.Fatal(err)
	}
	netCfg := netTestConfig(t, nil)
	w.m, _, _ = integrationManager(t, netCfg, func(c *Config) {
		c.Runtime = runtime
		c.Ports = w.front
		if runtime == core.RuntimeGVisor {
			c.DefaultLimits.PidsLimit = 256
		}
	})
	pc := ports.Config{Front: w.front}
	for _, f := range configure {
		f(&pc)
	}
	if w.srv, err = ports.New(w.m.v, pc); err != nil {
		t.Fatal(err)
	}
	hs := w.srv.HTTPServer()
	go hs.Serve(w.srv.LimitListener(lis))
	t.Cleanup(func() { hs.Close() })
	return w
}

// get sends a request through the front to rawURL (a GetHost URL, or a
// path on the front), addressed by its Host, to the front's address.
func (w *portsWorld) get(t *testing.T, method, rawURL string, hdr map[string]string, body io.Reader) (*http.Response, string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, "http://"+w.addr+u.RequestURI(), body)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = u.Host
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := w.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, rawURL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestIntegrationPorts: a web server in a networked sandbox, under runc
// and runsc, reached through its port URL: with the token (header, or a
// cookie from the query parameter), refused without it and with another
// sandbox's, public when the policy says so; the path form; WebSocket
// echo; server-sent events one by one; HTTP/2 without TLS; a hibernated
// sandbox woken by a request; the per-sandbox cap.
func TestIntegrationPorts(t *testing.T) {
	testenv.NeedDocker(t)
	for _, rt := range netRuntimes(t) {
		t.Run(rt, func(t *testing.T) { testPorts(t, rt) })
	}
}

func testPorts(t *testing.T, runtime string) {
	w := newPortsWorld(t, runtime, func(c *ports.Config) { c.MaxRequestsPerSandbox = 3 })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	resA, err := w.m.Acquire(ctx, "ports-a", core.Options{Network: true})
	if err != nil {
		t.Fatal(err)
	}
	resP, err := w.m.Acquire(ctx, "ports-public", core.Options{NetworkPolicy: &core.NetworkPolicy{AllowPublicTraffic: true}})
	if err != nil {
		t.Fatal(err)
	}
	a, p := resA.Sandbox.ID, resP.Sandbox.ID
	if out := mustRunOK(t, w.m, a, "python", portApp); !strings.Contains(out, "serving") {
		t.Fatalf("the app did not start: %q", out)
	}
	// The public sandbox serves a file with python3 -m http.server.
	// It is up once it accepts a connection (within a minute: a loaded CI
	// machine took more than 10 s to start it).
	if out := mustRunOK(t, w.m, p, "python", `
import subprocess, pathlib
pathlib.Path("/workspace/index.html").write_text("public page\n")
subprocess.Popen(["python3", "-m", "http.server", "8001", "--bind", "0.0.0.0"], cwd="/workspace", start_new_session=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
import socket, time
deadline = time.monotonic() + 60
while True:
    try:
        socket.create_connection(("127.0.0.1", 8001), timeout=1).close(); break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.05)
print("ok")`); out != "ok\n" {
		t.Fatalf("the public sandbox's server did not start: %q", out)
	}

	h, err := w.m.GetHost(ctx, a, 8000)
	if err != nil {
		t.Fatal(err)
	}
	if want := "http://8000-" + a + ".sandboxes.test:" + strings.Split(w.addr, ":")[1] + "/"; h.URL != want || !h.TokenRequired || h.Token == "" || h.TokenHeader != core.TrafficTokenHeader {
		t.Fatalf("GetHost = %+v; want URL %s and a token", h, want)
	}
	tok := map[string]string{h.TokenHeader: h.Token}

	// The token opens the port; nothing else does, and an unknown
	// sandbox is answered as a wrong token is.
	resp, body := w.get(t, "GET", h.URL+"hi?x=1", tok, nil)
	if resp.StatusCode != 200 || body != "hello /hi?x=1 prefix= token= cookie=" {
		t.Errorf("with the token: %d %q", resp.StatusCode, body)
	}
	_, denied := w.get(t, "GET", h.URL, nil, nil)
	pTok := w.front.Token(p)
	for what, c := range map[string]struct {
		url string
		hdr map[string]string
	}{
		"no token":                {h.URL, nil},
		"another sandbox's token": {h.URL, map[string]string{core.TrafficTokenHeader: pTok}},
		"an unknown sandbox":      {"http://8000-sb-aaaaaaaaaaaaaaaaaaaa.sandboxes.test/", nil},
		"an unknown sandbox with a token of another": {"http://8000-sb-aaaaaaaaaaaaaaaaaaaa.sandboxes.test/", tok},
	} {
		resp, body := w.get(t, "GET", c.url, c.hdr, nil)
		if resp.StatusCode != http.StatusUnauthorized || body != denied {
			t.Errorf("%s: %d %q; want 401 %q", what, resp.StatusCode, body, denied)
		}
	}
	resp, body = w.get(t, "POST", h.URL+"upload", tok, strings.NewReader(strings.Repeat("x", 100_000)))
	if resp.StatusCode != 200 || body != "got 100000" {
		t.Errorf("POST: %d %q", resp.StatusCode, body)
	}

	// Public: no token needed; E2B's header works as well.
	hp, err := w.m.GetHost(ctx, p, 8001)
	if err != nil || hp.TokenRequired || hp.Token != "" {
		t.Fatalf("GetHost of the public sandbox = %+v, %v", hp, err)
	}
	if resp, body := w.get(t, "GET", hp.URL+"index.html", nil, nil); resp.StatusCode != 200 || body != "public page\n" {
		t.Errorf("public: %d %q", resp.StatusCode, body)
	}
	if resp, body := w.get(t, "GET", h.URL, map[string]string{core.E2BTrafficTokenHeader: h.Token}, nil); resp.StatusCode != 200 {
		t.Errorf("E2B's header: %d %q", resp.StatusCode, body)
	}

	// The path form: the prefix taken off, named in X-Forwarded-Prefix.
	prefix := "/sandboxes/" + a + "/8000"
	resp, body = w.get(t, "GET", "http://"+w.addr+prefix+"/deep/path", tok, nil)
	if resp.StatusCode != 200 || body != "hello /deep/path prefix="+prefix+" token= cookie=" {
		t.Errorf("path form: %d %q", resp.StatusCode, body)
	}

	// A browser: ?sandboxd_token= sets the cookie and redirects.
	resp, _ = w.get(t, "GET", h.URL+"page?"+ports.QueryParam+"="+h.Token, nil, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/page" || len(resp.Cookies()) != 1 {
		t.Fatalf("query token: %d %q %v", resp.StatusCode, resp.Header.Get("Location"), resp.Cookies())
	}
	cookie := resp.Cookies()[0]
	resp, body = w.get(t, "GET", h.URL+"page", map[string]string{"Cookie": cookie.Name + "=" + cookie.Value + "; theirs=1"}, nil)
	if resp.StatusCode != 200 || body != "hello /page prefix= token= cookie=theirs=1" {
		t.Errorf("with the cookie: %d %q", resp.StatusCode, body)
	}

	// WebSocket, through the Host form.
	wsHost := strings.TrimPrefix(strings.TrimSuffix(h.URL, "/"), "http://")
	c, _, err := websocket.Dial(ctx, "ws://"+w.addr+"/ws", &websocket.DialOptions{Host: wsHost,
		HTTPHeader: http.Header{core.TrafficTokenHeader: {h.Token}}})
	if err != nil {
		t.Fatalf("WebSocket: %v", err)
	}
	for _, msg := range []string{"one", strings.Repeat("long ", 100)} {
		if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		if _, b, err := c.Read(ctx); err != nil || string(b) != "echo "+msg {
			t.Fatalf("WebSocket echo of %d bytes: %d bytes, %v", len(msg), len(b), err)
		}
	}
	c.Close(websocket.StatusNormalClosure, "")
	if _, _, err := websocket.Dial(ctx, "ws://"+w.addr+"/ws", &websocket.DialOptions{Host: wsHost}); err == nil {
		t.Error("a WebSocket without the token was accepted")
	}

	// Server-sent events arrive one by one: the app sends the next only
	// once the client, having read the previous, asks for it.
	events := func() (*bufio.Reader, io.Closer) {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+w.addr+"/events", nil)
		req.Host = wsHost
		req.Header.Set(h.TokenHeader, h.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("events: %v %v", resp, err)
		}
		return bufio.NewReader(resp.Body), resp.Body
	}
	br, closer := events()
	for i := range 3 {
		line, err := br.ReadString('\n')
		if err != nil || line != fmt.Sprintf("data: %d\n", i) {
			t.Fatalf("event %d: %q, %v", i, line, err)
		}
		br.ReadString('\n')
		if i < 2 {
			w.get(t, "GET", h.URL+"next", tok, nil)
		}
	}
	closer.Close()

	// HTTP/2 without TLS (prior knowledge).
	var proto http.Protocols
	proto.SetUnencryptedHTTP2(true)
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+w.addr+"/h2", nil)
	req.Host = wsHost
	req.Header.Set(h.TokenHeader, h.Token)
	resp, err = (&http.Client{Transport: &http.Transport{Protocols: &proto}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || !strings.HasPrefix(string(b), "hello /h2") {
		t.Errorf("HTTP/2: %s %q", resp.Proto, b)
	}

	// The per-sandbox cap (3 here): three event streams held open, the
	// fourth request is 503 at once; the public sandbox is served.
	var held []io.Closer
	for range 3 {
		br, cl := events()
		if line, _ := br.ReadString('\n'); line != "data: 0\n" {
			t.Fatalf("held stream: %q", line)
		}
		held = append(held, cl)
	}
	if resp, body := w.get(t, "GET", h.URL, tok, nil); resp.StatusCode != 503 || !strings.Contains(body, "at most 3 at once") {
		t.Errorf("past the cap: %d %q", resp.StatusCode, body)
	}
	if resp, _ := w.get(t, "GET", hp.URL+"index.html", nil, nil); resp.StatusCode != 200 {
		t.Errorf("another sandbox while A is at its cap: %d", resp.StatusCode)
	}
	for _, cl := range held {
		cl.Close()
	}
	for range 3 { // the app's streams wait for /next: let them end
		w.get(t, "GET", h.URL+"next", tok, nil)
	}

	// Hibernated: a request wakes the sandbox and is served by the app,
	// started again as its globals came back.
	if _, err := w.m.Hibernate(ctx, a); err != nil {
		t.Fatal(err)
	}
	if sb, _ := w.m.Get(ctx, a); sb.State != core.StateHibernated {
		t.Fatalf("state after Hibernate: %s", sb.State)
	}
	if resp, _ := w.get(t, "GET", h.URL, nil, nil); resp.StatusCode != 401 {
		t.Errorf("a hibernated sandbox without the token: %d", resp.StatusCode)
	}
	if sb, _ := w.m.Get(ctx, a); sb.State != core.StateHibernated {
		t.Errorf("a request without the token woke the sandbox")
	}
	start := time.Now()
	resp, body = w.get(t, "GET", h.URL+"after-wake", tok, nil)
	t.Logf("%s: the first request to the hibernated sandbox took %v (wake included)", runtime, time.Since(start).Round(time.Millisecond))
	if resp.StatusCode != 200 || !strings.HasPrefix(body, "hello /after-wake") {
		t.Errorf("after the wake: %d %q", resp.StatusCode, body)
	}
	if sb, _ := w.m.Get(ctx, a); sb.State != core.StateRunning || sb.LastWake == nil || sb.LastWake.Level != "globals" {
		t.Errorf("the sandbox after the request: %s, wake %+v", sb.State, sb.LastWake)
	}

	// Deleted: the token holder learns it; others the same 401.
	if err := w.m.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	if resp, body := w.get(t, "GET", hp.URL, map[string]string{core.TrafficTokenHeader: pTok}, nil); resp.StatusCode != 404 || !strings.Contains(body, "does not exist") {
		t.Errorf("a deleted sandbox with its token: %d %q", resp.StatusCode, body)
	}
	if resp, body := w.get(t, "GET", hp.URL, nil, nil); resp.StatusCode != 401 || body != denied {
		t.Errorf("a deleted public sandbox without a token: %d %q", resp.StatusCode, body)
	}
}
