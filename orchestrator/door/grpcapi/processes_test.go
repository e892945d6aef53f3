package grpcapi

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// serveProcesses serves m over bufconn and returns a client.
func serveProcesses(t *testing.T, m *coretest.Manager) sandboxv1.SandboxServiceClient {
	t.Helper()
	srv := NewServer(coretest.Validated(m), nil)
	lis := bufconn.Listen(1 << 20)
	go srv.Serve(lis)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); srv.Stop() })
	return sandboxv1.NewSandboxServiceClient(conn)
}

func TestProcessCallsShapeAndDelegation(t *testing.T) {
	ctx := testCtx(t)
	var got []string
	pm := &coretest.Manager{
		SendStdinFunc: func(_ context.Context, sb, cmd string, data []byte) error {
			got = append(got, fmt.Sprintf("send %s/%s %q", sb, cmd, data))
			return nil
		},
		CloseStdinFunc: func(_ context.Context, sb, cmd string) error {
			return fmt.Errorf("%w: command %s has finished", core.ErrFailedPrecondition, cmd)
		},
		ResizePtyFunc: func(_ context.Context, sb, cmd string, size core.PtySize) error {
			got = append(got, fmt.Sprintf("resize %s %dx%d", cmd, size.Rows, size.Cols))
			return nil
		},
	}
	c := serveProcesses(t, pm)
	if _, err := c.SendStdin(ctx, &sandboxv1.SendStdinRequest{SandboxId: sb1, CommandId: "c1", Data: []byte("hi\n")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ResizePty(ctx, &sandboxv1.ResizePtyRequest{SandboxId: sb1, CommandId: "c1", Size: &sandboxv1.PtySize{Rows: 3, Cols: 4}}); err != nil {
		t.Fatal(err)
	}
	if want := []string{`send ` + sb1 + `/c1 "hi\n"`, "resize c1 3x4"}; !slices.Equal(got, want) {
		t.Errorf("domain got %q; want %q", got, want)
	}
	_, err := c.CloseStdin(ctx, &sandboxv1.CloseStdinRequest{SandboxId: sb1, CommandId: "c1"})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("CloseStdin with a finished command: %v; want FAILED_PRECONDITION", err)
	}

	before := len(pm.Calls())
	for name, call := range map[string]func() error{
		"SendStdin without sandbox": func() error {
			_, err := c.SendStdin(ctx, &sandboxv1.SendStdinRequest{CommandId: "c1"})
			return err
		},
		"CloseStdin without command": func() error {
			_, err := c.CloseStdin(ctx, &sandboxv1.CloseStdinRequest{SandboxId: sb1})
			return err
		},
		"ResizePty without size": func() error {
			_, err := c.ResizePty(ctx, &sandboxv1.ResizePtyRequest{SandboxId: sb1, CommandId: "c1"})
			return err
		},
		"ListCommands without sandbox": func() error {
			_, err := c.ListCommands(ctx, &sandboxv1.ListCommandsRequest{})
			return err
		},
	} {
		if err := call(); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v; want INVALID_ARGUMENT", name, err)
		}
	}
	if n := len(pm.Calls()); n != before {
		t.Errorf("malformed requests reached the domain: %v", pm.Calls()[before:])
	}

	// A backend without the calls says so the one way every backend does
	// (core.Unsupported): UNIMPLEMENTED naming it and the feature.
	plain := serveProcesses(t, &coretest.Manager{ListCommandsFunc: func(context.Context, string, int, string) (core.CommandPage, error) {
		return core.CommandPage{}, core.Unsupported("kubernetes", "command listings")
	}})
	if _, err := plain.ListCommands(ctx, &sandboxv1.ListCommandsRequest{SandboxId: sb1}); status.Code(err) != codes.Unimplemented ||
		!strings.Contains(status.Convert(err).Message(), "command listings are not supported by sandboxd's kubernetes backend") {
		t.Errorf("ListCommands on a backend without it: %v; want UNIMPLEMENTED naming the backend and the feature", err)
	}
}

