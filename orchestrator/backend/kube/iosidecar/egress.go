package iosidecar

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/egress"
	sandboxiov1 "github.com/sandboxd/sandboxd/proto/sandboxio/v1"
)

// The Pod's egress gateway: a networked sandbox's only way out on the
// Kubernetes backend. It is orchestrator/egress, the gateway sandboxd runs
// on the host under Docker, run here, inside the sandbox's Pod:
//
//   - the node's CNI chain (cmd/sandbox-cni, orchestrator/backend/kube/
//     podnet) redirects the sandbox user's TCP to EgressConfig.TCP and its
//     DNS to EgressConfig.DNS, and drops everything else the user sends
//     beyond the Pod's loopback. Pod Security forbids NET_ADMIN in the
//     Pod, so neither container could install that itself;
//   - the sidecar (another user: root without NET_ADMIN) is not
//     redirected: the gateway dials what a policy allows from the Pod's
//     own address, under the NetworkPolicy networked Pods get;
//   - sandboxd gives the policy (SetEgress) once the Pod is ready and
//     whenever it changes, and reads the counters (EgressStatus). Before
//     the first policy nothing listens where the redirect leads, so every
//     connection is refused. The sidecar keeps the policy in force
//     (EgressConfig.StateFile) and puts it back if its container
//     restarts.
//
// A runtime with a network stack of its own (gVisor's netstack, a VM)
// never passes through the Pod's netfilter, and a node without the plugin
// has no redirect: in both, the sandbox user's traffic would leave the Pod
// unjudged, so the sidecar first proves the redirect is in force (probe)
// and refuses every policy until it is (ErrEgressUnavailable).

// EgressConfig turns on a sidecar's egress gateway (sandbox-iosidecar
// --egress).
type EgressConfig struct {
	// TCP, DNS and Probe are the addresses the node's redirect sends the
	// sandbox user's TCP, its DNS (UDP and TCP) and the probe's connection
	// to; podnet's defaults: 127.0.0.1:15001, :15053 and :15002.
	TCP, DNS, Probe string
	// ProbeTarget is the address whose connections the redirect sends to
	// Probe (podnet.ProbeAddr).
	ProbeTarget string
	// Source is the address the sandbox's redirected traffic comes from:
	// the Pod's IP (the downward API's status.podIP).
	Source netip.Addr
	// Resolver resolves allowed names when sandboxd gives no hosts of its
	// own; nil: the Pod's resolver.
	Resolver egress.Resolver
	// HostAddrs are the Pod's own addresses, which no sandbox reaches;
	// nil: read from its interfaces.
	HostAddrs func() []netip.Addr
	// Dial dials upstream; nil: a net.Dialer. Tests substitute one.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// StateFile, when set, is where the sidecar keeps the policy in force
	// (the last SetEgress it applied), in a directory the sandbox cannot
	// reach (an emptyDir only the sidecar mounts, which outlives its
	// container): a sidecar container that restarts puts it back in force
	// as it starts (after the probe), rather than refusing everything the
	// sandbox sends until sandboxd's next use gives it again.
	StateFile string
	// CADir, when set, is where the sidecar writes the certificate of the
	// sandbox's own CA (CACertFile) and the image's roots followed by it
	// (CABundleFile): a directory the sandbox container mounts read-only
	// (at /etc/sandboxd) and trusts, so that the gateway can terminate TLS
	// for the domains of the sandbox's header rules. Without it a policy
	// with rules is refused.
	CADir string
	// CAKeyFile is where the CA's key is kept, in a directory only the
	// sidecar mounts (beside StateFile): a restarted sidecar keeps the CA
	// the sandbox already trusts. Empty: the key is in memory only, and a
	// restart makes a new CA.
	CAKeyFile string
	// Roots is the image's CA bundle, which CABundleFile extends; empty:
	// DefaultRoots. The sidecar runs the sandbox's image, so its roots are
	// the sandbox's.
	Roots string
}

// The CA's files in EgressConfig.CADir, and the bundle they extend.
const (
	CACertFile   = "ca.pem"
	CABundleFile = "ca-bundle.pem"
	DefaultRoots = "/etc/ssl/certs/ca-certificates.crt"
)

// Where the node's redirect (orchestrator/backend/kube/podnet's defaults)
// sends the sandbox user's traffic, and the probe's target: the
// sidecar's defaults (sandbox-iosidecar's flags).
const (
	DefaultEgressTCP         = "127.0.0.1:15001"
	DefaultEgressDNS         = "127.0.0.1:15053"
	DefaultEgressProbe       = "127.0.0.1:15002"
	DefaultEgressProbeTarget = "127.0.0.2:1"
)

