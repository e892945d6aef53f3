//go:build linux

package e2e

// The network suite: networked sandboxes end to end, the real sandboxd
// binary with --allow-network and its egress gateway, real containers
// under runc and runsc, against the tests' own internet
// (internal/nettest: test hosts in namespaces of their own on
// 198.18.0.0/15 serving HTTP, HTTPS with a throwaway CA and WebSocket; a
// link-local metadata stand-in (nettest.MetadataAddr); a listener on the Docker bridge
// address). sandboxd resolves the test names from nettest's hosts file
// (--egress-hosts-file) and trusts its CA for intercepted upstreams
// (--egress-ca-file); its host objects are the suite's own
// (--egress-instance, --egress-subnet), removed when it ends. Nothing
// leaves the machine: every name resolves to a test host, or to nothing.
//
// The cases, in order, each a subtest of the runtime's:
//
//   - reach: from an allow-list sandbox (A), an allowed name by HTTP,
//     HTTPS (passed through, verified against the test CA) and WebSocket
//     (ws and wss); a rule's domain intercepted (verified against the
//     sandbox's own CA, through the bundle its environment names);
//   - refused: from A, a denied name (DNS: NXDOMAIN through getent,
//     gethostbyname and a raw query; the connection carrying it), an IP
//     literal, another test host; from an open sandbox (B: network, no
//     policy), the operator's bounds: another sandbox's address (which
//     sees nothing), the host's listener on the Docker bridge, the
//     veth's host end, the link-local metadata stand-in by address and by
//     name; UDP nowhere. Each refusal is in GetNetworkStatus's denials
//     with its reason, and no test host saw it;
//   - update: UpdateNetworkPolicy at run time: an open WebSocket to a
//     now-denied name is closed and new connections are refused within a
//     second (measured from the call), and allowed again as fast;
//   - persist: the policy survives a restart of sandboxd and a
//     hibernation and wake;
//   - e2b: the E2B door's network options enforced: create with
//     allowOut/denyOut/rules, code run through /execute, PUT network;
//   - secret: a rule's header reaches the test server, and its value is
//     nowhere inside the sandboxes (every process's environment, command
//     line and readable memory, read as root with docker exec
//     --privileged under both runtimes, gVisor's processes as gVisor
//     shows them; every file under / but /proc and /sys, as root and as
//     the sandbox user), nor in any API response (gRPC, sandboxctl net,
//     the E2B door), nor in sandboxd's log;
//   - flood: a sandbox flooding the gateway with connections and DNS
//     queries (one CPU, bounded in time) slows another sandbox's HTTP GET
//     (p50, new connection and DNS lookup each) by at most 2×, compared in
//     alternating windows; sandboxd's descriptors and RSS stay within
//     bounds derived from the gateway's caps; the kernel's DNS meter
//     drops most of the flood before the gateway;
//   - metrics: the per-sandbox and server-wide egress series exist and
//     moved; a deleted sandbox's series are gone.
//
// The suite reports one line per runtime, e.g.
//
//	network suite (runc): 8 cases, 0 failed; flood: other sandbox's GET p50 3.1 ms flooded vs 2.6 ms quiet (1.19×); ...
//
// A runtime's run takes two to four minutes on 2 cores.

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sandboxd/sandboxd/internal/nettest"
	"github.com/sandboxd/sandboxd/internal/sandboxdproc"
	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/orchestrator/labels"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// Bounds and sizes of the network suite.
const (
	// netUpdateBound: an update reaches open and new connections within it.
	netUpdateBound = time.Second
	// netFairness and netFairnessSlack: another sandbox's p50 GET under
	// the flood may be netFairness times its p50 without it, plus
	// netFairnessSlack. The slack is the CPU the flooder's four processes
	// take from the victim's on a 2-core machine, which no gateway can give
	// back: against a quiet p50 under a millisecond, a ratio alone measures
	// the scheduler (2.02× was seen with 0.9 ms added). What the bound
	// catches is a gateway shared unfairly: the victim's connections queued
	// behind the flooder's, or its DNS queries dropped with them.
	//
	// Under gVisor the victim's GET is itself CPU work: every system call
	// of its Python is served by gVisor's kernel (6 ms for a GET, where
	// runc takes under one, on the ptrace platform of Debian's 2022 runsc,
	// which runsc was when the ratio was set; systrap's round trips are
	// cheaper, BENCHMARKS.md). The CPU the flood takes then stretches it
	// rather than adding a constant, so the ratio there is
	// netFairnessRunsc (2.57× was seen with another test process beside
	// the suite, as under make test's shards). A gateway shared unfairly
	// shows beyond either: a dropped packet costs a second (netDropped),
	// queueing behind the flood's connections tens of times the quiet
	// figure.
	netFairness      = 2.0
	netFairnessRunsc = 3.0
	netFairnessSlack = 3 * time.Millisecond
	// netDropped: a GET of the victim's this long under the flood had a
	// packet dropped (a SYN is retransmitted after 1 s, a DNS query after
	// the resolver's timeout): no flooder may take the victim's share.
	netDropped = time.Second
	// netFloodSeconds: each flood window; netFloodWindows of them,
	// alternating with quiet ones.
	netFloodSeconds = 6
	netFloodWindows = 3
	// netSamples: GETs per measuring window.
	netSamples = 25
	// The gateway's caps (orchestrator/egress defaults) the bounds below
	// derive from: a flooding sandbox holds at most netConnCap
	// connections, each at most two descriptors (the sandbox's side and
	// the upstream), and peeks or copies with at most 2 × 16 KiB of
	// buffers and three goroutines.
	netConnCap = 256
	// netFDSlack: descriptors beyond 2 per capped connection sandboxd may
	// open during the flood (the other sandbox's connections, DNS over
	// TCP, gRPC streams of the test).
	netFDSlack = 128
	// netRSSBound: how far sandboxd's RSS may grow during the flood:
	// 256 connections × (32 KiB of buffers + 3 goroutine stacks of up to
	// 32 KiB + 16 KiB of peek) ≈ 36 MiB, twice that for Go's heap
	// headroom.
	netRSSBound = 72 << 20
)

// netHosts are the suite's test hosts: allowed.test (allowed by A's
// policy), api.test (allowed, with a header rule) and other.test (a test
// host A's policy does not list).
var netHosts = []string{"allowed.test", "api.test", "other.test"}

func TestNetwork(t *testing.T) {
	env := needE2E(t)
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "the network suite needs root (the test internet's namespaces, sandboxd's nftables table)")
	}
	rts := suiteRuntimes(t)
	if slices.Contains(rts, "runsc") && !testenv.HasRuntime(t, "runsc-net") {
		testenv.Unavailable(t, "dockerd has runsc but not runsc-net, which networked gVisor sandboxes run under (make runsc registers it)")
		rts = slices.DeleteFunc(rts, func(rt string) bool { return rt == "runsc" })
	}
	for _, rt := range rts {
		t.Run(rt, func(t *testing.T) {
			runNetworkSuite(t, env.withRuntime(t, rt), rt)
		})
	}
}

// netRun is one runtime's run of the suite.
type netRun struct {
	t       *testing.T
	env     *e2eEnv
	runtime string
	ctx     context.Context // carries the suite's bearer token
	in      *nettest.Internet
	flags   []string
	key     string // the API key (an --auth-tokens user token of tenant acme)
	secret  string // the gRPC sandbox's rule header value
	secret2 string // the E2B sandbox's

	d       *daemon
	c       sandboxv1.SandboxServiceClient
	e2bURL  string
	metrics string
	a, b    string // sandboxes: A (allow-list with a rule), B (open)
	aAddr   netip.Addr
	e       string // the E2B door's sandbox
	eToken  string
	floodID string // the flooding sandbox, until the metrics case deletes it
	notes   []string
	failed  []string
}

// netAllowList is A's policy: allowed.test and api.test only, a header
// rule on api.test.
func (r *netRun) policyA() *sandboxv1.NetworkPolicy {
	return &sandboxv1.NetworkPolicy{
		AllowOut: []string{"allowed.test", "api.test"},
		DenyOut:  []string{"0.0.0.0/0"},
		Rules:    map[string]*sandboxv1.NetworkRule{"api.test": {Headers: map[string]string{"X-Api-Key": r.secret}}},
	}
}

