package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Credential brokering. A TLS connection whose SNI names a rule's domain
// (and that the policy lets through by name) is terminated here with a
// leaf certificate for that name signed by the sandbox's own CA, ALPN
// http/1.1 only. Each request read from it is sent on by
// httputil.ReverseProxy to https://name:port (the SNI's name, whatever
// Host or absolute target the request carries), over a connection dialled
// through the same checks as any other (resolved on the host, admit) and
// verified against Config.RootCAs, with the rule's headers set, replacing
// any of the same name. WebSocket upgrades pass through the same way.
//
// The secret is only ever in the outbound request: the sandbox sees the
// upstream's response (each of its header blocks, interim responses and
// trailers included, scrubbed of a rule value, below), the
// gateway's own errors name no header value, and operator logs never
// print one. What the gateway cannot stop is an upstream that reflects a
// request's headers in a response body (an echo endpoint): rules belong
// on domains that do not (see the package doc's limits).
//
// Plain HTTP to a rule's domain is passed through like any other
// connection, without the rule's headers: the secret never travels in
// clear, and the sandbox learns only what the upstream answers to a
// request without it.

type interceptor struct {
	g     *Gateway
	ln    *chanListener
	srv   *http.Server
	proxy *httputil.ReverseProxy
}

// intercepted is one terminated connection, as the HTTP server and the
// proxy see it: the TLS connection to the sandbox, and the transport
// whose connections upstream belong to it alone (never pooled across
// connections, let alone sandboxes).
type intercepted struct {
	*tls.Conn
	cn        *conn
	name      string
	port      uint16
	transport *http.Transport
	closeOnce sync.Once
}

func (ic *intercepted) Read(p []byte) (int, error) {
	n, err := ic.Conn.Read(p)
	if n > 0 {
		ic.cn.touch()
	}
	return n, err
}

func (ic *intercepted) Write(p []byte) (int, error) {
	n, err := ic.Conn.Write(p)
	if n > 0 {
		ic.cn.touch()
	}
	return n, err
}

// Close ends the whole connection: the TLS session (close_notify, within
// crypto/tls's own 5 s write budget), the client's TCP connection and
// every upstream.
func (ic *intercepted) Close() error {
	ic.closeOnce.Do(func() {
		ic.Conn.Close()
		ic.cn.close()
		ic.transport.CloseIdleConnections()
	})
	return nil
}

type icKey struct{}

const (
	interceptHeaderBytes   = 64 << 10
	interceptHeaderTimeout = 30 * time.Second
	tlsHandshakeTimeout    = 10 * time.Second
	upstreamIdleConns      = 1
	upstreamConnsPerClient = 2
)

func newInterceptor(g *Gateway) *interceptor {
	ix := &interceptor{g: g, ln: newChanListener()}
	ix.proxy = &httputil.ReverseProxy{
		Rewrite:        ix.rewrite,
		Transport:      roundTripper(ix.roundTrip),
		ModifyResponse: ix.scrub,
		ErrorHandler:   ix.fail,
		ErrorLog:       slog.NewLogLogger(g.log.Handler(), slog.LevelDebug),
	}
	ix.srv = &http.Server{
		Handler:           ix,
		ReadHeaderTimeout: interceptHeaderTimeout,
		IdleTimeout:       g.cfg.IdleTimeout,
		MaxHeaderBytes:    interceptHeaderBytes,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, icKey{}, c.(*intercepted))
		},
		ErrorLog: slog.NewLogLogger(g.log.Handler(), slog.LevelDebug),
	}
	go ix.srv.Serve(ix.ln)
	return ix
}

func (ix *interceptor) close() { ix.srv.Close() }

