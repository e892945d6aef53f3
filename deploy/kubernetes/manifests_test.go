// Package kubernetes_test checks the Kubernetes manifests of this directory:
// that kustomize renders the base, that a real API server (internal/kubetest)
// accepts every object and the optional gVisor RuntimeClass, and that the
// objects say what a user relies on (the sandbox Pods' isolation, the
// Role's reach, sandboxd's replicas and probes, placeholders that fail
// closed). What needs a kubelet, a CNI or gVisor is for docs/kubernetes.md's checks
// on a real cluster.
package kubernetes_test

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sandboxd/sandboxd/internal/kubetest"
	"github.com/sandboxd/sandboxd/internal/kubetest/manifests"
	"github.com/sandboxd/sandboxd/orchestrator/backend/kube"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/door/tokens"
)

const (
	namespace     = "sandboxd"
	ioTokenSecret = "sandboxd-io-token"
	ioTokenPath   = "/var/run/sandboxd/io-token/token"
	grpcPort      = 50051
	sidecarPort   = 7070
	fieldManager  = "sandboxd-test"
	runtimeClass  = "runtimeclass-gvisor.yaml"
)

// sandboxPodLabels are the labels the kube Manager puts on every sandbox Pod
// (the Kubernetes backend's contract), user and pool sandboxes alike.
var sandboxPodLabels = labels.Set{
	"app.kubernetes.io/managed-by": "sandboxd",
	"sandboxd.io/sandbox-id":       "sb-abcdefghijklmnopqrst",
	"sandboxd.io/pool":             "false",
	"sandboxd.io/user":             "0123456789abcdef",
}

// volumeServerPodLabels are the labels of a named volume's server Pod
// (kube.SampleVolumeServer).
var volumeServerPodLabels = labels.Set{
	"app.kubernetes.io/managed-by":                "sandboxd",
	"sandboxd.io/volume-server":                   "vol-abcdefghijklmnopqrst",
	"volume.sandboxd.io/vol-abcdefghijklmnopqrst": "true",
}

