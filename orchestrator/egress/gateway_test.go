package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

var allowList = core.NetworkPolicy{AllowOut: []string{"www.egress.test", "ws.egress.test"}, DenyOut: []string{"0.0.0.0/0"}}

func TestHTTPAllowedName(t *testing.T) {
	e := newEnv(t, Config{Bounds: allowLoopback})
	e.attach("a", srcA, allowList)
	code, body, err := e.get(e.client(srcA, e.httpDst(), nil), fmt.Sprintf("http://www.egress.test:%d/x", e.httpPort))
	if err != nil || code != 200 || !strings.Contains(body, "hello from www.egress.test") {
		t.Fatalf("GET = %d %q, %v", code, body, err)
	}
	waitFor(t, time.Second, "counters", func() bool {
		s := e.g.Stats("a")
		return s.ConnsAllowed == 1 && s.BytesIn > 0 && s.BytesOut > 0 && s.ConnsOpen == 0
	})
}

func TestHTTPSAllowedNameIsPassedThrough(t *testing.T) {
	e := newEnv(t, Config{Bounds: allowLoopback})
	e.attach("a", srcA, allowList)
	code, body, err := e.get(e.client(srcA, e.httpsDst(), nil), fmt.Sprintf("https://www.egress.test:%d/", e.httpsPort))
	if err != nil || code != 200 {
		t.Fatalf("GET = %d %q, %v", code, body, err)
	}
	// The sandbox talked TLS with the upstream itself: its certificate,
	// not one of the sandbox's CA.
	if !strings.Contains(body, "issuer: sandboxd sandbox upstream-test") {
		t.Fatalf("not passed through: %s", body)
	}
}

func TestWebSocket(t *testing.T) {
	e := newEnv(t, Config{Bounds: allowLoopback})
	pol := allowList
	pol.AllowOut = append(slices.Clone(pol.AllowOut), "api.egress.test")
	pol.Rules = map[string]core.NetworkRule{"api.egress.test": {Headers: map[string]string{"X-Api-Key": "ws-secret-123456"}}}
	ca := e.attach("a", srcA, pol)
	for _, tc := range []struct {
		name, url string
		dst       netip.AddrPort
		key       string // the header the upstream must see
	}{
		{"ws", fmt.Sprintf("ws://ws.egress.test:%d/ws", e.httpPort), e.httpDst(), ""},
		{"wss passthrough", fmt.Sprintf("wss://ws.egress.test:%d/ws", e.httpsPort), e.httpsDst(), ""},
		{"wss with a rule", fmt.Sprintf("wss://api.egress.test:%d/ws", e.httpsPort), e.httpsDst(), "ws-secret-123456"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, _, err := websocket.Dial(ctx, tc.url, &websocket.DialOptions{HTTPClient: e.client(srcA, tc.dst, ca)})
			if err != nil {
				t.Fatal(err)
			}
			defer c.CloseNow()
			for i := range 3 {
				msg := fmt.Sprintf("echo %d", i)
				if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
					t.Fatal(err)
				}
				_, got, err := c.Read(ctx)
				if err != nil || string(got) != msg {
					t.Fatalf("echo = %q, %v", got, err)
				}
			}
			if got := e.lastSeen().Headers.Get("X-Api-Key"); got != tc.key {
				t.Fatalf("upstream saw X-Api-Key %q, want %q", got, tc.key)
			}
			c.Close(websocket.StatusNormalClosure, "")
		})
	}
}

func TestDeniedName(t *testing.T) {
	e := newEnv(t, Config{Bounds: allowLoopback})
	e.attach("a", srcA, core.NetworkPolicy{DenyOut: []string{"blocked.egress.test"}})
	code, body, err := e.get(e.client(srcA, e.httpDst(), nil), fmt.Sprintf("http://blocked.egress.test:%d/", e.httpPort))
	if err != nil || code != 403 || !strings.Contains(body, "denied by deny_out") {
		t.Fatalf("GET = %d %q, %v", code, body, err)
	}
	// Over TLS the connection is closed before any byte comes back.
	if _, _, err := e.get(e.client(srcA, e.httpsDst(), nil), fmt.Sprintf("https://blocked.egress.test:%d/", e.httpsPort)); err == nil {
		t.Fatal("TLS to a denied name succeeded")
	}
	// Another name on the same address is not denied (default allow).
	if code, _, err := e.get(e.client(srcA, e.httpDst(), nil), fmt.Sprintf("http://other.egress.test:%d/", e.httpPort)); err != nil || code != 200 {
		t.Fatalf("GET other = %d, %v", code, err)
	}
	ds := e.g.Denials("a")
	if len(ds) != 2 || ds[0].Name != "blocked.egress.test" || ds[0].Kind != "tcp" || ds[0].Reason != "denied by deny_out" || ds[0].Addr != e.httpDst() {
		t.Fatalf("denials = %+v", ds)
	}
	if s := e.g.Stats("a"); s.ConnsDenied != 2 {
		t.Fatalf("stats = %+v", s)
	}
	if n := e.seenCount(); n != 1 {
		t.Fatalf("upstream saw %d requests, want 1", n)
	}
}

