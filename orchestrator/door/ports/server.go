// Package ports is sandboxd's HTTP front for sandbox ports (sandboxd
// --ports-listen): a request to a port's URL (core.PortsFront: the Host
// form PORT-SANDBOXID.DOMAIN, or the path form /sandboxes/SANDBOXID/PORT/
// on the front's own address) is proxied to that port inside the
// sandbox, over HTTP/1.1; the client may speak HTTP/1.1, HTTP/2 (over TLS,
// or cleartext with prior knowledge), WebSocket (an Upgrade, proxied as a
// byte stream both ways) or server-sent events (flushed as they come).
//
// It sits beside the gRPC and E2B doors and, like them, calls the domain
// only through core.Manager: PortTarget says where the port is and
// whether the sandbox is public, Wake wakes a hibernated one. It knows
// nothing of Docker: the backend answers with the sandbox's address.
//
// Who may reach a port: whoever holds the sandbox's traffic token
// (core.PortsFront.Token, which GetHost returns), unless the sandbox's
// policy allows public traffic. The token travels in a header
// (Sandboxd-Traffic-Token, or E2B's E2B-Traffic-Access-Token), or, for
// browsers on the Host form, in a cookie set from the query parameter
// sandboxd_token (the front answers with the cookie and a redirect to the
// same URL without it). A port URL is not a tenant's API: no API key or
// tenant is involved, the token is the authorisation, and a sandbox that
// does not exist is answered exactly as a wrong token is.
//
// What a client can hold is bounded: connections (LimitListener), requests
// in progress per sandbox, per tenant (over its sandboxes) and in all (503
// past any, the narrowest named), headers (64 KiB within 10 s) and request
// bodies (streamed to the sandbox under a deadline that grows with what
// arrives, at most MaxBodyBytes). What the sandbox answers is hostile too:
// its connection must be made within 10 s and its response's headers
// arrive within ResponseTimeout (504 past either, so a port that accepts
// and never answers holds its place for that long only), its headers are
// bounded (256 KiB), its cookies cannot replace the front's, and its
// errors never reach the client as anything but a status and a fixed
// message.
package ports

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/internal/httpguard"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// The token's other carriers, besides the headers (core.TrafficTokenHeader,
// core.E2BTrafficTokenHeader).
const (
	// CookieName is the cookie a browser keeps the token in (Host form
	// only: each port's host has its own).
	CookieName = "sandboxd_traffic_token"
	// QueryParam is the query parameter that sets the cookie: a link
	// URL?sandboxd_token=TOKEN opens a private port in a browser.
	QueryParam = "sandboxd_token"
)

// Defaults of Config's bounds.
const (
	DefaultMaxRequestsPerSandbox = 256
	DefaultMaxRequests           = 4096
	DefaultMaxConns              = 4096
	DefaultWakeTimeout           = 2 * time.Minute
	DefaultReadyTimeout          = 30 * time.Second
	DefaultResponseTimeout       = 2 * time.Minute
	DefaultMaxBodyBytes          = 1 << 30
	// The headers of a request, and of a sandbox's response.
	maxHeaderBytes         = 64 << 10
	maxResponseHeaderBytes = 256 << 10
	headerTimeout          = 10 * time.Second
	// A request body has bodyTimeout from when it is admitted, plus a
	// second per minBodyRate bytes that arrived.
	bodyTimeout = 30 * time.Second
	minBodyRate = 64 << 10
	// dialTimeout bounds a connection to a sandbox's port; a port nobody
	// listens on refuses at once.
	dialTimeout = 10 * time.Second
)