// render builds the kustomization in dir as `kubectl apply -k` would.
func render(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := manifests.Render(dir)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// readFile parses a one-object manifest that is not in the kustomization.
func readFile(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	u, err := manifests.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func key(u *unstructured.Unstructured) string { return u.GetKind() + "/" + u.GetName() }

// TestBaseRenders checks the rendered base without an API server: the
// objects it holds and what they say.
func TestBaseRenders(t *testing.T) {
	objs := render(t, ".")
	checkManifests(t, objs)
}

// TestAPIServerAcceptsManifests creates the namespace on a real API server,
// then server-side-applies every object of the base, and the gVisor
// RuntimeClass, as a dry run: each must be admitted (schema, validation,
// defaulting, RBAC's escalation check) and draw no warning, such as a
// deprecated API. The checks of TestBaseRenders are then repeated on the
// objects as the server would store them. Pod Security: sandboxd's Pod
// template meets "restricted", and a sandbox Pod passes the namespace's
// enforcement.
func TestAPIServerAcceptsManifests(t *testing.T) {
	objs := render(t, ".")
	cfg := kubetest.Start(t)
	ctx := t.Context()
	ap := newApplier(t, cfg)

	// The namespace for real: the dry runs of the namespaced objects need it.
	var nsObj *unstructured.Unstructured
	for _, u := range objs {
		if u.GetKind() == "Namespace" {
			nsObj = u
		}
	}
	if nsObj == nil {
		t.Fatal("the base holds no Namespace")
	}
	if _, _, err := ap.Apply(ctx, nsObj, false); err != nil {
		t.Fatalf("create namespace %s: %v", nsObj.GetName(), err)
	}

	var applied []*unstructured.Unstructured
	for _, u := range append(objs, readFile(t, runtimeClass)) {
		got, warnings, err := ap.Apply(ctx, u, true)
		if err != nil {
			t.Errorf("server-side apply (dry run) of %s: %v", key(u), err)
			continue
		}
		if len(warnings) > 0 {
			t.Errorf("server-side apply (dry run) of %s warned: %q", key(u), warnings)
		}
		if got.GetKind() != "RuntimeClass" {
			applied = append(applied, got)
		}
	}
	if t.Failed() {
		return
	}
	checkManifests(t, applied)

	// sandboxd's own Pods meet "restricted". Its namespace only audits
	// that level, so the Deployment goes to a namespace that warns.
	strict := &unstructured.Unstructured{}
	strict.SetAPIVersion("v1")
	strict.SetKind("Namespace")
	strict.SetName("restricted")
	strict.SetLabels(map[string]string{"pod-security.kubernetes.io/warn": "restricted"})
	if _, _, err := ap.Apply(ctx, strict, false); err != nil {
		t.Fatalf("create namespace restricted: %v", err)
	}
	for _, u := range objs {
		if u.GetKind() != "Deployment" {
			continue
		}
		u = u.DeepCopy()
		u.SetNamespace(strict.GetName())
		if _, warnings, err := ap.Apply(ctx, u, true); err != nil || len(warnings) > 0 {
			t.Errorf("%s in a namespace warning at Pod Security \"restricted\": error %v, warnings %q", key(u), err, warnings)
		}
	}

	// A Pod of the shape the kube Manager creates must pass the
	// namespace's Pod Security enforcement: the io sidecar runs as root
	// with three capabilities, which "restricted" would refuse.
	// It does draw "restricted" warnings, for the io sidecar.
	quiet := rest.CopyConfig(cfg)
	quiet.WarningHandler = rest.NoWarnings{}
	cs, err := kubernetes.NewForConfig(quiet)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods(namespace).Create(ctx, sandboxPod(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("a sandbox Pod of the contract's shape is refused in namespace %s: %v", namespace, err)
	}
	if _, err := cs.CoreV1().Pods(namespace).Create(ctx, volumeServerPod(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("a volume server Pod is refused in namespace %s: %v", namespace, err)
	}
}

// TestSecretOverlay renders the overlay docs/kubernetes.md shows for replacing the
// placeholder Secrets: the real values must reach the Secrets under the
// names the Deployment and the Role use, and no placeholder may survive
// (a stringData left behind would win over the new data on the server).
func TestSecretOverlay(t *testing.T) {
	base, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, base)
	if err != nil {
		t.Fatal(err)
	}
	const ioToken = "0123456789abcdef0123456789abcdef"
	const authTokens = "abcdefghijklmnopqrstuvwxyz012345 acme user\n"
	files := map[string]string{
		"io-token":    ioToken,
		"auth-tokens": authTokens,
		"kustomization.yaml": `resources:
  - ` + rel + `
secretGenerator:
  - name: sandboxd-io-token
    namespace: sandboxd
    behavior: replace
    files:
      - token=io-token
  - name: sandboxd-auth-tokens
    namespace: sandboxd
    behavior: replace
    files:
      - tokens=auth-tokens
generatorOptions:
  disableNameSuffixHash: true
`,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	objs := render(t, dir)
	want := map[string]map[string]string{
		"sandboxd-io-token":    {"token": ioToken},
		"sandboxd-auth-tokens": {"tokens": authTokens},
	}
	for _, u := range objs {
		if u.GetKind() != "Secret" {
			continue
		}
		var s corev1.Secret
		fromUnstructured(t, u, &s)
		w, ok := want[s.Name]
		if !ok {
			t.Errorf("the overlay renders an unexpected Secret %s", s.Name)
			continue
		}
		delete(want, s.Name)
		if len(s.StringData) > 0 {
			t.Errorf("Secret %s keeps stringData %v after the overlay; it would override data on the server", s.Name, s.StringData)
		}
		got := map[string]string{}
		for k, v := range s.Data {
			got[k] = string(v)
		}
		if fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("Secret %s data after the overlay = %q, want %q", s.Name, got, w)
		}
	}
	for name := range want {
		t.Errorf("Secret %s missing after the overlay (renamed?)", name)
	}
}

// checkManifests asserts what a user relies on, on the rendered objects or
// on the API server's answers to applying them.
func checkManifests(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	byKey := map[string]*unstructured.Unstructured{}
	for _, u := range objs {
		byKey[key(u)] = u
		if u.GetKind() == "Namespace" || key(u) == "ClusterRole/sandboxd-node-stats" || key(u) == "ClusterRoleBinding/sandboxd-node-stats" {
			continue
		}
		// Nothing else cluster-wide: every other object lives in the namespace.
		if u.GetNamespace() != namespace {
			t.Errorf("%s is in namespace %q, want %q (the base holds nothing cluster-wide but the Namespace and the nodes' stats grant)", key(u), u.GetNamespace(), namespace)
		}
	}
	want := []string{
		"Namespace/sandboxd", "ServiceAccount/sandboxd", "Role/sandboxd", "RoleBinding/sandboxd",
		"ClusterRole/sandboxd-node-stats", "ClusterRoleBinding/sandboxd-node-stats",
		"Secret/sandboxd-io-token", "Secret/sandboxd-auth-tokens", "Deployment/sandboxd", "Service/sandboxd",
		"PodDisruptionBudget/sandboxd", "NetworkPolicy/sandbox-isolation", "NetworkPolicy/sandboxd",
		"NetworkPolicy/volume-server-isolation", "NetworkPolicy/sandbox-network",
	}
	var got []string
	for k := range byKey {
		got = append(got, k)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("the base renders %q, want %q", got, want)
	}

	var dep appsv1.Deployment
	fromUnstructured(t, byKey["Deployment/sandboxd"], &dep)
	sandboxdLabels := labels.Set(dep.Spec.Template.Labels)
	checkDeployment(t, &dep)
	checkRBAC(t, byKey, dep.Spec.Template.Spec.ServiceAccountName)
	if got := labels.Set(volumeServerPod().Labels); !maps.Equal(got, volumeServerPodLabels) {
		t.Errorf("a volume server Pod's labels are %v; the policies are checked against %v", got, volumeServerPodLabels)
	}
	checkNetworkPolicies(t, objs, sandboxdLabels)
	checkSecrets(t, byKey)

	depSel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil {
		t.Fatalf("Deployment selector: %v", err)
	}
	if depSel.Matches(sandboxPodLabels) {
		t.Errorf("the Deployment's selector %s also selects sandbox Pods", depSel)
	}

	var svc corev1.Service
	fromUnstructured(t, byKey["Service/sandboxd"], &svc)
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(sandboxdLabels) || labels.SelectorFromSet(svc.Spec.Selector).Matches(sandboxPodLabels) {
		t.Errorf("Service selector %v must select sandboxd's Pods %v and no sandbox Pod", svc.Spec.Selector, sandboxdLabels)
	}
	if svc.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("Service type %q, want ClusterIP", svc.Spec.Type)
	}
	ports := map[string]int32{}
	for _, p := range svc.Spec.Ports {
		ports[p.Name] = p.Port
		if containerPort(&dep, p.TargetPort) == 0 {
			t.Errorf("Service port %s targets %s, which sandboxd's container does not expose", p.Name, p.TargetPort.String())
		}
	}
	if ports["grpc"] != grpcPort || ports["metrics"] != 9090 {
		t.Errorf("Service ports %v, want grpc 50051 and metrics 9090", ports)
	}

	var pdb policyv1.PodDisruptionBudget
	fromUnstructured(t, byKey["PodDisruptionBudget/sandboxd"], &pdb)
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget minAvailable %v, want 1", pdb.Spec.MinAvailable)
	}
	if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err != nil || !sel.Matches(sandboxdLabels) || sel.Matches(sandboxPodLabels) {
		t.Errorf("PodDisruptionBudget selector %v must select sandboxd's Pods only (%v)", pdb.Spec.Selector, err)
	}
}

func checkDeployment(t *testing.T, dep *appsv1.Deployment) {
	t.Helper()
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
		t.Errorf("Deployment replicas %v, want 2", dep.Spec.Replicas)
	}
	spec := dep.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("Deployment has %d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.GRPC == nil || p.GRPC.Port != grpcPort {
			t.Errorf("%s probe %+v, want gRPC health on port %d", name, p, grpcPort)
		}
	}
	if containerPort(dep, intstr.FromInt32(grpcPort)) == 0 {
		t.Errorf("container does not expose the gRPC port %d", grpcPort)
	}
	args := map[string]string{}
	for _, a := range c.Args {
		k, v, _ := strings.Cut(a, "=")
		args[k] = v
	}
	for flag, want := range map[string]string{
		"--backend":            "kubernetes",
		"--kube-namespace":     namespace,
		"--kube-io-token-file": ioTokenPath,
		"--listen":             fmt.Sprintf(":%d", grpcPort),
		"--metrics-listen":     ":9090",
	} {
		if args[flag] != want {
			t.Errorf("sandboxd arg %s = %q, want %q (args %q)", flag, args[flag], want, c.Args)
		}
	}
	// The io token file is the Secret's key, mounted read-only.
	if vol, ok := mountedSecret(spec, c, ioTokenPath); !ok || vol != ioTokenSecret {
		t.Errorf("%s is not the read-only mount of Secret %s (found %q)", ioTokenPath, ioTokenSecret, vol)
	}
	if auth := args["--auth-tokens"]; auth == "" {
		t.Errorf("no --auth-tokens: sandboxd refuses to serve beyond loopback without them")
	} else if vol, ok := mountedSecret(spec, c, auth); !ok || vol != "sandboxd-auth-tokens" {
		t.Errorf("--auth-tokens %s is not the read-only mount of Secret sandboxd-auth-tokens (found %q)", auth, vol)
	}

	sc := c.SecurityContext
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	psc := spec.SecurityContext
	if (sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot) && (psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot) {
		t.Errorf("sandboxd may run as root: runAsNonRoot not set")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("sandboxd's root filesystem is writable")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("sandboxd allows privilege escalation")
	}
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
		t.Errorf("sandboxd's capabilities %+v, want drop ALL and add none", sc.Capabilities)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("sandboxd's resources %+v, want CPU and memory requests and a memory limit", c.Resources)
	}
	if len(spec.TopologySpreadConstraints) == 0 && (spec.Affinity == nil || spec.Affinity.PodAntiAffinity == nil) {
		t.Errorf("nothing spreads sandboxd's replicas over nodes")
	}
}

