package kube

import (
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
)

// Config configures a Manager: the policy every backend shares
// (core.Policy, embedded, so its fields read as the Config's) and what is
// the Kubernetes backend's own. Zero fields take the defaults given.
//
// Of the policy, Policy.OnIdle and HibernatedTTL apply only with
// StorageClass (without it an idle sandbox is deleted: there is no volume
// to hibernate to), MemorySnapshots not at all (nor the snapshot disk
// budgets, which apply to named snapshots through SnapshotBudget), and
// Policy.Runtime is unused (a Pod's runtime is RuntimeClass).
type Config struct {
	core.Policy

	// Client talks to the API server. Required.
	Client kubernetes.Interface
	// Namespace holds the sandbox Pods; default "sandboxd".
	Namespace string
	// RuntimeClass is the Pods' runtimeClassName (e.g. a gVisor one); ""
	// is the cluster's default runtime.
	RuntimeClass string
	// NodeSelector and Tolerations place sandbox Pods.
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
	// CPURequest is the share of a sandbox's CPU limit its Pod requests
	// from the scheduler, in (0, 1]; default 1: requests equal limits
	// (Guaranteed QoS), so a node runs only as many sandboxes as it has
	// CPUs for. Less lets a node's sandboxes share its CPUs, each still
	// capped at its limit, as on the Docker backend, which reserves
	// nothing. Memory is always requested whole: overcommitted memory is
	// an OOM kill.
	CPURequest float64
	// NodeLostAfter is how long a sandbox's Pod stays on a node that
	// stopped reporting (or reports NotReady) before the cluster deletes
	// it and the sandbox is reported dead, naming the node; default 300s,
	// the cluster's own default. Tolerations for those taints in
	// Tolerations win. Whole seconds.
	NodeLostAfter time.Duration
	// StorageClass, when set, gives each sandbox a PersistentVolumeClaim
	// of that class for its /io and /workspace (claim.go), which outlives
	// its Pod: with it, sandboxes hibernate (hibernate.go). Empty: emptyDirs,
	// and no hibernation.
	StorageClass string
	// IOTokenSecret names the Secret (key "token") the io sidecars read
	// their token from; IOToken is the same token, which sandboxd presents.
	// Both required.
	IOTokenSecret string
	IOToken       string
	// IOPort is the io sidecar's port; default 7070.
	IOPort int
	// KubeletTransport reaches the nodes' kubelets for per-sandbox
	// metrics (metrics.go): sandboxd's credentials, and the CA that signs
	// the kubelets' serving certificates. Nil: no metrics on this backend.
	KubeletTransport http.RoundTripper
	// KubeletPort is the kubelets' port; default 10250.
	KubeletPort int
	// VolumeClass is the StorageClass of named volumes' claims
	// (volumes.go); empty: no volumes on this backend. sandboxd defaults it
	// to StorageClass.
	VolumeClass string
	// VolumeAccessMode is the volumes' claims' access mode; default
	// ReadWriteOnce (every Pod that mounts a volume runs on its node).
	// ReadWriteMany, where the class offers it, lets them spread.
	VolumeAccessMode corev1.PersistentVolumeAccessMode
	// SnapshotDir holds named snapshots and forks' (snapshots.go): a
	// directory every replica mounts, e.g. a ReadWriteMany volume. Empty:
	// no snapshots or forks on this backend.
	SnapshotDir string
	// SnapshotBudget bounds the bytes the named snapshots in SnapshotDir
	// take (sandboxd --snapshot-disk-budget and its per-tenant share). The
	// hibernations' snapshots are on the sandboxes' claims, bounded by
	// their size.
	SnapshotBudget core.SnapshotBudget
	// EgressCNI says the nodes that run sandbox Pods have sandboxd's
	// egress plugin in their CNI chain (cmd/sandbox-cni), which confines a
	// Pod's sandbox user to its io sidecar's egress gateway (network.go).
	// Without it, networked sandboxes are refused; with it, a Pod whose
	// redirect turns out not to be in force is ended before it runs
	// anything. Policy.AllowNetwork must be set too.
	EgressCNI bool
	// EgressCluster are blocks no sandbox reaches whatever its policy and
	// Policy.EgressAllowPrivate say: the cluster's Pod, Service and node
	// ranges, where the other sandboxes, sandboxd and the kubelets are.
	// The Pod's own addresses and the special ranges (private, link-local,
	// ...) are refused anyway unless EgressAllowPrivate allows them.
	EgressCluster []netip.Prefix
	// EgressHosts are the operator's fixed names (sandboxd
	// --egress-hosts-file), from which the gateways resolve instead of
	// their Pods' resolver; nil: the Pods' resolver (the cluster's DNS).
	EgressHosts map[string][]netip.Addr
	// EgressRoots are PEM certificates the gateways trust, besides their
	// image's roots, when they verify the server of a connection they
	// intercept for a header rule (sandboxd --egress-ca-file).
	EgressRoots []byte
	// Ports is sandboxd's HTTP front for sandbox ports (sandboxd
	// --ports-listen): GetHost's URLs and traffic tokens, which every
	// replica must key alike. nil: port URLs are refused.
	Ports *core.PortsFront

	// ActivityWriteInterval bounds how often a sandbox's last activity is
	// written to its Pod (activity.go); default 10 s, and at most a fifth
	// of the sandbox's idle TTL.
	ActivityWriteInterval time.Duration
	// StartTimeout bounds the wait for a new Pod to become ready; default 2m.
	StartTimeout time.Duration
	// Identity names this replica in the leader election and in logs;
	// default the host name.
	Identity string
	// LeaseDuration is the leader election's lease; default 15 s.
	LeaseDuration time.Duration
	// Logger receives structured logs; default slog.Default().
	Logger *slog.Logger
	// Lifecycle receives the sandboxes' lifecycle events this backend
	// sees (created, killed, expired, died, hibernated, woken), for
	// sandboxd's webhooks; nil discards. Each replica publishes the
	// changes it makes; deaths and expiries are the leader's.
	Lifecycle core.LifecycleSink
	// Metrics receives this replica's acquires and pool refills, for
	// sandboxd's Prometheus series; nil discards.
	Metrics core.Metrics
	// DialIO connects to a sandbox's io sidecar; default the real one
	// (iosidecar.Dial). Tests of this package substitute a fake.
	DialIO func(ctx context.Context, addr, token string) (IOConn, error)
}

