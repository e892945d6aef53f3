package grpcapi

import (
	"context"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// GetSandboxMetrics implements sandboxv1.SandboxServiceServer. An unset
// since asks for every sample kept; a malformed one is refused rather
// than read as the epoch.
func (s *Service) GetSandboxMetrics(ctx context.Context, req *sandboxv1.GetSandboxMetricsRequest) (*sandboxv1.GetSandboxMetricsResponse, error) {
	if err := required("sandbox ID", req.GetSandboxId()); err != nil {
		return nil, err
	}
	var since time.Time
	if ts := req.GetSince(); ts != nil {
		if err := ts.CheckValid(); err != nil {
			return nil, invalid("since: %v", err)
		}
		since = ts.AsTime()
	}
	samples, err := s.m.SandboxMetrics(ctx, req.GetSandboxId(), since)
	if err != nil {
		return nil, s.fail(ctx, "GetSandboxMetrics", err)
	}
	resp := &sandboxv1.GetSandboxMetricsResponse{Samples: make([]*sandboxv1.SandboxMetricsSample, 0, len(samples))}
	for _, m := range samples {
		resp.Samples = append(resp.Samples, metricsToProto(m))
	}
	return resp, nil
}

// metricsToProto converts one sample.
func metricsToProto(m core.SandboxMetrics) *sandboxv1.SandboxMetricsSample {
	out := &sandboxv1.SandboxMetricsSample{
		Time:             timestampToProto(m.Time),
		CpuUsedCores:     m.CPUUsedCores,
		CpuLimitCores:    m.CPULimitCores,
		MemoryUsedBytes:  m.MemoryUsedBytes,
		MemoryCacheBytes: m.MemoryCacheBytes,
		MemoryLimitBytes: m.MemoryLimitBytes,
		Workspace:        &sandboxv1.DiskUsage{UsedBytes: m.Workspace.UsedBytes, LimitBytes: m.Workspace.LimitBytes},
		Io:               &sandboxv1.DiskUsage{UsedBytes: m.IO.UsedBytes, LimitBytes: m.IO.LimitBytes},
		Pids:             m.Pids,
		PidsLimit:        m.PidsLimit,
	}
	if m.Network != nil {
		out.Network = &sandboxv1.NetworkBytes{BytesIn: m.Network.In, BytesOut: m.Network.Out}
	}
	return out
}