// containerPort returns the container port sandboxd's container exposes
// under p (a name or a number), or 0.
func containerPort(dep *appsv1.Deployment, p intstr.IntOrString) int32 {
	for _, c := range dep.Spec.Template.Spec.Containers {
		for _, cp := range c.Ports {
			if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
				return cp.ContainerPort
			}
		}
	}
	return 0
}

// mountedSecret returns the Secret whose volume holds file in container c,
// and whether that mount is read-only.
func mountedSecret(spec corev1.PodSpec, c corev1.Container, file string) (string, bool) {
	for _, m := range c.VolumeMounts {
		if filepath.Dir(file) != filepath.Clean(m.MountPath) {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.Secret != nil {
				return v.Secret.SecretName, m.ReadOnly
			}
		}
	}
	return "", false
}

// rbacGrant is one (apiGroup, resource, resourceName, verb) a Role grants.
type rbacGrant struct{ group, resource, name, verb string }

func checkRBAC(t *testing.T, byKey map[string]*unstructured.Unstructured, serviceAccount string) {
	t.Helper()
	var role rbacv1.Role
	fromUnstructured(t, byKey["Role/sandboxd"], &role)
	got := map[rbacGrant]bool{}
	for _, r := range role.Rules {
		if len(r.NonResourceURLs) > 0 {
			t.Errorf("Role grants non-resource URLs %v", r.NonResourceURLs)
		}
		names := r.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, n := range names {
					for _, v := range r.Verbs {
						if g == "*" || res == "*" || v == "*" || strings.Contains(res, "*") {
							t.Errorf("Role rule %+v uses a wildcard", r)
						}
						got[rbacGrant{g, res, n, v}] = true
					}
				}
			}
		}
	}
	want := map[rbacGrant]bool{}
	for _, v := range []string{"get", "list", "watch", "create", "update", "patch", "delete"} {
		want[rbacGrant{"", "pods", "", v}] = true
	}
	// Leases: each user's binding to its sandbox, and the replicas'
	// leader election (orchestrator/backend/kube).
	for _, v := range []string{"get", "list", "watch", "create", "update", "delete"} {
		want[rbacGrant{"coordination.k8s.io", "leases", "", v}] = true
	}
	// Events, read only: a stopped Pod's Evicted event says why
	// (orchestrator/backend/kube, evictionMessage).
	want[rbacGrant{"", "events", "", "list"}] = true
	// Each sandbox's state volume with --kube-storage-class (hibernation).
	for _, v := range []string{"get", "list", "watch", "create", "patch", "delete"} {
		want[rbacGrant{"", "persistentvolumeclaims", "", v}] = true
	}
	for g := range got {
		if !want[g] {
			t.Errorf("Role grants %+v, beyond what sandboxd needs", g)
		}
	}
	for g := range want {
		if !got[g] {
			t.Errorf("Role lacks %+v, which sandboxd needs", g)
		}
	}

	// The one cluster-wide grant: the nodes' stats, read only (per-sandbox
	// metrics), bound to the same ServiceAccount.
	var cr rbacv1.ClusterRole
	fromUnstructured(t, byKey["ClusterRole/sandboxd-node-stats"], &cr)
	wantRule := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes/stats"}, Verbs: []string{"get"}}
	if len(cr.Rules) != 1 || !reflect.DeepEqual(cr.Rules[0], wantRule) {
		t.Errorf("ClusterRole sandboxd-node-stats grants %+v; want only %+v", cr.Rules, wantRule)
	}
	var crb rbacv1.ClusterRoleBinding
	fromUnstructured(t, byKey["ClusterRoleBinding/sandboxd-node-stats"], &crb)
	if crb.RoleRef.Kind != "ClusterRole" || crb.RoleRef.Name != cr.Name || len(crb.Subjects) != 1 ||
		crb.Subjects[0] != (rbacv1.Subject{Kind: "ServiceAccount", Name: serviceAccount, Namespace: namespace}) {
		t.Errorf("ClusterRoleBinding sandboxd-node-stats binds %+v to %+v; want the ClusterRole to the ServiceAccount %s only", crb.RoleRef, crb.Subjects, serviceAccount)
	}

	var rb rbacv1.RoleBinding
	fromUnstructured(t, byKey["RoleBinding/sandboxd"], &rb)
	if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != role.Name {
		t.Errorf("RoleBinding refers to %s %s, want Role %s", rb.RoleRef.Kind, rb.RoleRef.Name, role.Name)
	}
	want1 := rbacv1.Subject{Kind: "ServiceAccount", Name: serviceAccount, Namespace: namespace}
	if len(rb.Subjects) != 1 || rb.Subjects[0] != want1 {
		t.Errorf("RoleBinding subjects %+v, want only %+v (the Deployment's serviceAccountName)", rb.Subjects, want1)
	}
	if byKey["ServiceAccount/"+serviceAccount] == nil {
		t.Errorf("the Deployment's ServiceAccount %q is not in the base", serviceAccount)
	}
}

