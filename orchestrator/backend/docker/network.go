package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/egress"
	"github.com/sandboxd/sandboxd/orchestrator/labels"
)

// A sandbox with network (Options.Network) has no route to anything but
// sandboxd's egress gateway (orchestrator/egress). Its plumbing, all made
// and kept by this file (the kernel's side in network_linux.go):
//
//	sandbox netns    the holder container's (sandboxd-net-<id>: sandboxd's
//	                 own image, never a template's, running its `sleep
//	                 infinity`, runc, uid 1000, read-only, no capabilities,
//	                 small CPU, memory and pids limits, NetworkMode none,
//	                 DNS G); the sandbox's
//	                 container joins it (NetworkMode container:<holder>), so
//	                 a restarted sandbox container keeps its network, and
//	                 under runsc the interface exists when gVisor boots
//	  eth0           S/31, default route via H, IPv6 disabled
//	     │ veth
//	host: sbx-<8 chars of the ID>   H/31, IPv6 disabled
//	      bridge sandboxd0 (no ports)   G/32: the gateway's TCP listener
//	                                    G:15001 and its DNS server G:53
//	nftables table inet sandboxd: every TCP connection and DNS query from
//	      an interface of the prefix is DNATed to G (so the gateway learns
//	      the original destination with SO_ORIGINAL_DST and the sandbox by
//	      the source address S); nothing else from those interfaces is
//	      accepted or forwarded (writeTable in network_linux.go lists the
//	      rules and what each blocks).
//
// Addresses come from Config.EgressSubnet (default 100.127.0.0/16): G is
// its first host address (the pair of the block's first two addresses is
// the gateway's), and each sandbox gets a /31 pair (H, S) of its own,
// persisted in meta.json, so that it keeps it across sandboxd restarts and
// hibernation. The rules match interfaces by name prefix, so a new
// sandbox adds no rule: the table is written once, at start, atomically
// replacing any previous version, and left in place when sandboxd exits
// (its sandboxes outlive it, and so must their isolation). It is never
// removed by a running sandboxd: without sandboxes it matches nothing;
// `sandboxd egress cleanup` removes a stopped instance's table, bridge
// and host ends (egress_host_linux.go). At start the instance's lock is
// taken (one sandboxd per instance) and the subnet checked against the
// host's addresses and routes (checkOverlap): one that overlaps them is
// refused, naming the interface.
//
// Where the seam is, and why. The gateway is another package's
// (orchestrator/egress); this file starts it, serves it the listeners and
// tells it each sandbox's source address and policy (Attach, Detach). The
// kernel work is behind netKernel so that the fake-engine tests run
// without root; the real one (network_linux.go) uses netlink and
// nftables through well-kept libraries, never the ip or nft commands.

// The gateway's ports on G.
const (
	gatewayTCPPort = 15001
	gatewayDNSPort = 53
)

// netRuntimeOf is the runtime a networked sandbox runs under: gVisor's
// runsc is one binary registered thrice by scripts/ensure-runsc.sh, each
// on the systrap platform: "runsc" with --network=none (sealed sandboxes:
// no network stack at all), "runsc-net" with --network=sandbox (gVisor's
// own netstack on the interface plumbed into the holder's namespace) and
// "runsc-build" (RuntimeGVisorBuild).
func netRuntimeOf(runtime string) string {
	if runtime == core.RuntimeGVisor {
		return RuntimeGVisorNet
	}
	return runtime
}

// RuntimeGVisorNet is the runtime networked sandboxes run under when the
// server's runtime is runsc (netRuntimeOf).
const RuntimeGVisorNet = "runsc-net"

// RuntimeGVisorBuild is the runtime of a template build's steps under
// gVisor (scripts/ensure-runsc.sh): runsc-net's flags and the root file
// system's writes on the host (--overlay2=none), so a step's commit
// keeps them.
const RuntimeGVisorBuild = "runsc-build"

// holderNamePrefix + sandbox ID names a sandbox's network holder.
const holderNamePrefix = "sandboxd-net-"

// netNames names one sandboxd's host-side objects. Two sandboxd processes
// on one host (tests) must not share them: each has its own table,
// bridge and interface prefix (Config.netNames).
type netNames struct {
	table  string // nftables table (family inet)
	bridge string // the bridge holding G
	prefix string // host ends: prefix + 8 characters of the sandbox ID
}

var defaultNetNames = netNames{table: "sandboxd", bridge: "sandboxd0", prefix: "sbx-"}

// instanceNetNames names the host-side objects of the sandboxd given
// Config.EgressInstance (sandboxd --egress-instance): table and bridge
// "sandboxd-<name>", interfaces "sx<name>-". A name is 1 to 4 lower-case
// letters and digits, so that an interface (prefix and 8 characters of the
// ID) fits Linux's 15 bytes, and the dash ending every prefix keeps one
// instance's interfaces from matching another's prefix ("sxab-" is no
// prefix of "sxabc-…"), or the default's ("sbx-"), or Docker's ("br-",
// "veth").
func instanceNetNames(name string) (netNames, error) {
	if err := CheckEgressInstance(name); err != nil {
		return netNames{}, err
	}
	return netNames{table: "sandboxd-" + name, bridge: "sandboxd-" + name, prefix: "sx" + name + "-"}, nil
}

// CheckEgressInstance checks an EgressInstance name (instanceNetNames).
func CheckEgressInstance(name string) error {
	if len(name) < 1 || len(name) > 4 || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789") != "" {
		return core.Invalidf("config: EgressInstance %q: want 1 to 4 lower-case letters and digits", name)
	}
	return nil
}

// link is the host end's name for sandbox id.
func (n netNames) link(id string) string {
	return n.prefix + strings.TrimPrefix(id, "sb-")[:8]
}

// netMeta is a networked sandbox's network, in meta.json.
type netMeta struct {
	// Addr is the sandbox's address S; its host end is Addr-1 (H).
	Addr netip.Addr `json:"addr"`
	// Holder is the ID of the container holding its network namespace;
	// empty while hibernated.
	Holder string `json:"holder,omitempty"`
	// Boot is, under gVisor, the start time (Docker's State.StartedAt) of
	// the sandbox's container boot known to have its address: gVisor
	// takes S off eth0 at each boot, so a boot sandboxd did not see (the
	// container restarted while sandboxd was down) had none, and is
	// restarted at start-up with S put back (reattachNet).
	Boot string `json:"boot,omitempty"`
	// armed (not persisted): S was put on eth0 for gVisor's next boot,
	// which has not been seen yet (onNetContainerEvent).
	armed bool
}

// holder is sb's network holder's container ID ("" for none).
func (sb *sandbox) holder() string {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.net == nil {
		return ""
	}
	return sb.net.Holder
}

// hostAddr is the host end's address H of a sandbox's S.
func hostAddr(s netip.Addr) netip.Addr { return s.Prev() }

// netKernel is the kernel's side of the plumbing (network_linux.go),
// behind an interface so that tests with a fake engine substitute it.
type netKernel interface {
	// lock takes the instance's lock (lockInstance) until the closer is
	// closed: one sandboxd per instance, and none being cleaned up.
	lock(n netNames) (io.Closer, error)
	// setupHost creates, idempotently, the bridge holding gw and the
	// nftables table, which it replaces atomically.
	setupHost(n netNames, subnet netip.Prefix, gw netip.Addr) error
	// plumb creates the veth pair: the host end link with h/31, and eth0
	// in the network namespace of process pid with s/31 and a default
	// route via h; IPv6 disabled on both ends. A stale link of that name,
	// or any other link of the prefix carrying h, is removed first.
	plumb(n netNames, link string, pid int, h, s netip.Addr) error
	// plumbed reports whether link exists and its peer is eth0 in pid's
	// namespace; with addr, whether eth0 still carries s too (gVisor's
	// netstack takes the address off eth0 when it boots).
	plumbed(link string, pid int, s netip.Addr, addr bool) (bool, error)
	// restoreAddr puts s/31 and the default route back on eth0 in pid's
	// namespace, for gVisor's next boot.
	restoreAddr(pid int, h, s netip.Addr) error
	// readdress gives the pair whose host end is from, with eth0 in pid's
	// namespace, to another sandbox: the host end renamed to (a stale link
	// of that name, or any other link of the prefix carrying h, removed
	// first) with h/31, eth0 with s/31 only and a default route via h.
	// Cheaper than unplumb and plumb: no veth is made or destroyed.
	readdress(n netNames, from, to string, pid int, h, s netip.Addr) error
	// unplumb removes link (and so its peer); a missing link is fine.
	unplumb(link string) error
	// listen opens the gateway's sockets on gw: TCP 15001, UDP 53 and
	// TCP 53.
	listen(gw netip.Addr) (tcp net.Listener, dns net.PacketConn, dnsTCP net.Listener, err error)
}

// Gateway is what the Manager needs of the egress gateway: *egress.Gateway
// (Config.NewGateway makes it; tests substitute a listener of their own
// that observes where connections were headed).
type Gateway interface {
	Attach(id string, src netip.Addr, p *core.CompiledPolicy, ca *egress.CA)
	Update(id string, p *core.CompiledPolicy)
	Detach(id string)
	ServeTCP(l net.Listener, origDst func(net.Conn) (netip.AddrPort, error)) error
	ServeDNS(pc net.PacketConn) error
	ServeDNSTCP(l net.Listener) error
	Stats(id string) egress.Stats
	Denials(id string) []egress.Denial
	// Counters returns the gateway's totals and every attached
	// sandbox's counters (the metrics, netmetrics.go).
	Counters() (egress.Totals, map[string]egress.Stats)
	Close() error
}

// newEgressGateway is Config.NewGateway's default: the egress package's.
func newEgressGateway(c egress.Config) Gateway { return egress.New(c) }

// newCA makes sandbox id's CA and returns it in PEM.
func newCA(id string) (certPEM, keyPEM []byte, err error) {
	ca, err := egress.NewCA(id)
	if err != nil {
		return nil, nil, err
	}
	certPEM, keyPEM = ca.PEM()
	return certPEM, keyPEM, nil
}

// The sandbox's CA on the host, in its directory: the key only there,
// root's; the certificate and the bundle in a directory mounted read-only
// at /etc/sandboxd.
const (
	netDir       = "net"           // <sandbox dir>/net: root's (0700)
	caKeyFile    = "ca-key.pem"    // in netDir, 0600: never mounted
	caMountDir   = "etc"           // <sandbox dir>/net/etc, mounted at caMountPoint
	caCertFile   = "ca.pem"        // the sandbox's CA certificate
	caBundleFile = "ca-bundle.pem" // the image's roots and the CA
	caMountPoint = "/etc/sandboxd"
	// imageRootsPath is the image's CA bundle (Debian's), which the
	// sandbox's bundle extends; maxRootsBytes bounds its read.
	imageRootsPath = "/etc/ssl/certs/ca-certificates.crt"
	maxRootsBytes  = 8 << 20
)

// caEnv is the environment that makes the usual TLS stacks trust the
// sandbox's CA: OpenSSL and Python's ssl (SSL_CERT_FILE), requests,
// curl, and Node.js (which adds NODE_EXTRA_CA_CERTS to its own roots).
func caEnv() map[string]string {
	bundle := caMountPoint + "/" + caBundleFile
	return map[string]string{
		"SSL_CERT_FILE":       bundle,
		"REQUESTS_CA_BUNDLE":  bundle,
		"CURL_CA_BUNDLE":      bundle,
		"NODE_EXTRA_CA_CERTS": caMountPoint + "/" + caCertFile,
	}
}

// netSpec adjusts a networked sandbox's container spec: it joins its
// holder's namespace, gets its CA mounted and the CA's environment (the
// caller's env wins: it is the caller's sandbox to break), and runs under
// the runtime with a network stack. Called by containerSpec.
func netSpec(sb *sandbox, cfg *container.Config, host *container.HostConfig, env map[string]string) {
	host.NetworkMode = container.NetworkMode("container:" + sb.net.Holder)
	host.Binds = append(host.Binds, filepath.Join(sb.dir, netDir, caMountDir)+":"+caMountPoint+":ro")
	host.Runtime = netRuntimeOf(host.Runtime)
	for k, v := range caEnv() {
		if _, ok := env[k]; !ok {
			cfg.Env = append(cfg.Env, k+"="+v)
		}
	}
}

// The network holder's limits: its one process sleeps.
const (
	holderNanoCPUs = 100_000_000 // a tenth of a core: runc's init runs under it too
	holderMemory   = 32 << 20
	holderPids     = 16 // runc's init is in the cgroup, with its threads, before it execs sleep
)

// holderSpec is the spec of sb's network holder: nothing but a process
// keeping the namespace, as unprivileged as the sandbox, under runc (it
// runs no sandbox code; gVisor's namespace would not be the kernel's).
// image is sandboxd's own (Config.Image), never the sandbox's: a
// template's image is its tenant's, whose `sleep` would run in the
// sandbox's network namespace outside the sandbox's limits and under
// runc whatever the sandbox's runtime (it did: a template's `sleep`
// answered on the sandbox's loopback, using a core while the sandbox was
// held to a quarter). The holder is held to small limits of its own.
func holderSpec(sb *sandbox, image, stateDir string, gw netip.Addr) (*container.Config, *container.HostConfig) {
	pids := int64(holderPids)
	cfg := &container.Config{
		Image:      image,
		User:       containerUser,
		Entrypoint: []string{"sleep"},
		Cmd:        []string{"infinity"},
		Labels: map[string]string{
			labels.Managed:   "true",
			labels.NetHolder: "true",
			labels.SandboxID: sb.id,
			labels.CreatedAt: sb.createdAt.UTC().Format(time.RFC3339),
			labels.StateDir:  stateDir,
		},
	}
	host := &container.HostConfig{
		NetworkMode: "none",
		DNS:         []string{gw.String()},
		// Brought back with the sandbox's container after a reboot;
		// reconcile then plumbs its new namespace (reattachNet).
		RestartPolicy:  container.RestartPolicy{Name: restartPolicy},
		Runtime:        "runc",
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		Resources:      container.Resources{NanoCPUs: holderNanoCPUs, Memory: holderMemory, MemorySwap: holderMemory, PidsLimit: &pids},
		LogConfig:      container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "1m", "max-file": "1"}},
	}
	return cfg, host
}

// addrPool hands out the sandboxes' /31 pairs of the egress subnet: pair
// 0 is the gateway's, pair k (k ≥ 1) is H = base+2k, S = base+2k+1. It
// allocates next-fit, so a released pair is reused as late as possible
// (the gateway and conntrack may still know the old sandbox's flows).
type addrPool struct {
	subnet netip.Prefix
	mu     sync.Mutex
	used   map[netip.Addr]string // S → sandbox ID
	next   uint32                // pair index to try first
}

func newAddrPool(subnet netip.Prefix) *addrPool {
	return &addrPool{subnet: subnet, used: make(map[netip.Addr]string), next: 1}
}

// gateway is G: the subnet's first host address.
func (p *addrPool) gateway() netip.Addr { return p.subnet.Addr().Next() }

func (p *addrPool) pairs() uint32 { return uint32(1) << (31 - p.subnet.Bits()) }

func (p *addrPool) pairS(k uint32) netip.Addr {
	b := p.subnet.Addr().As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += 2*k + 1
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// valid reports whether s is a sandbox address of the subnet.
func (p *addrPool) valid(s netip.Addr) bool {
	if !s.Is4() || !p.subnet.Contains(s) || s.As4()[3]&1 == 0 {
		return false
	}
	return s != p.gateway()
}

// reserve records s as id's (from its meta.json); false if s is not one
// of the subnet's sandbox addresses or is another sandbox's.
func (p *addrPool) reserve(id string, s netip.Addr) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.valid(s) {
		return false
	}
	if other, ok := p.used[s]; ok && other != id {
		return false
	}
	p.used[s] = id
	return true
}

// alloc gives id a free pair's S.
func (p *addrPool) alloc(id string) (netip.Addr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.pairs()
	for i := uint32(0); i < n; i++ {
		k := (p.next + i) % n
		if k == 0 {
			continue
		}
		s := p.pairS(k)
		if _, ok := p.used[s]; !ok {
			p.used[s] = id
			p.next = k + 1
			return s, nil
		}
	}
	return netip.Addr{}, core.Exhaustedf("every address of the egress subnet %s is taken (%d sandboxes with network); sandboxd --egress-subnet sets a larger one", p.subnet, n-1)
}

// release frees s if id holds it.
func (p *addrPool) release(id string, s netip.Addr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.used[s] == id {
		delete(p.used, s)
	}
}

// releaseID frees whatever address id holds.
func (p *addrPool) releaseID(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for s, holder := range p.used {
		if holder == id {
			delete(p.used, s)
		}
	}
}

// netState is the Manager's networking: nil unless the server allows
// network or a networked sandbox exists.
type netState struct {
	names  netNames
	pool   *addrPool
	kernel netKernel
	log    *slog.Logger

	// egressCfg configures the gateway, started once (start).
	egressCfg  egress.Config
	newGateway func(egress.Config) Gateway
	startOnce  sync.Once
	startErr   error
	gw         Gateway
	// started is set once start has set gw: readers that must not start
	// the gateway (the metrics) read gw after it.
	started atomic.Bool
	tcp     net.Listener
	dns     net.PacketConn
	dnsTCP  net.Listener
	serving sync.WaitGroup
	// instLock is the instance's lock, held from start to close.
	instLock io.Closer
}

// start sets up the host side and starts the gateway, once; a failure is
// returned to every caller (sandboxd must be restarted to try again).
func (n *netState) start() error {
	n.startOnce.Do(func() {
		gw := n.pool.gateway()
		lock, err := n.kernel.lock(n.names)
		if err != nil {
			n.startErr = err
			return
		}
		if err := n.kernel.setupHost(n.names, n.pool.subnet, gw); err != nil {
			lock.Close()
			n.startErr = fmt.Errorf("set up the sandboxes' network on the host (bridge %s, nftables table inet %s): %w", n.names.bridge, n.names.table, err)
			return
		}
		tcp, dns, dnsTCP, err := n.kernel.listen(gw)
		if err != nil {
			lock.Close()
			n.startErr = fmt.Errorf("listen on the egress gateway's address %s: %w", gw, err)
			return
		}
		n.instLock = lock
		n.tcp, n.dns, n.dnsTCP = tcp, dns, dnsTCP
		n.gw = n.newGateway(n.egressCfg)
		n.serving.Add(3)
		go func() {
			defer n.serving.Done()
			if err := n.gw.ServeDNSTCP(dnsTCP); err != nil && !errors.Is(err, net.ErrClosed) {
				n.log.Error("egress gateway: DNS over TCP stopped", "error", err)
			}
		}()
		go func() {
			defer n.serving.Done()
			if err := n.gw.ServeTCP(tcp, egress.OriginalDst); err != nil && !errors.Is(err, net.ErrClosed) {
				n.log.Error("egress gateway: TCP listener stopped", "error", err)
			}
		}()
		go func() {
			defer n.serving.Done()
			if err := n.gw.ServeDNS(dns); err != nil && !errors.Is(err, net.ErrClosed) {
				n.log.Error("egress gateway: DNS server stopped", "error", err)
			}
		}()
		n.started.Store(true)
		n.log.Info("egress gateway started", "gateway", gw, "subnet", n.pool.subnet, "table", "inet "+n.names.table, "bridge", n.names.bridge)
	})
	return n.startErr
}

