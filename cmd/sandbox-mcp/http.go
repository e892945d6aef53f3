package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/internal/httpguard"
)

// The streamable HTTP endpoint (--http). Every request passes, in this
// order and before the SDK's handler sees it:
//
//  1. the Origin check: a request that carries an Origin header must name
//     an allowed origin (those of the listen address, and --allow-origin),
//     else 403 (the MCP specification's transport security rule);
//  2. the bearer token, when one is configured: else 401 with
//     WWW-Authenticate: Bearer;
//  3. for a request with a body, a place among the bodies being read at
//     once (else 503 after a short wait) and a deadline for the whole body.
//
// Refusals do not wait for the body: they are sent at once with
// Connection: close, and what net/http still reads of the body afterwards
// is bounded by drainTimeout; internal/httpguard does this and step 3, as
// for the project's other HTTP doors. The SDK's handler then checks the
// Host header against DNS rebinding (on a loopback connection, the Host
// must be a loopback name), caps the body's size while reading it, and
// serves MCP.

// minTokenLen is the shortest --http-token-file token accepted: the same
// rule as sandboxd's own token file (16 random characters are far beyond
// guessing).
const minTokenLen = 16

// httpLimits bounds what one client can hold of the endpoint. Zero fields
// take defaultHTTPLimits'; tests shorten them.
type httpLimits struct {
	// headerTimeout is the time to read a request's headers.
	headerTimeout time.Duration
	// bodyTimeout is the time to read a request's whole body, from the end
	// of its headers (or from when it gets a place to be read). A response
	// streamed after the body (SSE) has no deadline.
	bodyTimeout time.Duration
	// idleTimeout closes a kept-alive connection with no request.
	idleTimeout time.Duration
	// maxHeaderBytes caps the request line and headers.
	maxHeaderBytes int
	// maxBodyBytes caps one request's body (the SDK answers 413 above it).
	maxBodyBytes int64
	// maxBodyReads is the most request bodies read at once: each may be
	// held in memory up to maxBodyBytes while it is read and decoded.
	maxBodyReads int
	// readQueueWait is how long a request waits for a place among them
	// before it is answered 503.
	readQueueWait time.Duration
	// drainTimeout bounds what is read of a body after a response that
	// did not read it (a refusal): net/http, even when the connection
	// closes after the response, reads up to 256 KiB of the rest before
	// closing, so that the client is not reset before it reads the
	// response. A silent client would hold it open.
	drainTimeout time.Duration
}

var defaultHTTPLimits = httpLimits{
	headerTimeout:  10 * time.Second,
	bodyTimeout:    30 * time.Second,
	idleTimeout:    2 * time.Minute,
	maxHeaderBytes: 64 << 10,
	maxBodyBytes:   mcp.DefaultMaxRequestBodyBytes, // 4 MiB: write_file content of ~3 MiB in base64
	maxBodyReads:   16,
	readQueueWait:  10 * time.Second,
	drainTimeout:   time.Second,
}

func (l httpLimits) withDefaults() httpLimits {
	d := defaultHTTPLimits
	or := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	or(&l.headerTimeout, d.headerTimeout)
	or(&l.bodyTimeout, d.bodyTimeout)
	or(&l.idleTimeout, d.idleTimeout)
	or(&l.readQueueWait, d.readQueueWait)
	or(&l.drainTimeout, d.drainTimeout)
	if l.maxHeaderBytes <= 0 {
		l.maxHeaderBytes = d.maxHeaderBytes
	}
	if l.maxBodyBytes <= 0 {
		l.maxBodyBytes = d.maxBodyBytes
	}
	if l.maxBodyReads <= 0 {
		l.maxBodyReads = d.maxBodyReads
	}
	return l
}

// httpConfig is what serving over HTTP needs beyond the MCP server.
type httpConfig struct {
	addr string
	// token, when not empty, is required of every request as
	// "Authorization: Bearer TOKEN".
	token string
	// allowOrigins are origins allowed besides the listen address's.
	allowOrigins []string
	limits       httpLimits
}