// Bounds of a SetEgress request beyond the policy's own (core.MaxEgressEntries).
const (
	maxEgressBlocks = 256  // allow_private and cluster entries, each
	maxEgressHosts  = 4096 // names
	maxHostAddrs    = 16   // addresses per name
	probeTimeout    = 2 * time.Second
	// maxStateBytes bounds the saved policy (StateFile): the largest
	// request the bounds above allow is well under it.
	maxStateBytes = 4 << 20
	// maxUpstreamRoots bounds the operator's extra roots (upstream_roots)
	// and the image's bundle the CA's bundle extends.
	maxUpstreamRoots = 1 << 20
	maxImageRoots    = 8 << 20
)

// egressState is the Server's gateway, made at the first SetEgress and
// again when the bounds change.
type egressState struct {
	cfg   EgressConfig
	log   *slog.Logger
	token string     // opens the rules' header values (seal.go)
	ca    *egress.CA // the sandbox's CA; nil without CADir

	probeMu sync.Mutex // one probe at a time
	probeL  net.Listener

	mu       sync.Mutex
	proven   bool // the probe passed once (the redirect cannot be taken away: no NET_ADMIN in the Pod)
	gw       *egress.Gateway
	boundKey string // the bounds gw was made with
	id       string // the sandbox attached
	gen      uint64 // the generation in force
	closed   bool
}

// newEgress opens the probe's listener; the gateway's listeners open with
// the first policy.
func newEgress(cfg EgressConfig, token string, log *slog.Logger) (*egressState, error) {
	if !cfg.Source.IsValid() {
		return nil, errors.New("egress: the Pod's address (the source of the sandbox's traffic) is required")
	}
	if cfg.TCP == "" || cfg.DNS == "" || cfg.Probe == "" || cfg.ProbeTarget == "" {
		return nil, errors.New("egress: the TCP, DNS and probe addresses and the probe's target are required")
	}
	l, err := net.Listen("tcp", cfg.Probe)
	if err != nil {
		return nil, fmt.Errorf("egress: probe listener: %w", err)
	}
	e := &egressState{cfg: cfg, log: log, token: token, probeL: l}
	if cfg.CADir != "" {
		if e.ca, err = loadOrMakeCA(cfg); err != nil {
			l.Close()
			return nil, err
		}
	}
	e.restore()
	return e, nil
}

