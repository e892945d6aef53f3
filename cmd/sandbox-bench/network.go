package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sandboxclient "github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/nettest"
	"github.com/sandboxd/sandboxd/internal/sandboxdproc"
	"github.com/sandboxd/sandboxd/orchestrator/labels"
)

// Networking figures (issue 23): what sandboxd's egress gateway and its
// ports front cost next to Docker's own networking, in the same run.
//
// Egress: a networked sandbox reaches a test host (internal/nettest: a
// namespace on 198.18.0.0/15 joined to this host by a veth) only through
// the gateway: the kernel DNATs its connection to the gateway's socket, the
// gateway reads the request's Host, judges it and dials the destination
// itself, then splices the two sockets in userspace. The peer runs the same
// script in `docker run --network bridge`, whose packets the kernel
// forwards and masquerades. The script times itself, so neither figure
// pays for a container start.
//
// Ingress: a server inside the sandbox on port 8080, reached through the
// URL GetHost returns (sandboxd's reverse proxy, the traffic token in a
// header) and, as the peer, directly at the sandbox's own address, which
// this host routes to it.
var (
	mEgressGetP50   = metric{"egress_get_p50", "egress: HTTP GET on a new connection p50", "ms", true, "faster", "slower"}
	mEgressGetP90   = metric{"egress_get_p90", "egress: HTTP GET on a new connection p90", "ms", true, "faster", "slower"}
	mEgressDownload = metric{"egress_download", "egress: HTTP download of one large body", "MB/s", false, "faster", "slower"}
	mIngressP50     = metric{"ingress_get_p50", "ingress: HTTP GET to a port p50 (keep-alive)", "ms", true, "faster", "slower"}
	// Its name gets the number of clients (--net-clients).
	mIngressRPS = metric{"ingress_rps", "ingress: HTTP requests/s to a port, %d clients", "req/s", false, "more", "fewer"}
)

// netMetrics are the rows of the network phase.
var netMetrics = []metric{mEgressGetP50, mEgressGetP90, mEgressDownload, mIngressP50, mIngressRPS}

// netHost is the test host's name, which the sandbox resolves through the
// gateway's DNS (sandboxd --egress-hosts-file) and the peer through
// --add-host.
const netHost = "bench.test"

// netPortsDomain is the ports front's domain (Host form, E2B's): the
// benchmark dials the front and names the port in the Host header, so no
// DNS is involved.
const netPortsDomain = "ports.test"

// ingressPort is where the sandbox's server listens.
const ingressPort = 8080

// netState is what the network phase set up before sandboxd started: the
// test internet, sandboxd's flags, and why the phase cannot run when it
// cannot ("" when it can).
type netState struct {
	skip     string
	flags    []string // for the self-started sandboxd
	t        *netT
	in       *nettest.Internet
	instance string       // sandboxd --egress-instance: its table and bridge
	subnet   netip.Prefix // sandboxd --egress-subnet
	caFile   string       // the test host's CA, which the gateways trust (--egress-ca-file)
}

// netSetup makes the test host and the flags a self-started sandboxd needs
// for the network phase; with --addr, or without root, it records why the
// phase is skipped instead.
func (b *bench) netSetup() {
	switch {
	case b.cfg.addr != "":
		b.net.skip = "needs a self-started sandboxd (no --addr): the test host must be in its --egress-hosts-file, and it needs --allow-network and --ports-listen"
		return
	case os.Geteuid() != 0:
		b.net.skip = "needs root: the test host is a network namespace joined by a veth, and networked sandboxes need nftables"
		return
	}
	t := &netT{dir: filepath.Join(b.tmp, "net"), log: b.progress}
	b.net.t = t
	in, err := t.run(func() *nettest.Internet { return nettest.New(t, nettest.Options{Hosts: []string{netHost}}) })
	if err != nil {
		b.net.skip = "the test host could not be made: " + err.Error()
		return
	}
	b.net.in = in
	// A /24 of 198.19.0.0/16 (benchmarking addresses, like the test
	// host's) and a name of the benchmark's own: apart from the tests'.
	en, err := sandboxdproc.NewEgressNet('b', netip.MustParsePrefix("198.19.0.0/16"), in.Hosts[netHost].Addr)
	if err != nil {
		b.net.skip = err.Error()
		return
	}
	b.net.instance, b.net.subnet = en.Instance, en.Subnet
	b.net.caFile = filepath.Join(b.tmp, "net-test-ca.pem")
	if err := os.WriteFile(b.net.caFile, in.CAPEM, 0o644); err != nil {
		b.net.skip = err.Error()
		return
	}
	// sandboxd leaves its table and bridge when it stops (a restart keeps
	// its sandboxes' network); the benchmark's go with it.
	t.Cleanup(func() {
		if err := en.Remove(); err != nil {
			b.progress("%v", err)
		}
	})
	b.net.flags = append(append([]string{"--allow-network"}, en.Flags()...),
		"--egress-hosts-file", in.HostsFile, "--egress-ca-file", b.net.caFile, "--ports-listen", "127.0.0.1:0", "--ports-domain", netPortsDomain)
}

