package ports

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
)

const (
	idA     = "sb-aaaaaaaaaaaaaaaaaaaa" // private, running
	idPub   = "sb-pppppppppppppppppppp" // public, running
	idSleep = "sb-ssssssssssssssssssss" // hibernated until woken
	idDead  = "sb-dddddddddddddddddddd"
	idNone  = "sb-nnnnnnnnnnnnnnnnnnnn" // does not exist
)

// world is a front over the fake domain, whose sandboxes' ports are one
// loopback server (app) standing in for the servers inside sandboxes.
type world struct {
	t      *testing.T
	front  *core.PortsFront
	srv    *Server
	url    string // the front's address, http://127.0.0.1:P
	app    *httptest.Server
	woken  atomic.Bool
	wakes  atomic.Int32
	usedBy sync.Map // sandbox ID → bool: PortTarget's token argument last seen
}

func newWorld(t *testing.T, app http.Handler, configure ...func(*Config)) *world {
	t.Helper()
	w := &world{t: t, app: httptest.NewServer(app)}
	t.Cleanup(w.app.Close)
	appAddr := netip.MustParseAddrPort(w.app.Listener.Addr().String())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w.url = "http://" + lis.Addr().String()
	w.front, err = core.NewPortsFront(w.url, "sandboxes.test", []byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	fake := &coretest.Manager{
		PortTargetFunc: func(ctx context.Context, id string, port int, token bool) (core.PortTarget, error) {
			if c, _ := core.CallerFrom(ctx); !c.Admin {
				t.Errorf("PortTarget asked as %+v; want the admin caller", c)
			}
			w.usedBy.Store(id, token)
			addr := netip.AddrPortFrom(appAddr.Addr(), appAddr.Port())
			if port != 80 { // the test's "other port": nothing listens there
				addr = netip.AddrPortFrom(appAddr.Addr(), uint16(port))
			}
			switch id {
			case idA:
				return core.PortTarget{Tenant: "acme", State: core.StateRunning, Addr: addr}, nil
			case idPub:
				return core.PortTarget{Tenant: "acme", State: core.StateRunning, Public: true, Addr: addr}, nil
			case idSleep:
				if w.woken.Load() {
					return core.PortTarget{Tenant: "beta", State: core.StateRunning, Addr: addr}, nil
				}
				return core.PortTarget{Tenant: "beta", State: core.StateHibernated}, nil
			case idDead:
				return core.PortTarget{Tenant: "acme", State: core.StateDead, StateReason: "container exited with code 137"}, nil
			}
			return core.PortTarget{}, core.SandboxNotFound(id)
		},
		WakeFunc: func(ctx context.Context, id string) (core.Sandbox, *core.WakeInfo, error) {
			if c, _ := core.CallerFrom(ctx); c != (core.Caller{Tenant: "beta", Name: CallerName}) {
				t.Errorf("Wake asked as %+v; want the sandbox's tenant, named as the front (for the audit trail)", c)
			}
			w.wakes.Add(1)
			w.woken.Store(true)
			return core.Sandbox{ID: id, State: core.StateRunning}, nil, nil
		},
	}
	cfg := Config{Front: w.front, ReadyTimeout: time.Second}
	for _, f := range configure {
		f(&cfg)
	}
	w.srv, err = New(fake, cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := w.srv.HTTPServer()
	go hs.Serve(w.srv.LimitListener(lis))
	t.Cleanup(func() { hs.Close() })
	return w
}

// host is the Host form's host of port 80 of sandbox id.
func host(id string) string { return "80-" + id + ".sandboxes.test" }

// do sends a request to the front with Host host (empty: the front's own)
// and the given headers, without following redirects.
func (w *world) do(method, host, path string, headers map[string]string, body io.Reader) (*http.Response, string) {
	w.t.Helper()
	req, err := http.NewRequest(method, w.url+path, body)
	if err != nil {
		w.t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }, Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func (w *world) tok(id string) map[string]string {
	return map[string]string{core.TrafficTokenHeader: w.front.Token(id)}
}

// echoApp answers with what it received.
func echoApp() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "planted", Domain: "sandboxes.test"})
		http.SetCookie(w, &http.Cookie{Name: "app", Value: "1"})
		fmt.Fprintf(w, "path=%s query=%s host=%s xff=%s xfh=%s xfproto=%s prefix=%s token=%q e2b=%q cookie=%q\n",
			r.URL.Path, r.URL.RawQuery, r.Host, r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Forwarded-Host"),
			r.Header.Get("X-Forwarded-Proto"), r.Header.Get("X-Forwarded-Prefix"), r.Header.Get(core.TrafficTokenHeader),
			r.Header.Get(core.E2BTrafficTokenHeader), r.Header.Get("Cookie"))
	})
}

// TestAuthorisation: a private sandbox's port needs its token (either
// header); without it, or with another sandbox's, the answer is the same
// as for a sandbox that does not exist; a public sandbox needs none. Only
// an authorised request reaches the domain as one (a use).
func TestAuthorisation(t *testing.T) {
	w := newWorld(t, echoApp())
	resp, body := w.do("GET", host(idA), "/x?y=1", w.tok(idA), nil)
	if resp.StatusCode != 200 || !strings.Contains(body, "path=/x query=y=1 host="+host(idA)) || !strings.Contains(body, `token=""`) {
		t.Errorf("with the token: %d %q", resp.StatusCode, body)
	}
	if used, _ := w.usedBy.Load(idA); used != true {
		t.Error("an authorised request did not reach the domain as one")
	}
	resp, body = w.do("GET", host(idA), "/", map[string]string{core.E2BTrafficTokenHeader: w.front.Token(idA)}, nil)
	if resp.StatusCode != 200 || !strings.Contains(body, `e2b=""`) {
		t.Errorf("with E2B's header: %d %q", resp.StatusCode, body)
	}

	_, denied := w.do("GET", host(idA), "/", nil, nil)
	for _, c := range []struct {
		what string
		id   string
		hdr  map[string]string
	}{
		{"no token", idA, nil},
		{"another sandbox's token", idA, w.tok(idPub)},
		{"a malformed token", idA, map[string]string{core.TrafficTokenHeader: "x"}},
		{"an unknown sandbox", idNone, nil},
		{"an unknown sandbox, another's token", idNone, w.tok(idA)},
		{"a dead sandbox", idDead, nil},
	} {
		resp, body := w.do("GET", host(c.id), "/", c.hdr, nil)
		if resp.StatusCode != http.StatusUnauthorized || body != denied {
			t.Errorf("%s: %d %q; want 401 %q", c.what, resp.StatusCode, body, denied)
		}
	}
	if used, _ := w.usedBy.Load(idA); used != false {
		t.Error("a request without the token reached the domain as an authorised one")
	}
	if resp, body := w.do("GET", host(idNone), "/", w.tok(idNone), nil); resp.StatusCode != 404 || !strings.Contains(body, "does not exist") {
		t.Errorf("an unknown sandbox with its token: %d %q", resp.StatusCode, body)
	}
	if resp, body := w.do("GET", host(idPub), "/", nil, nil); resp.StatusCode != 200 || !strings.Contains(body, "path=/") {
		t.Errorf("a public sandbox without a token: %d %q", resp.StatusCode, body)
	}
	if resp, body := w.do("GET", host(idDead), "/", w.tok(idDead), nil); resp.StatusCode != 502 || !strings.Contains(body, "is dead: container exited with code 137") {
		t.Errorf("a dead sandbox with its token: %d %q", resp.StatusCode, body)
	}
	if resp, body := w.do("GET", "80-"+idA+".elsewhere.test", "/", w.tok(idA), nil); resp.StatusCode != 404 || !strings.Contains(body, "not a sandbox port's URL") {
		t.Errorf("a Host under another domain: %d %q", resp.StatusCode, body)
	}
}

