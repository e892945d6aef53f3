package grpcapi

import (
	"context"
	"errors"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sandboxd/sandboxd/orchestrator/audit"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// AuditReader answers ListAuditEvents (audit.Log implements it). It
// scopes the answer to the caller in ctx (core.CallerOf): the door only
// checks the request's shape.
type AuditReader interface {
	Query(ctx context.Context, f audit.Filter) (audit.Page, error)
}

// WithAudit serves ListAuditEvents from r. Without it the RPC answers
// FAILED_PRECONDITION: the trail is off.
func WithAudit(r AuditReader) Option {
	return func(o *serverOptions) { o.audit = r }
}

// ListAuditEvents implements sandboxv1.SandboxServiceServer.
func (s *Service) ListAuditEvents(ctx context.Context, req *sandboxv1.ListAuditEventsRequest) (*sandboxv1.ListAuditEventsResponse, error) {
	if s.audit == nil {
		return nil, status.Error(codes.FailedPrecondition, "the audit trail is off on this server (sandboxd --audit=false)")
	}
	f := audit.Filter{Tenant: req.GetTenant(), SandboxID: req.GetSandboxId(), Action: req.GetAction(),
		PageSize: int(req.GetPageSize()), PageToken: req.GetPageToken()}
	if f.Tenant != "" {
		if err := core.ValidateTenant(f.Tenant); err != nil {
			return nil, s.fail(ctx, "ListAuditEvents", err)
		}
	}
	if f.Action != "" && !slices.Contains(audit.Actions, f.Action) {
		return nil, invalid("action %q is not one of %s", core.Truncate(f.Action, 32), strings.Join(audit.Actions, ", "))
	}
	for name, t := range map[string]*timestamppb.Timestamp{"since": req.GetSince(), "until": req.GetUntil()} {
		if t != nil && t.CheckValid() != nil {
			return nil, invalid("%s is not a valid timestamp", name)
		}
	}
	if req.GetSince() != nil {
		f.Since = req.GetSince().AsTime()
	}
	if req.GetUntil() != nil {
		f.Until = req.GetUntil().AsTime()
	}
	p, err := s.audit.Query(ctx, f)
	if errors.Is(err, audit.ErrOtherTenant) {
		return nil, status.Error(codes.PermissionDenied, err.Error())
	}
	if err != nil {
		return nil, s.fail(ctx, "ListAuditEvents", err)
	}
	resp := &sandboxv1.ListAuditEventsResponse{NextPageToken: p.NextPageToken}
	for _, e := range p.Events {
		resp.Events = append(resp.Events, auditEventToProto(e))
	}
	return resp, nil
}

// auditEventToProto converts a record; its strings are made valid UTF-8
// (a refused request's IDs and paths are recorded as sent).
func auditEventToProto(e audit.Event) *sandboxv1.AuditEvent {
	return &sandboxv1.AuditEvent{
		Time:         timestamppb.New(e.Time),
		Tenant:       validUTF8(e.Tenant),
		TokenName:    validUTF8(e.TokenName),
		Admin:        e.Admin,
		Action:       validUTF8(e.Action),
		SandboxId:    validUTF8(e.SandboxID),
		UserId:       validUTF8(e.UserID),
		Path:         validUTF8(e.Path),
		ToPath:       validUTF8(e.ToPath),
		CommandId:    validUTF8(e.CommandID),
		ContextId:    validUTF8(e.ContextID),
		Snapshot:     validUTF8(e.Snapshot),
		Volume:       validUTF8(e.Volume),
		Template:     validUTF8(e.Template),
		Count:        int32(e.Count),
		Language:     validUTF8(e.Language),
		Bytes:        e.Bytes,
		Outcome:      validUTF8(e.Outcome),
		Message:      validUTF8(e.Message),
		Duration:     durationpb.New(e.Duration),
		DroppedCount: e.Dropped,
	}
}
