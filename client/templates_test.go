package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/testing/protocmp"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// templatesFake serves the template calls as sandboxd would, over
// scripted builds: lines, then a done version, then an error.
type templatesFake struct {
	sandboxv1.UnimplementedSandboxServiceServer
	mu       sync.Mutex
	archives map[string][]byte
	requests []any
	acquired *sandboxv1.AcquireSandboxRequest
	lines    []string
	done     *sandboxv1.TemplateVersion
	doneErr  error
	// breakAfter, when > 0, breaks the next BuildTemplate stream after
	// that many lines (Unavailable, no done).
	breakAfter int
}

func (f *templatesFake) record(req any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, req)
}

var fakeTemplate = &sandboxv1.Template{Id: "tpl-aaaaaaaaaaaaaaaaaaaa", Name: "tools", Tenant: "default",
	Versions: []*sandboxv1.TemplateVersion{{Version: 1, State: sandboxv1.TemplateState_TEMPLATE_STATE_READY}, {Version: 2, State: sandboxv1.TemplateState_TEMPLATE_STATE_BUILDING}}}

func (f *templatesFake) UploadTemplateFile(stream grpc.ClientStreamingServer[sandboxv1.UploadTemplateFileRequest, sandboxv1.UploadTemplateFileResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	key := first.GetHeader().GetKey()
	if len(key) != 64 {
		return status.Error(codes.InvalidArgument, "template file key: want 64 lower-case hex digits")
	}
	f.mu.Lock()
	_, ok := f.archives[key]
	f.mu.Unlock()
	if ok {
		return stream.SendAndClose(&sandboxv1.UploadTemplateFileResponse{Existed: true})
	}
	var buf bytes.Buffer
	for {
		m, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		buf.Write(m.GetChunk())
	}
	f.mu.Lock()
	f.archives[key] = buf.Bytes()
	f.mu.Unlock()
	return stream.SendAndClose(&sandboxv1.UploadTemplateFileResponse{})
}

func (f *templatesFake) sendBuild(after int64, broken int, line func(*sandboxv1.TemplateBuildLine) error, done func(*sandboxv1.TemplateVersion) error) error {
	for i, l := range f.lines {
		if broken > 0 && i == broken {
			return status.Error(codes.Unavailable, "connection reset")
		}
		if int64(i+1) <= after {
			continue
		}
		if err := line(&sandboxv1.TemplateBuildLine{Seq: int64(i + 1), Line: l}); err != nil {
			return err
		}
	}
	if err := done(f.done); err != nil {
		return err
	}
	return f.doneErr
}

func (f *templatesFake) BuildTemplate(req *sandboxv1.BuildTemplateRequest, stream grpc.ServerStreamingServer[sandboxv1.BuildTemplateResponse]) error {
	f.record(req)
	if req.GetName() == "busy" {
		return status.Error(codes.FailedPrecondition, "template busy: a build is running")
	}
	if err := stream.Send(&sandboxv1.BuildTemplateResponse{Event: &sandboxv1.BuildTemplateResponse_Started{Started: &sandboxv1.TemplateBuildStarted{
		Template: fakeTemplate, Version: fakeTemplate.GetVersions()[1]}}}); err != nil {
		return err
	}
	f.mu.Lock()
	broken := f.breakAfter
	f.breakAfter = 0
	f.mu.Unlock()
	return f.sendBuild(0, broken, func(l *sandboxv1.TemplateBuildLine) error {
		return stream.Send(&sandboxv1.BuildTemplateResponse{Event: &sandboxv1.BuildTemplateResponse_Line{Line: l}})
	}, func(d *sandboxv1.TemplateVersion) error {
		return stream.Send(&sandboxv1.BuildTemplateResponse{Event: &sandboxv1.BuildTemplateResponse_Done{Done: d}})
	})
}

func (f *templatesFake) FollowTemplateBuild(req *sandboxv1.FollowTemplateBuildRequest, stream grpc.ServerStreamingServer[sandboxv1.FollowTemplateBuildResponse]) error {
	f.record(req)
	return f.sendBuild(req.GetAfterSeq(), 0, func(l *sandboxv1.TemplateBuildLine) error {
		return stream.Send(&sandboxv1.FollowTemplateBuildResponse{Event: &sandboxv1.FollowTemplateBuildResponse_Line{Line: l}})
	}, func(d *sandboxv1.TemplateVersion) error {
		return stream.Send(&sandboxv1.FollowTemplateBuildResponse{Event: &sandboxv1.FollowTemplateBuildResponse_Done{Done: d}})
	})
}

func (f *templatesFake) GetTemplate(_ context.Context, req *sandboxv1.GetTemplateRequest) (*sandboxv1.GetTemplateResponse, error) {
	f.record(req)
	if req.GetTemplate() != "tools" {
		return nil, status.Errorf(codes.NotFound, "template %q not found", req.GetTemplate())
	}
	return &sandboxv1.GetTemplateResponse{Template: fakeTemplate}, nil
}

func (f *templatesFake) ListTemplates(_ context.Context, req *sandboxv1.ListTemplatesRequest) (*sandboxv1.ListTemplatesResponse, error) {
	f.record(req)
	return &sandboxv1.ListTemplatesResponse{Templates: []*sandboxv1.Template{fakeTemplate}}, nil
}

func (f *templatesFake) DeleteTemplate(_ context.Context, req *sandboxv1.DeleteTemplateRequest) (*sandboxv1.DeleteTemplateResponse, error) {
	f.record(req)
	return &sandboxv1.DeleteTemplateResponse{}, nil
}

func (f *templatesFake) AcquireSandbox(_ context.Context, req *sandboxv1.AcquireSandboxRequest) (*sandboxv1.AcquireSandboxResponse, error) {
	f.mu.Lock()
	f.acquired = req
	f.mu.Unlock()
	return &sandboxv1.AcquireSandboxResponse{Sandbox: &sandboxv1.Sandbox{SandboxId: "sb-1", Template: fakeTemplate.GetId(), TemplateVersion: 1}, Created: true}, nil
}

func startTemplatesFake(t *testing.T, f *templatesFake) *Client {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	sandboxv1.RegisterSandboxServiceServer(srv, f)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	c, err := Dial("passthrough:///bufnet", WithDialOptions(grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) })))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestUploadTemplateArchive(t *testing.T) {
	f := &templatesFake{archives: map[string][]byte{}}
	c := startTemplatesFake(t, f)
	ctx := t.Context()
	data := bytes.Repeat([]byte("tar bytes "), 300_000) // 3 MB: several chunks
	sum := sha256.Sum256(data)
	want := hex.EncodeToString(sum[:])
	key, err := c.UploadTemplateArchive(ctx, bytes.NewReader(data))
	if err != nil || key != want {
		t.Fatalf("UploadTemplateArchive = %q, %v; want %q", key, err, want)
	}
	if !bytes.Equal(f.archives[want], data) {
		t.Errorf("stored %d bytes, want %d", len(f.archives[want]), len(data))
	}
	// Again: the server answers existed at once; the client does not fail.
	existed, err := c.UploadTemplateFile(ctx, key, bytes.NewReader(data))
	if err != nil || !existed {
		t.Errorf("second upload = %v, %v; want existed", existed, err)
	}
	if _, err := c.UploadTemplateFile(ctx, "abc", strings.NewReader("x")); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("bad key = %v, want ErrInvalidArgument", err)
	}
	broken := errors.New("read failed")
	if _, err := c.UploadTemplateArchive(ctx, io.MultiReader(strings.NewReader("x"), errReader{broken})); !errors.Is(err, broken) {
		t.Errorf("upload with a failing reader = %v, want its error", err)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

func TestBuildTemplate(t *testing.T) {
	ready := &sandboxv1.TemplateVersion{Version: 2, State: sandboxv1.TemplateState_TEMPLATE_STATE_READY, SizeBytes: 1 << 20}
	f := &templatesFake{lines: []string{"Step 1/2", "Step 2/2"}, done: ready}
	c := startTemplatesFake(t, f)
	ctx := t.Context()
	spec := &sandboxv1.TemplateSpec{Steps: []*sandboxv1.TemplateStep{{Step: &sandboxv1.TemplateStep_Run{Run: "true"}}}}
	var got []string
	tpl, v, err := c.BuildTemplate(ctx, "tools", spec, true, func(l *sandboxv1.TemplateBuildLine) { got = append(got, l.GetLine()) })
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"Step 1/2", "Step 2/2"}, got); diff != "" {
		t.Errorf("lines (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(ready, v, protocmp.Transform()); diff != "" {
		t.Errorf("version (-want +got):\n%s", diff)
	}
	// The template's version is the finished one; the fake's is untouched.
	if tpl.GetVersions()[1].GetState() != sandboxv1.TemplateState_TEMPLATE_STATE_READY || fakeTemplate.GetVersions()[1].GetState() != sandboxv1.TemplateState_TEMPLATE_STATE_BUILDING {
		t.Errorf("template versions = %v", tpl.GetVersions())
	}

	// A failed build: the version and the classed error.
	f.done = &sandboxv1.TemplateVersion{Version: 2, State: sandboxv1.TemplateState_TEMPLATE_STATE_FAILED, Reason: "step 1 (run): exit status 1"}
	f.doneErr = status.Error(codes.FailedPrecondition, "template tools version 2: step 1 (run): exit status 1")
	_, v, err = c.BuildTemplate(ctx, "tools", spec, false, nil)
	if !errors.Is(err, ErrFailedPrecondition) || v.GetState() != sandboxv1.TemplateState_TEMPLATE_STATE_FAILED || !strings.Contains(err.Error(), "step 1 (run)") {
		t.Errorf("failed build = %v, %v", v, err)
	}
	// The time limit: context.DeadlineExceeded, with a FAILED version.
	f.doneErr = status.Error(codes.DeadlineExceeded, "template tools: the build ran past 20m0s")
	_, v, err = c.BuildTemplate(ctx, "tools", spec, false, nil)
	if !errors.Is(err, context.DeadlineExceeded) || v.GetState() != sandboxv1.TemplateState_TEMPLATE_STATE_FAILED {
		t.Errorf("timed out build = %v, %v", v, err)
	}
	// The engine failed: Unavailable after done is the build's answer, not
	// a broken stream (no follow).
	f.doneErr = status.Error(codes.Unavailable, "docker: engine went away")
	f.mu.Lock()
	f.requests = nil
	f.mu.Unlock()
	if _, _, err = c.BuildTemplate(ctx, "tools", spec, false, nil); !errors.Is(err, ErrUnavailable) {
		t.Errorf("engine failure = %v, want ErrUnavailable", err)
	}
	if len(f.requests) != 1 {
		t.Errorf("an engine failure was followed again: %v", f.requests)
	}
	// Refused before it started.
	if _, _, err := c.BuildTemplate(ctx, "busy", spec, false, nil); !errors.Is(err, ErrFailedPrecondition) {
		t.Errorf("busy = %v, want ErrFailedPrecondition", err)
	}
}

