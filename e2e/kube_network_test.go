//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/internal/nettest"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// kubeNetProbe is run in a sandbox: it reports, as JSON, what each of its
// targets did. "http URL": an HTTP GET ("ok <status>" or "failed: ...");
// "dns NAME": a lookup ("resolved" or "unresolved: ..."); "tcp ADDR:PORT":
// a connection that sends an HTTP request and reads ("answered: " and the
// first line, "closed", or what stopped it: the gateway answers a refused
// HTTP request 403 itself); "udp ADDR:PORT": a datagram sent ("sent" or
// why not).
const kubeNetProbe = `
import json, socket, urllib.request
def probe(t):
    kind, arg = t.split(" ", 1)
    try:
        if kind == "http":
            with urllib.request.urlopen(arg, timeout=5) as r:
                return "ok %d" % r.status
        if kind == "dns":
            try:
                socket.getaddrinfo(arg, 80, socket.AF_INET)
            except socket.gaierror as e:
                return "unresolved: %s" % e
            return "resolved"
        host, port = arg.rsplit(":", 1)
        if kind == "udp":
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.sendto(b"x", (host, int(port)))
            return "sent"
        s = socket.create_connection((host, int(port)), timeout=5)
        s.settimeout(5)
        s.sendall(b"GET / HTTP/1.0\r\nHost: " + host.encode() + b"\r\n\r\n")
        line = s.recv(256).split(b"\r\n", 1)[0]
        return ("answered: " + line.decode("utf-8", "replace")) if line else "closed"
    except Exception as e:
        return "failed: %s" % e
print(json.dumps({t: probe(t) for t in TARGETS}))
`

// kubePortApp serves GET on a port of every address of the sandbox,
// answering "hello PATH"; it survives a hibernation at level globals (its
// pickle is its port: unpickled in the woken kernel, it serves again).
const kubePortApp = `
class PortApp:
    def __init__(self, port):
        self.port = port
        self.start()

    def __reduce__(self):
        return (PortApp, (self.port,))

    def start(self):
        import http.server, socketserver, threading

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                b = ("hello " + self.path).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(b)))
                self.end_headers()
                self.wfile.write(b)

        class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        srv = S(("0.0.0.0", self.port), H)
        threading.Thread(target=srv.serve_forever, daemon=True).start()

app = PortApp(8000)
`

// kubeNetLoop reaches allowed.test every 100 ms from a thread of the
// kernel's, until STOP is set.
const kubeNetLoop = `
import threading, urllib.request
STOP = threading.Event()
def _loop():
    while not STOP.wait(0.1):
        try:
            urllib.request.urlopen("http://allowed.test/", timeout=2).read()
        except Exception:
            pass
threading.Thread(target=_loop, daemon=True).start()
`

// portsServing finds the ports front's address in a replica's log.
var portsServing = regexp.MustCompile(`msg="serving the ports front" ports_listen=(\S+)`)

// portsAddr is replica d's ports front's address.
func portsAddr(t *testing.T, d *daemon) string {
	t.Helper()
	m := portsServing.FindStringSubmatch(d.logs.String())
	if m == nil {
		t.Fatalf("the replica did not log its ports front's address:\n%s", d.logs)
	}
	return m[1]
}

