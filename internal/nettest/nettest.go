//go:build linux

// Package nettest makes the tests' "internet" on this machine: test hosts
// in network namespaces of their own, each joined to the host by a veth
// pair, on addresses of the benchmarking block 198.18.0.0/15 (RFC 2544),
// serving HTTP (80), HTTPS (443, with a throwaway CA), a WebSocket
// echo (/ws on both) and a body of a given size (/bytes?n=N, for
// throughput figures); a host at a link-local address of its own (169.254.77.2, in its own namespace, never the real metadata address) standing in for a cloud
// metadata service (link-local, routed from the host); a listener on the
// host's Docker bridge address; and a resolver (and hosts file) mapping
// the test names to those addresses. Nothing here ever reaches another
// address: the hosts listen, they never dial.
//
// Each host counts what reaches it (TCP connections per port, UDP
// datagrams to port 9999, ICMP echo requests), so that a test can assert
// that a sandbox's packet did not arrive. The listeners are the test
// process's own sockets, made in the host's namespace by a thread that
// entered it (a socket stays in the namespace it was made in), served by
// ordinary goroutines; the thread is then discarded, never reused.
//
// Everything is removed when the test ends, failed or not (t.Cleanup):
// the namespaces (their veths go with them). Namespaces a killed test
// process left behind are named after its PID and removed by the next
// New. Needs root; without it a test skips (fails under CI=true).
package nettest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// MetadataAddr is the metadata service stand-in's address.
var MetadataAddr = netip.MustParseAddr("169.254.77.2")

// UDPPort is where every host counts datagrams.
const UDPPort = 9999

// MaxBytes bounds /bytes?n=N: a mistaken N must not stream for ever.
const MaxBytes = 1 << 30

// Options says what to make.
type Options struct {
	// Hosts are the test hosts' names (e.g. "allowed.test"), one namespace
	// each on an address of 198.18.0.0/15.
	Hosts []string
	// Metadata adds the host at MetadataAddr (named "metadata.test").
	// Only one test process on a machine can have it at a time: New waits
	// for it (a file lock).
	Metadata bool
	// Bridge adds a listener on the host's Docker bridge address
	// (docker0), named "bridge.test".
	Bridge bool
}

// Internet is what New made.
type Internet struct {
	// Hosts by name, Metadata and Bridge included when asked for.
	Hosts map[string]*Host
	// CAPEM is the throwaway CA every HTTPS host's certificate is signed
	// by; RootCAs holds it.
	CAPEM   []byte
	RootCAs *x509.CertPool
	// HostsFile is a hosts(5) file of the names.
	HostsFile string
}

// Host is one test host (or the bridge listener).
type Host struct {
	Name string
	Addr netip.Addr
	ns   string // namespace name; "" for the bridge listener
	// tlsNext: the bridge listener's next counted listener is its HTTPS one
	// (its ports are any, not 80 and 443).
	tlsNext bool

	accepts  sync.Map // port → *atomic.Int64
	udp      atomic.Int64
	mu       sync.Mutex
	requests []Request
}

// Request is an HTTP request a host served.
type Request struct {
	TLS    bool
	Host   string
	Path   string
	Header http.Header
	From   string
}

// Accepts is the number of TCP connections accepted on port.
func (h *Host) Accepts(port int) int64 {
	if v, ok := h.accepts.Load(port); ok {
		return v.(*portCounter).Load()
	}
	return 0
}

// AllAccepts is the number of TCP connections accepted on every port.
func (h *Host) AllAccepts() int64 {
	var n int64
	h.accepts.Range(func(_, v any) bool { n += v.(*portCounter).Load(); return true })
	return n
}

// UDPDatagrams is the number of datagrams received on UDPPort.
func (h *Host) UDPDatagrams() int64 { return h.udp.Load() }

// Requests returns the HTTP requests served, oldest first.
func (h *Host) Requests() []Request {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Request(nil), h.requests...)
}

// ICMPEchoRequests is the number of ICMP echo requests the host's
// namespace received (its kernel's counter; 0 for the bridge listener).
func (h *Host) ICMPEchoRequests() (int64, error) {
	if h.ns == "" {
		return 0, errors.New("the bridge listener has no namespace of its own")
	}
	var n int64
	err := inNamed(h.ns, func() error {
		b, err := os.ReadFile("/proc/net/snmp")
		if err != nil {
			return err
		}
		var head []string
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 || f[0] != "Icmp:" {
				continue
			}
			if head == nil {
				head = f
				continue
			}
			for i, k := range head {
				if k == "InEchos" && i < len(f) {
					n, err = strconv.ParseInt(f[i], 10, 64)
					return err
				}
			}
		}
		return errors.New("no Icmp InEchos in /proc/net/snmp")
	})
	return n, err
}

