package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// The tests' "internet" is the loopback range alone: upstream servers on
// 127.0.0.1, sandboxes' sources on 127.0.0.2 and 127.0.0.3, names in a
// table. Every address the gateway dials passes through env.dial, which
// refuses (and fails the test on) anything outside 127.0.0.0/8.

const (
	srcA = "127.0.0.2"
	srcB = "127.0.0.3"
)

var loopback = netip.MustParsePrefix("127.0.0.0/8")

// upstream is what the test servers saw of one request.
type upstream struct {
	Host    string
	Path    string
	Headers http.Header
}

type env struct {
	t      *testing.T
	g      *Gateway
	tcp    net.Listener
	udp    net.PacketConn
	dnsTCP net.Listener
	orig   *origTable
	names  *nameTable

	upCA  *CA            // signs the upstream servers' certificates
	roots *x509.CertPool // what the gateway trusts upstream

	http, https *httptest.Server
	httpPort    uint16
	httpsPort   uint16

	mu     sync.Mutex
	seen   []upstream
	dialed []netip.AddrPort
}

// newEnv starts the test servers and a gateway configured by cfg (Dial,
// Resolver, RootCAs, HostAddrs and Logger are the env's unless set).
func newEnv(t *testing.T, cfg Config) *env {
	t.Helper()
	e := &env{t: t, orig: newOrigTable(), names: newNameTable()}
	var err error
	if e.upCA, err = NewCA("upstream-test"); err != nil {
		t.Fatal(err)
	}
	e.roots = x509.NewCertPool()
	e.roots.AppendCertsFromPEM(e.upCA.CertPEM())

	mux := http.NewServeMux()
	mux.HandleFunc("/ws", e.wsEcho)
	mux.HandleFunc("/reflect", func(w http.ResponseWriter, r *http.Request) {
		e.record(r)
		w.Header().Set("X-Reflected", r.Header.Get("X-Api-Key"))
		fmt.Fprintf(w, "reflected to the header\n")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		e.record(r)
		fmt.Fprintf(w, "hello from %s%s\n", r.Host, r.URL.Path)
	})
	e.http = httptest.NewServer(mux)
	e.https = httptest.NewUnstartedServer(mux)
	e.https.TLS = &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
		name := h.ServerName
		if name == "" {
			name = "no-sni.egress.test"
		}
		return e.upCA.leaf(name)
	}}
	quiet := log.New(io.Discard, "", 0) // the failed handshakes tests cause on purpose
	e.http.Config.ErrorLog, e.https.Config.ErrorLog = quiet, quiet
	e.https.StartTLS()
	t.Cleanup(e.http.Close)
	t.Cleanup(e.https.Close)
	e.httpPort = portOf(e.http.Listener.Addr())
	e.httpsPort = portOf(e.https.Listener.Addr())

	for _, n := range []string{"www.egress.test", "api.egress.test", "other.egress.test", "blocked.egress.test", "ws.egress.test"} {
		e.names.set(n, "127.0.0.1")
	}
	e.names.set("private.egress.test", "10.0.0.5")
	e.names.set("meta.egress.test", "169.254.77.2")
	e.names.set("mixed.egress.test", "169.254.77.2", "127.0.0.1")

	if cfg.Resolver == nil {
		cfg.Resolver = e.names
	}
	if cfg.RootCAs == nil {
		cfg.RootCAs = e.roots
	}
	if cfg.HostAddrs == nil {
		cfg.HostAddrs = func() []netip.Addr { return nil }
	}
	if cfg.Dial == nil {
		cfg.Dial = e.dial
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.PeekTimeout == 0 {
		cfg.PeekTimeout = 2 * time.Second
	}
	if cfg.FirstByteTimeout == 0 {
		cfg.FirstByteTimeout = 300 * time.Millisecond
	}
	e.g = New(cfg)
	if e.tcp, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if e.udp, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if e.dnsTCP, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); e.g.ServeTCP(e.tcp, e.orig.get) }()
	go func() { defer wg.Done(); e.g.ServeDNS(e.udp) }()
	go func() { defer wg.Done(); e.g.ServeDNSTCP(e.dnsTCP) }()
	t.Cleanup(func() {
		e.g.Close()
		wg.Wait()
	})
	return e
}

func portOf(a net.Addr) uint16 { return uint16(a.(*net.TCPAddr).Port) }

func (e *env) record(r *http.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seen = append(e.seen, upstream{Host: r.Host, Path: r.URL.Path, Headers: r.Header.Clone()})
}

func (e *env) lastSeen() upstream {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.seen) == 0 {
		e.t.Fatal("the upstream saw no request")
	}
	return e.seen[len(e.seen)-1]
}

func (e *env) seenCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.seen)
}

// dial is the gateway's Dial: loopback only, recorded.
func (e *env) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !loopback.Contains(ap.Addr()) {
		e.t.Errorf("the gateway dialled %s, outside loopback", addr)
		return nil, fmt.Errorf("test: refusing to dial %s", addr)
	}
	e.mu.Lock()
	e.dialed = append(e.dialed, ap)
	e.mu.Unlock()
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

func (e *env) dialedAddrs() []netip.AddrPort {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]netip.AddrPort(nil), e.dialed...)
}

func (e *env) wsEcho(w http.ResponseWriter, r *http.Request) {
	e.record(r)
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	for {
		typ, msg, err := c.Read(ctx)
		if err != nil {
			return
		}
		if err := c.Write(ctx, typ, msg); err != nil {
			return
		}
	}
}