func runNetworkSuite(t *testing.T, env *e2eEnv, runtime string) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	r := &netRun{t: t, env: env, runtime: runtime,
		key:     "e2b_" + randomHex(t),
		secret:  "sbxsecret-" + randomHex(t),
		secret2: "sbxsecret2-" + randomHex(t),
	}
	r.ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+r.key)
	r.in = nettest.New(t, nettest.Options{Hosts: netHosts, Metadata: true, Bridge: true})

	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	caFile := filepath.Join(dir, "test-ca.pem")
	if err := os.WriteFile(tokens, []byte(r.key+" acme user\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caFile, r.in.CAPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	egress, err := sandboxdproc.NewEgressNet('n', netip.MustParsePrefix("100.125.0.0/16"))
	if err != nil {
		t.Fatal(err)
	}
	// The suite's host objects go when it ends, after sandboxd and its
	// containers (cleanups run last registered first).
	t.Cleanup(func() {
		if err := egress.Remove(); err != nil {
			t.Logf("removing the suite's network objects: %v", err)
		}
	})
	r.flags = []string{"--allow-network", "--egress-instance", egress.Instance, "--egress-subnet", egress.Subnet.String(),
		"--egress-hosts-file", r.in.HostsFile, "--egress-ca-file", caFile,
		"--auth-tokens", tokens, "--e2b-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--idle-ttl", "1h"}
	r.startDaemon()

	r.run("reach", r.caseReach)
	r.run("refused", r.caseRefused)
	r.run("update", r.caseUpdate)
	r.run("persist", r.casePersist)
	r.run("e2b", r.caseE2B)
	r.run("secret", r.caseSecret)
	r.run("flood", r.caseFlood)
	r.run("metrics", r.caseMetrics)

	which := ""
	if len(r.failed) > 0 {
		which = " (" + strings.Join(r.failed, ", ") + ")"
	}
	reportSummary(t, "network suite (%s): 8 cases, %d failed%s; %s", runtime, len(r.failed), which, strings.Join(r.notes, "; "))
	if !t.Failed() {
		r.d.stop(t)
	}
}

// run runs one case as a subtest; a case that cannot go on stops only
// itself.
func (r *netRun) run(name string, f func(t *testing.T)) {
	if !r.t.Run(name, f) {
		r.failed = append(r.failed, name)
	}
}

func (r *netRun) note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// startDaemon starts sandboxd with the suite's flags (again, after a
// stop: same state directory) and finds its E2B and metrics addresses.
func (r *netRun) startDaemon() {
	t := r.t
	r.d = r.env.start(t, r.flags...)
	r.c, _ = r.d.client(t)
	log := r.d.logs.String()
	m := e2bServingLine.FindStringSubmatch(log)
	mm := metricsLine.FindStringSubmatch(log)
	if m == nil || mm == nil {
		t.Fatalf("sandboxd did not log its E2B and metrics addresses:\n%s", log)
	}
	r.e2bURL, r.metrics = "http://"+m[1], "http://"+mm[1]+"/metrics"
}

// acquireNet acquires user's sandbox with network and policy (nil: the
// server's default, every public destination).
func (r *netRun) acquireNet(t *testing.T, user string, policy *sandboxv1.NetworkPolicy) string {
	t.Helper()
	resp, err := r.c.AcquireSandbox(r.ctx, &sandboxv1.AcquireSandboxRequest{UserId: user,
		Options: &sandboxv1.SandboxOptions{Network: true, NetworkPolicy: policy}})
	if err != nil {
		t.Fatalf("AcquireSandbox(%s) with network: %v", user, err)
	}
	return resp.GetSandbox().GetSandboxId()
}

// delete deletes sandbox id, reporting a failure.
func (r *netRun) delete(id string) {
	ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
	defer cancel()
	if _, err := r.c.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: id}); err != nil {
		r.t.Errorf("DeleteSandbox(%s): %v", id, err)
	}
}

// py runs Python in sandbox id (the netProbes functions defined) and
// returns its stdout, failing t on an error.
func (r *netRun) py(t *testing.T, id, code string) string {
	t.Helper()
	o, err := runCollect(r.ctx, r.c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: netProbes + code})
	if err != nil {
		t.Fatalf("running Python in %s: %v", id, err)
	}
	if o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_OK {
		t.Fatalf("Python in %s: %v %v; stdout %q stderr %q", id, o.done.GetStatus(), o.errs, o.stdout, o.stderr)
	}
	return o.stdout
}

// probes runs code in id, which prints one JSON object of results by
// label, and returns them.
func (r *netRun) probes(t *testing.T, id, code string) map[string]string {
	t.Helper()
	out := r.py(t, id, code)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var res map[string]string
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatalf("probe results of %s: %v in %q", id, err, out)
	}
	for _, k := range sortedKeys(res) {
		t.Logf("%s: %s", k, res[k])
	}
	return res
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// status is id's GetNetworkStatus.
func (r *netRun) status(t *testing.T, id string) *sandboxv1.GetNetworkStatusResponse {
	t.Helper()
	st, err := r.c.GetNetworkStatus(r.ctx, &sandboxv1.GetNetworkStatusRequest{SandboxId: id})
	if err != nil {
		t.Fatalf("GetNetworkStatus(%s): %v", id, err)
	}
	return st
}

// wantDenied checks that a denial of id matches (by address or by name,
// and kind) and has a reason containing reason; it returns the reason.
func (r *netRun) wantDenied(t *testing.T, st *sandboxv1.GetNetworkStatusResponse, what string, match func(*sandboxv1.NetworkDenial) bool, reason string) {
	t.Helper()
	for _, d := range st.GetDenials() {
		if match(d) {
			if d.GetReason() == "" || !strings.Contains(d.GetReason(), reason) {
				t.Errorf("%s: denied with reason %q; want it to say %q", what, d.GetReason(), reason)
			} else {
				t.Logf("%s: denied (%s %q %s): %s", what, d.GetKind(), d.GetName(), d.GetAddress(), d.GetReason())
			}
			return
		}
	}
	t.Errorf("%s: no denial in GetNetworkStatus; denials: %v", what, st.GetDenials())
}

func byAddr(addr string) func(*sandboxv1.NetworkDenial) bool {
	return func(d *sandboxv1.NetworkDenial) bool { return d.GetAddress() == addr }
}

func byName(kind sandboxv1.NetworkDenialKind, name string) func(*sandboxv1.NetworkDenial) bool {
	return func(d *sandboxv1.NetworkDenial) bool { return d.GetKind() == kind && d.GetName() == name }
}

// host is test host name's address.
func (r *netRun) host(name string) netip.Addr { return r.in.Hosts[name].Addr }

// accepts is every test host's accepted connections and datagrams, for
// checking that a refusal reached none.
func (r *netRun) accepts() map[string]int64 {
	m := map[string]int64{}
	for name, h := range r.in.Hosts {
		m[name] = h.AllAccepts() + h.UDPDatagrams()
	}
	return m
}

