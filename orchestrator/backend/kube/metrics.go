package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/jellydator/ttlcache/v3"
	corev1 "k8s.io/api/core/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Per-sandbox metrics on this backend come from the kubelet that runs the
// sandbox's Pod: its Summary API (/stats/summary), the numbers the
// kubelet's own eviction manager and metrics-server use (the container's
// CPU rate and working set from its cgroup, the emptyDirs' use, the Pod's
// processes). A replica reads a node's Summary directly from its kubelet
// at the Pod's status.hostIP (Config.KubeletPort), as sandboxd (its
// kubeconfig's or service account's credentials; the kubelet authorises
// nodes/stats get), checking the kubelet's serving certificate
// (Config.KubeletTransport: --kube-kubelet-ca-file, else the cluster's CA).
// One read answers for every Pod of the node and is kept for summaryFresh,
// failures included, so that a burst of calls (sandboxctl top, a
// dashboard) costs one request per node. There is no history: replicas
// keep no state, so SandboxMetrics returns the current sample only.
//
// The kubelet is the cluster's, not the sandbox's, but its answer is
// bounded (maxSummaryBytes, summaryTimeout) before it is read.
const (
	summaryFresh    = 2 * time.Second
	summaryTimeout  = 5 * time.Second
	maxSummaryBytes = 32 << 20
	// summaryNodes bounds the nodes whose reads are kept.
	summaryNodes = 4096
)

// summaryRead is one read of a node's Summary, or why it failed.
type summaryRead struct {
	pods map[string]*statsv1alpha1.PodStats // by Pod UID
	err  error
}