// serve terminates cn's TLS (the peeked ClientHello replayed first) and
// hands it to the HTTP server; it returns when the connection is closed,
// so the connection's slot is held as long as it is open.
func (ix *interceptor) serve(cn *conn, peekedBytes []byte, name string, port uint16, ca *CA) {
	g := ix.g
	cfg := &tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return ca.leaf(name) },
		NextProtos:     []string{"http/1.1"},
		MinVersion:     tls.VersionTLS12,
	}
	tc := tls.Server(&replayConn{Conn: cn.client, pending: peekedBytes}, cfg)
	cn.client.SetDeadline(time.Now().Add(tlsHandshakeTimeout))
	if err := tc.Handshake(); err != nil {
		g.log.Debug("egress: TLS handshake with the sandbox failed", "sandbox", cn.sb.id, "name", name, "err", err)
		return
	}
	cn.client.SetDeadline(time.Time{})
	ic := &intercepted{Conn: tc, cn: cn, name: name, port: port}
	ic.transport = &http.Transport{
		Proxy:                  nil, // never the host's HTTP(S)_PROXY
		DialContext:            func(ctx context.Context, _, _ string) (net.Conn, error) { return ix.dial(ctx, ic) },
		TLSClientConfig:        &tls.Config{RootCAs: g.cfg.RootCAs, ServerName: name, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    tlsHandshakeTimeout,
		TLSNextProto:           map[string]func(string, *tls.Conn) http.RoundTripper{}, // HTTP/1.1 upstream too
		DisableCompression:     true,                                                   // the sandbox's Accept-Encoding, untouched
		MaxIdleConns:           upstreamIdleConns,
		MaxIdleConnsPerHost:    upstreamIdleConns,
		MaxConnsPerHost:        upstreamConnsPerClient,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: interceptHeaderBytes,
	}
	select {
	case ix.ln.ch <- ic:
	case <-ix.ln.done:
		ic.Close()
		return
	case <-cn.done:
		ic.Close()
		return
	}
	<-cn.done
	ic.Close()
}

// ServeHTTP refuses the methods that would defeat the rule (TRACE echoes
// the request, headers included; CONNECT would tunnel past it) and
// proxies the rest.
func (ix *interceptor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodTrace, "TRACK", http.MethodConnect:
		http.Error(w, "sandboxd egress: "+r.Method+" is not allowed to a domain with a credential rule", http.StatusMethodNotAllowed)
		return
	}
	sw := &scrubWriter{ResponseWriter: w, ix: ix, ic: icOf(r.Context())}
	ix.proxy.ServeHTTP(sw, r)
	// The trailers: the proxy put them in the header map after the body,
	// for the server to send once this returns.
	sw.scrub()
}

// scrubWriter scrubs each header block as it goes to the sandbox: the
// interim (1xx) responses the proxy relays as they come, the final
// headers, and (through ServeHTTP) the trailers. ModifyResponse sees the
// final headers alone, and before the trailers exist.
type scrubWriter struct {
	http.ResponseWriter
	ix          *interceptor
	ic          *intercepted
	wroteHeader bool
}

func (w *scrubWriter) scrub() { w.ix.scrubHeader(w.ic, w.Header()) }

