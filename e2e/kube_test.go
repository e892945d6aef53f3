package e2e

// The Kubernetes backend end to end: real sandboxd replicas (--backend
// kubernetes) on a real API server (envtest's kube-apiserver and etcd),
// whose Pods a test kubelet (internal/kubetest/kubelet) runs on this
// machine's Docker engine, each with its own 127.0.0.N address. Everything
// above the kubelet is the production path: sandboxd, its informers and
// leader election, the Pods it creates, the io sidecar in the sandbox
// image. The clients talk gRPC to the replicas, as users do.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/kubetest"
	"github.com/sandboxd/sandboxd/internal/kubetest/kubelet"
	"github.com/sandboxd/sandboxd/internal/kubetest/node"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// kubeNamespace is where the replicas keep their sandboxes.
const kubeNamespace = "sandboxd"

// Two tenants' tokens, for the isolation checks.
const (
	kubeTokA = "kube-tenant-a-token-e2e-0123456789"
	kubeTokB = "kube-tenant-b-token-e2e-0123456789"
)

// kubeEnv is a running API server with nodes to run its Pods, and what
// sandboxd replicas need to use it.
type kubeEnv struct {
	*e2eEnv
	cs         kubernetes.Interface
	nodes      kubeNodes
	kubeconfig string
	tokenFile  string
	// image is the replicas' --image when the nodes know the sandbox
	// image by another name ("": the e2e image).
	image string
	// replicaArgs are more flags for every replica.
	replicaArgs []string
	// cluster is the real cluster, nil on the test kubelet.
	cluster *node.Cluster
	// kubeletForFaults is the test kubelet, nil on a real cluster: the
	// faults it makes happen at will (an eviction, an OOM kill of the
	// whole container) a real node makes by real pressure.
	kubeletForFaults *kubelet.Kubelet
}

// kubeNodes is what runs the Pods, as the tests see it: the test kubelet
// on Docker, or the real nodes' kubelets and containerd.
type kubeNodes interface {
	// containerID is the running container name of Pod pod ("" if none).
	containerID(ctx context.Context, pod, name string) string
	// containerGone reports whether container id no longer exists.
	containerGone(ctx context.Context, id string) bool
	// procs lists the command names of container id's processes.
	procs(ctx context.Context, id string) (string, error)
}

// testKubelet runs Pods on the test kubelet.
type testKubelet struct{ kl *kubelet.Kubelet }

func (k testKubelet) containerID(_ context.Context, pod, name string) string {
	return k.kl.ContainerID(kubeNamespace, pod, name)
}

func (k testKubelet) containerGone(ctx context.Context, id string) bool {
	out, err := exec.CommandContext(ctx, "docker", "ps", "-aq", "--filter", "id="+id).Output()
	return err == nil && len(strings.TrimSpace(string(out))) == 0
}

func (k testKubelet) procs(ctx context.Context, id string) (string, error) {
	return dockerProcs(ctx, id)
}

// realNodes runs Pods on a real cluster's nodes.
type realNodes struct{ c *node.Cluster }

func (r realNodes) containerID(ctx context.Context, pod, name string) string {
	return r.c.ContainerID(ctx, kubeNamespace, pod, name)
}

func (r realNodes) containerGone(ctx context.Context, id string) bool {
	gone, err := r.c.ContainerGone(ctx, id)
	return err == nil && gone
}

func (r realNodes) procs(ctx context.Context, id string) (string, error) {
	return r.c.Exec(ctx, id, "ps", "-e", "-o", "comm=")
}

// needKube starts the API server and the test kubelet (or skips, or fails
// under CI=true, when a part is missing).
func needKube(t *testing.T) *kubeEnv {
	t.Helper()
	kubetest.NeedAPIServer(t)
	env := needE2E(t)
	rc := kubetest.Start(t)
	k := newKubeEnv(t, env, rc)
	kl := kubelet.StartForTest(t, kubelet.Config{RestConfig: rc, StateDir: filepath.Join(t.TempDir(), "kubelet")})
	k.nodes = testKubelet{kl}
	k.kubeletForFaults = kl
	return k
}

// realNodeImage is the name the real nodes know the e2e sandbox image by:
// not tagged latest, whose pull policy would be Always (there is no
// registry).
const realNodeImage = "sandboxd.test/sandbox:e2e"

// needRealKube starts a real cluster (internal/kubetest/node) with the
// given nodes, the e2e sandbox image imported into each.
func needRealKube(t *testing.T, o node.Options) *kubeEnv {
	t.Helper()
	node.Need(t)
	env := needE2E(t)
	o.Images = map[string]string{env.image: realNodeImage}
	c := node.Start(t, o)
	k := newKubeEnv(t, env, c.RestConfig)
	k.nodes, k.cluster, k.image = realNodes{c}, c, realNodeImage
	if err := c.WaitNamespace(t.Context(), kubeNamespace); err != nil {
		t.Fatal(err)
	}
	// A real scheduler counts CPU requests: twenty sandboxes of half a
	// CPU each would not fit two nodes of this two-core machine.
	k.replicaArgs = []string{"--kube-cpu-request", "0.05",
		// The CA of the kubelets' serving certificates, for metrics.
		"--kube-kubelet-ca-file", c.KubeletCAFile}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range c.Nodes {
				t.Logf("%s", n.Logs())
			}
		}
	})
	return k
}

