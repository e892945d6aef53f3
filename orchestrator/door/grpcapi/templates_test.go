package grpcapi

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

const (
	tpl1    = "tpl-aaaaaaaaaaaaaaaaaaaa"
	tplKey  = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	tplHash = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
)

// everyStep is a spec with one step of each kind, in the domain's types
// and on the wire.
func everyStep() (core.TemplateSpec, *sandboxv1.TemplateSpec) {
	c := core.TemplateSpec{Base: "base-tpl", Steps: []core.TemplateStep{
		{Apt: []string{"jq", "curl=7.88.1-10"}},
		{Copy: &core.TemplateCopy{Archive: tplKey, Src: "tool", Dest: "/opt/tool/", Mode: 0o644, Owner: core.TemplateUserSandbox}},
		{Env: map[string]string{"TOOL_HOME": "/opt/tool", "B": "x y"}},
		{Workdir: "/opt/tool"},
		{User: core.TemplateUserSandbox},
		{Run: "echo built > /opt/tool/stamp"},
	}}
	p := &sandboxv1.TemplateSpec{Base: "base-tpl", Steps: []*sandboxv1.TemplateStep{
		{Step: &sandboxv1.TemplateStep_Apt{Apt: &sandboxv1.AptStep{Packages: []string{"jq", "curl=7.88.1-10"}}}},
		{Step: &sandboxv1.TemplateStep_Copy{Copy: &sandboxv1.CopyStep{Archive: tplKey, Src: "tool", Dest: "/opt/tool/", Mode: 0o644, Owner: "sandbox"}}},
		{Step: &sandboxv1.TemplateStep_Env{Env: &sandboxv1.EnvStep{Vars: map[string]string{"TOOL_HOME": "/opt/tool", "B": "x y"}}}},
		{Step: &sandboxv1.TemplateStep_Workdir{Workdir: "/opt/tool"}},
		{Step: &sandboxv1.TemplateStep_User{User: "sandbox"}},
		{Step: &sandboxv1.TemplateStep_Run{Run: "echo built > /opt/tool/stamp"}},
	}}
	return c, p
}

var (
	tplStart = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tplEnd   = tplStart.Add(time.Minute)
)

func building(n int) core.TemplateVersion {
	return core.TemplateVersion{Version: n, SpecHash: tplHash, State: core.TemplateBuilding, StartedAt: tplStart}
}

func finished(v core.TemplateVersion, state core.TemplateState, reason string) core.TemplateVersion {
	v.State, v.Reason, v.FinishedAt = state, reason, tplEnd
	if state == core.TemplateReady {
		v.SizeBytes = 123 << 20
	}
	return v
}