// Resolver resolves the test names, and nothing else (a name it does not
// know is not found; it never asks a DNS server). Its LookupNetIP is the
// egress gateway's Resolver's.
type Resolver map[string][]netip.Addr

// LookupNetIP returns the name's addresses of the network ("ip", "ip4",
// "ip6").
func (r Resolver) LookupNetIP(_ context.Context, network, host string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, a := range r[strings.ToLower(strings.TrimSuffix(host, "."))] {
		if network == "ip" || (network == "ip4") == a.Is4() {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return nil, &net.DNSError{Err: "no such test host", Name: host, IsNotFound: true}
	}
	return out, nil
}

// Resolver maps every name of in to its address.
func (in *Internet) Resolver() Resolver {
	r := Resolver{}
	for name, h := range in.Hosts {
		r[name] = []netip.Addr{h.Addr}
	}
	return r
}

// T is what New needs of its caller: a *testing.T or *testing.B, or a
// program's stand-in (cmd/sandbox-bench makes a test internet too). Fatal
// and Fatalf must not return; Cleanup's functions run, last registered
// first, when the caller is done with the internet.
type T interface {
	Helper()
	Cleanup(func())
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	TempDir() string
}

// unavailable is testenv.Unavailable for a test (skip, or fail under
// CI=true); a program has nothing to skip, so it fails.
func unavailable(t T, format string, args ...any) {
	t.Helper()
	if tb, ok := t.(testing.TB); ok {
		testenv.Unavailable(tb, format, args...)
		return
	}
	t.Fatalf(format, args...)
}

// New makes the internet o asks for, removed when t ends.
func New(t T, o Options) *Internet {
	t.Helper()
	if os.Geteuid() != 0 {
		unavailable(t, "the test internet needs root (network namespaces, veth pairs)")
	}
	sweepStale(t)
	in := &Internet{Hosts: map[string]*Host{}, HostsFile: filepath.Join(t.TempDir(), "hosts")}
	names := append([]string(nil), o.Hosts...)
	if o.Metadata {
		names = append(names, "metadata.test")
	}
	if o.Bridge {
		names = append(names, "bridge.test")
	}
	var ips []net.IP
	block := FreeBlock(t)
	tag := fmt.Sprintf("%04x", mrand.IntN(1<<16))
	for i, name := range o.Hosts {
		h := &Host{Name: name, Addr: pairAddr(block, i, 1)}
		in.Hosts[name] = h
		ips = append(ips, h.Addr.AsSlice())
		if err := makeNamespace(t, h, tag, i, pairAddr(block, i, 0), h.Addr); err != nil {
			t.Fatalf("nettest: host %s: %v", name, err)
		}
	}
	if o.Metadata {
		lockMetadata(t)
		clearMetadataLinks(t)
		h := &Host{Name: "metadata.test", Addr: MetadataAddr}
		in.Hosts[h.Name] = h
		ips = append(ips, h.Addr.AsSlice())
		if err := makeNamespace(t, h, tag, len(o.Hosts), MetadataAddr.Next(), MetadataAddr); err != nil {
			t.Fatalf("nettest: metadata host: %v", err)
		}
	}
	if o.Bridge {
		a, err := dockerBridgeAddr()
		if err != nil {
			unavailable(t, "no Docker bridge address for the bridge listener: %v", err)
		}
		in.Hosts["bridge.test"] = &Host{Name: "bridge.test", Addr: a}
		ips = append(ips, a.AsSlice())
	}
	ca, caPEM, leaf := makeCerts(t, names, ips)
	in.CAPEM, in.RootCAs = caPEM, x509.NewCertPool()
	in.RootCAs.AddCert(ca)
	for _, name := range names {
		h := in.Hosts[name]
		if err := h.serve(t, leaf); err != nil {
			t.Fatalf("nettest: serve %s: %v", name, err)
		}
	}
	var hosts strings.Builder
	for _, name := range names {
		fmt.Fprintf(&hosts, "%s %s\n", in.Hosts[name].Addr, name)
	}
	if err := os.WriteFile(in.HostsFile, []byte(hosts.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return in
}

// nsPrefix names the namespaces: nsPrefix<pid>-<tag>-<index>.
const nsPrefix = "sbxnt-"

// FreeBlock picks a /24 of 198.18.0.0/15 that no address of this host is
// in (other test processes may be using one). A user of the block claims
// it by putting one of its addresses on a link of the host.
func FreeBlock(t T) netip.Prefix {
	p, err := FreeBlockErr()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// FreeBlockErr is FreeBlock for programs that are not tests.
func FreeBlockErr() (netip.Prefix, error) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("nettest: list addresses: %w", err)
	}
	for range 64 {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, byte(18 + mrand.IntN(2)), byte(mrand.IntN(256)), 0}), 24)
		used := false
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok && p.Contains(ip.Unmap()) {
				used = true
			}
		}
		if !used {
			return p, nil
		}
	}
	return netip.Prefix{}, errors.New("nettest: no free /24 in 198.18.0.0/15")
}

