package core

import (
	"context"
	"time"
)

// validatingMonitoring is Validating's wrapper of a Monitoring port.
type validatingMonitoring struct {
	*validator
	m Monitoring
}

func (v validatingMonitoring) SandboxMetrics(ctx context.Context, sandboxID string, since time.Time) ([]SandboxMetrics, error) {
	if err := ids(sandboxID); err != nil {
		return nil, err
	}
	return v.m.SandboxMetrics(ctx, sandboxID, since)
}
