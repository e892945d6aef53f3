package ports

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
)

// Two tenants' sandboxes, all running, their ports one loopback app.
const (
	idA1 = "sb-a2a2a2a2a2a2a2a2a2a2" // tenant acme
	idA2 = "sb-a3a3a3a3a3a3a3a3a3a3" // tenant acme
	idB1 = "sb-b2b2b2b2b2b2b2b2b2b2" // tenant beta
)

// tenantWorld is a front over a fake domain of two tenants' sandboxes
// whose ports are app.
type tenantWorld struct {
	t     *testing.T
	front *core.PortsFront
	srv   *Server
	url   string
}

func newTenantWorld(t *testing.T, app http.Handler, cfg Config) *tenantWorld {
	t.Helper()
	as := httptest.NewServer(app)
	t.Cleanup(as.Close)
	addr := netip.MustParseAddrPort(as.Listener.Addr().String())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w := &tenantWorld{t: t, url: "http://" + lis.Addr().String()}
	if w.front, err = core.NewPortsFront(w.url, "sandboxes.test", []byte("0123456789abcdef0123456789abcdef")); err != nil {
		t.Fatal(err)
	}
	fake := &coretest.Manager{PortTargetFunc: func(_ context.Context, id string, _ int, _ bool) (core.PortTarget, error) {
		tenant := map[string]string{idA1: "acme", idA2: "acme", idB1: "beta"}[id]
		if tenant == "" {
			return core.PortTarget{}, core.SandboxNotFound(id)
		}
		return core.PortTarget{Tenant: tenant, State: core.StateRunning, Addr: addr}, nil
	}}
	cfg.Front = w.front
	if w.srv, err = New(fake, cfg); err != nil {
		t.Fatal(err)
	}
	hs := w.srv.HTTPServer()
	go hs.Serve(w.srv.LimitListener(lis))
	t.Cleanup(func() { hs.Close() })
	return w
}

type answer struct {
	code int
	body string
	err  error
}

// get sends GET path to port 80 of sandbox id, with its token, and
// delivers the answer on the channel it returns (within 10 s, or an
// error).
func (w *tenantWorld) get(id, path string) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest("GET", w.url+path, nil)
		req.Host = host(id)
		req.Header.Set(core.TrafficTokenHeader, w.front.Token(id))
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		res, err := c.Do(req)
		if err != nil {
			ch <- answer{err: err}
			return
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		ch <- answer{code: res.StatusCode, body: string(b), err: err}
	}()
	return ch
}

// hangingApp answers /hang only when hold is closed or the request is
// given up; each request to it is announced on arrived first.
func hangingApp(arrived chan<- string, hold <-chan struct{}) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hang" {
			arrived <- r.Host
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			}
		}
		io.WriteString(rw, "ok")
	})
}

// TestTenantCannotTakeEveryPlace: tenant acme's hung ports fill its own
// cap (two, on either of its sandboxes), not the front's (four): its next
// request is 503 naming the tenant's cap, before reaching the sandbox,
// and tenant beta's requests are still served.
func TestTenantCannotTakeEveryPlace(t *testing.T) {
	arrived := make(chan string, 8)
	hold := make(chan struct{})
	defer close(hold)
	w := newTenantWorld(t, hangingApp(arrived, hold), Config{MaxRequests: 4, MaxRequestsPerTenant: 2, MaxRequestsPerSandbox: 2})

	// acme's two hung requests: its cap.
	for range 2 {
		w.get(idA1, "/hang")
		select {
		case <-arrived:
		case <-time.After(10 * time.Second):
			t.Fatal("a hung request did not reach the app within 10 s")
		}
	}
	// Two more of acme's, to its other sandbox: refused, never reaching it.
	for range 2 {
		select {
		case a := <-w.get(idA2, "/hang"):
			if a.err != nil || a.code != 503 || !strings.Contains(a.body, "at most 2 at once per tenant (sandboxd --ports-max-requests-per-tenant)") || strings.Contains(a.body, "acme") {
				t.Fatalf("acme past its cap: %d %q, %v; want 503 naming the tenant's cap (not the tenant)", a.code, a.body, a.err)
			}
		case h := <-arrived:
			t.Fatalf("acme's request past its cap reached the app (%s): its hung ports can take every place of the front", h)
		case <-time.After(10 * time.Second):
			t.Fatal("acme's request past its cap got no answer within 10 s")
		}
	}
	// beta is served.
	if a := <-w.get(idB1, "/"); a.err != nil || a.code != 200 || a.body != "ok" {
		t.Fatalf("beta while acme is at its cap: %d %q, %v", a.code, a.body, a.err)
	}
}

// TestCapsWiden: the per-tenant cap defaults to a quarter of the front's,
// the per-sandbox one is lowered to fit it, and caps that narrow the
// wrong way are refused.
func TestCapsWiden(t *testing.T) {
	front, _ := core.NewPortsFront("http://127.0.0.1:1", "", []byte("0123456789abcdef0123456789abcdef"))
	s, err := New(&coretest.Manager{}, Config{Front: front, MaxRequests: 400})
	if err != nil || s.cfg.MaxRequestsPerTenant != 100 || s.cfg.MaxRequestsPerSandbox != 100 {
		t.Errorf("defaults under 400 in all: %+v, %v", s.cfg, err)
	}
	s, err = New(&coretest.Manager{}, Config{Front: front})
	if err != nil || s.cfg.MaxRequestsPerTenant != DefaultMaxRequests/4 || s.cfg.MaxRequestsPerSandbox != DefaultMaxRequestsPerSandbox {
		t.Errorf("defaults: %+v, %v", s.cfg, err)
	}
	for _, c := range []Config{{MaxRequests: 10, MaxRequestsPerTenant: 11}, {MaxRequestsPerTenant: 5, MaxRequestsPerSandbox: 6}, {MaxRequestsPerTenant: -1}} {
		c.Front = front
		if _, err := New(&coretest.Manager{}, c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// TestHungPortTimesOut: a port that accepts a request and never answers
// is answered 504 once ResponseTimeout has passed, naming it, and its
// place is free again.
func TestHungPortTimesOut(t *testing.T) {
	arrived := make(chan string, 8)
	hold := make(chan struct{})
	defer close(hold)
	const timeout = 300 * time.Millisecond
	w := newTenantWorld(t, hangingApp(arrived, hold), Config{ResponseTimeout: timeout})
	start := time.Now()
	var a answer
	select {
	case a = <-w.get(idA1, "/hang"):
	case <-time.After(15 * time.Second):
		t.Fatal("the hung request had no answer after 15 s: waiting for a port has no deadline")
	}
	took := time.Since(start)
	if a.err != nil || a.code != 504 || !strings.Contains(a.body, "port 80 of sandbox "+idA1+" did not answer within 300ms (sandboxd --ports-response-timeout)") {
		t.Fatalf("a hung port: %d %q, %v", a.code, a.body, a.err)
	}
	if took < timeout {
		t.Errorf("answered after %v, before the deadline of %v", took, timeout)
	}
	deadline := time.Now().Add(5 * time.Second)
	for w.srv.caps.inProgress(idA1) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the hung request's place was not freed within 5 s of its 504")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// A port that answers in time is served as before.
	if a := <-w.get(idA1, "/"); a.err != nil || a.code != 200 {
		t.Errorf("a port answering at once: %d %q, %v", a.code, a.body, a.err)
	}
}
