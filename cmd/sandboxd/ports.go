package main

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/secretfile"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/door/ports"
)

// portsSecretFile, in the state directory, keys the sandboxes' traffic
// tokens (core.PortsFront) on the Docker backend: removing it (and
// restarting) revokes them all. The kubernetes backend's replicas derive
// theirs (portsSecretLabel, kubeConfig.replicaSecret), so that a URL one
// gave is served by all.
const (
	portsSecretFile  = "ports-secret"
	portsSecretLabel = "sandboxd ports traffic-token secret v1"
)

// portsFlags configure the HTTP front for sandbox ports
// (orchestrator/door/ports).
type portsFlags struct {
	listen, domain, url string
	tlsCert, tlsKey     string
	// The caps on requests in progress; 0 for a sandbox's or a tenant's:
	// derived (fitTenants, ports.Config).
	maxPerSandbox, maxPerTenant, max int
	responseTimeout                  time.Duration
}

// register adds the [ports] section's settings (--ports-*).
func (p *portsFlags) register(s sectionReg) {
	s.String("listen", &p.listen, "ports-listen", "", "`address` of the HTTP front for networked sandboxes' ports (host:port; empty: off): GetHost's URLs, proxied to the port inside the sandbox (HTTP/1.1, HTTP/2, WebSocket, SSE), private unless the sandbox's policy allows public traffic. Needs --allow-network (on kubernetes, --kube-egress-cni too)")
	s.String("domain", &p.domain, "ports-domain", "", "`domain` whose every name resolves to the front (wildcard DNS): port URLs are then http(s)://PORT-SANDBOXID.DOMAIN/ (E2B's form), else http(s)://FRONT/sandboxes/SANDBOXID/PORT/. \"localhost\" works in browsers without DNS")
	s.String("url", &p.url, "ports-url", "", "the front's `URL` as clients reach it, http(s)://HOST[:PORT] (default: http://, or https:// with --ports-tls-cert, and the --ports-listen address): the scheme and port of the URLs GetHost returns, and the host of the path form; set it when the front listens on every address or sits behind a proxy")
	s.String("tls_cert", &p.tlsCert, "ports-tls-cert", "", "TLS certificate `file` (PEM) of the front, for --ports-domain a wildcard one; with --ports-tls-key the front serves HTTPS (and HTTP/2 over it); beyond loopback without them sandboxd warns, as traffic tokens then travel in clear text")
	s.String("tls_key", &p.tlsKey, "ports-tls-key", "", "TLS private key `file` (PEM), for --ports-tls-cert")
	s.Int("max_requests_per_sandbox", &p.maxPerSandbox, "ports-max-requests-per-sandbox", 0, fmt.Sprintf("most requests in progress to one sandbox's ports (a WebSocket or an event stream counts while it lasts); past it, or past the tenant's or the front's cap, the front answers 503 naming the narrowest (0: %d, or --ports-max-requests-per-tenant if lower)", ports.DefaultMaxRequestsPerSandbox))
	s.Int("max_requests_per_tenant", &p.maxPerTenant, "ports-max-requests-per-tenant", 0, "most requests in progress to the ports of one tenant's sandboxes together, so that one tenant's hung ports cannot take every place of the front; past it the front answers 503 (0: a quarter of --ports-max-requests, or all of it when the server has one tenant: no --auth-tokens, or a token file naming one)")
	s.Int("max_requests", &p.max, "ports-max-requests", ports.DefaultMaxRequests, "most requests in progress to all sandboxes' ports; past it the front answers 503. Only protects the host; keep it well above --ports-max-requests-per-tenant")
	s.Duration("response_timeout", &p.responseTimeout, "ports-response-timeout", ports.DefaultResponseTimeout, "how long the front waits for a sandbox's port to answer a request (its response's headers, once the request is sent); past it the client gets 504 and the request's place is freed. A response's body (an event stream, a WebSocket) has no limit")
}

// fitTenants fits the per-tenant cap to the number of tenants the server
// has: with one, a tenant's cap not given is the front's.
func (p *portsFlags) fitTenants(tenants int) {
	if tenants <= 1 && p.maxPerTenant == 0 {
		p.maxPerTenant = p.max
	}
}

