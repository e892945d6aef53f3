package e2e

// The NetworkPolicies deploy/kubernetes ships, enforced on a real node.
// Debian's bridge plugin, which the real-node tests run, enforces none;
// here each node also runs kube-router's NetworkPolicy firewall
// (internal/kubetest/node, netpol.go), as a cluster runs it or another
// enforcing CNI. Every connection goes to this cluster's own addresses:
// another sandbox's Pod, the node, the host's API server.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/sandboxd/sandboxd/internal/kubetest/node"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// TestKubeNetworkPolicy applies deploy/kubernetes/networkpolicy.yaml as
// shipped (one peer added: sandboxd runs on the host here, not in a Pod)
// to a real node that enforces NetworkPolicies, and checks what
// SECURITY.md promises of it: a sandbox reaches no other sandbox, not
// its node's kubelet, not the API server; no Pod but sandboxd's reaches
// a sandbox's io sidecar; sandboxd still runs commands in sandboxes old
// and new. The same connections are first made without the policies, so
// that the test tells "blocked" from "never reachable".
func TestKubeNetworkPolicy(t *testing.T) {
	node.NeedNetworkPolicy(t)
	k := needRealKube(t, node.Options{Nodes: []string{"np-a"}, NetworkPolicy: true})
	ctx := e2eCtx(t)
	d := k.replica(t, "np-a")
	c, _ := d.client(t)
	a := acquire(t, ctx, c, "np-user-a").GetSandbox().GetSandboxId()
	b := acquire(t, ctx, c, "np-user-b").GetSandbox().GetSandboxId()
	n := k.cluster.Nodes[0]
	api, err := url.Parse(k.cluster.RestConfig.Host)
	if err != nil {
		t.Fatal(err)
	}
	sidecarB := net.JoinHostPort(k.podOf(t, ctx, b).Status.PodIP, "7070")
	targets := map[string]string{
		"another sandbox's io sidecar": sidecarB,
		"the node's kubelet":           net.JoinHostPort(n.Addr.String(), "10250"),
		"the API server":               api.Host,
	}
	before := probeFrom(t, ctx, c, a, targets)
	for what, r := range before {
		if r != "open" {
			t.Fatalf("without NetworkPolicies, sandbox %s connecting to %s (%s): %s; want open (the test could not tell blocked from unreachable)", a, what, targets[what], r)
		}
	}
	sidecarA := net.JoinHostPort(k.podOf(t, ctx, a).Status.PodIP, "7070")
	if r := k.probePod(t, ctx, "np-probe-before", sidecarA); r != "open" {
		t.Fatalf("without NetworkPolicies, a Pod connecting to sandbox %s's io sidecar: %s; want open", a, r)
	}

	k.applyNetworkPolicies(t, ctx, n.HostAddr())
	start := time.Now()
	var after map[string]string
	if !pollUntil(time.Minute, func() bool {
		after = probeFrom(t, ctx, c, a, targets)
		for _, r := range after {
			if r == "open" {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("a minute after the NetworkPolicies, sandbox %s still connects: %v", a, after)
	}
	t.Logf("enforced %v after the policies were created: %v", time.Since(start).Round(100*time.Millisecond), after)

	// sandboxd still serves the sandboxes it had, and a new one, whose
	// Pod the policy covers from its start.
	for _, id := range []string{a, b} {
		mustOK(t, execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: "1 + 1"}), "a command in sandbox "+id+" under the policies")
	}
	nu := acquire(t, ctx, c, "np-user-c").GetSandbox().GetSandboxId()
	for what, r := range probeFrom(t, ctx, c, nu, targets) {
		if r == "open" {
			t.Errorf("sandbox %s, created under the policies, connects to %s (%s)", nu, what, targets[what])
		}
	}
	// Nothing but sandboxd reaches a sidecar: a Pod of the same
	// namespace that is not sandboxd's.
	if r := k.probePod(t, ctx, "np-probe-after", sidecarA); r == "open" {
		t.Errorf("under the policies, a Pod that is not sandboxd's connects to sandbox %s's io sidecar", a)
	}
}

// probeFrom connects from inside sandbox id to each target at once, each
// bounded by 2 s, and says "open" or why not.
func probeFrom(t *testing.T, ctx context.Context, c sandboxv1.SandboxServiceClient, id string, targets map[string]string) map[string]string {
	t.Helper()
	js, err := json.Marshal(targets)
	if err != nil {
		t.Fatal(err)
	}
	code := fmt.Sprintf(`
import json, socket, threading
targets = json.loads(%q)
out = {}
def probe(name, addr):
    host, port = addr.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        out[name] = "open"
    except OSError as e:
        out[name] = "blocked: %%s" %% e
ts = [threading.Thread(target=probe, args=kv) for kv in targets.items()]
for th in ts: th.start()
for th in ts: th.join()
print(json.dumps(out))
`, js)
	o := execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: code})
	mustOK(t, o, "connecting from sandbox "+id)
	got := map[string]string{}
	if err := json.Unmarshal([]byte(strings.TrimSpace(o.stdout)), &got); err != nil || len(got) != len(targets) {
		t.Fatalf("the probe in sandbox %s printed %q (%v); want one result per target", id, o.stdout, err)
	}
	return got
}

// probePod runs a Pod of the sandbox image that is not sandboxd's (no
// sandbox label, no sandboxd label) in the replicas' namespace, which
// connects to addr, and says "open" or "blocked".
func (k *kubeEnv) probePod(t *testing.T, ctx context.Context, name, addr string) string {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	never := false
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/name": "np-probe"}},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: &never,
			Containers: []corev1.Container{{
				Name: "probe", Image: k.image, ImagePullPolicy: corev1.PullNever,
				Command: []string{"python3", "-c", fmt.Sprintf(
					"import socket, sys\ntry:\n    socket.create_connection((%q, %s), timeout=3).close()\nexcept OSError:\n    sys.exit(3)\n", host, port)},
			}},
		},
	}
	pods := k.cs.CoreV1().Pods(kubeNamespace)
	if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("probe pod %s: %v", name, err)
	}
	defer pods.Delete(context.Background(), name, metav1.DeleteOptions{})
	var got *corev1.Pod
	if !pollUntil(2*time.Minute, func() bool {
		var err error
		got, err = pods.Get(ctx, name, metav1.GetOptions{})
		return err == nil && (got.Status.Phase == corev1.PodSucceeded || got.Status.Phase == corev1.PodFailed)
	}) {
		t.Fatalf("probe pod %s did not finish within 2 minutes: %v", name, got.Status)
	}
	for _, cs := range got.Status.ContainerStatuses {
		if term := cs.State.Terminated; term != nil {
			switch term.ExitCode {
			case 0:
				return "open"
			case 3:
				return "blocked"
			}
			t.Fatalf("probe pod %s exited %d: %s", name, term.ExitCode, term.Message)
		}
	}
	t.Fatalf("probe pod %s is %s without a terminated container", name, got.Status.Phase)
	return ""
}

// applyNetworkPolicies creates deploy/kubernetes/networkpolicy.yaml's
// policies in the replicas' namespace, as shipped but for one peer: the
// sandboxes admit the host's address on the node's link (hostAddr) where
// they admit sandboxd's Pods, since the replicas run on the host here.
func (k *kubeEnv) applyNetworkPolicies(t *testing.T, ctx context.Context, hostAddr netip.Addr) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "deploy", "kubernetes", "networkpolicy.yaml")) // go test runs in e2e/
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, doc := range bytes.Split(raw, []byte("\n---")) {
		var np networkingv1.NetworkPolicy
		if err := yaml.UnmarshalStrict(doc, &np); err != nil {
			t.Fatalf("networkpolicy.yaml: %v", err)
		}
		if np.Name == "" {
			continue // the comment before the first document
		}
		np.Namespace = kubeNamespace
		if np.Name == "sandbox-isolation" {
			if len(np.Spec.Ingress) != 1 {
				t.Fatalf("sandbox-isolation has %d ingress rules; this test adds its peer to the one it knows", len(np.Spec.Ingress))
			}
			np.Spec.Ingress[0].From = append(np.Spec.Ingress[0].From, networkingv1.NetworkPolicyPeer{
				IPBlock: &networkingv1.IPBlock{CIDR: netip.PrefixFrom(hostAddr, 32).String()},
			})
		}
		if _, err := k.cs.NetworkingV1().NetworkPolicies(kubeNamespace).Create(ctx, &np, metav1.CreateOptions{}); err != nil {
			t.Fatalf("NetworkPolicy %s: %v", np.Name, err)
		}
		names = append(names, np.Name)
	}
	if len(names) != 2 {
		t.Fatalf("networkpolicy.yaml holds %v; want sandbox-isolation and sandboxd", names)
	}
}
