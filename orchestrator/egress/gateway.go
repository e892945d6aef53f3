package egress

import (
	"context"
	"crypto/x509"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

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
	// default: the host's interfaces' addresses, followed as they change
	// (hostAddrs), a destination refused from the moment the kernel
	// reports it the host's.
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

	// PeekBytes bounds what the gateway reads of a connection before
	// deciding (a TLS ClientHello, an HTTP request's head); default 16 KiB.
	PeekBytes int
	// PeekTimeout bounds the time it waits for them; default 10 s.
	PeekTimeout time.Duration
	// FirstByteTimeout: a connection whose destination address alone is
	// allowed and that sends nothing for this long is taken for a
	// protocol whose server speaks first (SSH, SMTP, MySQL) and spliced
	// to that address without a name; default 1 s. A connection whose
	// address alone is refused waits the whole PeekTimeout for a name.
	FirstByteTimeout time.Duration
	// IdleTimeout closes a connection on which nothing moved either way
	// for this long; default 10 min. MaxConnLifetime closes any
	// connection this old; default 24 h.
	IdleTimeout, MaxConnLifetime time.Duration
}

// Defaults and fixed bounds. The fixed ones are not configurable because
// nothing a deployment varies depends on them.
const (
	defaultMaxConnsPerSandbox = 256
	defaultMaxConns           = 4096
	defaultDNSPerSecond       = 100
	defaultDNSBurst           = 200
	defaultDenialLog          = 256
	defaultPeekBytes          = 16 << 10
	defaultPeekTimeout        = 10 * time.Second
	defaultFirstByteTimeout   = time.Second
	defaultIdleTimeout        = 10 * time.Minute
	defaultMaxConnLifetime    = 24 * time.Hour

	dialTimeout    = 10 * time.Second // the whole dial phase, every address tried
	resolveTimeout = 5 * time.Second  // one lookup on the host

	// Work in flight: DNS queries being answered and host lookups, per
	// sandbox and in all. Past them a DNS query is dropped (counted as
	// rate limited) and a connection's lookup waits its turn, within its
	// dial phase.
	dnsInFlightPerSandbox  = 32
	dnsInFlightTotal       = 512
	lookupsPerSandbox      = 8
	lookupsTotal           = 64
	resolveCacheSize       = 4096
	resolveCacheTTL        = 10 * time.Second
	resolveCacheNegTTL     = 5 * time.Second
	dnsReaders             = 2
	yieldEvery             = 16 // accept and DNS loops: see readDNS
	dnsReadBuffer          = 1 << 20
	dnsAnswerTTL           = 10 // seconds
	maxDNSAnswers          = 8
	maxDNSQueriesPerTCP    = 32
	dnsTCPTimeout          = 10 * time.Second
	maxDNSMessage          = 4096 // a query is tens of bytes
	deniedReplyWriteBudget = time.Second
)

// Gateway judges and carries sandboxes' egress. Safe for concurrent use.
//
// Locks: Gateway.mu → sandbox.mu (outermost first); conn.mu, CA.mu and
// the resolver's are leaves. Each is held only for map and field updates:
// nothing is locked while reading from or writing to a connection,
// resolving or dialling, so one sandbox's slow or hostile traffic never
// holds a lock another sandbox's traffic needs. The accept and DNS loops
// take no lock at all to find a source's sandbox (sources).
type Gateway struct {
	cfg   Config
	log   *slog.Logger
	epoch time.Time
	res   *resolver

	mu     sync.RWMutex
	byID   map[string]*sandbox
	bySrc  map[netip.Addr]*sandbox
	closed bool
	// sources is a read-only copy of bySrc, replaced whole under mu: the
	// accept and DNS loops look every connection and packet up in it
	// without a lock, a flood included.
	sources   atomic.Pointer[map[netip.Addr]*sandbox]
	listeners map[io.Closer]struct{}

	open        atomic.Int64 // connections open, all sandboxes (MaxConns)
	dnsInFlight atomic.Int64
	// Totals: what detached sandboxes counted (under mu), and what came
	// from no attached sandbox.
	gone                 Stats
	strayConns, strayDNS atomic.Uint64

	ix   *interceptor
	done chan struct{}
	// host follows the host's addresses when Config.HostAddrs is unset.
	host *hostAddrs
}

