package egress

import (
	"context"
	"crypto/x509"
	"log/slog"
	"net"
	"net/netip"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Resolver resolves names on the host (net.Resolver does, honouring
// /etc/hosts; tests give a fixed table).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config configures a Gateway. Zero fields take the defaults given.
type Config struct {
	Bounds Bounds
	// Resolver resolves allowed names; default net.DefaultResolver.
	Resolver Resolver
	// RootCAs verify upstream servers of intercepted (rule) connections;
	// nil: the host's roots (Go honours SSL_CERT_FILE and SSL_CERT_DIR).
	RootCAs *x509.CertPool
	// HostAddrs lists the host's own addresses, which no sandbox reaches;
	// default: read from the host's interfaces, refreshed now and then.
	HostAddrs func() []netip.Addr
	// Dial dials upstream; default a net.Dialer with a 10 s timeout. Tests
	// substitute one.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Caps: connections open per sandbox (default 256) and in all
	// (default 4096); DNS queries per second per sandbox (default 100,
	// burst 200). Past a cap the connection or query is refused and
	// counted; one sandbox's flood never slows another's egress.
	MaxConnsPerSandbox, MaxConns int
	DNSPerSecond                 float64
	DNSBurst                     int
	// DenialLog is the size of each sandbox's ring of denials; default 256.
	DenialLog int
	Logger    *slog.Logger
}

// Gateway judges and carries sandboxes' egress. Safe for concurrent use.
type Gateway struct {
	// implementation: the egress package's to fill in
}

// New returns a gateway; it serves once ServeTCP and ServeDNS are called.
func New(cfg Config) *Gateway { panic("egress: not implemented yet") }

// Attach starts judging traffic from src as sandbox id's, under p, with
// ca terminating TLS for p's rules (nil: rules are not applied, and a
// rule's domain is passed through). Attaching an id again replaces its
// source, policy and CA.
func (g *Gateway) Attach(id string, src netip.Addr, p *core.CompiledPolicy, ca *CA) {
	panic("egress: not implemented yet")
}

// Update replaces id's policy: new queries and connections follow it at
// once, and open connections whose destination the new policy refuses are
// closed.
func (g *Gateway) Update(id string, p *core.CompiledPolicy) { panic("egress: not implemented yet") }

// Detach stops serving id: its open connections are closed and its
// counters and denials forgotten.
func (g *Gateway) Detach(id string) { panic("egress: not implemented yet") }

// ServeTCP accepts the sandboxes' redirected connections on l until l is
// closed; origDst recovers a connection's original destination
// (OriginalDst on Linux after a DNAT).
func (g *Gateway) ServeTCP(l net.Listener, origDst func(net.Conn) (netip.AddrPort, error)) error {
	panic("egress: not implemented yet")
}

// ServeDNS answers the sandboxes' queries on pc until it is closed.
func (g *Gateway) ServeDNS(pc net.PacketConn) error { panic("egress: not implemented yet") }

// Stats returns id's counters.
func (g *Gateway) Stats(id string) Stats { panic("egress: not implemented yet") }

// Denials returns id's most recent denials, oldest first.
func (g *Gateway) Denials(id string) []Denial { panic("egress: not implemented yet") }

// Close stops the gateway: every connection is closed.
func (g *Gateway) Close() error { panic("egress: not implemented yet") }

// CA is a sandbox's own certificate authority, which it trusts (its
// certificate is installed in the sandbox) and with which the gateway
// terminates TLS for the domains of the sandbox's rules. Its key stays on
// the host.
type CA struct {
	// implementation: the egress package's to fill in
}

// NewCA makes a CA for sandbox id (ECDSA P-256, valid 10 years, name
// "sandboxd sandbox <id>").
func NewCA(id string) (*CA, error) { panic("egress: not implemented yet") }

// LoadCA reads a CA persisted with PEM.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) { panic("egress: not implemented yet") }

// PEM returns the CA's certificate and key, for persisting on the host.
func (ca *CA) PEM() (certPEM, keyPEM []byte) { panic("egress: not implemented yet") }

// CertPEM returns the certificate alone: what the sandbox gets.
func (ca *CA) CertPEM() []byte { panic("egress: not implemented yet") }
