package core_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
)

const sb = "sb-aaaaaaaaaaaaaaaaaaaa"

// TestValidatingPathRule: every field naming a sandbox path takes the same
// forms (relative to /workspace, or absolute under it) and reaches the
// backend in one clean relative form; a context's working directory is
// one of them.
func TestValidatingPathRule(t *testing.T) {
	var got []string
	fake := &coretest.Manager{
		CreateContextFunc: func(_ context.Context, _, language, cwd string) (core.ContextInfo, error) {
			got = append(got, language+" "+cwd)
			return core.ContextInfo{}, nil
		},
		ListFilesFunc: func(_ context.Context, _, path string) ([]core.FileInfo, error) {
			got = append(got, "ls "+path)
			return nil, nil
		},
	}
	m := core.Validating(fake, core.DefaultPolicy())
	ctx := t.Context()
	for _, cwd := range []string{"", ".", "/workspace", "/workspace/", "proj/a", "/workspace/proj/a", "./proj//a/"} {
		if _, err := m.CreateContext(ctx, sb, "js", cwd); err != nil {
			t.Errorf("CreateContext(cwd %q): %v", cwd, err)
		}
		if _, err := m.ListFiles(ctx, sb, cwd); err != nil {
			t.Errorf("ListFiles(%q): %v", cwd, err)
		}
	}
	want := "javascript . ls . javascript . ls . javascript . ls . javascript . ls . javascript proj/a ls proj/a javascript proj/a ls proj/a javascript proj/a ls proj/a"
	if s := strings.Join(got, " "); s != want {
		t.Errorf("reached the backend:\n%s\nwant\n%s", s, want)
	}
	for _, bad := range []string{"/etc", "/workspacex", "../x", "a/../b", "a\x00b"} {
		if _, err := m.CreateContext(ctx, sb, "python", bad); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("CreateContext(cwd %q) = %v; want InvalidArgument", bad, err)
		}
		if _, err := m.ListFiles(ctx, sb, bad); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("ListFiles(%q) = %v; want InvalidArgument", bad, err)
		}
	}
	if n := len(fake.Calls()); n != 14 {
		t.Errorf("%d calls reached the backend; want only the 14 valid ones", n)
	}
}

// TestValidatingDefaultContext: an empty context ID is the default
// context for every call that takes one, as for Execute.
func TestValidatingDefaultContext(t *testing.T) {
	var got []string
	fake := &coretest.Manager{
		RestartContextFunc: func(_ context.Context, _, id string) error { got = append(got, "restart "+id); return nil },
		DeleteContextFunc:  func(_ context.Context, _, id string) error { got = append(got, "delete "+id); return nil },
		SubmitFunc: func(_ context.Context, req core.ExecRequest) (string, error) {
			got = append(got, "exec "+req.ContextID)
			return req.CommandID, nil
		},
	}
	m := core.Validating(fake, core.DefaultPolicy())
	ctx := t.Context()
	if err := m.RestartContext(ctx, sb, ""); err != nil {
		t.Errorf("RestartContext(\"\"): %v", err)
	}
	if err := m.DeleteContext(ctx, sb, ""); err != nil {
		t.Errorf("DeleteContext(\"\"): %v", err)
	}
	if _, err := m.Submit(ctx, core.ExecRequest{SandboxID: sb, Code: "1", ContextID: core.DefaultContextID}); err != nil {
		t.Errorf("Submit in the default context: %v", err)
	}
	if s, want := strings.Join(got, "|"), "restart default|delete default|exec "; s != want {
		t.Errorf("reached the backend %q; want %q (Submit's default context is the record without one)", s, want)
	}
	if err := m.RestartContext(ctx, sb, "../x"); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("RestartContext(\"../x\") = %v; want InvalidArgument", err)
	}
}