// newKubeEnv prepares the API server behind rc for sandboxd replicas: their
// namespace, the io sidecar's token Secret and a kubeconfig.
func newKubeEnv(t *testing.T, env *e2eEnv, rc *rest.Config) *kubeEnv {
	t.Helper()
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	k := &kubeEnv{e2eEnv: env, cs: cs, kubeconfig: filepath.Join(dir, "kubeconfig"), tokenFile: filepath.Join(dir, "io-token")}
	if err := kubetest.WriteKubeconfig(rc, k.kubeconfig); err != nil {
		t.Fatal(err)
	}
	token := "e2e-io-token-" + fmt.Sprint(time.Now().UnixNano())
	if err := os.WriteFile(k.tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kubeNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Secrets(kubeNamespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "sandboxd-io-token"},
		StringData: map[string]string{"token": token},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return k
}

// replica starts one sandboxd replica named name on the API server.
func (k *kubeEnv) replica(t *testing.T, name string, extra ...string) *daemon {
	t.Helper()
	args := []string{"--backend", "kubernetes", "--kubeconfig", k.kubeconfig, "--kube-namespace", kubeNamespace,
		"--kube-io-token-file", k.tokenFile, "--kube-identity", name, "--kube-leader-lease", "3s",
		"--default-cpus", "0.5"}
	if k.image != "" {
		args = append(args, "--image", k.image)
	}
	args = append(args, k.replicaArgs...)
	args = append(args, extra...)
	d := k.start(t, args...)
	d.kube = k
	return d
}

// sandboxContainer is the sandbox container of sandbox id's Pod, as the
// kubelet runs it, and the user its Pod is for.
func (k *kubeEnv) sandboxContainer(t *testing.T, ctx context.Context, id string) containerInfo {
	t.Helper()
	p := k.podOf(t, ctx, id)
	var ctr string
	if !pollUntil(30*time.Second, func() bool { ctr = k.nodes.containerID(ctx, p.Name, "sandbox"); return ctr != "" }) {
		t.Fatalf("no node runs a sandbox container for pod %s", p.Name)
	}
	return containerInfo{id: ctr, user: p.Annotations["sandboxd.io/user-id"]}
}

// sandboxPods lists the user sandboxes' Pods that are not being deleted.
func (k *kubeEnv) sandboxPods(t *testing.T, ctx context.Context) []corev1.Pod {
	t.Helper()
	list, err := k.cs.CoreV1().Pods(kubeNamespace).List(ctx, metav1.ListOptions{LabelSelector: "sandboxd.io/pool=false"})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// podOf returns sandbox id's Pod.
func (k *kubeEnv) podOf(t *testing.T, ctx context.Context, id string) *corev1.Pod {
	t.Helper()
	p, err := k.cs.CoreV1().Pods(kubeNamespace).Get(ctx, "sbx-"+strings.TrimPrefix(id, "sb-"), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the pod of sandbox %s: %v", id, err)
	}
	return p
}

// TestKube runs the Kubernetes backend's scenarios on one API server and
// the test kubelet; each subtest has its own replicas and users.
func TestKube(t *testing.T) { kubeScenarios(t, needKube(t)) }

// TestKubeRealNode runs the same scenarios on a real cluster: the real
// scheduler and controller manager, two real nodes (kubelet, containerd,
// CNI), and then loses a node.
func TestKubeRealNode(t *testing.T) {
	k := needRealKube(t, node.Options{Nodes: []string{"node-a", "node-b"}, NodeMonitorGracePeriod: 10 * time.Second, EgressCNI: true})
	kubeScenarios(t, k)
	t.Run("GVisor", func(t *testing.T) { kubeGVisor(t, k) })
	// Last: the cluster has one node left after it.
	t.Run("NodeLost", func(t *testing.T) { kubeNodeLost(t, k) })
}

// A node is lost (its kubelet, its containerd and every process of its
// Pods killed at once): once the controller manager has marked it and the
// sandboxes' toleration of its taint (--kube-node-lost-after) has run
// out, each sandbox it ran is DEAD naming the node, the user's next
// acquire names the replaced sandbox, and the sandboxes on the other node
// keep their interpreters' state.
func kubeNodeLost(t *testing.T, k *kubeEnv) {
	const lostAfter = 5 * time.Second
	ctx := e2eCtx(t)
	d := k.replica(t, "lost-a", "--kube-node-lost-after", lostAfter.String())
	c, _ := d.client(t)
	byNode := map[string][]string{} // node → sandbox IDs
	user := map[string]string{}     // sandbox ID → user
	for i := 0; i < 10 && (len(byNode["node-a"]) == 0 || len(byNode["node-b"]) == 0); i++ {
		u := fmt.Sprintf("lost-user-%d", i)
		id := acquire(t, ctx, c, u).GetSandbox().GetSandboxId()
		mustOK(t, execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: fmt.Sprintf("x = %d", i)}), "x = i")
		n := k.podOf(t, ctx, id).Spec.NodeName
		byNode[n] = append(byNode[n], id)
		user[id] = u
	}
	if len(byNode["node-a"]) == 0 || len(byNode["node-b"]) == 0 {
		t.Fatalf("the scheduler put sandboxes on %v; want both nodes used", byNode)
	}
	k.cluster.Node("node-b").Lose()
	lost := time.Now()
	for _, id := range byNode["node-b"] {
		var sb *sandboxv1.Sandbox
		if !pollUntil(2*time.Minute, func() bool {
			r, err := c.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: id})
			sb = r.GetSandbox()
			return err == nil && sb.GetState() == sandboxv1.SandboxState_SANDBOX_STATE_DEAD
		}) {
			t.Fatalf("sandbox %s on the lost node is %v (%q) two minutes after; want DEAD", id, sb.GetState(), sb.GetStateReason())
		}
		if !strings.Contains(sb.GetStateReason(), "node node-b was lost") {
			t.Errorf("the reason %q does not name the lost node", sb.GetStateReason())
		}
	}
	t.Logf("%d sandboxes on the lost node DEAD %v after it was lost (node monitor grace 10s, toleration %v)",
		len(byNode["node-b"]), time.Since(lost).Round(time.Second), lostAfter)
	for _, id := range byNode["node-a"] {
		o := execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: "x"})
		if len(o.results) != 1 {
			t.Errorf("sandbox %s on the surviving node: %v %v; want its x back", id, o.results, o.errs)
		}
	}
	id := byNode["node-b"][0]
	r := acquire(t, ctx, c, user[id])
	if !r.GetCreated() || r.GetReplacedSandboxId() != id || !strings.Contains(r.GetReplacedReason(), "node-b") {
		t.Errorf("acquire after the node was lost: created %v, replaced %q (%q); want a new sandbox replacing %s, naming node-b",
			r.GetCreated(), r.GetReplacedSandboxId(), r.GetReplacedReason(), id)
	}
	if n := k.podOf(t, ctx, r.GetSandbox().GetSandboxId()).Spec.NodeName; n != "node-a" {
		t.Errorf("the replacement runs on %q; want node-a, the one left", n)
	}
	mustOK(t, execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: r.GetSandbox().GetSandboxId(), Code: "1"}), "1")
}