// netCleanup removes the test host and sandboxd's network objects, after
// sandboxd stopped.
func (b *bench) netCleanup() {
	if b.net.t != nil {
		b.net.t.cleanup()
	}
}

// netT is nettest.T for a program: Fatal ends the function run runs
// (a panic run recovers), and cleanup runs the clean-ups, last first.
type netT struct {
	dir      string
	log      func(string, ...any)
	n        int
	cleanups []func()
}

// netFatal is what netT's Fatal panics with.
type netFatal string

func (t *netT) Helper()          {}
func (t *netT) Cleanup(f func()) { t.cleanups = append(t.cleanups, f) }
func (t *netT) Fatal(args ...any) {
	panic(netFatal(fmt.Sprint(args...)))
}
func (t *netT) Fatalf(format string, args ...any) {
	panic(netFatal(fmt.Sprintf(format, args...)))
}
func (t *netT) Logf(format string, args ...any) { t.log(format, args...) }

// TempDir is a new directory under t.dir (removed with the benchmark's
// temporary directory).
func (t *netT) TempDir() string {
	t.n++
	dir := filepath.Join(t.dir, fmt.Sprint(t.n))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("%v", err)
	}
	return dir
}

// run calls f, turning a Fatal into an error.
func (t *netT) run(f func() *nettest.Internet) (in *nettest.Internet, err error) {
	defer func() {
		if r := recover(); r != nil {
			msg, ok := r.(netFatal)
			if !ok {
				panic(r)
			}
			err = errors.New(string(msg))
		}
	}()
	return f(), nil
}

func (t *netT) cleanup() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
	t.cleanups = nil
}

// network measures egress through the gateway and ingress through the
// ports front, each next to Docker's own networking.
func (b *bench) network(ctx context.Context) error {
	rps := mIngressRPS
	rps.name = fmt.Sprintf(rps.name, b.cfg.NetClients)
	all := []metric{mEgressGetP50, mEgressGetP90, mEgressDownload, mIngressP50, rps}
	if b.net.skip != "" {
		for _, m := range all {
			b.rep.add(row(m, nan, "", nan, nil, "not measured: "+b.net.skip))
		}
		b.progress("network skipped: %s", b.net.skip)
		return nil
	}
	acq, err := b.c.sb.Acquire(ctx, b.user("net"), sandboxclient.WithNetwork())
	if err == nil {
		b.mu.Lock()
		b.created = append(b.created, acq.ID)
		b.mu.Unlock()
	}
	if err != nil {
		b.fail(err, all...)
		return err
	}
	id := acq.ID
	errE := b.egress(ctx, id)
	errI := b.ingress(ctx, id, rps)
	return errors.Join(errE, errI)
}

