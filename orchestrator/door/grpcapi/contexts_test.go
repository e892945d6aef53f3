package grpcapi

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

const sbX = "sb-aaaaaaaaaaaaaaaaaaaa"

func TestContextRPCs(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var restarted, deleted string
	env := newTestEnv(t, &fakeManager{
		CreateContextFunc: func(_ context.Context, sid, lang, cwd string) (core.ContextInfo, error) {
			return core.ContextInfo{ID: "ctx-1", Language: lang, Cwd: cwd, CreatedAt: created}, nil
		},
		ListContextsFunc: func(context.Context, string) ([]core.ContextInfo, error) {
			// Strings from the sandbox's contexts file are made valid UTF-8.
			return []core.ContextInfo{{ID: "default", Language: "python", Cwd: "."}, {ID: "ctx-1", Language: "python", Cwd: "d\xff"}}, nil
		},
		RestartContextFunc: func(_ context.Context, sid, cid string) error { restarted = sid + "/" + cid; return nil },
		DeleteContextFunc: func(_ context.Context, sid, cid string) error {
			deleted = sid + "/" + cid
			return core.ErrNotFound
		},
	})
	ctx := testCtx(t)
	c, err := env.client.CreateContext(ctx, &sandboxv1.CreateContextRequest{SandboxId: sbX, Language: "bash", Cwd: "proj"})
	if err != nil || c.GetContext().GetContextId() != "ctx-1" || c.GetContext().GetLanguage() != "bash" || c.GetContext().GetCwd() != "proj" || !c.GetContext().GetCreatedAt().AsTime().Equal(created) {
		t.Fatalf("CreateContext = %v, %v", c, err)
	}
	l, err := env.client.ListContexts(ctx, &sandboxv1.ListContextsRequest{SandboxId: sbX})
	if err != nil || len(l.GetContexts()) != 2 || l.GetContexts()[1].GetCwd() != "d\uFFFD" {
		t.Fatalf("ListContexts = %v, %v", l, err)
	}
	if _, err := env.client.RestartContext(ctx, &sandboxv1.RestartContextRequest{SandboxId: sbX, ContextId: "ctx-1"}); err != nil || restarted != sbX+"/ctx-1" {
		t.Fatalf("RestartContext: %v (%q)", err, restarted)
	}
	if _, err := env.client.DeleteContext(ctx, &sandboxv1.DeleteContextRequest{SandboxId: sbX, ContextId: "ctx-1"}); status.Code(err) != codes.NotFound || deleted != sbX+"/ctx-1" {
		t.Fatalf("DeleteContext of an unknown context: %v; want NOT_FOUND", err)
	}
	for name, call := range map[string]func() error{
		"create without sandbox": func() error {
			_, err := env.client.CreateContext(ctx, &sandboxv1.CreateContextRequest{})
			return err
		},
		"restart without context": func() error {
			_, err := env.client.RestartContext(ctx, &sandboxv1.RestartContextRequest{SandboxId: sbX})
			return err
		},
		"delete without context": func() error {
			_, err := env.client.DeleteContext(ctx, &sandboxv1.DeleteContextRequest{SandboxId: sbX})
			return err
		},
	} {
		if err := call(); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v; want INVALID_ARGUMENT", name, err)
		}
	}
}