func TestTemplateCallsValidation(t *testing.T) {
	env := newTestEnv(t, &fakeManager{})
	c := env.client
	_, good := everyStep()
	tests := []struct {
		name string
		call func(ctx context.Context) error
		want string
	}{
		{"upload no header", func(ctx context.Context) error {
			s, err := c.UploadTemplateFile(ctx)
			if err != nil {
				return err
			}
			s.Send(&sandboxv1.UploadTemplateFileRequest{Payload: &sandboxv1.UploadTemplateFileRequest_Chunk{Chunk: []byte("x")}})
			_, err = s.CloseAndRecv()
			return err
		}, "header"},
		{"upload empty stream", func(ctx context.Context) error {
			s, err := c.UploadTemplateFile(ctx)
			if err != nil {
				return err
			}
			_, err = s.CloseAndRecv()
			return err
		}, "empty upload"},
		{"upload empty key", func(ctx context.Context) error {
			_, err := uploadTemplate(ctx, c, "", nil)
			return err
		}, "key is empty"},
		{"upload bad key (domain)", func(ctx context.Context) error {
			_, err := uploadTemplate(ctx, c, strings.ToUpper(tplKey), [][]byte{[]byte("x")})
			return err
		}, "64 lower-case hex"},
		{"upload short key (domain)", func(ctx context.Context) error {
			_, err := uploadTemplate(ctx, c, "abc", nil)
			return err
		}, "template file key"},
		{"build empty name", func(ctx context.Context) error {
			return firstErr[sandboxv1.BuildTemplateResponse](c.BuildTemplate(ctx, &sandboxv1.BuildTemplateRequest{Spec: good}))
		}, "name is empty"},
		{"build no spec", func(ctx context.Context) error {
			return firstErr[sandboxv1.BuildTemplateResponse](c.BuildTemplate(ctx, &sandboxv1.BuildTemplateRequest{Name: "t"}))
		}, "spec is missing"},
		{"build step with nothing set", func(ctx context.Context) error {
			return firstErr[sandboxv1.BuildTemplateResponse](c.BuildTemplate(ctx, &sandboxv1.BuildTemplateRequest{Name: "t",
				Spec: &sandboxv1.TemplateSpec{Steps: []*sandboxv1.TemplateStep{{}}}}))
		}, "step 1: set one of"},
		{"build empty run", func(ctx context.Context) error {
			return firstErr[sandboxv1.BuildTemplateResponse](c.BuildTemplate(ctx, &sandboxv1.BuildTemplateRequest{Name: "t",
				Spec: &sandboxv1.TemplateSpec{Steps: []*sandboxv1.TemplateStep{{Step: &sandboxv1.TemplateStep_Apt{Apt: &sandboxv1.AptStep{Packages: []string{"jq"}}}}, {Step: &sandboxv1.TemplateStep_Run{}}}}}))
		}, "step 2: run is empty"},
		{"build empty apt (domain)", func(ctx context.Context) error {
			return firstErr[sandboxv1.BuildTemplateResponse](c.BuildTemplate(ctx, &sandboxv1.BuildTemplateRequest{Name: "t",
				Spec: &sandboxv1.TemplateSpec{Steps: []*sandboxv1.TemplateStep{{Step: &sandboxv1.TemplateStep_Apt{Apt: &sandboxv1.AptStep{}}}}}}))
		}, "apt: no packages"},
		{"build empty env (domain)", func(ctx context.Context) error {
			return firstErr[sandboxv1.BuildTemplateResponse](c.BuildTemplate(ctx, &sandboxv1.BuildTemplateRequest{Name: "t",
				Spec: &sandboxv1.TemplateSpec{Steps: []*sandboxv1.TemplateStep{{Step: &sandboxv1.TemplateStep_Env{Env: &sandboxv1.EnvStep{}}}}}}))
		}, "env: no variables"},
		{"build no steps (domain)", func(ctx context.Context) error {
			return firstErr[sandboxv1.BuildTemplateResponse](c.BuildTemplate(ctx, &sandboxv1.BuildTemplateRequest{Name: "t", Spec: &sandboxv1.TemplateSpec{}}))
		}, "at least one step"},
		{"build bad name (domain)", func(ctx context.Context) error {
			return firstErr[sandboxv1.BuildTemplateResponse](c.BuildTemplate(ctx, &sandboxv1.BuildTemplateRequest{Name: "a b", Spec: good}))
		}, "template name"},
		{"build copy to /workspace (domain)", func(ctx context.Context) error {
			return firstErr[sandboxv1.BuildTemplateResponse](c.BuildTemplate(ctx, &sandboxv1.BuildTemplateRequest{Name: "t",
				Spec: &sandboxv1.TemplateSpec{Steps: []*sandboxv1.TemplateStep{{Step: &sandboxv1.TemplateStep_Copy{Copy: &sandboxv1.CopyStep{Archive: tplKey, Src: ".", Dest: "/workspace/x"}}}}}}))
		}, "sandboxd's"},
		{"follow empty ref", func(ctx context.Context) error {
			return firstErr[sandboxv1.FollowTemplateBuildResponse](c.FollowTemplateBuild(ctx, &sandboxv1.FollowTemplateBuildRequest{}))
		}, "template is empty"},
		{"follow negative version", func(ctx context.Context) error {
			return firstErr[sandboxv1.FollowTemplateBuildResponse](c.FollowTemplateBuild(ctx, &sandboxv1.FollowTemplateBuildRequest{Template: "t", Version: -1}))
		}, "version -1"},
		{"follow negative after", func(ctx context.Context) error {
			return firstErr[sandboxv1.FollowTemplateBuildResponse](c.FollowTemplateBuild(ctx, &sandboxv1.FollowTemplateBuildRequest{Template: "t", AfterSeq: -1}))
		}, "after_seq -1"},
		{"follow bad ref (domain)", func(ctx context.Context) error {
			return firstErr[sandboxv1.FollowTemplateBuildResponse](c.FollowTemplateBuild(ctx, &sandboxv1.FollowTemplateBuildRequest{Template: "a/b"}))
		}, "template"},
		{"get empty", func(ctx context.Context) error {
			_, err := c.GetTemplate(ctx, &sandboxv1.GetTemplateRequest{})
			return err
		}, "template is empty"},
		{"delete empty", func(ctx context.Context) error {
			_, err := c.DeleteTemplate(ctx, &sandboxv1.DeleteTemplateRequest{})
			return err
		}, "template is empty"},
		{"list bad tenant (domain)", func(ctx context.Context) error {
			_, err := c.ListTemplates(ctx, &sandboxv1.ListTemplatesRequest{Tenant: "a b"})
			return err
		}, "tenant"},
		{"acquire with a bad template (domain)", func(ctx context.Context) error {
			_, err := c.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: "u", Options: &sandboxv1.SandboxOptions{Template: "../x"}})
			return err
		}, "template"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call(testCtx(t))
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("error = %v, want InvalidArgument", err)
			}
			if msg := status.Convert(err).Message(); !strings.Contains(msg, tt.want) {
				t.Errorf("message %q does not mention %q", msg, tt.want)
			}
		})
	}
	if calls := env.fake.Calls(); len(calls) != 0 {
		t.Errorf("invalid requests reached the backend: %v", calls)
	}
}