// check refuses settings that would fail later or mean nothing.
func (p *portsFlags) check(c *config) error {
	if p.listen == "" {
		if p.domain != "" || p.url != "" || p.tlsCert != "" || p.tlsKey != "" {
			return errors.New("--ports-domain, --ports-url and --ports-tls-* need --ports-listen")
		}
		return nil
	}
	if _, _, err := net.SplitHostPort(p.listen); err != nil {
		return fmt.Errorf("--ports-listen %q: %v", p.listen, err)
	}
	switch {
	case c.backend == backendKubernetes && !c.kube.egressCNI:
		return errors.New("--ports-listen with --backend kubernetes needs --kube-egress-cni: only networked sandboxes have ports")
	case !c.policy.AllowNetwork:
		return errors.New("--ports-listen needs --allow-network: only networked sandboxes have ports")
	case (p.tlsCert == "") != (p.tlsKey == ""):
		return errors.New("--ports-tls-cert and --ports-tls-key go together")
	case p.maxPerSandbox < 0 || p.maxPerTenant < 0 || p.max < 1:
		return errors.New("--ports-max-requests must be positive, --ports-max-requests-per-sandbox and --ports-max-requests-per-tenant not negative")
	case p.maxPerTenant > p.max:
		return fmt.Errorf("--ports-max-requests-per-tenant %d is above --ports-max-requests %d", p.maxPerTenant, p.max)
	case p.maxPerSandbox > cmp.Or(p.maxPerTenant, max(p.max/4, 1)):
		return fmt.Errorf("--ports-max-requests-per-sandbox %d is above the tenant's cap (--ports-max-requests-per-tenant %d; 0: a quarter of --ports-max-requests %d)", p.maxPerSandbox, p.maxPerTenant, p.max)
	case p.responseTimeout <= 0:
		return errors.New("--ports-response-timeout must be positive")
	}
	// The URL and the domain are checked as the front takes them.
	_, err := core.NewPortsFront(p.baseURL("127.0.0.1:1"), p.domain, make([]byte, secretfile.Size))
	if err != nil {
		return fmt.Errorf("--ports-url/--ports-domain: %v", err)
	}
	return nil
}

// baseURL is --ports-url, or the front's own address (bound) with the
// scheme its TLS settings give.
func (p *portsFlags) baseURL(bound string) string {
	if p.url != "" {
		return p.url
	}
	if p.tlsCert != "" {
		return "https://" + bound
	}
	return "http://" + bound
}

// newPortsFront makes the front's URLs and tokens: the secret from the
// state directory (Docker) or derived alike by every replica (kubernetes),
// the URL from the flags and the bound listener.
func newPortsFront(cfg config, lis net.Listener, log *slog.Logger) (*core.PortsFront, error) {
	p := cfg.ports
	var secret []byte
	var err error
	if cfg.backend == backendKubernetes {
		secret, err = cfg.kube.replicaSecret(portsSecretLabel, "the ports' traffic tokens")
	} else {
		secret, err = secretfile.Load(filepath.Join(cfg.docker.StateDir, portsSecretFile))
	}
	if err != nil {
		return nil, fmt.Errorf("the ports front's secret: %w", err)
	}
	bound := lis.Addr().String()
	if ip := lis.Addr().(*net.TCPAddr).IP; p.url == "" && ip.IsUnspecified() {
		log.Warn("the ports front listens on every address but --ports-url is not set: GetHost's URLs name "+bound+"; set --ports-url to the address clients reach", "ports_listen", bound)
	}
	return core.NewPortsFront(p.baseURL(bound), p.domain, secret)
}

// servePorts serves the front on lis over m until the returned stop is
// called.
func servePorts(lis net.Listener, front *core.PortsFront, m manager, p portsFlags, cfg config, log *slog.Logger) (*ports.Server, func(), error) {
	srv, err := ports.New(m, ports.Config{Front: front, Logger: log.With("door", "ports"),
		MaxRequestsPerSandbox: p.maxPerSandbox, MaxRequestsPerTenant: p.maxPerTenant, MaxRequests: p.max, ResponseTimeout: p.responseTimeout})
	if err != nil {
		return nil, nil, err
	}
	hs := srv.HTTPServer()
	useTLS := p.tlsCert != ""
	if useTLS {
		cert, err := tls.LoadX509KeyPair(p.tlsCert, p.tlsKey)
		if err != nil {
			return nil, nil, fmt.Errorf("--ports-tls-cert/--ports-tls-key: %w", err)
		}
		hs.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	go func() {
		l := srv.LimitListener(lis)
		var err error
		if useTLS {
			err = hs.ServeTLS(l, "", "")
		} else {
			err = hs.Serve(l)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("serving the ports front", "error", err)
		}
	}()
	if ip := lis.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() && !useTLS {
		log.Warn("the ports front serves beyond loopback without TLS: traffic tokens travel in clear text; use --ports-tls-cert/--ports-tls-key unless the network is trusted", "ports_listen", lis.Addr().String())
	}
	log.Info("serving the ports front", "ports_listen", lis.Addr().String(), "url", front.Base(), "domain", front.Domain(), "tls", useTLS)
	var once sync.Once
	return srv, func() { once.Do(func() { shutdownHTTP(hs, cfg.shutdownTimeout) }) }, nil
}