// attach compiles pol and attaches it for id at src, with a fresh CA.
func (e *env) attach(id, src string, pol core.NetworkPolicy) *CA {
	e.t.Helper()
	ca, err := NewCA(id)
	if err != nil {
		e.t.Fatal(err)
	}
	e.g.Attach(id, netip.MustParseAddr(src), compile(e.t, pol), ca)
	return ca
}

func compile(t *testing.T, pol core.NetworkPolicy) *core.CompiledPolicy {
	t.Helper()
	p, err := core.CompileNetworkPolicy(pol)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// connect opens a "sandbox" connection from src whose original
// destination is dst.
func (e *env) connect(src string, dst netip.AddrPort) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", e.tcp.Addr().String())
	if err != nil {
		return nil, err
	}
	e.orig.set(c.LocalAddr().String(), dst)
	return c, nil
}

// refused reports whether the gateway closes a connection from src at
// once, unread: the connect itself may see the reset on loopback.
func (e *env) refused(src string, dst netip.AddrPort) bool {
	e.t.Helper()
	c, err := e.connect(src, dst)
	if err != nil {
		return true
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(make([]byte, 1))
	return n == 0 && err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// client is an HTTP client for a sandbox at src: every connection goes
// to the gateway with original destination dst (what the sandbox's
// kernel would have been asked for), and it trusts the upstream CA and
// the sandbox's CA (ca, if any).
func (e *env) client(src string, dst netip.AddrPort, ca *CA) *http.Client {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(e.upCA.CertPEM())
	if ca != nil {
		roots.AppendCertsFromPEM(ca.CertPEM())
	}
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return e.connect(src, dst)
			},
			TLSClientConfig:   &tls.Config{RootCAs: roots},
			DisableKeepAlives: true,
		},
	}
}

// get fetches url through the gateway and returns the status, the whole
// response as the sandbox saw it (status line, headers, body) and the
// TLS peer's issuer if any.
func (e *env) get(c *http.Client, url string, hdr ...string) (int, string, error) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return 0, "", err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	var all strings.Builder
	fmt.Fprintf(&all, "%s\n", res.Status)
	for k, vs := range res.Header {
		fmt.Fprintf(&all, "%s: %s\n", k, strings.Join(vs, ","))
	}
	all.Write(body)
	if res.TLS != nil && len(res.TLS.PeerCertificates) > 0 {
		fmt.Fprintf(&all, "\nissuer: %s\n", res.TLS.PeerCertificates[0].Issuer.CommonName)
	}
	return res.StatusCode, all.String(), err
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func (e *env) httpDst() netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), e.httpPort)
}

func (e *env) httpsDst() netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), e.httpsPort)
}

// origTable is the tests' SO_ORIGINAL_DST: the destination each client
// connection was "sent to", by its local address. The gateway may ask
// before the client has registered it, so get waits (bounded).
type origTable struct {
	mu      sync.Mutex
	m       map[string]netip.AddrPort
	changed chan struct{}
	// bySource: the destination of every connection from a source that
	// registers none (a flooder in another process).
	bySource map[netip.Addr]netip.AddrPort
}

func newOrigTable() *origTable {
	return &origTable{m: map[string]netip.AddrPort{}, changed: make(chan struct{}), bySource: map[netip.Addr]netip.AddrPort{}}
}

func (o *origTable) set(local string, dst netip.AddrPort) {
	o.mu.Lock()
	o.m[local] = dst
	close(o.changed)
	o.changed = make(chan struct{})
	o.mu.Unlock()
}

func (o *origTable) setSource(src string, dst netip.AddrPort) {
	o.mu.Lock()
	o.bySource[netip.MustParseAddr(src)] = dst
	o.mu.Unlock()
}

func (o *origTable) get(c net.Conn) (netip.AddrPort, error) {
	key := c.RemoteAddr().String()
	timeout := time.NewTimer(5 * time.Second)
	defer timeout.Stop()
	for {
		o.mu.Lock()
		dst, ok := o.m[key]
		if !ok {
			dst, ok = o.bySource[addrOf(c.RemoteAddr())]
		}
		ch := o.changed
		o.mu.Unlock()
		if ok {
			return dst, nil
		}
		select {
		case <-ch:
		case <-timeout.C:
			return netip.AddrPort{}, fmt.Errorf("test: no original destination for %s", key)
		}
	}
}

// nameTable is the tests' host resolver; it counts lookups by name.
type nameTable struct {
	mu      sync.Mutex
	m       map[string][]netip.Addr
	lookups map[string]int
}

func newNameTable() *nameTable {
	return &nameTable{m: map[string][]netip.Addr{}, lookups: map[string]int{}}
}

func (n *nameTable) set(name string, addrs ...string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.m[name] = nil
	for _, a := range addrs {
		n.m[name] = append(n.m[name], netip.MustParseAddr(a))
	}
}

func (n *nameTable) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lookups[host]++
	if a, ok := n.m[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (n *nameTable) count(name string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lookups[name]
}

// waitFor polls cond until it holds or d passes (for counters the
// gateway updates after the client has its answer).
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// allowPrivateLoopback is the bounds tests need to reach their own
// servers: 127.0.0.0/8 is a special range.
var allowLoopback = Bounds{AllowPrivate: []netip.Prefix{loopback}, SandboxNet: netip.MustParsePrefix("127.0.0.2/31")}