// uploadTemplate sends the header with key and the chunks, and returns the
// outcome.
func uploadTemplate(ctx context.Context, c sandboxv1.SandboxServiceClient, key string, chunks [][]byte) (*sandboxv1.UploadTemplateFileResponse, error) {
	s, err := c.UploadTemplateFile(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.Send(&sandboxv1.UploadTemplateFileRequest{Payload: &sandboxv1.UploadTemplateFileRequest_Header{Header: &sandboxv1.UploadTemplateFileHeader{Key: key}}}); err != nil {
		return nil, err
	}
	for _, ch := range chunks {
		if err := s.Send(&sandboxv1.UploadTemplateFileRequest{Payload: &sandboxv1.UploadTemplateFileRequest_Chunk{Chunk: ch}}); err != nil {
			if errors.Is(err, io.EOF) { // the server answered early
				break
			}
			return nil, err
		}
	}
	return s.CloseAndRecv()
}

func TestUploadTemplateFile(t *testing.T) {
	stored := map[string]string{}
	fake := &fakeManager{PutTemplateFileFunc: func(_ context.Context, key string, r io.Reader) (bool, error) {
		if _, ok := stored[key]; ok {
			return true, nil // not read
		}
		b, err := io.ReadAll(r)
		if err != nil {
			return false, err
		}
		stored[key] = string(b)
		return false, nil
	}}
	env := newTestEnv(t, fake)
	c, ctx := env.client, testCtx(t)
	r, err := uploadTemplate(ctx, c, tplKey, [][]byte{[]byte("tar "), {}, []byte("bytes")})
	if err != nil || r.GetExisted() {
		t.Fatalf("first upload = %v, %v; want not existed", r, err)
	}
	if stored[tplKey] != "tar bytes" {
		t.Errorf("stored %q", stored[tplKey])
	}
	// Again: existed, the content not read (many chunks, the server
	// answering early must not fail the client).
	many := make([][]byte, 64)
	for i := range many {
		many[i] = make([]byte, 64<<10)
	}
	r, err = uploadTemplate(ctx, c, tplKey, many)
	if err != nil || !r.GetExisted() {
		t.Fatalf("second upload = %v, %v; want existed", r, err)
	}
	if stored[tplKey] != "tar bytes" {
		t.Errorf("the second upload replaced the first: %q", stored[tplKey])
	}

	// A second header in the stream is refused.
	s, err := c.UploadTemplateFile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	other := strings.Repeat("1", 64)
	for range 2 {
		s.Send(&sandboxv1.UploadTemplateFileRequest{Payload: &sandboxv1.UploadTemplateFileRequest_Header{Header: &sandboxv1.UploadTemplateFileHeader{Key: other}}})
	}
	_, err = s.CloseAndRecv()
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "only the first message") {
		t.Errorf("second header: %v, want InvalidArgument about the second header", err)
	}
	if _, ok := stored[other]; ok {
		t.Errorf("an upload with two headers was stored")
	}

	// The domain's error is classed.
	fake.PutTemplateFileFunc = func(context.Context, string, io.Reader) (bool, error) {
		return false, coretest.Errorf(core.ErrFailedPrecondition, "templates: not on this backend")
	}
	if _, err := uploadTemplate(ctx, c, other, [][]byte{[]byte("x")}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("upload on a backend without templates = %v, want FailedPrecondition", err)
	}
}