// netProbes are the Python functions the cases' code calls; each returns
// "reached: …" or "refused: …", a line the Go side matches.
const netProbes = `
import socket, ssl, json, os, base64, time, struct, random, subprocess

def _read_all(s, limit=1 << 16):
    out = b''
    try:
        while len(out) < limit:
            c = s.recv(4096)
            if not c:
                break
            out += c
    except (socket.timeout, ConnectionResetError):
        pass
    return out

def _wrap(s, name, cafile):
    ctx = ssl.create_default_context(cafile=cafile) if cafile else ssl.create_default_context()
    s = ctx.wrap_socket(s, server_hostname=name)
    issuer = dict(x[0] for x in s.getpeercert()['issuer']).get('commonName', '')
    return s, issuer

def probe_http(addr, port=80, name=None, tls=False, cafile=None, path='/', timeout=5):
    name = name or addr
    try:
        s = socket.create_connection((addr, port), timeout=timeout)
    except Exception as e:
        return 'refused: connect: %s: %s' % (type(e).__name__, e)
    issuer = ''
    try:
        if tls:
            s, issuer = _wrap(s, name, cafile)
        s.sendall(('GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' % (path, name)).encode())
        resp = _read_all(s)
    except Exception as e:
        return 'refused: %s: %s' % (type(e).__name__, e)
    finally:
        s.close()
    head, _, body = resp.partition(b'\r\n\r\n')
    status = head.split(b'\r\n')[0].decode(errors='replace')
    if b'hello from' in body:
        return 'reached: %s%s' % (body.decode(errors='replace').strip(), ' (issuer %s)' % issuer if issuer else '')
    return 'refused: %r %r' % (status, body[:300].decode(errors='replace').strip())

def ws_open(addr, port, name, tls=False, cafile=None, timeout=5):
    s = socket.create_connection((addr, port), timeout=timeout)
    if tls:
        s, _ = _wrap(s, name, cafile)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(('GET /ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n'
               'Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n' % (name, key)).encode())
    head = b''
    while b'\r\n\r\n' not in head:
        c = s.recv(4096)
        if not c:
            raise EOFError('closed in the handshake after %r' % head[:200])
        head += c
    status, _, rest = head.partition(b'\r\n\r\n')
    if b' 101 ' not in status.split(b'\r\n')[0]:
        raise RuntimeError(status.split(b'\r\n')[0].decode(errors='replace'))
    return s, rest

def ws_echo_on(s, rest, msg):
    mask = os.urandom(4)
    s.sendall(bytes([0x81, 0x80 | len(msg)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(msg)))
    buf = rest
    while len(buf) < 2:
        c = s.recv(4096)
        if not c:
            raise EOFError('closed')
        buf += c
    n = buf[1] & 0x7f
    while len(buf) < 2 + n:
        c = s.recv(4096)
        if not c:
            raise EOFError('closed')
        buf += c
    return buf[2:2 + n], buf[2 + n:]

def probe_ws(addr, port, name, tls=False, cafile=None):
    try:
        s, rest = ws_open(addr, port, name, tls, cafile)
        got, _ = ws_echo_on(s, rest, b'echo-me')
        s.close()
        return 'reached: echo %s' % got.decode(errors='replace')
    except Exception as e:
        return 'refused: %s: %s' % (type(e).__name__, e)

def nameserver():
    return [l.split()[1] for l in open('/etc/resolv.conf') if l.startswith('nameserver')][0]

def dns_query(name, qtype=1):
    q = struct.pack('>HHHHHH', random.randrange(65536), 0x0100, 1, 0, 0, 0)
    q += b''.join(bytes([len(p)]) + p.encode() for p in name.split('.')) + b'\0' + struct.pack('>HH', qtype, 1)
    return q

def probe_dns(name):
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.settimeout(3)
    try:
        u.sendto(dns_query(name), (nameserver(), 53))
        r = u.recv(4096)
        raw = 'rcode %d answers %d' % (r[3] & 0xf, struct.unpack('>H', r[6:8])[0])
    except Exception as e:
        raw = 'error %s' % e
    try:
        gh = socket.gethostbyname(name)
    except Exception as e:
        gh = 'error %s' % e
    g = subprocess.run(['getent', 'hosts', name], capture_output=True, text=True)
    return 'raw %s; gethostbyname %s; getent exit %d %s' % (raw, gh, g.returncode, g.stdout.strip())

def src_addr():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect(('198.18.0.1', 9))
    return s.getsockname()[0]
`

// caseReach: A reaches its allowed names by HTTP, HTTPS and WebSocket;
// api.test through the gateway's interception.
func (r *netRun) caseReach(t *testing.T) {
	r.a = r.acquireNet(t, "net-a", r.policyA())
	if _, err := upload(r.ctx, r.c, r.a, "test-ca.pem", r.in.CAPEM); err != nil {
		t.Fatalf("upload the test CA: %v", err)
	}
	start := time.Now()
	res := r.probes(t, r.a, `
ca = '/workspace/test-ca.pem'
print(json.dumps({
    'src': src_addr(),
    'http': probe_http('allowed.test'),
    'https': probe_http('allowed.test', 443, tls=True, cafile=ca),
    'ws': probe_ws('allowed.test', 80, 'allowed.test'),
    'wss': probe_ws('allowed.test', 443, 'allowed.test', tls=True, cafile=ca),
    'rule https': probe_http('api.test', 443, tls=True, path='/reach'),
    'rule wss': probe_ws('api.test', 443, 'api.test', tls=True),
    'dns': probe_dns('allowed.test'),
    'urllib': __import__('urllib.request').request.urlopen('http://allowed.test/', timeout=5).read().decode().strip(),
}))`)
	t.Logf("A's probes took %v", time.Since(start).Round(time.Millisecond))
	r.aAddr, _ = netip.ParseAddr(res["src"])
	for k, want := range map[string]string{
		"http": "reached: hello from allowed.test", "https": "reached: hello from allowed.test (issuer sandboxd nettest CA)",
		"ws": "reached: echo echo-me", "wss": "reached: echo echo-me",
		"rule https": "reached: hello from api.test (issuer sandboxd sandbox " + r.a + ")", "rule wss": "reached: echo echo-me",
		"urllib": "hello from allowed.test",
	} {
		if res[k] != want {
			t.Errorf("%s: %q; want %q", k, res[k], want)
		}
	}
	if want := "raw rcode 0 answers 1; gethostbyname " + r.host("allowed.test").String(); !strings.HasPrefix(res["dns"], want) || !strings.Contains(res["dns"], "getent exit 0 "+r.host("allowed.test").String()) {
		t.Errorf("DNS of allowed.test: %q; want %q and getent's answer", res["dns"], want)
	}
	// The intercepted requests carried the rule's header.
	var injected int
	for _, req := range r.in.Hosts["api.test"].Requests() {
		if req.Header.Get("X-Api-Key") == r.secret {
			injected++
		}
	}
	if injected < 2 {
		t.Errorf("api.test saw the rule's header on %d requests; want the HTTPS request and the WebSocket upgrade", injected)
	}
	if !r.aAddr.IsValid() {
		t.Errorf("A's address %q", res["src"])
	}
}

// caseRefused: what A's allow-list refuses, and what the operator's bounds
// refuse even to B, whose policy allows every public destination.
func (r *netRun) caseRefused(t *testing.T) {
	if r.a == "" {
		t.Skip("no sandbox A (reach failed)")
	}
	r.b = r.acquireNet(t, "net-b", nil)
	before := r.accepts()
	allowed, other := r.host("allowed.test"), r.host("other.test")
	res := r.probes(t, r.a, fmt.Sprintf(`
print(json.dumps({
    'dns other.test': probe_dns('other.test'),
    'name other.test': probe_http('%[2]s', 80, name='other.test'),
    'sni other.test': probe_http('%[2]s', 443, name='other.test', tls=True, cafile='/workspace/test-ca.pem'),
    'literal allowed': probe_http('%[1]s'),
    'literal other': probe_http('%[2]s'),
    'literal other tls': probe_http('%[2]s', 443, tls=True, cafile='/workspace/test-ca.pem'),
}))`, allowed, other))
	for _, k := range []string{"name other.test", "sni other.test", "literal allowed", "literal other", "literal other tls"} {
		if !strings.HasPrefix(res[k], "refused: ") {
			t.Errorf("A: %s: %q; want refused", k, res[k])
		}
	}
	if d := res["dns other.test"]; !strings.HasPrefix(d, "raw rcode 3 answers 0; gethostbyname error") || !strings.Contains(d, "getent exit 2") {
		t.Errorf("A: DNS of other.test: %q; want NXDOMAIN (rcode 3), gethostbyname failing and getent exit 2", d)
	}
	st := r.status(t, r.a)
	r.wantDenied(t, st, "A: DNS other.test", byName(sandboxv1.NetworkDenialKind_NETWORK_DENIAL_KIND_DNS, "other.test"), "allow_out")
	r.wantDenied(t, st, "A: other.test by name", byName(sandboxv1.NetworkDenialKind_NETWORK_DENIAL_KIND_TCP, "other.test"), "allow_out")
	r.wantDenied(t, st, "A: IP literal "+allowed.String(), byAddr(allowed.String()+":80"), "denied by deny_out")
	r.wantDenied(t, st, "A: IP literal "+other.String()+":443", byAddr(other.String()+":443"), "")

	// A listens on 8080 (a thread of its kernel) while B tries it.
	r.py(t, r.a, `
import threading
seen_by_a = []
def _listen():
    l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); l.bind(('0.0.0.0', 8080)); l.listen(); l.settimeout(60)
    try:
        c, a = l.accept(); seen_by_a.append(a)
    except Exception:
        pass
threading.Thread(target=_listen, daemon=True).start()
print('listening')`)
	bridge := r.in.Hosts["bridge.test"]
	bridgePort := bridge.Port(false)
	res = r.probes(t, r.b, fmt.Sprintf(`
me = src_addr()
h = '.'.join(me.split('.')[:3] + [str(int(me.split('.')[3]) - 1)])
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(3):
    u.sendto(b'x', ('%[2]s', 9999)); u.sendto(b'x', ('%[5]s', 9999))
print(json.dumps({
    'src': me,
    'other.test (public, allowed)': probe_http('other.test'),
    'sandbox A': probe_http('%[1]s', 8080),
    'bridge listener': probe_http('%[3]s', %[4]d),
    'host end': probe_http(h, 22),
    'metadata': probe_http('%[5]s'),
    'metadata by name': probe_http('%[5]s', name='metadata.test'),
    'dns metadata.test': probe_dns('metadata.test'),
}))`, r.aAddr, other, bridge.Addr, bridgePort, nettest.MetadataAddr))
	if !strings.HasPrefix(res["other.test (public, allowed)"], "reached: hello from other.test") {
		t.Errorf("B (no policy): other.test: %q; want reached", res["other.test (public, allowed)"])
	}
	bAddr, _ := netip.ParseAddr(res["src"])
	refusals := []struct {
		key, addr, reason string
	}{
		{"sandbox A", r.aAddr.String() + ":8080", ""},
		{"bridge listener", netip.AddrPortFrom(bridge.Addr, uint16(bridgePort)).String(), ""},
		{"host end", bAddr.Prev().String() + ":22", ""},
		{"metadata", netip.AddrPortFrom(nettest.MetadataAddr, 80).String(), "link-local"},
	}
	st = r.status(t, r.b)
	for _, f := range refusals {
		if !strings.HasPrefix(res[f.key], "refused: ") {
			t.Errorf("B: %s: %q; want refused", f.key, res[f.key])
		}
		r.wantDenied(t, st, "B: "+f.key, byAddr(f.addr), f.reason)
	}
	if !strings.HasPrefix(res["metadata by name"], "refused: ") {
		t.Errorf("B: metadata.test by name: %q; want refused", res["metadata by name"])
	}
	r.wantDenied(t, st, "B: metadata.test by name", byName(sandboxv1.NetworkDenialKind_NETWORK_DENIAL_KIND_TCP, "metadata.test"), "link-local")
	if d := res["dns metadata.test"]; !strings.HasPrefix(d, "raw rcode 3") || !strings.Contains(d, "getent exit 2") {
		t.Errorf("B: DNS of metadata.test (an address the server refuses): %q; want NXDOMAIN", d)
	}
	// Nothing reached a test host but B's own allowed request.
	after := r.accepts()
	for name, n := range after {
		want := before[name]
		if name == "other.test" {
			want++ // B's allowed GET
		}
		if n != want {
			t.Errorf("%s accepted %d connections or datagrams during the refusals; want %d", name, n-before[name], want-before[name])
		}
	}
	if seen := r.py(t, r.a, "print(seen_by_a)"); strings.TrimSpace(seen) != "[]" {
		t.Errorf("sandbox A's listener saw %s", seen)
	}
	r.note("refused: %d destinations of the allow-list and %d of the operator's bounds, each denied with its reason", 5, len(refusals)+1)
}

