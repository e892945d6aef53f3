package grpcapi

import (
	"context"
	"io"
	"path"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// maxErrorMessage bounds what an InvalidArgument may echo back: a request
// carries up to megabytes, its error says what is wrong with it, not all
// of it again.
const maxErrorMessage = 1024

// FuzzValidation drives every method of the service with arbitrary field
// values (a, b, c: IDs, paths, languages, env; n: numbers; event: an events
// file line the domain replays) over a domain that accepts everything, and
// checks the service's side of the contract:
//
//   - no request panics it;
//   - a request it refuses gets InvalidArgument with a short, non-empty
//     message, and never reaches the domain;
//   - what reaches the domain is well-formed (IDs that pass the domain's
//     validators, a known language, no negative timeout or seq);
//   - a malformed sandbox ID is always refused;
//   - every message it sends can be marshalled (the domain's events, from
//     any line the events parser accepts, convert to valid API messages).
//
// The service is called directly, not over gRPC, so strings that are not
// valid UTF-8 (which a gRPC client cannot send) are covered too and a panic
// fails the fuzzer instead of becoming Internal in the recovery interceptor.
func FuzzValidation(f *testing.F) {
	const okID = "sb-aaaaaaaaaaaaaaaaaaaa"
	for m := range methodCount {
		f.Add(uint8(m), okID, "c1", "python", int64(0), []byte(`{"seq":1,"type":"stdout","text":"hi\n"}`))
		f.Add(uint8(m), "../../etc/passwd", ".hidden", "ruby", int64(-1), []byte(`{"seq":2,"type":"done","status":"ok"}`))
		f.Add(uint8(m), "", "", "", int64(1), []byte(`{"seq":1,"type":"display","data":{"image/png":"eA=="}}`))
	}
	f.Add(uint8(0), "alice@example.com", "PATH", "/usr/bin", int64(1<<30), []byte(`{"seq":1,"type":"result","data":{"text/plain":"42"}}`))
	f.Add(uint8(4), okID, "c1", "bash", int64(-1), []byte(`{"seq":1,"type":"error","ename":"E","traceback":["x"]}`))
	f.Add(uint8(4), okID, strings.Repeat("c", 129), strings.Repeat("x", 5000), int64(1), []byte(`null`))
	f.Add(uint8(7), okID, "dir/../../x", "\xff\xfe", int64(0), []byte{})
	f.Add(uint8(2), "a b", "tenant/x", "", int64(42), []byte(`{"seq":1,"type":"started","time":"2026-11-21T07:30:00Z"}`))

	f.Fuzz(func(t *testing.T, method uint8, a, b, c string, n int64, event []byte) {
		fz := newFuzzDomain(t, event)
		svc := NewService(coretest.ValidatedWith(fz.m, coretest.NetworkPolicy()), nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()

		var sandboxID string
		var err error
		switch method % methodCount {
		case 0:
			_, err = svc.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: a, Options: &sandboxv1.SandboxOptions{
				Env:    map[string]string{b: c},
				Limits: &sandboxv1.ResourceLimits{MemoryBytes: n, NanoCpus: n, PidsLimit: n},
			}})
		case 1:
			sandboxID = a
			_, err = svc.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: a})
		case 2:
			_, err = svc.ListSandboxes(ctx, &sandboxv1.ListSandboxesRequest{UserId: a, Tenant: b, State: sandboxv1.SandboxState(n)})
		case 3:
			sandboxID = a
			_, err = svc.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: a})
		case 4:
			sandboxID = a
			err = svc.Execute(&sandboxv1.ExecuteRequest{SandboxId: a, CommandId: b, Language: c, Code: c,
				Timeout: &durationpb.Duration{Seconds: n, Nanos: int32(n)}}, &fuzzEventStream{t: t, ctx: ctx})
		case 5:
			sandboxID = a
			err = svc.StreamCommand(&sandboxv1.StreamCommandRequest{SandboxId: a, CommandId: b, AfterSeq: n}, &fuzzEventStream{t: t, ctx: ctx})
		case 6:
			sandboxID = a
			_, err = svc.InterruptCommand(ctx, &sandboxv1.InterruptCommandRequest{SandboxId: a, CommandId: b})
		case 7:
			sandboxID = a
			err = svc.UploadFile(&fuzzUploadStream{t: t, ctx: ctx, msgs: []*sandboxv1.UploadFileRequest{
				{Payload: &sandboxv1.UploadFileRequest_Header{Header: &sandboxv1.UploadFileHeader{SandboxId: a, Path: b}}},
				{Payload: &sandboxv1.UploadFileRequest_Chunk{Chunk: []byte(c)}},
			}})
		case 8:
			sandboxID = a
			err = svc.DownloadFile(&sandboxv1.DownloadFileRequest{SandboxId: a, Path: b}, &fuzzDownloadStream{t: t, ctx: ctx})
		case 9:
			sandboxID = a
			_, err = svc.ListFiles(ctx, &sandboxv1.ListFilesRequest{SandboxId: a, Path: b})
		case 10:
			sandboxID = a
			var resp *sandboxv1.UpdateNetworkPolicyResponse
			resp, err = svc.UpdateNetworkPolicy(ctx, &sandboxv1.UpdateNetworkPolicyRequest{SandboxId: a, Policy: &sandboxv1.NetworkPolicy{
				AllowOut: []string{b}, DenyOut: []string{c},
				Rules: map[string]*sandboxv1.NetworkRule{b: {Headers: map[string]string{c: string(event)}}}}})
			if err == nil {
				checkSendable(t, resp)
			}
		case 11:
			sandboxID = a
			var resp *sandboxv1.GetNetworkStatusResponse
			if resp, err = svc.GetNetworkStatus(ctx, &sandboxv1.GetNetworkStatusRequest{SandboxId: a}); err == nil {
				checkSendable(t, resp)
			}
		case 12:
			sandboxID = a
			if _, err = svc.GetHost(ctx, &sandboxv1.GetHostRequest{SandboxId: a, Port: uint32(n)}); err == nil && (n < 1 || n > 65535) {
				t.Fatalf("GetHost accepted port %d", n)
			}
		case 13:
			var resp *sandboxv1.CreateVolumeResponse
			if resp, err = svc.CreateVolume(ctx, &sandboxv1.CreateVolumeRequest{Name: a, SizeBytes: n}); err == nil {
				checkSendable(t, resp)
			}
		case 14:
			err = svc.UploadVolumeFile(&fuzzVolumeUploadStream{t: t, ctx: ctx, msgs: []*sandboxv1.UploadVolumeFileRequest{
				{Payload: &sandboxv1.UploadVolumeFileRequest_Header{Header: &sandboxv1.UploadVolumeFileHeader{Volume: a, Path: b, Overwrite: n%2 == 0}}},
				{Payload: &sandboxv1.UploadVolumeFileRequest_Chunk{Chunk: []byte(c)}},
			}})
		case 15:
			err = svc.DownloadVolumeFile(&sandboxv1.DownloadVolumeFileRequest{Volume: a, Path: b}, &fuzzVolumeDownloadStream{t: t, ctx: ctx})
		case 16:
			// The files listed have the names the fuzzed line gives: a
			// sandbox writes them.
			var resp *sandboxv1.ListVolumeFilesResponse
			if resp, err = svc.ListVolumeFiles(ctx, &sandboxv1.ListVolumeFilesRequest{Volume: a, Path: b, Depth: int32(n)}); err == nil {
				checkSendable(t, resp)
			}
		case 17:
			err = svc.UploadTemplateFile(&fuzzTemplateUploadStream{t: t, ctx: ctx, msgs: []*sandboxv1.UploadTemplateFileRequest{
				{Payload: &sandboxv1.UploadTemplateFileRequest_Header{Header: &sandboxv1.UploadTemplateFileHeader{Key: a}}},
				{Payload: &sandboxv1.UploadTemplateFileRequest_Chunk{Chunk: []byte(c)}},
			}})
		case 18:
			// Every kind of step, from the fuzzed strings; the build's log
			// and reason are the fuzzed line (a build prints anything).
			steps := []*sandboxv1.TemplateStep{
				{Step: &sandboxv1.TemplateStep_Apt{Apt: &sandboxv1.AptStep{Packages: []string{b}}}},
				{Step: &sandboxv1.TemplateStep_Copy{Copy: &sandboxv1.CopyStep{Archive: c, Src: b, Dest: "/" + b, Mode: uint32(n), Owner: c}}},
				{Step: &sandboxv1.TemplateStep_Env{Env: &sandboxv1.EnvStep{Vars: map[string]string{b: c}}}},
				{Step: &sandboxv1.TemplateStep_Workdir{Workdir: b}},
				{Step: &sandboxv1.TemplateStep_User{User: c}},
				{Step: &sandboxv1.TemplateStep_Run{Run: c}},
			}
			k := int(uint64(n) % uint64(len(steps)+1)) // all of them, or one
			if k < len(steps) {
				steps = steps[k : k+1]
			}
			err = svc.BuildTemplate(&sandboxv1.BuildTemplateRequest{Name: a, Spec: &sandboxv1.TemplateSpec{Base: b, Steps: steps}},
				&fuzzTemplateBuildStream{t: t, ctx: ctx})
		case 19:
			err = svc.FollowTemplateBuild(&sandboxv1.FollowTemplateBuildRequest{Template: a, Version: int32(n), AfterSeq: n},
				&fuzzTemplateFollowStream{t: t, ctx: ctx})
		}

		if err != nil {
			st, ok := status.FromError(err)
			if !ok || st.Code() != codes.InvalidArgument {
				t.Fatalf("method %d: error %v (%T); over a domain that accepts everything, want nil or InvalidArgument", method%methodCount, err, err)
			}
			if msg := st.Message(); msg == "" || len(msg) > maxErrorMessage {
				t.Fatalf("method %d: InvalidArgument with a message of %d bytes (want 1 to %d): %.200q…", method%methodCount, len(msg), maxErrorMessage, msg)
			}
			if calls := fz.m.Calls(); len(calls) != 0 {
				t.Fatalf("method %d: refused with %v, but the domain was called: %v", method%methodCount, err, calls)
			}
		}
		if method%methodCount != 0 && method%methodCount != 2 && method%methodCount <= 12 && core.ValidateSandboxID(sandboxID) != nil && err == nil {
			t.Fatalf("method %d: malformed sandbox ID %q accepted", method%methodCount, sandboxID)
		}
	})
}