// close stops the gateway and releases the instance's lock; the table and
// the bridge stay (see above) until sandboxd egress cleanup.
func (n *netState) close() error {
	if n.gw == nil {
		return nil
	}
	n.tcp.Close()
	n.dns.Close()
	n.dnsTCP.Close()
	err := n.gw.Close()
	n.serving.Wait()
	n.instLock.Close()
	return err
}

// newNetState makes the Manager's networking from its config.
func newNetState(cfg Config) *netState {
	ec := cfg.Egress
	// The operator's bounds are the policy's (sandboxd --egress-ceiling,
	// --egress-allow-private), the sandboxes' subnet this backend's.
	ec.Bounds.SandboxNet = cfg.EgressSubnet
	if len(ec.Bounds.AllowPrivate) == 0 {
		ec.Bounds.AllowPrivate = cfg.EgressAllowPrivate
	}
	if ec.Bounds.Ceiling == nil {
		ec.Bounds.Ceiling = cfg.CompiledCeiling()
	}
	if ec.Logger == nil {
		ec.Logger = cfg.Logger
	}
	return &netState{
		names:      cfg.netNames,
		pool:       newAddrPool(cfg.EgressSubnet),
		kernel:     cfg.netKernel,
		log:        cfg.Logger,
		egressCfg:  ec,
		newGateway: cfg.NewGateway,
	}
}

// policyOf compiles sb's policy for the gateway. The policy was checked by
// core.Validating when it was set (or read back from meta.json, which only
// sandboxd writes): one that does not compile now (a bound lowered since)
// is replaced by a policy that refuses everything, never by one that
// allows more, and the reason is logged.
func (m *Manager) policyOf(sb *sandbox) *core.CompiledPolicy {
	np := sb.networkPolicy()
	if np == nil {
		np = &core.NetworkPolicy{}
	}
	p, err := core.CompileNetworkPolicy(*np)
	if err != nil {
		m.log.Error("a sandbox's network policy does not compile: it reaches nothing until it is replaced", "sandbox_id", sb.id, "error", err)
		p, _ = core.CompileNetworkPolicy(core.NetworkPolicy{DenyOut: []string{"0.0.0.0/0"}})
	}
	return p
}