// caseUpdate: A holds a WebSocket to allowed.test open and polls new
// connections to it while its policy is updated to deny it, then allowed
// again.
func (r *netRun) caseUpdate(t *testing.T) {
	if r.a == "" {
		t.Skip("no sandbox A")
	}
	allowed := r.host("allowed.test")
	code := netProbes + fmt.Sprintf(`
import threading, sys
t0 = time.monotonic()
def say(*a):
    print('%%.3f' %% (time.monotonic() - t0), *a, flush=True)
s, rest = ws_open('allowed.test', 80, 'allowed.test')
got, rest = ws_echo_on(s, rest, b'before')
say('ws open', got.decode())
def hold():
    s.settimeout(30)
    try:
        d = s.recv(4096)
        say('ws closed', repr(d[:20]))
    except Exception as e:
        say('ws closed', type(e).__name__)
threading.Thread(target=hold, daemon=True).start()
state, flips = None, 0
deadline = time.monotonic() + 30
while time.monotonic() < deadline and flips < 2:
    ok = probe_http('%s', 80, name='allowed.test', timeout=2).startswith('reached')
    if state is not None and ok != state:
        flips += 1
        say('new connections', 'allowed' if ok else 'refused')
    elif state is None:
        say('new connections', 'allowed' if ok else 'refused')
    state = ok
    time.sleep(0.02)
say('done')
`, allowed)
	type line struct {
		at   time.Time
		text string
	}
	lines := make(chan line, 64)
	done := make(chan error, 1)
	go func() {
		s, err := r.c.Execute(r.ctx, &sandboxv1.ExecuteRequest{SandboxId: r.a, Code: code})
		if err != nil {
			done <- err
			return
		}
		var buf string
		for {
			ev, err := s.Recv()
			if err != nil {
				if err == io.EOF {
					err = nil
				}
				done <- err
				return
			}
			if so := ev.GetStdout(); so != nil {
				buf += so.GetText()
				for {
					i := strings.IndexByte(buf, '\n')
					if i < 0 {
						break
					}
					lines <- line{time.Now(), buf[:i]}
					buf = buf[i+1:]
				}
			}
			if d := ev.GetDone(); d != nil && d.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_OK {
				lines <- line{time.Now(), fmt.Sprintf("command ended %v (%s)", d.GetStatus(), ev.String())}
			}
		}
	}()
	// await waits for a line containing want, bounded.
	await := func(want string, within time.Duration) (line, bool) {
		t.Helper()
		timeout := time.After(within)
		for {
			select {
			case l := <-lines:
				t.Logf("A: %s", l.text)
				if strings.Contains(l.text, want) {
					return l, true
				}
			case err := <-done:
				t.Errorf("the command ended before %q: %v", want, err)
				return line{}, false
			case <-timeout:
				t.Errorf("no %q within %v", want, within)
				return line{}, false
			}
		}
	}
	if _, ok := await("new connections allowed", 20*time.Second); !ok {
		return
	}
	denying := r.policyA()
	denying.AllowOut = []string{"api.test"}
	start := time.Now()
	resp, err := r.c.UpdateNetworkPolicy(r.ctx, &sandboxv1.UpdateNetworkPolicyRequest{SandboxId: r.a, Policy: denying})
	if err != nil {
		t.Fatalf("UpdateNetworkPolicy: %v", err)
	}
	rpc := time.Since(start)
	closed, ok1 := await("ws closed", 5*time.Second)
	refused, ok2 := await("new connections refused", 5*time.Second)
	if !ok1 || !ok2 {
		return
	}
	closedIn, refusedIn := closed.at.Sub(start), refused.at.Sub(start)
	if closedIn > netUpdateBound || refusedIn > netUpdateBound {
		t.Errorf("after UpdateNetworkPolicy (%v): the open connection closed in %v, new connections refused in %v; want both within %v", rpc, closedIn, refusedIn, netUpdateBound)
	}
	if got := resp.GetSandbox().GetNetworkPolicy().GetAllowOut(); !slices.Equal(got, []string{"api.test"}) {
		t.Errorf("the update's answer has allow_out %v", got)
	}
	start = time.Now()
	if _, err := r.c.UpdateNetworkPolicy(r.ctx, &sandboxv1.UpdateNetworkPolicyRequest{SandboxId: r.a, Policy: r.policyA()}); err != nil {
		t.Fatalf("UpdateNetworkPolicy back: %v", err)
	}
	back, ok := await("new connections allowed", 5*time.Second)
	if !ok {
		return
	}
	backIn := back.at.Sub(start)
	if backIn > netUpdateBound {
		t.Errorf("allowed again in %v; want within %v", backIn, netUpdateBound)
	}
	await("done", 10*time.Second)
	if err := <-done; err != nil {
		t.Errorf("the command: %v", err)
	}
	st := r.status(t, r.a)
	r.wantDenied(t, st, "A: allowed.test while denied", byName(sandboxv1.NetworkDenialKind_NETWORK_DENIAL_KIND_TCP, "allowed.test"), "allow_out")
	r.note("update: open connection closed in %s, new ones refused in %s, allowed again in %s (RPC %s)", fmtMS(closedIn), fmtMS(refusedIn), fmtMS(backIn), fmtMS(rpc))
}

// checkA checks A's policy in force: allowed.test reached, other.test
// refused, the rule applied; when says after what.
func (r *netRun) checkA(t *testing.T, when string) {
	t.Helper()
	g, err := r.c.GetSandbox(r.ctx, &sandboxv1.GetSandboxRequest{SandboxId: r.a})
	if err != nil {
		t.Fatalf("%s: GetSandbox: %v", when, err)
	}
	p := g.GetSandbox().GetNetworkPolicy()
	if !slices.Equal(p.GetAllowOut(), []string{"allowed.test", "api.test"}) || !slices.Equal(p.GetDenyOut(), []string{"0.0.0.0/0"}) ||
		p.GetRules()["api.test"].GetHeaders()["X-Api-Key"] != "" || len(p.GetRules()["api.test"].GetHeaders()) != 1 {
		t.Errorf("%s: A's policy is %v", when, p)
	}
	before := len(r.in.Hosts["api.test"].Requests())
	res := r.probes(t, r.a, `
print(json.dumps({
    'allowed': probe_http('allowed.test'),
    'other': probe_http('`+r.host("other.test").String()+`', name='other.test'),
    'rule': probe_http('api.test', 443, tls=True, path='/`+strings.ReplaceAll(when, " ", "-")+`'),
    'src': src_addr(),
}))`)
	if !strings.HasPrefix(res["allowed"], "reached") || !strings.HasPrefix(res["other"], "refused") || !strings.HasPrefix(res["rule"], "reached") {
		t.Errorf("%s: A reaches allowed.test %q, other.test %q, api.test %q; want reached, refused, reached", when, res["allowed"], res["other"], res["rule"])
	}
	if res["src"] != r.aAddr.String() {
		t.Errorf("%s: A's address %s; was %s", when, res["src"], r.aAddr)
	}
	reqs := r.in.Hosts["api.test"].Requests()
	if len(reqs) <= before || reqs[len(reqs)-1].Header.Get("X-Api-Key") != r.secret {
		t.Errorf("%s: api.test did not see the rule's header", when)
	}
}