// methodCount is the number of methods FuzzValidation drives.
const methodCount = 20

// fuzzDomain is a domain that accepts everything and checks that what it is
// given is well-formed.
type fuzzDomain struct {
	m *coretest.Manager
}

func newFuzzDomain(t *testing.T, event []byte) *fuzzDomain {
	checkSandbox := func(id string) {
		if err := core.ValidateSandboxID(id); err != nil {
			t.Fatalf("the domain got a malformed sandbox ID: %v", err)
		}
	}
	checkCommand := func(id string) {
		if err := ioproto.ValidateCommandID(id); err != nil {
			t.Fatalf("the domain got a malformed command ID: %v", err)
		}
	}
	checkPath := func(p string) {
		if p == "" {
			t.Fatalf("the domain got an empty path")
		}
	}
	sb := core.Sandbox{ID: "sb-aaaaaaaaaaaaaaaaaaaa", UserID: "u", State: core.StateRunning}
	m := &coretest.Manager{
		AcquireFunc: func(_ context.Context, userID string, _ core.Options) (core.AcquireResult, error) {
			if err := core.ValidateUserID(userID); err != nil {
				t.Fatalf("the domain got a malformed user ID: %v", err)
			}
			return core.AcquireResult{Sandbox: sb, Created: true}, nil
		},
		GetFunc: func(_ context.Context, id string) (core.Sandbox, error) {
			checkSandbox(id)
			return sb, nil
		},
		ListFunc: func(_ context.Context, f core.ListFilter) ([]core.Sandbox, error) {
			if f.UserID != "" && core.ValidateUserID(f.UserID) != nil {
				t.Fatalf("the domain got a malformed user ID filter %q", f.UserID)
			}
			if f.Tenant != "" && core.ValidateTenant(f.Tenant) != nil {
				t.Fatalf("the domain got a malformed tenant filter %q", f.Tenant)
			}
			if f.State != "" && f.State != core.StateRunning && f.State != core.StateDead && f.State != core.StateHibernated {
				t.Fatalf("the domain got an unknown state filter %q", f.State)
			}
			return []core.Sandbox{sb}, nil
		},
		DeleteFunc: func(_ context.Context, id string) error {
			checkSandbox(id)
			return nil
		},
		SubmitFunc: func(_ context.Context, req core.ExecRequest) (string, error) {
			checkSandbox(req.SandboxID)
			if req.CommandID != "" {
				checkCommand(req.CommandID)
			}
			if req.Language != "" && !ioproto.KnownLanguage(req.Language) {
				t.Fatalf("the domain got language %q", req.Language)
			}
			if req.Timeout < 0 {
				t.Fatalf("the domain got a negative timeout %v", req.Timeout)
			}
			return "c1", nil
		},
		FollowFunc: func(_ context.Context, id, cmd string, afterSeq int64, fn func(core.Event) error) error {
			checkSandbox(id)
			checkCommand(cmd)
			if afterSeq < 0 {
				t.Fatalf("the domain got a negative after_seq %d", afterSeq)
			}
			// Replay the fuzzed events line, if the events parser takes it.
			if ev, err := ioproto.ParseEvent(event); err == nil {
				if err := fn(ev); err != nil {
					return err
				}
			}
			return fn(core.Event{Seq: 1 << 40, Type: ioproto.EventDone, Status: ioproto.StatusOK})
		},
		InterruptFunc: func(_ context.Context, id, cmd string) error {
			checkSandbox(id)
			checkCommand(cmd)
			return nil
		},
		UploadFunc: func(_ context.Context, id, p string, r io.Reader) (core.FileInfo, error) {
			checkSandbox(id)
			checkPath(p)
			n, err := io.Copy(io.Discard, r)
			return core.FileInfo{Path: p, Size: n}, err
		},
		DownloadFunc: func(_ context.Context, id, p string) (io.ReadCloser, core.FileInfo, error) {
			checkSandbox(id)
			checkPath(p)
			return io.NopCloser(strings.NewReader(p)), core.FileInfo{Path: p, Size: int64(len(p))}, nil
		},
		ListFilesFunc: func(_ context.Context, id, p string) ([]core.FileInfo, error) {
			checkSandbox(id)
			return []core.FileInfo{{Path: "a"}}, nil
		},
		UpdateNetworkPolicyFunc: func(_ context.Context, id string, p core.NetworkPolicy) (core.Sandbox, error) {
			checkSandbox(id)
			if _, err := core.CompileNetworkPolicy(p); err != nil {
				t.Fatalf("the domain got a policy that does not compile: %v", err)
			}
			return core.Sandbox{ID: id, Network: true, NetworkPolicy: &p}, nil
		},
		NetworkStatusFunc: func(_ context.Context, id string) (core.NetworkStatus, error) {
			checkSandbox(id)
			// Denials carry what the sandbox sent: the fuzzed event as
			// the name and reason.
			return core.NetworkStatus{Denials: []core.NetworkDenial{{Kind: "dns", Name: string(event), Reason: "x " + string(event)}}}, nil
		},
		GetHostFunc: func(_ context.Context, id string, port int) (core.HostInfo, error) {
			checkSandbox(id)
			return core.HostInfo{URL: "https://h/"}, nil
		},
		CreateVolumeFunc: func(_ context.Context, name string, size int64) (core.Volume, error) {
			if err := core.ValidateVolumeName(name); err != nil {
				t.Fatalf("the domain got a malformed volume name: %v", err)
			}
			if size < core.MinVolumeBytes {
				t.Fatalf("the domain got a volume size of %d", size)
			}
			return core.Volume{ID: core.NewVolumeID(), Name: name, SizeBytes: size}, nil
		},
		VolumeUploadFunc: func(_ context.Context, ref, p string, r io.Reader, _ bool) (core.FileInfo, error) {
			checkVolumePath(t, ref, p)
			n, err := io.Copy(io.Discard, r)
			return core.FileInfo{Path: p, Size: n}, err
		},
		VolumeDownloadFunc: func(_ context.Context, ref, p string) (io.ReadCloser, core.FileInfo, error) {
			checkVolumePath(t, ref, p)
			return io.NopCloser(strings.NewReader(p)), core.FileInfo{Path: p, Size: int64(len(p))}, nil
		},
		VolumeListFilesFunc: func(_ context.Context, ref, p string, depth int) ([]core.FileInfo, error) {
			checkVolumePath(t, ref, p)
			if depth < 1 || depth > core.MaxListDepth {
				t.Fatalf("the domain got list depth %d", depth)
			}
			return []core.FileInfo{{Path: "."}, {Path: string(event)}, {Path: "a/" + string(event)}}, nil
		},
		PutTemplateFileFunc: func(_ context.Context, key string, r io.Reader) (bool, error) {
			if err := core.ValidateTemplateFileKey(key); err != nil {
				t.Fatalf("the domain got a malformed template file key: %v", err)
			}
			_, err := io.Copy(io.Discard, r)
			return false, err
		},
		BuildTemplateFunc: func(_ context.Context, name string, spec core.TemplateSpec, _ bool) (core.Template, core.TemplateVersion, error) {
			if err := core.ValidateTemplateName(name); err != nil {
				t.Fatalf("the domain got a malformed template name: %v", err)
			}
			if err := spec.Validate(); err != nil {
				t.Fatalf("the domain got an invalid spec: %v", err)
			}
			v := core.TemplateVersion{Version: 1, State: core.TemplateBuilding, SpecHash: spec.SpecHash("img")}
			return core.Template{ID: core.NewTemplateID(), Name: name, Versions: []core.TemplateVersion{v}}, v, nil
		},
		GetTemplateFunc: func(_ context.Context, ref string) (core.Template, error) {
			if err := core.ValidateTemplateRef(ref); err != nil {
				t.Fatalf("the domain got a malformed template reference: %v", err)
			}
			return core.Template{ID: core.NewTemplateID(), Name: "t", Versions: []core.TemplateVersion{{Version: 1, State: core.TemplateBuilding}}}, nil
		},
		FollowTemplateBuildFunc: func(_ context.Context, ref string, version int, after int64, fn func(core.TemplateBuildEvent) error) error {
			if err := core.ValidateTemplateRef(ref); err != nil {
				t.Fatalf("the domain got a malformed template reference: %v", err)
			}
			if version < 1 || after < 0 {
				t.Fatalf("the domain got version %d, after %d", version, after)
			}
			if err := fn(core.TemplateBuildEvent{Seq: after + 1, Line: string(event)}); err != nil {
				return err
			}
			return fn(core.TemplateBuildEvent{Seq: after + 2, Done: &core.TemplateVersion{Version: version, State: core.TemplateReady, Reason: string(event)}})
		},
	}
	return &fuzzDomain{m: m}
}