// prepareNet gives a new networked sandbox its address and its CA files
// (key kept on the host; certificate and bundle written once the holder
// runs, with the image's roots). On failure the caller releases the
// address (releaseNet).
func (m *Manager) prepareNet(sb *sandbox) error {
	if err := m.net.start(); err != nil {
		return err
	}
	s, err := m.net.pool.alloc(sb.id)
	if err != nil {
		return err
	}
	sb.net = &netMeta{Addr: s}
	dir := filepath.Join(sb.dir, netDir)
	if err := os.MkdirAll(filepath.Join(dir, caMountDir), 0o700); err != nil {
		return err
	}
	if err := os.Chmod(filepath.Join(dir, caMountDir), 0o755); err != nil {
		return err
	}
	cert, key, err := newCA(sb.id)
	if err != nil {
		return fmt.Errorf("make the sandbox's CA: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, caKeyFile), key, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, caMountDir, caCertFile), cert, 0o644)
}

// releaseNet gives sb's address back (a removed sandbox, or a creation
// that failed).
func (m *Manager) releaseNet(sb *sandbox) {
	if m.net == nil || sb.net == nil {
		return
	}
	m.net.pool.release(sb.id, sb.net.Addr)
}

// upNet starts sb's holder, plumbs its namespace and attaches sb to the
// gateway: after it, sb's container can be created (and its CA bundle
// written, writeBundle, before it starts). The holder's ID is in
// sb.net.Holder (and removed again by downNet on failure).
func (m *Manager) upNet(ctx context.Context, sb *sandbox) error {
	if err := m.net.start(); err != nil {
		return err
	}
	sb.mu.Lock()
	s := sb.net.Addr
	sb.mu.Unlock()
	// A holder of an earlier attempt whose removal failed has the name.
	if err := m.docker.ContainerRemove(ctx, holderNamePrefix+sb.id, container.RemoveOptions{Force: true}); err != nil && !isDockerNotFound(err) {
		return dockerError("remove a stale network holder container", err)
	}
	cfg, host := holderSpec(sb, m.cfg.Image, m.cfg.StateDir, m.net.pool.gateway())
	resp, err := m.docker.ContainerCreate(ctx, cfg, host, nil, nil, holderNamePrefix+sb.id)
	if err != nil {
		return dockerError("create the network holder container", err)
	}
	sb.mu.Lock()
	sb.net.Holder = resp.ID
	sb.mu.Unlock()
	if err := m.docker.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		return dockerError("start the network holder container", err)
	}
	info, err := m.docker.ContainerInspect(ctx, resp.ID)
	if err != nil {
		return dockerError("inspect the network holder container", err)
	}
	if info.State == nil || info.State.Pid <= 0 {
		return fmt.Errorf("the network holder container %s has no process", resp.ID)
	}
	pid := info.State.Pid
	if err := m.net.kernel.plumb(m.net.names, m.net.names.link(sb.id), pid, hostAddr(s), s); err != nil {
		return fmt.Errorf("plumb the sandbox's network: %w", err)
	}
	m.armNet(sb)
	return m.attachNet(sb)
}

// attachNet tells the gateway that traffic from sb's address is sb's.
func (m *Manager) attachNet(sb *sandbox) error {
	dir := filepath.Join(sb.dir, netDir)
	cert, err := os.ReadFile(filepath.Join(dir, caMountDir, caCertFile))
	if err != nil {
		return fmt.Errorf("read the sandbox's CA: %w", err)
	}
	key, err := os.ReadFile(filepath.Join(dir, caKeyFile))
	if err != nil {
		return fmt.Errorf("read the sandbox's CA: %w", err)
	}
	ca, err := egress.LoadCA(cert, key)
	if err != nil {
		return fmt.Errorf("load the sandbox's CA: %w", err)
	}
	sb.mu.Lock()
	s := sb.net.Addr
	sb.mu.Unlock()
	m.net.gw.Attach(sb.id, s, m.policyOf(sb), ca)
	return nil
}

// writeBundle writes sb's bundle, the image's roots followed by the
// sandbox's CA, unless it exists (the image of a sandbox never changes).
// The roots are read from sb's container, containerID, created and not
// yet started (readImageFile: the image may be a template's, hostile); an
// image without them gets a bundle of the CA alone, one whose file there
// is not a regular file of a sane size fails the creation with
// FAILED_PRECONDITION, saying why.
func (m *Manager) writeBundle(ctx context.Context, sb *sandbox, containerID string) error {
	dir := filepath.Join(sb.dir, netDir, caMountDir)
	bundle := filepath.Join(dir, caBundleFile)
	if _, err := os.Stat(bundle); err == nil {
		return nil
	}
	cert, err := os.ReadFile(filepath.Join(dir, caCertFile))
	if err != nil {
		return err
	}
	roots, err := readImageFile(ctx, m.docker, containerID, imageRootsPath, maxRootsBytes)
	switch {
	case errors.Is(err, errNoImageFile):
		m.log.Warn("the sandbox image has no CA bundle to extend; the sandbox's bundle holds its own CA only", "sandbox_id", sb.id, "path", imageRootsPath)
		roots = nil
	case err != nil:
		return err
	}
	if len(roots) > 0 && roots[len(roots)-1] != '\n' {
		roots = append(roots, '\n')
	}
	tmp := bundle + ".tmp"
	if err := os.WriteFile(tmp, append(roots, cert...), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, bundle)
}

// downNet detaches sb from the gateway, removes its holder (its namespace
// and so the veth go with it) and the host end, keeping its address:
// hibernation, and a creation or wake that failed. Removal continues
// after errors; the first is returned.
func (m *Manager) downNet(ctx context.Context, sb *sandbox) error {
	if m.net == nil {
		return nil
	}
	if m.net.gw != nil {
		m.net.gw.Detach(sb.id)
	}
	sb.mu.Lock()
	holder := sb.net.Holder
	sb.net.Holder = ""
	sb.mu.Unlock()
	var first error
	if holder != "" {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), containerRemoveTimeout)
		err := m.docker.ContainerRemove(rctx, holder, container.RemoveOptions{Force: true})
		cancel()
		if err != nil && !isDockerNotFound(err) {
			first = dockerError("remove the network holder container", err)
		}
	}
	if err := m.net.kernel.unplumb(m.net.names.link(sb.id)); err != nil && first == nil {
		first = err
	}
	return first
}

// removeNet is downNet for a sandbox that is going: its address is given
// back once its holder is gone (else a new sandbox could get it while the
// old veth still carries it).
func (m *Manager) removeNet(ctx context.Context, sb *sandbox) {
	if m.net == nil || sb.net == nil {
		return
	}
	if err := m.downNet(ctx, sb); err != nil {
		m.log.Error("remove the sandbox's network; its address stays taken until sandboxd restarts", "sandbox_id", sb.id, "error", err)
		return
	}
	m.releaseNet(sb)
}

