package kube

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// TestSandboxMetricsFromTheKubelet: a sandbox's sample is its Pod's stats
// in its node's kubelet Summary (the sandbox container's CPU and memory,
// the emptyDirs' use, the Pod's processes) with the sandbox's limits; one
// read serves a burst of calls; a kubelet that refuses, or answers more
// than maxSummaryBytes, is UNAVAILABLE with what it said. The kubelet is
// an HTTPS server of the test's; the API server is real (envtest).
func TestSandboxMetricsFromTheKubelet(t *testing.T) {
	m, cs, store := storeManager(t, "metrics-test")
	ctx := core.WithCaller(t.Context(), core.DefaultCaller)
	p, err := cs.CoreV1().Pods("metrics-test").Create(ctx, buildPod(&m.cfg, podSpec{id: core.NewSandboxID(), tenant: core.DefaultTenant, userID: "u",
		limits: core.Limits{MemoryBytes: 512 << 20, NanoCPUs: 5e8, PidsLimit: 256, DiskBytes: 1 << 30}, now: time.Now()}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, HostIP: "127.0.0.1", PodIP: "198.18.0.2",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if err := store.Add(p); err != nil {
		t.Fatal(err)
	}
	id := p.Labels[labelSandboxID]

	at := metav1.NewTime(time.Now().Truncate(time.Second))
	summary := statsv1alpha1.Summary{Pods: []statsv1alpha1.PodStats{
		{PodRef: statsv1alpha1.PodReference{Name: "other", UID: "other-uid"}},
		{PodRef: statsv1alpha1.PodReference{Name: p.Name, Namespace: p.Namespace, UID: string(p.UID)},
			Containers: []statsv1alpha1.ContainerStats{
				{Name: containerIO, CPU: &statsv1alpha1.CPUStats{Time: at, UsageNanoCores: ptr.To[uint64](9e9)}},
				{Name: containerSandbox,
					CPU:    &statsv1alpha1.CPUStats{Time: at, UsageNanoCores: ptr.To[uint64](250e6)},
					Memory: &statsv1alpha1.MemoryStats{Time: at, WorkingSetBytes: ptr.To[uint64](100 << 20), UsageBytes: ptr.To[uint64](130 << 20)}},
			},
			VolumeStats: []statsv1alpha1.VolumeStats{
				{Name: volumeWorkspace, FsStats: statsv1alpha1.FsStats{UsedBytes: ptr.To[uint64](10 << 20)}},
				{Name: volumeIO, FsStats: statsv1alpha1.FsStats{UsedBytes: ptr.To[uint64](1 << 20)}},
				{Name: volumeTmp, FsStats: statsv1alpha1.FsStats{UsedBytes: ptr.To[uint64](7)}},
			},
			ProcessStats: &statsv1alpha1.ProcessStats{ProcessCount: ptr.To[uint64](12)}},
	}}
	var requests atomic.Int32
	var answer atomic.Value // func(http.ResponseWriter)
	answer.Store(func(w http.ResponseWriter) { _ = json.NewEncoder(w).Encode(summary) })
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if r.URL.Path != "/stats/summary" {
			http.NotFound(w, r)
			return
		}
		answer.Load().(func(http.ResponseWriter))(w)
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	n, _ := strconv.Atoi(port)
	m.stats = newKubeletStats(srv.Client().Transport, n)

	got, err := m.SandboxMetrics(ctx, id, time.Time{})
	if err != nil || len(got) != 1 {
		t.Fatalf("SandboxMetrics: %v, %v; want one sample", got, err)
	}
	want := core.SandboxMetrics{Time: at.Time, CPUUsedCores: 0.25, CPULimitCores: 0.5, MemoryUsedBytes: 100 << 20, MemoryCacheBytes: 30 << 20,
		MemoryLimitBytes: 512 << 20, Workspace: core.DiskUsage{UsedBytes: 10 << 20, LimitBytes: 1 << 30},
		IO: core.DiskUsage{UsedBytes: 1 << 20, LimitBytes: m.cfg.IODiskBytes}, Pids: 12, PidsLimit: 256}
	if g := got[0]; !g.Time.Equal(want.Time) || g.CPUUsedCores != want.CPUUsedCores || g.CPULimitCores != want.CPULimitCores ||
		g.MemoryUsedBytes != want.MemoryUsedBytes || g.MemoryCacheBytes != want.MemoryCacheBytes || g.MemoryLimitBytes != want.MemoryLimitBytes ||
		g.Workspace != want.Workspace || g.IO != want.IO || g.Pids != want.Pids || g.PidsLimit != want.PidsLimit {
		t.Errorf("sample\n%+v\nwant\n%+v", g, want)
	}
	if got, err := m.SandboxMetrics(ctx, id, at.Time); err != nil || len(got) != 0 {
		t.Errorf("SandboxMetrics since the sample: %v, %v; want none", got, err)
	}
	for range 10 {
		_, _ = m.SandboxMetrics(ctx, id, time.Time{})
	}
	if r := requests.Load(); r != 1 {
		t.Errorf("12 calls made %d requests to the kubelet; want 1 (its read is kept)", r)
	}
	if _, err := m.SandboxMetrics(ctx, "sb-zzzzzzzzzzzzzzzzzzzz", time.Time{}); core.ClassOf(err) != core.ErrNotFound {
		t.Errorf("an unknown sandbox's metrics: %v; want NOT_FOUND", err)
	}

	for _, tc := range []struct {
		name, want string
		answer     func(http.ResponseWriter)
	}{
		{"refused", "nodes/stats", func(w http.ResponseWriter) {
			http.Error(w, "Forbidden (user=system:serviceaccount:sandboxd:sandboxd, verb=get, resource=nodes, subresource=stats)", http.StatusForbidden)
		}},
		{"huge", "its summary", func(w http.ResponseWriter) {
			_, _ = w.Write([]byte(`{"pods": [{"podRef": {"name": "` + strings.Repeat("x", maxSummaryBytes) + `"}}]}`))
		}},
		{"garbage", "its summary", func(w http.ResponseWriter) { _, _ = w.Write([]byte("\xff\xfe not json")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answer.Store(tc.answer)
			m.stats.reads.DeleteAll()
			_, err := m.SandboxMetrics(ctx, id, time.Time{})
			if core.ClassOf(err) != core.ErrUnavailable || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("SandboxMetrics: %v; want UNAVAILABLE saying %q", err, tc.want)
			}
		})
	}
	// A kubelet that does not answer: the caller that gives up is not
	// held for the read's own bound (it goes on for the others).
	release := make(chan struct{})
	defer close(release)
	answer.Store(func(http.ResponseWriter) { <-release })
	m.stats.reads.DeleteAll()
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := m.SandboxMetrics(cctx, id, time.Time{}); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > summaryTimeout/2 {
		t.Errorf("SandboxMetrics of a stalled kubelet with a 200 ms context: %v after %v; want the context's end, at once", err, time.Since(start))
	}
}