// checkVolumePath fails unless the domain got a valid volume reference
// and a clean path relative to the volume's root.
func checkVolumePath(t *testing.T, ref, p string) {
	if err := core.ValidateVolumeRef(ref); err != nil {
		t.Fatalf("the domain got a malformed volume reference: %v", err)
	}
	if p == "" || strings.HasPrefix(p, "/") || path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../") {
		t.Fatalf("the domain got volume path %q, not clean and relative", p)
	}
}

// checkSendable fails unless a message the service sends would marshal
// (proto3 strings must be valid UTF-8, for one).
func checkSendable(t *testing.T, m proto.Message) {
	if _, err := proto.Marshal(m); err != nil {
		t.Fatalf("the service sent a message that cannot be marshalled: %v: %v", err, m)
	}
}

// The streams below stand in for gRPC's; the service uses only Context,
// Send, Recv and SendAndClose of them (the embedded interface is nil).

type fuzzEventStream struct {
	grpc.ServerStream
	t   *testing.T
	ctx context.Context
}

func (s *fuzzEventStream) Context() context.Context { return s.ctx }

func (s *fuzzEventStream) Send(ev *sandboxv1.ExecuteEvent) error {
	checkSendable(s.t, ev)
	return nil
}

type fuzzDownloadStream struct {
	grpc.ServerStream
	t   *testing.T
	ctx context.Context
}