// reattachNet brings a networked sandbox's plumbing back at start-up:
// the table and the gateway (start), the holder's namespace plumbed again
// if the holder restarted (a reboot: Docker brought it back with a new,
// empty namespace), the sandbox's container restarted if it does not
// share that namespace or gVisor booted without its address, and the
// gateway told of its address. A holder that is gone or stopped makes the
// sandbox dead.
//
// readdressed says the sandbox has a new address (reserveNet): its
// namespace is plumbed again whatever it has.
func (m *Manager) reattachNet(ctx context.Context, sb *sandbox, readdressed bool) error {
	if err := m.net.start(); err != nil {
		return err
	}
	if st, _ := sb.status(); st != core.StateRunning || sb.asleep() {
		return nil
	}
	sb.mu.Lock()
	holder, s, containerID, runtime := sb.net.Holder, sb.net.Addr, sb.containerID, sb.runtime
	sb.mu.Unlock()
	log := m.log.With("sandbox_id", sb.id)
	hinfo, err := m.docker.ContainerInspect(ctx, holder)
	switch {
	case isDockerNotFound(err):
		m.markDead(sb, reasonHolderRemoved)
		return nil
	case err != nil:
		return dockerError("inspect the network holder container", err)
	}
	if alive, reason := containerAlive(hinfo.State); !alive || !hinfo.State.Running {
		m.markDead(sb, "its network holder container is not running: "+cmpReason(reason, "restarting or paused"))
		return nil
	}
	if hinfo.Config != nil && hinfo.Config.Image != m.cfg.Image {
		// An earlier sandboxd's holder, running the sandbox's image (a
		// template's own `sleep`); replaced by the next wake's upNet.
		log.Warn("the sandbox's network holder runs the sandbox's image, not sandboxd's; hibernate or delete the sandbox to replace it", "holder_image", hinfo.Config.Image, "image", m.cfg.Image)
	}
	pid, link := hinfo.State.Pid, m.net.names.link(sb.id)
	gvisor := runtime == core.RuntimeGVisor
	ok, err := m.net.kernel.plumbed(link, pid, s, false)
	if err != nil {
		return m.netLost(sb, "check its network", err)
	}
	ok = ok && !readdressed
	restart := false
	if !ok {
		log.Warn("the sandbox's network holder has a new namespace (it restarted); plumbing it again")
		if err := m.net.kernel.plumb(m.net.names, link, pid, hostAddr(s), s); err != nil {
			return m.netLost(sb, "plumb its network", err)
		}
		m.armNet(sb)
		restart = true // the sandbox's container is in the old namespace, or gVisor booted without eth0
	} else if gvisor {
		// gVisor takes S off eth0 when it boots: an address still there
		// is one its netstack did not take; a container being restarted
		// by Docker boots next, and needs S back; a boot sandboxd did not
		// see had none.
		info, err := m.docker.ContainerInspect(ctx, containerID)
		if err != nil {
			return dockerError("inspect container", err)
		}
		still, err := m.net.kernel.plumbed(link, pid, s, true)
		switch {
		case err != nil:
			return m.netLost(sb, "check its network", err)
		case still:
			restart = !info.State.Restarting
		case info.State.Restarting:
			if err := m.net.kernel.restoreAddr(pid, hostAddr(s), s); err != nil {
				return m.netLost(sb, "restore the address", err)
			}
			m.armNet(sb)
		case info.State.StartedAt != sb.netBoot():
			log.Warn("the sandbox's container restarted while sandboxd was down: gVisor booted without its address")
			if err := m.net.kernel.restoreAddr(pid, hostAddr(s), s); err != nil {
				return m.netLost(sb, "restore the address", err)
			}
			m.armNet(sb)
			restart = true
		}
	}
	if err := m.attachNet(sb); err != nil {
		return m.netLost(sb, "attach it to the gateway", err)
	}
	if restart {
		log.Warn("restarting the sandbox's container so that it uses its network; its Python state is lost")
		if err := m.docker.ContainerRestart(ctx, containerID, container.StopOptions{}); err != nil && !isDockerNotFound(err) {
			return dockerError("restart container", err)
		}
	}
	return nil
}

// armNet records that S is on eth0 for gVisor's next boot.
func (m *Manager) armNet(sb *sandbox) {
	sb.mu.Lock()
	if sb.net != nil {
		sb.net.armed = true
	}
	sb.mu.Unlock()
}

// netLost makes sb dead because its network could not be brought back
// at start-up (the kernel refused, its CA is unreadable): one sandbox's
// trouble does not keep sandboxd from starting, and the next acquire of
// its user says why.
func (m *Manager) netLost(sb *sandbox, what string, err error) error {
	m.log.Error("the sandbox's network could not be brought back", "sandbox_id", sb.id, "step", what, "error", err)
	m.markDead(sb, core.Truncate("its network could not be brought back after a restart ("+what+"): "+err.Error(), 512))
	return nil
}

// netBoot is sb's Boot (netMeta).
func (sb *sandbox) netBoot() string {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.net == nil {
		return ""
	}
	return sb.net.Boot
}

// bootOf is a container's State.StartedAt ("" if unknown).
func (m *Manager) bootOf(ctx context.Context, containerID string) string {
	info, err := m.docker.ContainerInspect(ctx, containerID)
	if err != nil || info.State == nil {
		return ""
	}
	return info.State.StartedAt
}