// restore puts the saved policy (StateFile) back in force, if there is
// one: this sidecar's container restarted. A policy that cannot be (its
// probe fails) is left for sandboxd's next SetEgress, which says why.
func (e *egressState) restore() {
	if e.cfg.StateFile == "" {
		return
	}
	req, err := readEgressState(e.cfg.StateFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return
	case err != nil:
		e.log.Warn("the saved egress policy is unreadable; waiting for sandboxd's", "file", e.cfg.StateFile, "error", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*probeTimeout)
	defer cancel()
	if _, err := e.set(ctx, req); err != nil {
		e.log.Warn("the saved egress policy could not be put back in force; waiting for sandboxd's", "sandbox_id", req.GetSandboxId(), "error", err)
		return
	}
	e.log.Info("egress policy restored after a restart", "sandbox_id", req.GetSandboxId(), "generation", req.GetGeneration())
}

// readEgressState reads a saved policy, bounded.
func readEgressState(path string) (*sandboxiov1.SetEgressRequest, error) {
	b, err := readBounded(path, maxStateBytes)
	if err != nil {
		return nil, err
	}
	req := new(sandboxiov1.SetEgressRequest)
	if err := proto.Unmarshal(b, req); err != nil {
		return nil, err
	}
	return req, nil
}

// save keeps req, the policy now in force, in StateFile (written whole, then
// renamed over the old one).
func (e *egressState) save(req *sandboxiov1.SetEgressRequest) {
	if e.cfg.StateFile == "" {
		return
	}
	b, err := proto.Marshal(req)
	if err == nil {
		err = writeWhole(e.cfg.StateFile, b, 0o600)
	}
	if err != nil {
		e.log.Warn("could not save the egress policy; a restart of this sidecar waits for sandboxd's", "file", e.cfg.StateFile, "error", err)
	}
}

// probe proves the redirect is in force: a connection to ProbeTarget
// arrives at the probe's listener. Without the redirect, ProbeTarget
// refuses it, or reaches whatever listens there (a runtime may let Pods
// bind low ports), never this listener. The sandbox user may connect to
// the listener itself; only the probe's own connection (its source port)
// counts.
func (e *egressState) probe(ctx context.Context) error {
	e.probeMu.Lock()
	defer e.probeMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", e.cfg.ProbeTarget)
	if err != nil {
		return fmt.Errorf("%s refused the probe (%v)", e.cfg.ProbeTarget, err)
	}
	defer c.Close()
	want := c.LocalAddr().String()
	deadline, _ := ctx.Deadline()
	tl := e.probeL.(*net.TCPListener)
	for {
		if err := tl.SetDeadline(deadline); err != nil {
			return err
		}
		a, err := tl.Accept()
		if err != nil {
			return fmt.Errorf("the probe's connection to %s did not arrive (%v)", e.cfg.ProbeTarget, err)
		}
		got := a.RemoteAddr().String()
		a.Close()
		if got == want {
			return nil
		}
	}
}

// egressBounds are a request's bounds, checked.
type egressBounds struct {
	bounds egress.Bounds
	hosts  *egress.HostsFile // nil: the configured resolver
	roots  *x509.CertPool    // nil: the image's
	key    string
}

func parseEgressBounds(req *sandboxiov1.SetEgressRequest) (egressBounds, error) {
	var b egressBounds
	if len(req.GetCeiling()) > core.MaxEgressEntries || len(req.GetAllowPrivate()) > maxEgressBlocks || len(req.GetCluster()) > maxEgressBlocks || len(req.GetHosts()) > maxEgressHosts {
		return b, core.Invalidf("the egress bounds have too many entries")
	}
	if len(req.GetCeiling()) > 0 {
		c, err := core.CompileNetworkPolicy(core.NetworkPolicy{AllowOut: req.GetCeiling()})
		if err != nil {
			return b, core.Invalidf("the egress ceiling: %v", err)
		}
		b.bounds.Ceiling = c
	}
	prefixes := func(what string, in []string) ([]netip.Prefix, error) {
		out := make([]netip.Prefix, 0, len(in))
		for _, s := range in {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, core.Invalidf("%s: %q is not a CIDR block", what, s)
			}
			out = append(out, p.Masked())
		}
		return out, nil
	}
	var err error
	if b.bounds.AllowPrivate, err = prefixes("allow_private", req.GetAllowPrivate()); err != nil {
		return b, err
	}
	if b.bounds.Cluster, err = prefixes("cluster", req.GetCluster()); err != nil {
		return b, err
	}
	if r := req.GetUpstreamRoots(); len(r) > 0 {
		if len(r) > maxUpstreamRoots {
			return b, core.Invalidf("upstream_roots is %d bytes long; the limit is %d", len(r), maxUpstreamRoots)
		}
		pool, err := egress.RootsWithPEM(r, "upstream_roots")
		if err != nil {
			return b, core.Invalidf("%v", err)
		}
		b.roots = pool
	}
	// The key says when two requests' bounds are the same, whatever the
	// order their hosts came in.
	var key strings.Builder
	fmt.Fprintf(&key, "c=%q p=%v k=%v r=%x h=", req.GetCeiling(), b.bounds.AllowPrivate, b.bounds.Cluster, sha256.Sum256(req.GetUpstreamRoots()))
	if len(req.GetHosts()) > 0 {
		hosts := slices.SortedFunc(slices.Values(req.GetHosts()), func(a, b *sandboxiov1.EgressHost) int { return strings.Compare(a.GetName(), b.GetName()) })
		names := make(map[string][]netip.Addr, len(hosts))
		for _, h := range hosts {
			if h.GetName() == "" || len(h.GetName()) > 253 || len(h.GetAddresses()) == 0 || len(h.GetAddresses()) > maxHostAddrs {
				return b, core.Invalidf("egress host %q: a name of at most 253 bytes with 1 to %d addresses", h.GetName(), maxHostAddrs)
			}
			for _, s := range h.GetAddresses() {
				a, err := netip.ParseAddr(s)
				if err != nil {
					return b, core.Invalidf("egress host %q: %q is not an IP address", h.GetName(), s)
				}
				names[h.GetName()] = append(names[h.GetName()], a)
			}
			fmt.Fprintf(&key, "%q=%q;", h.GetName(), h.GetAddresses())
		}
		b.hosts = egress.NewHosts(names)
	}
	b.key = key.String()
	return b, nil
}

