package grpcapi

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

func TestSetSandboxTimeout(t *testing.T) {
	var gotD time.Duration
	fake := &fakeManager{SetTimeoutFunc: func(_ context.Context, id string, d time.Duration) (core.Sandbox, error) {
		switch {
		case id == sb2:
			return core.Sandbox{}, fmt.Errorf("sandbox %s not found: %w", id, core.ErrNotFound)
		case d > 24*time.Hour:
			return core.Sandbox{}, fmt.Errorf("idle timeout %v exceeds the server's maximum of 24h0m0s: %w", d, core.ErrInvalidArgument)
		}
		gotD = d
		return core.Sandbox{ID: id, UserID: "u", State: core.StateRunning, CreatedAt: t0, LastActiveAt: t0,
			ExpiresAt: t0.Add(d), IdleTimeout: d, Metadata: map[string]string{"k": "v\xff"}}, nil
	}}
	env := newTestEnv(t, fake)
	ctx := testCtx(t)
	resp, err := env.client.SetSandboxTimeout(ctx, &sandboxv1.SetSandboxTimeoutRequest{SandboxId: sb1, Timeout: durationpb.New(90 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	sb := resp.GetSandbox()
	if gotD != 90*time.Minute || sb.GetIdleTimeout().AsDuration() != 90*time.Minute || !sb.GetExpiresAt().AsTime().Equal(t0.Add(90*time.Minute)) {
		t.Errorf("domain got %v; response %v", gotD, sb)
	}
	if sb.GetMetadata()["k"] != "v\uFFFD" {
		t.Errorf("metadata not sanitised: %q", sb.GetMetadata())
	}
	for _, c := range []struct {
		name string
		req  *sandboxv1.SetSandboxTimeoutRequest
		want codes.Code
	}{
		{"no sandbox ID", &sandboxv1.SetSandboxTimeoutRequest{Timeout: durationpb.New(time.Minute)}, codes.InvalidArgument},
		{"no timeout", &sandboxv1.SetSandboxTimeoutRequest{SandboxId: sb1}, codes.InvalidArgument},
		{"malformed timeout", &sandboxv1.SetSandboxTimeoutRequest{SandboxId: sb1, Timeout: &durationpb.Duration{Seconds: 1, Nanos: -1}}, codes.InvalidArgument},
		{"malformed ID", &sandboxv1.SetSandboxTimeoutRequest{SandboxId: "x/y", Timeout: durationpb.New(time.Minute)}, codes.InvalidArgument},
		{"above the maximum", &sandboxv1.SetSandboxTimeoutRequest{SandboxId: sb1, Timeout: durationpb.New(25 * time.Hour)}, codes.InvalidArgument},
		{"unknown", &sandboxv1.SetSandboxTimeoutRequest{SandboxId: sb2, Timeout: durationpb.New(time.Minute)}, codes.NotFound},
	} {
		if _, err := env.client.SetSandboxTimeout(ctx, c.req); status.Code(err) != c.want {
			t.Errorf("%s: %v; want %v", c.name, err, c.want)
		}
	}
}

func TestAcquireLifetimeOptions(t *testing.T) {
	var got core.Options
	fake := &fakeManager{AcquireFunc: func(_ context.Context, _ string, opts core.Options) (core.AcquireResult, error) {
		got = opts
		return core.AcquireResult{Sandbox: core.Sandbox{ID: sb1, Metadata: opts.Metadata, IdleTimeout: opts.IdleTimeout}, Created: true}, nil
	}}
	env := newTestEnv(t, fake)
	ctx := testCtx(t)
	md := map[string]string{"project": "alpha"}
	resp, err := env.client.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: "u", Options: &sandboxv1.SandboxOptions{
		Metadata: md, IdleTimeout: durationpb.New(2 * time.Hour)}})
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got.Metadata, md) || got.IdleTimeout != 2*time.Hour {
		t.Errorf("domain got %+v", got)
	}
	if !maps.Equal(resp.GetSandbox().GetMetadata(), md) || resp.GetSandbox().GetIdleTimeout().AsDuration() != 2*time.Hour {
		t.Errorf("response %v", resp.GetSandbox())
	}
	for name, d := range map[string]*durationpb.Duration{"zero": {}, "malformed": {Seconds: -1, Nanos: 1}} {
		_, err := env.client.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: "u", Options: &sandboxv1.SandboxOptions{IdleTimeout: d}})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s idle_timeout: %v; want InvalidArgument", name, err)
		}
	}
	// on_idle both ways; a value outside the enum is InvalidArgument.
	fake.AcquireFunc = func(_ context.Context, _ string, opts core.Options) (core.AcquireResult, error) {
		got = opts
		return core.AcquireResult{Sandbox: core.Sandbox{ID: sb1, OnIdle: cmp.Or(opts.OnIdle, core.OnIdleDelete)}, Created: true}, nil
	}
	for in, want := range map[sandboxv1.IdleAction]string{
		sandboxv1.IdleAction_IDLE_ACTION_UNSPECIFIED: "",
		sandboxv1.IdleAction_IDLE_ACTION_HIBERNATE:   core.OnIdleHibernate,
		sandboxv1.IdleAction_IDLE_ACTION_DELETE:      core.OnIdleDelete,
	} {
		resp, err := env.client.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: "u", Options: &sandboxv1.SandboxOptions{OnIdle: in}})
		if err != nil || got.OnIdle != want {
			t.Errorf("on_idle %v: domain got %q, %v; want %q", in, got.OnIdle, err, want)
			continue
		}
		if wantOut := cmp.Or(in, sandboxv1.IdleAction_IDLE_ACTION_DELETE); resp.GetSandbox().GetOnIdle() != wantOut {
			t.Errorf("on_idle %v: response says %v; want %v", in, resp.GetSandbox().GetOnIdle(), wantOut)
		}
	}
	if _, err := env.client.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: "u", Options: &sandboxv1.SandboxOptions{OnIdle: 7}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("on_idle 7: %v; want InvalidArgument", err)
	}
	// The domain's metadata rules reach the caller as InvalidArgument (the
	// fake lists through the domain's own filter validation).
	fake.ListFunc = func(context.Context, core.ListFilter) ([]core.Sandbox, error) { return nil, nil }
	if _, err := env.client.ListSandboxes(ctx, &sandboxv1.ListSandboxesRequest{Metadata: map[string]string{"bad key": "v"}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("ListSandboxes with a malformed metadata key: %v; want InvalidArgument", err)
	}
}