// TestForwarding: what the sandbox's server sees: the client's address
// in X-Forwarded-For (a forged one replaced), the Host, no token in any
// carrier, no front cookie; and the front's cookie cannot be set by it.
func TestForwarding(t *testing.T) {
	w := newWorld(t, echoApp())
	hdr := w.tok(idA)
	hdr["X-Forwarded-For"] = "203.0.113.9"
	hdr["X-Forwarded-Prefix"] = "/forged"
	hdr["Cookie"] = CookieName + "=" + w.front.Token(idA) + "; app=1"
	resp, body := w.do("GET", host(idA), "/p", hdr, nil)
	for _, want := range []string{"xff=127.0.0.1 ", "xfh=" + host(idA), "xfproto=http", "prefix= ", `cookie="app=1"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the app saw %q; want %q in it", body, want)
		}
	}
	for _, c := range resp.Cookies() {
		if c.Name == CookieName {
			t.Errorf("the sandbox set the front's cookie: %v", c)
		}
	}
	if len(resp.Cookies()) != 1 {
		t.Errorf("the app's own cookie was not passed on: %v", resp.Header["Set-Cookie"])
	}
}

// TestPathForm: /sandboxes/ID/PORT/... reaches the port with the prefix
// taken off and named in X-Forwarded-Prefix; without the trailing slash it
// redirects; the token goes in a header only (no cookie is set or read).
func TestPathForm(t *testing.T) {
	w := newWorld(t, echoApp())
	prefix := "/sandboxes/" + idA + "/80"
	resp, body := w.do("GET", "", prefix+"/a/b%2Fc?q=1", w.tok(idA), nil)
	if resp.StatusCode != 200 || !strings.Contains(body, "path=/a/b/c query=q=1") || !strings.Contains(body, "prefix="+prefix+" ") {
		t.Errorf("path form: %d %q", resp.StatusCode, body)
	}
	if resp, _ := w.do("GET", "", prefix+"?q=1", nil, nil); resp.StatusCode != http.StatusPermanentRedirect || resp.Header.Get("Location") != prefix+"/?q=1" {
		t.Errorf("without the slash: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, body := w.do("GET", "", prefix+"/", map[string]string{"Cookie": CookieName + "=" + w.front.Token(idA)}, nil); resp.StatusCode != 401 {
		t.Errorf("the path form with the cookie: %d %q; want 401", resp.StatusCode, body)
	}
	if resp, body := w.do("GET", "", prefix+"/?"+QueryParam+"="+w.front.Token(idA), nil, nil); resp.StatusCode != 400 || !strings.Contains(body, "header only") {
		t.Errorf("the path form with the query parameter: %d %q", resp.StatusCode, body)
	}
	if resp, body := w.do("GET", "", "/elsewhere", nil, nil); resp.StatusCode != 404 || !strings.Contains(body, w.url+"/sandboxes/SANDBOX_ID/PORT/") {
		t.Errorf("another path: %d %q", resp.StatusCode, body)
	}
}

// TestCookieFromQuery: ?sandboxd_token=T on the Host form answers with the
// cookie (HttpOnly, SameSite=Lax, the port's host only) and a redirect
// without the parameter; the cookie then opens the port; a wrong token in
// the parameter is refused as any wrong token is.
func TestCookieFromQuery(t *testing.T) {
	w := newWorld(t, echoApp())
	tok := w.front.Token(idA)
	resp, _ := w.do("GET", host(idA), "/page?x=1&"+QueryParam+"="+tok, nil, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/page?x=1" {
		t.Fatalf("query token: %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	cs := resp.Cookies()
	if len(cs) != 1 || cs[0].Name != CookieName || cs[0].Value != tok || !cs[0].HttpOnly || cs[0].SameSite != http.SameSiteLaxMode || cs[0].Domain != "" || cs[0].Path != "/" {
		t.Fatalf("cookie %+v", cs)
	}
	resp, body := w.do("GET", host(idA), "/page?x=1", map[string]string{"Cookie": CookieName + "=planted; " + cs[0].Name + "=" + cs[0].Value}, nil)
	if resp.StatusCode != 200 || !strings.Contains(body, `cookie=""`) {
		t.Errorf("with the cookie: %d %q", resp.StatusCode, body)
	}
	if resp, _ := w.do("GET", host(idA), "/?"+QueryParam+"=nope", nil, nil); resp.StatusCode != 401 {
		t.Errorf("a wrong query token: %d", resp.StatusCode)
	}
	if resp, _ := w.do("POST", host(idA), "/?"+QueryParam+"="+tok, nil, strings.NewReader("x")); resp.StatusCode != 400 {
		t.Errorf("a query token on a POST: %d", resp.StatusCode)
	}
}

// TestWake: a request to a hibernated sandbox wakes it (as its tenant),
// waits, and is served; one without the token wakes nothing.
func TestWake(t *testing.T) {
	w := newWorld(t, echoApp())
	if resp, _ := w.do("GET", host(idSleep), "/", nil, nil); resp.StatusCode != 401 || w.wakes.Load() != 0 {
		t.Fatalf("without the token: %d, %d wakes", resp.StatusCode, w.wakes.Load())
	}
	resp, body := w.do("GET", host(idSleep), "/after", w.tok(idSleep), nil)
	if resp.StatusCode != 200 || !strings.Contains(body, "path=/after") || w.wakes.Load() != 1 {
		t.Errorf("with the token: %d %q, %d wakes", resp.StatusCode, body, w.wakes.Load())
	}
}

// TestProxyErrors: nothing listening, a body past the bound: a status
// and a fixed message, never the sandbox's address.
func TestProxyErrors(t *testing.T) {
	w := newWorld(t, echoApp(), func(c *Config) { c.MaxBodyBytes = 1000 })
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := l.Addr().(*net.TCPAddr).Port
	l.Close()
	resp, body := w.do("GET", fmt.Sprintf("%d-%s.sandboxes.test", closed, idA), "/", w.tok(idA), nil)
	if resp.StatusCode != 502 || !strings.Contains(body, fmt.Sprintf("nothing listens on port %d of sandbox %s", closed, idA)) || strings.Contains(body, fmt.Sprintf("127.0.0.1:%d", closed)) {
		t.Errorf("nothing listening: %d %q", resp.StatusCode, body)
	}
	w2 := newWorld(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			return
		}
		fmt.Fprintf(w, "read %d", n)
	}), func(c *Config) { c.MaxBodyBytes = 1000 })
	if resp, body := w2.do("POST", host(idA), "/", w2.tok(idA), strings.NewReader(strings.Repeat("x", 1000))); resp.StatusCode != 200 || body != "read 1000" {
		t.Errorf("a body at the bound: %d %q", resp.StatusCode, body)
	}
	if resp, body := w2.do("POST", host(idA), "/", w2.tok(idA), strings.NewReader(strings.Repeat("x", 5000))); resp.StatusCode != 413 {
		t.Errorf("a body past the bound: %d %q", resp.StatusCode, body)
	}
}

// TestCaps: past the requests in progress of one sandbox, the next one
// to it is 503 at once; another sandbox is served; once they end the
// sandbox is served again.
func TestCaps(t *testing.T) {
	hold := make(chan struct{})
	arrived := make(chan struct{}, 10)
	w := newWorld(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			arrived <- struct{}{}
			<-hold
		}
		fmt.Fprint(rw, "ok")
	}), func(c *Config) { c.MaxRequestsPerSandbox = 2 })
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.do("GET", host(idA), "/hold", w.tok(idA), nil)
		}()
	}
	<-arrived
	<-arrived
	resp, body := w.do("GET", host(idA), "/", w.tok(idA), nil)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "at most 2 at once") {
		t.Errorf("past the sandbox's cap: %d %q", resp.StatusCode, body)
	}
	if resp, _ := w.do("GET", host(idPub), "/", nil, nil); resp.StatusCode != 200 {
		t.Errorf("another sandbox at A's cap: %d", resp.StatusCode)
	}
	close(hold)
	wg.Wait()
	if resp, _ := w.do("GET", host(idA), "/", w.tok(idA), nil); resp.StatusCode != 200 || w.srv.caps.inProgress(idA) != 0 {
		t.Errorf("after: %d, %d in progress", resp.StatusCode, w.srv.caps.inProgress(idA))
	}
}

// TestStreams: server-sent events arrive one by one (the app sends the
// next only once the client saw the previous), a WebSocket echoes both
// ways, and HTTP/2 without TLS (prior knowledge) is served.
func TestStreams(t *testing.T) {
	next := make(chan struct{})
	w := newWorld(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/events":
			rw.Header().Set("Content-Type", "text/event-stream")
			for i := range 3 {
				fmt.Fprintf(rw, "data: %d\n\n", i)
				rw.(http.Flusher).Flush()
				if i < 2 {
					select {
					case <-next:
					case <-r.Context().Done():
						return
					}
				}
			}
		case "/ws":
			c, err := websocket.Accept(rw, r, nil)
			if err != nil {
				return
			}
			defer c.CloseNow()
			for {
				typ, b, err := c.Read(r.Context())
				if err != nil {
					return
				}
				c.Write(r.Context(), typ, append([]byte("echo "), b...))
			}
		default:
			fmt.Fprintf(rw, "proto=%s", r.Proto)
		}
	}))

	req, _ := http.NewRequest("GET", w.url+"/events", nil)
	req.Host = host(idA)
	req.Header.Set(core.TrafficTokenHeader, w.front.Token(idA))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for i := range 3 {
		line, err := br.ReadString('\n')
		if err != nil || line != fmt.Sprintf("data: %d\n", i) {
			t.Fatalf("event %d: %q, %v", i, line, err)
		}
		br.ReadString('\n')
		if i < 2 {
			next <- struct{}{}
		}
	}
	resp.Body.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	hdr := http.Header{core.TrafficTokenHeader: {w.front.Token(idA)}}
	hdr.Set("Host", host(idA))
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(w.url, "http")+"/ws", &websocket.DialOptions{HTTPHeader: hdr, Host: host(idA)})
	if err != nil {
		t.Fatalf("WebSocket: %v", err)
	}
	defer c.CloseNow()
	for _, msg := range []string{"one", "two"} {
		if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		if _, b, err := c.Read(ctx); err != nil || string(b) != "echo "+msg {
			t.Fatalf("WebSocket echo: %q, %v", b, err)
		}
	}
	if _, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(w.url, "http")+"/ws", &websocket.DialOptions{Host: host(idA)}); err == nil {
		t.Error("a WebSocket without the token was accepted")
	}

	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	h2 := &http.Client{Transport: &http.Transport{Protocols: &p}}
	req, _ = http.NewRequest("GET", w.url+"/", nil)
	req.Host = host(idA)
	req.Header.Set(core.TrafficTokenHeader, w.front.Token(idA))
	resp, err = h2.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || string(b) != "proto=HTTP/1.1" {
		t.Errorf("HTTP/2 cleartext: client saw %s, the app %q", resp.Proto, b)
	}
}

// TestSilentBody: a refused request with a body that never comes is
// answered at once (httpguard), not after the body.
func TestSilentBody(t *testing.T) {
	w := newWorld(t, echoApp())
	c, err := net.Dial("tcp", strings.TrimPrefix(w.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: %s\r\nContent-Length: 1000\r\n\r\n", host(idA))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 401") {
		t.Errorf("a silent body without the token: %q, %v", line, err)
	}
}

// TestDomainErrorClasses: what the domain refused reaches the visitor with
// the status of its class and, but for a missing sandbox (which names
// only the ID) or an unclassified failure, the domain's message; a
// feature the backend lacks (core.Unsupported) is told like a refusal,
// not as an internal error.
func TestDomainErrorClasses(t *testing.T) {
	s := &Server{log: slog.New(slog.DiscardHandler)}
	rt := route{id: "sb-x", port: 8080}
	for _, tc := range []struct {
		err    error
		status int
		msg    string
	}{
		{core.SandboxNotFound("sb-x"), http.StatusNotFound, "sandbox sb-x does not exist"},
		{core.SandboxDead("sb-x", "OOM"), http.StatusBadGateway, "sandbox sb-x is dead: OOM"},
		{core.Invalidf("port 70000"), http.StatusBadGateway, "port 70000"},
		{core.Unsupported("kubernetes", "hibernation and wake"), http.StatusBadGateway, "hibernation and wake are not supported"},
		{core.ShuttingDown(), http.StatusServiceUnavailable, "shutting down"},
		{core.ServerCapReached(3), http.StatusServiceUnavailable, "maximum of 3"},
		{errors.New("boom at /var/run"), http.StatusBadGateway, "internal error"},
	} {
		w := httptest.NewRecorder()
		s.domainError(w, httptest.NewRequest("GET", "/", nil), rt, tc.err)
		if w.Code != tc.status || !strings.Contains(w.Body.String(), tc.msg) {
			t.Errorf("%v: %d %q; want %d with %q", tc.err, w.Code, w.Body, tc.status, tc.msg)
		}
	}
}
