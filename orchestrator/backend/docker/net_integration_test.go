package docker

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/sandboxd/sandboxd/internal/nettest"
	"github.com/sandboxd/sandboxd/internal/sandboxdproc"
	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/egress"
)

// observingGateway stands in for the egress gateway: it records every
// connection (source and original destination) and query that reaches
// it, answers each connection with "gateway\n" and closes it, and
// records Attach and Detach. With it the tests see where the plumbing
// delivers a sandbox's traffic, whatever the gateway later decides.
type observingGateway struct {
	mu       sync.Mutex
	conns    []observedConn
	queries  []netip.Addr // sources of DNS datagrams
	attached map[string]netip.Addr
	changed  chan struct{} // a value per record, for waiters
}

type observedConn struct {
	src, dst netip.AddrPort
}

func newObservingGateway() *observingGateway {
	return &observingGateway{attached: map[string]netip.Addr{}, changed: make(chan struct{}, 1)}
}

func (g *observingGateway) note() {
	select {
	case g.changed <- struct{}{}:
	default:
	}
}

func (g *observingGateway) Attach(id string, src netip.Addr, _ *core.CompiledPolicy, _ *egress.CA) {
	g.mu.Lock()
	g.attached[id] = src
	g.mu.Unlock()
}
func (g *observingGateway) Update(string, *core.CompiledPolicy) {}
func (g *observingGateway) Detach(id string) {
	g.mu.Lock()
	delete(g.attached, id)
	g.mu.Unlock()
}
func (g *observingGateway) Close() error                   { return nil }
func (g *observingGateway) Stats(string) egress.Stats      { return egress.Stats{} }
func (g *observingGateway) Denials(string) []egress.Denial { return nil }
func (g *observingGateway) Counters() (egress.Totals, map[string]egress.Stats) {
	return egress.Totals{}, nil
}

func (g *observingGateway) ServeTCP(l net.Listener, origDst func(net.Conn) (netip.AddrPort, error)) error {
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		dst, err := origDst(c)
		if err != nil {
			dst = netip.AddrPort{}
		}
		src := c.RemoteAddr().(*net.TCPAddr).AddrPort()
		g.mu.Lock()
		g.conns = append(g.conns, observedConn{src: netip.AddrPortFrom(src.Addr().Unmap(), src.Port()), dst: dst})
		g.mu.Unlock()
		g.note()
		c.Write([]byte("gateway\n"))
		c.Close()
	}
}

func (g *observingGateway) ServeDNS(pc net.PacketConn) error {
	buf := make([]byte, 512)
	for {
		_, from, err := pc.ReadFrom(buf)
		if err != nil {
			return err
		}
		g.mu.Lock()
		g.queries = append(g.queries, from.(*net.UDPAddr).AddrPort().Addr().Unmap())
		g.mu.Unlock()
		g.note()
	}
}

// ServeDNSTCP records a DNS connection over TCP as a query from its source.
func (g *observingGateway) ServeDNSTCP(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		g.mu.Lock()
		g.queries = append(g.queries, c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap())
		g.mu.Unlock()
		g.note()
		c.Close()
	}
}

func (g *observingGateway) snapshot() ([]observedConn, []netip.Addr, map[string]netip.Addr) {
	g.mu.Lock()
	defer g.mu.Unlock()
	att := make(map[string]netip.Addr, len(g.attached))
	for k, v := range g.attached {
		att[k] = v
	}
	return append([]observedConn(nil), g.conns...), append([]netip.Addr(nil), g.queries...), att
}