// Defaults.
const (
	DefaultNamespace = "sandboxd"
	DefaultIOPort    = 7070
	// DefaultKubeletPort is the kubelet's default port.
	DefaultKubeletPort = 10250
	// DefaultNodeLostAfter is Config.NodeLostAfter's default: the
	// cluster's own (the DefaultTolerationSeconds admission plugin's).
	DefaultNodeLostAfter = 300 * time.Second
)

func (c *Config) applyDefaults() error {
	switch {
	case c.Client == nil:
		return core.Invalidf("config: a Kubernetes client is required")
	case c.IOTokenSecret == "" || len(c.IOToken) < 16:
		return core.Invalidf("config: the io sidecars' token (at least 16 bytes) and the name of the Secret holding it are required")
	}
	if err := c.Policy.ApplyDefaults(); err != nil {
		return err
	}
	c.fillDefaults()
	return nil
}

// fillDefaults sets the zero fields of the backend's own settings to their
// defaults.
func (c *Config) fillDefaults() {
	c.IOTokenSecret = cmp.Or(c.IOTokenSecret, "sandboxd-io-token")
	c.Namespace = cmp.Or(c.Namespace, DefaultNamespace)
	c.IOPort = cmp.Or(c.IOPort, DefaultIOPort)
	c.KubeletPort = cmp.Or(c.KubeletPort, DefaultKubeletPort)
	c.NodeLostAfter = cmp.Or(c.NodeLostAfter, DefaultNodeLostAfter)
	c.VolumeAccessMode = cmp.Or(c.VolumeAccessMode, corev1.ReadWriteOnce)
	if c.CPURequest <= 0 || c.CPURequest > 1 {
		c.CPURequest = 1
	}
	c.ActivityWriteInterval = cmp.Or(c.ActivityWriteInterval, 10*time.Second)
	c.StartTimeout = cmp.Or(c.StartTimeout, 2*time.Minute)
	c.LeaseDuration = cmp.Or(c.LeaseDuration, 15*time.Second)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Lifecycle = core.LifecycleOrNoop(c.Lifecycle)
	c.Metrics = core.MetricsOrNoop(c.Metrics)
}
