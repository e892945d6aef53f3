package kube

import (
	"cmp"
	"context"
	"log/slog"
	"runtime"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
)

// Config configures a Manager. Zero fields take the defaults given; the
// limits, timeouts and caps mean what they mean in orchestrator.Config.
type Config struct {
	// Client talks to the API server. Required.
	Client kubernetes.Interface
	// Namespace holds the sandbox Pods; default "sandboxd".
	Namespace string
	// Image is the sandbox image (with the driver and the io sidecar);
	// default orchestrator.DefaultImage.
	Image string
	// RuntimeClass is the Pods' runtimeClassName (e.g. a gVisor one); ""
	// is the cluster's default runtime.
	RuntimeClass string
	// NodeSelector and Tolerations place sandbox Pods.
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
	// StorageClass, when set, gives each sandbox's /workspace a volume of
	// that class (an ephemeral volume claim sized by its disk limit)
	// instead of an emptyDir.
	StorageClass string
	// IOTokenSecret names the Secret (key "token") the io sidecars read
	// their token from; IOToken is the same token, which sandboxd presents.
	// Both required.
	IOTokenSecret string
	IOToken       string
	// IOPort is the io sidecar's port; default 7070.
	IOPort int
	// IODiskBytes bounds each sandbox's /io emptyDir; default
	// orchestrator.DefaultIODiskBytes.
	IODiskBytes int64

	IdleTTL               time.Duration
	MaxLifetime           time.Duration // 0: none
	MaxIdleTTL            time.Duration
	DefaultLimits         core.Limits
	MaxLimits             core.Limits
	DefaultTimeout        time.Duration
	MaxTimeout            time.Duration
	MaxCodeBytes          int
	MaxUploadBytes        int64
	MaxSandboxes          int
	MaxSandboxesPerTenant int
	// WarmPool is how many started, unclaimed sandbox Pods the leader keeps.
	WarmPool int

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
	// DialIO connects to a sandbox's io sidecar; default the real one
	// (iosidecar.Dial). Tests of this package substitute a fake.
	DialIO func(ctx context.Context, addr, token string) (IOConn, error)
}

// Defaults.
const (
	DefaultNamespace = "sandboxd"
	DefaultIOPort    = 7070
)

func (c *Config) applyDefaults() error {
	switch {
	case c.Client == nil:
		return core.Errorf(core.ErrInvalidArgument, "config: a Kubernetes client is required")
	case c.IOTokenSecret == "" || len(c.IOToken) < 16:
		return core.Errorf(core.ErrInvalidArgument, "config: the io sidecars' token (at least 16 bytes) and the name of the Secret holding it are required")
	}
	c.fillDefaults()
	return nil
}

// fillDefaults sets the zero fields to their defaults.
func (c *Config) fillDefaults() {
	c.IOTokenSecret = cmp.Or(c.IOTokenSecret, "sandboxd-io-token")
	c.Namespace = cmp.Or(c.Namespace, DefaultNamespace)
	c.Image = cmp.Or(c.Image, core.DefaultImage)
	c.IOPort = cmp.Or(c.IOPort, DefaultIOPort)
	c.IODiskBytes = cmp.Or(c.IODiskBytes, core.DefaultIODiskBytes)
	c.IdleTTL = cmp.Or(c.IdleTTL, core.DefaultIdleTTL)
	c.MaxIdleTTL = cmp.Or(c.MaxIdleTTL, max(core.DefaultMaxIdleTTL, c.IdleTTL))
	c.DefaultTimeout = cmp.Or(c.DefaultTimeout, core.DefaultCommandTimeout)
	c.MaxTimeout = cmp.Or(c.MaxTimeout, core.DefaultMaxTimeout)
	c.MaxCodeBytes = cmp.Or(c.MaxCodeBytes, core.MaxCodeBytes)
	c.MaxUploadBytes = cmp.Or(c.MaxUploadBytes, core.DefaultMaxUploadBytes)
	c.DefaultLimits.MemoryBytes = cmp.Or(c.DefaultLimits.MemoryBytes, 1<<30)
	c.DefaultLimits.NanoCPUs = cmp.Or(c.DefaultLimits.NanoCPUs, 1e9)
	c.DefaultLimits.PidsLimit = cmp.Or(c.DefaultLimits.PidsLimit, 256)
	c.DefaultLimits.DiskBytes = cmp.Or(c.DefaultLimits.DiskBytes, core.DefaultDiskBytes)
	c.MaxLimits.MemoryBytes = cmp.Or(c.MaxLimits.MemoryBytes, 8<<30)
	c.MaxLimits.NanoCPUs = cmp.Or(c.MaxLimits.NanoCPUs, int64(runtime.NumCPU())*1e9)
	c.MaxLimits.PidsLimit = cmp.Or(c.MaxLimits.PidsLimit, 4096)
	c.MaxLimits.DiskBytes = cmp.Or(c.MaxLimits.DiskBytes, core.DefaultMaxDiskBytes)
	c.ActivityWriteInterval = cmp.Or(c.ActivityWriteInterval, 10*time.Second)
	c.StartTimeout = cmp.Or(c.StartTimeout, 2*time.Minute)
	c.LeaseDuration = cmp.Or(c.LeaseDuration, 15*time.Second)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// policy is the server's rule for new sandboxes' options. Pids are not
// enforced per Pod by Kubernetes (the kubelet's podPidsLimit is per node):
// the limit is validated and reported as under Docker.
func (c *Config) policy() core.Policy {
	return core.Policy{DefaultLimits: c.DefaultLimits, MaxLimits: c.MaxLimits, MaxIdleTTL: c.MaxIdleTTL}
}

func (c *Config) commandPolicy() core.CommandPolicy {
	return core.CommandPolicy{MaxCodeBytes: c.MaxCodeBytes, DefaultTimeout: c.DefaultTimeout, MaxTimeout: c.MaxTimeout}
}