// netTestConfig configures networking for a test: names, an egress subnet
// and an interface prefix of its own (so that tests and a sandboxd on the
// same host never share a table, a bridge or a prefix), the observing
// gateways (one per Manager: a restarted one gets a new one), and removes
// the table and the bridge when the test ends.
func netTestConfig(t *testing.T, gws *[]*observingGateway) func(*Config) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "networked sandboxes need root (netlink, nftables)")
	}
	// A name no bridge has and a /24 no address of this host is in: a run
	// killed before its clean-ups leaves its bridges behind.
	en, err := sandboxdproc.NewEgressNet('t', netip.MustParsePrefix("100.126.0.0/16"))
	if err != nil {
		t.Fatal(err)
	}
	names, err := instanceNetNames(en.Instance)
	if err != nil {
		t.Fatal(err)
	}
	subnet := en.Subnet
	t.Cleanup(func() {
		if err := deleteTable(names.table); err != nil {
			t.Logf("cleanup: delete table %s: %v", names.table, err)
		}
		if l, err := netlink.LinkByName(names.bridge); err == nil {
			netlink.LinkDel(l)
		}
		os.Remove(lockPath(names)) // the Managers are closed
	})
	var mu sync.Mutex
	return func(c *Config) {
		c.AllowNetwork = true
		c.EgressSubnet = subnet
		c.netNames = names
		c.NewGateway = func(egress.Config) Gateway {
			mu.Lock()
			defer mu.Unlock()
			g := newObservingGateway()
			if gws != nil {
				*gws = append(*gws, g)
			}
			return g
		}
	}
}

// netRuntimes are the runtimes the network tests run under: runc, and
// runsc (whose networked sandboxes run under runsc-net) when dockerd has
// both; CI requires them.
func netRuntimes(t *testing.T) []string {
	rts := []string{"runc"}
	if testenv.HasRuntime(t, core.RuntimeGVisor) && testenv.HasRuntime(t, RuntimeGVisorNet) {
		rts = append(rts, core.RuntimeGVisor)
	} else if testenv.InCI() {
		t.Fatalf("CI=true and dockerd lacks runsc or runsc-net (make runsc registers both)")
	} else {
		t.Logf("dockerd lacks runsc or runsc-net: the network tests run under runc only (make runsc)")
	}
	return rts
}

// TestIntegrationNetworkPlumbing checks the data path of networked
// sandboxes with real containers, under runc and runsc, with the
// observing gateway in place of the egress gateway: every TCP connection
// (to a test host, another sandbox, the host's bridge address, the
// metadata address, the host end H) arrives at G:15001 with its original
// destination, none at its destination; DNS to any server arrives at
// G:53; UDP and ICMP go nowhere; one sandbox never reaches another; no
// IPv6; the address and the plumbing survive hibernation, a wake and a
// restart of the Manager.
func TestIntegrationNetworkPlumbing(t *testing.T) {
	testenv.NeedDocker(t)
	for _, rt := range netRuntimes(t) {
		t.Run(rt, func(t *testing.T) { testNetworkPlumbing(t, rt) })
	}
}