func (w *scrubWriter) WriteHeader(code int) {
	w.scrub()
	if code >= 200 || code == http.StatusSwitchingProtocols { // not an interim response
		w.wroteHeader = true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *scrubWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection's Flush and
// Hijack (the proxy's streaming and WebSocket upgrades).
func (w *scrubWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func icOf(ctx context.Context) *intercepted { ic, _ := ctx.Value(icKey{}).(*intercepted); return ic }

// rewrite points the request at the SNI's name and sets the rule's
// headers, read from the sandbox's current policy (an Update's new
// headers apply from the next request).
func (ix *interceptor) rewrite(pr *httputil.ProxyRequest) {
	ic := icOf(pr.In.Context())
	host := ic.name
	if ic.port != 443 {
		host = net.JoinHostPort(ic.name, strconv.Itoa(int(ic.port)))
	}
	pr.Out.URL.Scheme = "https"
	pr.Out.URL.Host = host
	pr.Out.Host = ""
	p, _ := ic.cn.sb.current()
	if p == nil {
		return
	}
	if headers, ok := p.Rule(ic.name); ok {
		for k, v := range headers {
			pr.Out.Header.Set(k, v)
		}
		ic.cn.sb.st.ruleRequests.Add(1)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (ix *interceptor) roundTrip(r *http.Request) (*http.Response, error) {
	return icOf(r.Context()).transport.RoundTrip(r)
}

// refusal is a dial the checks refused; its reason may be shown to the
// sandbox.
type refusal struct{ reason string }

func (r *refusal) Error() string { return "refused: " + r.reason }

// dial opens a connection to the rule's name for ic's transport: judged
// again under the sandbox's current policy, resolved on the host, each
// address through admit; counted, and closed with ic's connection.
func (ix *interceptor) dial(ctx context.Context, ic *intercepted) (net.Conn, error) {
	g, cn, sb := ix.g, ic.cn, ic.cn.sb
	p, _ := sb.current()
	byName, reason := g.route(p, ic.name)
	var addrs []netip.Addr
	if reason == "" && !byName {
		reason = g.nameRefusal(p, ic.name)
	}
	if reason == "" {
		var err error
		if addrs, reason, err = g.candidates(ctx, sb, p, ic.name, true); err != nil {
			if errors.Is(err, errNoSuchName) {
				return nil, &refusal{"the name does not resolve"}
			}
			return nil, err
		}
	}
	if reason != "" {
		g.deny(sb, Denial{Kind: "tcp", Name: ic.name, Reason: reason})
		return nil, &refusal{reason}
	}
	targets := make([]netip.AddrPort, len(addrs))
	for i, a := range addrs {
		targets[i] = netip.AddrPortFrom(a, ic.port)
	}
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	up, _, err := g.dialAny(ctx, targets)
	if err != nil {
		return nil, err
	}
	cc := &countedConn{Conn: up, cn: cn}
	if !cn.addUpstream(cc) {
		return nil, net.ErrClosed
	}
	return cc, nil
}

// countedConn is an upstream connection of an intercepted one: its bytes
// counted as the sandbox's, its activity keeping the connection alive.
type countedConn struct {
	net.Conn
	cn *conn
}

func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.cn.sb.st.bytesIn.Add(uint64(n))
		c.cn.touch()
	}
	return n, err
}

func (c *countedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.cn.sb.st.bytesOut.Add(uint64(n))
		c.cn.touch()
	}
	return n, err
}

func (c *countedConn) Close() error {
	c.cn.removeUpstream(c)
	return c.Conn.Close()
}

// minScrub: rule values shorter than this are not scrubbed from
// responses (a header set to "1" or "true" is no secret, and replacing
// every "1" would mangle responses).
const minScrub = 8

// scrub removes the rule's values from the response's headers, should the
// upstream reflect one there (the 101 of a WebSocket upgrade is written
// past the ResponseWriter, so it is scrubbed here; the rest again by
// scrubWriter).
func (ix *interceptor) scrub(res *http.Response) error {
	ix.scrubHeader(icOf(res.Request.Context()), res.Header)
	return nil
}

const redacted = "[redacted by sandboxd]"

// scrubHeader replaces each of the rule's values in h, in the values and
// in the names (a name comes canonicalised, its case changed, so names
// and values are matched without regard to ASCII case). A header whose
// name holds a value is dropped.
func (ix *interceptor) scrubHeader(ic *intercepted, h http.Header) {
	p, _ := ic.cn.sb.current()
	if p == nil {
		return
	}
	rule, ok := p.Rule(ic.name)
	if !ok {
		return
	}
	var secrets []string
	for _, v := range rule {
		if len(v) >= minScrub {
			secrets = append(secrets, v)
		}
	}
	if len(secrets) == 0 {
		return
	}
	for k, vs := range h {
		if redact(k, secrets) != k {
			delete(h, k)
			continue
		}
		for i, v := range vs {
			vs[i] = redact(v, secrets)
		}
	}
}

// redact replaces every occurrence of each secret in s, ASCII case
// ignored.
func redact(s string, secrets []string) string {
	for _, secret := range secrets {
		low, lowSecret := asciiLower(s), asciiLower(secret)
		if !strings.Contains(low, lowSecret) {
			continue
		}
		var b strings.Builder
		for {
			i := strings.Index(low, lowSecret)
			if i < 0 {
				break
			}
			b.WriteString(s[:i])
			b.WriteString(redacted)
			s, low = s[i+len(secret):], low[i+len(secret):]
		}
		b.WriteString(s)
		s = b.String()
	}
	return s
}

// asciiLower lowers ASCII letters alone, byte by byte (a value need not
// be UTF-8), so that indices in its result are indices in s.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
	}
	return string(b)
}

// fail answers a request the proxy could not send on, with a message
// that names no header, value or host internals.
func (ix *interceptor) fail(w http.ResponseWriter, r *http.Request, err error) {
	ic := icOf(r.Context())
	ix.g.log.Debug("egress: rule request failed", "sandbox", ic.cn.sb.id, "name", ic.name, "err", err)
	var rf *refusal
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalid x509.CertificateInvalidError
	msg := "sandboxd egress: the upstream could not be reached or failed"
	switch {
	case errors.As(err, &rf):
		msg = "sandboxd egress: refused: " + rf.reason
	case errors.As(err, &unknownCA), errors.As(err, &hostErr), errors.As(err, &invalid):
		msg = "sandboxd egress: the upstream's certificate is not trusted by the host"
	case r.Context().Err() != nil:
		return // the sandbox went away
	}
	http.Error(w, msg, http.StatusBadGateway)
}

// replayConn is the client connection with the peeked bytes put back in
// front, for crypto/tls to read the ClientHello again.
type replayConn struct {
	net.Conn
	pending []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// chanListener hands intercepted connections to the one HTTP server.
type chanListener struct {
	ch   chan *intercepted
	done chan struct{}
	once sync.Once
}

func newChanListener() *chanListener {
	return &chanListener{ch: make(chan *intercepted), done: make(chan struct{})}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4zero} }