// Config configures a Server.
type Config struct {
	// Front is the URL scheme and the tokens (required).
	Front *core.PortsFront
	// Logger; nil discards.
	Logger *slog.Logger
	// MaxRequestsPerSandbox is the most requests in progress to one
	// sandbox's ports (a WebSocket or an event stream is one for as long
	// as it lasts); MaxRequestsPerTenant the most to one tenant's
	// sandboxes together, so that a tenant whose ports hang holds its own
	// places, never every place of the front; MaxRequests the most in all.
	// Past any a request is answered 503 at once. Each must not exceed the
	// wider one. 0: the defaults (in all DefaultMaxRequests, a tenant a
	// quarter of MaxRequests, a sandbox DefaultMaxRequestsPerSandbox or
	// the tenant's cap if lower).
	MaxRequestsPerSandbox, MaxRequestsPerTenant, MaxRequests int
	// MaxConns bounds the connections the front holds (LimitListener), at
	// most half of the process's descriptor limit. 0: the default.
	MaxConns int
	// WakeTimeout bounds the wake of a hibernated sandbox a request waits
	// for; ReadyTimeout then how long it waits for the port to accept a
	// connection (the sandbox's server starting again). 0: the defaults.
	WakeTimeout, ReadyTimeout time.Duration
	// ResponseTimeout bounds the wait for a port's response headers once
	// the request (and its body) is sent to it: a port that accepts and
	// never answers is answered 504 then, and its place freed. A
	// response's body (an event stream, a WebSocket) has no limit. 0: the
	// default, DefaultResponseTimeout.
	ResponseTimeout time.Duration
	// MaxBodyBytes is the largest request body passed on (413 past it).
	// 0: the default, 1 GiB.
	MaxBodyBytes int64
	// BodyTimeout is the time a request body has to arrive from when it
	// is admitted, extended by 1 s per 64 KiB that arrive (httpguard).
	// 0: 30 s.
	BodyTimeout time.Duration
}

// Server is the front. Build it with New.
type Server struct {
	m     Domain
	front *core.PortsFront
	log   *slog.Logger
	cfg   Config

	guard *httpguard.Guard
	proxy *httputil.ReverseProxy
	caps  requestCaps
}

// Domain is what the front needs of the domain: where a port is, and a
// wake once a request to a hibernated sandbox is authorised.
type Domain interface {
	PortTarget(ctx context.Context, sandboxID string, port int, token bool) (core.PortTarget, error)
	Wake(ctx context.Context, sandboxID string) (core.Sandbox, *core.WakeInfo, error)
}

// New returns the front over m.
func New(m Domain, cfg Config) (*Server, error) {
	if cfg.Front == nil {
		return nil, errors.New("ports: Config.Front is required")
	}
	if cfg.MaxRequestsPerSandbox < 0 || cfg.MaxRequestsPerTenant < 0 || cfg.MaxRequests < 0 || cfg.MaxConns < 0 || cfg.MaxBodyBytes < 0 || cfg.ResponseTimeout < 0 {
		return nil, errors.New("ports: negative bounds")
	}
	cfg.MaxRequests = cmp.Or(cfg.MaxRequests, DefaultMaxRequests)
	cfg.MaxRequestsPerTenant = cmp.Or(cfg.MaxRequestsPerTenant, max(cfg.MaxRequests/4, 1))
	cfg.MaxRequestsPerSandbox = cmp.Or(cfg.MaxRequestsPerSandbox, min(DefaultMaxRequestsPerSandbox, cfg.MaxRequestsPerTenant))
	cfg.MaxConns = cmp.Or(cfg.MaxConns, DefaultMaxConns)
	cfg.WakeTimeout = cmp.Or(cfg.WakeTimeout, DefaultWakeTimeout)
	cfg.ReadyTimeout = cmp.Or(cfg.ReadyTimeout, DefaultReadyTimeout)
	cfg.ResponseTimeout = cmp.Or(cfg.ResponseTimeout, DefaultResponseTimeout)
	cfg.MaxBodyBytes = cmp.Or(cfg.MaxBodyBytes, DefaultMaxBodyBytes)
	cfg.BodyTimeout = cmp.Or(cfg.BodyTimeout, bodyTimeout)
	if cfg.MaxRequestsPerSandbox > cfg.MaxRequestsPerTenant || cfg.MaxRequestsPerTenant > cfg.MaxRequests {
		return nil, fmt.Errorf("ports: the caps on requests in progress must widen: %d per sandbox, %d per tenant, %d in all", cfg.MaxRequestsPerSandbox, cfg.MaxRequestsPerTenant, cfg.MaxRequests)
	}
	s := &Server{m: m, front: cfg.Front, log: cfg.Logger, cfg: cfg}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.guard = httpguard.New(httpguard.Limits{BodyTimeout: cfg.BodyTimeout, MinBodyRate: minBodyRate}, s.log)
	s.caps = requestCaps{perSandbox: cfg.MaxRequestsPerSandbox, perTenant: cfg.MaxRequestsPerTenant, total: cfg.MaxRequests,
		n: map[string]int{}, byTenant: map[string]int{}}
	s.proxy = &httputil.ReverseProxy{
		Rewrite:        rewrite,
		Transport:      newTransport(cfg.ResponseTimeout),
		ModifyResponse: modifyResponse,
		ErrorHandler:   s.proxyError,
		ErrorLog:       slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	return s, nil
}

// newTransport is the front's client to the sandboxes: their ports over
// HTTP/1.1, never through a proxy, bodies passed as they are; a
// connection made within dialTimeout, response headers within
// responseTimeout.
func newTransport(responseTimeout time.Duration) *http.Transport {
	d := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy: nil, // never the environment's: the sandboxes are reached directly
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, &dialError{err}
			}
			return c, nil
		},
		ResponseHeaderTimeout:  responseTimeout,
		MaxIdleConns:           1024,
		MaxIdleConnsPerHost:    64,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
		DisableCompression:     true,
		ExpectContinueTimeout:  time.Second,
	}
}