func checkNetworkPolicies(t *testing.T, objs []*unstructured.Unstructured, sandboxdLabels labels.Set) {
	t.Helper()
	// Each kind of Pod that runs an io sidecar over a sandbox's files is
	// isolated alike, by one policy of its own.
	for _, kind := range []struct {
		what string
		lbl  labels.Set
	}{{"sandbox Pods", sandboxPodLabels}, {"volume server Pods", volumeServerPodLabels}} {
		checkIsolated(t, objs, sandboxdLabels, kind.what, kind.lbl)
	}
	checkNetworked(t, objs, sandboxdLabels)
}

// checkNetworked checks what a networked sandbox's Pod gets besides the
// sandbox Pods' isolation: one policy, its egress out of the cluster but
// never to the private, link-local or loopback ranges, DNS to the
// cluster's DNS only, and its ingress from sandboxd's Pods alone, over TCP
// (the ports it serves, through the ports front), which sandboxd's policy
// lets it reach.
func checkNetworked(t *testing.T, objs []*unstructured.Unstructured, sandboxdPodLabels labels.Set) {
	t.Helper()
	networked := labels.Merge(sandboxPodLabels, labels.Set{"sandboxd.io/network": "on"})
	var extra int
	for _, u := range objs {
		if u.GetKind() != "NetworkPolicy" {
			continue
		}
		var np networkingv1.NetworkPolicy
		fromUnstructured(t, u, &np)
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil {
			t.Fatalf("NetworkPolicy %s: %v", np.Name, err)
		}
		if !sel.Matches(networked) || sel.Matches(sandboxPodLabels) {
			continue
		}
		extra++
		// Ingress: sandboxd's Pods alone, over TCP (the ports front).
		for _, r := range np.Spec.Ingress {
			if len(r.From) == 0 || !peersOnly(r.From, sandboxdPodLabels) {
				t.Errorf("NetworkPolicy %s admits ingress to networked sandboxes from %+v; want sandboxd's Pods alone", np.Name, r.From)
			}
			if len(r.Ports) == 0 || slices.ContainsFunc(r.Ports, func(p networkingv1.NetworkPolicyPort) bool {
				return p.Protocol == nil || *p.Protocol != corev1.ProtocolTCP
			}) {
				t.Errorf("NetworkPolicy %s admits ingress to networked sandboxes on %+v; want TCP alone", np.Name, r.Ports)
			}
		}
		for _, r := range np.Spec.Egress {
			for _, p := range r.To {
				switch {
				case p.IPBlock != nil:
					for _, must := range []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "127.0.0.0/8"} {
						if !slices.Contains(p.IPBlock.Except, must) {
							t.Errorf("NetworkPolicy %s lets networked sandboxes reach %s without excepting %s", np.Name, p.IPBlock.CIDR, must)
						}
					}
				case p.PodSelector != nil && p.NamespaceSelector != nil:
					if p.PodSelector.MatchLabels["k8s-app"] != "kube-dns" || p.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "kube-system" || !portsAre53(r.Ports) {
						t.Errorf("NetworkPolicy %s lets networked sandboxes reach Pods %+v in %+v on %+v; want the cluster's DNS on 53 only", np.Name, p.PodSelector, p.NamespaceSelector, r.Ports)
					}
				default:
					t.Errorf("NetworkPolicy %s lets networked sandboxes reach %+v", np.Name, p)
				}
			}
		}
	}
	if extra != 1 {
		t.Errorf("%d NetworkPolicies select networked sandboxes' Pods beyond the isolation, want 1 (sandbox-network)", extra)
	}
	// sandboxd reaches the ports they serve.
	var reaches bool
	for _, u := range objs {
		var np networkingv1.NetworkPolicy
		if u.GetKind() != "NetworkPolicy" {
			continue
		}
		fromUnstructured(t, u, &np)
		if sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector); err != nil || !sel.Matches(sandboxdPodLabels) {
			continue
		}
		for _, r := range np.Spec.Egress {
			if peersMatch(r.To, networked) && !peersMatch(r.To, sandboxPodLabels) && len(r.Ports) == 1 && r.Ports[0].Port == nil {
				reaches = true
			}
		}
	}
	if !reaches {
		t.Error("sandboxd's NetworkPolicy does not let it reach networked sandboxes' ports (any TCP port of theirs alone)")
	}
}