// getPort GETs url through the front at addr (whatever the URL's host),
// with tok as the traffic token unless it is empty.
func getPort(t *testing.T, ctx context.Context, addr, rawURL, tok string) (int, string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("port URL %q: %v", rawURL, err)
	}
	u.Host = addr
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if tok != "" {
		req.Header.Set("Sandboxd-Traffic-Token", tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s through %s: %v", rawURL, addr, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(b)
}

// kubeNetwork: networked sandboxes on the real nodes, whose CNI chain ends
// with sandboxd's egress plugin (cmd/sandbox-cni) and whose io sidecars run
// the egress gateway (orchestrator/backend/kube/network.go). Test hosts of
// the test's own (internal/nettest, forwarded to by the host) stand for the
// world; the replicas resolve their names from nettest's hosts file and
// keep the cluster's block out (--kube-egress-deny).
//
//   - an allow-list sandbox reaches the allowed host by name, and neither
//     the denied host (by name: NXDOMAIN; by address) nor the link-local
//     metadata stand-in nor its own node's kubelet; UDP goes nowhere; each
//     refusal is in GetNetworkStatus (through the other replica), and no
//     refused host saw anything;
//   - a sandbox without network reaches nothing, refused at once;
//   - a port the sandbox serves is reached through either replica's ports
//     front with the traffic token GetHost gave (through the other), and
//     not without it; the io sidecar's port is not a sandbox's;
//   - its io sidecar's container restarts, and its gateway puts the policy
//     back in force itself: a loop in the sandbox reaches the allowed host
//     again with no call of sandboxd's;
//   - UpdateNetworkPolicy through the other replica takes effect at once;
//   - a request to the port of the hibernated sandbox wakes it (a new
//     Pod), and its server answers again; the policy survives;
//   - under gVisor (whose network stack bypasses the Pod's netfilter) a
//     networked sandbox is refused, dead with the reason, before it runs
//     anything.
func kubeNetwork(t *testing.T, k *kubeEnv) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	in := nettest.New(t, nettest.Options{Hosts: []string{"allowed.test", "denied.test", "api.test"}, Metadata: true})
	allowed, denied, metadata, api := in.Hosts["allowed.test"], in.Hosts["denied.test"], in.Hosts["metadata.test"], in.Hosts["api.test"]
	k.cluster.ForwardTo(t, allowed.Addr, denied.Addr, metadata.Addr, api.Addr)
	caFile := filepath.Join(t.TempDir(), "test-ca.pem")
	if err := os.WriteFile(caFile, in.CAPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--allow-network", "--kube-egress-cni", "--kube-egress-deny=" + k.cluster.Block().String(),
		"--egress-hosts-file=" + in.HostsFile, "--egress-ca-file=" + caFile, "--kube-storage-class=" + k.cluster.StorageClass, "--ports-listen=127.0.0.1:0",
		"--metrics-listen=127.0.0.1:0"}
	a, b := k.replica(t, "net-a", flags...), k.replica(t, "net-b", flags...)
	ca, _ := a.client(t)
	cb, _ := b.client(t)
	frontA, frontB := portsAddr(t, a), portsAddr(t, b)

	probe := func(c sandboxv1.SandboxServiceClient, id string, targets ...string) map[string]string {
		t.Helper()
		js, _ := json.Marshal(targets)
		o := execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: "TARGETS = " + string(js) + "\n" + kubeNetProbe})
		mustOK(t, o, "probing from sandbox "+id)
		got := map[string]string{}
		if err := json.Unmarshal([]byte(strings.TrimSpace(o.stdout)), &got); err != nil || len(got) != len(targets) {
			t.Fatalf("the probe in sandbox %s printed %q (%v)", id, o.stdout, err)
		}
		return got
	}
	want := func(id string, got map[string]string, target, prefix string) {
		t.Helper()
		if !strings.HasPrefix(got[target], prefix) {
			t.Errorf("sandbox %s, %s: %q; want %s…", id, target, got[target], prefix)
		}
	}
	seen := func() (int64, int64) {
		return denied.AllAccepts() + metadata.AllAccepts(), allowed.UDPDatagrams() + denied.UDPDatagrams()
	}

	// api.test gets a header rule: its value a credential the sandbox never
	// sees, which neither the Pod's object nor the hop to its sidecar
	// carries in clear.
	secret := "sbxsecret-" + randomHex(t)
	policy := &sandboxv1.NetworkPolicy{AllowOut: []string{"allowed.test", "api.test"}, DenyOut: []string{"0.0.0.0/0"},
		Rules: map[string]*sandboxv1.NetworkRule{"api.test": {Headers: map[string]string{"X-Api-Key": secret}}}}
	// ruled fetches https://api.test/PATH from sandbox id (trusting its CA,
	// through the environment the Pod gives it) and checks the host saw
	// the rule's header on it, and the sandbox not its value.
	ruled := func(c sandboxv1.SandboxServiceClient, id, path string) {
		t.Helper()
		o := execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: "import os, urllib.request\n" +
			"print(urllib.request.urlopen('https://api.test/" + path + "', timeout=10).read().decode().strip())\n" +
			"print(" + fmt.Sprintf("%q", secret) + " in repr(dict(os.environ)) + open('/etc/sandboxd/ca-bundle.pem').read())"})
		mustOK(t, o, "an HTTPS request to api.test from sandbox "+id)
		if got := strings.Fields(o.stdout); len(got) < 2 || got[len(got)-1] != "False" || !strings.Contains(o.stdout, "hello from api.test") {
			t.Errorf("sandbox %s, https://api.test/%s: %q; want api.test's answer, the secret nowhere in the sandbox", id, path, o.stdout)
		}
		var saw []string
		for _, r := range api.Requests() {
			if r.Path == "/"+path {
				saw = append(saw, r.Header.Get("X-Api-Key"))
			}
		}
		if len(saw) != 1 || saw[0] != secret {
			t.Errorf("api.test saw %d requests for /%s with X-Api-Key %q; want one, with the rule's value", len(saw), path, saw)
		}
	}
	inClear := func(id string) {
		t.Helper()
		b, _ := json.Marshal(k.podOf(t, ctx, id))
		if strings.Contains(string(b), secret) {
			t.Errorf("sandbox %s's Pod object holds the rule's value in clear", id)
		}
	}
	r, err := ca.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: "net-alice", Options: &sandboxv1.SandboxOptions{Network: true, NetworkPolicy: policy}})
	if err != nil {
		t.Fatalf("AcquireSandbox with network: %v", err)
	}
	id := r.GetSandbox().GetSandboxId()
	node := k.cluster.Node(k.podOf(t, ctx, id).Spec.NodeName)
	if node == nil {
		t.Fatalf("sandbox %s runs on no node of the cluster", id)
	}
	got := probe(ca, id,
		"http http://allowed.test/",
		"dns denied.test",
		fmt.Sprintf("http http://%s/", denied.Addr),
		fmt.Sprintf("tcp %s:80", metadata.Addr),
		fmt.Sprintf("tcp %s:10250", node.Addr),
		fmt.Sprintf("udp %s:%d", allowed.Addr, nettest.UDPPort))
	want(id, got, "http http://allowed.test/", "ok 200")
	want(id, got, "dns denied.test", "unresolved")
	want(id, got, fmt.Sprintf("http http://%s/", denied.Addr), "failed")
	for _, target := range []string{fmt.Sprintf("tcp %s:80", metadata.Addr), fmt.Sprintf("tcp %s:10250", node.Addr)} {
		if r := got[target]; strings.HasPrefix(r, "answered") && !strings.Contains(r, " 403 ") {
			t.Errorf("sandbox %s, %s: %q; want it refused (the gateway's 403, or closed)", id, target, r)
		}
	}
	if allowed.Accepts(80) == 0 {
		t.Errorf("the allowed host accepted no connection on 80")
	}
	ruled(ca, id, "rule-before")
	inClear(id)
	if conns, datagrams := seen(); conns != 0 || datagrams != 0 {
		t.Errorf("refused hosts accepted %d connections and the hosts received %d datagrams; want none", conns, datagrams)
	}
	st, err := cb.GetNetworkStatus(ctx, &sandboxv1.GetNetworkStatusRequest{SandboxId: id})
	if err != nil {
		t.Fatalf("GetNetworkStatus through the other replica: %v", err)
	}
	var reasons []string
	for _, d := range st.GetDenials() {
		reasons = append(reasons, d.GetName()+" "+d.GetAddress()+": "+d.GetReason())
	}
	all := strings.Join(reasons, "\n")
	for _, w := range []string{"denied.test", denied.Addr.String(), metadata.Addr.String(), "a cluster address " + node.Addr.String()} {
		if !strings.Contains(all, w) {
			t.Errorf("GetNetworkStatus's denials lack %q:\n%s", w, all)
		}
	}
	if st.GetCounters().GetConnectionsAllowed() == 0 || st.GetCounters().GetDnsDenied() == 0 {
		t.Errorf("GetNetworkStatus counters %+v; want allowed connections and denied queries", st.GetCounters())
	}
	// The same counters as the leader's per-sandbox series (read from the
	// Pod every 10 s): summed over the replicas, each sandbox counts once.
	urls := metricsURLs(t, a, b)
	egressSeries := func(name string, labels ...string) float64 {
		var n float64
		for _, u := range urls {
			n += value(scrape(t, ctx, u), name, append([]string{"sandbox_id", id}, labels...)...)
		}
		return n
	}
	var allowedConns, deniedDNS float64
	if !pollUntil(30*time.Second, func() bool {
		allowedConns = egressSeries("sandboxd_sandbox_egress_connections_total", "result", "allowed")
		deniedDNS = egressSeries("sandboxd_sandbox_egress_dns_queries_total", "result", "denied")
		return allowedConns >= 1 && deniedDNS >= 1
	}) {
		t.Errorf("the per-sandbox egress series of sandbox %s: %v allowed connections, %v denied queries within 30 s; want at least one each", id, allowedConns, deniedDNS)
	}

	// A port it serves, through either replica's front, with the token
	// the other gave; not without it; never the io sidecar's.
	mustOK(t, execute(t, ctx, ca, &sandboxv1.ExecuteRequest{SandboxId: id, Code: kubePortApp}), "starting a web server")
	host, err := cb.GetHost(ctx, &sandboxv1.GetHostRequest{SandboxId: id, Port: 8000})
	if err != nil || !host.GetTokenRequired() || host.GetTrafficToken() == "" {
		t.Fatalf("GetHost: %+v, %v; want a URL that needs a token", host, err)
	}
	for _, front := range []string{frontB, frontA} {
		if code, body := getPort(t, ctx, front, host.GetUrl()+"hi", host.GetTrafficToken()); code != http.StatusOK || body != "hello /hi" {
			t.Errorf("GET %shi through the front at %s: %d %q; want 200 \"hello /hi\"", host.GetUrl(), front, code, body)
		}
	}
	if code, _ := getPort(t, ctx, frontA, host.GetUrl(), ""); code != http.StatusUnauthorized {
		t.Errorf("GET %s without the token: %d; want 401", host.GetUrl(), code)
	}
	if _, err := ca.GetHost(ctx, &sandboxv1.GetHostRequest{SandboxId: id, Port: 7070}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("GetHost of the io sidecar's port: %v; want FAILED_PRECONDITION", err)
	}
	sidecarURL := strings.Replace(host.GetUrl(), "/8000/", "/7070/", 1)
	if code, body := getPort(t, ctx, frontA, sidecarURL, host.GetTrafficToken()); code != http.StatusBadGateway || !strings.Contains(body, "io sidecar") {
		t.Errorf("GET %s (the io sidecar's port): %d %q; want 502 naming the sidecar", sidecarURL, code, body)
	}

	// The io sidecar's container restarts: its gateway puts the policy
	// back in force itself, before sandboxd calls on the Pod again. A
	// loop in the sandbox keeps reaching the allowed host meanwhile.
	looped := allowed.Accepts(80)
	mustOK(t, execute(t, ctx, ca, &sandboxv1.ExecuteRequest{SandboxId: id, Code: kubeNetLoop}), "starting a loop reaching allowed.test")
	if !pollUntil(20*time.Second, func() bool { return allowed.Accepts(80) > looped+3 }) {
		t.Fatalf("the loop in sandbox %s did not reach allowed.test", id)
	}
	pod := k.podOf(t, ctx, id)
	restarts := func(p *corev1.Pod) (int32, bool) {
		for _, s := range p.Status.InitContainerStatuses {
			if s.Name == kubeSidecar {
				return s.RestartCount, s.Ready
			}
		}
		return 0, false
	}
	was, _ := restarts(pod)
	if err := k.cluster.KillContainer(ctx, kubeNamespace, pod.Name, kubeSidecar); err != nil {
		t.Fatalf("kill the io sidecar of sandbox %s: %v", id, err)
	}
	// Only the API server is asked: no call of sandboxd's reaches the Pod.
	if !pollUntil(60*time.Second, func() bool {
		p, err := k.cs.CoreV1().Pods(kubeNamespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		n, ready := restarts(p)
		return n > was && ready
	}) {
		t.Fatalf("the io sidecar of sandbox %s did not restart and become ready within 60 s", id)
	}
	reached := allowed.Accepts(80)
	if !pollUntil(20*time.Second, func() bool { return allowed.Accepts(80) > reached+3 }) {
		t.Errorf("after its io sidecar restarted, sandbox %s did not reach allowed.test again without a call of sandboxd's (the gateway's policy was not restored)", id)
	}
	mustOK(t, execute(t, ctx, ca, &sandboxv1.ExecuteRequest{SandboxId: id, Code: "STOP.set()"}), "stopping the loop")
	// The restarted sidecar kept its CA (the key in its own directory)
	// and put the rule back.
	ruled(ca, id, "rule-after-restart")

	// Without network: nothing, refused at once.
	plain := acquire(t, ctx, ca, "net-bob").GetSandbox().GetSandboxId()
	before := allowed.Accepts(80)
	begin := time.Now()
	got = probe(ca, plain, "http http://allowed.test/", fmt.Sprintf("tcp %s:80", allowed.Addr))
	for target, r := range got {
		if strings.HasPrefix(r, "answered") || strings.HasPrefix(r, "ok") {
			t.Errorf("sandbox %s without network, %s: %q; want refused", plain, target, r)
		}
	}
	if d := time.Since(begin); d > 10*time.Second {
		t.Errorf("a sandbox without network took %v to be refused; want at once", d)
	}
	if allowed.Accepts(80) != before {
		t.Errorf("the allowed host accepted a connection from a sandbox without network")
	}
	if _, err := ca.GetNetworkStatus(ctx, &sandboxv1.GetNetworkStatusRequest{SandboxId: plain}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("GetNetworkStatus of a sandbox without network: %v; want FAILED_PRECONDITION", err)
	}

	// An update through the other replica, in force at once; then back.
	if _, err := cb.UpdateNetworkPolicy(ctx, &sandboxv1.UpdateNetworkPolicyRequest{SandboxId: id,
		Policy: &sandboxv1.NetworkPolicy{AllowOut: []string{"allowed.test", "denied.test"}, DenyOut: []string{"0.0.0.0/0"}}}); err != nil {
		t.Fatalf("UpdateNetworkPolicy: %v", err)
	}
	got = probe(ca, id, "http http://denied.test/")
	want(id, got, "http http://denied.test/", "ok 200")
	if _, err := cb.UpdateNetworkPolicy(ctx, &sandboxv1.UpdateNetworkPolicyRequest{SandboxId: id, Policy: policy}); err != nil {
		t.Fatalf("UpdateNetworkPolicy back: %v", err)
	}
	acceptedBefore := denied.AllAccepts()

	// Hibernated, and woken by a request to its port: a new Pod, serving
	// again, the same policy.
	oldPod := k.podOf(t, ctx, id).UID
	if _, err := ca.HibernateSandbox(ctx, &sandboxv1.HibernateSandboxRequest{SandboxId: id}); err != nil {
		t.Fatalf("HibernateSandbox: %v", err)
	}
	if code, body := getPort(t, ctx, frontB, host.GetUrl()+"again", host.GetTrafficToken()); code != http.StatusOK || body != "hello /again" {
		t.Errorf("GET %sagain of the hibernated sandbox: %d %q; want it woken and 200 \"hello /again\"", host.GetUrl(), code, body)
	}
	if k.podOf(t, ctx, id).UID == oldPod {
		t.Errorf("the sandbox's pod is the same after a hibernation and a request")
	}
	got = probe(cb, id, "http http://allowed.test/", "dns denied.test", fmt.Sprintf("http http://%s/", denied.Addr))
	want(id, got, "http http://allowed.test/", "ok 200")
	want(id, got, "dns denied.test", "unresolved")
	want(id, got, fmt.Sprintf("http http://%s/", denied.Addr), "failed")
	if n := denied.AllAccepts(); n != acceptedBefore {
		t.Errorf("after the wake the denied host accepted %d more connections; want none", n-acceptedBefore)
	}
	sb, err := cb.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: id})
	if err != nil || !sb.GetSandbox().GetNetwork() || !slices.Equal(sb.GetSandbox().GetNetworkPolicy().GetAllowOut(), policy.AllowOut) {
		t.Errorf("GetSandbox after the wake: %+v, %v; want network with the policy", sb.GetSandbox(), err)
	}
	if h, ok := sb.GetSandbox().GetNetworkPolicy().GetRules()["api.test"].GetHeaders()["X-Api-Key"]; !ok || h != "" {
		t.Errorf("GetSandbox's rules after the wake: %+v; want the header's name, its value blank", sb.GetSandbox().GetNetworkPolicy().GetRules())
	}
	// The woken Pod's sidecar has a new CA, which its sandbox trusts, and
	// the rule, opened from the claim's sealed copy.
	ruled(cb, id, "rule-after-wake")
	inClear(id)

	// gVisor's network stack bypasses the Pod's netfilter: refused before
	// anything runs in it.
	if k.cluster.GVisor != "" {
		g := k.replica(t, "net-gvisor", append(slices.Clone(flags), "--kube-runtime-class", k.cluster.GVisor)...)
		cg, _ := g.client(t)
		_, err := cg.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: "net-gvisor", Options: &sandboxv1.SandboxOptions{Network: true, NetworkPolicy: policy}})
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "cannot confine a networked sandbox") {
			t.Errorf("a networked sandbox under gVisor: %v; want FAILED_PRECONDITION, its pod unable to confine it", err)
		}
		t.Logf("a networked sandbox under gVisor: %v", err)
	}
}