// scriptBuild makes the fake build and follow a build of version 3 that
// prints lines and ends as end (with err from the follow).
func scriptBuild(fake *fakeManager, lines []string, end core.TemplateVersion, endErr error) (gotSpec *core.TemplateSpec, follows *[]string) {
	gotSpec, follows = new(core.TemplateSpec), new([]string)
	tpl := core.Template{ID: tpl1, Name: "tools", Tenant: "acme", CreatedAt: tplStart, Versions: []core.TemplateVersion{building(3)}}
	fake.BuildTemplateFunc = func(_ context.Context, name string, spec core.TemplateSpec, force bool) (core.Template, core.TemplateVersion, error) {
		*gotSpec = spec
		return tpl, building(3), nil
	}
	fake.FollowTemplateBuildFunc = func(ctx context.Context, ref string, version int, after int64, fn func(core.TemplateBuildEvent) error) error {
		*follows = append(*follows, ref+" "+string(rune('0'+version))+" "+string(rune('0'+after)))
		for i, l := range lines {
			if int64(i+1) <= after {
				continue
			}
			if err := fn(core.TemplateBuildEvent{Seq: int64(i + 1), Time: tplStart.Add(time.Duration(i) * time.Second), Line: l}); err != nil {
				return err
			}
		}
		if err := fn(core.TemplateBuildEvent{Seq: int64(len(lines) + 1), Time: tplEnd, Done: &end}); err != nil {
			return err
		}
		return endErr
	}
	return gotSpec, follows
}

// recvAll reads a stream to its end: its messages and its final status.
func recvAll[T any](s interface{ Recv() (*T, error) }, err error) ([]*T, error) {
	if err != nil {
		return nil, err
	}
	var out []*T
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, m)
	}
}

func TestBuildTemplateStreamsAndConverts(t *testing.T) {
	fake := &fakeManager{}
	ready := finished(building(3), core.TemplateReady, "")
	ready.UsedBy = 2
	gotSpec, follows := scriptBuild(fake, []string{"Step 1/6 : apt", "out\xff" + bad}, ready, nil)
	env := newTestEnv(t, fake)
	wantSpec, spec := everyStep()
	msgs, err := recvAll[sandboxv1.BuildTemplateResponse](env.client.BuildTemplate(testCtx(t), &sandboxv1.BuildTemplateRequest{Name: "tools", Spec: spec, Force: true}))
	if err != nil {
		t.Fatalf("BuildTemplate: %v", err)
	}
	if diff := cmp.Diff(wantSpec, *gotSpec); diff != "" {
		t.Errorf("the domain's spec (-want +got):\n%s", diff)
	}
	wantBuilding := &sandboxv1.TemplateVersion{Version: 3, SpecHash: tplHash, State: sandboxv1.TemplateState_TEMPLATE_STATE_BUILDING, StartedAt: timestamppb.New(tplStart)}
	want := []*sandboxv1.BuildTemplateResponse{
		{Event: &sandboxv1.BuildTemplateResponse_Started{Started: &sandboxv1.TemplateBuildStarted{
			Template: &sandboxv1.Template{Id: tpl1, Name: "tools", Tenant: "acme", CreatedAt: timestamppb.New(tplStart), Versions: []*sandboxv1.TemplateVersion{wantBuilding}},
			Version:  wantBuilding,
		}}},
		{Event: &sandboxv1.BuildTemplateResponse_Line{Line: &sandboxv1.TemplateBuildLine{Seq: 1, Time: timestamppb.New(tplStart), Line: "Step 1/6 : apt"}}},
		{Event: &sandboxv1.BuildTemplateResponse_Line{Line: &sandboxv1.TemplateBuildLine{Seq: 2, Time: timestamppb.New(tplStart.Add(time.Second)), Line: "out" + R}}},
		{Event: &sandboxv1.BuildTemplateResponse_Done{Done: &sandboxv1.TemplateVersion{Version: 3, SpecHash: tplHash, State: sandboxv1.TemplateState_TEMPLATE_STATE_READY,
			StartedAt: timestamppb.New(tplStart), FinishedAt: timestamppb.New(tplEnd), SizeBytes: 123 << 20, UsedBy: 2}}},
	}
	if diff := cmp.Diff(want, msgs, protocmp.Transform()); diff != "" {
		t.Errorf("stream (-want +got):\n%s", diff)
	}
	// The build is followed by ID, its version, from the start.
	if diff := cmp.Diff([]string{tpl1 + " 3 0"}, *follows); diff != "" {
		t.Errorf("follows (-want +got):\n%s", diff)
	}
}