func TestIPLiteralJudgedAsAddress(t *testing.T) {
	e := newEnv(t, Config{Bounds: allowLoopback})
	url := fmt.Sprintf("http://127.0.0.1:%d/", e.httpPort)
	// Allow-list of names: an IP literal carries no name; its address is
	// denied by 0.0.0.0/0.
	e.attach("a", srcA, allowList)
	code, body, err := e.get(e.client(srcA, e.httpDst(), nil), url)
	if err != nil || code != 403 || !strings.Contains(body, "address 127.0.0.1 denied by deny_out") {
		t.Fatalf("GET = %d %q, %v", code, body, err)
	}
	// Allowing the address lets it through.
	e.g.Update("a", compile(t, core.NetworkPolicy{AllowOut: []string{"127.0.0.1"}, DenyOut: []string{"0.0.0.0/0"}}))
	if code, _, err := e.get(e.client(srcA, e.httpDst(), nil), url); err != nil || code != 200 {
		t.Fatalf("GET after allowing the address = %d, %v", code, err)
	}
	// TLS without SNI (a client connecting to an IP) is judged the same.
	e.g.Update("a", compile(t, allowList))
	tc, err := e.connect(srcA, e.httpsDst())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	conn := tls.Client(tc, &tls.Config{InsecureSkipVerify: true})
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if err := conn.Handshake(); err == nil {
		t.Fatal("TLS without SNI to a denied address succeeded")
	}
	if ds := e.g.Denials("a"); len(ds) != 2 || ds[1].Name != "" || !strings.HasPrefix(ds[1].Reason, "no TLS SNI or HTTP Host") {
		t.Fatalf("denials = %+v", ds)
	}
}

func TestPrecedence(t *testing.T) {
	e := newEnv(t, Config{Bounds: allowLoopback})
	get := func(name string) int {
		code, _, err := e.get(e.client(srcA, e.httpDst(), nil), fmt.Sprintf("http://%s:%d/", name, e.httpPort))
		if err != nil {
			t.Fatal(err)
		}
		return code
	}
	for _, tc := range []struct {
		name string
		pol  core.NetworkPolicy
		host string
		want int
	}{
		{"allow beats deny", core.NetworkPolicy{AllowOut: []string{"www.egress.test"}, DenyOut: []string{"www.egress.test"}}, "www.egress.test", 200},
		{"allow-list: listed", allowList, "www.egress.test", 200},
		{"allow-list: not listed", allowList, "other.egress.test", 403},
		{"wildcard allow", core.NetworkPolicy{AllowOut: []string{"*.egress.test"}, DenyOut: []string{"0.0.0.0/0"}}, "other.egress.test", 200},
		{"wildcard deny", core.NetworkPolicy{DenyOut: []string{"*.egress.test"}}, "www.egress.test", 403},
		{"neither: allowed", core.NetworkPolicy{}, "other.egress.test", 200},
		{"name neither, its address denied", core.NetworkPolicy{DenyOut: []string{"127.0.0.1/32"}}, "other.egress.test", 403},
		{"name allowed, its address denied", core.NetworkPolicy{AllowOut: []string{"www.egress.test"}, DenyOut: []string{"127.0.0.1/32"}}, "www.egress.test", 200},
		{"allow-list by CIDR, unlisted name sent there", core.NetworkPolicy{AllowOut: []string{"127.0.0.0/8"}, DenyOut: []string{"0.0.0.0/0"}}, "other.egress.test", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.g.Attach("a", netip.MustParseAddr(srcA), compile(t, tc.pol), nil)
			if got := get(tc.host); got != tc.want {
				t.Fatalf("GET %s = %d, want %d", tc.host, got, tc.want)
			}
		})
	}
}