// set puts req's policy in force (SetEgress).
func (e *egressState) set(ctx context.Context, req *sandboxiov1.SetEgressRequest) (*sandboxiov1.SetEgressResponse, error) {
	if err := core.ValidateSandboxID(req.GetSandboxId()); err != nil {
		return nil, err
	}
	if len(req.GetAllowOut()) > core.MaxEgressEntries || len(req.GetDenyOut()) > core.MaxEgressEntries {
		return nil, core.Invalidf("the policy has more than %d destinations", core.MaxEgressEntries)
	}
	rules, err := OpenRules(e.token, req.GetSandboxId(), req.GetSealedRules())
	if err != nil {
		return nil, err
	}
	if len(rules) > 0 && e.ca == nil {
		return nil, reasonf(ErrRulesSealed, "this Pod's io sidecar has no CA for its sandbox to trust (the Pod was made by a sandboxd without header rules on this backend; a hibernation and wake makes it anew), so it cannot apply header rules")
	}
	policy, err := core.CompileNetworkPolicy(core.NetworkPolicy{AllowOut: req.GetAllowOut(), DenyOut: req.GetDenyOut(), Rules: rules})
	if err != nil {
		return nil, core.Invalidf("the network policy: %v", err)
	}
	b, err := parseEgressBounds(req)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, reasonf(core.ErrUnavailable, "the io sidecar is stopping")
	}
	if req.GetGeneration() < e.gen {
		return &sandboxiov1.SetEgressResponse{Applied: false, Generation: e.gen}, nil
	}
	if e.id != "" && e.id != req.GetSandboxId() {
		return nil, core.Invalidf("this Pod's gateway serves sandbox %s, not %s", e.id, req.GetSandboxId())
	}
	if !e.proven {
		if err := e.probe(ctx); err != nil {
			return nil, reasonf(ErrEgressUnavailable, "this Pod's egress redirect is not in force (%v): its node's CNI chain lacks sandboxd's egress plugin, or its runtime has a network stack of its own (gVisor, a VM); its sandbox gets no network", err)
		}
		e.proven = true
	}
	if e.gw == nil || e.boundKey != b.key {
		if err := e.startGateway(b); err != nil {
			return nil, err
		}
		// Connections come from the Pod's address; DNS sent to a
		// loopback resolver (a Pod with no nameserver asks 127.0.0.1)
		// from 127.0.0.1.
		e.gw.AttachSources(req.GetSandboxId(), []netip.Addr{e.cfg.Source, netip.AddrFrom4([4]byte{127, 0, 0, 1})}, policy, e.ca)
	} else {
		e.gw.Update(req.GetSandboxId(), policy)
	}
	e.id, e.gen = req.GetSandboxId(), req.GetGeneration()
	e.save(req)
	e.log.Info("egress policy in force", "sandbox_id", e.id, "generation", e.gen,
		"allow_out", len(req.GetAllowOut()), "deny_out", len(req.GetDenyOut()), "rules", len(rules))
	return &sandboxiov1.SetEgressResponse{Applied: true, Generation: e.gen, Rules: uint32(len(rules))}, nil
}

// startGateway replaces the gateway with one under b, listening where the
// redirect leads. The old one's connections close: the bounds changed
// (sandboxd restarted with other flags).
func (e *egressState) startGateway(b egressBounds) error {
	if e.gw != nil {
		_ = e.gw.Close()
		e.gw = nil
	}
	cfg := egress.Config{Bounds: b.bounds, Resolver: e.cfg.Resolver, HostAddrs: e.cfg.HostAddrs, Dial: e.cfg.Dial, Logger: e.log, RootCAs: b.roots}
	if b.hosts != nil {
		cfg.Resolver = b.hosts
	}
	gw := egress.New(cfg)
	tcp, err := net.Listen("tcp", e.cfg.TCP)
	if err != nil {
		return fmt.Errorf("egress: TCP listener: %w", err)
	}
	dnsTCP, err := net.Listen("tcp", e.cfg.DNS)
	if err != nil {
		tcp.Close()
		return fmt.Errorf("egress: DNS listener (TCP): %w", err)
	}
	dns, err := net.ListenPacket("udp", e.cfg.DNS)
	if err != nil {
		tcp.Close()
		dnsTCP.Close()
		return fmt.Errorf("egress: DNS listener (UDP): %w", err)
	}
	serve := func(what string, f func() error) {
		if err := f(); err != nil && !errors.Is(err, net.ErrClosed) {
			e.log.Warn("egress listener stopped", "listener", what, "error", err)
		}
	}
	go serve("tcp", func() error { return gw.ServeTCP(tcp, egress.OriginalDst) })
	go serve("dns", func() error { return gw.ServeDNS(dns) })
	go serve("dns-tcp", func() error { return gw.ServeDNSTCP(dnsTCP) })
	e.gw, e.boundKey = gw, b.key
	return nil
}

