//go:build linux

package node

import (
	"cmp"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// kubeletConfig is node n's KubeletConfiguration. What differs from a
// kubelet's defaults, and why:
//
//   - failCgroupV1: false. This machine runs cgroup v1, which kubelets from
//     1.35 refuse unless told; cgroupfs is the driver (containerd is told
//     the same), and cgroupRoot is the node's own (/<netns name>), since
//     two nodes share one machine.
//   - Its own directories (root, Pod logs) and containerd's socket; the
//     read-only port off; its API on the node's address only, with a
//     serving certificate for that address (Cluster.KubeletCAFile holds
//     them), authenticating the API server's users (x509, its client CA)
//     and service account tokens (webhook), and authorising them through
//     the API server (webhook: RBAC), as a cluster's kubelets do. sandboxd
//     reads its Summary API there (per-sandbox metrics); nothing else
//     calls it (no logs, exec or port-forward).
//   - Eviction thresholds low enough that the machine's other work (and
//     its disk, often under 15% free) never puts the node under pressure
//     (a test moves memory.available on purpose: SetMemoryEviction),
//     image garbage collection only on a full disk (the imported images
//     cannot be pulled again), and volume usage measured every 5s (1m by
//     default), so that an emptyDir's sizeLimit is enforced within
//     seconds.
//   - Status every 2s: tests wait on Pod and Node conditions.
func kubeletConfig(n *Node) ([]byte, error) {
	c := kubeletv1beta1.KubeletConfiguration{
		TypeMeta:                 metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "KubeletConfiguration"},
		FailCgroupV1:             ptr.To(false),
		CgroupDriver:             "cgroupfs",
		CgroupRoot:               "/" + n.netns,
		CgroupsPerQOS:            ptr.To(true),
		EnforceNodeAllocatable:   []string{"pods"},
		ContainerRuntimeEndpoint: "unix://" + n.criSocket,
		ImageServiceEndpoint:     "unix://" + n.criSocket,
		PodLogsDir:               filepath.Join(n.dir, "pod-logs"),
		Address:                  n.Addr.String(),
		Port:                     10250,
		ReadOnlyPort:             0,
		HealthzBindAddress:       "127.0.0.1",
		HealthzPort:              ptr.To[int32](10248),
		TLSCertFile:              filepath.Join(n.dir, "pki", "serving.crt"),
		TLSPrivateKeyFile:        filepath.Join(n.dir, "pki", "serving.key"),
		Authentication: kubeletv1beta1.KubeletAuthentication{
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(false)},
			X509:      kubeletv1beta1.KubeletX509Authentication{ClientCAFile: n.clientCA},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(true)},
		},
		Authorization:               kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeWebhook},
		FailSwapOn:                  ptr.To(false),
		ResolverConfig:              ptr.To(""),
		RegisterNode:                ptr.To(true),
		NodeStatusUpdateFrequency:   metav1.Duration{Duration: 2 * time.Second},
		NodeStatusReportFrequency:   metav1.Duration{Duration: 2 * time.Second},
		SyncFrequency:               metav1.Duration{Duration: 10 * time.Second},
		VolumeStatsAggPeriod:        metav1.Duration{Duration: 5 * time.Second},
		ImageGCHighThresholdPercent: ptr.To[int32](100),
		ImageGCLowThresholdPercent:  ptr.To[int32](99),
		EvictionHard: map[string]string{
			"memory.available":  cmp.Or(n.memoryEviction, "100Mi"),
			"nodefs.available":  "1%",
			"imagefs.available": "1%",
			"nodefs.inodesFree": "1%",
		},
		EvictionPressureTransitionPeriod: metav1.Duration{Duration: 5 * time.Second},
		LocalStorageCapacityIsolation:    ptr.To(true),
		// As many Pods as the bridge's IPAM has addresses (its range less
		// the network, gateway and broadcast addresses), so the scheduler
		// never sends a node a Pod it cannot address: with the default
		// (110) a hundred Pods over two nodes could stay Pending in
		// ContainerCreating, the CNI plugin out of addresses.
		MaxPods:             int32(1<<(32-n.PodCIDR.Bits()) - 3),
		SerializeImagePulls: ptr.To(false),
		StaticPodPath:       "",
	}
	return yaml.Marshal(c)
}