// httpEndpoint is the listening endpoint; serve runs it.
type httpEndpoint struct {
	lis     net.Listener
	srv     *http.Server
	mcp     http.Handler
	digest  *[sha256.Size]byte // of the token; nil: no token required
	origins map[string]bool
	limits  httpLimits
	guard   *httpguard.Guard // bodies: deadline, places, refusals
	log     *slog.Logger
}

// listenHTTP listens on cfg.addr and sets up the endpoint in front of
// server. Like sandboxd for its own listener, it refuses an address beyond
// loopback without a token: anyone who can reach it could run code.
func listenHTTP(cfg httpConfig, server *mcp.Server, log *slog.Logger) (*httpEndpoint, error) {
	origins := map[string]bool{}
	for _, o := range cfg.allowOrigins {
		n, err := normalizeOrigin(o)
		if err != nil {
			return nil, fmt.Errorf("--allow-origin %q: %v", o, err)
		}
		origins[n] = true
	}
	lis, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return nil, fmt.Errorf("--http: %v", err)
	}
	// Judged on the address actually bound, as sandboxd does: ":8080" and
	// "0.0.0.0:8080" are every interface, and a host name may resolve
	// anywhere.
	bound := lis.Addr().(*net.TCPAddr)
	if !bound.IP.IsLoopback() {
		if cfg.token == "" {
			lis.Close()
			return nil, fmt.Errorf("refusing to serve MCP on %s without authentication: anyone who can connect could run code in the sandboxes; "+
				"give a bearer token (SANDBOX_MCP_HTTP_TOKEN or --http-token-file FILE), or listen on loopback", bound)
		}
		log.Warn("serving MCP beyond loopback over plaintext HTTP: the bearer token travels in the clear; put a TLS-terminating proxy in front unless the network is trusted", "listen", bound.String())
	}
	for _, o := range listenOrigins(cfg.addr, bound) {
		origins[o] = true
	}
	l := cfg.limits.withDefaults()
	e := &httpEndpoint{
		lis:     lis,
		origins: origins,
		limits:  l,
		guard: httpguard.New(httpguard.Limits{
			BodyTimeout:  l.bodyTimeout,
			DrainTimeout: l.drainTimeout,
			MaxReads:     l.maxBodyReads,
			QueueWait:    l.readQueueWait,
			// Every body needs a place (FreeBelow 0): any may be up to
			// maxBodyBytes, held while the SDK decodes it. One token, so
			// no per-key bound.
		}, log),
		log: log,
	}
	if cfg.token != "" {
		d := sha256.Sum256([]byte(cfg.token))
		e.digest = &d
	}
	events := mcp.NewMemoryEventStore(nil)
	events.SetMaxBytes(64 << 20)
	e.mcp = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{
		// A client whose SSE stream broke during a long command reconnects
		// with Last-Event-ID and gets the rest, the result included.
		EventStore: events,
		// Idle sessions end (a client then initializes again; the state is
		// in sandboxd, not in the session).
		SessionTimeout:               time.Hour,
		PropagateRequestCancellation: true,
		// Enforced while reading: the SDK answers 413 past it.
		MaxRequestBodyBytes: l.maxBodyBytes,
		// DisableLocalhostProtection stays false: on a loopback
		// connection the SDK answers 403 to a Host that is not a
		// loopback name (DNS rebinding).
	})
	mux := http.NewServeMux()
	mux.Handle("/mcp", e)
	e.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: l.headerTimeout,
		// No ReadTimeout: it would also end SSE streams (net/http cancels
		// a request whose connection read fails); the body's deadline is
		// set per request instead. No WriteTimeout: a tool call's stream
		// lasts as long as its command.
		IdleTimeout:    l.idleTimeout,
		MaxHeaderBytes: l.maxHeaderBytes,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return e, nil
}

// URL is the endpoint's URL.
func (e *httpEndpoint) URL() string { return "http://" + e.lis.Addr().String() + "/mcp" }

// serve serves until ctx ends, then shuts down.
func (e *httpEndpoint) serve(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- e.srv.Serve(e.lis) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Streams of running commands stay open: cut them off after the grace
	// period; their handlers interrupt the commands as their contexts end.
	if err := e.srv.Shutdown(shutdownCtx); err != nil {
		e.srv.Close()
	}
	return nil
}