func (s *fuzzDownloadStream) Context() context.Context { return s.ctx }

func (s *fuzzDownloadStream) Send(m *sandboxv1.DownloadFileResponse) error {
	if !utf8.ValidString(m.GetFile().GetPath()) {
		return nil // the path came from the request, which gRPC would have refused
	}
	checkSendable(s.t, m)
	return nil
}

type fuzzUploadStream struct {
	grpc.ServerStream
	t    *testing.T
	ctx  context.Context
	msgs []*sandboxv1.UploadFileRequest
}

func (s *fuzzUploadStream) Context() context.Context { return s.ctx }

func (s *fuzzUploadStream) Recv() (*sandboxv1.UploadFileRequest, error) {
	if len(s.msgs) == 0 {
		return nil, io.EOF
	}
	m := s.msgs[0]
	s.msgs = s.msgs[1:]
	return m, nil
}

func (s *fuzzUploadStream) SendAndClose(*sandboxv1.UploadFileResponse) error { return nil }

type fuzzVolumeDownloadStream struct {
	grpc.ServerStream
	t   *testing.T
	ctx context.Context
}

func (s *fuzzVolumeDownloadStream) Context() context.Context { return s.ctx }

func (s *fuzzVolumeDownloadStream) Send(m *sandboxv1.DownloadVolumeFileResponse) error {
	checkSendable(s.t, m)
	return nil
}

