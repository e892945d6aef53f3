package main

import (
	"context"
	"errors"
	"fmt"

	sandboxclient "github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/nettest"
)

// Networked sandboxes on the Kubernetes backend, beside the Docker
// backend's in the same minute. The egress gateway is the same code; what
// differs is where it runs: in the Pod's io sidecar (the node's CNI chain,
// sandbox-cni, redirects the sandbox user's connections to it), and the
// gateway dials from the Pod, through the node's bridge and this machine,
// to the test host (internal/nettest). Ingress is sandboxd's ports front,
// in the replica, dialling the port at the Pod's IP, against the Docker
// backend's front dialling the sandbox's address.
var (
	mKubeEgressGetP50   = metric{"kube_egress_get_p50", "kubernetes: egress: HTTP GET on a new connection p50", "ms", true, "faster", "slower"}
	mKubeEgressDownload = metric{"kube_egress_download", "kubernetes: egress: HTTP download of one large body", "MB/s", false, "faster", "slower"}
	mKubeEgressRuleP50  = metric{"kube_egress_rule_get_p50", "kubernetes: egress: HTTPS GET through a header rule, new connection p50", "ms", true, "faster", "slower"}
	mKubeIngressP50     = metric{"kube_ingress_get_p50", "kubernetes: ingress: HTTP GET to a port p50 (keep-alive)", "ms", true, "faster", "slower"}
)