// kubeScenarios are the scenarios both kinds of node run.
func kubeScenarios(t *testing.T, k *kubeEnv) {
	t.Run("TwoReplicasOneSandboxPerUser", func(t *testing.T) { kubeTwoReplicas(t, k) })
	t.Run("KillReplicaMidCommand", func(t *testing.T) { kubeKillReplica(t, k) })
	t.Run("DeadPods", func(t *testing.T) { kubeDeadPods(t, k) })
	t.Run("IdleTTLAcrossReplicaRestart", func(t *testing.T) { kubeIdleTTL(t, k) })
	t.Run("WarmPoolConcurrentClaims", func(t *testing.T) { kubeWarmPool(t, k) })
	t.Run("Files", func(t *testing.T) { kubeFiles(t, k) })
	t.Run("Health", func(t *testing.T) { kubeHealth(t, k) })
	t.Run("Directories", func(t *testing.T) { kubeDirectories(t, k) })
	t.Run("ListCommands", func(t *testing.T) { kubeListCommands(t, k) })
	// Standard input, a terminal with resize, ListCommands and their
	// errors, as under Docker (processes_test.go), through the io sidecar.
	t.Run("Processes", func(t *testing.T) { runProcesses(t, k.e2eEnv, k.replica(t, "procs-a")) })
	// Several interpreters in one sandbox, as under Docker
	// (contexts_test.go), through the io sidecar.
	t.Run("Contexts", func(t *testing.T) { runContexts(t, k.e2eEnv, k.replica(t, "ctx-a")) })
	t.Run("WatchDirectory", func(t *testing.T) { kubeWatch(t, k) })
	// Named snapshots and forks through two replicas sharing a snapshot
	// directory (kube_snapshots_test.go).
	t.Run("Snapshots", func(t *testing.T) { kubeSnapshots(t, k) })
	// JavaScript, R and bash kernels beside Python, as under Docker
	// (languages_test.go), the sandbox's processes listed through the
	// node's runtime.
	t.Run("Languages", func(t *testing.T) {
		languagesSuite(t, k.replica(t, "lang-a"), func(t *testing.T, ctx context.Context, sb string) string {
			t.Helper()
			out, err := k.nodes.procs(ctx, k.sandboxContainer(t, ctx, sb).id)
			if err != nil {
				t.Fatalf("the processes of sandbox %s: %v", sb, err)
			}
			return out
		})
	})
	if k.cluster != nil {
		// The kernel's OOM killer under a real node's memory limit
		// (kube_memory_test.go); the test kubelet's is Docker's.
		t.Run("OOMCommand", func(t *testing.T) { kubeOOMCommand(t, k) })
		// Per-sandbox metrics from the real kubelets (kube_metrics_test.go);
		// the test kubelet serves no Summary API.
		t.Run("SandboxMetrics", func(t *testing.T) { kubeSandboxMetrics(t, k) })
		// Hibernation on the cluster's local volumes (kube_hibernate_test.go);
		// the test kubelet mounts no claims.
		t.Run("Hibernation", func(t *testing.T) { kubeHibernation(t, k) })
		// Named volumes, a claim each (kube_volumes_test.go); the test
		// kubelet mounts no claims.
		t.Run("Volumes", func(t *testing.T) { kubeVolumes(t, k) })
		// Networked sandboxes through the nodes' egress CNI plugin and the
		// io sidecars' gateways (kube_network_test.go); the test kubelet
		// has no CNI.
		t.Run("Network", func(t *testing.T) { kubeNetwork(t, k) })
	}
	// The hostile-/io suite, as under Docker (hostile_test.go), with /io
	// read by the io sidecar (kube_hostile_test.go).
	t.Run("HostileIO", func(t *testing.T) {
		name := "kube"
		if k.cluster != nil {
			name = "kube, real nodes"
		}
		runHostileSuite(t, kubeHostile(k, name))
	})
	t.Run("Webhooks", func(t *testing.T) { kubeWebhooks(t, k) })
	// Tenants, as under Docker (tenant_e2e_test.go); the restart is
	// another replica.
	t.Run("Tenants", func(t *testing.T) {
		n := 0
		runTenants(t, k.e2eEnv, func(args ...string) *daemon {
			n++
			return k.replica(t, fmt.Sprintf("tenants-%d", n), args...)
		})
	})
	// The audit trail, as under Docker (audit_test.go): one replica's,
	// in a state directory of its own.
	t.Run("Audit", func(t *testing.T) {
		dir := t.TempDir()
		runAudit(t, k.e2eEnv, dir, func(args ...string) *daemon {
			return k.replica(t, "audit-a", append(args, "--state-dir", dir)...)
		})
	})
	// The official E2B SDKs against the E2B door (kube_e2b_test.go).
	t.Run("E2BSDK", func(t *testing.T) { kubeE2BSDK(t, k) })
	// The core acceptance scenarios, as under Docker (acceptance_test.go);
	// crash resume and idle expiry are the subtests above.
	t.Run("Acceptance", func(t *testing.T) {
		d := k.replica(t, "accept-a")
		t.Run("AliceBobIsolation", func(t *testing.T) { acceptAliceBob(t, d) })
		t.Run("Sandboxctl", func(t *testing.T) { acceptSandboxctl(t, k.e2eEnv, d) })
		t.Run("Files", func(t *testing.T) { acceptFiles(t, k.e2eEnv, d) })
	})
}

