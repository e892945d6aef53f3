package web

import (
	"context"
	"fmt"
	"html/template"
	"time"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// The conversation's sandbox as the trace column shows it: its CPU and
// memory from sandboxd's newest metrics sample (GetSandboxMetrics), at page
// load and every sandboxRefresh on the event stream.

// SandboxMetrics reads a sandbox's metrics samples; *client.Client is the
// real one.
type SandboxMetrics interface {
	SandboxMetrics(ctx context.Context, sandboxID string, since time.Time) ([]*sandboxv1.SandboxMetricsSample, error)
}

const (
	// sandboxRefresh is how often an open page's figures are refreshed:
	// sandboxd's default sampling interval.
	sandboxRefresh = 5 * time.Second
	// sandboxTimeout bounds one read of them; a slow sandboxd leaves the
	// figures as they were rather than holding the page.
	sandboxTimeout = 2 * time.Second
)

// sandboxView is what the "sandbox" template shows.
type sandboxView struct {
	ID                    string
	CPUPercent, CPULimit  float64
	MemUsed, MemLimit     string
	HaveSample, MemLimits bool
}

// sandboxHTML renders sandboxID's newest sample; empty without a sandbox,
// without metrics or when they cannot be read now.
func (s *Server) sandboxHTML(ctx context.Context, sandboxID string) template.HTML {
	if s.metrics == nil || sandboxID == "" {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, sandboxTimeout)
	defer cancel()
	// Only the last minute: the newest sample is all the page shows.
	samples, err := s.metrics.SandboxMetrics(ctx, sandboxID, time.Now().Add(-time.Minute))
	if err != nil {
		s.log.Debug("sandbox metrics", "sandbox_id", sandboxID, "error", err)
		return ""
	}
	v := sandboxView{ID: sandboxID}
	if n := len(samples); n > 0 {
		m := samples[n-1]
		v.HaveSample, v.CPULimit = true, m.GetCpuLimitCores()
		v.CPUPercent = 100 * m.GetCpuUsedCores()
		if v.CPULimit > 0 {
			v.CPUPercent /= v.CPULimit
		}
		v.MemUsed, v.MemLimit, v.MemLimits = mebibytes(m.GetMemoryUsedBytes()), mebibytes(m.GetMemoryLimitBytes()), m.GetMemoryLimitBytes() > 0
	}
	h, err := s.renderHTML("sandbox", v)
	if err != nil {
		s.log.Warn("rendering the sandbox's figures", "error", err)
		return ""
	}
	return h
}

func mebibytes(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }
