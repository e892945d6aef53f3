package client

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// AuditFilter selects audit events; zero fields select all. A user
// token's Tenant may only be its own (ErrPermissionDenied otherwise).
type AuditFilter struct {
	Tenant    string
	SandboxID string
	// Action is one action, e.g. "execute" (sandboxv1.AuditEvent.action).
	Action string
	// Since and Until bound the events' time: Since <= time < Until.
	Since, Until time.Time
}

// ListAuditEvents returns one page of the audit trail, oldest first, and
// the token of the next page ("" after the last). A page may be short or
// empty and still have a token (the server bounds the work of one call):
// page until the token is empty. ErrFailedPrecondition when the server's
// trail is off.
func (c *Client) ListAuditEvents(ctx context.Context, f AuditFilter, pageSize int, pageToken string) (events []*sandboxv1.AuditEvent, next string, err error) {
	req := &sandboxv1.ListAuditEventsRequest{Tenant: f.Tenant, SandboxId: f.SandboxID, Action: f.Action,
		PageSize: int32(pageSize), PageToken: pageToken}
	if !f.Since.IsZero() {
		req.Since = timestamppb.New(f.Since)
	}
	if !f.Until.IsZero() {
		req.Until = timestamppb.New(f.Until)
	}
	r, err := c.api.ListAuditEvents(ctx, req)
	if err != nil {
		return nil, "", fmt.Errorf("listing audit events: %w", fromGRPC(err))
	}
	return r.GetEvents(), r.GetNextPageToken(), nil
}
