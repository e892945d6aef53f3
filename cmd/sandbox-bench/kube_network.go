package main

import (
	"context"
	"errors"
	"fmt"

	sandboxclient "github.com/sandboxd/sandboxd/client"
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
	mKubeIngressP50     = metric{"kube_ingress_get_p50", "kubernetes: ingress: HTTP GET to a port p50 (keep-alive)", "ms", true, "faster", "slower"}
)

// kubeNetwork measures a networked sandbox's egress and ingress through a
// replica with --kube-egress-cni and the ports front, each followed by
// the same measure through the Docker backend's sandboxd.
func (b *bench) kubeNetwork(ctx context.Context, k *kubeEnv) (err error) {
	all := []metric{mKubeEgressGetP50, mKubeEgressDownload, mKubeIngressP50}
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
		"--egress-hosts-file", b.net.in.HostsFile, "--ports-listen", "127.0.0.1:0", "--ports-domain", netPortsDomain)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, r.stop()) }()
	kacq, err := r.c.sb.Acquire(ctx, b.user("kube-net"), sandboxclient.WithNetwork())
	if err != nil {
		return err
	}
	dacq, err := b.c.sb.Acquire(ctx, b.user("kube-net-docker"), sandboxclient.WithNetwork())
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