// TestValidatingResolvesRequests: what a backend receives is resolved by
// the policy; what the policy refuses never reaches it.
func TestValidatingResolvesRequests(t *testing.T) {
	var opts core.Options
	var req core.ExecRequest
	fake := &coretest.Manager{
		AcquireFunc: func(_ context.Context, _ string, o core.Options) (core.AcquireResult, error) {
			opts = o
			return core.AcquireResult{}, nil
		},
		SubmitFunc: func(_ context.Context, r core.ExecRequest) (string, error) { req = r; return r.CommandID, nil },
		UploadFunc: func(_ context.Context, _, _ string, r io.Reader) (core.FileInfo, error) {
			_, err := io.Copy(io.Discard, r)
			return core.FileInfo{}, err
		},
	}
	p := core.DefaultPolicy()
	p.MaxUploadBytes = 10
	m := core.Validating(fake, p)
	ctx := t.Context()

	md := map[string]string{"k": "v"}
	if _, err := m.Acquire(ctx, "alice", core.Options{Metadata: md}); err != nil {
		t.Fatal(err)
	}
	md["k"] = "changed"
	if opts.Limits != p.DefaultLimits || opts.Metadata["k"] != "v" {
		t.Errorf("Acquire reached the backend with %+v; want the default limits and its own copy of the metadata", opts)
	}
	if _, err := m.Submit(ctx, core.ExecRequest{SandboxID: sb, Language: "ts", Code: "1"}); err != nil {
		t.Fatal(err)
	}
	if req.CommandID == "" || req.Language != "typescript" || req.Timeout != p.DefaultTimeout {
		t.Errorf("Submit reached the backend with %+v; want a command ID, the canonical language, the default timeout", req)
	}
	if _, err := m.Submit(ctx, core.ExecRequest{SandboxID: sb, Code: "1", Timeout: p.MaxTimeout + time.Second}); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("Submit past the maximum timeout = %v; want InvalidArgument", err)
	}
	if _, err := m.Upload(ctx, sb, "f", strings.NewReader("0123456789")); err != nil {
		t.Errorf("Upload of exactly the limit: %v", err)
	}
	if _, err := m.Upload(ctx, sb, "/workspace/f", strings.NewReader("0123456789x")); !errors.Is(err, core.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "upload limit of 10 bytes") {
		t.Errorf("Upload past the limit = %v; want InvalidArgument naming the limit", err)
	}
	if _, err := m.Acquire(core.WithCaller(ctx, core.Caller{Tenant: "bad tenant"}), "alice", core.Options{}); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("Acquire for a malformed tenant = %v; want InvalidArgument", err)
	}
}