func (e *httpEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Nothing has read the body yet: a refusal must not wait for it.
	w, body := e.guard.Start(w, r)
	defer body.End()
	if origin, ok := r.Header["Origin"]; ok && !e.originAllowed(origin) {
		e.log.Warn("refused a request from a foreign origin", "origin", clipHeader(strings.Join(origin, ", ")), "remote", r.RemoteAddr)
		http.Error(w, "Forbidden: this origin is not allowed (see sandbox-mcp --allow-origin)", http.StatusForbidden)
		return
	}
	if e.digest != nil && !e.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sandbox-mcp"`)
		if r.Header.Get("Authorization") != "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sandbox-mcp", error="invalid_token"`)
		}
		http.Error(w, "Unauthorized: a bearer token is required", http.StatusUnauthorized)
		return
	}
	// A body declared past the cap is refused (413, naming it) before
	// 100 Continue and before it waits for a place; one that runs past it
	// is refused by the SDK (413), and the guard delivers either refusal
	// (httpguard.LimitBody).
	if err := httpguard.LimitBody(w, r, e.limits.maxBodyBytes); httpguard.TooLarge(w, err) {
		return
	}
	// A place among the bodies being read, so that many large or slow
	// bodies cannot hold unbounded memory (503 after readQueueWait), and a
	// deadline for the whole body, lifted at its end: the SSE response
	// that follows has none.
	if !body.Admit(r, "") {
		return
	}
	e.mcp.ServeHTTP(w, r)
}

// authorized reports whether r carries the token, compared in constant
// time (as digests, so that not even its length shows).
func (e *httpEndpoint) authorized(r *http.Request) bool {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	d := sha256.Sum256([]byte(strings.TrimSpace(token)))
	return subtle.ConstantTimeCompare(d[:], e.digest[:]) == 1
}

func (e *httpEndpoint) originAllowed(values []string) bool {
	if len(values) != 1 {
		return false
	}
	o, err := normalizeOrigin(values[0])
	return err == nil && e.origins[o]
}

// normalizeOrigin is origin as scheme://host[:port], lower case, without
// a default port; an error if it is not an http or https origin.
func normalizeOrigin(origin string) (string, error) {
	u, err := url.Parse(origin)
	if err != nil {
		return "", err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", errors.New("not an http:// or https:// origin")
	}
	if u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", errors.New("an origin is scheme://host[:port], nothing more")
	}
	host, port := u.Hostname(), u.Port()
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("bad port %q", port)
		}
	}
	if (u.Scheme == "http" && port == "80") || (u.Scheme == "https" && port == "443") {
		port = ""
	}
	host = strings.ToLower(host)
	if port != "" {
		host = net.JoinHostPort(host, port)
	} else if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return strings.ToLower(u.Scheme) + "://" + host, nil
}

// listenOrigins are the origins of the listen address: the host as given
// and the address bound, with the port; on loopback (or every interface,
// which includes it) also the loopback names.
func listenOrigins(addr string, bound *net.TCPAddr) []string {
	port := strconv.Itoa(bound.Port)
	hosts := []string{bound.IP.String()}
	if h, _, err := net.SplitHostPort(addr); err == nil && h != "" {
		hosts = append(hosts, h)
	}
	if bound.IP.IsLoopback() || bound.IP.IsUnspecified() {
		hosts = append(hosts, "localhost", "127.0.0.1", "::1")
	}
	var origins []string
	for _, h := range hosts {
		if ip := net.ParseIP(h); h == "" || ip != nil && ip.IsUnspecified() {
			continue
		}
		if o, err := normalizeOrigin("http://" + net.JoinHostPort(h, port)); err == nil {
			origins = append(origins, o)
		}
	}
	return origins
}

// clipHeader bounds a header value before it is logged.
func clipHeader(v string) string {
	if len(v) > 100 {
		v = v[:100] + "..."
	}
	return strings.ToValidUTF8(v, "?")
}
