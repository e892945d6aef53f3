//go:build linux

package node

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Memory pressure on a node that shares its machine.
//
// A kubelet's memory.available signal is the machine's (capacity less the
// root cgroup's working set), which every node here shares with the rest
// of the machine: a test cannot fill the machine to make one node evict.
// Instead it moves one node's threshold to just below what is available
// now (SetMemoryEviction, MemoryAvailable), so that the next few GiB a
// sandbox on that node allocates put the node under real memory pressure,
// which its real eviction manager acts on as on any node.

// MemoryAvailable is the machine's available memory as a kubelet's eviction
// manager computes it under cgroup v1: MemTotal less the root memory
// cgroup's working set (its usage less its inactive file pages).
func MemoryAvailable() (int64, error) {
	total, err := memTotal()
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile("/sys/fs/cgroup/memory/memory.usage_in_bytes")
	if err != nil {
		return 0, err
	}
	usage, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("memory.usage_in_bytes: %w", err)
	}
	stat, err := os.ReadFile("/sys/fs/cgroup/memory/memory.stat")
	if err != nil {
		return 0, err
	}
	var inactive int64
	sc := bufio.NewScanner(bytes.NewReader(stat))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "total_inactive_file "); ok {
			inactive, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return total - max(0, usage-inactive), nil
}

// memTotal is /proc/meminfo's MemTotal, in bytes.
func memTotal() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kib << 10, err
		}
	}
	return 0, fmt.Errorf("/proc/meminfo has no MemTotal")
}

// SetMemoryEviction restarts node name's kubelet with memory.available's
// hard eviction threshold set to bytes (0: this package's default, 100Mi),
// its Pods left running as a kubelet restart leaves them, and waits until
// the node is Ready again.
func (c *Cluster) SetMemoryEviction(ctx context.Context, name string, bytes int64) error {
	n := c.Node(name)
	if n == nil || n.lost {
		return fmt.Errorf("no running node %q", name)
	}
	n.memoryEviction = ""
	if bytes > 0 {
		n.memoryEviction = strconv.FormatInt(bytes, 10)
	}
	n.kubelet.stop(10 * time.Second)
	if err := c.startKubelet(n); err != nil {
		return err
	}
	// The Node is Ready from its last status until the grace period
	// passes: wait for the new kubelet to have reported.
	start := time.Now()
	for time.Since(start) < time.Minute {
		if err := ctx.Err(); err != nil {
			return err
		}
		if nd, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err == nil {
			for _, cond := range nd.Status.Conditions {
				// Heartbeats are kept to the second.
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue && cond.LastHeartbeatTime.After(start.Add(time.Second)) {
					return nil
				}
			}
		}
		if n.kubelet.exited() {
			return fmt.Errorf("the kubelet exited: %v\n%s", n.kubelet.err, n.kubelet.tail())
		}
		time.Sleep(200 * time.Millisecond) // polling the API server
	}
	return fmt.Errorf("node %s not Ready a minute after its kubelet restarted; its log ends:\n%s", name, n.kubelet.tail())
}