// peersOnly reports whether every peer is a Pod selector in the policy's
// namespace that matches set and no sandbox's or volume server's Pod.
func peersOnly(peers []networkingv1.NetworkPolicyPeer, set labels.Set) bool {
	for _, p := range peers {
		if p.PodSelector == nil || p.NamespaceSelector != nil || p.IPBlock != nil {
			return false
		}
		sel, err := metav1.LabelSelectorAsSelector(p.PodSelector)
		if err != nil || !sel.Matches(set) || sel.Matches(sandboxPodLabels) || sel.Matches(volumeServerPodLabels) {
			return false
		}
	}
	return true
}

// portsAre53 reports whether ports are DNS's alone.
func portsAre53(ports []networkingv1.NetworkPolicyPort) bool {
	if len(ports) == 0 {
		return false
	}
	for _, p := range ports {
		if p.Port == nil || p.Port.IntValue() != 53 {
			return false
		}
	}
	return true
}

// checkIsolated checks that exactly one NetworkPolicy selects Pods of
// labels podLabels (what), denying their egress and admitting only
// sandboxd's Pods on the sidecar's port, and that sandboxd may reach them
// there.
func checkIsolated(t *testing.T, objs []*unstructured.Unstructured, sandboxdLabels labels.Set, what string, podLabels labels.Set) {
	t.Helper()
	var podPolicies, sandboxdPolicies int
	var sandboxdReachesSidecar bool
	for _, u := range objs {
		if u.GetKind() != "NetworkPolicy" {
			continue
		}
		var np networkingv1.NetworkPolicy
		fromUnstructured(t, u, &np)
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil {
			t.Fatalf("NetworkPolicy %s: %v", np.Name, err)
		}
		if sel.Matches(podLabels) && sel.Matches(sandboxdLabels) {
			t.Errorf("NetworkPolicy %s selects %s and sandboxd's alike", np.Name, what)
		}
		if sel.Matches(sandboxdLabels) {
			sandboxdPolicies++
			for _, r := range np.Spec.Egress {
				if peersMatch(r.To, podLabels) && portsAre(r.Ports, sidecarPort) {
					sandboxdReachesSidecar = true
				}
			}
		}
		if !sel.Matches(podLabels) {
			continue
		}
		podPolicies++
		// Every policy selecting them must deny egress (policies add up,
		// so one allowing egress would open it) and admit only sandboxd,
		// on the sidecar's port.
		if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) || len(np.Spec.Egress) > 0 {
			t.Errorf("NetworkPolicy %s selects %s but does not deny their egress: policyTypes %v, egress %+v", np.Name, what, np.Spec.PolicyTypes, np.Spec.Egress)
		}
		if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) || len(np.Spec.Ingress) == 0 {
			t.Errorf("NetworkPolicy %s does not restrict ingress to %s", np.Name, what)
		}
		for _, r := range np.Spec.Ingress {
			if len(r.From) == 0 {
				t.Errorf("NetworkPolicy %s admits ingress to %s from anywhere", np.Name, what)
			}
			for _, p := range r.From {
				if p.IPBlock != nil || p.NamespaceSelector != nil || p.PodSelector == nil {
					t.Errorf("NetworkPolicy %s admits ingress to %s from %+v, beyond sandboxd's Pods in the namespace", np.Name, what, p)
					continue
				}
				from, err := metav1.LabelSelectorAsSelector(p.PodSelector)
				if err != nil || !from.Matches(sandboxdLabels) || from.Matches(sandboxPodLabels) || from.Matches(volumeServerPodLabels) {
					t.Errorf("NetworkPolicy %s admits ingress to %s from Pods %v; want sandboxd's only (%v)", np.Name, what, p.PodSelector, err)
				}
			}
			if !portsAre(r.Ports, sidecarPort) {
				t.Errorf("NetworkPolicy %s admits ingress to %s on %+v, want TCP %d only", np.Name, what, r.Ports, sidecarPort)
			}
		}
	}
	if podPolicies != 1 {
		t.Errorf("%d NetworkPolicies select %s, want 1", podPolicies, what)
	}
	if sandboxdPolicies != 1 || !sandboxdReachesSidecar {
		t.Errorf("%d NetworkPolicies select sandboxd's Pods (want 1); egress to the sidecars of %s on TCP %d allowed: %v", sandboxdPolicies, what, sidecarPort, sandboxdReachesSidecar)
	}
}