// New returns a gateway; it serves once ServeTCP and ServeDNS are called.
func New(cfg Config) *Gateway {
	if cfg.Resolver == nil {
		cfg.Resolver = absResolver{&net.Resolver{PreferGo: true}}
	}
	if cfg.Dial == nil {
		d := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
		cfg.Dial = d.DialContext
	}
	setDefault(&cfg.MaxConnsPerSandbox, defaultMaxConnsPerSandbox)
	setDefault(&cfg.MaxConns, defaultMaxConns)
	setDefault(&cfg.DNSPerSecond, defaultDNSPerSecond)
	setDefault(&cfg.DNSBurst, defaultDNSBurst)
	setDefault(&cfg.DenialLog, defaultDenialLog)
	setDefault(&cfg.PeekBytes, defaultPeekBytes)
	setDefault(&cfg.PeekTimeout, defaultPeekTimeout)
	setDefault(&cfg.FirstByteTimeout, defaultFirstByteTimeout)
	setDefault(&cfg.IdleTimeout, defaultIdleTimeout)
	setDefault(&cfg.MaxConnLifetime, defaultMaxConnLifetime)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	g := &Gateway{
		cfg:       cfg,
		log:       cfg.Logger.With("component", "egress"),
		epoch:     time.Now(),
		res:       newResolver(cfg.Resolver),
		byID:      map[string]*sandbox{},
		bySrc:     map[netip.Addr]*sandbox{},
		listeners: map[io.Closer]struct{}{},
		done:      make(chan struct{}),
	}
	if cfg.HostAddrs == nil {
		g.host = newHostAddrs(g.log)
	}
	g.ix = newInterceptor(g)
	return g
}

func setDefault[T int | float64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// sandbox is the gateway's state for one attached sandbox. Its counters
// are atomics; the rest is guarded by mu.
type sandbox struct {
	id      string
	limiter *rate.Limiter // DNS queries, and host lookups of connections
	lookups chan struct{} // host lookups in flight (lookupsPerSandbox)
	open    atomic.Int64  // connections open (MaxConnsPerSandbox)
	dnsBusy atomic.Int64  // DNS queries being answered (dnsInFlightPerSandbox)
	// dnsQuiet: until when (ns since g.epoch) the sandbox's DNS queries
	// are dropped without asking the limiter (admitQuery).
	dnsQuiet atomic.Int64
	st       counters

	mu       sync.Mutex
	srcs     []netip.Addr
	policy   *core.CompiledPolicy
	ca       *CA
	conns    map[*conn]struct{}
	detached bool
	denials  ring
}

type counters struct {
	bytesOut, bytesIn, connsAllowed, connsDenied, dnsAllowed, dnsDenied,
	ruleRequests, dnsRateLimited, connsRefusedAtCap atomic.Uint64
}

// current returns the sandbox's policy and CA.
func (sb *sandbox) current() (*core.CompiledPolicy, *CA) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.policy, sb.ca
}

// Attach starts judging traffic from src as sandbox id's, under p, with
// ca terminating TLS for p's rules (nil: rules are not applied, and a
// rule's domain is passed through). Attaching an id again replaces its
// sources, policy and CA (open connections are judged again, as by
// Update). A nil p refuses everything. A source attached to another id
// moves to this one.
func (g *Gateway) Attach(id string, src netip.Addr, p *core.CompiledPolicy, ca *CA) {
	g.AttachSources(id, []netip.Addr{src}, p, ca)
}

// AttachSources is Attach for a sandbox whose traffic comes from several
// addresses: a gateway inside the sandbox's own network namespace (the
// Kubernetes backend's, in its Pod) sees connections from the Pod's
// address, and DNS queries sent to a loopback resolver from 127.0.0.1.
func (g *Gateway) AttachSources(id string, srcs []netip.Addr, p *core.CompiledPolicy, ca *CA) {
	srcs = slices.Clone(srcs)
	for i := range srcs {
		srcs[i] = srcs[i].Unmap()
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return
	}
	sb := g.byID[id]
	if sb == nil {
		sb = &sandbox{
			id:      id,
			limiter: rate.NewLimiter(rate.Limit(g.cfg.DNSPerSecond), g.cfg.DNSBurst),
			lookups: make(chan struct{}, lookupsPerSandbox),
			conns:   map[*conn]struct{}{},
			denials: ring{size: g.cfg.DenialLog},
		}
		g.byID[id] = sb
	}
	for _, src := range srcs {
		if prev := g.bySrc[src]; prev != nil && prev != sb {
			g.log.Warn("egress: a source moved to another sandbox", "src", src, "from", prev.id, "to", id)
		}
	}
	sb.mu.Lock()
	for _, old := range sb.srcs {
		if !slices.Contains(srcs, old) && g.bySrc[old] == sb {
			delete(g.bySrc, old)
		}
	}
	sb.srcs = srcs
	sb.ca = ca
	sb.mu.Unlock()
	for _, src := range srcs {
		g.bySrc[src] = sb
	}
	g.publishSources()
	g.mu.Unlock()
	g.setPolicy(sb, p)
}