func TestNameIsDialledAtItsOwnAddress(t *testing.T) {
	e := newEnv(t, Config{Bounds: allowLoopback})
	e.attach("a", srcA, allowList)
	// The sandbox sends SNI www.egress.test to 127.0.0.99, where nothing
	// listens: the gateway dials the name's address, 127.0.0.1.
	decoy := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.99"), e.httpsPort)
	code, _, err := e.get(e.client(srcA, decoy, nil), fmt.Sprintf("https://www.egress.test:%d/", e.httpsPort))
	if err != nil || code != 200 {
		t.Fatalf("GET = %d, %v", code, err)
	}
	if d := e.dialedAddrs(); !slices.Equal(d, []netip.AddrPort{e.httpsDst()}) {
		t.Fatalf("dialled %v, want only %v", d, e.httpsDst())
	}
	// Likewise over HTTP: Host decides, not the address.
	decoy = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.99"), e.httpPort)
	if code, _, err := e.get(e.client(srcA, decoy, nil), fmt.Sprintf("http://www.egress.test:%d/", e.httpPort)); err != nil || code != 200 {
		t.Fatalf("GET = %d, %v", code, err)
	}
}

func TestSpecialAddressesRefused(t *testing.T) {
	// No AllowPrivate: loopback is a special range like the others.
	e := newEnv(t, Config{Bounds: Bounds{SandboxNet: netip.MustParsePrefix("127.0.0.2/31")}})
	e.attach("a", srcA, core.NetworkPolicy{})
	cl := e.client(srcA, e.httpDst(), nil)
	for _, tc := range []struct{ host, reason string }{
		{"www.egress.test", "loopback address 127.0.0.1"},
		{"private.egress.test", "private (RFC 1918) address 10.0.0.5"},
		{"meta.egress.test", "link-local address 169.254.77.2"},
		{"127.0.0.1", "loopback address 127.0.0.1"},
	} {
		code, body, err := e.get(cl, fmt.Sprintf("http://%s:%d/", tc.host, e.httpPort))
		if err != nil || code != 403 || !strings.Contains(body, tc.reason) {
			t.Errorf("GET %s = %d %q, %v; want 403 %q", tc.host, code, body, err, tc.reason)
		}
	}
	if d := e.dialedAddrs(); len(d) != 0 {
		t.Fatalf("dialled %v", d)
	}
}

func TestBoundsAboveThePolicy(t *testing.T) {
	ceiling := compile(t, core.NetworkPolicy{AllowOut: []string{"www.egress.test", "ws.egress.test", "127.0.0.0/30"}})
	e := newEnv(t, Config{
		Bounds: Bounds{
			AllowPrivate: []netip.Prefix{loopback},
			SandboxNet:   netip.MustParsePrefix("127.0.0.2/31"),
			Ceiling:      ceiling,
		},
		HostAddrs: func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("127.0.0.7")} },
	})
	e.names.set("host.egress.test", "127.0.0.7")
	e.names.set("sandbox.egress.test", "127.0.0.3")
	e.attach("a", srcA, core.NetworkPolicy{AllowOut: []string{"127.0.0.0/8", "*.egress.test"}})
	cl := e.client(srcA, e.httpDst(), nil)
	for _, tc := range []struct {
		host   string
		dst    netip.AddrPort
		want   int
		reason string
	}{
		{"www.egress.test", e.httpDst(), 200, ""},
		{"other.egress.test", e.httpDst(), 200, ""}, // not in the ceiling by name; its address (the one sent to) is
		{"host.egress.test", e.httpDst(), 200, ""},  // same: judged on 127.0.0.1, never resolved
		{"127.0.0.7", netip.AddrPortFrom(netip.MustParseAddr("127.0.0.7"), e.httpPort), 403, "the host's own address 127.0.0.7"},
		{"127.0.0.3", netip.AddrPortFrom(netip.MustParseAddr("127.0.0.3"), e.httpPort), 403, "a sandbox network address 127.0.0.3"},
		{"127.0.0.9", netip.AddrPortFrom(netip.MustParseAddr("127.0.0.9"), e.httpPort), 403, "outside the server's ceiling"},
	} {
		cl = e.client(srcA, tc.dst, nil)
		code, body, err := e.get(cl, fmt.Sprintf("http://%s:%d/", tc.host, e.httpPort))
		if err != nil || code != tc.want || !strings.Contains(body, tc.reason) {
			t.Errorf("GET %s = %d %q, %v; want %d %q", tc.host, code, body, err, tc.want, tc.reason)
		}
	}
	if n := e.names.count("host.egress.test") + e.names.count("other.egress.test"); n != 0 {
		t.Errorf("names outside the ceiling were resolved %d times", n)
	}
	// A name in the ceiling resolving to the host is refused.
	e.names.set("ws.egress.test", "127.0.0.7")
	code, body, _ := e.get(e.client(srcA, e.httpDst(), nil), fmt.Sprintf("http://ws.egress.test:%d/", e.httpPort))
	if code != 403 || !strings.Contains(body, "the host's own address") {
		t.Errorf("GET www resolving to the host = %d %q", code, body)
	}
}

