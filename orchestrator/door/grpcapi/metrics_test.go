package grpcapi

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// TestGetSandboxMetrics: since reaches the domain (unset as the zero
// time), every field of a sample is converted, network only when set; a
// malformed ID or since is refused before the domain; the domain's
// not-found is NOT_FOUND.
func TestGetSandboxMetrics(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var gotSince []time.Time
	fake := &fakeManager{SandboxMetricsFunc: func(_ context.Context, id string, since time.Time) ([]core.SandboxMetrics, error) {
		if id != sb1 {
			return nil, core.SandboxNotFound(id)
		}
		gotSince = append(gotSince, since)
		return []core.SandboxMetrics{
			{Time: t0, CPUUsedCores: 0.5, CPULimitCores: 1, MemoryUsedBytes: 100, MemoryCacheBytes: 7, MemoryLimitBytes: 512 << 20,
				Workspace: core.DiskUsage{UsedBytes: 3, LimitBytes: 4}, IO: core.DiskUsage{UsedBytes: 5, LimitBytes: 6}, Pids: 9, PidsLimit: 256},
			{Time: t0.Add(5 * time.Second), Network: &core.NetworkBytes{In: 11, Out: 12}},
		}, nil
	}}
	env := newTestEnv(t, fake)
	ctx := testCtx(t)
	r, err := env.client.GetSandboxMetrics(ctx, &sandboxv1.GetSandboxMetricsRequest{SandboxId: sb1})
	if err != nil {
		t.Fatal(err)
	}
	want := []*sandboxv1.SandboxMetricsSample{
		{Time: timestamppb.New(t0), CpuUsedCores: 0.5, CpuLimitCores: 1, MemoryUsedBytes: 100, MemoryCacheBytes: 7, MemoryLimitBytes: 512 << 20,
			Workspace: &sandboxv1.DiskUsage{UsedBytes: 3, LimitBytes: 4}, Io: &sandboxv1.DiskUsage{UsedBytes: 5, LimitBytes: 6}, Pids: 9, PidsLimit: 256},
		{Time: timestamppb.New(t0.Add(5 * time.Second)), Workspace: &sandboxv1.DiskUsage{}, Io: &sandboxv1.DiskUsage{},
			Network: &sandboxv1.NetworkBytes{BytesIn: 11, BytesOut: 12}},
	}
	if diff := cmp.Diff(want, r.GetSamples(), protocmp.Transform()); diff != "" {
		t.Errorf("samples (-want +got):\n%s", diff)
	}
	if _, err := env.client.GetSandboxMetrics(ctx, &sandboxv1.GetSandboxMetricsRequest{SandboxId: sb1, Since: timestamppb.New(t0)}); err != nil {
		t.Fatal(err)
	}
	if len(gotSince) != 2 || !gotSince[0].IsZero() || !gotSince[1].Equal(t0) {
		t.Errorf("since reaching the domain: %v", gotSince)
	}
	calls := len(fake.Calls())
	for _, c := range []struct {
		req  *sandboxv1.GetSandboxMetricsRequest
		code codes.Code
		msg  string
	}{
		{&sandboxv1.GetSandboxMetricsRequest{}, codes.InvalidArgument, "sandbox ID is empty"},
		{&sandboxv1.GetSandboxMetricsRequest{SandboxId: "nope"}, codes.InvalidArgument, `"nope"`},
		{&sandboxv1.GetSandboxMetricsRequest{SandboxId: sb1, Since: &timestamppb.Timestamp{Nanos: -1}}, codes.InvalidArgument, "since"},
	} {
		_, err := env.client.GetSandboxMetrics(ctx, c.req)
		if status.Code(err) != c.code || !strings.Contains(status.Convert(err).Message(), c.msg) {
			t.Errorf("%v: %v; want %v with %s", c.req, err, c.code, c.msg)
		}
	}
	if n := len(fake.Calls()); n != calls {
		t.Errorf("refused requests reached the domain: %v", fake.Calls()[calls:])
	}
	if _, err := env.client.GetSandboxMetrics(ctx, &sandboxv1.GetSandboxMetricsRequest{SandboxId: sb2}); status.Code(err) != codes.NotFound {
		t.Errorf("unknown sandbox: %v; want NOT_FOUND", err)
	}
}
