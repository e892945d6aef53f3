package e2e

// deploy/kubernetes as shipped, on a real node that enforces
// NetworkPolicies. The other real-node tests run sandboxd on the host as
// a cluster admin, and Debian's bridge plugin enforces no NetworkPolicy;
// here sandboxd runs in the cluster from the manifests a user applies
// (its Deployment, ServiceAccount, Role, ClusterRole, Secrets, probes,
// read-only root) and each node also runs kube-router's NetworkPolicy
// firewall (internal/kubetest/node, netpol.go), as a cluster runs it or
// another enforcing CNI. Every connection goes to this cluster's own
// addresses (Pods, the node, the host's API server) or to test hosts of
// the test's own (internal/nettest: one in 198.18.0.0/15, the link-local
// metadata stand-in).

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sandboxd/sandboxd/internal/kubetest/manifests"
	"github.com/sandboxd/sandboxd/internal/kubetest/node"
	"github.com/sandboxd/sandboxd/internal/nettest"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// deployedImage is the name the node knows the test's sandboxd image by.
const deployedImage = "sandboxd.test/sandboxd:e2e"

// deployedToken is the deployed sandboxd's one caller.
const deployedToken = "deployed-tenant-token-e2e-0123456789"

// TestKubeDeployed deploys sandboxd from deploy/kubernetes on a real node
// and checks what docs/kubernetes.md and SECURITY.md promise of it:
//
//   - sandboxd runs under its ServiceAccount and Role (RBAC is enforced by
//     the API server): both replicas become Ready through their gRPC
//     probes, create sandbox Pods, share a user's sandbox, hibernate and
//     wake one (its claim), and read per-sandbox metrics from the kubelet
//     (the ClusterRole's nodes/stats);
//   - the NetworkPolicies, once applied: a sandbox reaches no other
//     sandbox, not sandboxd, not its node's kubelet, not the API server,
//     not a host beyond the cluster, not the metadata stand-in;
//     no Pod but sandboxd's reaches a sandbox's io sidecar; sandboxd
//     still serves old and new sandboxes, and a replica started under the
//     policies reaches the API server and the sidecars.
//
// The connections are first made before the policies, so that the test
// tells "blocked" from "never reachable".
//
// What differs from a user's cluster, each because of the test nodes:
// the images are imported, not pulled; the kubernetes Service's address
// needs kube-proxy, which the nodes lack, so the Pods are told the API
// server's own (KUBERNETES_SERVICE_HOST); the kubelets' serving
// certificates are self-signed, so sandboxd gets their CA from a
// ConfigMap; and this test's client and probe run on the host, so the
// sandboxd policy also admits the host's address on the node's link.
func TestKubeDeployed(t *testing.T) {
	node.NeedNetworkPolicy(t)
	env := needE2E(t)
	sandboxdImage := buildSandboxdImage(t)
	c := node.Start(t, node.Options{Nodes: []string{"dep-a"}, NetworkPolicy: true,
		Images: map[string]string{env.image: realNodeImage, sandboxdImage: deployedImage}})
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range c.Nodes {
				t.Logf("%s", n.Logs())
			}
		}
	})
	n := c.Nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	k := &kubeEnv{e2eEnv: env, cs: c.Client, image: realNodeImage}
	apiURL, err := url.Parse(c.RestConfig.Host)
	if err != nil {
		t.Fatal(err)
	}
	api, err := netip.ParseAddrPort(apiURL.Host)
	if err != nil {
		t.Fatalf("the API server's address %q: %v", c.RestConfig.Host, err)
	}

	objs, err := manifests.Render(filepath.Join("..", "deploy", "kubernetes")) // go test runs in e2e/
	if err != nil {
		t.Fatal(err)
	}
	ap, err := manifests.NewApplier(c.RestConfig, "sandboxd-e2e")
	if err != nil {
		t.Fatal(err)
	}
	var policies []*unstructured.Unstructured
	var deployment *unstructured.Unstructured
	caData, err := os.ReadFile(c.KubeletCAFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range objs {
		switch key := u.GetKind() + "/" + u.GetName(); key {
		case "NetworkPolicy/sandbox-isolation", "NetworkPolicy/sandboxd":
			policies = append(policies, u) // after the first connections
			continue
		case "Secret/sandboxd-io-token":
			setString(t, u, "e2e-io-token-"+fmt.Sprint(time.Now().UnixNano()), "stringData", "token")
		case "Secret/sandboxd-auth-tokens":
			setString(t, u, deployedToken+" tenant-deployed user\n", "stringData", "tokens")
		case "Deployment/sandboxd":
			patchDeployment(t, u, api)
			deployment = u
		}
		if u.GetKind() == "Deployment" {
			// The kubelets' CA, which the patched Deployment mounts.
			cm := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": map[string]any{"name": "e2e-kubelet-ca", "namespace": kubeNamespace},
				"data":     map[string]any{"ca.crt": string(caData)},
			}}
			if _, _, err := ap.Apply(ctx, cm, false); err != nil {
				t.Fatalf("ConfigMap e2e-kubelet-ca: %v", err)
			}
		}
		if _, _, err := ap.Apply(ctx, u, false); err != nil {
			t.Fatalf("apply %s/%s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	if err := c.WaitNamespace(ctx, kubeNamespace); err != nil {
		t.Fatal(err)
	}
	replicas := waitDeployment(t, ctx, k, 2)
	t.Logf("sandboxd's replicas Ready: %v", replicas)
	c0, c1 := dialDeployed(t, replicas[0]), dialDeployed(t, replicas[1])
	actx := bearer(ctx, deployedToken)

	// Through either replica, one sandbox per user.
	a := acquire(t, actx, c0, "dep-user-a").GetSandbox().GetSandboxId()
	if again := acquire(t, actx, c1, "dep-user-a").GetSandbox().GetSandboxId(); again != a {
		t.Fatalf("user dep-user-a has sandbox %s through one replica and %s through the other", a, again)
	}
	b := acquire(t, actx, c1, "dep-user-b").GetSandbox().GetSandboxId()
	mustOK(t, execute(t, actx, c0, &sandboxv1.ExecuteRequest{SandboxId: a, Code: "x = 41"}), "x = 41")

	// ServiceAccount admission is on: sandboxd's Pods carry their token,
	// a sandbox Pod, which opts out, none.
	hasToken := func(p *corev1.Pod) bool {
		return slices.ContainsFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return strings.HasPrefix(v.Name, "kube-api-access-") })
	}
	if !hasToken(podByAddr(t, ctx, k, replicas[0])) {
		t.Fatalf("sandboxd's Pod has no service account token volume: is ServiceAccount admission off?")
	}
	if hasToken(k.podOf(t, ctx, a)) {
		t.Errorf("sandbox %s's Pod carries a service account token", a)
	}

	// The world beyond the cluster: a test host and the link-local
	// metadata stand-in, in namespaces of the test's own, which the
	// host forwards the Pods' connections to.
	in := nettest.New(t, nettest.Options{Hosts: []string{"outside.test"}, Metadata: true})
	outside, metadata := in.Hosts["outside.test"], in.Hosts["metadata.test"]
	c.ForwardTo(t, outside.Addr, metadata.Addr)

	sidecarA := net.JoinHostPort(k.podOf(t, ctx, a).Status.PodIP, "7070")
	targets := map[string]string{
		"a host outside the cluster":   net.JoinHostPort(outside.Addr.String(), "80"),
		"the metadata stand-in":        net.JoinHostPort(metadata.Addr.String(), "80"),
		"another sandbox's io sidecar": net.JoinHostPort(k.podOf(t, ctx, b).Status.PodIP, "7070"),
		"sandboxd":                     net.JoinHostPort(replicas[0], "50051"),
		"the node's kubelet":           net.JoinHostPort(n.Addr.String(), "10250"),
		"the API server":               api.String(),
	}
	for what, r := range probeFrom(t, actx, c0, a, targets) {
		if r != "open" {
			t.Fatalf("without NetworkPolicies, sandbox %s connecting to %s (%s): %s; want open (the test could not tell blocked from unreachable)", a, what, targets[what], r)
		}
	}
	if r := k.probePod(t, ctx, "np-probe-before", sidecarA, 30*time.Second); r != "open" {
		t.Fatalf("without NetworkPolicies, a Pod connecting to sandbox %s's io sidecar: %s; want open", a, r)
	}

	for _, u := range policies {
		if u.GetName() == "sandboxd" {
			admitHost(t, u, n.HostAddr())
		}
		if _, _, err := ap.Apply(ctx, u, false); err != nil {
			t.Fatalf("apply NetworkPolicy %s: %v", u.GetName(), err)
		}
	}
	start := time.Now()
	var after map[string]string
	if !pollUntil(time.Minute, func() bool {
		after = probeFrom(t, actx, c0, a, targets)
		return !slices.Contains(mapValues(after), "open")
	}) {
		t.Fatalf("a minute after the NetworkPolicies, sandbox %s still connects: %v", a, after)
	}
	t.Logf("enforced %v after the policies were applied: %v", time.Since(start).Round(100*time.Millisecond), after)
	// What the hosts count, from here on: nothing may arrive.
	reached := func() int64 { return outside.AllAccepts() + metadata.AllAccepts() }
	reachedBefore := reached()

	// sandboxd still serves its sandboxes, the one it had and a new one,
	// whose Pod the policies cover from its start.
	o := execute(t, actx, c1, &sandboxv1.ExecuteRequest{SandboxId: a, Code: "x + 1"})
	if len(o.results) != 1 || o.results[0]["text/plain"] != "42" {
		t.Fatalf("x + 1 in sandbox %s under the policies: %v %v; want 42", a, o.results, o.errs)
	}
	nu := acquire(t, actx, c0, "dep-user-c").GetSandbox().GetSandboxId()
	for what, r := range probeFrom(t, actx, c0, nu, targets) {
		if r == "open" {
			t.Errorf("sandbox %s, created under the policies, connects to %s (%s)", nu, what, targets[what])
		}
	}
	if r := k.probePod(t, ctx, "np-probe-after", sidecarA, 0); r == "open" {
		t.Errorf("under the policies, a Pod that is not sandboxd's connects to sandbox %s's io sidecar", a)
	}
	// While sandboxd's clients, Pods of any namespace, still reach it.
	if r := k.probePod(t, ctx, "np-probe-client", net.JoinHostPort(replicas[1], "50051"), 30*time.Second); r != "open" {
		t.Errorf("under the policies, a client Pod connecting to sandboxd's gRPC port: %s; want open", r)
	}
	if n := reached() - reachedBefore; n != 0 {
		t.Errorf("under the policies, %d connections from the sandboxes reached the test hosts outside the cluster", n)
	}

	// The ClusterRole's nodes/stats, and the sandboxd policy's egress
	// to the kubelets.
	var last error
	if !pollUntil(time.Minute, func() bool {
		m, err := c0.GetSandboxMetrics(actx, &sandboxv1.GetSandboxMetricsRequest{SandboxId: a})
		last = err
		return err == nil && len(m.GetSamples()) > 0 && m.GetSamples()[len(m.GetSamples())-1].GetMemoryUsedBytes() > 0
	}) {
		t.Errorf("no per-sandbox metrics from the kubelet within a minute under the policies (last error: %v)", last)
	}

	// The Role's persistentvolumeclaims: a hibernation keeps the
	// sandbox's claim, a wake mounts it in a new Pod.
	if _, err := c1.HibernateSandbox(actx, &sandboxv1.HibernateSandboxRequest{SandboxId: a}); err != nil {
		t.Fatalf("HibernateSandbox %s: %v", a, err)
	}
	o = execute(t, actx, c0, &sandboxv1.ExecuteRequest{SandboxId: a, Code: "x"})
	if len(o.results) != 1 || o.results[0]["text/plain"] != "41" {
		t.Fatalf("x in sandbox %s after a hibernation: %v %v; want 41", a, o.results, o.errs)
	}

	// A replica started under the policies: its new connections to the
	// API server (informers, leader election) and to the sidecars.
	if err := c.Client.CoreV1().Pods(kubeNamespace).Delete(ctx, podByAddr(t, ctx, k, replicas[0]).Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	fresh := waitDeployment(t, ctx, k, 2, replicas[0])
	var cn sandboxv1.SandboxServiceClient
	for _, addr := range fresh {
		if addr != replicas[1] {
			cn = dialDeployed(t, addr)
		}
	}
	o = execute(t, actx, cn, &sandboxv1.ExecuteRequest{SandboxId: b, Code: "6 * 7"})
	if len(o.results) != 1 || o.results[0]["text/plain"] != "42" {
		t.Fatalf("6 * 7 in sandbox %s through a replica started under the policies: %v %v", b, o.results, o.errs)
	}

	// gVisor, as docs/kubernetes.md enables it: the shipped RuntimeClass
	// and --kube-runtime-class=gvisor on the replicas (a rollout). The
	// policies hold for a sandbox whose network stack is gVisor's.
	c.NeedGVisor(t)
	rc, err := manifests.ReadFile(filepath.Join("..", "deploy", "kubernetes", "runtimeclass-gvisor.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ap.Apply(ctx, rc, false); err != nil {
		t.Fatalf("apply the shipped RuntimeClass: %v", err)
	}
	args, _, _ := unstructured.NestedSlice(deployment.Object, "spec", "template", "spec", "containers")
	ct := args[0].(map[string]any)
	ct["args"] = append(ct["args"].([]any), "--kube-runtime-class="+rc.GetName())
	if err := unstructured.SetNestedSlice(deployment.Object, args, "spec", "template", "spec", "containers"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ap.Apply(ctx, deployment, false); err != nil {
		t.Fatalf("apply the Deployment with --kube-runtime-class: %v", err)
	}
	rolled := waitDeployment(t, ctx, k, 2, fresh...)
	cg := dialDeployed(t, rolled[0])
	g := acquire(t, actx, cg, "dep-user-gvisor").GetSandbox().GetSandboxId()
	if got := k.podOf(t, ctx, g).Spec.RuntimeClassName; got == nil || *got != rc.GetName() {
		t.Fatalf("sandbox %s's Pod runs under RuntimeClass %v; want %s", g, got, rc.GetName())
	}
	gv := probeFrom(t, actx, cg, g, targets)
	for what, r := range gv {
		if r == "open" {
			t.Errorf("sandbox %s, under gVisor, connects to %s (%s) under the policies", g, what, targets[what])
		}
	}
	t.Logf("from a sandbox under gVisor: %v", gv)
	if n := reached() - reachedBefore; n != 0 {
		t.Errorf("under the policies, %d connections from the sandboxes reached the test hosts outside the cluster", n)
	}
}

// buildSandboxdImage builds an image of sandboxd alone, as
// docs/kubernetes.md's Dockerfile does (a static binary on an
// empty base), and returns its reference in the Docker engine.
func buildSandboxdImage(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	// Static, as the Dockerfile's, but without its -trimpath: under make
	// test (CGO_ENABLED=0) every package is then the same compile as the
	// test binaries' and comes from Go's build cache; with -trimpath the
	// whole of sandboxd's dependencies compiled a second time, which on a
	// new machine, beside the other shards, took past five minutes once.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, "sandboxd"), "github.com/sandboxd/sandboxd/cmd/sandboxd")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build sandboxd: %v\n%s", err, out)
	}
	df := "FROM scratch\nCOPY sandboxd /sandboxd\nUSER 65532:65532\nENTRYPOINT [\"/sandboxd\"]\n"
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(df), 0o644); err != nil {
		t.Fatal(err)
	}
	const ref = "sandboxd-e2e-deployed:latest"
	if out, err := exec.CommandContext(ctx, "docker", "build", "-q", "-t", ref, dir).CombinedOutput(); err != nil {
		t.Fatalf("docker build %s: %v\n%s", ref, err, out)
	}
	// The nodes keep their import; the engine need not keep a copy a run.
	t.Cleanup(func() { _ = exec.Command("docker", "image", "rm", "-f", ref).Run() })
	return ref
}