// egressScript times, inside the sandbox or the peer container, GETs of a
// small body each on a new connection, then one download of a large body.
// The name is resolved once beforehand (the sandbox asks the gateway's
// DNS, the peer reads /etc/hosts): the figures are the connections'.
const egressScript = `
import http.client, json, socket, time
HOST, WANT, N, SIZE = %q, %q, %d, %d
addr = socket.getaddrinfo(HOST, 80, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
if addr != WANT:
    raise SystemExit(HOST + " resolved to " + addr + ", want " + WANT)

def get(path, timeout=30):
    c = http.client.HTTPConnection(addr, 80, timeout=timeout)
    c.request("GET", path, headers={"Host": HOST})
    r = c.getresponse()
    if r.status != 200:
        raise SystemExit("GET %%s: %%d" %% (path, r.status))
    return c, r

def small():
    c, r = get("/")
    r.read()
    c.close()

small()  # untimed: the first connection warms both paths' caches
lat = []
for _ in range(N):
    t0 = time.perf_counter_ns()
    small()
    lat.append(time.perf_counter_ns() - t0)
buf = memoryview(bytearray(1 << 20))
t0 = time.perf_counter_ns()
c, r = get("/bytes?n=%%d" %% SIZE, timeout=300)
got = 0
while True:
    k = r.readinto(buf)
    if not k:
        break
    got += k
dt = time.perf_counter_ns() - t0
c.close()
if got != SIZE:
    raise SystemExit("downloaded %%d bytes, want %%d" %% (got, SIZE))
print(json.dumps({"get_ns": lat, "download_ns": dt}))
`

// egressResult is what egressScript prints.
type egressResult struct {
	GetNS      []int64 `json:"get_ns"`
	DownloadNS int64   `json:"download_ns"`
}

func (r egressResult) figures(size int64) (latencies, float64) {
	l := make(latencies, len(r.GetNS))
	for i, ns := range r.GetNS {
		l[i] = time.Duration(ns)
	}
	return l, float64(size) / 1e6 / (float64(r.DownloadNS) / 1e9)
}

// egress runs egressScript in sandbox id and in the docker bridge peer.
func (b *bench) egress(ctx context.Context, id string) error {
	all := []metric{mEgressGetP50, mEgressGetP90, mEgressDownload}
	addr := b.net.in.Hosts[netHost].Addr.String()
	size := int64(b.cfg.NetDownloadMB) << 20
	script := fmt.Sprintf(egressScript, netHost, addr, b.cfg.NetRequests, size)

	b.progress("egress through the gateway")
	out, err := b.c.execStdout(ctx, id, "python", script)
	var ours egressResult
	if err == nil {
		err = lastJSON(out, &ours)
	}
	if err != nil {
		err = fmt.Errorf("egress in the sandbox: %w", err)
		b.fail(err, all...)
		return err
	}

	b.progress("peer: egress from docker run --network bridge")
	args := []string{"run", "--rm", "--network", "bridge", "--add-host", netHost + ":" + addr, "--entrypoint", "python3"}
	if rt := b.cfg.runtime; rt != "" {
		// As sandboxd runs networked sandboxes (the Docker backend's
		// netRuntimeOf): gVisor's registration for sealed sandboxes,
		// runsc, has no network stack; runsc-net has gVisor's own.
		if rt == "runsc" {
			rt = "runsc-net"
		}
		args = append(args, "--runtime", rt)
	}
	note := fmt.Sprintf("%d GETs of a 22-byte body from %s (a test host on 198.18.0.0/15, in its own namespace) by Python's http.client, each on a new connection, name resolved once", b.cfg.NetRequests, netHost)
	// The sandbox's CPU limit is the peer's too: the download is as much
	// Python reading as network, and a figure must not measure the cap.
	if cpus, err := sandboxCPUs(ctx, id); err == nil && cpus > 0 {
		args = append(args, "--cpus", strconv.FormatFloat(cpus, 'f', -1, 64))
		note += fmt.Sprintf("; both capped at %s CPUs (the sandbox's limit)", fmtNum(cpus))
	} else {
		note += fmt.Sprintf("; the peer is not CPU-capped like the sandbox (its limit is unknown: %v)", err)
	}
	args = append(args, b.cfg.image, "-c", script)
	var peer egressResult
	var peerErr error
	pout, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err == nil {
		err = lastJSON(string(pout), &peer)
	}
	if err != nil {
		peerErr = fmt.Errorf("docker run --network bridge peer: %w: %s", err, lastLines(string(pout), 5))
		note += "; " + peerErr.Error()
	}
	lat, mbps := ours.figures(size)
	plat, pmbps := peer.figures(size)
	pv := func(l latencies, p float64) float64 {
		if peerErr != nil {
			return nan
		}
		return ms(l.percentile(p))
	}
	if peerErr != nil {
		pmbps = nan
	}
	const peerName = "docker run --network bridge"
	b.rep.add(row(mEgressGetP50, ms(lat.percentile(50)), peerName, pv(plat, 50), nil, note))
	b.rep.add(row(mEgressGetP90, ms(lat.percentile(90)), peerName, pv(plat, 90), nil, ""))
	b.rep.add(row(mEgressDownload, mbps, peerName, pmbps, nil,
		fmt.Sprintf("one GET of /bytes?n=%d (%d MiB) on one connection, read in 1 MiB chunks", size, b.cfg.NetDownloadMB)))
	return peerErr
}

