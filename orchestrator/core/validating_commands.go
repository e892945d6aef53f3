package core

import (
	"context"

	"github.com/sandboxd/sandboxd/ioproto"
)

// validatingCommands is Validating's wrapper of a Commands port.
type validatingCommands struct {
	*validator
	m Commands
}

func (v validatingCommands) Submit(ctx context.Context, req ExecRequest) (string, error) {
	if err := req.Validate(); err != nil {
		return "", err
	}
	req, err := v.p.ResolveExec(req)
	if err != nil {
		return "", err
	}
	return v.m.Submit(ctx, req)
}

func (v validatingCommands) Follow(ctx context.Context, sandboxID, commandID string, afterSeq int64, fn func(Event) error) error {
	if err := ids(sandboxID, commandID); err != nil {
		return err
	}
	release, err := v.stream(ctx, sandboxID)
	if err != nil {
		return err
	}
	defer release()
	return v.m.Follow(ctx, sandboxID, commandID, afterSeq, fn)
}

// Execute checks the request as Submit does and takes a stream as Follow
// does, both before anything is submitted: a command whose stream would
// be refused is not run.
func (v validatingCommands) Execute(ctx context.Context, req ExecRequest, submitted func(string), fn func(Event) error) error {
	if err := req.Validate(); err != nil {
		return err
	}
	req, err := v.p.ResolveExec(req)
	if err != nil {
		return err
	}
	release, err := v.stream(ctx, req.SandboxID)
	if err != nil {
		return err
	}
	defer release()
	return v.m.Execute(ctx, req, submitted, fn)
}

func (v validatingCommands) Interrupt(ctx context.Context, sandboxID, commandID string) error {
	if err := ids(sandboxID, commandID); err != nil {
		return err
	}
	return v.m.Interrupt(ctx, sandboxID, commandID)
}

func (v validatingCommands) SendStdin(ctx context.Context, sandboxID, commandID string, data []byte) error {
	if err := ids(sandboxID, commandID); err != nil {
		return err
	}
	if len(data) > MaxStdinChunk {
		return Invalidf("stdin data is %d bytes; the limit is %d per call", len(data), MaxStdinChunk)
	}
	return v.m.SendStdin(ctx, sandboxID, commandID, data)
}

func (v validatingCommands) CloseStdin(ctx context.Context, sandboxID, commandID string) error {
	if err := ids(sandboxID, commandID); err != nil {
		return err
	}
	return v.m.CloseStdin(ctx, sandboxID, commandID)
}

func (v validatingCommands) ResizePty(ctx context.Context, sandboxID, commandID string, size PtySize) error {
	if err := ids(sandboxID, commandID); err != nil {
		return err
	}
	if err := validatePtySize(size); err != nil {
		return err
	}
	return v.m.ResizePty(ctx, sandboxID, commandID, size)
}

func (v validatingCommands) ListCommands(ctx context.Context, sandboxID string, pageSize int, pageToken string) (CommandPage, error) {
	if err := ids(sandboxID); err != nil {
		return CommandPage{}, err
	}
	switch {
	case pageSize < 0 || pageSize > MaxCommandPage:
		return CommandPage{}, Invalidf("page_size %d is outside 0-%d", pageSize, MaxCommandPage)
	case pageSize == 0:
		pageSize = DefaultCommandPage
	}
	return v.m.ListCommands(ctx, sandboxID, pageSize, pageToken)
}

func (v validatingCommands) CreateContext(ctx context.Context, sandboxID, language, cwd string) (ContextInfo, error) {
	if err := ids(sandboxID); err != nil {
		return ContextInfo{}, err
	}
	if err := validateLanguage(language); err != nil {
		return ContextInfo{}, err
	}
	rel, err := CleanPath(cwd)
	if err != nil {
		return ContextInfo{}, err
	}
	if rel, err = ioproto.CleanContextCwd(rel); err != nil { // the protocol's length bound
		return ContextInfo{}, Invalidf("%v", err)
	}
	return v.m.CreateContext(ctx, sandboxID, CanonicalLanguage(language), rel)
}

func (v validatingCommands) ListContexts(ctx context.Context, sandboxID string) ([]ContextInfo, error) {
	if err := ids(sandboxID); err != nil {
		return nil, err
	}
	return v.m.ListContexts(ctx, sandboxID)
}

func (v validatingCommands) RestartContext(ctx context.Context, sandboxID, contextID string) error {
	contextID, err := contextOf(sandboxID, contextID)
	if err != nil {
		return err
	}
	return v.m.RestartContext(ctx, sandboxID, contextID)
}

func (v validatingCommands) DeleteContext(ctx context.Context, sandboxID, contextID string) error {
	contextID, err := contextOf(sandboxID, contextID)
	if err != nil {
		return err
	}
	return v.m.DeleteContext(ctx, sandboxID, contextID)
}