// TestBuildTemplateResumes: a stream broken mid-build is followed again
// after the last line received, no line seen twice.
func TestBuildTemplateResumes(t *testing.T) {
	ready := &sandboxv1.TemplateVersion{Version: 2, State: sandboxv1.TemplateState_TEMPLATE_STATE_READY}
	f := &templatesFake{lines: []string{"a", "b", "c", "d"}, done: ready, breakAfter: 2}
	c := startTemplatesFake(t, f)
	c.retryFor = 5 * time.Second
	var got []string
	_, v, err := c.BuildTemplate(t.Context(), "tools", &sandboxv1.TemplateSpec{}, false, func(l *sandboxv1.TemplateBuildLine) { got = append(got, l.GetLine()) })
	if err != nil || v.GetState() != sandboxv1.TemplateState_TEMPLATE_STATE_READY {
		t.Fatalf("BuildTemplate = %v, %v", v, err)
	}
	if diff := cmp.Diff([]string{"a", "b", "c", "d"}, got); diff != "" {
		t.Errorf("lines (-want +got):\n%s", diff)
	}
	want := []any{
		&sandboxv1.BuildTemplateRequest{Name: "tools", Spec: &sandboxv1.TemplateSpec{}},
		&sandboxv1.FollowTemplateBuildRequest{Template: fakeTemplate.GetId(), Version: 2, AfterSeq: 2},
	}
	if diff := cmp.Diff(want, f.requests, protocmp.Transform()); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

func TestTemplateCalls(t *testing.T) {
	f := &templatesFake{lines: []string{"a", "b"}, done: &sandboxv1.TemplateVersion{Version: 1, State: sandboxv1.TemplateState_TEMPLATE_STATE_READY}}
	c := startTemplatesFake(t, f)
	ctx := t.Context()
	var got []int64
	v, err := c.FollowTemplateBuild(ctx, "tools", 1, 1, func(l *sandboxv1.TemplateBuildLine) { got = append(got, l.GetSeq()) })
	if err != nil || v.GetVersion() != 1 || len(got) != 1 || got[0] != 2 {
		t.Errorf("FollowTemplateBuild = %v, %v; lines %v", v, err, got)
	}
	if tp, err := c.GetTemplate(ctx, "tools"); err != nil || tp.GetId() != fakeTemplate.GetId() {
		t.Errorf("GetTemplate = %v, %v", tp, err)
	}
	if _, err := c.GetTemplate(ctx, "nope"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "template nope") {
		t.Errorf("GetTemplate(nope) = %v, want ErrNotFound", err)
	}
	if ts, err := c.ListTemplates(ctx, "acme"); err != nil || len(ts) != 1 {
		t.Errorf("ListTemplates = %v, %v", ts, err)
	}
	if err := c.DeleteTemplate(ctx, "tools"); err != nil {
		t.Errorf("DeleteTemplate = %v", err)
	}
	a, err := c.Acquire(ctx, "alice", WithTemplate("tools"))
	if err != nil || f.acquired.GetOptions().GetTemplate() != "tools" || a.Sandbox.GetTemplate() != fakeTemplate.GetId() {
		t.Errorf("Acquire(WithTemplate) = %v, %v; options %v", a, err, f.acquired.GetOptions())
	}
	want := []any{
		&sandboxv1.FollowTemplateBuildRequest{Template: "tools", Version: 1, AfterSeq: 1},
		&sandboxv1.GetTemplateRequest{Template: "tools"},
		&sandboxv1.GetTemplateRequest{Template: "nope"},
		&sandboxv1.ListTemplatesRequest{Tenant: "acme"},
		&sandboxv1.DeleteTemplateRequest{Template: "tools"},
	}
	if diff := cmp.Diff(want, f.requests, protocmp.Transform()); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}