func testNetworkPlumbing(t *testing.T, runtime string) {
	in := nettest.New(t, nettest.Options{Hosts: []string{"a.test", "b.test"}, Metadata: true, Bridge: true})
	var gws []*observingGateway
	netCfg := netTestConfig(t, &gws)
	m, c, cfg := integrationManager(t, netCfg, func(c *Config) {
		c.Runtime = runtime
		if runtime == core.RuntimeGVisor {
			c.DefaultLimits.PidsLimit = 256
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	start := time.Now()
	plain, err := m.Acquire(ctx, "plain", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	plainTook := time.Since(start)
	start = time.Now()
	resA, err := m.Acquire(ctx, "net-a", core.Options{Network: true})
	if err != nil {
		t.Fatal(err)
	}
	netTook := time.Since(start)
	resB, err := m.Acquire(ctx, "net-b", core.Options{Network: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("creation (%s): plain sandbox %v, networked sandbox %v", runtime, plainTook.Round(time.Millisecond), netTook.Round(time.Millisecond))
	a, b := resA.Sandbox, resB.Sandbox
	sa, sb := m.Manager.addrOf(t, a.ID), m.Manager.addrOf(t, b.ID)
	g := m.Manager.net.pool.gateway()
	t.Logf("G %s, sandbox A %s (host end %s), sandbox B %s", g, sa, hostAddr(sa), sb)
	logTable(t, cfg.netNames.table)

	// The plain sandbox is sealed as before: no interface but loopback.
	ifaces := "python3 -c \"import socket; print(sorted(n for _, n in socket.if_nameindex() if n != 'lo'))\""
	if out := mustRunOK(t, m, plain.Sandbox.ID, "bash", ifaces); out != "[]\n" {
		t.Errorf("sandbox without network has interfaces %q", out)
	}

	// eth0 with S, a default route via H, resolv.conf naming G, the CA.
	out := mustRunOK(t, m, a.ID, "python", `
import socket, os
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(("`+in.Hosts["a.test"].Addr.String()+`", 9)); print("src", s.getsockname()[0])
print("ifaces", sorted(n for _, n in socket.if_nameindex() if n != "lo"))
for line in open("/proc/net/route").read().splitlines()[1:]:
    f = line.split()
    if f[1] == "00000000":
        print("gw", socket.inet_ntoa(bytes.fromhex(f[2])[::-1]))
print("dns", [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")])
print("ca", os.path.exists("/etc/sandboxd/ca.pem"), os.environ.get("SSL_CERT_FILE"), os.path.getsize(os.environ["SSL_CERT_FILE"]) > os.path.getsize("/etc/sandboxd/ca.pem"))
print("key", os.path.exists("/etc/sandboxd/ca-key.pem"))
`)
	for _, want := range []string{"src " + sa.String(), "ifaces ['eth0']", "gw " + hostAddr(sa).String(), "dns ['" + g.String() + "']",
		"ca True /etc/sandboxd/ca-bundle.pem True", "key False"} {
		if !strings.Contains(out, want) {
			t.Errorf("sandbox A's network: %q lacks %q", out, want)
		}
	}

	// B listens on TCP 8080 and UDP 9999 while A tries both (and its TCP
	// goes to the gateway): B must see nothing.
	bID, err := m.Submit(ctx, core.ExecRequest{SandboxID: b.ID, Language: "python", Code: `
import socket, select
t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); t.bind(("0.0.0.0", 8080)); t.listen()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", 9999))
print("listening", flush=True)
r, _, _ = select.select([t, u], [], [], 8)
print("B saw", "something" if r else "nothing")
`})
	if err != nil {
		t.Fatal(err)
	}
	bOut := make(chan string, 1)
	listening := make(chan struct{})
	go func() {
		var text strings.Builder
		once := sync.Once{}
		err := m.Follow(ctx, b.ID, bID, 0, func(e core.Event) error {
			text.WriteString(e.Text)
			if strings.Contains(text.String(), "listening") {
				once.Do(func() { close(listening) })
			}
			return nil
		})
		once.Do(func() { close(listening) })
		if err != nil {
			text.WriteString("follow: " + err.Error())
		}
		bOut <- text.String()
	}()
	<-listening

	targets := []netip.AddrPort{
		netip.AddrPortFrom(in.Hosts["a.test"].Addr, 80),
		netip.AddrPortFrom(in.Hosts["a.test"].Addr, 443),
		netip.AddrPortFrom(in.Hosts["b.test"].Addr, 8081),
		netip.AddrPortFrom(nettest.MetadataAddr, 80),
		netip.AddrPortFrom(in.Hosts["bridge.test"].Addr, uint16(in.Hosts["bridge.test"].Port(false))),
		netip.AddrPortFrom(sb, 8080),
		netip.AddrPortFrom(hostAddr(sa), 22),
		netip.AddrPortFrom(g, 80),
	}
	var py strings.Builder
	py.WriteString("import socket\n")
	for _, d := range targets {
		fmt.Fprintf(&py, `
try:
    c = socket.create_connection(("%s", %d), timeout=5); print("tcp %s", c.recv(100).decode().strip())
except Exception as e:
    print("tcp %s error", e)
`, d.Addr(), d.Port(), d, d)
	}
	fmt.Fprintf(&py, `
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for dst in [("%s", %d), ("%s", %d), ("%s", 9999)]:
    u.sendto(b"x", dst)
q = bytes.fromhex("12340100000100000000000001610474657374000001" + "0001")
for ns in ["%s", "%s"]:
    u.sendto(q, (ns, 53))
try:
    socket.create_connection(("%s", 53), timeout=5).close(); print("dns over tcp connected")
except Exception as e:
    print("dns over tcp error", e)
try:
    i = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
    i.sendto(bytes.fromhex("0800f7ff00000000"), ("%s", 0)); print("icmp sent")
except Exception as e:
    print("icmp error", e)
try:
    socket.create_connection(("2001:db8::1", 80), timeout=3); print("ipv6 connected")
except Exception as e:
    print("ipv6 error", e)
print("if_inet6", open("/proc/net/if_inet6").read().strip() if __import__("os").path.exists("/proc/net/if_inet6") else "")
`, in.Hosts["a.test"].Addr, nettest.UDPPort, nettest.MetadataAddr, nettest.UDPPort, sb,
		g, in.Hosts["a.test"].Addr, in.Hosts["b.test"].Addr, in.Hosts["a.test"].Addr)
	out = mustRunOK(t, m, a.ID, "python", py.String())
	t.Logf("sandbox A:\n%s", out)
	for _, d := range targets {
		if !strings.Contains(out, fmt.Sprintf("tcp %s gateway", d)) {
			t.Errorf("TCP to %s did not reach the gateway: %q", d, out)
		}
	}
	if !strings.Contains(out, "dns over tcp connected") {
		t.Errorf("DNS over TCP did not reach the gateway: %q", out)
	}
	if !strings.Contains(out, "ipv6 error") || strings.Contains(out, "eth0") {
		t.Errorf("IPv6: %q", out)
	}
	if got := <-bOut; !strings.Contains(got, "B saw nothing") {
		t.Errorf("sandbox B: %q; want it to see nothing of A", got)
	}

	// The gateway saw each connection from S with its original
	// destination, and both DNS queries.
	waitFor(t, gws[0], func(conns []observedConn, queries []netip.Addr) bool {
		return len(conns) >= len(targets) && len(queries) >= 3
	})
	conns, queries, attached := gws[0].snapshot()
	for _, d := range targets {
		found := false
		for _, c := range conns {
			found = found || (c.dst == d && c.src.Addr() == sa)
		}
		if !found {
			t.Errorf("the gateway saw no connection from %s to %s: %v", sa, d, conns)
		}
	}
	for _, q := range queries {
		if q != sa {
			t.Errorf("a DNS query from %s; want %s", q, sa)
		}
	}
	if attached[a.ID] != sa || attached[b.ID] != sb {
		t.Errorf("attached %v; want %s=%s, %s=%s", attached, a.ID, sa, b.ID, sb)
	}
	// The test hosts saw nothing at all.
	for name, h := range in.Hosts {
		if n := h.AllAccepts(); n != 0 {
			t.Errorf("%s accepted %d connections from a sandbox", name, n)
		}
		if n := h.UDPDatagrams(); n != 0 {
			t.Errorf("%s received %d datagrams from a sandbox", name, n)
		}
		if name != "bridge.test" {
			if n, err := h.ICMPEchoRequests(); err != nil || n != 0 {
				t.Errorf("%s received %d ICMP echo requests (%v)", name, n, err)
			}
		}
	}

	// Hibernation removes both containers, the holder's veth, and keeps
	// the address; the wake plumbs it again.
	if _, err := m.Hibernate(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := netlink.LinkByName(cfg.netNames.link(a.ID)); err == nil {
		t.Errorf("the hibernated sandbox's host end %s is still there", cfg.netNames.link(a.ID))
	}
	if _, err := c.ContainerInspect(ctx, holderNamePrefix+a.ID); err == nil {
		t.Errorf("the hibernated sandbox's holder is still there")
	}
	if _, _, err := m.Wake(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if got := m.Manager.addrOf(t, a.ID); got != sa {
		t.Errorf("woken sandbox's address %s; want %s", got, sa)
	}
	checkReaches := func(who string, m *validated, id string, s netip.Addr) {
		t.Helper()
		dst := netip.AddrPortFrom(in.Hosts["a.test"].Addr, 80)
		out := mustRunOK(t, m, id, "python", fmt.Sprintf(`
import socket
c = socket.create_connection(("%s", %d), timeout=5); print(c.getsockname()[0], c.recv(100).decode().strip())`, dst.Addr(), dst.Port()))
		if want := s.String() + " gateway"; !strings.Contains(out, want) {
			t.Errorf("%s: %q; want %q", who, out, want)
		}
	}
	checkReaches("after the wake", m, a.ID, sa)

	// A restart of the Manager keeps the addresses and the plumbing, and
	// attaches both sandboxes to the new gateway.
	if err := m.Manager.Close(); err != nil {
		t.Fatal(err)
	}
	m2, err := New(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m2.Close() })
	v2 := validate(m2)
	checkReaches("after a restart", v2, a.ID, sa)
	checkReaches("B after a restart", v2, b.ID, sb)
	if _, _, att := gws[len(gws)-1].snapshot(); att[a.ID] != sa || att[b.ID] != sb {
		t.Errorf("after a restart attached %v", att)
	}

	// A holder that dies takes its sandbox with it.
	if err := c.ContainerKill(ctx, holderNamePrefix+b.ID, "KILL"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, err := m2.Get(ctx, b.ID)
		if err == nil && s.State == core.StateDead {
			t.Logf("B after its holder was killed: %s", s.StateReason)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B after its holder was killed: %+v, %v; want dead", s, err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Deleting removes the holder and the host end.
	if err := v2.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ContainerInspect(ctx, holderNamePrefix+a.ID); err == nil {
		t.Errorf("the deleted sandbox's holder is still there")
	}
	if _, err := netlink.LinkByName(cfg.netNames.link(a.ID)); err == nil {
		t.Errorf("the deleted sandbox's host end is still there")
	}
}

// waitFor waits, bounded, until the gateway's records satisfy ok.
func waitFor(t *testing.T, g *observingGateway, ok func([]observedConn, []netip.Addr) bool) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		conns, queries, _ := g.snapshot()
		if ok(conns, queries) {
			return
		}
		select {
		case <-g.changed:
		case <-timeout:
			t.Errorf("the gateway's records never got there: %v, %v", conns, queries)
			return
		}
	}
}

// addrOf is sandbox id's address S.
func (m *Manager) addrOf(t *testing.T, id string) netip.Addr {
	t.Helper()
	sb := m.reg.get(id)
	if sb == nil {
		t.Fatalf("no sandbox %s", id)
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.net == nil {
		t.Fatalf("sandbox %s has no network", id)
	}
	return sb.net.Addr
}

// logTable logs the table as nft lists it.
func logTable(t *testing.T, table string) {
	t.Helper()
	out, err := runOutput("nft", "list", "table", "inet", table)
	if err != nil {
		t.Logf("nft list table inet %s: %v", table, err)
		return
	}
	var b strings.Builder
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		b.WriteString(sc.Text() + "\n")
	}
	t.Logf("nft list table inet %s:\n%s", table, b.String())
}

func runOutput(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}

// TestIntegrationNetworkSurvivesRestarts: a networked sandbox whose
// driver crashes is restarted by Docker into the same namespace and keeps
// its network, under runc and runsc (whose netstack takes the address at
// each boot: sandboxd puts it back), with sandboxd running and while it
// is down.
func TestIntegrationNetworkSurvivesRestarts(t *testing.T) {
	testenv.NeedDocker(t)
	for _, rt := range netRuntimes(t) {
		t.Run(rt, func(t *testing.T) {
			in := nettest.New(t, nettest.Options{Hosts: []string{"a.test"}})
			m, c, cfg := integrationManager(t, netTestConfig(t, nil), func(c *Config) {
				c.Runtime = rt
				if rt == core.RuntimeGVisor {
					c.DefaultLimits.PidsLimit = 256
				}
			})
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
			defer cancel()
			res, err := m.Acquire(ctx, "net-crash", core.Options{Network: true})
			if err != nil {
				t.Fatal(err)
			}
			id := res.Sandbox.ID
			s := m.Manager.addrOf(t, id)
			reaches := func(m *validated, when string) {
				t.Helper()
				out := mustRunOK(t, m, id, "python", fmt.Sprintf(`
import socket
c = socket.create_connection(("%s", 80), timeout=5); print(c.getsockname()[0], c.recv(100).decode().strip())`, in.Hosts["a.test"].Addr))
				if want := s.String() + " gateway"; !strings.Contains(out, want) {
					t.Errorf("%s: %q; want %q", when, out, want)
				}
			}
			crash := func(m *validated) {
				t.Helper()
				before, err := c.ContainerInspect(ctx, res.Sandbox.ContainerID)
				if err != nil {
					t.Fatal(err)
				}
				evs := runCommand(t, m, id, core.ExecRequest{Language: "bash", Code: "kill -KILL $(pgrep -x sandbox-driver); sleep 30"})
				if d := lastDone(t, evs); d.Status != "killed" {
					t.Fatalf("done after the driver crash = %+v", d)
				}
				after, err := c.ContainerInspect(ctx, res.Sandbox.ContainerID)
				if err != nil || after.RestartCount <= before.RestartCount {
					t.Fatalf("restart count %d → %d, %v; want a restart", before.RestartCount, after.RestartCount, err)
				}
			}
			reaches(m, "at first")
			crash(m)
			reaches(m, "after a crash with sandboxd running")

			// The driver crashes while sandboxd is down.
			if err := m.Manager.Close(); err != nil {
				t.Fatal(err)
			}
			before, err := c.ContainerInspect(ctx, res.Sandbox.ContainerID)
			if err != nil {
				t.Fatal(err)
			}
			info := crashDriver(t, ctx, c, res.Sandbox.ContainerID)
			t.Logf("restarted while sandboxd was down: started %s → %s, restarts %d → %d", before.State.StartedAt, info.State.StartedAt, before.RestartCount, info.RestartCount)
			m2, err := New(ctx, cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { m2.Close() })
			reaches(validate(m2), "after a crash with sandboxd down")
		})
	}
}

// TestIntegrationNetworkRealGateway is the whole data path with the
// egress package's gateway: a
// networked sandbox resolves a test name through the gateway's DNS and
// fetches from it, fetches from another test host by address, and is
// refused the metadata address, under runc and runsc.
func TestIntegrationNetworkRealGateway(t *testing.T) {
	testenv.NeedDocker(t)
	for _, rt := range netRuntimes(t) {
		t.Run(rt, func(t *testing.T) {
			in := nettest.New(t, nettest.Options{Hosts: []string{"a.test", "b.test"}, Metadata: true})
			netCfg := netTestConfig(t, nil)
			m, _, _ := integrationManager(t, netCfg, func(c *Config) {
				c.NewGateway = nil // the egress package's (applyDefaults)
				c.Runtime = rt
				c.Egress = egress.Config{Resolver: in.Resolver(), RootCAs: in.RootCAs}
				if rt == core.RuntimeGVisor {
					c.DefaultLimits.PidsLimit = 256
				}
			})
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			start := time.Now()
			res, err := m.Acquire(ctx, "real", core.Options{Network: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("networked sandbox with the real gateway (%s): created in %v", rt, time.Since(start).Round(time.Millisecond))
			out := mustRunOK(t, m, res.Sandbox.ID, "python", fmt.Sprintf(`
import urllib.request, socket
for url in ["http://a.test/", "http://%s/", "http://%s/"]:
    try:
        print(url, urllib.request.urlopen(url, timeout=10).read().decode().strip())
    except Exception as e:
        print(url, "refused:", type(e).__name__, e)
try:
    print("resolve a.test", socket.gethostbyname("a.test"))
except Exception as e:
    print("resolve a.test refused", e)
`, in.Hosts["b.test"].Addr, nettest.MetadataAddr))
			t.Logf("%s", out)
			if !strings.Contains(out, "http://a.test/ hello from a.test") || !strings.Contains(out, "hello from b.test") ||
				strings.Contains(out, "hello from metadata") {
				t.Errorf("real gateway: %q", out)
			}
		})
	}
}