// Twenty users acquire through both replicas at once: exactly twenty Pods,
// one per user, both replicas answer with the same sandbox, and a user's
// globals are kept while calls alternate between the replicas. The twenty
// sandboxes and their globals survive a SIGKILL of both replicas. Tenants
// are isolated as under Docker.
func kubeTwoReplicas(t *testing.T, k *kubeEnv) {
	const users = 20
	ctx := e2eCtx(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(kubeTokA+" tenant-a user\n"+kubeTokB+" tenant-b user\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := k.replica(t, "replica-a", "--auth-tokens", tokens)
	b := k.replica(t, "replica-b", "--auth-tokens", tokens)
	ca, _ := a.client(t)
	cb, _ := b.client(t)
	actx := bearer(ctx, kubeTokA)

	start := time.Now()
	ids := make([][2]string, users)
	var wg sync.WaitGroup
	errs := make(chan error, 2*users)
	for i := range users {
		for j, c := range []sandboxv1.SandboxServiceClient{ca, cb} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := c.AcquireSandbox(actx, &sandboxv1.AcquireSandboxRequest{UserId: fmt.Sprintf("user-%02d", i)})
				if err != nil {
					errs <- fmt.Errorf("AcquireSandbox(user-%02d) through replica %d: %v", i, j, err)
					return
				}
				ids[i][j] = r.GetSandbox().GetSandboxId()
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d users acquired through two replicas at once in %v", users, time.Since(start).Round(time.Millisecond))
	seen := map[string]bool{}
	for i, pair := range ids {
		if pair[0] != pair[1] {
			t.Errorf("user-%02d got sandbox %s from one replica and %s from the other", i, pair[0], pair[1])
		}
		if seen[pair[0]] {
			t.Errorf("sandbox %s given to two users", pair[0])
		}
		seen[pair[0]] = true
	}
	// The losers' Pods are deleted as soon as they lose: wait for that.
	var pods []corev1.Pod
	if !pollUntil(time.Minute, func() bool { pods = k.sandboxPods(t, ctx); return len(pods) == users }) {
		t.Fatalf("%d sandbox pods (not being deleted) after %d users acquired; want exactly %d", len(pods), users, users)
	}
	for _, p := range pods {
		if !seen[p.Labels["sandboxd.io/sandbox-id"]] {
			t.Errorf("pod %s belongs to no user's sandbox", p.Name)
		}
	}

	// Globals across replicas: each call goes to the other replica.
	id := ids[0][0]
	for i, c := range []sandboxv1.SandboxServiceClient{ca, cb, ca, cb} {
		code := "n = 0"
		if i > 0 {
			code = "n += 1\nn"
		}
		o := execute(t, actx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: code})
		if i > 0 && (len(o.results) != 1 || o.results[0]["text/plain"] != fmt.Sprint(i)) {
			t.Errorf("call %d (replica %d): results %v, errors %v; want n = %d (globals lost between replicas?)", i, i%2, o.results, o.errs, i)
		}
	}

	// Twenty sandboxes and their globals survive both replicas' SIGKILL:
	// a new replica serves them from the API server's records.
	var wg2 sync.WaitGroup
	for i := range users {
		wg2.Add(1)
		go func() {
			defer wg2.Done()
			o := execute(t, actx, []sandboxv1.SandboxServiceClient{ca, cb}[i%2], &sandboxv1.ExecuteRequest{SandboxId: ids[i][0], Code: fmt.Sprintf("v = %d", i)})
			if o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_OK {
				t.Errorf("v = %d in user-%02d's sandbox: %v", i, i, o.done)
			}
		}()
	}
	wg2.Wait()
	a.kill9(t)
	b.kill9(t)
	c3 := k.replica(t, "replica-c", "--auth-tokens", tokens)
	cc, _ := c3.client(t)
	for i := range users {
		r, err := cc.AcquireSandbox(actx, &sandboxv1.AcquireSandboxRequest{UserId: fmt.Sprintf("user-%02d", i)})
		if err != nil || r.GetSandbox().GetSandboxId() != ids[i][0] || r.GetCreated() {
			t.Errorf("after both replicas were killed, AcquireSandbox(user-%02d) = %v, created %v, %v; want the same sandbox %s", i, r.GetSandbox().GetSandboxId(), r.GetCreated(), err, ids[i][0])
			continue
		}
		if o := execute(t, actx, cc, &sandboxv1.ExecuteRequest{SandboxId: ids[i][0], Code: "v"}); len(o.results) != 1 || o.results[0]["text/plain"] != fmt.Sprint(i) {
			t.Errorf("v in user-%02d's sandbox after the replicas' restart: %v %v; want %d", i, o.results, o.errs, i)
		}
	}
	ca, cb = cc, cc

	// Tenants: tenant-b neither sees nor reaches tenant-a's sandbox.
	bctx := bearer(ctx, kubeTokB)
	if _, err := cb.GetSandbox(bctx, &sandboxv1.GetSandboxRequest{SandboxId: id}); status.Code(err) != codes.NotFound {
		t.Errorf("tenant-b GetSandbox(tenant-a's sandbox): %v; want NotFound", err)
	}
	if s, err := cb.Execute(bctx, &sandboxv1.ExecuteRequest{SandboxId: id, Code: "n"}); err == nil {
		if _, err = s.Recv(); status.Code(err) != codes.NotFound {
			t.Errorf("tenant-b Execute in tenant-a's sandbox: %v; want NotFound", err)
		}
	}
	list, err := cb.ListSandboxes(bctx, &sandboxv1.ListSandboxesRequest{})
	if err != nil || len(list.GetSandboxes()) != 0 {
		t.Errorf("tenant-b ListSandboxes: %d sandboxes, %v; want none", len(list.GetSandboxes()), err)
	}
	rb, err := cb.AcquireSandbox(bctx, &sandboxv1.AcquireSandboxRequest{UserId: "user-00"})
	if err != nil || rb.GetSandbox().GetSandboxId() == id {
		t.Errorf("tenant-b's user-00 got %v (%v); want a sandbox of its own, not tenant-a's %s", rb.GetSandbox().GetSandboxId(), err, id)
	}
	for i := range ids {
		ca.DeleteSandbox(actx, &sandboxv1.DeleteSandboxRequest{SandboxId: ids[i][0]})
	}
	if rb != nil {
		cb.DeleteSandbox(bctx, &sandboxv1.DeleteSandboxRequest{SandboxId: rb.GetSandbox().GetSandboxId()})
	}
}

// A replica killed with SIGKILL mid-command loses nothing: the client
// resumes through the other replica by command ID, and nothing runs twice.
func kubeKillReplica(t *testing.T, k *kubeEnv) {
	ctx := e2eCtx(t)
	a := k.replica(t, "kill-a")
	b := k.replica(t, "kill-b")
	ca, _ := a.client(t)
	cb, _ := b.client(t)
	id := acquire(t, ctx, ca, "kill-user").GetSandbox().GetSandboxId()
	defer deleteQuietly(cb, id)

	req := &sandboxv1.ExecuteRequest{SandboxId: id, CommandId: "slow-k", Code: slowCode}
	s, err := ca.Execute(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var seen []*sandboxv1.ExecuteEvent
	for !slices.ContainsFunc(seen, func(e *sandboxv1.ExecuteEvent) bool { return e.GetStdout() != nil }) {
		ev, err := s.Recv()
		if err != nil {
			t.Fatalf("Execute ended before its first stdout event: %v", err)
		}
		seen = append(seen, ev)
	}
	a.kill9(t)
	for {
		ev, err := s.Recv()
		if err != nil {
			break
		}
		seen = append(seen, ev)
	}
	if seen[len(seen)-1].GetDone() != nil {
		t.Fatal("the command finished before the replica was killed")
	}
	last := seen[len(seen)-1].GetSeq()
	rest := streamEvents(t, ctx, cb, id, "slow-k", last)
	checkSeqs(t, "resumed through the other replica", rest, last+1, true)
	if got := stdoutOf(seen) + stdoutOf(rest); got != slowTicks {
		t.Errorf("stdout before the kill + resumed = %q; want each tick once: %q", got, slowTicks)
	}
	// Retrying the command through the survivor replays it.
	replay := runEvents(t, ctx, cb, req)
	if stdoutOf(replay) != slowTicks {
		t.Errorf("retried Execute stdout %q; want the original %q", stdoutOf(replay), slowTicks)
	}
	if o := execute(t, ctx, cb, &sandboxv1.ExecuteRequest{SandboxId: id, Code: "counter, open('counter.txt').read()"}); len(o.results) != 1 || o.results[0]["text/plain"] != "(1, '1')" {
		t.Errorf("run counters after the kill and the retry: %v %v; want (1, '1'): the command ran twice?", o.results, o.errs)
	}
}

// A Pod deleted behind sandboxd's back, one evicted and one whose sandbox
// container was OOM-killed make their sandboxes DEAD with the reason, and
// the user's next acquire names the replaced sandbox. On the test kubelet
// the eviction and the OOM kill are its hooks; on a real node the kubelet
// evicts for disk (an emptyDir past its sizeLimit) and for memory pressure,
// and the kernel OOM-kills the container.
func kubeDeadPods(t *testing.T, k *kubeEnv) {
	ctx := e2eCtx(t)
	d := k.replica(t, "dead-a")
	c, _ := d.client(t)
	type death struct {
		user, reason string
		limits       *sandboxv1.ResourceLimits
		kill         func(t *testing.T, id string, p *corev1.Pod)
	}
	deaths := []death{{"deleted-user", "deleted outside sandboxd", nil, func(t *testing.T, _ string, p *corev1.Pod) {
		if err := k.cs.CoreV1().Pods(kubeNamespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}}}
	if kl := k.kubeletForFaults; kl != nil {
		deaths = append(deaths, death{"evicted-user", "evicted: The node was low on resource: ephemeral-storage.", nil, func(t *testing.T, _ string, p *corev1.Pod) {
			if err := kl.Evict(kubeNamespace, p.Name, "The node was low on resource: ephemeral-storage."); err != nil {
				t.Fatal(err)
			}
		}}, death{"oom-user", "OOM-killed", nil, func(t *testing.T, _ string, p *corev1.Pod) {
			if err := kl.KillContainer(kubeNamespace, p.Name, "sandbox", true); err != nil {
				t.Fatal(err)
			}
		}})
	} else {
		// A real kubelet evicts a Pod whose emptyDir outgrows its
		// sizeLimit: the sandbox writes past its disk limit. The kubelet
		// (1.37) reports the Pod either Failed with reason Evicted and its
		// message, or, when its containers exit 0 on SIGTERM before the
		// status is written (the kubelet's race), Succeeded without a
		// reason, the message then only in the Pod's Evicted event, which
		// the leader reads: either way the reason is the kubelet's.
		deaths = append(deaths, death{"evicted-user", "its pod was evicted: Usage of EmptyDir volume", &sandboxv1.ResourceLimits{DiskBytes: 64 << 20},
			func(t *testing.T, id string, _ *corev1.Pod) {
				o := execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: "with open('big', 'wb') as f:\n    for _ in range(96):\n        f.write(b'x' * 2**20)"})
				if o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_OK {
					t.Logf("writing 96 MiB: %v %v", o.done, o.errs)
				}
			}},
			// The kernel OOM-kills the sandbox container's first process,
			// the driver; containerd reports the container OOMKilled
			// (kube_memory_test.go).
			death{"oom-user", "OOM-killed", &sandboxv1.ResourceLimits{MemoryBytes: oomLimit},
				func(t *testing.T, id string, _ *corev1.Pod) { oomKillSandboxContainer(t, ctx, c, id) }},
			// The kubelet evicts under memory pressure: its node's
			// threshold moved to just below what the machine has, the
			// sandbox allocates past it (kube_memory_test.go).
			death{"pressure-user", "its pod was evicted: The node was low on resource: memory", &sandboxv1.ResourceLimits{MemoryBytes: pressureLimit},
				func(t *testing.T, id string, p *corev1.Pod) { pressNode(t, ctx, k, c, id, p) }})
	}
	for _, tc := range deaths {
		t.Run(tc.user, func(t *testing.T) {
			r0, err := c.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: tc.user, Options: &sandboxv1.SandboxOptions{Limits: tc.limits}})
			if err != nil {
				t.Fatalf("AcquireSandbox(%s): %v", tc.user, err)
			}
			id := r0.GetSandbox().GetSandboxId()
			mustOK(t, execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: "x = 1"}), "x = 1")
			tc.kill(t, id, k.podOf(t, ctx, id))
			// The reason may grow more precise for a moment after the
			// sandbox is first DEAD: the leader reads a stopped Pod's
			// Evicted event.
			var sb *sandboxv1.Sandbox
			pollUntil(time.Minute, func() bool {
				r, err := c.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: id})
				sb = r.GetSandbox()
				return err == nil && sb.GetState() == sandboxv1.SandboxState_SANDBOX_STATE_DEAD && strings.Contains(sb.GetStateReason(), tc.reason)
			})
			if sb.GetState() != sandboxv1.SandboxState_SANDBOX_STATE_DEAD {
				t.Fatalf("sandbox %s is %v a minute after its pod was killed; want DEAD", id, sb.GetState())
			}
			t.Logf("DEAD: %s", sb.GetStateReason())
			if !strings.Contains(sb.GetStateReason(), tc.reason) {
				p, _ := k.cs.CoreV1().Pods(kubeNamespace).Get(ctx, "sbx-"+strings.TrimPrefix(id, "sb-"), metav1.GetOptions{})
				t.Errorf("dead sandbox's reason %q does not say %q (its pod's status now: %+v)", sb.GetStateReason(), tc.reason, p.Status)
			}
			r := acquire(t, ctx, c, tc.user)
			if !r.GetCreated() || !r.GetStateLost() || r.GetReplacedSandboxId() != id || !strings.Contains(r.GetReplacedReason(), tc.reason) {
				t.Errorf("acquire after the death: created %v, state_lost %v, replaced %q (%q); want a new sandbox replacing %s, saying %q",
					r.GetCreated(), r.GetStateLost(), r.GetReplacedSandboxId(), r.GetReplacedReason(), id, tc.reason)
			}
			o := execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: r.GetSandbox().GetSandboxId(), Code: "x"})
			if len(o.errs) != 1 || o.errs[0].GetEname() != "NameError" {
				t.Errorf("x in the new sandbox: %v %v; want NameError (a fresh interpreter)", o.results, o.errs)
			}
			deleteQuietly(c, r.GetSandbox().GetSandboxId())
		})
	}
}