// patchDeployment makes the shipped Deployment run on the test node: the
// images as the node knows them, the API server's own address for the
// kubernetes Service's (no kube-proxy here), the kubelets' CA, the test
// cluster's storage class, and small CPU requests for its sandboxes.
func patchDeployment(t *testing.T, u *unstructured.Unstructured, api netip.AddrPort) {
	t.Helper()
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
		t.Fatal(err)
	}
	spec := &d.Spec.Template.Spec
	ct := &spec.Containers[0]
	ct.Image = deployedImage
	i := slices.IndexFunc(ct.Args, func(a string) bool { return strings.HasPrefix(a, "--image=") })
	if i < 0 {
		t.Fatalf("the Deployment's args %q name no --image", ct.Args)
	}
	ct.Args[i] = "--image=" + realNodeImage
	ct.Args = append(ct.Args, "--kube-cpu-request=0.05", "--kube-storage-class="+node.LocalStorageClass,
		"--kube-kubelet-ca-file=/var/run/e2e-kubelet-ca/ca.crt")
	ct.Env = append(ct.Env,
		corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: api.Addr().String()},
		corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: fmt.Sprint(api.Port())})
	ct.VolumeMounts = append(ct.VolumeMounts, corev1.VolumeMount{Name: "e2e-kubelet-ca", MountPath: "/var/run/e2e-kubelet-ca", ReadOnly: true})
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "e2e-kubelet-ca", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "e2e-kubelet-ca"}}}})
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&d)
	if err != nil {
		t.Fatal(err)
	}
	u.Object = obj
	// No status in an apply.
	unstructured.RemoveNestedField(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u.Object, "spec", "template", "metadata", "creationTimestamp")
}

