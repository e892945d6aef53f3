package main

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandboxd/sandboxd/orchestrator/backend/kube"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/egress"
)

// Backends.
const (
	backendDocker     = "docker"
	backendKubernetes = "kubernetes"
)

// kubeConfig is the command line of the Kubernetes backend (--kube-*).
type kubeConfig struct {
	kubeconfig    string
	namespace     string
	runtimeClass  string
	nodeSelector  string // k=v,k=v
	tolerations   string // JSON list of core/v1 Tolerations
	storageClass  string
	ioTokenFile   string
	ioTokenSecret string
	leaderLease   time.Duration
	identity      string
	cpuRequest    float64
	nodeLostAfter time.Duration
	kubeletPort   int
	kubeletCAFile string
	snapshotDir   string
	volumeClass   string
	volumeAccess  string
	egressCNI     bool
	egressDeny    prefixList
}

// register adds the [kubernetes] section's settings (--kube-*).
func (k *kubeConfig) register(s sectionReg) {
	s.String("kubeconfig", &k.kubeconfig, "kubeconfig", "", "with --backend kubernetes: kubeconfig `file` (empty: the in-cluster service account, else $KUBECONFIG or ~/.kube/config)")
	s.String("namespace", &k.namespace, "kube-namespace", kube.DefaultNamespace, "with --backend kubernetes: `namespace` of the sandbox Pods")
	s.String("runtime_class", &k.runtimeClass, "kube-runtime-class", "", "with --backend kubernetes: runtimeClassName of sandbox Pods, e.g. gvisor (empty: the cluster's default)")
	s.String("node_selector", &k.nodeSelector, "kube-node-selector", "", "with --backend kubernetes: nodeSelector of sandbox Pods, as `key=value,...`")
	s.String("tolerations", &k.tolerations, "kube-tolerations", "", "with --backend kubernetes: tolerations of sandbox Pods, as a JSON list of Kubernetes tolerations")
	s.String("storage_class", &k.storageClass, "kube-storage-class", "", "with --backend kubernetes: give each sandbox a persistent volume claim of this storage `class` for its /io and /workspace (its disk limit plus --io-disk), kept while it is hibernated: with it, sandboxes hibernate (--on-idle, HibernateSandbox, E2B pause); empty: emptyDirs, and idle sandboxes are deleted")
	s.String("io_token_file", &k.ioTokenFile, "kube-io-token-file", "", "with --backend kubernetes: `file` holding the token sandboxd presents to the io sidecars (the same as in --kube-io-token-secret); required")
	s.String("io_token_secret", &k.ioTokenSecret, "kube-io-token-secret", "sandboxd-io-token", "with --backend kubernetes: `name` of the Secret (key \"token\") the io sidecars read their token from")
	s.Duration("leader_lease", &k.leaderLease, "kube-leader-lease", 15*time.Second, "with --backend kubernetes: lease of the leader election among replicas (the leader keeps the warm pool and expires idle sandboxes)")
	s.Float("cpu_request", &k.cpuRequest, "kube-cpu-request", 1, "with --backend kubernetes: the share (0-1] of a sandbox's CPU limit its Pod requests from the scheduler (1: requests equal limits, Guaranteed QoS; less lets sandboxes share a node's CPUs, each still capped at its limit); memory is always requested whole")
	s.Duration("node_lost_after", &k.nodeLostAfter, "kube-node-lost-after", 300*time.Second, "with --backend kubernetes: how long a sandbox Pod stays on a node that stopped reporting before it is deleted and the sandbox reported dead (its toleration of the node's unreachable and not-ready taints; --kube-tolerations for those keys win)")
	s.Int("kubelet_port", &k.kubeletPort, "kube-kubelet-port", kube.DefaultKubeletPort, "with --backend kubernetes: the kubelets' `port`, where sandboxd reads per-sandbox metrics (the Summary API; RBAC: nodes/stats get)")
	s.String("kubelet_ca_file", &k.kubeletCAFile, "kube-kubelet-ca-file", "", "with --backend kubernetes: PEM `file` of the CA(s) that sign the kubelets' serving certificates (empty: the cluster's CA, from the kubeconfig or service account)")
	s.String("snapshot_dir", &k.snapshotDir, "kube-snapshot-dir", "", "with --backend kubernetes: `directory` holding named snapshots and forks' (CreateSnapshot, ForkSandbox, options.from_snapshot), mounted by every replica (a ReadWriteMany volume); empty: no snapshots or forks")
	s.String("volume_class", &k.volumeClass, "kube-volume-class", "", "with --backend kubernetes: storage `class` of named volumes' claims (a claim per volume, of the volume's size; CreateVolume, options.volumes); empty: --kube-storage-class's; neither: no volumes")
	s.String("volume_access_mode", &k.volumeAccess, "kube-volume-access-mode", string(corev1.ReadWriteOnce), "with --backend kubernetes: access `mode` of volumes' claims: ReadWriteOnce (every Pod that mounts a volume runs on the node holding it) or ReadWriteMany (where the class offers it)")
	s.Bool("egress_cni", &k.egressCNI, "kube-egress-cni", false, "with --backend kubernetes and --allow-network: the nodes' CNI chain includes sandboxd's egress plugin (sandbox-cni), which confines each sandbox Pod's user to its io sidecar's egress gateway; without it networked sandboxes are refused (docs/kubernetes.md)")
	s.Var("egress_deny", &k.egressDeny, kindList, "kube-egress-deny", "with --kube-egress-cni: `CIDR blocks` no sandbox reaches whatever its policy and --egress-allow-private say: the cluster's Pod, Service and node ranges (comma-separated or repeated)")
	s.String("identity", &k.identity, "kube-identity", "", "with --backend kubernetes: this replica's name in the leader election (empty: $POD_NAME, else host name and PID)")
}