// status is EgressStatus's answer.
func (e *egressState) status() *sandboxiov1.EgressStatusResponse {
	e.mu.Lock()
	gw, id, gen := e.gw, e.id, e.gen
	e.mu.Unlock()
	out := &sandboxiov1.EgressStatusResponse{Generation: gen}
	if gw == nil {
		return out
	}
	st := gw.Stats(id)
	out.BytesOut, out.BytesIn, out.ConnsAllowed, out.ConnsDenied = st.BytesOut, st.BytesIn, st.ConnsAllowed, st.ConnsDenied
	out.DnsAllowed, out.DnsDenied, out.ConnsOpen, out.RuleRequests = st.DNSAllowed, st.DNSDenied, uint64(st.ConnsOpen), st.RuleRequests
	out.DenialsDropped, out.DnsRateLimited, out.ConnsRefusedAtCap = st.DeniedLogDropped, st.DNSRateLimited, st.ConnsRefusedAtCap
	for _, d := range gw.Denials(id) {
		dd := &sandboxiov1.EgressDenial{TimeUnixNano: d.Time.UnixNano(), Kind: d.Kind, Name: d.Name, Reason: d.Reason}
		if d.Addr.IsValid() {
			dd.Address = d.Addr.String()
		}
		out.Denials = append(out.Denials, dd)
	}
	return out
}

// close stops the gateway and the probe's listener.
func (e *egressState) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	if e.gw != nil {
		_ = e.gw.Close()
	}
	_ = e.probeL.Close()
}

// SetEgress puts a networked sandbox's policy in force (sandboxio.v1).
func (s *Server) SetEgress(ctx context.Context, req *sandboxiov1.SetEgressRequest) (*sandboxiov1.SetEgressResponse, error) {
	if s.egress == nil {
		return nil, statusOf(reasonf(ErrEgressOff, "this io sidecar runs no egress gateway (its sandbox was made without network)"))
	}
	resp, err := s.egress.set(ctx, req)
	return resp, statusOf(err)
}

// EgressStatus says what the gateway counted and refused (sandboxio.v1).
func (s *Server) EgressStatus(context.Context, *sandboxiov1.EgressStatusRequest) (*sandboxiov1.EgressStatusResponse, error) {
	if s.egress == nil {
		return nil, statusOf(reasonf(ErrEgressOff, "this io sidecar runs no egress gateway (its sandbox was made without network)"))
	}
	return s.egress.status(), nil
}

// loadOrMakeCA is the sandbox's CA: the one a previous start of this
// sidecar kept (CAKeyFile and CADir's certificate), else a new one, whose
// certificate and bundle it writes to CADir (each written whole, then
// renamed) and whose key it keeps in CAKeyFile.
func loadOrMakeCA(cfg EgressConfig) (*egress.CA, error) {
	certPath := filepath.Join(cfg.CADir, CACertFile)
	if cfg.CAKeyFile != "" {
		key, kerr := readBounded(cfg.CAKeyFile, 64<<10)
		cert, cerr := readBounded(certPath, 64<<10)
		if kerr == nil && cerr == nil {
			if ca, err := egress.LoadCA(cert, key); err == nil {
				return ca, nil
			}
		}
	}
	name, _ := os.Hostname() // the Pod's name, which names the sandbox
	ca, err := egress.NewCA(cmp.Or(name, "pod"))
	if err != nil {
		return nil, err
	}
	cert, key := ca.PEM()
	if cfg.CAKeyFile != "" {
		if err := writeWhole(cfg.CAKeyFile, key, 0o600); err != nil {
			return nil, fmt.Errorf("egress: keep the CA's key: %w", err)
		}
	}
	roots, err := readBounded(cmp.Or(cfg.Roots, DefaultRoots), maxImageRoots)
	if err != nil {
		roots = nil // an image without roots: the bundle holds the CA alone
	}
	if len(roots) > 0 && roots[len(roots)-1] != '\n' {
		roots = append(roots, '\n')
	}
	if err := writeWhole(filepath.Join(cfg.CADir, CABundleFile), append(roots, cert...), 0o644); err != nil {
		return nil, fmt.Errorf("egress: write the CA bundle: %w", err)
	}
	if err := writeWhole(certPath, cert, 0o644); err != nil {
		return nil, fmt.Errorf("egress: write the CA's certificate: %w", err)
	}
	return ca, nil
}

// readBounded reads path, refusing one longer than limit.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return b, nil
}

// writeWhole writes b to path through a temporary file renamed over it.
func writeWhole(path string, b []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