// admitHost adds the host's address on the node's link (this test's
// client, and the kubelet's probes' stand-in) to the sandboxd policy's
// gRPC ingress.
func admitHost(t *testing.T, u *unstructured.Unstructured, host netip.Addr) {
	t.Helper()
	ingress, _, err := unstructured.NestedSlice(u.Object, "spec", "ingress")
	if err != nil || len(ingress) != 1 {
		t.Fatalf("the sandboxd NetworkPolicy has ingress %v (%v); this test adds its client to the one rule it knows", ingress, err)
	}
	rule := ingress[0].(map[string]any)
	from, _ := rule["from"].([]any)
	rule["from"] = append(from, map[string]any{"ipBlock": map[string]any{"cidr": netip.PrefixFrom(host, 32).String()}})
	if err := unstructured.SetNestedSlice(u.Object, ingress, "spec", "ingress"); err != nil {
		t.Fatal(err)
	}
}

func setString(t *testing.T, u *unstructured.Unstructured, v string, path ...string) {
	t.Helper()
	if err := unstructured.SetNestedField(u.Object, v, path...); err != nil {
		t.Fatal(err)
	}
}

// waitDeployment waits until sandboxd's Deployment has want Ready Pods,
// none of them at an address in gone, and returns their addresses.
func waitDeployment(t *testing.T, ctx context.Context, k *kubeEnv, want int, gone ...string) []string {
	t.Helper()
	var addrs []string
	var why string
	if !pollUntil(3*time.Minute, func() bool {
		pods, err := k.cs.CoreV1().Pods(kubeNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=sandboxd"})
		if err != nil {
			why = err.Error()
			return false
		}
		addrs, why = nil, ""
		for _, p := range pods.Items {
			ready := p.DeletionTimestamp == nil && slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
				return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
			})
			if ready && !slices.Contains(gone, p.Status.PodIP) {
				addrs = append(addrs, p.Status.PodIP)
			} else {
				why += fmt.Sprintf("%s: %s %v; ", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
			}
		}
		return len(addrs) == want
	}) {
		t.Fatalf("sandboxd's Deployment has %d Ready Pods %v within 3 minutes; want %d (%s)", len(addrs), addrs, want, why)
	}
	slices.Sort(addrs)
	return addrs
}