// ingressServer starts, inside the sandbox, a threaded HTTP/1.1 server of
// a fixed small body on ingressPort, in a session of its own so that the
// command returns; waits (bounded) until it accepts; and prints the
// sandbox's own address (the source of its route to the test host).
const ingressServer = `
import socket, subprocess, sys, time
SRV = r'''
import http.server
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The headers and the body are two writes: with Nagle's algorithm the
    # body waits for the client's delayed ACK (40 ms) on a kept-alive
    # connection, on either path.
    disable_nagle_algorithm = True
    def do_GET(self):
        body = b"hello from the sandbox\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", %d), H).serve_forever()
'''
subprocess.Popen([sys.executable, "-c", SRV], start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
deadline = time.monotonic() + 30
while True:
    try:
        socket.create_connection(("127.0.0.1", %d), timeout=1).close()
        break
    except OSError as e:
        if time.monotonic() > deadline:
            raise SystemExit("the server did not accept within 30 s: %%s" %% e)
        time.sleep(0.05)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect((%q, 80))
print(s.getsockname()[0])
`

// ingressBody is what the sandbox's server answers.
const ingressBody = "hello from the sandbox\n"

// ingress measures the sandbox's server through the ports front and
// directly at the sandbox's address.
func (b *bench) ingress(ctx context.Context, id string, rps metric) error {
	all := []metric{mIngressP50, rps}
	out, err := b.c.execStdout(ctx, id, "python",
		fmt.Sprintf(ingressServer, ingressPort, ingressPort, b.net.in.Hosts[netHost].Addr.String()))
	var sbAddr netip.Addr
	if err == nil {
		lines := strings.Fields(out)
		if len(lines) == 0 {
			err = errors.New("the server script printed nothing")
		} else if sbAddr, err = netip.ParseAddr(lines[len(lines)-1]); err != nil {
			err = fmt.Errorf("the server script printed %q, not the sandbox's address", out)
		}
	}
	var h *hostInfo
	if err == nil {
		h, err = b.hostOf(ctx, id)
	}
	if err != nil {
		err = fmt.Errorf("ingress: %w", err)
		b.fail(err, all...)
		return err
	}

	direct := "http://" + netip.AddrPortFrom(sbAddr, ingressPort).String() + "/"
	b.progress("ingress through the ports front")
	frontLat, frontRPS, err := b.httpLoad(ctx, h.url, h.dial, h.header)
	if err != nil {
		err = fmt.Errorf("ingress through %s: %w", h.url, err)
		b.fail(err, all...)
		return err
	}
	b.progress("peer: ingress to the sandbox's address")
	peerLat, peerRPS, peerErr := b.httpLoad(ctx, direct, "", nil)
	note := fmt.Sprintf("%d sequential GETs of a 23-byte body from a ThreadingHTTPServer in the sandbox, one keep-alive connection, through GetHost's URL (token in %s) vs to %s", b.cfg.NetRequests, h.header.name, direct)
	p50, prps := nan, nan
	if peerErr != nil {
		peerErr = fmt.Errorf("direct to the sandbox: %w", peerErr)
		note += "; " + peerErr.Error()
	} else {
		p50, prps = ms(peerLat.percentile(50)), peerRPS
	}
	const peerName = "direct to the sandbox's address"
	b.rep.add(row(mIngressP50, ms(frontLat.percentile(50)), peerName, p50, nil, note))
	b.rep.add(row(rps, frontRPS, peerName, prps, nil,
		fmt.Sprintf("%d clients with a keep-alive connection each, for %v each way", b.cfg.NetClients, b.cfg.Duration)))
	return peerErr
}