// HTTPServer returns an http.Server for the front: HTTP/1.1 and HTTP/2
// (over TLS when served with ServeTLS, and cleartext HTTP/2 with prior
// knowledge), bounded headers, no read or write timeout (a WebSocket or
// an event stream lasts as long as it is used; bodies have their own
// deadline). Serve it on LimitListener's listener.
func (s *Server) HTTPServer() *http.Server {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	return &http.Server{
		Handler:           s,
		Protocols:         &p,
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    maxHeaderBytes,
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: 250},
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
}

// LimitListener bounds the connections the front holds open
// (Config.MaxConns, at most half of the descriptor limit).
func (s *Server) LimitListener(l net.Listener) net.Listener {
	return httpguard.LimitListener(l, httpguard.ConnLimit(s.cfg.MaxConns))
}

// Handles reports whether r is addressed to a port by its Host (the Host
// form): the E2B door passes such requests to the front.
func (s *Server) Handles(r *http.Request) bool {
	_, _, ok := s.front.ParseHost(r.Host)
	return ok
}

// admin is the caller the front asks the domain as: the traffic token,
// not a tenant, is what authorises a request.
var admin = core.Caller{Tenant: core.DefaultTenant, Admin: true, Name: CallerName}

// CallerName is the name the front's calls carry (core.Caller.Name): the
// audit trail records a wake on request as the front's, in the sandbox's
// tenant, since no token of the token file made it.
const CallerName = "ports-front"

// route is where a request is addressed: the sandbox, its port, and for
// the path form the prefix taken off.
type route struct {
	id     string
	port   int
	prefix string // "/sandboxes/ID/PORT" for the path form; "" for the Host form
}

// ServeHTTP authorises a request, wakes its sandbox if it sleeps and
// passes it on to the port.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Before any answer: a refusal must not wait for the body (httpguard).
	w, body := s.guard.Start(w, r)
	defer body.End()
	rt, ok := s.routeOf(w, r)
	if !ok {
		return
	}
	tokenOK, fromQuery := s.token(r, rt)
	if fromQuery != "" {
		s.setCookie(w, r, rt, fromQuery, tokenOK)
		return
	}
	ctx := core.WithCaller(r.Context(), admin)
	t, err := s.m.PortTarget(ctx, rt.id, rt.port, tokenOK)
	switch {
	case err != nil && !tokenOK, err == nil && !tokenOK && !t.Public:
		s.denied(w)
		return
	case err != nil:
		s.domainError(w, r, rt, err)
		return
	}
	// A body declared past the bound is refused (413) before 100 Continue,
	// before it takes a place or wakes the sandbox; one that runs past it
	// is cut there (proxyError answers 413).
	if err := httpguard.LimitBody(w, r, s.cfg.MaxBodyBytes); err != nil {
		s.proxyError(w, r, err)
		return
	}
	release, full := s.caps.take(rt.id, t.Tenant)
	if full != "" {
		// The tenant is not named: a port's client may be anyone.
		var msg string
		switch full {
		case capSandbox:
			msg = fmt.Sprintf("too many requests in progress to sandbox %s: at most %d at once per sandbox (sandboxd --ports-max-requests-per-sandbox); retry", rt.id, s.cfg.MaxRequestsPerSandbox)
		case capTenant:
			msg = fmt.Sprintf("too many requests in progress to the sandboxes of sandbox %s's tenant: at most %d at once per tenant (sandboxd --ports-max-requests-per-tenant); retry", rt.id, s.cfg.MaxRequestsPerTenant)
		default:
			msg = fmt.Sprintf("too many requests in progress to sandboxes' ports: at most %d at once in all (sandboxd --ports-max-requests); retry", s.cfg.MaxRequests)
		}
		w.Header().Set("Retry-After", "1")
		httpError(w, http.StatusServiceUnavailable, msg)
		return
	}
	defer release()
	if t.State == core.StateHibernated {
		if t, ok = s.wake(w, r, rt, t); !ok {
			return
		}
	}
	if t.State != core.StateRunning || !t.Addr.IsValid() {
		msg := fmt.Sprintf("sandbox %s is not running", rt.id)
		if t.State == core.StateDead {
			msg = fmt.Sprintf("sandbox %s is dead: %s", rt.id, t.StateReason)
		}
		httpError(w, http.StatusBadGateway, msg)
		return
	}
	if !body.AdmitStream(r) {
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), targetKey{}, &target{route: rt, addr: t.Addr}))
	s.proxy.ServeHTTP(w, r)
}