// TestBuildTemplateFailureClassed: a failed build sends its finished
// version, then ends with the build's error, classed.
func TestBuildTemplateFailureClassed(t *testing.T) {
	for _, tc := range []struct {
		class *core.Class
		code  codes.Code
	}{
		{core.ErrFailedPrecondition, codes.FailedPrecondition},
		{core.ErrDeadlineExceeded, codes.DeadlineExceeded},
		{core.ErrResourceExhausted, codes.ResourceExhausted},
		{core.ErrUnavailable, codes.Unavailable},
	} {
		t.Run(tc.code.String(), func(t *testing.T) {
			fake := &fakeManager{}
			reason := "step 3 (run): exit status 2" + bad
			failed := finished(building(3), core.TemplateFailed, reason)
			scriptBuild(fake, []string{"a", "b"}, failed, coretest.Errorf(tc.class, "template tools version 3: %s", reason))
			env := newTestEnv(t, fake)
			_, spec := everyStep()
			msgs, err := recvAll[sandboxv1.BuildTemplateResponse](env.client.BuildTemplate(testCtx(t), &sandboxv1.BuildTemplateRequest{Name: "tools", Spec: spec}))
			if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), "step 3 (run)") {
				t.Fatalf("error = %v, want %v naming the step", err, tc.code)
			}
			if len(msgs) != 4 {
				t.Fatalf("got %d messages, want started, 2 lines, done: %v", len(msgs), msgs)
			}
			done := msgs[3].GetDone()
			if done.GetState() != sandboxv1.TemplateState_TEMPLATE_STATE_FAILED || done.GetReason() != "step 3 (run): exit status 2"+R || done.GetFinishedAt() == nil {
				t.Errorf("done = %v", done)
			}
		})
	}
}

// TestBuildTemplateRefused: a build the domain refuses ends the stream
// with its error before any message.
func TestBuildTemplateRefused(t *testing.T) {
	fake := &fakeManager{BuildTemplateFunc: func(context.Context, string, core.TemplateSpec, bool) (core.Template, core.TemplateVersion, error) {
		return core.Template{}, core.TemplateVersion{}, coretest.Errorf(core.ErrFailedPrecondition, "template tools: a build is running")
	}}
	env := newTestEnv(t, fake)
	_, spec := everyStep()
	msgs, err := recvAll[sandboxv1.BuildTemplateResponse](env.client.BuildTemplate(testCtx(t), &sandboxv1.BuildTemplateRequest{Name: "tools", Spec: spec}))
	if status.Code(err) != codes.FailedPrecondition || len(msgs) != 0 {
		t.Errorf("BuildTemplate = %v, %v; want FailedPrecondition and no message", msgs, err)
	}
}

