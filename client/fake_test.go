package client

// A fake sandboxd for the client's unit tests (one layer: the gRPC
// contract). The real sandboxd is exercised by the agent's, sandboxctl's
// and the e2e suites' integration tests.

import (
	"bytes"
	"context"
	"io"
	"net"
	"sort"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// fakeSandboxd knows commands by ID; each has a fixed list of events.
// breakAfter makes the next stream fail with UNAVAILABLE after that many
// events, as a sandboxd restart would; dropExecute makes the next Execute
// fail with UNAVAILABLE before the command is recorded, as a connection
// dropped before the request arrived would.
type fakeSandboxd struct {
	sandboxv1.UnimplementedSandboxServiceServer
	mu          sync.Mutex
	alive       bool
	deadReason  string // when set, the sandbox exists but is dead
	commands    map[string][]*sandboxv1.ExecuteEvent
	executes    int
	streams     []int64 // after_seq of each StreamCommand
	breakAfter  int
	dropExecute bool
	auth        []string
	acquired    []*sandboxv1.AcquireSandboxRequest
	deleted     []string
	files       map[string][]byte
	stateless   []*sandboxv1.RunStatelessRequest
}

func newFake() *fakeSandboxd {
	return &fakeSandboxd{alive: true, commands: map[string][]*sandboxv1.ExecuteEvent{}, files: map[string][]byte{}}
}

func (f *fakeSandboxd) events(id string) []*sandboxv1.ExecuteEvent {
	out := []*sandboxv1.ExecuteEvent{{Seq: 1, CommandId: id, Event: &sandboxv1.ExecuteEvent_Started{Started: &sandboxv1.Started{Language: "python"}}}}
	for i, s := range []string{"a", "b", "c"} {
		out = append(out, &sandboxv1.ExecuteEvent{Seq: int64(i + 2), CommandId: id, Event: &sandboxv1.ExecuteEvent_Stdout{Stdout: &sandboxv1.OutputChunk{Text: s}}})
	}
	return append(out, &sandboxv1.ExecuteEvent{Seq: 5, CommandId: id, Event: &sandboxv1.ExecuteEvent_Done{Done: &sandboxv1.Done{Status: sandboxv1.CommandStatus_COMMAND_STATUS_OK}}})
}

func (f *fakeSandboxd) send(id string, after int64, stream grpc.ServerStreamingServer[sandboxv1.ExecuteEvent]) error {
	f.mu.Lock()
	evs := f.commands[id]
	brk := f.breakAfter
	f.breakAfter = 0
	f.mu.Unlock()
	sent := 0
	for _, e := range evs {
		if e.Seq <= after {
			continue
		}
		if brk > 0 && sent == brk {
			return status.Error(codes.Unavailable, "restarting")
		}
		if err := stream.Send(e); err != nil {
			return err
		}
		sent++
	}
	return nil
}

// record notes the authorization metadata of a call.
func (f *fakeSandboxd) record(ctx context.Context) {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		f.auth = append(f.auth, md.Get("authorization")...)
	}
}

func (f *fakeSandboxd) Execute(req *sandboxv1.ExecuteRequest, stream grpc.ServerStreamingServer[sandboxv1.ExecuteEvent]) error {
	f.mu.Lock()
	f.record(stream.Context())
	if !f.alive {
		f.mu.Unlock()
		return status.Error(codes.NotFound, "no such sandbox")
	}
	f.executes++
	if f.dropExecute {
		f.dropExecute = false
		f.mu.Unlock()
		return status.Error(codes.Unavailable, "connection dropped")
	}
	if _, ok := f.commands[req.GetCommandId()]; !ok {
		f.commands[req.GetCommandId()] = f.events(req.GetCommandId())
	}
	f.mu.Unlock()
	return f.send(req.GetCommandId(), 0, stream)
}

func (f *fakeSandboxd) RunStateless(req *sandboxv1.RunStatelessRequest, stream grpc.ServerStreamingServer[sandboxv1.ExecuteEvent]) error {
	f.mu.Lock()
	f.stateless = append(f.stateless, req)
	f.commands["once"] = f.events("once")
	f.mu.Unlock()
	return f.send("once", 0, stream)
}

func (f *fakeSandboxd) StreamCommand(req *sandboxv1.StreamCommandRequest, stream grpc.ServerStreamingServer[sandboxv1.ExecuteEvent]) error {
	f.mu.Lock()
	f.streams = append(f.streams, req.GetAfterSeq())
	_, known := f.commands[req.GetCommandId()]
	alive := f.alive
	f.mu.Unlock()
	if !alive {
		return status.Error(codes.NotFound, "no such sandbox")
	}
	if !known {
		return status.Error(codes.NotFound, "no such command")
	}
	return f.send(req.GetCommandId(), req.GetAfterSeq(), stream)
}

func (f *fakeSandboxd) GetSandbox(_ context.Context, req *sandboxv1.GetSandboxRequest) (*sandboxv1.GetSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.alive {
		return nil, status.Errorf(codes.NotFound, "sandbox %s not found", req.GetSandboxId())
	}
	sb := &sandboxv1.Sandbox{SandboxId: req.GetSandboxId(), State: sandboxv1.SandboxState_SANDBOX_STATE_RUNNING}
	if f.deadReason != "" {
		sb.State, sb.StateReason = sandboxv1.SandboxState_SANDBOX_STATE_DEAD, f.deadReason
	}
	return &sandboxv1.GetSandboxResponse{Sandbox: sb}, nil
}