// TestClusterBound: a cluster's blocks (Bounds.Cluster, the Kubernetes
// backend's --kube-egress-deny) are never dialled, even where AllowPrivate
// and the policy allow them, by address or by a name resolving there.
func TestClusterBound(t *testing.T) {
	e := newEnv(t, Config{Bounds: Bounds{AllowPrivate: []netip.Prefix{loopback}, Cluster: []netip.Prefix{netip.MustParsePrefix("127.0.0.8/29")}}})
	e.names.set("pod.egress.test", "127.0.0.9")
	e.attach("a", srcA, core.NetworkPolicy{AllowOut: []string{"127.0.0.0/8", "*.egress.test"}})
	if code, _, err := e.get(e.client(srcA, e.httpDst(), nil), fmt.Sprintf("http://www.egress.test:%d/", e.httpPort)); err != nil || code != 200 {
		t.Fatalf("GET outside the cluster's blocks = %d, %v; want 200", code, err)
	}
	for _, tc := range []struct {
		host string
		dst  netip.AddrPort
	}{
		{"127.0.0.10", netip.AddrPortFrom(netip.MustParseAddr("127.0.0.10"), e.httpPort)},
		{"pod.egress.test", e.httpDst()},
	} {
		n := len(e.dialedAddrs())
		code, body, err := e.get(e.client(srcA, tc.dst, nil), fmt.Sprintf("http://%s:%d/", tc.host, e.httpPort))
		if err != nil || code != 403 || !strings.Contains(body, "a cluster address 127.0.0.") {
			t.Errorf("GET %s = %d %q, %v; want 403, a cluster address", tc.host, code, body, err)
		}
		if len(e.dialedAddrs()) != n {
			t.Errorf("GET %s dialled %v", tc.host, e.dialedAddrs()[n:])
		}
	}
}

// TestAttachSources: a sandbox attached at several sources (the Kubernetes
// backend's gateway sees its Pod's address and 127.0.0.1) is served from
// each; attached again with fewer, the dropped one is unknown; detached,
// none is.
func TestAttachSources(t *testing.T) {
	e := newEnv(t, Config{Bounds: allowLoopback})
	pol := compile(t, core.NetworkPolicy{})
	e.g.AttachSources("a", []netip.Addr{netip.MustParseAddr(srcA), netip.MustParseAddr(srcB)}, pol, nil)
	for _, src := range []string{srcA, srcB} {
		if code, _, err := e.get(e.client(src, e.httpDst(), nil), fmt.Sprintf("http://www.egress.test:%d/", e.httpPort)); err != nil || code != 200 {
			t.Errorf("GET from %s = %d, %v; want 200", src, code, err)
		}
	}
	e.g.AttachSources("a", []netip.Addr{netip.MustParseAddr(srcA)}, pol, nil)
	if !e.refused(srcB, e.httpDst()) {
		t.Errorf("a source dropped from the sandbox's is still served")
	}
	e.g.Detach("a")
	if !e.refused(srcA, e.httpDst()) {
		t.Errorf("a detached sandbox's source is still served")
	}
}

func TestUpdateClosesOpenConnections(t *testing.T) {
	e := newEnv(t, Config{Bounds: allowLoopback})
	e.attach("a", srcA, allowList)
	// One connection by name (HTTP, kept alive), one by address.
	byName, err := e.connect(srcA, e.httpDst())
	if err != nil {
		t.Fatal(err)
	}
	defer byName.Close()
	fmt.Fprintf(byName, "GET / HTTP/1.1\r\nHost: www.egress.test\r\n\r\n")
	readResponse(t, byName)

	e.g.Update("a", compile(t, core.NetworkPolicy{AllowOut: []string{"ws.egress.test"}, DenyOut: []string{"0.0.0.0/0"}}))
	start := time.Now()
	byName.SetReadDeadline(start.Add(time.Second))
	if _, err := byName.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("read on a now-denied connection: %v (after %v)", err, time.Since(start))
	}
	t.Logf("closed %v after the update", time.Since(start))
	// A new one is refused.
	code, _, err := e.get(e.client(srcA, e.httpDst(), nil), fmt.Sprintf("http://www.egress.test:%d/", e.httpPort))
	if err != nil || code != 403 {
		t.Fatalf("GET after update = %d, %v", code, err)
	}
	// A connection the new policy still allows stays open.
	ok, err := e.connect(srcA, e.httpDst())
	if err != nil {
		t.Fatal(err)
	}
	defer ok.Close()
	fmt.Fprintf(ok, "GET / HTTP/1.1\r\nHost: ws.egress.test\r\n\r\n")
	readResponse(t, ok)
	e.g.Update("a", compile(t, core.NetworkPolicy{AllowOut: []string{"ws.egress.test", "www.egress.test"}, DenyOut: []string{"0.0.0.0/0"}}))
	fmt.Fprintf(ok, "GET /again HTTP/1.1\r\nHost: ws.egress.test\r\n\r\n")
	readResponse(t, ok)
}