// check catches bad --kube-* settings at start-up, all of them.
func (k *kubeConfig) check() error {
	var errs problems
	if k.ioTokenFile == "" {
		errs = append(errs, errors.New("--backend kubernetes needs --kube-io-token-file (the io sidecars' shared token)"))
	}
	if _, err := k.parseNodeSelector(); err != nil {
		errs = append(errs, err)
	}
	if _, err := k.parseTolerations(); err != nil {
		errs = append(errs, err)
	}
	if k.kubeletPort < 1 || k.kubeletPort > 65535 {
		errs = append(errs, fmt.Errorf("--kube-kubelet-port %d: want a TCP port", k.kubeletPort))
	}
	if !(k.cpuRequest > 0 && k.cpuRequest <= 1) {
		errs = append(errs, fmt.Errorf("--kube-cpu-request %v: want a share of the CPU limit in (0, 1]", k.cpuRequest))
	}
	if k.nodeLostAfter < time.Second {
		errs = append(errs, fmt.Errorf("--kube-node-lost-after %v: want at least 1s", k.nodeLostAfter))
	}
	if k.leaderLease < time.Second {
		errs = append(errs, fmt.Errorf("--kube-leader-lease %v: want at least 1s", k.leaderLease))
	}
	switch corev1.PersistentVolumeAccessMode(k.volumeAccess) {
	case corev1.ReadWriteOnce, corev1.ReadWriteMany:
	default:
		errs = append(errs, fmt.Errorf("--kube-volume-access-mode %q: want ReadWriteOnce or ReadWriteMany", k.volumeAccess))
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}

func (k *kubeConfig) parseNodeSelector() (map[string]string, error) {
	if k.nodeSelector == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range strings.Split(k.nodeSelector, ",") {
		key, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || key == "" {
			return nil, fmt.Errorf("--kube-node-selector %q: want key=value,...", k.nodeSelector)
		}
		out[key] = v
	}
	return out, nil
}

func (k *kubeConfig) parseTolerations() ([]corev1.Toleration, error) {
	if k.tolerations == "" {
		return nil, nil
	}
	var ts []corev1.Toleration
	if err := json.Unmarshal([]byte(k.tolerations), &ts); err != nil {
		return nil, fmt.Errorf("--kube-tolerations: want a JSON list of tolerations: %v", err)
	}
	return ts, nil
}

// restConfig finds the API server: --kubeconfig, else in-cluster, else the
// usual kubeconfig locations.
func (k *kubeConfig) restConfig() (*rest.Config, error) {
	if k.kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", k.kubeconfig)
	}
	if c, err := rest.InClusterConfig(); err == nil {
		return c, nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
}

// kubeletTransport reaches the kubelets as sandboxd reaches the API server
// (its client certificate or bearer token), checking their serving
// certificates against --kube-kubelet-ca-file, else the cluster's CA.
func (k *kubeConfig) kubeletTransport(rc *rest.Config) (http.RoundTripper, error) {
	kc := rest.CopyConfig(rc)
	kc.ServerName = ""
	if k.kubeletCAFile != "" {
		ca, err := os.ReadFile(k.kubeletCAFile)
		if err != nil {
			return nil, fmt.Errorf("--kube-kubelet-ca-file: %w", err)
		}
		kc.CAFile, kc.CAData = "", ca
	}
	rt, err := rest.TransportFor(kc)
	if err != nil {
		return nil, fmt.Errorf("the kubelets' transport: %w", err)
	}
	return rt, nil
}

// newKubeManager starts the Kubernetes backend with the server-wide
// policy of cfg (image, limits, TTLs, caps, pool).
func newKubeManager(ctx context.Context, cfg config, log *slog.Logger) (*kube.Manager, error) {
	k := cfg.kube
	rc, err := k.restConfig()
	if err != nil {
		return nil, fmt.Errorf("--backend kubernetes: no API server: %w", err)
	}
	rc.QPS, rc.Burst = 50, 100 // the defaults (5/10) throttle a busy replica
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	token, err := os.ReadFile(k.ioTokenFile)
	if err != nil {
		return nil, fmt.Errorf("--kube-io-token-file: %w", err)
	}
	kubelets, err := k.kubeletTransport(rc)
	if err != nil {
		return nil, err
	}
	sel, _ := k.parseNodeSelector()
	tol, _ := k.parseTolerations()
	id := k.identity
	if id == "" {
		id = os.Getenv("POD_NAME")
	}
	return kube.New(ctx, kube.Config{
		Policy: cfg.policy, // the one policy, shared with the Docker backend
		Client: client, Namespace: k.namespace, RuntimeClass: k.runtimeClass,
		NodeSelector: sel, Tolerations: tol, StorageClass: k.storageClass, SnapshotDir: k.snapshotDir,
		VolumeClass: cmp.Or(k.volumeClass, k.storageClass), VolumeAccessMode: corev1.PersistentVolumeAccessMode(k.volumeAccess),
		SnapshotBudget: core.SnapshotBudget{All: cfg.docker.SnapshotDiskBudget, PerTenant: cfg.docker.SnapshotDiskBudgetPerTenant}, CPURequest: k.cpuRequest, NodeLostAfter: k.nodeLostAfter,
		EgressCNI: k.egressCNI, EgressCluster: k.egressDeny, EgressHosts: egressHosts(cfg.docker.Egress.Resolver), EgressRoots: cfg.egressRoots,
		Ports:         cfg.docker.Ports, // the front's URLs and tokens (newPortsFront)
		IOTokenSecret: k.ioTokenSecret, IOToken: strings.TrimSpace(string(token)),
		KubeletTransport: kubelets, KubeletPort: k.kubeletPort,
		Identity: id, LeaseDuration: k.leaderLease, Logger: log, Lifecycle: cfg.docker.Lifecycle,
		Metrics: cfg.docker.Metrics, // acquires and pool refills, this replica's
	})
}

// replicaSecret is a secret every replica derives alike, for what they
// must all accept whichever gave it (what, in errors): an HMAC of label
// under the io sidecars' token (--kube-io-token-file), which every replica
// holds. That token already opens every sandbox, so what is keyed by a
// secret derived from it opens nothing more; each label gives another
// secret, and rotating the token rotates them all.
func (k *kubeConfig) replicaSecret(label, what string) ([]byte, error) {
	token, err := os.ReadFile(k.ioTokenFile)
	if err != nil {
		return nil, fmt.Errorf("--kube-io-token-file: %w", err)
	}
	t := strings.TrimSpace(string(token))
	if len(t) < 16 {
		return nil, fmt.Errorf("--kube-io-token-file: the token is shorter than 16 characters, too short to key %s", what)
	}
	mac := hmac.New(sha256.New, []byte(t))
	mac.Write([]byte(label))
	return mac.Sum(nil), nil
}

// egressHosts are --egress-hosts-file's names, which the Kubernetes
// backend sends to its Pods' gateways; nil without the flag.
func egressHosts(r egress.Resolver) map[string][]netip.Addr {
	if h, ok := r.(*egress.HostsFile); ok {
		return h.Names()
	}
	return nil
}