// The idle TTL is kept on the Pod: it expires the sandbox although the
// replica that served it was restarted, not before, and soon after.
func kubeIdleTTL(t *testing.T, k *kubeEnv) {
	const ttl = 4 * time.Second
	ctx := e2eCtx(t)
	a := k.replica(t, "ttl-a", "--idle-ttl", ttl.String())
	c, _ := a.client(t)
	r := acquire(t, ctx, c, "ttl-user")
	id := r.GetSandbox().GetSandboxId()
	// The last use is taken when the command is submitted. The replica
	// writes activity to the Pod throttled (at most every fifth of the
	// TTL, flushed every 100 ms), so a SIGKILL loses what it had not
	// written yet, by design: the kill comes once the Pod shows a last
	// activity at or after the command's submission, and what is tested
	// is that this recorded activity outlives the replica.
	lastUse := time.Now()
	mustOK(t, execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: "1"}), "1")
	if !pollUntil(10*time.Second, func() bool {
		p, err := k.cs.CoreV1().Pods(kubeNamespace).Get(ctx, "sbx-"+strings.TrimPrefix(id, "sb-"), metav1.GetOptions{})
		if err != nil {
			return false
		}
		at, err := time.Parse(time.RFC3339Nano, p.Annotations["sandboxd.io/last-active"])
		return err == nil && !at.Before(lastUse.Truncate(time.Millisecond))
	}) {
		t.Fatalf("the replica did not write the command's activity to the Pod within 10 s")
	}
	a.kill9(t)
	b := k.replica(t, "ttl-b", "--idle-ttl", ttl.String())
	cb, _ := b.client(t)
	g, err := cb.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: id})
	if err != nil {
		t.Fatalf("the restarted replica does not know sandbox %s: %v", id, err)
	}
	t.Logf("expires_at per the new replica: %v after the last use", g.GetSandbox().GetExpiresAt().AsTime().Sub(lastUse).Round(time.Millisecond))
	var goneAt time.Time
	if !pollUntil(time.Minute, func() bool {
		_, err := cb.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: id})
		goneAt = time.Now()
		return status.Code(err) == codes.NotFound
	}) {
		t.Fatalf("sandbox %s still exists a minute after its idle TTL of %v", id, ttl)
	}
	if idle := goneAt.Sub(lastUse); idle < ttl {
		t.Errorf("sandbox expired after %v idle; its TTL is %v", idle, ttl)
	} else {
		t.Logf("sandbox expired %v after its last use (idle TTL %v)", idle.Round(time.Millisecond), ttl)
	}
	if !pollUntil(time.Minute, func() bool {
		_, err := k.cs.CoreV1().Pods(kubeNamespace).Get(ctx, "sbx-"+strings.TrimPrefix(id, "sb-"), metav1.GetOptions{})
		return err != nil
	}) {
		t.Errorf("the expired sandbox's pod still exists")
	}
}

// The warm pool, claimed from both replicas at once: no Pod is given to two
// users, and the leader refills the pool.
func kubeWarmPool(t *testing.T, k *kubeEnv) {
	const pool, users = 3, 6
	ctx := e2eCtx(t)
	a := k.replica(t, "pool-a", "--warm-pool", fmt.Sprint(pool))
	b := k.replica(t, "pool-b", "--warm-pool", fmt.Sprint(pool))
	ca, _ := a.client(t)
	cb, _ := b.client(t)
	readyPool := func() []corev1.Pod {
		list, err := k.cs.CoreV1().Pods(kubeNamespace).List(ctx, metav1.ListOptions{LabelSelector: "sandboxd.io/pool=true"})
		if err != nil {
			t.Fatal(err)
		}
		var ready []corev1.Pod
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && podReady(&p) {
				ready = append(ready, p)
			}
		}
		return ready
	}
	var before []corev1.Pod
	if !pollUntil(2*time.Minute, func() bool { before = readyPool(); return len(before) == pool }) {
		t.Fatalf("%d ready warm-pool pods; want %d", len(before), pool)
	}
	poolIDs := map[string]bool{}
	for _, p := range before {
		poolIDs[p.Labels["sandboxd.io/sandbox-id"]] = true
	}
	got := make([]string, users)
	var wg sync.WaitGroup
	for i := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := []sandboxv1.SandboxServiceClient{ca, cb}[i%2]
			r, err := c.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: fmt.Sprintf("pool-user-%d", i)})
			if err != nil {
				t.Errorf("AcquireSandbox(pool-user-%d): %v", i, err)
				return
			}
			got[i] = r.GetSandbox().GetSandboxId()
		}()
	}
	wg.Wait()
	claimed := 0
	seen := map[string]bool{}
	for i, id := range got {
		if seen[id] {
			t.Errorf("sandbox %s given to two users (pool-user-%d among them)", id, i)
		}
		seen[id] = true
		if poolIDs[id] {
			claimed++
		}
	}
	if claimed != pool {
		t.Errorf("%d of %d users got a warm-pool sandbox; want %d (the whole pool, each once)", claimed, users, pool)
	}
	var after []corev1.Pod
	if !pollUntil(2*time.Minute, func() bool { after = readyPool(); return len(after) == pool }) {
		t.Errorf("the pool holds %d ready pods after the claims; want it refilled to %d", len(after), pool)
	}
	for _, p := range after {
		if poolIDs[p.Labels["sandboxd.io/sandbox-id"]] {
			t.Errorf("pod %s is in the pool again after it was claimed", p.Name)
		}
	}
	for _, id := range got {
		deleteQuietly(ca, id)
	}
}

