package grpcapi

import (
	"context"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"google.golang.org/protobuf/types/known/durationpb"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// CommandIDHeader is the response header Execute sends once the command
// is queued, holding its ID (the caller's, or the one generated): a
// client may send its input from then on.
const CommandIDHeader = "sandboxd-command-id"

// SandboxIDHeader is the response header RunStateless sends with
// CommandIDHeader: the sandbox the run made, deleted when it ends.
const SandboxIDHeader = "sandboxd-sandbox-id"

// ptyToDomain converts an optional PtySize (nil: none).
func ptyToDomain(p *sandboxv1.PtySize) core.PtySize {
	if p == nil {
		return core.PtySize{}
	}
	return core.PtySize{Rows: p.GetRows(), Cols: p.GetCols()}
}

// commandIDs checks a request names a sandbox and a command.
func commandIDs(sandboxID, commandID string) error {
	if err := required("sandbox ID", sandboxID); err != nil {
		return err
	}
	return required("command_id", commandID)
}

// SendStdin implements sandboxv1.SandboxServiceServer.
func (s *Service) SendStdin(ctx context.Context, req *sandboxv1.SendStdinRequest) (*sandboxv1.SendStdinResponse, error) {
	if err := commandIDs(req.GetSandboxId(), req.GetCommandId()); err != nil {
		return nil, err
	}
	if err := s.m.SendStdin(ctx, req.GetSandboxId(), req.GetCommandId(), req.GetData()); err != nil {
		return nil, s.fail(ctx, "SendStdin", err)
	}
	return &sandboxv1.SendStdinResponse{}, nil
}

// CloseStdin implements sandboxv1.SandboxServiceServer.
func (s *Service) CloseStdin(ctx context.Context, req *sandboxv1.CloseStdinRequest) (*sandboxv1.CloseStdinResponse, error) {
	if err := commandIDs(req.GetSandboxId(), req.GetCommandId()); err != nil {
		return nil, err
	}
	if err := s.m.CloseStdin(ctx, req.GetSandboxId(), req.GetCommandId()); err != nil {
		return nil, s.fail(ctx, "CloseStdin", err)
	}
	return &sandboxv1.CloseStdinResponse{}, nil
}

// ResizePty implements sandboxv1.SandboxServiceServer.
func (s *Service) ResizePty(ctx context.Context, req *sandboxv1.ResizePtyRequest) (*sandboxv1.ResizePtyResponse, error) {
	if err := commandIDs(req.GetSandboxId(), req.GetCommandId()); err != nil {
		return nil, err
	}
	if req.GetSize() == nil {
		return nil, invalid("size is unset")
	}
	if err := s.m.ResizePty(ctx, req.GetSandboxId(), req.GetCommandId(), ptyToDomain(req.GetSize())); err != nil {
		return nil, s.fail(ctx, "ResizePty", err)
	}
	return &sandboxv1.ResizePtyResponse{}, nil
}

// ListCommands implements sandboxv1.SandboxServiceServer.
func (s *Service) ListCommands(ctx context.Context, req *sandboxv1.ListCommandsRequest) (*sandboxv1.ListCommandsResponse, error) {
	if err := required("sandbox ID", req.GetSandboxId()); err != nil {
		return nil, err
	}
	page, err := s.m.ListCommands(ctx, req.GetSandboxId(), int(req.GetPageSize()), req.GetPageToken())
	if err != nil {
		return nil, s.fail(ctx, "ListCommands", err)
	}
	resp := &sandboxv1.ListCommandsResponse{NextPageToken: validUTF8(page.NextPageToken), TotalCommands: int64(page.Total)}
	for _, c := range page.Commands {
		resp.Commands = append(resp.Commands, commandInfoToProto(c))
	}
	return resp, nil
}

// commandInfoToProto converts one listed command; its strings are made
// valid UTF-8 like everything else that comes from a sandbox's files.
func commandInfoToProto(c core.CommandInfo) *sandboxv1.CommandInfo {
	info := &sandboxv1.CommandInfo{
		CommandId:       validUTF8(c.ID),
		Language:        validUTF8(c.Language),
		StartedAt:       timestampToProto(c.StartedAt),
		OutputAvailable: c.OutputAvailable,
		Stdin:           c.Stdin,
		Pty:             c.Pty,
		ContextId:       validUTF8(c.ContextID),
	}
	switch c.Phase {
	case core.CommandQueued:
		info.State = sandboxv1.CommandState_COMMAND_STATE_QUEUED
	case core.CommandRunning:
		info.State = sandboxv1.CommandState_COMMAND_STATE_RUNNING
	case core.CommandFinished:
		info.State = sandboxv1.CommandState_COMMAND_STATE_FINISHED
	}
	if c.Status != "" {
		info.Status = commandStatusToProto(c.Status)
		info.FinishedAt = timestampToProto(c.FinishedAt)
		info.Duration = durationpb.New(c.Duration)
		if c.ExitCode != nil {
			code := int32(*c.ExitCode)
			info.ExitCode = &code
		}
	}
	return info
}
