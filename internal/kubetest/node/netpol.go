//go:build linux

package node

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// NetworkPolicies are enforced on the nodes (Options.NetworkPolicy) by
// kube-router's NetworkPolicy controller, the one part of kube-router
// that runs here (no routing, no service proxy, no CNI of its own): a
// process per node, in the node's network namespace, that turns the
// cluster's NetworkPolicies into iptables rules and ipsets for the Pods
// on the node's bridge, as on clusters that run it beside another CNI.
// Debian's bridge plugin enforces nothing, so without it a NetworkPolicy
// is stored and ignored.
//
// It is kube-router v2.1.0, the only release the module proxy serves;
// security advisories name that release, and here it runs only in the
// tests' own network namespaces, as a cluster admin of their throw-away
// API server. scripts/kube-node-assets.sh builds it beside the kubelet.
const kubeRouterBinary = "kube-router-v2.1.0"

// serviceClusterIPRange is envtest's API server's (its default), which
// kube-router must be told: it lets traffic to Service addresses through
// to kube-proxy. No Service address is used here.
const serviceClusterIPRange = "10.0.0.0/24"

// needNetworkPolicy reports what enforcing NetworkPolicies lacks here
// ("" when nothing).
func needNetworkPolicy() string {
	if err := executable(filepath.Join(assetsDir(), kubeRouterBinary)); err != nil {
		return fmt.Sprintf("%v (scripts/kube-node-assets.sh builds kube-router beside the kubelet; `make test` runs it)", err)
	}
	for _, b := range []string{"iptables", "ipset"} {
		if _, err := exec.LookPath(b); err != nil {
			return fmt.Sprintf("%s is missing (Debian's iptables and ipset; `make kube-node` installs them)", b)
		}
	}
	return ""
}

// NeedNetworkPolicy skips t (fails it under CI=true) unless Start can
// enforce NetworkPolicies (Options.NetworkPolicy).
func NeedNetworkPolicy(t testing.TB) {
	t.Helper()
	if why := needNetworkPolicy(); why != "" {
		testenv.Unavailable(t, "NetworkPolicies cannot be enforced: %s", why)
	}
}

// startNetworkPolicy starts node n's kube-router and waits until its
// chains are in the node's filter table: from then on a NetworkPolicy
// the API server stores is enforced within kube-router's sync (it syncs
// on every change of a Pod, a namespace or a NetworkPolicy).
func (c *Cluster) startNetworkPolicy(ctx context.Context, n *Node) error {
	var err error
	n.netpol, err = startProc("kube-router", filepath.Join(n.dir, "kube-router.log"), n.netns,
		filepath.Join(c.assets, kubeRouterBinary),
		"--kubeconfig="+filepath.Join(n.dir, "kubelet.kubeconfig"),
		"--hostname-override="+n.Name,
		"--run-firewall=true", "--run-router=false", "--run-service-proxy=false",
		"--enable-cni=false", "--enable-pod-egress=false",
		"--service-cluster-ip-range="+serviceClusterIPRange,
		"--health-port=0", "--metrics-port=0")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		// The chain kube-router makes first for the Pods' forwarded
		// traffic; its rules follow in the same sync.
		out, err := exec.CommandContext(ctx, "ip", "netns", "exec", n.netns,
			"iptables", "-w", "5", "-t", "filter", "-S", "KUBE-ROUTER-FORWARD").CombinedOutput()
		if err == nil {
			return nil
		}
		if n.netpol.exited() {
			return fmt.Errorf("kube-router exited: %v\n%s", n.netpol.err, n.netpol.tail())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube-router made no KUBE-ROUTER-FORWARD chain within a minute (iptables: %v: %s); its log ends:\n%s",
				err, out, n.netpol.tail())
		case <-time.After(200 * time.Millisecond): // polling iptables
		}
	}
}
