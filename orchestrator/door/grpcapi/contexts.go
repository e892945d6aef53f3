package grpcapi

import (
	"context"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// CreateContext implements sandboxv1.SandboxServiceServer.
func (s *Service) CreateContext(ctx context.Context, req *sandboxv1.CreateContextRequest) (*sandboxv1.CreateContextResponse, error) {
	if err := required("sandbox ID", req.GetSandboxId()); err != nil {
		return nil, err
	}
	c, err := s.m.CreateContext(ctx, req.GetSandboxId(), req.GetLanguage(), req.GetCwd())
	if err != nil {
		return nil, s.fail(ctx, "CreateContext", err)
	}
	return &sandboxv1.CreateContextResponse{Context: contextToProto(c)}, nil
}

// ListContexts implements sandboxv1.SandboxServiceServer.
func (s *Service) ListContexts(ctx context.Context, req *sandboxv1.ListContextsRequest) (*sandboxv1.ListContextsResponse, error) {
	if err := required("sandbox ID", req.GetSandboxId()); err != nil {
		return nil, err
	}
	list, err := s.m.ListContexts(ctx, req.GetSandboxId())
	if err != nil {
		return nil, s.fail(ctx, "ListContexts", err)
	}
	resp := &sandboxv1.ListContextsResponse{Contexts: make([]*sandboxv1.Context, 0, len(list))}
	for _, c := range list {
		resp.Contexts = append(resp.Contexts, contextToProto(c))
	}
	return resp, nil
}

// RestartContext implements sandboxv1.SandboxServiceServer.
func (s *Service) RestartContext(ctx context.Context, req *sandboxv1.RestartContextRequest) (*sandboxv1.RestartContextResponse, error) {
	if err := required("sandbox ID", req.GetSandboxId()); err != nil {
		return nil, err
	}
	if err := required("context_id", req.GetContextId()); err != nil {
		return nil, err
	}
	if err := s.m.RestartContext(ctx, req.GetSandboxId(), req.GetContextId()); err != nil {
		return nil, s.fail(ctx, "RestartContext", err)
	}
	return &sandboxv1.RestartContextResponse{}, nil
}

// DeleteContext implements sandboxv1.SandboxServiceServer.
func (s *Service) DeleteContext(ctx context.Context, req *sandboxv1.DeleteContextRequest) (*sandboxv1.DeleteContextResponse, error) {
	if err := required("sandbox ID", req.GetSandboxId()); err != nil {
		return nil, err
	}
	if err := required("context_id", req.GetContextId()); err != nil {
		return nil, err
	}
	if err := s.m.DeleteContext(ctx, req.GetSandboxId(), req.GetContextId()); err != nil {
		return nil, s.fail(ctx, "DeleteContext", err)
	}
	return &sandboxv1.DeleteContextResponse{}, nil
}

// contextToProto converts a context; its strings come from the sandbox's
// contexts file (sanitised by iolog), so they are made valid UTF-8 too.
func contextToProto(c core.ContextInfo) *sandboxv1.Context {
	return &sandboxv1.Context{
		ContextId: validUTF8(c.ID),
		Language:  validUTF8(c.Language),
		Cwd:       validUTF8(c.Cwd),
		CreatedAt: timestampToProto(c.CreatedAt),
	}
}