type fuzzVolumeUploadStream struct {
	grpc.ServerStream
	t    *testing.T
	ctx  context.Context
	msgs []*sandboxv1.UploadVolumeFileRequest
}

func (s *fuzzVolumeUploadStream) Context() context.Context { return s.ctx }

func (s *fuzzVolumeUploadStream) Recv() (*sandboxv1.UploadVolumeFileRequest, error) {
	if len(s.msgs) == 0 {
		return nil, io.EOF
	}
	m := s.msgs[0]
	s.msgs = s.msgs[1:]
	return m, nil
}

func (s *fuzzVolumeUploadStream) SendAndClose(m *sandboxv1.UploadVolumeFileResponse) error {
	checkSendable(s.t, m)
	return nil
}

type fuzzTemplateUploadStream struct {
	grpc.ServerStream
	t    *testing.T
	ctx  context.Context
	msgs []*sandboxv1.UploadTemplateFileRequest
}

func (s *fuzzTemplateUploadStream) Context() context.Context { return s.ctx }

func (s *fuzzTemplateUploadStream) Recv() (*sandboxv1.UploadTemplateFileRequest, error) {
	if len(s.msgs) == 0 {
		return nil, io.EOF
	}
	m := s.msgs[0]
	s.msgs = s.msgs[1:]
	return m, nil
}

func (s *fuzzTemplateUploadStream) SendAndClose(m *sandboxv1.UploadTemplateFileResponse) error {
	checkSendable(s.t, m)
	return nil
}

type fuzzTemplateBuildStream struct {
	grpc.ServerStream
	t   *testing.T
	ctx context.Context
}

func (s *fuzzTemplateBuildStream) Context() context.Context { return s.ctx }

func (s *fuzzTemplateBuildStream) Send(m *sandboxv1.BuildTemplateResponse) error {
	checkSendable(s.t, m)
	return nil
}

type fuzzTemplateFollowStream struct {
	grpc.ServerStream
	t   *testing.T
	ctx context.Context
}

func (s *fuzzTemplateFollowStream) Context() context.Context { return s.ctx }

func (s *fuzzTemplateFollowStream) Send(m *sandboxv1.FollowTemplateBuildResponse) error {
	checkSendable(s.t, m)
	return nil
}