// TestValidatingStreamCaps: streams in progress are capped per sandbox,
// then per tenant, then on the server, each refusal naming its cap; one
// tenant at its cap leaves the others theirs, and a stream that ends (a
// Download closed) gives its place back.
func TestValidatingStreamCaps(t *testing.T) {
	block := make(chan struct{})
	started := make(chan struct{}, 10) // a Follow reached the backend: its place is taken
	fake := &coretest.Manager{
		FollowFunc: func(ctx context.Context, _, _ string, _ int64, _ func(core.Event) error) error {
			started <- struct{}{}
			select {
			case <-block:
			case <-ctx.Done():
			}
			return nil
		},
		DownloadFunc: func(context.Context, string, string) (io.ReadCloser, core.FileInfo, error) {
			return io.NopCloser(strings.NewReader("x")), core.FileInfo{}, nil
		},
	}
	p := core.DefaultPolicy()
	p.MaxStreams, p.MaxStreamsPerTenant, p.MaxStreamsPerSandbox = 5, 3, 2
	m := core.Validating(fake, p)
	acme := core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
	beta := core.WithCaller(t.Context(), core.Caller{Tenant: "beta"})
	const sb2, sb3, sb4 = "sb-bbbbbbbbbbbbbbbbbbbb", "sb-cccccccccccccccccccc", "sb-dddddddddddddddddddd"

	follow := func(ctx context.Context, sandboxID string) {
		go m.Follow(ctx, sandboxID, "c1", 0, func(core.Event) error { return nil })
	}
	// A Download holds a place until closed: two on sb fill its cap.
	rc1, _, err := m.Download(acme, sb, "f")
	if err != nil {
		t.Fatal(err)
	}
	rc2, _, err := m.Download(acme, sb, "f")
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = m.Download(acme, sb, "f")
	wantCap(t, err, "sandbox "+sb+" has reached its cap of 2 streams in progress (sandboxd --max-streams-per-sandbox)")
	rc1.Close()
	rc1.Close() // closing twice gives back one place
	rc3, _, err := m.Download(acme, sb, "f")
	if err != nil {
		t.Fatalf("Download after one was closed: %v", err)
	}
	rc3.Close()

	// The tenant's streams on other sandboxes count too: with a Follow on
	// sb2 and a Download on sb3 it is at its cap of 3, its fourth is
	// refused naming the tenant's cap, and beta still streams.
	follow(acme, sb2)
	<-started
	rcA, _, err := m.Download(acme, sb3, "f")
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = m.Download(acme, sb3, "f")
	wantCap(t, err, "tenant acme has reached its cap of 3 streams in progress over all its sandboxes (sandboxd --max-streams-per-tenant)")
	rc4, _, err := m.Download(beta, sb4, "f")
	if err != nil {
		t.Fatalf("tenant beta's Download while acme is at its cap: %v", err)
	}
	rc5, _, err := m.Download(beta, sb4, "f")
	if err != nil {
		t.Fatal(err)
	}
	// Five streams in all: the server's cap.
	_, _, err = m.Download(core.WithCaller(t.Context(), core.Caller{Tenant: "gamma"}), sb3, "f")
	wantCap(t, err, "the server has reached its cap of 5 streams in progress for all tenants together (sandboxd --max-streams)")
	rc2.Close()
	rcA.Close()
	rc4.Close()
	rc5.Close()
	close(block)
}

func wantCap(t *testing.T, err error, want string) {
	t.Helper()
	if !errors.Is(err, core.ErrResourceExhausted) || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v; want ResourceExhausted containing %q", err, want)
	}
}

// TestValidatingExecute: Execute checks its request as Submit does and
// takes its stream before anything is submitted: a command whose stream
// the caps refuse is not run.
func TestValidatingExecute(t *testing.T) {
	block := make(chan struct{})
	started := make(chan struct{}, 1)
	submitted := 0
	fake := &coretest.Manager{
		SubmitFunc: func(_ context.Context, req core.ExecRequest) (string, error) {
			submitted++
			if req.CommandID == "" || req.Timeout == 0 {
				t.Errorf("the backend got an unresolved request: %+v", req)
			}
			return req.CommandID, nil
		},
		FollowFunc: func(ctx context.Context, _, _ string, _ int64, _ func(core.Event) error) error {
			started <- struct{}{}
			select {
			case <-block:
			case <-ctx.Done():
			}
			return nil
		},
	}
	p := core.DefaultPolicy()
	p.MaxStreamsPerSandbox = 1
	m := core.Validating(fake, p)
	ctx := core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
	none := func(string) { t.Error("submitted called for a refused Execute") }
	noEvents := func(core.Event) error { return nil }
	if err := m.Execute(ctx, core.ExecRequest{SandboxID: "sb-bad"}, none, noEvents); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("Execute(bad sandbox ID) = %v; want InvalidArgument", err)
	}
	done := make(chan error, 1)
	var id string
	go func() {
		done <- m.Execute(ctx, core.ExecRequest{SandboxID: sb, Code: "1"}, func(s string) { id = s }, noEvents)
	}()
	<-started // the first Execute follows: the sandbox's one stream is taken
	if err := m.Execute(ctx, core.ExecRequest{SandboxID: sb, Code: "2"}, none, noEvents); !errors.Is(err, core.ErrResourceExhausted) {
		t.Errorf("Execute past the stream cap = %v; want ResourceExhausted", err)
	}
	close(block)
	if err := <-done; err != nil || id == "" {
		t.Errorf("the first Execute = %v with command ID %q; want nil and an ID", err, id)
	}
	if submitted != 1 {
		t.Errorf("%d commands submitted; want 1 (the refused one runs nothing)", submitted)
	}
}