// routeOf reads the route from the Host, else from the path; it answers
// (false) a request of neither form, and redirects /sandboxes/ID/PORT to
// /sandboxes/ID/PORT/, so that the app's relative links resolve under it.
func (s *Server) routeOf(w http.ResponseWriter, r *http.Request) (route, bool) {
	if id, port, ok := s.front.ParseHost(r.Host); ok {
		return route{id: id, port: port}, true
	}
	id, port, rest, ok := core.ParsePath(r.URL.Path)
	if !ok {
		msg := "not a sandbox port's URL: want " + s.front.Base() + core.PortsPathPrefix + "SANDBOX_ID/PORT/"
		if d := s.front.Domain(); d != "" {
			msg += " or http(s)://PORT-SANDBOX_ID." + d + "/"
		}
		httpError(w, http.StatusNotFound, msg)
		return route{}, false
	}
	if rest == "" {
		u := core.PathOf(id, port) + "/"
		if r.URL.RawQuery != "" {
			u += "?" + r.URL.RawQuery
		}
		http.Redirect(w, r, u, http.StatusPermanentRedirect)
		return route{}, false
	}
	return route{id: id, port: port, prefix: core.PathOf(id, port)}, true
}

// token reports whether r carries the sandbox's traffic token (a header,
// or on the Host form its cookie). fromQuery is the query parameter's
// value when there is one (it sets the cookie: setCookie answers).
func (s *Server) token(r *http.Request, rt route) (ok bool, fromQuery string) {
	if q := r.URL.Query(); q.Has(QueryParam) {
		tok := q.Get(QueryParam)
		return s.front.CheckToken(rt.id, tok), cmp.Or(tok, "-")
	}
	for _, h := range []string{core.TrafficTokenHeader, core.E2BTrafficTokenHeader} {
		for _, v := range r.Header.Values(h) {
			if s.front.CheckToken(rt.id, v) {
				return true, ""
			}
		}
	}
	if rt.prefix == "" {
		// Every cookie of the name: a sandbox's page may set one for the
		// whole domain (cookie tossing), which must not hide the real one.
		for _, c := range r.CookiesNamed(CookieName) {
			if s.front.CheckToken(rt.id, c.Value) {
				return true, ""
			}
		}
	}
	return false, ""
}

// setCookie answers a request carrying the token in QueryParam: on the
// Host form, a GET or HEAD with the right token gets it as a cookie of
// the port's host and a redirect to the same URL without the parameter.
func (s *Server) setCookie(w http.ResponseWriter, r *http.Request, rt route, tok string, ok bool) {
	switch {
	case rt.prefix != "":
		httpError(w, http.StatusBadRequest, "the path form takes the traffic token in the "+core.TrafficTokenHeader+" header only: every sandbox shares its address, so a cookie would be every sandbox's page's to use. Open private ports in a browser through the Host form (sandboxd --ports-domain)")
		return
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		httpError(w, http.StatusBadRequest, "the "+QueryParam+" parameter opens a port in a browser: GET or HEAD only")
		return
	case !ok:
		s.denied(w)
		return
	}
	q := r.URL.Query()
	q.Del(QueryParam)
	u := url.URL{Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: q.Encode()}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: tok, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil || strings.HasPrefix(s.front.Base(), "https:")})
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	http.Redirect(w, r, u.String(), http.StatusSeeOther)
}