// Update replaces id's policy: new queries and connections follow it at
// once, and open connections whose destination the new policy refuses are
// closed.
func (g *Gateway) Update(id string, p *core.CompiledPolicy) {
	if sb := g.sandbox(id); sb != nil {
		g.setPolicy(sb, p)
	}
}

// setPolicy installs p and closes the open connections it refuses. A
// connection still being judged compares the policy it was judged under
// with the current one when it records its verdict (conn.settle), so
// none slips between the two.
func (g *Gateway) setPolicy(sb *sandbox, p *core.CompiledPolicy) {
	type closing struct {
		c            *conn
		name, reason string
		target       netip.AddrPort
	}
	var refused []closing
	sb.mu.Lock()
	sb.policy = p
	for c := range sb.conns {
		if reason := c.rejudge(g, p); reason != "" {
			refused = append(refused, closing{c, c.name, reason, c.target})
		}
	}
	sb.mu.Unlock()
	for _, r := range refused {
		g.log.Debug("egress: open connection closed by a policy update", "sandbox", sb.id, "name", r.name, "addr", r.target, "reason", r.reason)
		r.c.close()
	}
}

// Detach stops serving id: its open connections are closed and its
// counters and denials forgotten.
func (g *Gateway) Detach(id string) {
	g.mu.Lock()
	sb := g.byID[id]
	if sb == nil {
		g.mu.Unlock()
		return
	}
	delete(g.byID, id)
	sb.mu.Lock()
	for _, src := range sb.srcs {
		if g.bySrc[src] == sb {
			delete(g.bySrc, src)
		}
	}
	g.gone.add(sb.stats())
	sb.mu.Unlock()
	g.publishSources()
	g.mu.Unlock()
	sb.closeAll()
}