func isReset(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "reset") || errors.Is(err, net.ErrClosed))
}

// readResponse reads one small response (the test server's) off c.
func readResponse(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil || !strings.HasPrefix(string(buf[:n]), "HTTP/1.1 200") {
		t.Fatalf("response %q, %v", buf[:n], err)
	}
	c.SetReadDeadline(time.Time{})
}

func TestRuleInjectsHeaders(t *testing.T) {
	const secret = "sk-test-0123456789abcdef"
	e := newEnv(t, Config{Bounds: allowLoopback})
	pol := core.NetworkPolicy{
		AllowOut: []string{"api.egress.test"},
		DenyOut:  []string{"0.0.0.0/0"},
		Rules:    map[string]core.NetworkRule{"api.egress.test": {Headers: map[string]string{"x-api-key": secret, "X-Other": "plain"}}},
	}
	ca := e.attach("a", srcA, pol)
	cl := e.client(srcA, e.httpsDst(), ca)
	url := fmt.Sprintf("https://api.egress.test:%d/v1/things?q=1", e.httpsPort)
	code, body, err := e.get(cl, url, "X-Api-Key", "the-sandbox-guess", "Host", "evil.example")
	if err != nil || code != 200 {
		t.Fatalf("GET = %d %q, %v", code, body, err)
	}
	seen := e.lastSeen()
	if got := seen.Headers.Values("X-Api-Key"); !slices.Equal(got, []string{secret}) {
		t.Fatalf("upstream saw X-Api-Key %q", got)
	}
	if seen.Headers.Get("X-Other") != "plain" || seen.Path != "/v1/things" || seen.Host != fmt.Sprintf("api.egress.test:%d", e.httpsPort) {
		t.Fatalf("upstream saw %+v", seen)
	}
	if strings.Contains(body, secret) {
		t.Fatalf("the sandbox saw the secret: %s", body)
	}
	if !strings.Contains(body, "issuer: sandboxd sandbox a") {
		t.Fatalf("not terminated with the sandbox's CA: %s", body)
	}
	// An upstream reflecting the header in its response: scrubbed.
	code, body, err = e.get(cl, fmt.Sprintf("https://api.egress.test:%d/reflect", e.httpsPort))
	if err != nil || code != 200 || strings.Contains(body, secret) || !strings.Contains(body, "[redacted by sandboxd]") {
		t.Fatalf("reflect = %d %q, %v", code, body, err)
	}
	// TRACE would echo the request: refused.
	req, _ := http.NewRequest("TRACE", url, nil)
	res, err := cl.Do(req)
	if err != nil || res.StatusCode != 405 {
		t.Fatalf("TRACE = %v, %v", res, err)
	}
	res.Body.Close()
	if s := e.g.Stats("a"); s.RuleRequests != 2 || s.ConnsAllowed != 3 {
		t.Fatalf("stats = %+v", s)
	}
	// The header values never show in what callers see either.
	if strings.Contains(fmt.Sprint(pol.Redacted()), secret) {
		t.Fatal("Redacted shows the secret")
	}
}

func TestRuleUpstreamVerified(t *testing.T) {
	// The gateway trusts only the host's roots (here: none that signed
	// the test server), so the intercepted request fails, saying why,
	// and the secret went nowhere.
	e := newEnv(t, Config{Bounds: allowLoopback, RootCAs: x509.NewCertPool()})
	pol := core.NetworkPolicy{Rules: map[string]core.NetworkRule{"api.egress.test": {Headers: map[string]string{"Authorization": "Bearer top-secret-value"}}}}
	ca := e.attach("a", srcA, pol)
	code, body, err := e.get(e.client(srcA, e.httpsDst(), ca), fmt.Sprintf("https://api.egress.test:%d/", e.httpsPort))
	if err != nil || code != 502 || !strings.Contains(body, "certificate is not trusted") || strings.Contains(body, "top-secret") {
		t.Fatalf("GET = %d %q, %v", code, body, err)
	}
	if e.seenCount() != 0 {
		t.Fatal("the upstream got a request")
	}
}