// pairAddr is end (0: the host's, 1: the namespace's) of pair i of block.
func pairAddr(block netip.Prefix, i, end int) netip.Addr {
	b := block.Addr().As4()
	b[3] = byte(2*i + end)
	return netip.AddrFrom4(b)
}

// makeNamespace makes h's namespace, joined to the host by a veth: hostEnd
// on the host's side, h.Addr on eth0 inside, /31, with a default route
// back through the host.
func makeNamespace(t T, h *Host, tag string, i int, hostEnd, addr netip.Addr) error {
	h.ns = fmt.Sprintf("%s%d-%s-%d", nsPrefix, os.Getpid(), tag, i)
	if err := onThread(func() error {
		ns, err := netns.NewNamed(h.ns) // moves this (discarded) thread in
		if err != nil {
			return err
		}
		return ns.Close()
	}); err != nil {
		return fmt.Errorf("create namespace %s: %w", h.ns, err)
	}
	t.Cleanup(func() {
		if err := netns.DeleteNamed(h.ns); err != nil {
			t.Logf("nettest: remove namespace %s: %v", h.ns, err)
		}
	})
	ns, err := netns.GetFromName(h.ns)
	if err != nil {
		return err
	}
	defer ns.Close()
	la := netlink.NewLinkAttrs()
	la.Name = fmt.Sprintf("nt%s-%d", tag, i)
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(ns))}); err != nil {
		return fmt.Errorf("veth %s: %w", la.Name, err)
	}
	host, err := netlink.LinkByName(la.Name)
	if err != nil {
		return err
	}
	// Deleting the veth takes both ends away at once; a deleted namespace
	// goes later (the kernel frees it in the background), and until then
	// its veth's routes would shadow the next test's on the same addresses.
	t.Cleanup(func() {
		if err := netlink.LinkDel(host); err != nil {
			t.Logf("nettest: remove veth %s: %v", la.Name, err)
		}
	})
	if err := netlink.AddrAdd(host, &netlink.Addr{IPNet: ipNet(hostEnd, 31)}); err != nil {
		return err
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return err
	}
	nh, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer nh.Close()
	eth0, err := nh.LinkByName("eth0")
	if err != nil {
		return err
	}
	if err := nh.AddrAdd(eth0, &netlink.Addr{IPNet: ipNet(addr, 31)}); err != nil {
		return err
	}
	for _, name := range []string{"eth0", "lo"} {
		l, err := nh.LinkByName(name)
		if err != nil {
			return err
		}
		if err := nh.LinkSetUp(l); err != nil {
			return err
		}
	}
	return nh.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: hostEnd.AsSlice(), Dst: ipNet(netip.IPv4Unspecified(), 0)})
}

func ipNet(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, 32)}
}

// onThread runs f on a thread of its own that is never reused: the
// goroutine ends with the thread locked, so the runtime ends the thread
// with whatever namespace f left it in.
func onThread(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		errc <- f()
	}()
	return <-errc
}

// inNamed runs f on a discarded thread in the named namespace.
func inNamed(name string, f func() error) error {
	return onThread(func() error {
		ns, err := netns.GetFromName(name)
		if err != nil {
			return err
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			return err
		}
		return f()
	})
}