// closeAll marks sb detached and closes its connections; a connection
// accepted concurrently sees the mark when it registers, and closes.
func (sb *sandbox) closeAll() {
	sb.mu.Lock()
	sb.detached = true
	conns := make([]*conn, 0, len(sb.conns))
	for c := range sb.conns {
		conns = append(conns, c)
	}
	sb.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

func (g *Gateway) sandbox(id string) *sandbox {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.byID[id]
}

// bySource is the sandbox attached at a, or nil.
func (g *Gateway) bySource(a netip.Addr) *sandbox {
	if m := g.sources.Load(); m != nil {
		return (*m)[a.Unmap()]
	}
	return nil
}

// publishSources copies bySrc for bySource (g.mu held).
func (g *Gateway) publishSources() {
	m := maps.Clone(g.bySrc)
	g.sources.Store(&m)
}

// Stats returns id's counters.
func (g *Gateway) Stats(id string) Stats {
	sb := g.sandbox(id)
	if sb == nil {
		return Stats{}
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.stats()
}

// stats reads sb's counters (sb.mu held, for the denial ring's).
func (sb *sandbox) stats() Stats {
	return Stats{
		BytesOut:          sb.st.bytesOut.Load(),
		BytesIn:           sb.st.bytesIn.Load(),
		ConnsAllowed:      sb.st.connsAllowed.Load(),
		ConnsDenied:       sb.st.connsDenied.Load(),
		DNSAllowed:        sb.st.dnsAllowed.Load(),
		DNSDenied:         sb.st.dnsDenied.Load(),
		ConnsOpen:         int(sb.open.Load()),
		RuleRequests:      sb.st.ruleRequests.Load(),
		DeniedLogDropped:  sb.denials.dropped,
		DNSRateLimited:    sb.st.dnsRateLimited.Load(),
		ConnsRefusedAtCap: sb.st.connsRefusedAtCap.Load(),
	}
}

// add sums o's counters into s; ConnsOpen is not a counter, and is left.
func (s *Stats) add(o Stats) {
	s.BytesOut += o.BytesOut
	s.BytesIn += o.BytesIn
	s.ConnsAllowed += o.ConnsAllowed
	s.ConnsDenied += o.ConnsDenied
	s.DNSAllowed += o.DNSAllowed
	s.DNSDenied += o.DNSDenied
	s.RuleRequests += o.RuleRequests
	s.DeniedLogDropped += o.DeniedLogDropped
	s.DNSRateLimited += o.DNSRateLimited
	s.ConnsRefusedAtCap += o.ConnsRefusedAtCap
}

// Totals are the gateway's counters since it started, for the server's
// metrics: every sandbox's, those detached since included, so that each
// only ever grows (a sandbox's own Stats start again at each Attach after
// a Detach: a wake).
type Totals struct {
	// Stats sums the counters of every sandbox the gateway served;
	// ConnsOpen is the connections open now, every sandbox's.
	Stats
	// Sandboxes is the number of sandboxes attached now.
	Sandboxes int
	// DNSInFlight is the number of DNS queries being answered now.
	DNSInFlight int
	// StrayConns and StrayDNS count connections and DNS packets from no
	// attached sandbox (a sandbox being detached, or a source address
	// the gateway does not know), closed or dropped unread.
	StrayConns, StrayDNS uint64
}

// Counters returns the gateway's totals and the counters of every
// sandbox attached now, by ID, read together (for metrics scrapes: one
// pass, one lock of the gateway's).
func (g *Gateway) Counters() (Totals, map[string]Stats) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	t := Totals{Stats: g.gone, Sandboxes: len(g.byID), DNSInFlight: int(g.dnsInFlight.Load()),
		StrayConns: g.strayConns.Load(), StrayDNS: g.strayDNS.Load()}
	t.ConnsOpen = int(g.open.Load())
	per := make(map[string]Stats, len(g.byID))
	for id, sb := range g.byID {
		sb.mu.Lock()
		st := sb.stats()
		sb.mu.Unlock()
		t.add(st)
		per[id] = st
	}
	return t, per
}

// Totals returns the gateway's totals (Counters).
func (g *Gateway) Totals() Totals {
	t, _ := g.Counters()
	return t
}

// Denials returns id's most recent denials, oldest first.
func (g *Gateway) Denials(id string) []Denial {
	sb := g.sandbox(id)
	if sb == nil {
		return nil
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.denials.list()
}

// deny records a denial: counted, kept in the sandbox's ring, and logged
// for the operator at debug level (a sandbox can cause any number).
func (g *Gateway) deny(sb *sandbox, d Denial) {
	d.Time = time.Now()
	if d.Kind == "dns" {
		sb.st.dnsDenied.Add(1)
	} else {
		sb.st.connsDenied.Add(1)
	}
	sb.mu.Lock()
	sb.denials.add(d)
	sb.mu.Unlock()
	g.log.Debug("egress: denied", "sandbox", sb.id, "kind", d.Kind, "name", d.Name, "addr", d.Addr, "reason", d.Reason)
}

// ring is a bounded log of denials; past its size the oldest go, counted.
type ring struct {
	size    int
	buf     []Denial
	next    int // where the next denial goes once buf is full
	dropped uint64
}

func (r *ring) add(d Denial) {
	if len(r.buf) < r.size {
		r.buf = append(r.buf, d)
		return
	}
	r.buf[r.next] = d
	r.next = (r.next + 1) % r.size
	r.dropped++
}

func (r *ring) list() []Denial {
	out := make([]Denial, 0, len(r.buf))
	out = append(out, r.buf[r.next:]...)
	return append(out, r.buf[:r.next]...)
}

// Close stops the gateway: every connection is closed, and the listeners
// given to ServeTCP, ServeDNS and ServeDNSTCP with it.
func (g *Gateway) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	close(g.done)
	sbs := make([]*sandbox, 0, len(g.byID))
	for _, sb := range g.byID {
		sbs = append(sbs, sb)
	}
	ls := make([]io.Closer, 0, len(g.listeners))
	for l := range g.listeners {
		ls = append(ls, l)
	}
	g.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
	for _, sb := range sbs {
		sb.closeAll()
	}
	g.ix.close()
	if g.host != nil {
		g.host.close()
	}
	return nil
}

// serving registers l to be closed with the gateway; false if the
// gateway is closed already.
func (g *Gateway) serving(l io.Closer) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.listeners[l] = struct{}{}
	return true
}

func (g *Gateway) unserving(l io.Closer) {
	g.mu.Lock()
	delete(g.listeners, l)
	g.mu.Unlock()
}

func (g *Gateway) isClosed() bool {
	select {
	case <-g.done:
		return true
	default:
		return false
	}
}

// acquire takes a connection slot of sb and of the gateway; false past
// either cap (counted).
func (g *Gateway) acquire(sb *sandbox) bool {
	if sb.open.Add(1) > int64(g.cfg.MaxConnsPerSandbox) {
		sb.open.Add(-1)
		sb.st.connsRefusedAtCap.Add(1)
		return false
	}
	if g.open.Add(1) > int64(g.cfg.MaxConns) {
		g.open.Add(-1)
		sb.open.Add(-1)
		sb.st.connsRefusedAtCap.Add(1)
		return false
	}
	return true
}

func (g *Gateway) release(sb *sandbox) {
	sb.open.Add(-1)
	g.open.Add(-1)
}

// absResolver makes every name absolute before asking the host, so that
// the host's search domains never turn a sandbox's name into an internal
// one ("api" → "api.corp.internal"). It is Go's own resolver, which reads
// /etc/hosts, nsswitch.conf and resolv.conf like the C library's.
type absResolver struct{ r *net.Resolver }

func (a absResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	return a.r.LookupNetIP(ctx, network, host+".")
}