// denied answers a request without the sandbox's token, to a sandbox that
// is not public or does not exist: the same answer for both.
func (s *Server) denied(w http.ResponseWriter) {
	httpError(w, http.StatusUnauthorized, "this port needs its sandbox's traffic token (GetHost's traffic_token) in the "+
		core.TrafficTokenHeader+" header, or, in a browser, once as ?"+QueryParam+"=TOKEN")
}

// domainError answers an authorised request the domain refused.
func (s *Server) domainError(w http.ResponseWriter, r *http.Request, rt route, err error) {
	switch core.ClassOf(err) {
	case core.ErrNotFound:
		httpError(w, http.StatusNotFound, fmt.Sprintf("sandbox %s does not exist (deleted or expired)", rt.id))
	case core.ErrFailedPrecondition, core.ErrInvalidArgument, core.ErrNotImplemented:
		httpError(w, http.StatusBadGateway, err.Error())
	case core.ErrUnavailable, core.ErrResourceExhausted:
		w.Header().Set("Retry-After", "1")
		httpError(w, http.StatusServiceUnavailable, err.Error())
	default:
		if r.Context().Err() == nil {
			s.log.Error("ports: the domain failed", "sandbox_id", rt.id, "port", rt.port, "error", err)
		}
		httpError(w, http.StatusBadGateway, "internal error; see the sandboxd log")
	}
}

// wake wakes a hibernated sandbox for an authorised request, as its
// tenant, within WakeTimeout, then waits up to ReadyTimeout for the port
// to accept connections. False once it has answered.
func (s *Server) wake(w http.ResponseWriter, r *http.Request, rt route, t core.PortTarget) (core.PortTarget, bool) {
	ctx, cancel := context.WithTimeout(core.WithCaller(r.Context(), core.Caller{Tenant: t.Tenant, Name: CallerName}), s.cfg.WakeTimeout)
	defer cancel()
	start := time.Now()
	if _, _, err := s.m.Wake(ctx, rt.id); err != nil {
		if errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil {
			httpError(w, http.StatusGatewayTimeout, fmt.Sprintf("sandbox %s did not wake within %v", rt.id, s.cfg.WakeTimeout))
			return t, false
		}
		if r.Context().Err() == nil {
			s.domainError(w, r, rt, err)
		}
		return t, false
	}
	t, err := s.m.PortTarget(core.WithCaller(r.Context(), admin), rt.id, rt.port, true)
	if err != nil {
		s.domainError(w, r, rt, err)
		return t, false
	}
	s.log.Info("ports: woke a sandbox for a request", "sandbox_id", rt.id, "port", rt.port, "took", time.Since(start).Round(time.Millisecond))
	if t.State == core.StateRunning && t.Addr.IsValid() {
		s.awaitPort(r.Context(), t.Addr)
	}
	return t, true
}

// awaitPort waits, at most ReadyTimeout, until addr accepts a connection:
// a woken sandbox's server may take a moment to listen again. A refused
// connection is retried every 100 ms; the proxy then says what it finds.
func (s *Server) awaitPort(ctx context.Context, addr netip.AddrPort) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ReadyTimeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "tcp", addr.String())
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

type targetKey struct{}

// target is where the proxy sends a request (put in its context).
type target struct {
	route
	addr netip.AddrPort
}