// serve opens h's listeners (in its namespace) and serves them until the
// test ends: HTTP on 80, HTTPS on 443 (leaf), both with /ws, and UDP
// datagrams counted on UDPPort. The bridge listener serves HTTP on a port
// of its own instead (Port 0: any).
func (h *Host) serve(t T, leaf tls.Certificate) error {
	var plain, secure net.Listener
	var udp net.PacketConn
	open := func() error {
		var err error
		ip := h.Addr.String()
		httpPort, httpsPort, udpPort := "80", "443", strconv.Itoa(UDPPort)
		if h.ns == "" { // the host's own namespace: ports nobody else uses
			httpPort, httpsPort, udpPort = "0", "0", "0"
		}
		if plain, err = net.Listen("tcp4", net.JoinHostPort(ip, httpPort)); err != nil {
			return err
		}
		if secure, err = net.Listen("tcp4", net.JoinHostPort(ip, httpsPort)); err != nil {
			return err
		}
		udp, err = net.ListenPacket("udp4", net.JoinHostPort(ip, udpPort))
		return err
	}
	var err error
	if h.ns != "" {
		err = inNamed(h.ns, open)
	} else {
		err = open()
	}
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		h.record(r)
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if err := c.Write(r.Context(), typ, msg); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("/bytes", func(w http.ResponseWriter, r *http.Request) {
		h.record(r)
		n, err := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		if err != nil || n < 0 || n > MaxBytes {
			http.Error(w, fmt.Sprintf("want /bytes?n=N, 0 <= N <= %d", MaxBytes), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		buf := make([]byte, 64<<10)
		for n > 0 {
			k, err := w.Write(buf[:min(n, int64(len(buf)))])
			if err != nil {
				return
			}
			n -= int64(k)
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.record(r)
		fmt.Fprintf(w, "hello from %s\n", h.Name)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	tlsSrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{leaf}, MinVersion: tls.VersionTLS12}}
	go srv.Serve(h.counting(plain))
	go tlsSrv.ServeTLS(h.counting(secure), "", "")
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := udp.ReadFrom(buf); err != nil {
				return
			}
			h.udp.Add(1)
		}
	}()
	t.Cleanup(func() {
		srv.Close()
		tlsSrv.Close()
		udp.Close()
	})
	return nil
}

func (h *Host) record(r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.requests) < 1000 {
		h.requests = append(h.requests, Request{TLS: r.TLS != nil, Host: r.Host, Path: r.URL.Path, Header: r.Header.Clone(), From: r.RemoteAddr})
	}
}

// Port is the port h serves HTTP on (80, or the bridge listener's) or,
// with tls, HTTPS (443, or the bridge listener's).
func (h *Host) Port(tls bool) int {
	p := 0
	h.accepts.Range(func(k, v any) bool {
		if v.(*portCounter).tls == tls {
			p = k.(int)
		}
		return true
	})
	return p
}

type portCounter struct {
	atomic.Int64
	tls bool
}

// counting counts l's accepted connections under its port.
func (h *Host) counting(l net.Listener) net.Listener {
	port := l.Addr().(*net.TCPAddr).Port
	c := &portCounter{tls: port == 443 || (h.ns == "" && h.tlsNext)}
	h.tlsNext = !h.tlsNext
	h.accepts.Store(port, c)
	return &countingListener{Listener: l, n: &c.Int64}
}

type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// makeCerts makes a throwaway CA and a leaf for names and ips.
func makeCerts(t T, names []string, ips []net.IP) (*x509.Certificate, []byte, tls.Certificate) {
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sandboxd nettest CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "nettest"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), DNSNames: names, IPAddresses: ips,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// dockerBridgeAddr is docker0's IPv4 address.
func dockerBridgeAddr() (netip.Addr, error) {
	l, err := netlink.LinkByName("docker0")
	if err != nil {
		return netip.Addr{}, err
	}
	addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
	if err != nil || len(addrs) == 0 {
		return netip.Addr{}, fmt.Errorf("docker0 has no IPv4 address: %v", err)
	}
	a, _ := netip.AddrFromSlice(addrs[0].IP)
	return a.Unmap(), nil
}

// lockMetadata holds the machine's metadata-host lock until t ends.
func lockMetadata(t T) {
	f, err := os.OpenFile("/run/sandboxd-nettest-metadata.lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
}

// sweepStale removes namespaces of nettest processes that are gone.
func sweepStale(t T) {
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), nsPrefix)
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(strings.SplitN(rest, "-", 2)[0])
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) == nil || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			continue
		}
		if err := netns.DeleteNamed(e.Name()); err != nil {
			t.Logf("nettest: remove stale namespace %s: %v", e.Name(), err)
		}
	}
}

// clearMetadataLinks removes what is left on the host of an earlier
// metadata host (a test process killed before its clean-up, whose namespace
// sweepStale deleted while the kernel still holds its veth): a host link
// with the metadata pair's host address, whose route to MetadataAddr would
// shadow this one's.
func clearMetadataLinks(t T) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatalf("nettest: list addresses: %v", err)
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); !ok || ip.Unmap() != MetadataAddr.Next() {
			continue
		}
		l, err := netlink.LinkByIndex(a.LinkIndex)
		if err != nil {
			continue // gone meanwhile
		}
		if !strings.HasPrefix(l.Attrs().Name, "nt") || l.Type() != "veth" {
			t.Fatalf("nettest: %s on link %s, not a test veth: the metadata host cannot be made here", MetadataAddr.Next(), l.Attrs().Name)
		}
		if err := netlink.LinkDel(l); err != nil && !errors.Is(err, syscall.ENODEV) {
			t.Fatalf("nettest: remove stale veth %s: %v", l.Attrs().Name, err)
		}
	}
}