// Files go through the io sidecar: upload, list, download, and paths that
// leave /workspace are refused.
func kubeFiles(t *testing.T, k *kubeEnv) {
	ctx := e2eCtx(t)
	d := k.replica(t, "files-a")
	c, _ := d.client(t)
	id := acquire(t, ctx, c, "files-user").GetSandbox().GetSandboxId()
	defer deleteQuietly(c, id)
	data := []byte(strings.Repeat("sandboxd on kubernetes\n", 100000)) // 2.3 MB: several chunks
	if _, err := upload(ctx, c, id, "data/in.txt", data); err != nil {
		t.Fatalf("upload: %v", err)
	}
	o := execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: "import os\nos.path.getsize('data/in.txt')"})
	if len(o.results) != 1 || o.results[0]["text/plain"] != fmt.Sprint(len(data)) {
		t.Errorf("the sandbox sees %v (%v); want the uploaded %d bytes", o.results, o.errs, len(data))
	}
	mustOK(t, execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: "open('data/out.txt','w').write('made inside')"}), "write out.txt")
	if got := string(download(t, ctx, c, id, "data/out.txt")); got != "made inside" {
		t.Errorf("download out.txt = %q", got)
	}
	if got := listPaths(t, ctx, c, id, "data"); !slices.Equal(got, []string{"data/in.txt", "data/out.txt"}) && !slices.Equal(got, []string{"/workspace/data/in.txt", "/workspace/data/out.txt"}) {
		t.Errorf("ListFiles(data) = %v", got)
	}
	if _, err := tryDownload(ctx, c, id, "../etc/passwd"); status.Code(err) != codes.InvalidArgument && status.Code(err) != codes.NotFound {
		t.Errorf("download ../etc/passwd: %v; want InvalidArgument", err)
	}
}

// A sandbox's health, read through its io sidecar: the driver's io_full
// with a reason (planted from inside the sandbox, as hostile_test.go
// plants its files) shows in GetSandbox and ListSandboxes, and goes once
// the driver says ok again, each within a bounded wait (a replica keeps
// a read for a few seconds); then hostile_test.go's hostile driver.json
// files, each answered promptly with a bounded reason and nothing of the
// host.
func kubeHealth(t *testing.T, k *kubeEnv) {
	ctx := e2eCtx(t)
	d := k.replica(t, "health-a")
	c, _ := d.client(t)
	id := acquire(t, ctx, c, "health-user").GetSandbox().GetSandboxId()
	defer deleteQuietly(c, id)
	plant := func(what, code string) {
		t.Helper()
		mustOK(t, execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Language: "python", Code: forgeDriverStatus(code)}), what)
	}
	// reasons are Get's and List's health_reason of the sandbox.
	reasons := func() (get, list string) {
		t.Helper()
		g, err := c.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: id})
		if err != nil {
			t.Fatalf("GetSandbox: %v", err)
		}
		l, err := c.ListSandboxes(ctx, &sandboxv1.ListSandboxesRequest{})
		if err != nil {
			t.Fatalf("ListSandboxes: %v", err)
		}
		list = "(not listed)"
		for _, s := range l.GetSandboxes() {
			if s.GetSandboxId() == id {
				list = s.GetHealthReason()
			}
		}
		return g.GetSandbox().GetHealthReason(), list
	}
	const within = 20 * time.Second // a kept read (5 s), and the replica's wait for the next
	if g, l := reasons(); g != "" || l != "" {
		t.Errorf("a new sandbox: health_reason %q (Get), %q (List); want none", g, l)
	}
	const reason = "/io is full: planted by the e2e test, 0 bytes free"
	plant("io_full", `st["health"] = "io_full"; st["health_reason"] = "`+reason+`"; put(json.dumps(st).encode())`)
	var g, l string
	if !pollUntil(within, func() bool { g, l = reasons(); return g == reason && l == reason }) {
		t.Errorf("driver.json says io_full: health_reason %q (Get), %q (List) after %v; want %q", g, l, within, reason)
	}
	if s, err := c.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: id}); err != nil || s.GetSandbox().GetState() != sandboxv1.SandboxState_SANDBOX_STATE_RUNNING {
		t.Errorf("an unhealthy sandbox: %v, %v; want it running", s.GetSandbox().GetState(), err)
	}
	if a := acquire(t, ctx, c, "health-user"); a.GetSandbox().GetSandboxId() != id || a.GetSandbox().GetHealthReason() != reason {
		t.Errorf("AcquireSandbox of the unhealthy sandbox: %s with health_reason %q; want %s with %q", a.GetSandbox().GetSandboxId(), a.GetSandbox().GetHealthReason(), id, reason)
	}
	plant("ok", `st["health"] = "ok"; st.pop("health_reason", None); put(json.dumps(st).encode())`)
	if !pollUntil(within, func() bool { g, l = reasons(); return g == "" && l == "" }) {
		t.Errorf("driver.json says ok again: health_reason %q (Get), %q (List) after %v; want none", g, l, within)
	}
	// Each hostile file is read (the replica's kept read has gone stale):
	// the read's outcome shows as a new reason, or as the replica logging
	// that the sidecar refused the file; every answer meanwhile is checked.
	refused := func() int {
		n := 0
		for _, line := range strings.Split(d.logs.String(), "\n") {
			if strings.Contains(line, "ignoring the sandbox's driver status") && strings.Contains(line, id) {
				n++
			}
		}
		return n
	}
	for _, st := range hostileDriverStatuses() {
		prev, logged := g, refused()
		plant(st.what, st.code)
		var took time.Duration
		var r string
		if !pollUntil(within, func() bool {
			took, r, _, _ = checkDriverStatusAnswers(t, ctx, c, id, st.what)
			return r != prev || refused() > logged
		}) {
			t.Errorf("driver.json as %s: no read of it within %v (health_reason %q, no refusal logged)", st.what, within, r)
		}
		if !utf8.ValidString(r) {
			t.Errorf("driver.json as %s: health_reason is not UTF-8: %q", st.what, truncateText(r, 200))
		}
		t.Logf("driver.json as %s: read; answered in %s, reason of %d bytes, refusals logged %d", st.what, fmtMS(took), len(r), refused()-logged)
		g = r
	}
}

// ListCommands through the io sidecar, as under Docker: five commands
// listed newest first with their phases (finished, one running until a
// file it waits for is uploaded, one queued behind it), paged two at a
// time alternating between two replicas (a page token is a position in
// the sidecar's log, good on any replica), Total counting all, and the
// request's bounds refused with the Docker backend's words.
func kubeListCommands(t *testing.T, k *kubeEnv) {
	ctx := e2eCtx(t)
	a, b := k.replica(t, "list-a"), k.replica(t, "list-b")
	ca, _ := a.client(t)
	cb, _ := b.client(t)
	id := acquire(t, ctx, ca, "list-user").GetSandbox().GetSandboxId()
	defer deleteQuietly(ca, id)
	for i := range 3 {
		mustOK(t, execute(t, ctx, cb, &sandboxv1.ExecuteRequest{SandboxId: id, CommandId: fmt.Sprint("done-", i), Code: fmt.Sprint(i)}), "done-"+fmt.Sprint(i))
	}
	gc, err := client.Dial(a.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	block, err := gc.Start(ctx, client.Command{SandboxID: id, ID: "block", Language: "bash", Code: "until [ -e /workspace/go ]; do sleep 0.05; done; echo released"})
	if err != nil {
		t.Fatal(err)
	}
	queued, err := gc.Start(ctx, client.Command{SandboxID: id, ID: "queued", Language: "bash", Code: "echo after"})
	if err != nil {
		t.Fatal(err)
	}
	r := awaitListing(t, ctx, cb, id, "block running", func(cmds []*sandboxv1.CommandInfo) bool {
		return len(cmds) == 5 && cmds[1].GetState() == sandboxv1.CommandState_COMMAND_STATE_RUNNING
	})
	if r.GetTotalCommands() != 5 || r.GetNextPageToken() != "" {
		t.Errorf("one page of all: total %d, next %q; want 5, none", r.GetTotalCommands(), r.GetNextPageToken())
	}
	fin := sandboxv1.CommandState_COMMAND_STATE_FINISHED
	for i, want := range []struct {
		id    string
		lang  string
		state sandboxv1.CommandState
	}{
		{"queued", "bash", sandboxv1.CommandState_COMMAND_STATE_QUEUED},
		{"block", "bash", sandboxv1.CommandState_COMMAND_STATE_RUNNING},
		{"done-2", "python", fin}, {"done-1", "python", fin}, {"done-0", "python", fin},
	} {
		g := r.GetCommands()[i]
		finished := want.state == fin
		if g.GetCommandId() != want.id || g.GetLanguage() != want.lang || g.GetState() != want.state ||
			(g.GetStartedAt() != nil) != (want.state != sandboxv1.CommandState_COMMAND_STATE_QUEUED) ||
			(g.GetStatus() == sandboxv1.CommandStatus_COMMAND_STATUS_OK) != finished || (g.ExitCode != nil) || (g.GetFinishedAt() != nil) != finished ||
			g.GetOutputAvailable() != (want.state != sandboxv1.CommandState_COMMAND_STATE_QUEUED) || g.GetStdin() || g.GetPty() {
			t.Errorf("command %d: %v; want %+v", i, g, want)
		}
	}
	clients := []sandboxv1.SandboxServiceClient{ca, cb}
	if got := strings.Join(listPages(t, ctx, 2, clients, id), ","); got != "queued,block,done-2,done-1,done-0" {
		t.Errorf("pages of 2 across both replicas gave %s", got)
	}
	p1, err := cb.ListCommands(ctx, &sandboxv1.ListCommandsRequest{SandboxId: id, PageSize: 2})
	if err != nil || p1.GetNextPageToken() == "" || p1.GetTotalCommands() != 5 {
		t.Fatalf("first page of 2: %v, %v; want a next page and a total of 5", p1, err)
	}
	_, err = ca.ListCommands(ctx, &sandboxv1.ListCommandsRequest{SandboxId: id, PageSize: 201})
	wantRPCError(t, "ListCommands page_size 201", err, codes.InvalidArgument, "page_size 201 is outside 0-200")
	_, err = ca.ListCommands(ctx, &sandboxv1.ListCommandsRequest{SandboxId: id, PageToken: "forged"})
	wantRPCError(t, "ListCommands with a forged token", err, codes.InvalidArgument, "page_token")

	// Released, both finish, and the listing says so.
	if _, err := upload(ctx, ca, id, "go", nil); err != nil {
		t.Fatalf("upload go: %v", err)
	}
	if o := startWait(block).result(t, ctx); o.Stdout != "released\n" {
		t.Errorf("block printed %q", o.Stdout)
	}
	if o := startWait(queued).result(t, ctx); o.Stdout != "after\n" {
		t.Errorf("queued printed %q", o.Stdout)
	}
	awaitListing(t, ctx, ca, id, "every command finished", func(cmds []*sandboxv1.CommandInfo) bool {
		for _, c := range cmds {
			if c.GetState() != fin {
				return false
			}
		}
		return len(cmds) == 5
	})
}

// The directory calls go through the io sidecar as the Docker backend
// runs them on the host: mkdir -p, a rename and a recursive removal, seen
// by ListFiles and by a command in the sandbox, each error in its class,
// and a link the sandbox plants out of /workspace never followed.
func kubeDirectories(t *testing.T, k *kubeEnv) {
	ctx := e2eCtx(t)
	d := k.replica(t, "dirs-a")
	c, _ := d.client(t)
	id := acquire(t, ctx, c, "dirs-user").GetSandbox().GetSandboxId()
	defer deleteQuietly(c, id)
	wantCode := func(what string, err error, code codes.Code) {
		t.Helper()
		if status.Code(err) != code {
			t.Errorf("%s: %v; want %v", what, err, code)
		}
	}
	bash := func(code string) string {
		t.Helper()
		o := execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Language: "bash", Code: code})
		mustOK(t, o, code)
		return o.stdout
	}
	trim := func(p string) string { return strings.TrimPrefix(p, "/workspace/") }

	mk, err := c.MakeDirectory(ctx, &sandboxv1.MakeDirectoryRequest{SandboxId: id, Path: "a/b/c", Parents: true})
	if err != nil {
		t.Fatalf("mkdir -p a/b/c: %v", err)
	}
	if trim(mk.GetFile().GetPath()) != "a/b/c" || !mk.GetFile().GetIsDir() {
		t.Errorf("mkdir -p a/b/c = %v", mk.GetFile())
	}
	if _, err := c.MakeDirectory(ctx, &sandboxv1.MakeDirectoryRequest{SandboxId: id, Path: "a/b", Parents: true}); err != nil {
		t.Errorf("mkdir -p of an existing directory: %v", err)
	}
	_, err = c.MakeDirectory(ctx, &sandboxv1.MakeDirectoryRequest{SandboxId: id, Path: "a/b"})
	wantCode("mkdir of an existing directory", err, codes.AlreadyExists)
	_, err = c.MakeDirectory(ctx, &sandboxv1.MakeDirectoryRequest{SandboxId: id, Path: "x/y"})
	wantCode("mkdir without its parent", err, codes.NotFound)
	if _, err := upload(ctx, c, id, "a/b/c/f.txt", []byte("hello")); err != nil {
		t.Fatalf("upload: %v", err)
	}

	rn, err := c.Rename(ctx, &sandboxv1.RenameRequest{SandboxId: id, From: "a", To: "/workspace/moved"})
	if err != nil {
		t.Fatalf("rename a moved: %v", err)
	}
	if trim(rn.GetFile().GetPath()) != "moved" || !rn.GetFile().GetIsDir() {
		t.Errorf("rename a moved = %v", rn.GetFile())
	}
	var top []string
	for _, p := range listPaths(t, ctx, c, id, "") {
		top = append(top, trim(p))
	}
	if !slices.Contains(top, "moved/") || slices.Contains(top, "a/") {
		t.Errorf("ListFiles(/workspace) after the rename = %v; want moved/ and no a/", top)
	}
	if got := listPaths(t, ctx, c, id, "moved/b/c"); len(got) != 1 || trim(got[0]) != "moved/b/c/f.txt" {
		t.Errorf("ListFiles(moved/b/c) = %v; want moved/b/c/f.txt", got)
	}
	// A deep listing goes through the sidecar too (depth 3 from moved).
	deep, err := c.ListFiles(ctx, &sandboxv1.ListFilesRequest{SandboxId: id, Path: "moved", Depth: 3})
	if err != nil {
		t.Fatalf("ListFiles(moved, depth 3): %v", err)
	}
	var deepPaths []string
	for _, f := range deep.GetFiles() {
		deepPaths = append(deepPaths, trim(f.GetPath()))
	}
	for _, want := range []string{"moved/b", "moved/b/c", "moved/b/c/f.txt"} {
		if !slices.Contains(deepPaths, want) {
			t.Errorf("ListFiles(moved, depth 3) = %v; want %s among them", deepPaths, want)
		}
	}
	if got := bash("stat -c '%u:%g %F' moved moved/b/c; cat moved/b/c/f.txt; echo; test -e a || echo a-gone"); got != "1000:1000 directory\n1000:1000 directory\nhello\na-gone\n" {
		t.Errorf("the sandbox sees %q; want the moved tree, owned by its user", got)
	}
	if _, err := c.MakeDirectory(ctx, &sandboxv1.MakeDirectoryRequest{SandboxId: id, Path: "other"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Rename(ctx, &sandboxv1.RenameRequest{SandboxId: id, From: "moved", To: "other"})
	wantCode("rename onto an existing directory", err, codes.AlreadyExists)
	_, err = c.Rename(ctx, &sandboxv1.RenameRequest{SandboxId: id, From: "moved", To: "other", Overwrite: true})
	if err != nil {
		t.Fatalf("rename moved onto the empty other: %v", err)
	}
	_, err = c.Rename(ctx, &sandboxv1.RenameRequest{SandboxId: id, From: "moved", To: "x"})
	wantCode("rename of a moved directory", err, codes.NotFound)

	_, err = c.Remove(ctx, &sandboxv1.RemoveRequest{SandboxId: id, Path: "other"})
	wantCode("remove of a non-empty directory", err, codes.FailedPrecondition)
	if _, err := c.Remove(ctx, &sandboxv1.RemoveRequest{SandboxId: id, Path: "other", Recursive: true}); err != nil {
		t.Fatalf("remove -r other: %v", err)
	}
	for _, p := range listPaths(t, ctx, c, id, "") {
		if strings.Contains(p, "other") || strings.Contains(p, "moved") {
			t.Errorf("ListFiles(/workspace) after remove -r lists %s", p)
		}
	}
	if got := bash("test -e other || echo other-gone"); got != "other-gone\n" {
		t.Errorf("the sandbox sees %q after remove -r; want other gone", got)
	}
	_, err = c.Remove(ctx, &sandboxv1.RemoveRequest{SandboxId: id, Path: "other", Recursive: true})
	wantCode("remove of a removed directory", err, codes.NotFound)
	_, err = c.Remove(ctx, &sandboxv1.RemoveRequest{SandboxId: id, Path: "/workspace", Recursive: true})
	wantCode("remove of /workspace", err, codes.InvalidArgument)
	_, err = c.Remove(ctx, &sandboxv1.RemoveRequest{SandboxId: id, Path: "../etc", Recursive: true})
	wantCode("remove of ../etc", err, codes.InvalidArgument)

	// A link the sandbox plants to /etc (the sidecar's, in its own
	// container): never followed; removing it removes the link.
	bash("ln -s /etc etc")
	_, err = c.MakeDirectory(ctx, &sandboxv1.MakeDirectoryRequest{SandboxId: id, Path: "etc/evil", Parents: true})
	wantCode("mkdir -p through a link to /etc", err, codes.InvalidArgument)
	_, err = c.Rename(ctx, &sandboxv1.RenameRequest{SandboxId: id, From: "etc/hostname", To: "stolen"})
	wantCode("rename out of a link to /etc", err, codes.InvalidArgument)
	_, err = c.Remove(ctx, &sandboxv1.RemoveRequest{SandboxId: id, Path: "etc/hostname"})
	wantCode("remove through a link to /etc", err, codes.InvalidArgument)
	if _, err := c.Remove(ctx, &sandboxv1.RemoveRequest{SandboxId: id, Path: "etc", Recursive: true}); err != nil {
		t.Fatalf("remove -r of the link: %v", err)
	}
	if got := bash("test -L etc || test -e etc || echo link-gone; test -e stolen || echo nothing-stolen"); got != "link-gone\nnothing-stolen\n" {
		t.Errorf("the sandbox sees %q; want the link removed and nothing moved", got)
	}
}

// podReady reports a Pod's Ready condition.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Lifecycle webhooks under Kubernetes: the replica that serves the calls
// publishes created, command.finished and killed; the leader publishes the
// death of a Pod deleted behind sandboxd's back and the expiry of an idle
// sandbox. Every request verifies (the receiver checks each signature),
// each sandbox's events arrive in order, once.
func kubeWebhooks(t *testing.T, k *kubeEnv) {
	ctx := e2eCtx(t)
	hook := newHookReceiver(t, "kube")
	d := k.replica(t, "hooks-a", "--webhooks", writeHooksFile(t, hook.endpoint(nil, hookAllEvents)))
	c, _ := d.client(t)

	used := acquire(t, ctx, c, "hook-used").GetSandbox().GetSandboxId()
	mustOK(t, execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: used, CommandId: "kube-hook-1", Language: "bash", Code: "true"}), "true")
	if _, err := c.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: used}); err != nil {
		t.Fatal(err)
	}
	dead := acquire(t, ctx, c, "hook-dead").GetSandbox().GetSandboxId()
	if err := k.cs.CoreV1().Pods(kubeNamespace).Delete(ctx, k.podOf(t, ctx, dead).Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r, err := c.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: "hook-idle", Options: &sandboxv1.SandboxOptions{
		IdleTimeout: durationpb.New(2 * time.Second), OnIdle: sandboxv1.IdleAction_IDLE_ACTION_DELETE}})
	if err != nil {
		t.Fatal(err)
	}
	idle := r.GetSandbox().GetSandboxId()

	died := hook.waitDelivered(t, dead, "died", 2*time.Minute)
	hook.waitDelivered(t, idle, "expired", 2*time.Minute)
	if !strings.Contains(died.reason, "deleted outside sandboxd") {
		t.Errorf("died's reason %q does not say the Pod was deleted outside sandboxd", died.reason)
	}
	got, dups := hook.delivered()
	checkSequences(t, "kube", got, map[string][]string{
		used: {"created", "command.finished", "killed"},
		dead: {"created", "died"},
		idle: {"created", "expired"},
	})
	if dups != 0 {
		t.Errorf("%d deliveries repeated an event ID, though the receiver took each at once", dups)
	}
}