// get returns node host's read, kept or made now (one at a time per
// node, bounded by the read's own timeout). A caller whose ctx ends
// stops waiting for it; the read goes on for the others.
func (k *kubeletStats) get(ctx context.Context, host string) (*ttlcache.Item[string, summaryRead], error) {
	ch := make(chan *ttlcache.Item[string, summaryRead], 1)
	go func() { ch <- k.reads.Get(host) }()
	select {
	case item := <-ch:
		return item, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// kubeletStats reads and keeps the nodes' Summaries.
type kubeletStats struct {
	client *http.Client
	port   int
	reads  *ttlcache.Cache[string, summaryRead] // node address → its read
}

func newKubeletStats(rt http.RoundTripper, port int) *kubeletStats {
	k := &kubeletStats{client: &http.Client{Transport: rt, Timeout: summaryTimeout}, port: port}
	k.reads = ttlcache.New(
		ttlcache.WithTTL[string, summaryRead](summaryFresh),
		ttlcache.WithCapacity[string, summaryRead](summaryNodes),
		ttlcache.WithDisableTouchOnHit[string, summaryRead](),
		// One request per node in flight, whatever the callers.
		ttlcache.WithLoader[string, summaryRead](ttlcache.NewSuppressedLoader[string, summaryRead](
			ttlcache.LoaderFunc[string, summaryRead](func(c *ttlcache.Cache[string, summaryRead], addr string) *ttlcache.Item[string, summaryRead] {
				return c.Set(addr, k.read(addr), ttlcache.DefaultTTL)
			}), nil)),
	)
	return k
}

// read asks the kubelet at addr for its Summary.
func (k *kubeletStats) read(addr string) summaryRead {
	ctx, cancel := context.WithTimeout(context.Background(), summaryTimeout)
	defer cancel()
	url := "https://" + net.JoinHostPort(addr, strconv.Itoa(k.port)) + "/stats/summary"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return summaryRead{err: err}
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return summaryRead{err: fmt.Errorf("the kubelet at %s: %w", addr, err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		why := ""
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			why = " (sandboxd needs nodes/stats get: deploy/kubernetes' ClusterRole)"
		}
		return summaryRead{err: fmt.Errorf("the kubelet at %s answered %s%s: %s", addr, resp.Status, why, truncate(string(msg), 256))}
	}
	var s statsv1alpha1.Summary
	body := io.LimitReader(resp.Body, maxSummaryBytes+1)
	dec := json.NewDecoder(body)
	if err := dec.Decode(&s); err != nil {
		return summaryRead{err: fmt.Errorf("the kubelet at %s: its summary: %w", addr, err)}
	}
	r := summaryRead{pods: make(map[string]*statsv1alpha1.PodStats, len(s.Pods))}
	for i := range s.Pods {
		r.pods[s.Pods[i].PodRef.UID] = &s.Pods[i]
	}
	return r
}

// SandboxMetrics returns the current sample of sandbox id's resource use,
// from the kubelet running its Pod (one sample: see above). A dead
// sandbox has none; a kubelet that cannot be read is UNAVAILABLE.
func (m *Manager) SandboxMetrics(ctx context.Context, id string, since time.Time) ([]core.SandboxMetrics, error) {
	p, _, err := m.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	if m.stats == nil {
		return nil, unsupported(featMetrics)
	}
	if p == nil {
		return nil, nil // hibernated: nothing runs
	}
	if _, dead, _, _ := podState(p); dead || p.Status.HostIP == "" {
		return nil, nil // dead, or not on a node yet
	}
	item, err := m.stats.get(ctx, p.Status.HostIP)
	if err != nil {
		return nil, err
	}
	if item == nil {
		return nil, core.Errorf(core.ErrUnavailable, "the metrics of sandbox %s: its node's kubelet could not be read", id)
	}
	r := item.Value()
	if r.err != nil {
		return nil, core.Errorf(core.ErrUnavailable, "the metrics of sandbox %s: %v", id, r.err)
	}
	ps := r.pods[string(p.UID)]
	if ps == nil {
		return nil, nil // the kubelet has not measured it yet
	}
	s := sampleOf(p, ps, m.sandboxOf(p).Limits)
	if !s.Time.After(since) {
		return nil, nil
	}
	return []core.SandboxMetrics{s}, nil
}

// sampleOf converts the kubelet's stats of Pod p into a sample.
func sampleOf(p *corev1.Pod, ps *statsv1alpha1.PodStats, l core.Limits) core.SandboxMetrics {
	s := core.SandboxMetrics{
		CPULimitCores: float64(l.NanoCPUs) / 1e9, MemoryLimitBytes: l.MemoryBytes, PidsLimit: l.PidsLimit,
	}
	for _, c := range ps.Containers {
		if c.Name != containerSandbox {
			continue
		}
		if cpu := c.CPU; cpu != nil {
			s.Time = cpu.Time.Time
			if cpu.UsageNanoCores != nil {
				s.CPUUsedCores = float64(*cpu.UsageNanoCores) / 1e9
			}
		}
		if mem := c.Memory; mem != nil {
			if s.Time.IsZero() {
				s.Time = mem.Time.Time
			}
			if mem.WorkingSetBytes != nil {
				s.MemoryUsedBytes = int64(min(*mem.WorkingSetBytes, 1<<62))
			}
			if mem.UsageBytes != nil && mem.WorkingSetBytes != nil && *mem.UsageBytes > *mem.WorkingSetBytes {
				s.MemoryCacheBytes = int64(min(*mem.UsageBytes-*mem.WorkingSetBytes, 1<<62))
			}
		}
	}
	for _, v := range ps.VolumeStats {
		var d *core.DiskUsage
		switch v.Name {
		case volumeWorkspace:
			d, s.Workspace.LimitBytes = &s.Workspace, l.DiskBytes
		case volumeIO:
			d = &s.IO
			if q := ioSizeLimit(p); q > 0 {
				s.IO.LimitBytes = q
			}
		default:
			continue
		}
		if v.UsedBytes != nil {
			d.UsedBytes = int64(min(*v.UsedBytes, 1<<62))
		}
	}
	if ps.ProcessStats != nil && ps.ProcessStats.ProcessCount != nil {
		s.Pids = int64(min(*ps.ProcessStats.ProcessCount, 1<<62))
	}
	if s.Time.IsZero() {
		s.Time = time.Now()
	}
	return s
}

// ioSizeLimit is the sizeLimit of Pod p's /io volume (0: none).
func ioSizeLimit(p *corev1.Pod) int64 {
	for _, v := range p.Spec.Volumes {
		if v.Name == volumeIO && v.EmptyDir != nil && v.EmptyDir.SizeLimit != nil {
			return v.EmptyDir.SizeLimit.Value()
		}
	}
	return 0
}