func (f *fakeSandboxd) AcquireSandbox(ctx context.Context, req *sandboxv1.AcquireSandboxRequest) (*sandboxv1.AcquireSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(ctx)
	f.acquired = append(f.acquired, req)
	if req.GetUserId() == "" {
		return nil, status.Error(codes.InvalidArgument, "user_id is required")
	}
	return &sandboxv1.AcquireSandboxResponse{
		Sandbox:           &sandboxv1.Sandbox{SandboxId: "sb-" + req.GetUserId(), UserId: req.GetUserId(), State: sandboxv1.SandboxState_SANDBOX_STATE_RUNNING},
		Created:           true,
		StateLost:         true,
		ReplacedSandboxId: "sb-old",
		ReplacedReason:    "container exited with code 137",
	}, nil
}

func (f *fakeSandboxd) ListSandboxes(_ context.Context, req *sandboxv1.ListSandboxesRequest) (*sandboxv1.ListSandboxesResponse, error) {
	all := []*sandboxv1.Sandbox{
		{SandboxId: "sb-1", UserId: "alice", Tenant: "default", State: sandboxv1.SandboxState_SANDBOX_STATE_RUNNING},
		{SandboxId: "sb-2", UserId: "bob", Tenant: "acme", State: sandboxv1.SandboxState_SANDBOX_STATE_DEAD},
	}
	var out []*sandboxv1.Sandbox
	for _, sb := range all {
		if (req.GetUserId() == "" || req.GetUserId() == sb.GetUserId()) && (req.GetTenant() == "" || req.GetTenant() == sb.GetTenant()) &&
			(req.GetState() == sandboxv1.SandboxState_SANDBOX_STATE_UNSPECIFIED || req.GetState() == sb.GetState()) {
			out = append(out, sb)
		}
	}
	return &sandboxv1.ListSandboxesResponse{Sandboxes: out}, nil
}

func (f *fakeSandboxd) DeleteSandbox(_ context.Context, req *sandboxv1.DeleteSandboxRequest) (*sandboxv1.DeleteSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.GetSandboxId() != "sb-1" {
		return nil, status.Errorf(codes.NotFound, "sandbox %s not found", req.GetSandboxId())
	}
	f.deleted = append(f.deleted, req.GetSandboxId())
	return &sandboxv1.DeleteSandboxResponse{}, nil
}

func (f *fakeSandboxd) InterruptCommand(_ context.Context, req *sandboxv1.InterruptCommandRequest) (*sandboxv1.InterruptCommandResponse, error) {
	return nil, status.Errorf(codes.NotFound, "command %s not found", req.GetCommandId())
}

// The file calls keep one flat directory of files, keyed by sandbox/path.

func (f *fakeSandboxd) UploadFile(stream grpc.ClientStreamingServer[sandboxv1.UploadFileRequest, sandboxv1.UploadFileResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	h := first.GetHeader()
	if h == nil || strings.Contains(h.GetPath(), "..") {
		return status.Error(codes.InvalidArgument, "path must stay under /workspace")
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
	f.files[h.GetSandboxId()+"/"+h.GetPath()] = buf.Bytes()
	f.mu.Unlock()
	return stream.SendAndClose(&sandboxv1.UploadFileResponse{File: &sandboxv1.FileInfo{Path: h.GetPath(), Size: int64(buf.Len())}})
}

func (f *fakeSandboxd) DownloadFile(req *sandboxv1.DownloadFileRequest, stream grpc.ServerStreamingServer[sandboxv1.DownloadFileResponse]) error {
	f.mu.Lock()
	data, ok := f.files[req.GetSandboxId()+"/"+req.GetPath()]
	f.mu.Unlock()
	if !ok {
		return status.Errorf(codes.NotFound, "file %s not found", req.GetPath())
	}
	if err := stream.Send(&sandboxv1.DownloadFileResponse{File: &sandboxv1.FileInfo{Path: req.GetPath(), Size: int64(len(data))}}); err != nil {
		return err
	}
	for len(data) > 0 {
		n := min(len(data), 1<<20)
		if err := stream.Send(&sandboxv1.DownloadFileResponse{Chunk: data[:n]}); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

func (f *fakeSandboxd) ListFiles(_ context.Context, req *sandboxv1.ListFilesRequest) (*sandboxv1.ListFilesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*sandboxv1.FileInfo
	for k, v := range f.files {
		if p, ok := strings.CutPrefix(k, req.GetSandboxId()+"/"); ok {
			out = append(out, &sandboxv1.FileInfo{Path: p, Size: int64(len(v))})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetPath() < out[j].GetPath() })
	return &sandboxv1.ListFilesResponse{Files: out}, nil
}

// startFake serves f (and a SERVING health service) over an in-memory
// listener and returns a client dialled to it with opts.
func startFake(t *testing.T, f *fakeSandboxd, opts ...Option) *Client {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	sandboxv1.RegisterSandboxServiceServer(srv, f)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	opts = append(opts, WithDialOptions(grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) })))
	c, err := Dial("passthrough:///bufnet", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
