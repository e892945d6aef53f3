package grpcapi

import (
	"context"

	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// CreateSnapshot implements sandboxv1.SandboxServiceServer.
func (s *Service) CreateSnapshot(ctx context.Context, req *sandboxv1.CreateSnapshotRequest) (*sandboxv1.CreateSnapshotResponse, error) {
	if err := required("sandbox ID", req.GetSandboxId()); err != nil {
		return nil, err
	}
	snap, err := s.m.CreateSnapshot(ctx, req.GetSandboxId(), req.GetName())
	if err != nil {
		return nil, s.fail(ctx, "CreateSnapshot", err)
	}
	return &sandboxv1.CreateSnapshotResponse{Snapshot: namedSnapshotToProto(snap)}, nil
}

// ListSnapshots implements sandboxv1.SandboxServiceServer.
func (s *Service) ListSnapshots(ctx context.Context, req *sandboxv1.ListSnapshotsRequest) (*sandboxv1.ListSnapshotsResponse, error) {
	snaps, err := s.m.ListSnapshots(ctx, core.SnapshotFilter{Tenant: req.GetTenant(), SandboxID: req.GetSandboxId()})
	if err != nil {
		return nil, s.fail(ctx, "ListSnapshots", err)
	}
	out := &sandboxv1.ListSnapshotsResponse{Snapshots: make([]*sandboxv1.Snapshot, 0, len(snaps))}
	for _, sn := range snaps {
		out.Snapshots = append(out.Snapshots, namedSnapshotToProto(sn))
	}
	return out, nil
}

// DeleteSnapshot implements sandboxv1.SandboxServiceServer.
func (s *Service) DeleteSnapshot(ctx context.Context, req *sandboxv1.DeleteSnapshotRequest) (*sandboxv1.DeleteSnapshotResponse, error) {
	if err := required("snapshot", req.GetSnapshot()); err != nil {
		return nil, err
	}
	if err := s.m.DeleteSnapshot(ctx, req.GetSnapshot()); err != nil {
		return nil, s.fail(ctx, "DeleteSnapshot", err)
	}
	return &sandboxv1.DeleteSnapshotResponse{}, nil
}

// ForkSandbox implements sandboxv1.SandboxServiceServer. Each fork's
// failure is in its result, as a status code and message mapped as any
// call's error is.
func (s *Service) ForkSandbox(ctx context.Context, req *sandboxv1.ForkSandboxRequest) (*sandboxv1.ForkSandboxResponse, error) {
	if err := required("sandbox ID", req.GetSandboxId()); err != nil {
		return nil, err
	}
	fr := core.ForkRequest{Count: int(req.GetCount()), UserIDs: req.GetUserIds()}
	if o := req.GetOptions(); o != nil {
		opts, err := acquireOptionsFromProto(o)
		if err != nil {
			return nil, err
		}
		fr.Options = &opts
	}
	results, err := s.m.Fork(ctx, req.GetSandboxId(), fr)
	if err != nil {
		return nil, s.fail(ctx, "ForkSandbox", err)
	}
	out := &sandboxv1.ForkSandboxResponse{Results: make([]*sandboxv1.ForkResult, 0, len(results))}
	for _, r := range results {
		if r.Err != nil {
			st := status.Convert(toStatus(ctx, s.log, "ForkSandbox", r.Err))
			out.Results = append(out.Results, &sandboxv1.ForkResult{ErrorCode: int32(st.Code()), ErrorMessage: validUTF8(st.Message())})
			continue
		}
		out.Results = append(out.Results, &sandboxv1.ForkResult{Sandbox: sandboxToProto(r.Sandbox), Woke: wakeToProto(r.Woke)})
	}
	return out, nil
}

func namedSnapshotToProto(s core.Snapshot) *sandboxv1.Snapshot {
	return &sandboxv1.Snapshot{
		SnapshotId: s.ID,
		Name:       validUTF8(s.Name),
		Tenant:     validUTF8(s.Tenant),
		SandboxId:  s.SandboxID,
		Level:      s.Level,
		Reason:     validUTF8(s.Reason),
		SizeBytes:  s.Bytes,
		CreatedAt:  timestampToProto(s.CreatedAt),
	}
}