// podByAddr is the sandboxd Pod at addr.
func podByAddr(t *testing.T, ctx context.Context, k *kubeEnv, addr string) *corev1.Pod {
	t.Helper()
	pods, err := k.cs.CoreV1().Pods(kubeNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=sandboxd"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		if pods.Items[i].Status.PodIP == addr {
			return &pods.Items[i]
		}
	}
	t.Fatalf("no sandboxd Pod at %s", addr)
	return nil
}

// dialDeployed is a client of the sandboxd Pod at addr.
func dialDeployed(t *testing.T, addr string) sandboxv1.SandboxServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(net.JoinHostPort(addr, "50051"), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(sandboxv1.MaxMessageSize)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return sandboxv1.NewSandboxServiceClient(conn)
}

func mapValues(m map[string]string) []string {
	var vs []string
	for _, v := range m {
		vs = append(vs, v)
	}
	return vs
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
// sandbox label, no sandboxd label) in sandboxd's namespace, which
// connects to addr, and says "open" or "blocked". It tries for patience
// (once, when 0): an enforcer programs a new Pod's address into the
// policies that admit it only after the Pod has it, so a Pod's first
// packets may be refused where its later ones are let through (the
// other way round, a peer never admitted, stays refused).
func (k *kubeEnv) probePod(t *testing.T, ctx context.Context, name, addr string, patience time.Duration) string {
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
				Command: []string{"python3", "-c", fmt.Sprintf(`
import socket, sys, time
deadline = time.monotonic() + %d
while True:
    try:
        socket.create_connection((%q, %s), timeout=3).close()
        sys.exit(0)
    except OSError:
        if time.monotonic() > deadline:
            sys.exit(3)
        time.sleep(0.5)
`, int(patience.Seconds()), host, port)},
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