// noteBoot records, under gVisor, that the current boot of sb's container
// has its address (Boot); the caller persists sb.
func (m *Manager) noteBoot(ctx context.Context, sb *sandbox) {
	sb.mu.Lock()
	n, runtime, id := sb.net, sb.runtime, sb.containerID
	sb.mu.Unlock()
	if n == nil || runtime != core.RuntimeGVisor || id == "" {
		return
	}
	boot := m.bootOf(ctx, id)
	sb.mu.Lock()
	if sb.net != nil {
		sb.net.Boot, sb.dirty = boot, true
	}
	sb.mu.Unlock()
}

// reserveNet takes sb's address from meta.json at start-up, or gives sb a
// new one when that address is no longer one of the egress subnet's (the
// operator changed --egress-subnet) or is taken; it reports the latter,
// with the new address persisted.
func (m *Manager) reserveNet(sb *sandbox) bool {
	sb.mu.Lock()
	s := sb.net.Addr
	sb.mu.Unlock()
	if m.net.pool.reserve(sb.id, s) {
		return false
	}
	ns, err := m.net.pool.alloc(sb.id)
	if err != nil {
		m.log.Error("no address for the sandbox's network", "sandbox_id", sb.id, "error", err)
		m.markDead(sb, "no address left in the egress subnet for its network")
		return false
	}
	m.log.Warn("the sandbox's address is not in the egress subnet (or is taken); it gets a new one", "sandbox_id", sb.id, "old", s, "new", ns)
	sb.mu.Lock()
	sb.net.Addr, sb.dirty = ns, true
	sb.mu.Unlock()
	if err := sb.persist(true); err != nil {
		m.log.Error("persist sandbox metadata", "sandbox_id", sb.id, "error", err)
	}
	return true
}

// Reasons given for networked sandboxes' deaths.
const reasonHolderRemoved = "its network holder container was removed outside sandboxd"

func cmpReason(r, dflt string) string {
	if r == "" {
		return dflt
	}
	return r
}

// onNetContainerEvent keeps a gVisor sandbox's network across restarts of
// its container by Docker (its restart policy): gVisor takes S off eth0
// at each boot and does not give it back, so when the container dies S
// is put back for the next boot, and a container that started before
// that (the address still on eth0 once it runs) is restarted again.
//
// at is the event's time: an event of an earlier boot than the current
// one (the monitor replays events after a reconnect and at start) is
// stale, and ignored; the current boot's start decides.
func (m *Manager) onNetContainerEvent(ctx context.Context, sb *sandbox, action string, at time.Time) {
	sb.mu.Lock()
	n, runtime := sb.net, sb.runtime
	sb.mu.Unlock()
	if m.net == nil || n == nil || n.Holder == "" || runtime != core.RuntimeGVisor {
		return
	}
	hinfo, err := m.docker.ContainerInspect(ctx, n.Holder)
	if err != nil || hinfo.State == nil || hinfo.State.Pid <= 0 {
		return
	}
	pid := hinfo.State.Pid
	info, err := m.docker.ContainerInspect(ctx, sb.currentContainer())
	if err != nil || info.State == nil {
		return
	}
	if started, err := time.Parse(time.RFC3339Nano, info.State.StartedAt); err == nil && at.Before(started) {
		return // of an earlier boot
	}
	if action == "start" && (!info.State.Running || info.State.Restarting) {
		return // down again: its die, and the start after it, decide
	}
	restart := func(why string) {
		m.log.Warn(why+"; restarting the sandbox's container", "sandbox_id", sb.id)
		if err := m.docker.ContainerRestart(ctx, sb.currentContainer(), container.StopOptions{}); err != nil {
			m.log.Warn("restart the sandbox's container", "sandbox_id", sb.id, "error", err)
		}
	}
	switch action {
	case "die":
		if err := m.net.kernel.restoreAddr(pid, hostAddr(n.Addr), n.Addr); err != nil {
			m.log.Warn("put the sandbox's address back for gVisor's next boot", "sandbox_id", sb.id, "error", err)
			return
		}
		m.armNet(sb)
	case "start":
		still, err := m.net.kernel.plumbed(m.net.names.link(sb.id), pid, n.Addr, true)
		sb.mu.Lock()
		armed := sb.net != nil && sb.net.armed
		if sb.net != nil {
			sb.net.armed = false
		}
		sb.mu.Unlock()
		switch {
		case err != nil:
			m.log.Warn("check the network of a restarted gVisor sandbox", "sandbox_id", sb.id, "error", err)
		case still:
			// Its next start is checked in turn: the address is there.
			m.armNet(sb)
			restart("gVisor booted before the sandbox's address was back")
		case !armed:
			if err := m.net.kernel.restoreAddr(pid, hostAddr(n.Addr), n.Addr); err != nil {
				m.log.Warn("put the sandbox's address back for gVisor's next boot", "sandbox_id", sb.id, "error", err)
				return
			}
			m.armNet(sb)
			restart("gVisor booted without the sandbox's address")
		default:
			m.noteBoot(ctx, sb) // this boot took the address
		}
	}
}