func TestFollowTemplateBuild(t *testing.T) {
	fake := &fakeManager{}
	_, follows := scriptBuild(fake, []string{"a", "b", "c"}, finished(building(3), core.TemplateReady, ""), nil)
	env := newTestEnv(t, fake)
	msgs, err := recvAll[sandboxv1.FollowTemplateBuildResponse](env.client.FollowTemplateBuild(testCtx(t), &sandboxv1.FollowTemplateBuildRequest{Template: "tools", Version: 3, AfterSeq: 2}))
	if err != nil {
		t.Fatal(err)
	}
	want := []*sandboxv1.FollowTemplateBuildResponse{
		{Event: &sandboxv1.FollowTemplateBuildResponse_Line{Line: &sandboxv1.TemplateBuildLine{Seq: 3, Time: timestamppb.New(tplStart.Add(2 * time.Second)), Line: "c"}}},
		{Event: &sandboxv1.FollowTemplateBuildResponse_Done{Done: &sandboxv1.TemplateVersion{Version: 3, SpecHash: tplHash, State: sandboxv1.TemplateState_TEMPLATE_STATE_READY,
			StartedAt: timestamppb.New(tplStart), FinishedAt: timestamppb.New(tplEnd), SizeBytes: 123 << 20}}},
	}
	if diff := cmp.Diff(want, msgs, protocmp.Transform()); diff != "" {
		t.Errorf("stream (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"tools 3 2"}, *follows); diff != "" {
		t.Errorf("follows (-want +got):\n%s", diff)
	}
	// A failed build: done, then the classed error.
	// Version 0 is the latest, resolved by the door (the port names
	// versions); a failed build: done, then the classed error.
	fake2 := &fakeManager{GetTemplateFunc: func(_ context.Context, ref string) (core.Template, error) {
		switch ref {
		case "tools":
			return core.Template{ID: tpl1, Name: "tools", Versions: []core.TemplateVersion{finished(building(1), core.TemplateReady, ""), building(2)}}, nil
		case "empty":
			return core.Template{ID: "tpl-bbbbbbbbbbbbbbbbbbbb", Name: "empty"}, nil
		}
		return core.Template{}, core.TemplateNotFound(ref)
	}}
	_, follows2 := scriptBuild(fake2, nil, finished(building(2), core.TemplateFailed, "timed out"), coretest.Errorf(core.ErrDeadlineExceeded, "template tools: the build ran past 20m0s"))
	env2 := newTestEnv(t, fake2)
	msgs2, err := recvAll[sandboxv1.FollowTemplateBuildResponse](env2.client.FollowTemplateBuild(testCtx(t), &sandboxv1.FollowTemplateBuildRequest{Template: "tools"}))
	if status.Code(err) != codes.DeadlineExceeded || len(msgs2) != 1 || msgs2[0].GetDone().GetState() != sandboxv1.TemplateState_TEMPLATE_STATE_FAILED {
		t.Errorf("failed follow = %v, %v; want done FAILED then DeadlineExceeded", msgs2, err)
	}
	if diff := cmp.Diff([]string{tpl1 + " 2 0"}, *follows2); diff != "" {
		t.Errorf("follows of the latest (-want +got):\n%s", diff)
	}
	// A template without builds, an unknown one.
	for ref, code := range map[string]codes.Code{"empty": codes.NotFound, "nope": codes.NotFound} {
		if _, err := recvAll[sandboxv1.FollowTemplateBuildResponse](env2.client.FollowTemplateBuild(testCtx(t), &sandboxv1.FollowTemplateBuildRequest{Template: ref})); status.Code(err) != code {
			t.Errorf("follow %s = %v, want %v", ref, err, code)
		}
	}
	fake2.FollowTemplateBuildFunc = func(_ context.Context, ref string, _ int, _ int64, _ func(core.TemplateBuildEvent) error) error {
		return core.TemplateNotFound(ref)
	}
	if _, err := recvAll[sandboxv1.FollowTemplateBuildResponse](env2.client.FollowTemplateBuild(testCtx(t), &sandboxv1.FollowTemplateBuildRequest{Template: "tools", Version: 9})); status.Code(err) != codes.NotFound {
		t.Errorf("follow unknown version = %v, want NotFound", err)
	}
}

// TestFollowTemplateBuildClientGoes: a client that goes away mid-follow
// ends the domain's follow (its context), and is not logged as an
// internal error.
func TestFollowTemplateBuildClientGoes(t *testing.T) {
	following, returned := make(chan struct{}), make(chan struct{})
	fake := &fakeManager{FollowTemplateBuildFunc: func(ctx context.Context, _ string, _ int, _ int64, fn func(core.TemplateBuildEvent) error) error {
		defer close(returned)
		if err := fn(core.TemplateBuildEvent{Seq: 1, Line: "Step 1"}); err != nil {
			return err
		}
		close(following)
		<-ctx.Done()
		return errors.New("build watcher torn down")
	}}
	env := newTestEnv(t, fake)
	ctx, cancel := context.WithCancel(testCtx(t))
	s, err := env.client.FollowTemplateBuild(ctx, &sandboxv1.FollowTemplateBuildRequest{Template: "tools", Version: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatalf("first line: %v", err)
	}
	<-following
	cancel()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("the domain's follow did not see the cancellation within 10s")
	}
	env.log.waitFor(t, "grpc.method=FollowTemplateBuild")
	if logs := env.log.String(); strings.Contains(logs, "internal error") || strings.Contains(logs, "torn down") {
		t.Errorf("a client cancel was logged as an internal error:\n%s", logs)
	}
}

func TestTemplateGetListDelete(t *testing.T) {
	ready := finished(building(1), core.TemplateReady, "")
	ready.Cached = true
	tpl := core.Template{ID: tpl1, Name: "tools", Tenant: "acme", CreatedAt: tplStart, Versions: []core.TemplateVersion{
		finished(building(0), core.TemplateFailed, "step 1 (apt): E: Unable to locate package "+bad), ready}}
	var deleted []string
	fake := &fakeManager{
		GetTemplateFunc: func(_ context.Context, ref string) (core.Template, error) {
			if ref != "tools" && ref != tpl1 {
				return core.Template{}, core.TemplateNotFound(ref)
			}
			return tpl, nil
		},
		ListTemplatesFunc: func(_ context.Context, tenant string) ([]core.Template, error) {
			if tenant != "" {
				return nil, nil
			}
			return []core.Template{tpl, {ID: "tpl-bbbbbbbbbbbbbbbbbbbb", Name: "n" + bad, Tenant: "t" + bad}}, nil
		},
		DeleteTemplateFunc: func(_ context.Context, ref string) error {
			deleted = append(deleted, ref)
			if ref == "other" {
				return core.TemplateNotFound(ref)
			}
			return nil
		},
	}
	env := newTestEnv(t, fake)
	c, ctx := env.client, testCtx(t)
	g, err := c.GetTemplate(ctx, &sandboxv1.GetTemplateRequest{Template: "tools"})
	if err != nil {
		t.Fatal(err)
	}
	want := &sandboxv1.Template{Id: tpl1, Name: "tools", Tenant: "acme", CreatedAt: timestamppb.New(tplStart), Versions: []*sandboxv1.TemplateVersion{
		{Version: 0, SpecHash: tplHash, State: sandboxv1.TemplateState_TEMPLATE_STATE_FAILED, Reason: "step 1 (apt): E: Unable to locate package " + R,
			StartedAt: timestamppb.New(tplStart), FinishedAt: timestamppb.New(tplEnd)},
		{Version: 1, SpecHash: tplHash, State: sandboxv1.TemplateState_TEMPLATE_STATE_READY, Cached: true,
			StartedAt: timestamppb.New(tplStart), FinishedAt: timestamppb.New(tplEnd), SizeBytes: 123 << 20},
	}}
	if diff := cmp.Diff(want, g.GetTemplate(), protocmp.Transform()); diff != "" {
		t.Errorf("GetTemplate (-want +got):\n%s", diff)
	}
	if _, err := c.GetTemplate(ctx, &sandboxv1.GetTemplateRequest{Template: "other"}); status.Code(err) != codes.NotFound {
		t.Errorf("GetTemplate(other) = %v, want NotFound", err)
	}
	ls, err := c.ListTemplates(ctx, &sandboxv1.ListTemplatesRequest{})
	if err != nil || len(ls.GetTemplates()) != 2 || ls.GetTemplates()[1].GetName() != "n"+R || ls.GetTemplates()[1].GetTenant() != "t"+R {
		t.Errorf("ListTemplates = %v, %v", ls, err)
	}
	if _, err := c.DeleteTemplate(ctx, &sandboxv1.DeleteTemplateRequest{Template: "tools"}); err != nil {
		t.Errorf("DeleteTemplate = %v", err)
	}
	if _, err := c.DeleteTemplate(ctx, &sandboxv1.DeleteTemplateRequest{Template: "other"}); status.Code(err) != codes.NotFound {
		t.Errorf("DeleteTemplate(other) = %v, want NotFound", err)
	}
	if diff := cmp.Diff([]string{"tools", "other"}, deleted); diff != "" {
		t.Errorf("deleted (-want +got):\n%s", diff)
	}
	// An unknown state is UNSPECIFIED, not a failure.
	if got := templateStateToProto("weird"); got != sandboxv1.TemplateState_TEMPLATE_STATE_UNSPECIFIED {
		t.Errorf("unknown state = %v", got)
	}
}

func TestAcquireTemplateBothWays(t *testing.T) {
	var gotOpts core.Options
	fake := &fakeManager{AcquireFunc: func(_ context.Context, user string, opts core.Options) (core.AcquireResult, error) {
		gotOpts = opts
		return core.AcquireResult{Sandbox: core.Sandbox{ID: sb1, UserID: user, State: core.StateRunning, Template: tpl1, TemplateVersion: 4}, Created: true}, nil
	}}
	env := newTestEnv(t, fake)
	resp, err := env.client.AcquireSandbox(testCtx(t), &sandboxv1.AcquireSandboxRequest{UserId: "u", Options: &sandboxv1.SandboxOptions{Template: "tools"}})
	if err != nil {
		t.Fatal(err)
	}
	if gotOpts.Template != "tools" {
		t.Errorf("options.template = %q, want tools", gotOpts.Template)
	}
	if sb := resp.GetSandbox(); sb.GetTemplate() != tpl1 || sb.GetTemplateVersion() != 4 {
		t.Errorf("sandbox template = %q v%d", sb.GetTemplate(), sb.GetTemplateVersion())
	}
	if sb := sandboxToProto(core.Sandbox{ID: sb1}); sb.GetTemplate() != "" || sb.GetTemplateVersion() != 0 {
		t.Errorf("no template = %v", sb)
	}
}

// TestTemplateSpecRoundTrip: every step kind converts both ways.
func TestTemplateSpecRoundTrip(t *testing.T) {
	c, p := everyStep()
	got, err := templateSpecFromProto(p)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(c, got); diff != "" {
		t.Errorf("from proto (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(p, templateSpecToProto(got), protocmp.Transform()); diff != "" {
		t.Errorf("to proto (-want +got):\n%s", diff)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("the converted spec is not valid: %v", err)
	}
}

// templateSpecToProto converts a spec to the wire: the inverse of
// templateSpecFromProto (the Go client and the tests use it).
func templateSpecToProto(s core.TemplateSpec) *sandboxv1.TemplateSpec {
	p := &sandboxv1.TemplateSpec{Base: s.Base}
	for _, st := range s.Steps {
		ps := &sandboxv1.TemplateStep{}
		switch {
		case st.Apt != nil:
			ps.Step = &sandboxv1.TemplateStep_Apt{Apt: &sandboxv1.AptStep{Packages: st.Apt}}
		case st.Copy != nil:
			c := st.Copy
			ps.Step = &sandboxv1.TemplateStep_Copy{Copy: &sandboxv1.CopyStep{Archive: c.Archive, Src: c.Src, Dest: c.Dest, Mode: c.Mode, Owner: c.Owner}}
		case st.Env != nil:
			ps.Step = &sandboxv1.TemplateStep_Env{Env: &sandboxv1.EnvStep{Vars: st.Env}}
		case st.Workdir != "":
			ps.Step = &sandboxv1.TemplateStep_Workdir{Workdir: st.Workdir}
		case st.User != "":
			ps.Step = &sandboxv1.TemplateStep_User{User: st.User}
		case st.Run != "":
			ps.Step = &sandboxv1.TemplateStep_Run{Run: st.Run}
		}
		p.Steps = append(p.Steps, ps)
	}
	return p
}