func TestRuleOverPlainHTTPIsNotApplied(t *testing.T) {
	e := newEnv(t, Config{Bounds: allowLoopback})
	pol := core.NetworkPolicy{Rules: map[string]core.NetworkRule{"api.egress.test": {Headers: map[string]string{"X-Api-Key": "never-in-clear-123"}}}}
	ca := e.attach("a", srcA, pol)
	code, _, err := e.get(e.client(srcA, e.httpDst(), ca), fmt.Sprintf("http://api.egress.test:%d/", e.httpPort), "X-Api-Key", "mine")
	if err != nil || code != 200 {
		t.Fatalf("GET = %d, %v", code, err)
	}
	if got := e.lastSeen().Headers.Get("X-Api-Key"); got != "mine" {
		t.Fatalf("upstream saw X-Api-Key %q over plain HTTP", got)
	}
	if s := e.g.Stats("a"); s.RuleRequests != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestRuleWithoutCAIsPassedThrough(t *testing.T) {
	e := newEnv(t, Config{Bounds: allowLoopback})
	pol := core.NetworkPolicy{Rules: map[string]core.NetworkRule{"api.egress.test": {Headers: map[string]string{"X-Api-Key": "k-1234567890"}}}}
	e.g.Attach("a", netip.MustParseAddr(srcA), compile(t, pol), nil)
	code, body, err := e.get(e.client(srcA, e.httpsDst(), nil), fmt.Sprintf("https://api.egress.test:%d/", e.httpsPort))
	if err != nil || code != 200 || !strings.Contains(body, "issuer: sandboxd sandbox upstream-test") {
		t.Fatalf("GET = %d %q, %v", code, body, err)
	}
	if got := e.lastSeen().Headers.Get("X-Api-Key"); got != "" {
		t.Fatalf("upstream saw X-Api-Key %q", got)
	}
}

func TestUnknownSourceDropped(t *testing.T) {
	e := newEnv(t, Config{Bounds: allowLoopback})
	e.attach("a", srcA, core.NetworkPolicy{})
	if !e.refused(srcB, e.httpDst()) {
		t.Fatal("a connection from an unknown source was not closed")
	}
	if len(e.dialedAddrs()) != 0 {
		t.Fatal("dialled for an unknown source")
	}
}

func TestServerFirstProtocol(t *testing.T) {
	// A server that speaks first (an SSH-like banner): a client that says
	// nothing is spliced by address after FirstByteTimeout.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "SSH-2.0-test\r\n")
			c.Close()
		}
	}()
	e := newEnv(t, Config{Bounds: allowLoopback, FirstByteTimeout: 100 * time.Millisecond})
	e.attach("a", srcA, core.NetworkPolicy{})
	c, err := e.connect(srcA, netip.MustParseAddrPort(l.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "SSH-2.0-test\r\n" {
		t.Fatalf("banner = %q, %v", got, err)
	}
	// Under an allow-list the same connection waits for a name for the
	// whole PeekTimeout, then is refused.
	e.g.Update("a", compile(t, allowList))
	c2, err := e.connect(srcA, netip.MustParseAddrPort(l.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	start := time.Now()
	c2.SetReadDeadline(start.Add(5 * time.Second))
	if n, _ := c2.Read(make([]byte, 1)); n != 0 || time.Since(start) < time.Second {
		t.Fatalf("read %d bytes after %v", n, time.Since(start))
	}
}

func TestPeekIsBounded(t *testing.T) {
	e := newEnv(t, Config{Bounds: allowLoopback, PeekBytes: 1024})
	e.attach("a", srcA, allowList)
	// A request head longer than PeekBytes carries no name we can read:
	// judged by address (denied by the allow-list), never buffered whole.
	c, err := e.connect(srcA, e.httpDst())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go fmt.Fprintf(c, "GET / HTTP/1.1\r\nX-Pad: %s\r\nHost: www.egress.test\r\n\r\n", strings.Repeat("a", 4096))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, _ := c.Read(make([]byte, 1)); n != 0 {
		t.Fatal("got an answer")
	}
	if ds := e.g.Denials("a"); len(ds) != 1 || ds[0].Name != "" {
		t.Fatalf("denials = %+v", ds)
	}
}

func TestCaps(t *testing.T) {
	e := newEnv(t, Config{Bounds: allowLoopback, MaxConnsPerSandbox: 3, MaxConns: 5, PeekTimeout: 30 * time.Second, FirstByteTimeout: 30 * time.Second})
	e.attach("a", srcA, core.NetworkPolicy{})
	e.attach("b", srcB, core.NetworkPolicy{})
	// Silent connections hold their slots while the gateway waits for a
	// name.
	hold := func(src string) net.Conn {
		c, err := e.connect(src, e.httpDst())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	for range 3 {
		hold(srcA)
	}
	waitFor(t, 5*time.Second, "3 open", func() bool { return e.g.Stats("a").ConnsOpen == 3 })
	if !e.refused(srcA, e.httpDst()) {
		t.Fatal("4th connection not refused")
	}
	if s := e.g.Stats("a"); s.ConnsRefusedAtCap != 1 || s.ConnsOpen != 3 {
		t.Fatalf("stats a = %+v", s)
	}
	// b has its own cap, within the global one (5): 2 more fit.
	hold(srcB)
	hold(srcB)
	waitFor(t, 5*time.Second, "5 open", func() bool { return e.g.Stats("b").ConnsOpen == 2 })
	if !e.refused(srcB, e.httpDst()) {
		t.Fatal("connection past the global cap not refused")
	}
	if s := e.g.Stats("b"); s.ConnsRefusedAtCap != 1 {
		t.Fatalf("stats b = %+v", s)
	}
}

func TestDetach(t *testing.T) {
	e := newEnv(t, Config{Bounds: allowLoopback})
	e.attach("a", srcA, core.NetworkPolicy{})
	c, err := e.connect(srcA, e.httpDst())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: www.egress.test\r\n\r\n")
	readResponse(t, c)
	e.g.Detach("a")
	c.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("read after detach: %v", err)
	}
	if s := e.g.Stats("a"); s != (Stats{}) {
		t.Fatalf("stats after detach = %+v", s)
	}
	if d := e.g.Denials("a"); d != nil {
		t.Fatalf("denials after detach = %+v", d)
	}
	// Its source is unknown now.
	_, _, err = e.get(e.client(srcA, e.httpDst(), nil), fmt.Sprintf("http://www.egress.test:%d/", e.httpPort))
	if err == nil {
		t.Fatal("a detached source got through")
	}
}

// TestTotals: the gateway's totals sum every sandbox's counters, a
// detached one's kept, so that they only grow; strays are counted.
func TestTotals(t *testing.T) {
	e := newEnv(t, Config{Bounds: allowLoopback})
	e.attach("a", srcA, core.NetworkPolicy{})
	e.attach("b", srcB, core.NetworkPolicy{DenyOut: []string{"*.egress.test"}})
	url := fmt.Sprintf("http://www.egress.test:%d/", e.httpPort)
	if code, _, err := e.get(e.client(srcA, e.httpDst(), nil), url); err != nil || code != 200 {
		t.Fatalf("a: %d, %v", code, err)
	}
	if code, _, err := e.get(e.client(srcB, e.httpDst(), nil), url); err != nil || code != 403 {
		t.Fatalf("b: %d, %v; want 403", code, err)
	}
	waitFor(t, 5*time.Second, "closed", func() bool { return e.g.Totals().ConnsOpen == 0 })
	before, per := e.g.Counters()
	sa, sb := e.g.Stats("a"), e.g.Stats("b")
	if len(per) != 2 || per["a"] != sa || per["b"] != sb {
		t.Fatalf("per sandbox %+v; a %+v, b %+v", per, sa, sb)
	}
	if before.Sandboxes != 2 || before.ConnsAllowed != sa.ConnsAllowed+sb.ConnsAllowed || before.ConnsDenied != sa.ConnsDenied+sb.ConnsDenied ||
		before.BytesIn != sa.BytesIn+sb.BytesIn || before.BytesOut == 0 || before.ConnsAllowed == 0 || before.ConnsDenied == 0 {
		t.Fatalf("totals %+v; a %+v, b %+v", before, sa, sb)
	}
	e.g.Detach("a")
	after := e.g.Totals()
	if after.Sandboxes != 1 || after.ConnsAllowed != before.ConnsAllowed || after.BytesIn != before.BytesIn || after.ConnsDenied != before.ConnsDenied {
		t.Fatalf("after a detach: %+v; before %+v", after, before)
	}
	// a's source is a stray now.
	e.get(e.client(srcA, e.httpDst(), nil), url)
	waitFor(t, 5*time.Second, "a stray", func() bool { return e.g.Totals().StrayConns >= 1 })
}

func TestDenialRing(t *testing.T) {
	e := newEnv(t, Config{Bounds: allowLoopback, DenialLog: 2})
	e.attach("a", srcA, core.NetworkPolicy{DenyOut: []string{"*.egress.test"}})
	cl := e.client(srcA, e.httpDst(), nil)
	for _, n := range []string{"one", "two", "three"} {
		if code, _, _ := e.get(cl, fmt.Sprintf("http://%s.egress.test:%d/", n, e.httpPort)); code != 403 {
			t.Fatalf("GET %s = %d", n, code)
		}
	}
	ds := e.g.Denials("a")
	if len(ds) != 2 || ds[0].Name != "two.egress.test" || ds[1].Name != "three.egress.test" || !ds[0].Time.Before(ds[1].Time) && !ds[0].Time.Equal(ds[1].Time) {
		t.Fatalf("denials = %+v", ds)
	}
	if s := e.g.Stats("a"); s.DeniedLogDropped != 1 || s.ConnsDenied != 3 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestIdleTimeout(t *testing.T) {
	e := newEnv(t, Config{Bounds: allowLoopback, IdleTimeout: 200 * time.Millisecond})
	e.attach("a", srcA, core.NetworkPolicy{})
	c, err := e.connect(srcA, e.httpDst())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: www.egress.test\r\n\r\n")
	readResponse(t, c)
	start := time.Now()
	c.SetReadDeadline(start.Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("read on an idle connection: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("idle connection closed after %v", d)
	}
}

func TestNilPolicyRefusesEverything(t *testing.T) {
	e := newEnv(t, Config{Bounds: allowLoopback})
	e.g.Attach("a", netip.MustParseAddr(srcA), nil, nil)
	code, body, err := e.get(e.client(srcA, e.httpDst(), nil), fmt.Sprintf("http://www.egress.test:%d/", e.httpPort))
	if err != nil || code != 403 || !strings.Contains(body, "no network policy") {
		t.Fatalf("GET = %d %q, %v", code, body, err)
	}
}

func TestUpdateClosesInterceptedConnection(t *testing.T) {
	e := newEnv(t, Config{Bounds: allowLoopback})
	pol := core.NetworkPolicy{
		AllowOut: []string{"api.egress.test"},
		DenyOut:  []string{"0.0.0.0/0"},
		Rules:    map[string]core.NetworkRule{"api.egress.test": {Headers: map[string]string{"X-Api-Key": "key-1-abcdefgh"}}},
	}
	ca := e.attach("a", srcA, pol)
	raw, err := e.connect(srcA, e.httpsDst())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	c := tls.Client(raw, &tls.Config{ServerName: "api.egress.test", RootCAs: roots})
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: api.egress.test\r\n\r\n")
	readResponse(t, c)
	// A new rule value applies from the next request on the same
	// connection.
	pol.Rules["api.egress.test"] = core.NetworkRule{Headers: map[string]string{"X-Api-Key": "key-2-abcdefgh"}}
	e.g.Update("a", compile(t, pol))
	fmt.Fprintf(c, "GET /2 HTTP/1.1\r\nHost: api.egress.test\r\n\r\n")
	readResponse(t, c)
	if got := e.lastSeen().Headers.Get("X-Api-Key"); got != "key-2-abcdefgh" {
		t.Fatalf("upstream saw %q after the update", got)
	}
	// Denying the domain closes the connection.
	e.g.Update("a", compile(t, core.NetworkPolicy{DenyOut: []string{"api.egress.test"}}))
	start := time.Now()
	c.SetReadDeadline(start.Add(time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("read on a now-denied intercepted connection: %v (after %v)", err, time.Since(start))
	}
	waitFor(t, 5*time.Second, "the connection's slot", func() bool { return e.g.Stats("a").ConnsOpen == 0 })
}

func TestDefaultHostAddrs(t *testing.T) {
	h := newHostAddrs(slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer h.close()
	addrs, err := h.get()
	if err != nil || !slices.Contains(addrs, netip.MustParseAddr("127.0.0.1")) {
		t.Fatalf("host addresses %v (%v) lack 127.0.0.1", addrs, err)
	}
	// Once the subscription has listed them, the list is kept.
	waitFor(t, 5*time.Second, "the kept list", func() bool { return h.cur.Load() != nil })
	addrs, _ = h.get()
	if again, _ := h.get(); &again[0] != &addrs[0] {
		t.Fatal("not kept")
	}
	// The default gateway refuses the host's loopback address even where
	// the operator allows the loopback range.
	g := New(Config{Bounds: Bounds{AllowPrivate: []netip.Prefix{loopback}}})
	defer g.Close()
	if r := g.bound(netip.MustParseAddr("127.0.0.1")); r != "the host's own address 127.0.0.1" {
		t.Fatalf("bound(127.0.0.1) = %q", r)
	}
}