// hostInfo is how to reach a port through the front: its URL, where to
// dial (the URL's host names the port, not a resolvable address) and the
// token's header.
type hostInfo struct {
	url    string
	dial   string
	header *tokenHeader
}

type tokenHeader struct{ name, value string }

// hostOf asks sandboxd for the URL of the sandbox's ingressPort.
func (b *bench) hostOf(ctx context.Context, id string) (*hostInfo, error) {
	return hostOfVia(ctx, b.c, id)
}

// hostOfVia asks the sandboxd c talks to for the URL of the sandbox's
// ingressPort.
func hostOfVia(ctx context.Context, c *client, id string) (*hostInfo, error) {
	h, err := c.sb.GetHost(ctx, id, ingressPort)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(h.GetUrl())
	if err != nil {
		return nil, fmt.Errorf("GetHost's URL %q: %w", h.GetUrl(), err)
	}
	if !h.GetTokenRequired() || h.GetTrafficToken() == "" {
		return nil, fmt.Errorf("GetHost(%s) says no token is needed; the sandbox's policy is private", id)
	}
	// sandboxd was started with --ports-listen 127.0.0.1:0: the URL keeps
	// the port it bound.
	return &hostInfo{url: h.GetUrl(), dial: net.JoinHostPort("127.0.0.1", u.Port()),
		header: &tokenHeader{h.GetTokenHeader(), h.GetTrafficToken()}}, nil
}

// httpLoad measures target: NetRequests sequential GETs on one keep-alive
// connection (after a few untimed ones), then NetClients clients, each
// with a connection of its own, GETting for Duration. dial, when set, is
// the address every connection goes to.
func (b *bench) httpLoad(ctx context.Context, target, dial string, hdr *tokenHeader) (latencies, float64, error) {
	newClient := func() *http.Client {
		tr := &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}
		if dial != "" {
			d := &net.Dialer{Timeout: 10 * time.Second}
			tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
				return d.DialContext(ctx, network, dial)
			}
		}
		return &http.Client{Transport: tr, Timeout: 30 * time.Second}
	}
	get := func(c *http.Client) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return err
		}
		if hdr != nil {
			req.Header.Set(hdr.name, hdr.value)
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK || string(body) != ingressBody {
			return fmt.Errorf("%s: %q", resp.Status, body)
		}
		return nil
	}

	c := newClient()
	defer c.CloseIdleConnections()
	var lat latencies
	for i := range 5 + b.cfg.NetRequests {
		start := time.Now()
		if err := get(c); err != nil {
			return nil, 0, err
		}
		if i >= 5 {
			lat = append(lat, time.Since(start))
		}
	}

	var done atomic.Int64
	var once sync.Once
	var firstErr error
	deadline := time.Now().Add(b.cfg.Duration)
	start := time.Now()
	var wg sync.WaitGroup
	for range b.cfg.NetClients {
		wg.Go(func() {
			c := newClient()
			defer c.CloseIdleConnections()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				if err := get(c); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, 0, firstErr
	}
	return lat, float64(done.Load()) / time.Since(start).Seconds(), ctx.Err()
}

// sandboxCPUs is the CPU limit of the sandbox's container (of those with
// its label, the one that has a limit: a networked sandbox's network
// holder has none).
func sandboxCPUs(ctx context.Context, id string) (float64, error) {
	out, err := exec.CommandContext(ctx, "docker", "ps", "-q", "--no-trunc", "--filter", "label="+labels.SandboxID+"="+id).Output()
	if err != nil {
		return 0, fmt.Errorf("docker ps: %w", err)
	}
	for _, c := range strings.Fields(string(out)) {
		v, err := exec.CommandContext(ctx, "docker", "inspect", "--format", "{{.HostConfig.NanoCpus}}", c).Output()
		if err != nil {
			return 0, fmt.Errorf("docker inspect: %w", err)
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64); err == nil && n > 0 {
			return float64(n) / 1e9, nil
		}
	}
	return 0, fmt.Errorf("no container of sandbox %s has a CPU limit", id)
}

// lastJSON decodes the last line of out into v.
func lastJSON(out string, v any) error {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), v); err != nil {
		return fmt.Errorf("%w in %q", err, lastLines(out, 5))
	}
	return nil
}
