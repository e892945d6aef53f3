package client

import (
	"context"
	"fmt"
	"time"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"

	"google.golang.org/protobuf/types/known/timestamppb"
)

// SandboxMetrics returns the samples of a sandbox's resource use taken
// after since (zero: every sample kept, the last 10 minutes), oldest
// first. A poller passes the time of the newest sample it has.
func (c *Client) SandboxMetrics(ctx context.Context, sandboxID string, since time.Time) ([]*sandboxv1.SandboxMetricsSample, error) {
	req := &sandboxv1.GetSandboxMetricsRequest{SandboxId: sandboxID}
	if !since.IsZero() {
		req.Since = timestamppb.New(since)
	}
	r, err := c.api.GetSandboxMetrics(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("getting the metrics of sandbox %s: %w", sandboxID, fromGRPC(err))
	}
	return r.GetSamples(), nil
}