// peersMatch reports whether some peer is a Pod selector in the policy's
// namespace matching set.
func peersMatch(peers []networkingv1.NetworkPolicyPeer, set labels.Set) bool {
	for _, p := range peers {
		if p.PodSelector == nil || p.NamespaceSelector != nil || p.IPBlock != nil {
			continue
		}
		if sel, err := metav1.LabelSelectorAsSelector(p.PodSelector); err == nil && sel.Matches(set) {
			return true
		}
	}
	return false
}

// portsAre reports whether ports is exactly TCP port.
func portsAre(ports []networkingv1.NetworkPolicyPort, port int32) bool {
	if len(ports) != 1 || ports[0].Port == nil || ports[0].Port.IntValue() != int(port) || ports[0].EndPort != nil {
		return false
	}
	return ports[0].Protocol == nil || *ports[0].Protocol == corev1.ProtocolTCP
}

// checkSecrets asserts that the base's placeholders fail closed: nobody
// gets a working, publicly known token by forgetting to replace them.
func checkSecrets(t *testing.T, byKey map[string]*unstructured.Unstructured) {
	t.Helper()
	value := func(name, k string) string {
		var s corev1.Secret
		fromUnstructured(t, byKey["Secret/"+name], &s)
		if s.Type != corev1.SecretTypeOpaque {
			t.Errorf("Secret %s type %q, want Opaque", name, s.Type)
		}
		if v, ok := s.StringData[k]; ok {
			return v
		}
		v, ok := s.Data[k]
		if !ok {
			t.Errorf("Secret %s has no key %q", name, k)
		}
		return string(v)
	}
	// The io sidecar refuses tokens shorter than 16 bytes.
	if tok := value(ioTokenSecret, "token"); len(tok) >= 16 {
		t.Errorf("the placeholder io token is %d bytes: the sidecar would accept it; keep it under 16 bytes so it fails closed", len(tok))
	}
	if _, err := tokens.Parse(strings.NewReader(value("sandboxd-auth-tokens", "tokens"))); err == nil {
		t.Errorf("the placeholder auth token file holds tokens sandboxd accepts; it must hold none so that sandboxd fails closed")
	}
}

// sandboxPod is the Pod the kube Manager creates (a warm-pool sandbox, in
// this namespace, with the Deployment's image and token Secret), for Pod
// Security admission.
func sandboxPod() *corev1.Pod {
	return kube.SamplePod(kube.Config{Policy: core.Policy{Image: "sandboxd-sandbox:latest"}, Namespace: namespace, IOTokenSecret: ioTokenSecret})
}

// volumeServerPod is the Pod that serves a named volume's files, likewise;
// its labels must be volumeServerPodLabels.
func volumeServerPod() *corev1.Pod {
	return kube.SampleVolumeServer(kube.Config{Policy: core.Policy{Image: "sandboxd-sandbox:latest"}, Namespace: namespace, IOTokenSecret: ioTokenSecret})
}

func fromUnstructured(t *testing.T, u *unstructured.Unstructured, into any) {
	t.Helper()
	if u == nil {
		t.Fatalf("missing object for %T", into)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into); err != nil {
		t.Fatalf("%s: %v", key(u), err)
	}
}

func newApplier(t *testing.T, cfg *rest.Config) *manifests.Applier {
	t.Helper()
	ap, err := manifests.NewApplier(cfg, fieldManager)
	if err != nil {
		t.Fatal(err)
	}
	return ap
}