func TestListCommandsConversion(t *testing.T) {
	ctx := testCtx(t)
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	three := 3
	pm := &coretest.Manager{
		ListCommandsFunc: func(_ context.Context, sb string, size int, token string) (core.CommandPage, error) {
			if size != 7 || token != "12" {
				return core.CommandPage{}, fmt.Errorf("%w: got size %d token %q", core.ErrInvalidArgument, size, token)
			}
			return core.CommandPage{Total: 40, NextPageToken: "5", Commands: []core.CommandInfo{
				{ID: "q", Language: "bash", Phase: core.CommandQueued, Stdin: true},
				{ID: "r", Language: "python", Phase: core.CommandRunning, StartedAt: start, OutputAvailable: true},
				{ID: "f", Language: "bash\xff", Phase: core.CommandFinished, Status: "error", StartedAt: start,
					FinishedAt: start.Add(2 * time.Second), Duration: 2 * time.Second, ExitCode: &three, OutputAvailable: true, Pty: true, Stdin: true},
				{ID: "p", Phase: core.CommandFinished},
				{ID: "u", Phase: core.CommandUnknown},
			}}, nil
		},
	}
	c := serveProcesses(t, pm)
	r, err := c.ListCommands(ctx, &sandboxv1.ListCommandsRequest{SandboxId: sb1, PageSize: 7, PageToken: "12"})
	if err != nil {
		t.Fatal(err)
	}
	if r.GetTotalCommands() != 40 || r.GetNextPageToken() != "5" || len(r.GetCommands()) != 5 {
		t.Fatalf("response %v", r)
	}
	cs := r.GetCommands()
	if q := cs[0]; q.GetState() != sandboxv1.CommandState_COMMAND_STATE_QUEUED || q.GetStartedAt() != nil || !q.GetStdin() || q.GetStatus() != 0 {
		t.Errorf("queued: %v", q)
	}
	if rn := cs[1]; rn.GetState() != sandboxv1.CommandState_COMMAND_STATE_RUNNING || !rn.GetStartedAt().AsTime().Equal(start) || rn.GetFinishedAt() != nil || rn.ExitCode != nil {
		t.Errorf("running: %v", rn)
	}
	f := cs[2]
	if f.GetState() != sandboxv1.CommandState_COMMAND_STATE_FINISHED || f.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_ERROR ||
		f.GetExitCode() != 3 || f.GetDuration().AsDuration() != 2*time.Second || !f.GetFinishedAt().AsTime().Equal(start.Add(2*time.Second)) ||
		f.GetLanguage() != "bash\uFFFD" || !f.GetPty() {
		t.Errorf("finished: %v", f)
	}
	if p := cs[3]; p.GetOutputAvailable() || p.GetStatus() != 0 || p.GetFinishedAt() != nil {
		t.Errorf("pruned: %v", p)
	}
	if u := cs[4]; u.GetState() != sandboxv1.CommandState_COMMAND_STATE_UNSPECIFIED {
		t.Errorf("unknown: %v", u)
	}
}

func TestExecuteInputFieldsAndHeader(t *testing.T) {
	ctx := testCtx(t)
	var req core.ExecRequest
	m := &coretest.Manager{
		SubmitFunc: func(_ context.Context, r core.ExecRequest) (string, error) { req = r; return "gen-7", nil },
		FollowFunc: func(_ context.Context, _, _ string, _ int64, fn func(core.Event) error) error {
			return fn(core.Event{Seq: 1, Type: "done", Status: "ok"})
		},
	}
	c := serveProcesses(t, m)
	s, err := c.Execute(ctx, &sandboxv1.ExecuteRequest{SandboxId: sb1, Language: "bash", Code: "cat", Stdin: true, Pty: &sandboxv1.PtySize{Rows: 24, Cols: 80}})
	if err != nil {
		t.Fatal(err)
	}
	var md metadata.MD
	if md, err = s.Header(); err != nil || !slices.Equal(md.Get(CommandIDHeader), []string{"gen-7"}) {
		t.Errorf("header %v, %v; want %s: gen-7", md, err, CommandIDHeader)
	}
	for {
		if _, err := s.Recv(); err != nil {
			break
		}
	}
	if !req.Stdin || req.Pty != (core.PtySize{Rows: 24, Cols: 80}) {
		t.Errorf("Submit got %+v", req)
	}
	s, err = c.Execute(ctx, &sandboxv1.ExecuteRequest{SandboxId: sb1, Language: "bash", Pty: &sandboxv1.PtySize{}})
	if err == nil {
		_, err = s.Recv()
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("Execute with an empty pty size: %v; want INVALID_ARGUMENT", err)
	}
}