// kubeNetwork measures a networked sandbox's egress and ingress through a
// replica with --kube-egress-cni and the ports front, each followed by
// the same measure through the Docker backend's sandboxd.
func (b *bench) kubeNetwork(ctx context.Context, k *kubeEnv) (err error) {
	all := []metric{mKubeEgressGetP50, mKubeEgressDownload, mKubeEgressRuleP50, mKubeIngressP50}
	skip := ""
	switch {
	case k.cluster == nil:
		skip = "needs the real nodes (--kube-nodes real): the test kubelet's Pods have no egress plugin"
	case b.net.skip != "":
		skip = b.net.skip
	case b.net.in == nil:
		skip = "no test host"
	}
	if skip != "" {
		for _, m := range all {
			b.rep.add(row(m, nan, "", nan, nil, "not measured: "+skip))
		}
		return nil
	}
	host := b.net.in.Hosts[netHost].Addr
	undo, err := k.cluster.Forward(host)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, undo()) }()

	b.progress("kubernetes: a networked sandbox (--kube-egress-cni)")
	r, err := b.replica(ctx, k, "bench-net", "--allow-network", "--kube-egress-cni", "--kube-egress-deny", k.cluster.Block().String(),
		"--egress-hosts-file", b.net.in.HostsFile, "--egress-ca-file", b.net.caFile, "--ports-listen", "127.0.0.1:0", "--ports-domain", netPortsDomain)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, r.stop()) }()
	// Every public destination, and a header rule on the test host: its
	// HTTPS requests go through the gateway's TLS termination.
	policy := sandboxclient.WithNetworkPolicy(sandboxclient.NetworkPolicy{Rules: map[string]map[string]string{netHost: {benchRuleHeader: benchRuleValue}}})
	kacq, err := r.c.sb.Acquire(ctx, b.user("kube-net"), policy)
	if err != nil {
		return err
	}
	dacq, err := b.c.sb.Acquire(ctx, b.user("kube-net-docker"), policy)
	if err != nil {
		return err
	}
	b.mu.Lock()
	b.created = append(b.created, dacq.ID)
	b.mu.Unlock()

	size := int64(b.cfg.NetDownloadMB) << 20
	script := fmt.Sprintf(egressScript, netHost, host.String(), b.cfg.NetRequests, size)
	egress := func(c *client, id, what string) (latencies, float64, error) {
		b.progress("kubernetes: egress through the gateway, %s", what)
		out, err := c.execStdout(ctx, id, "python", script)
		var res egressResult
		if err == nil {
			err = lastJSON(out, &res)
		}
		if err != nil {
			return nil, 0, fmt.Errorf("egress from the %s: %w", what, err)
		}
		lat, mbps := res.figures(size)
		return lat, mbps, nil
	}
	klat, kmbps, err := egress(r.c, kacq.ID, "Pod's sidecar")
	if err != nil {
		return err
	}
	dlat, dmbps, err := egress(b.c, dacq.ID, "Docker backend's sandboxd")
	if err != nil {
		return err
	}
	const peer = "Docker backend (same run, back to back)"
	b.rep.add(row(mKubeEgressGetP50, ms(klat.percentile(50)), peer, ms(dlat.percentile(50)), nil,
		fmt.Sprintf("%d GETs of a 22-byte body from %s (a test host in its own namespace, which the host forwards the nodes' Pods to), each on a new connection: the sandbox user's connection redirected by the node's table to the Pod's io sidecar, which judges it and dials from the Pod; p90 %s vs %s ms",
			b.cfg.NetRequests, netHost, fmtNum(ms(klat.percentile(90))), fmtNum(ms(dlat.percentile(90))))))
	b.rep.add(row(mKubeEgressDownload, kmbps, peer, dmbps, nil,
		fmt.Sprintf("one GET of %d MiB on one connection, read in 1 MiB chunks", b.cfg.NetDownloadMB)))

	rule := func(c *client, id, what string) (latencies, error) {
		b.progress("kubernetes: HTTPS through a header rule, %s", what)
		before := ruled(b.net.in.Hosts[netHost])
		out, err := c.execStdout(ctx, id, "python", fmt.Sprintf(ruleScript, netHost, b.cfg.NetRequests))
		var res egressResult
		if err == nil {
			err = lastJSON(out, &res)
		}
		if err != nil {
			return nil, fmt.Errorf("HTTPS through a rule from the %s: %w", what, err)
		}
		if n := ruled(b.net.in.Hosts[netHost]) - before; n < b.cfg.NetRequests {
			return nil, fmt.Errorf("the test host saw the rule's header on %d of the %s's %d HTTPS requests", n, what, b.cfg.NetRequests)
		}
		lat, _ := res.figures(0)
		return lat, nil
	}
	krule, err := rule(r.c, kacq.ID, "Pod's sidecar")
	if err != nil {
		return err
	}
	drule, err := rule(b.c, dacq.ID, "Docker backend's sandboxd")
	if err != nil {
		return err
	}
	b.rep.add(row(mKubeEgressRuleP50, ms(krule.percentile(50)), peer, ms(drule.percentile(50)), nil,
		fmt.Sprintf("%d HTTPS GETs of a 22-byte body from %s, each on a new connection, under a rule setting one header: the gateway terminates TLS with the sandbox's own CA (which the sandbox trusts through SSL_CERT_FILE), sets the header and verifies the host under --egress-ca-file; on Kubernetes in the Pod's sidecar, the rule's value sealed on the Pod; p90 %s vs %s ms",
			b.cfg.NetRequests, netHost, fmtNum(ms(krule.percentile(90))), fmtNum(ms(drule.percentile(90))))))

	ingress := func(c *client, id, what string) (latencies, error) {
		b.progress("kubernetes: ingress through the ports front, %s", what)
		if _, err := c.execStdout(ctx, id, "python", fmt.Sprintf(ingressServer, ingressPort, ingressPort, host.String())); err != nil {
			return nil, fmt.Errorf("the server in the %s: %w", what, err)
		}
		h, err := hostOfVia(ctx, c, id)
		if err != nil {
			return nil, err
		}
		lat, _, err := b.httpLoad(ctx, h.url, h.dial, h.header)
		if err != nil {
			return nil, fmt.Errorf("ingress through %s: %w", h.url, err)
		}
		return lat, nil
	}
	kin, err := ingress(r.c, kacq.ID, "Pod")
	if err != nil {
		return err
	}
	din, err := ingress(b.c, dacq.ID, "Docker backend's sandbox")
	if err != nil {
		return err
	}
	b.rep.add(row(mKubeIngressP50, ms(kin.percentile(50)), peer, ms(din.percentile(50)), nil,
		fmt.Sprintf("%d sequential GETs of a 23-byte body from a ThreadingHTTPServer in the sandbox, one keep-alive connection, through GetHost's URL: the replica's ports front → the Pod's IP (through a veth into the node) vs the Docker backend's front → the sandbox's address", b.cfg.NetRequests)))
	if err := r.c.delete(ctx, kacq.ID); err != nil {
		return fmt.Errorf("delete sandbox %s: %w", kacq.ID, err)
	}
	return b.c.delete(ctx, dacq.ID)
}

// The rule the networked sandboxes' policy sets on the test host.
const (
	benchRuleHeader = "X-Bench-Key"
	benchRuleValue  = "bench-rule-value"
)

// ruled counts the HTTPS requests h saw with the rule's header.
func ruled(h *nettest.Host) int {
	n := 0
	for _, r := range h.Requests() {
		if r.TLS && r.Header.Get(benchRuleHeader) == benchRuleValue {
			n++
		}
	}
	return n
}

// ruleScript times HTTPS GETs of HOST's "/", each on a new connection,
// with the default context (the sandbox's CA bundle, SSL_CERT_FILE); its
// JSON is egressResult's, without a download.
const ruleScript = `
import http.client, json, ssl, time
HOST, N = %q, %d
ctx = ssl.create_default_context()

def get():
    c = http.client.HTTPSConnection(HOST, 443, timeout=30, context=ctx)
    c.request("GET", "/")
    r = c.getresponse()
    r.read()
    c.close()
    if r.status != 200:
        raise SystemExit("GET /: %%d" %% r.status)

get()  # untimed: the first connection warms both paths' caches
lat = []
for _ in range(N):
    t0 = time.perf_counter_ns()
    get()
    lat.append(time.perf_counter_ns() - t0)
print(json.dumps({"get_ns": lat, "download_ns": 0}))
`