// rewrite makes the request to the sandbox's port: its address, the path
// form's prefix taken off (and named in X-Forwarded-Prefix), the
// X-Forwarded headers set afresh, and the token's carriers removed (the
// sandbox never sees a token, whatever it is worth to it).
func rewrite(pr *httputil.ProxyRequest) {
	t := pr.In.Context().Value(targetKey{}).(*target)
	out := pr.Out
	out.URL.Scheme = "http"
	out.URL.Host = t.addr.String()
	out.Header.Del("X-Forwarded-Prefix")
	if t.prefix != "" {
		out.URL.Path = strings.TrimPrefix(out.URL.Path, t.prefix)
		if out.URL.RawPath != "" {
			out.URL.RawPath = strings.TrimPrefix(out.URL.RawPath, t.prefix)
		}
		out.Header.Set("X-Forwarded-Prefix", t.prefix)
	}
	pr.SetXForwarded()
	out.Header.Del(core.TrafficTokenHeader)
	out.Header.Del(core.E2BTrafficTokenHeader)
	if cookies := out.Cookies(); len(cookies) > 0 {
		out.Header.Del("Cookie")
		var kept []string
		for _, c := range cookies {
			if c.Name != CookieName {
				kept = append(kept, c.String())
			}
		}
		if len(kept) > 0 {
			out.Header.Set("Cookie", strings.Join(kept, "; "))
		}
	}
	if q := out.URL.Query(); q.Has(QueryParam) {
		q.Del(QueryParam)
		out.URL.RawQuery = q.Encode()
	}
}

// modifyResponse drops the sandbox's attempts to set the front's cookie.
func modifyResponse(resp *http.Response) error {
	set := resp.Header.Values("Set-Cookie")
	if len(set) == 0 {
		return nil
	}
	resp.Header.Del("Set-Cookie")
	for _, v := range set {
		if c, err := http.ParseSetCookie(v); err == nil && c.Name == CookieName {
			continue
		}
		resp.Header.Add("Set-Cookie", v)
	}
	return nil
}

// proxyError answers a request the proxy could not complete: a fixed
// message per cause, never the sandbox's address.
func (s *Server) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	t, _ := r.Context().Value(targetKey{}).(*target)
	where := "the sandbox's port"
	if t != nil {
		where = fmt.Sprintf("port %d of sandbox %s", t.port, t.id)
	}
	var mbe *http.MaxBytesError
	switch {
	case r.Context().Err() != nil:
		return // the client went away
	case errors.As(err, &mbe):
		httpError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is larger than %d bytes, the most the front passes on", mbe.Limit))
	case errors.Is(err, syscall.ECONNREFUSED):
		httpError(w, http.StatusBadGateway, "nothing listens on "+where+" (a server must listen on 0.0.0.0, not only 127.0.0.1)")
	case errors.As(err, new(*dialError)) && isTimeout(err):
		httpError(w, http.StatusGatewayTimeout, fmt.Sprintf("%s could not be connected to within %v", where, dialTimeout))
	case isTimeout(err):
		httpError(w, http.StatusGatewayTimeout, fmt.Sprintf("%s did not answer within %v (sandboxd --ports-response-timeout)", where, s.cfg.ResponseTimeout))
	default:
		s.log.Debug("ports: proxying failed", "to", where, "error", err)
		httpError(w, http.StatusBadGateway, where+" did not answer with HTTP (the connection failed or closed)")
	}
}

// dialError is a failure to connect to a sandbox's port (as against one
// to get an answer from it).
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// httpError answers with a text message (through httpguard's writer, which
// closes the connection when the request's body was not read).
func httpError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	fmt.Fprintln(w, msg)
}

// requestCaps counts the requests in progress, per sandbox, per tenant
// and in all.
type requestCaps struct {
	perSandbox, perTenant, total int
	mu                           sync.Mutex
	n                            map[string]int // by sandbox
	byTenant                     map[string]int
	all                          int
}

// The caps take reports reached.
const (
	capSandbox = "sandbox"
	capTenant  = "tenant"
	capServer  = "server"
)

// take counts a request to sandbox id of tenant, or names the narrowest
// cap it would pass.
func (c *requestCaps) take(id, tenant string) (release func(), full string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.n[id] >= c.perSandbox:
		return nil, capSandbox
	case c.byTenant[tenant] >= c.perTenant:
		return nil, capTenant
	case c.all >= c.total:
		return nil, capServer
	}
	c.all++
	c.n[id]++
	c.byTenant[tenant]++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.all--
			if c.n[id]--; c.n[id] == 0 {
				delete(c.n, id)
			}
			if c.byTenant[tenant]--; c.byTenant[tenant] == 0 {
				delete(c.byTenant, tenant)
			}
		})
	}, ""
}

// inProgress is the number of requests in progress to sandbox id (tests).
func (c *requestCaps) inProgress(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[id]
}
