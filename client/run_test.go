package client

// Unit tests of the client's resume logic against a fake sandboxd (one
// layer: the gRPC contract). The real sandboxd is exercised by the agent's
// integration tests.

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// fakeSandboxd knows commands by ID; each has a fixed list of events.
// breakAfter makes the next stream fail with UNAVAILABLE after that many
// events, as a sandboxd restart would.
type fakeSandboxd struct {
	sandboxv1.UnimplementedSandboxServiceServer
	mu         sync.Mutex
	alive      bool
	commands   map[string][]*sandboxv1.ExecuteEvent
	executes   int
	streams    []int64 // after_seq of each StreamCommand
	breakAfter int
	auth       []string
}

func (f *fakeSandboxd) events(id string) []*sandboxv1.ExecuteEvent {
	out := []*sandboxv1.ExecuteEvent{{Seq: 1, Event: &sandboxv1.ExecuteEvent_Started{Started: &sandboxv1.Started{Language: "python"}}}}
	for i, s := range []string{"a", "b", "c"} {
		out = append(out, &sandboxv1.ExecuteEvent{Seq: int64(i + 2), Event: &sandboxv1.ExecuteEvent_Stdout{Stdout: &sandboxv1.OutputChunk{Text: s}}})
	}
	return append(out, &sandboxv1.ExecuteEvent{Seq: 5, Event: &sandboxv1.ExecuteEvent_Done{Done: &sandboxv1.Done{Status: sandboxv1.CommandStatus_COMMAND_STATUS_OK}}})
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

func (f *fakeSandboxd) Execute(req *sandboxv1.ExecuteRequest, stream grpc.ServerStreamingServer[sandboxv1.ExecuteEvent]) error {
	f.mu.Lock()
	if md, ok := metadata.FromIncomingContext(stream.Context()); ok {
		f.auth = append(f.auth, md.Get("authorization")...)
	}
	if !f.alive {
		f.mu.Unlock()
		return status.Error(codes.NotFound, "no such sandbox")
	}
	f.executes++
	if _, ok := f.commands[req.GetCommandId()]; !ok {
		f.commands[req.GetCommandId()] = f.events(req.GetCommandId())
	}
	f.mu.Unlock()
	return f.send(req.GetCommandId(), 0, stream)
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
		return nil, status.Error(codes.NotFound, "no such sandbox")
	}
	return &sandboxv1.GetSandboxResponse{Sandbox: &sandboxv1.Sandbox{SandboxId: req.GetSandboxId(), State: sandboxv1.SandboxState_SANDBOX_STATE_RUNNING}}, nil
}

func startFake(t *testing.T, f *fakeSandboxd, token string) *Client {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	sandboxv1.RegisterSandboxServiceServer(srv, f)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	c, err := dial("passthrough:///bufnet", token,
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func collect(t *testing.T, c *Client, cmd Command, resume bool) (string, *Outcome, error) {
	t.Helper()
	var seen string
	out, err := c.Run(context.Background(), cmd, resume, func(ev Event) { seen += ev.Text })
	return seen, out, err
}

func TestRunNew(t *testing.T) {
	f := &fakeSandboxd{alive: true, commands: map[string][]*sandboxv1.ExecuteEvent{}}
	c := startFake(t, f, "s3cret")
	seen, out, err := collect(t, c, Command{SandboxID: "sb-1", ID: "c1", Code: "x"}, false)
	if err != nil || seen != "abc" || out.Stdout != "abc" || out.Done == nil || out.Done.Status != StatusOK {
		t.Fatalf("Run = %q, %+v, %v", seen, out, err)
	}
	if f.executes != 1 || len(f.streams) != 0 {
		t.Errorf("%d Execute and %d StreamCommand calls, want 1 and 0", f.executes, len(f.streams))
	}
	if len(f.auth) != 1 || f.auth[0] != "Bearer s3cret" {
		t.Errorf("authorization metadata = %q", f.auth)
	}
}

// A resumed command that sandboxd already knows is streamed, not executed.
func TestRunResumeKnownCommand(t *testing.T) {
	f := &fakeSandboxd{alive: true, commands: map[string][]*sandboxv1.ExecuteEvent{}}
	f.commands["c1"] = f.events("c1")
	c := startFake(t, f, "")
	seen, _, err := collect(t, c, Command{SandboxID: "sb-1", ID: "c1"}, true)
	if err != nil || seen != "abc" {
		t.Fatalf("Run = %q, %v", seen, err)
	}
	if f.executes != 0 || len(f.streams) != 1 || f.streams[0] != 0 {
		t.Errorf("%d Execute calls and StreamCommand after %v; want 0 and [0]", f.executes, f.streams)
	}
}

// A resumed command that never reached sandboxd is sent once.
func TestRunResumeUnknownCommand(t *testing.T) {
	f := &fakeSandboxd{alive: true, commands: map[string][]*sandboxv1.ExecuteEvent{}}
	c := startFake(t, f, "")
	seen, _, err := collect(t, c, Command{SandboxID: "sb-1", ID: "c1"}, true)
	if err != nil || seen != "abc" || f.executes != 1 {
		t.Fatalf("Run = %q, %v after %d Execute calls; want abc after 1", seen, err, f.executes)
	}
}

// A stream broken mid-way resumes after the last event: no duplicates.
func TestRunResumesBrokenStream(t *testing.T) {
	f := &fakeSandboxd{alive: true, commands: map[string][]*sandboxv1.ExecuteEvent{}, breakAfter: 2}
	c := startFake(t, f, "")
	seen, out, err := collect(t, c, Command{SandboxID: "sb-1", ID: "c1"}, false)
	if err != nil || seen != "abc" || out.Stdout != "abc" {
		t.Fatalf("Run = %q, %v", seen, err)
	}
	if f.executes != 1 || len(f.streams) != 1 || f.streams[0] != 2 {
		t.Errorf("%d Execute calls and StreamCommand after %v; want 1 and [2]", f.executes, f.streams)
	}
}

func TestRunSandboxGone(t *testing.T) {
	f := &fakeSandboxd{alive: false, commands: map[string][]*sandboxv1.ExecuteEvent{}}
	c := startFake(t, f, "")
	for _, resume := range []bool{false, true} {
		if _, _, err := collect(t, c, Command{SandboxID: "sb-1", ID: "c1"}, resume); !errors.Is(err, ErrGone) {
			t.Errorf("resume=%v: %v, want ErrGone", resume, err)
		}
	}
	if err := c.Check(context.Background(), "sb-1"); !errors.Is(err, ErrGone) {
		t.Errorf("Check = %v, want ErrGone", err)
	}
}