// casePersist: A's policy after a restart of sandboxd and after a
// hibernation and wake.
func (r *netRun) casePersist(t *testing.T) {
	if r.a == "" {
		t.Skip("no sandbox A")
	}
	r.d.stop(t)
	r.startDaemon()
	r.checkA(t, "after a restart")
	if _, err := r.c.HibernateSandbox(r.ctx, &sandboxv1.HibernateSandboxRequest{SandboxId: r.a}); err != nil {
		t.Fatalf("HibernateSandbox: %v", err)
	}
	if _, err := r.c.WakeSandbox(r.ctx, &sandboxv1.WakeSandboxRequest{SandboxId: r.a}); err != nil {
		t.Fatalf("WakeSandbox: %v", err)
	}
	r.checkA(t, "after a hibernation and wake")
	// B (no policy) too: still open after both.
	if r.b != "" {
		if res := r.probes(t, r.b, "print(json.dumps({'other': probe_http('other.test')}))"); !strings.HasPrefix(res["other"], "reached") {
			t.Errorf("B after a restart: other.test %q", res["other"])
		}
	}
}

// e2b calls the E2B door.
func (r *netRun) e2b(t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequestWithContext(r.ctx, method, r.e2bURL+path, strings.NewReader(body))
	req.Header.Set("X-API-KEY", r.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 3 * time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// e2bRun runs Python through the E2B door's /execute in sandbox id and
// returns its stdout.
func (r *netRun) e2bRun(t *testing.T, id, token, code string) string {
	t.Helper()
	b, _ := json.Marshal(map[string]string{"code": netProbes + code})
	req, _ := http.NewRequestWithContext(r.ctx, "POST", r.e2bURL+"/execute", bytes.NewReader(b))
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("E2b-Sandbox-Port", "49999")
	req.Header.Set("X-Access-Token", token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 3 * time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("/execute: %v", err)
	}
	defer resp.Body.Close()
	var stdout strings.Builder
	dec := json.NewDecoder(resp.Body)
	for {
		var ev struct {
			Type string `json:"type"`
			Text string `json:"text"`
			Name string `json:"name"`
			Val  string `json:"value"`
		}
		if err := dec.Decode(&ev); err != nil {
			if err != io.EOF {
				t.Fatalf("/execute's answer: %v", err)
			}
			break
		}
		switch ev.Type {
		case "stdout":
			stdout.WriteString(ev.Text)
		case "error":
			t.Fatalf("/execute: %s: %s", ev.Name, ev.Val)
		}
	}
	return stdout.String()
}

// caseE2B: the E2B door's network options, enforced.
func (r *netRun) caseE2B(t *testing.T) {
	body := fmt.Sprintf(`{"templateID":"code-interpreter-v1","network":{"allowOut":["allowed.test","api.test"],"denyOut":["0.0.0.0/0"],
		"rules":{"api.test":[{"transform":{"headers":{"X-Api-Key":%q}}}]}}}`, r.secret2)
	code, b := r.e2b(t, "POST", "/sandboxes", body)
	if code != http.StatusCreated {
		t.Fatalf("create with network: %d %s", code, b)
	}
	var created struct {
		SandboxID       string `json:"sandboxID"`
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	if err := json.Unmarshal(b, &created); err != nil {
		t.Fatal(err)
	}
	r.e, r.eToken = created.SandboxID, created.EnvdAccessToken
	probe := `
print(json.dumps({
    'allowed': probe_http('allowed.test'),
    'other': probe_http('other.test'),
    'dns other': probe_dns('other.test'),
    'rule': probe_http('api.test', 443, tls=True, path='/e2b'),
}))`
	parse := func(out string) map[string]string {
		lines := strings.Split(strings.TrimSpace(out), "\n")
		var res map[string]string
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
			t.Fatalf("results: %v in %q", err, out)
		}
		for _, k := range sortedKeys(res) {
			t.Logf("E: %s: %s", k, res[k])
		}
		return res
	}
	res := parse(r.e2bRun(t, r.e, r.eToken, probe))
	if !strings.HasPrefix(res["allowed"], "reached") || !strings.HasPrefix(res["other"], "refused") || !strings.HasPrefix(res["rule"], "reached") ||
		!strings.HasPrefix(res["dns other"], "raw rcode 3") {
		t.Errorf("E2B sandbox: %v; want allowed.test reached, other.test refused (NXDOMAIN), api.test reached", res)
	}
	reqs := r.in.Hosts["api.test"].Requests()
	if len(reqs) == 0 || reqs[len(reqs)-1].Path != "/e2b" || reqs[len(reqs)-1].Header.Get("X-Api-Key") != r.secret2 {
		t.Errorf("api.test did not see the E2B rule's header")
	}
	// PUT network replaces the rules whole: allowed.test is denied now.
	code, b = r.e2b(t, "PUT", "/sandboxes/"+r.e+"/network", `{"allowOut":["api.test"],"denyOut":["0.0.0.0/0"],
		"rules":{"api.test":[{"transform":{"headers":{"X-Api-Key":`+strconv.Quote(r.secret2)+`}}}]}}`)
	if code/100 != 2 {
		t.Fatalf("PUT network: %d %s", code, b)
	}
	res = parse(r.e2bRun(t, r.e, r.eToken, probe))
	if !strings.HasPrefix(res["allowed"], "refused") || !strings.HasPrefix(res["rule"], "reached") {
		t.Errorf("E2B sandbox after PUT network: %v; want allowed.test refused, api.test reached", res)
	}
	st := r.status(t, r.e)
	r.wantDenied(t, st, "E: allowed.test after PUT", byName(sandboxv1.NetworkDenialKind_NETWORK_DENIAL_KIND_DNS, "allowed.test"), "allow_out")
	// A sandbox created through the door without network is sealed.
	code, b = r.e2b(t, "POST", "/sandboxes", `{"templateID":"code-interpreter-v1"}`)
	if code != http.StatusCreated {
		t.Fatalf("create without network: %d %s", code, b)
	}
	var sealed struct {
		SandboxID       string `json:"sandboxID"`
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	json.Unmarshal(b, &sealed)
	defer r.e2b(t, "DELETE", "/sandboxes/"+sealed.SandboxID, "")
	if out := r.e2bRun(t, sealed.SandboxID, sealed.EnvdAccessToken, "print(sorted(n for _, n in socket.if_nameindex() if n != 'lo'))"); strings.TrimSpace(out) != "[]" {
		t.Errorf("a sandbox created without network has interfaces %q", out)
	}
}

// secretNeedle is secret XORed with netXOR, in hex: the scanners look for
// the secret without ever holding it, so that a scanner's own memory,
// command line and the sandbox's command log never contain it.
const netXOR = 0x5a

func secretNeedle(secrets ...string) string {
	var hs []string
	for _, s := range secrets {
		b := []byte(s)
		for i := range b {
			b[i] ^= netXOR
		}
		hs = append(hs, hex.EncodeToString(b))
	}
	return strings.Join(hs, ",")
}

// netScanner looks for the needles (argv[1]: XORed secrets in hex,
// comma-separated) in every other process's environment, command line and
// readable memory, and in every regular file under / but /proc and /sys;
// argv[2] says which ("mem,files"). It prints one JSON object: what it
// read and where it found which needle (its index).
const netScanner = `
import os, sys, json, stat
X = 0x5a
needles = [bytes.fromhex(h) for h in sys.argv[1].split(',')]
what = sys.argv[2].split(',')
tbl = bytes(b ^ X for b in range(256))
keep = max(len(n) for n in needles) - 1
me = os.getpid()
hits, errors = [], {}
def found(data):
    t = data.translate(tbl)
    return [i for i, n in enumerate(needles) if n in t]
def err(kind, e):
    k = kind + ' ' + type(e).__name__
    errors[k] = errors.get(k, 0) + 1
def scan_stream(read, where):
    tail, n, seen = b'', 0, set()
    while True:
        try:
            d = read()
        except Exception as e:
            err('read', e); break
        if not d:
            break
        n += len(d)
        for i in found(tail + d):
            if i not in seen:
                seen.add(i); hits.append([i, where])
        tail = (tail + d)[-keep:]
    return n
res = {'procs': 0, 'mem_bytes': 0, 'files': 0, 'file_bytes': 0}
if 'mem' in what:
    for p in os.listdir('/proc'):
        if not p.isdigit() or int(p) == me:
            continue
        try:
            comm = open('/proc/%s/comm' % p).read().strip()
        except Exception as e:
            err('comm', e); continue
        res['procs'] += 1
        for part in ('environ', 'cmdline'):
            try:
                for i in found(open('/proc/%s/%s' % (p, part), 'rb').read()):
                    hits.append([i, '%s of %s (%s)' % (part, p, comm)])
            except Exception as e:
                err(part, e)
        try:
            maps = open('/proc/%s/maps' % p).read().splitlines()
            fd = os.open('/proc/%s/mem' % p, os.O_RDONLY)
        except Exception as e:
            err('mem', e); continue
        for l in maps:
            f = l.split()
            if 'r' not in f[1]:
                continue
            lo, hi = [int(x, 16) for x in f[0].split('-')]
            if lo >= 1 << 62:
                continue
            off = [lo]
            def rd():
                if off[0] >= hi:
                    return b''
                d = os.pread(fd, min(1 << 20, hi - off[0]), off[0])
                off[0] += len(d) if d else hi
                return d
            res['mem_bytes'] += scan_stream(rd, 'memory of %s (%s) %s %s' % (p, comm, f[0], f[5] if len(f) > 5 else ''))
        os.close(fd)
if 'files' in what:
    for root, dirs, files in os.walk('/', onerror=lambda e: err('walk', e)):
        if root == '/':
            dirs[:] = [d for d in dirs if d not in ('proc', 'sys')]
        for name in files:
            path = os.path.join(root, name)
            try:
                st = os.lstat(path)
                if not stat.S_ISREG(st.st_mode):
                    continue
                f = open(path, 'rb', 0)
            except Exception as e:
                err('open', e); continue
            with f:
                res['files'] += 1
                res['file_bytes'] += scan_stream(lambda: f.read(1 << 20), 'file ' + path)
res['hits'] = hits
res['errors'] = errors
print(json.dumps(res))
`

// scanResult is what netScanner reports.
type scanResult struct {
	Procs     int            `json:"procs"`
	MemBytes  int64          `json:"mem_bytes"`
	Files     int            `json:"files"`
	FileBytes int64          `json:"file_bytes"`
	Hits      [][2]any       `json:"hits"`
	Errors    map[string]int `json:"errors"`
	// canary: where the last needle, the canary, was found.
	canary []string
}

// parseScan reads a scan for needles whose last is the canary: a hit of
// any other fails t.
func parseScan(t *testing.T, who, out string, needles int) scanResult {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var s scanResult
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil {
		t.Fatalf("%s: the scanner's output: %v in %q", who, err, out)
	}
	for _, h := range s.Hits {
		i, _ := h[0].(float64)
		where, _ := h[1].(string)
		if int(i) == needles-1 {
			s.canary = append(s.canary, where)
		} else {
			t.Errorf("%s: secret %d is in %s", who, int(i), where)
		}
	}
	t.Logf("%s: %d processes (%s of memory), %d files (%s); errors %v; the canary in %v", who, s.Procs, mib(s.MemBytes), s.Files, mib(s.FileBytes), s.Errors, s.canary)
	return s
}

// wantCanary fails t unless the scan found the canary in each of the
// places named by the prefixes of where (the scanner's own check).
func (s scanResult) wantCanary(t *testing.T, who string, where ...string) {
	t.Helper()
	for _, w := range where {
		if !slices.ContainsFunc(s.canary, func(c string) bool { return strings.HasPrefix(c, w) }) {
			t.Errorf("%s: the canary planted in the sandbox was not found in %s (found in %v): the scan cannot be trusted", who, w, s.canary)
		}
	}
}

func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

// rootScan runs netScanner in container cid as root with every
// capability, to read every process's memory and every file whatever its
// owner: under runc, from the host, entering the container's mount and
// PID namespaces with nsenter (the scanner is then one of its processes,
// with the host root's capabilities); under gVisor, with docker exec
// --privileged, which reads the sandbox's processes as gVisor shows them
// (on the host there is only gVisor's own process).
func rootScan(t *testing.T, ctx context.Context, cid string, gvisor bool, needle, what string) scanResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var cmd *exec.Cmd
	if gvisor {
		cmd = exec.CommandContext(ctx, "docker", "exec", "--privileged", "-u", "root", cid, "python3", "-c", netScanner, needle, what)
	} else {
		pid := strings.TrimSpace(strings.Join(dockerLines(t, ctx, "inspect", "-f", "{{.State.Pid}}", cid), ""))
		cmd = exec.CommandContext(ctx, "nsenter", "-t", pid, "-m", "-p", "--", "python3", "-c", netScanner, needle, what)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v in %s: %v: %s", cmd.Args[:5], cid, err, stderr.Bytes())
	}
	how := "nsenter"
	if gvisor {
		how = "docker exec --privileged"
	}
	return parseScan(t, "root ("+how+") in "+cid[:12], string(out), strings.Count(needle, ",")+1)
}

// netContainers are the running container of networked sandbox id and
// its network holder, found by Docker label.
func netContainers(t *testing.T, ctx context.Context, id string) (sandbox, holder string) {
	t.Helper()
	for _, l := range dockerLines(t, ctx, "ps", "--filter", "label="+labels.SandboxID+"="+id, "--format", `{{.ID}} {{.Label "`+labels.NetHolder+`"}}`) {
		cid, h, _ := strings.Cut(l, " ")
		if h == "true" {
			holder = cid
		} else {
			sandbox = cid
		}
	}
	if sandbox == "" || holder == "" {
		t.Fatalf("sandbox %s: container %q, network holder %q; want both running", id, sandbox, holder)
	}
	return sandbox, holder
}

// caseSecret: the rules' header values reach the test server and nothing
// inside the sandboxes or outside the host.
func (r *netRun) caseSecret(t *testing.T) {
	if r.a == "" {
		t.Skip("no sandbox A")
	}
	secrets := []string{r.secret, r.secret2}
	// Fresh intercepted traffic in A's current processes first.
	res := r.probes(t, r.a, `
print(json.dumps({
    'https': probe_http('api.test', 443, tls=True, path='/secret'),
    'wss': probe_ws('api.test', 443, 'api.test', tls=True),
    'urllib': __import__('urllib.request').request.urlopen('https://api.test/secret-urllib', timeout=5).read().decode().strip(),
}))`)
	if !strings.HasPrefix(res["https"], "reached") || !strings.HasPrefix(res["wss"], "reached") || res["urllib"] != "hello from api.test" {
		t.Errorf("A's rule requests: %v", res)
	}
	var withHeader int
	for _, req := range r.in.Hosts["api.test"].Requests() {
		if req.Header.Get("X-Api-Key") == r.secret && strings.HasPrefix(req.Path, "/secret") {
			withHeader++
		}
	}
	if withHeader != 2 {
		t.Errorf("api.test saw the header on %d of the 2 /secret requests", withHeader)
	}

	// The scanners' own check: a canary planted in each sandbox, in its
	// kernel's memory, a file and another process's environment, must be
	// found where it was put.
	canary := "sbxcanary-" + randomHex(t)
	needle := secretNeedle(append(secrets, canary)...)
	plant := fmt.Sprintf(`
import subprocess
planted = %q + %q
open('/tmp/canary.txt', 'w').write(planted)
sleeper = subprocess.Popen(['sleep', '600'], env={'CANARY': planted})
print('planted')`, canary[:10], canary[10:]) // the command's text never holds it whole
	// As the sandbox user, through the API: a process of its own (bash),
	// so the needle never sits in the kernel.
	scan := func(id string) {
		o, err := runCollect(r.ctx, r.c, &sandboxv1.ExecuteRequest{SandboxId: id, Language: "bash",
			Code: "python3 - " + needle + " mem,files <<'EOF'\n" + netScanner + "\nEOF\n", Timeout: durationSeconds(600)})
		if err != nil || o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_OK {
			t.Fatalf("the user's scan in %s: %v %v %q", id, err, o.done, o.stderr)
		}
		s := parseScan(t, "the sandbox user in "+id, o.stdout, len(secrets)+1)
		want := []string{"file /tmp/canary.txt", "environ of"}
		switch {
		case s.MemBytes > 0:
			want = append(want, "memory of")
		case r.runtime == "runsc":
			// gVisor refuses /proc/PID/mem even to a process's own user:
			// memory is no channel for the sandbox user there, and root's
			// scan below reads it.
			t.Logf("the sandbox user in %s: no process memory readable under gVisor", id)
		default:
			t.Errorf("the sandbox user in %s read no process memory: the scan cannot be trusted", id)
		}
		s.wantCanary(t, "the sandbox user in "+id, want...)
		if s.Files < 1000 || s.Procs < 2 {
			t.Errorf("the user's scan in %s read %d files, %d processes: too few to mean anything", id, s.Files, s.Procs)
		}
	}
	var memTotal, fileTotal int64
	var procs, files int
	for _, id := range []string{r.a, r.e} {
		if id == "" {
			continue
		}
		if id == r.a {
			r.py(t, id, plant)
		} else {
			r.e2bRun(t, id, r.eToken, plant)
		}
		scan(id)
		cid, holder := netContainers(t, r.ctx, id)
		for _, c := range []string{cid, holder} {
			// The holder runs under runc whatever the sandbox's runtime.
			s := rootScan(t, r.ctx, c, c == cid && r.runtime == "runsc", needle, "mem,files")
			if c == cid {
				s.wantCanary(t, "root in "+c, "file /tmp/canary.txt", "environ of", "memory of")
			}
			memTotal += s.MemBytes
			fileTotal += s.FileBytes
			procs += s.Procs
			files += s.Files
			if c == cid && (s.MemBytes < 16<<20 || s.Procs < 2) {
				t.Errorf("root's scan of %s read %s of %d processes: too little to mean anything", c, mib(s.MemBytes), s.Procs)
			}
		}
	}

	// Nowhere in the API's answers.
	var answers [][]byte
	add := func(what string, m proto.Message, err error) {
		if err != nil {
			t.Errorf("%s: %v", what, err)
			return
		}
		w, _ := proto.Marshal(m)
		j, _ := protojson.Marshal(m)
		answers = append(answers, w, j)
	}
	for _, id := range []string{r.a, r.e} {
		g, err := r.c.GetSandbox(r.ctx, &sandboxv1.GetSandboxRequest{SandboxId: id})
		add("GetSandbox", g, err)
		st, err := r.c.GetNetworkStatus(r.ctx, &sandboxv1.GetNetworkStatusRequest{SandboxId: id})
		add("GetNetworkStatus", st, err)
	}
	l, err := r.c.ListSandboxes(r.ctx, &sandboxv1.ListSandboxesRequest{})
	add("ListSandboxes", l, err)
	acq, err := r.c.AcquireSandbox(r.ctx, &sandboxv1.AcquireSandboxRequest{UserId: "net-a", Options: &sandboxv1.SandboxOptions{Network: true, NetworkPolicy: r.policyA()}})
	add("AcquireSandbox", acq, err)
	up, err := r.c.UpdateNetworkPolicy(r.ctx, &sandboxv1.UpdateNetworkPolicyRequest{SandboxId: r.a, Policy: r.policyA()})
	add("UpdateNetworkPolicy", up, err)
	for _, p := range []string{"/sandboxes", "/v2/sandboxes", "/sandboxes/" + r.e, "/sandboxes/" + r.a} {
		code, b := r.e2b(t, "GET", p, "")
		if code != http.StatusOK {
			t.Errorf("GET %s: %d %s", p, code, b)
		}
		answers = append(answers, b)
	}
	ctl := sandboxctlRunner(t, r.ctx, r.env.sandboxctl, r.d.addr)
	for _, id := range []string{r.a, r.e} {
		out, errOut, code := ctl("", "--token", r.key, "net", id)
		if code != 0 {
			t.Errorf("sandboxctl net %s: exit %d: %s", id, code, errOut)
		}
		answers = append(answers, []byte(out+errOut))
	}
	answers = append(answers, []byte(r.d.logs.String()))
	for i, a := range answers {
		for _, s := range secrets {
			if bytes.Contains(a, []byte(s)) {
				t.Errorf("answer %d holds a secret: %.300s", i, a)
			}
		}
	}
	if !strings.Contains(string(answers[1]), "X-Api-Key") {
		t.Errorf("GetSandbox's answer does not name the rule's header: %s", answers[1])
	}
	r.note("secret: nowhere in %d processes (%s of memory) nor %d files (%s) of 2 sandboxes and their holders, as root; nor as the sandbox user; nor in %d API answers or sandboxd's log",
		procs, mib(memTotal), files, mib(fileTotal), len(answers)-1)
}

func durationSeconds(s int64) *durationpb.Duration {
	return durationpb.New(time.Duration(s) * time.Second)
}

// sandboxd's process counters.
type procSample struct {
	fds int
	rss int64
}

func sampleProc(pid int) (procSample, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return procSample{}, err
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procSample{}, err
	}
	m := regexp.MustCompile(`VmRSS:\s+(\d+) kB`).FindSubmatch(st)
	if m == nil {
		return procSample{}, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	}
	kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return procSample{fds: len(fds), rss: kb << 10}, nil
}

// netFlooder floods the gateway for argv[1] seconds from four processes
// on the sandbox's one CPU: two send DNS queries for random names as fast
// as they can; two open connections to argv[2]:80, holding up to 300
// each open without a byte (each takes a gateway slot until its peek
// times out) and then opening and closing as fast as they can. It prints
// "flooding" once the workers run, and its counts at the end.
const netFlooder = `
import os, sys, socket, time, random, struct, json
secs, target = float(sys.argv[1]), sys.argv[2]
ns = [l.split()[1] for l in open('/etc/resolv.conf') if l.startswith('nameserver')][0]
deadline = time.monotonic() + secs
def dns():
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.setblocking(False)
    n = 0
    while time.monotonic() < deadline:
        for _ in range(64):
            name = '%08x.flood.test' % random.getrandbits(32)
            q = struct.pack('>HHHHHH', random.getrandbits(16), 0x0100, 1, 0, 0, 0) + b''.join(bytes([len(p)]) + p.encode() for p in name.split('.')) + b'\0\0\1\0\1'
            try:
                u.sendto(q, (ns, 53)); n += 1
            except (BlockingIOError, OSError):
                pass
            try:
                u.recv(512)
            except (BlockingIOError, OSError):
                pass
    return n
def conns():
    held, n = [], 0
    while time.monotonic() < deadline:
        try:
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex((target, 80))
            n += 1
            if len(held) < 300:
                held.append(s)
            else:
                s.close()
        except OSError:
            time.sleep(0.001)
    return n
kids = []
for f in (dns, dns, conns, conns):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        n = f()
        os.write(w, json.dumps({f.__name__: n}).encode())
        os._exit(0)
    os.close(w)
    kids.append((pid, r))
print('flooding', flush=True)
total = {'dns': 0, 'conns': 0}
for pid, r in kids:
    d = json.loads(os.read(r, 1 << 16) or b'{}')
    os.waitpid(pid, 0)
    for k, v in d.items():
        total[k] += v
print(json.dumps(total), flush=True)
`

// netMeasure fetches http://allowed.test/ argv[1] times (a new
// connection and a DNS lookup each) and prints the latencies in ms.
const netMeasure = `
import time, json, urllib.request
ms = []
for _ in range(%d):
    t = time.perf_counter()
    urllib.request.urlopen('http://allowed.test/', timeout=10).read()
    ms.append((time.perf_counter() - t) * 1000)
print(json.dumps(ms))
`

// caseFlood: F floods, V measures; sandboxd's descriptors and memory are
// watched all along.
func (r *netRun) caseFlood(t *testing.T) {
	f := r.acquireNet(t, "net-flood", nil)
	v := r.acquireNet(t, "net-victim", &sandboxv1.NetworkPolicy{AllowOut: []string{"allowed.test"}, DenyOut: []string{"0.0.0.0/0"}})
	defer r.delete(v)
	pid := r.d.proc.Pid()
	base, err := sampleProc(pid)
	if err != nil {
		t.Fatal(err)
	}
	limits, _ := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	nofile := regexp.MustCompile(`Max open files\s+(\d+)`).FindSubmatch(limits)
	measure := func() []float64 {
		t.Helper()
		out := r.py(t, v, fmt.Sprintf(netMeasure, netSamples))
		var ms []float64
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &ms); err != nil {
			t.Fatalf("the measure: %v in %q", err, out)
		}
		return ms
	}
	measure() // warm: the victim's kernel has imported urllib
	var peak procSample
	var peakMu sync.Mutex
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if s, err := sampleProc(pid); err == nil {
				peakMu.Lock()
				peak.fds, peak.rss = max(peak.fds, s.fds), max(peak.rss, s.rss)
				peakMu.Unlock()
			}
			select {
			case <-stopSampling:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	var quiet, flooded []float64
	var sentDNS, sentConns int64
	quiet = append(quiet, measure()...)
	for w := range netFloodWindows {
		s, err := r.c.Execute(r.ctx, &sandboxv1.ExecuteRequest{SandboxId: f, Language: "bash",
			Code: fmt.Sprintf("python3 - %d %s <<'EOF'\n%s\nEOF\n", netFloodSeconds, r.host("allowed.test"), netFlooder)})
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		for !strings.Contains(out.String(), "flooding") {
			ev, err := s.Recv()
			if err != nil {
				t.Fatalf("the flood (window %d) ended before it began: %v; %q", w, err, out.String())
			}
			out.WriteString(ev.GetStdout().GetText() + ev.GetStderr().GetText())
		}
		time.Sleep(500 * time.Millisecond) // the flood at full strength, the cap filled
		start := time.Now()
		flooded = append(flooded, measure()...)
		if d := time.Since(start); d > time.Duration(netFloodSeconds-1)*time.Second {
			t.Logf("window %d: the measure took %v, outlasting the flood", w, d)
		}
		evs, err := recvEvents(s)
		if err != nil {
			t.Fatalf("the flood (window %d): %v", w, err)
		}
		o := outcomeOf(evs)
		var counts struct{ DNS, Conns int64 }
		lines := strings.Split(strings.TrimSpace(out.String()+o.stdout), "\n")
		json.Unmarshal([]byte(lines[len(lines)-1]), &counts)
		sentDNS += counts.DNS
		sentConns += counts.Conns
		t.Logf("window %d: the flooder sent %d DNS queries and opened %d connections in %d s", w, counts.DNS, counts.Conns, netFloodSeconds)
		quiet = append(quiet, measure()...)
	}
	close(stopSampling)
	<-sampled
	qp, fp := percentile(quiet, 50), percentile(flooded, 50)
	ratio := fp / qp
	fairness := netFairness
	if r.runtime == "runsc" {
		fairness = netFairnessRunsc
	}
	bound := fairness*qp + float64(netFairnessSlack)/float64(time.Millisecond)
	slowest := slices.Max(flooded)
	t.Logf("the victim's GET: p50 %.2f ms quiet (p90 %.2f), %.2f ms flooded (p90 %.2f, max %.2f): %.2f×", qp, percentile(quiet, 90), fp, percentile(flooded, 90), slowest, ratio)
	if fp > bound {
		t.Errorf("the flood slowed another sandbox's GET from p50 %.2f ms to %.2f ms (%.2f×); want at most %.0f× + %v (%.2f ms)", qp, fp, ratio, fairness, netFairnessSlack, bound)
	}
	if slowest >= float64(netDropped)/float64(time.Millisecond) {
		t.Errorf("one of the victim's GETs under the flood took %.0f ms: a packet of its was dropped (a retransmit); want none at %v or more", slowest, netDropped)
	}
	fst := r.status(t, f).GetCounters()
	seenDNS := fst.GetDnsAllowed() + fst.GetDnsDenied() + fst.GetDnsRateLimited()
	seenConns := fst.GetConnectionsAllowed() + fst.GetConnectionsDenied() + fst.GetConnectionsRefusedAtCap()
	t.Logf("the flooder's counters at the gateway: %+v", fst)
	if sentDNS > 0 && float64(seenDNS) > 0.5*float64(sentDNS) {
		t.Errorf("the gateway saw %d of the %d flood queries; the kernel's meter should drop most", seenDNS, sentDNS)
	}
	fdBound := base.fds + 2*netConnCap + netFDSlack
	t.Logf("sandboxd: %d descriptors before, peak %d (bound %d; limit %s); RSS %s before, peak %s (bound +%s)", base.fds, peak.fds, fdBound,
		string(nofileOf(nofile)), mib(base.rss), mib(peak.rss), mib(netRSSBound))
	if peak.fds > fdBound {
		t.Errorf("sandboxd's descriptors peaked at %d during the flood; want at most %d (%d before + 2 × %d capped connections + %d)", peak.fds, fdBound, base.fds, netConnCap, netFDSlack)
	}
	if peak.rss-base.rss > netRSSBound {
		t.Errorf("sandboxd's RSS grew by %s during the flood; want at most %s", mib(peak.rss-base.rss), mib(netRSSBound))
	}
	r.note("flood: other sandbox's GET p50 %.2f ms flooded vs %.2f ms quiet (%.2f×, bound %.0f× + %v), max %.1f ms; the gateway saw %d of %d flood DNS queries (the kernel dropped the rest) and %d of %d connections (%d at cap); sandboxd peak %d fds (%d before, bound %d), RSS %s (+%s, bound +%s)",
		fp, qp, ratio, fairness, netFairnessSlack, slowest, seenDNS, sentDNS, seenConns, sentConns, fst.GetConnectionsRefusedAtCap(), peak.fds, base.fds, fdBound,
		mib(peak.rss), mib(max(0, peak.rss-base.rss)), mib(netRSSBound))
	r.floodID = f
}

func nofileOf(m [][]byte) []byte {
	if m == nil {
		return []byte("?")
	}
	return m[1]
}

// percentile is the p-th percentile of xs (nearest rank).
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// caseMetrics: the egress series moved, and a deleted sandbox's are gone.
func (r *netRun) caseMetrics(t *testing.T) {
	if r.a == "" {
		t.Skip("no sandbox A")
	}
	fams := scrape(t, r.ctx, r.metrics)
	for _, c := range []struct {
		series string
		labels []string
	}{
		{"sandboxd_sandbox_egress_bytes_total", []string{"sandbox_id", r.a, "direction", "out"}},
		{"sandboxd_sandbox_egress_bytes_total", []string{"sandbox_id", r.a, "direction", "in"}},
		{"sandboxd_sandbox_egress_connections_total", []string{"sandbox_id", r.a, "result", "allowed"}},
		{"sandboxd_sandbox_egress_connections_total", []string{"sandbox_id", r.a, "result", "denied"}},
		{"sandboxd_sandbox_egress_dns_queries_total", []string{"sandbox_id", r.a, "result", "answered"}},
		{"sandboxd_sandbox_egress_rule_requests_total", []string{"sandbox_id", r.a, "tenant", "acme"}},
		{"sandboxd_egress_bytes_total", []string{"direction", "in"}},
		{"sandboxd_egress_connections_total", []string{"result", "allowed"}},
		{"sandboxd_egress_connections_total", []string{"result", "denied"}},
		{"sandboxd_egress_dns_queries_total", []string{"result", "answered"}},
		{"sandboxd_egress_dns_queries_total", []string{"result", "denied"}},
		{"sandboxd_egress_rule_requests_total", nil},
		{"sandboxd_egress_sandboxes", nil},
	} {
		if v := value(fams, c.series, c.labels...); v <= 0 {
			t.Errorf("%s%v = %v; want it to have moved", c.series, c.labels, v)
		}
	}
	if r.floodID != "" {
		if v := value(fams, "sandboxd_sandbox_egress_connections_total", "sandbox_id", r.floodID, "result", "refused_at_cap") +
			value(fams, "sandboxd_sandbox_egress_dns_queries_total", "sandbox_id", r.floodID, "result", "rate_limited"); v <= 0 {
			t.Errorf("the flooder's refused_at_cap and rate_limited series did not move")
		}
		before := value(fams, "sandboxd_egress_connections_total", "result", "allowed")
		r.delete(r.floodID)
		fams = scrape(t, r.ctx, r.metrics)
		for name, f := range fams {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "sandbox_id" && l.GetValue() == r.floodID {
						t.Errorf("%s still has a series of the deleted sandbox %s", name, r.floodID)
					}
				}
			}
		}
		if after := value(fams, "sandboxd_egress_connections_total", "result", "allowed"); after < before {
			t.Errorf("the server's connections went down from %v to %v when a sandbox was deleted", before, after)
		}
	}
	n := 0
	for name, f := range fams {
		if strings.HasPrefix(name, "sandboxd_sandbox_egress_") || strings.HasPrefix(name, "sandboxd_egress_") {
			n += len(f.GetMetric())
		}
	}
	r.note("metrics: %d egress series, per sandbox and server-wide, moved; a deleted sandbox's gone", n)
}
