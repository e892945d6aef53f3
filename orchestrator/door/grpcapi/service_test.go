package grpcapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sandboxd/sandboxd/ioproto"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

var t0 = time.Date(2026, 11, 21, 7, 30, 0, 0, time.UTC)

// script is a command's events as the domain delivers them.
func script() []core.Event {
	exit := 3
	return []core.Event{
		{Seq: 1, Type: ioproto.EventStarted, CommandID: "c1", Language: "python", Time: t0},
		{Seq: 2, Type: ioproto.EventStdout, Text: "hello\n"},
		{Seq: 3, Type: ioproto.EventStderr, Text: "warn\n"},
		{Seq: 4, Type: ioproto.EventDisplay, Data: map[string]string{"text/plain": "<Figure>", "image/png": "iVBORw0K"}},
		{Seq: 5, Type: "from-the-future"},
		{Seq: 6, Type: ioproto.EventResult, Data: map[string]string{"text/plain": "42"}},
		{Seq: 7, Type: ioproto.EventError, EName: "NameError", EValue: "y", Traceback: []string{"tb1\n", "tb2\n"}},
		{Seq: 8, Type: ioproto.EventDone, Status: ioproto.StatusError, DurationMS: 1500, StateLost: true, Reason: "why",
			OutputTruncated: true, ExitCode: &exit, Time: t0.Add(2 * time.Second), Files: []ioproto.File{{Path: "out.csv", Size: 120}}},
	}
}

// wantEvents is script() as a client must see it for command cid.
func wantEvents(cid string) []*sandboxv1.ExecuteEvent {
	exit := int32(3)
	return []*sandboxv1.ExecuteEvent{
		{Seq: 1, CommandId: cid, Event: &sandboxv1.ExecuteEvent_Started{Started: &sandboxv1.Started{Language: "python", Time: timestamppb.New(t0)}}},
		{Seq: 2, CommandId: cid, Event: &sandboxv1.ExecuteEvent_Stdout{Stdout: &sandboxv1.OutputChunk{Text: "hello\n"}}},
		{Seq: 3, CommandId: cid, Event: &sandboxv1.ExecuteEvent_Stderr{Stderr: &sandboxv1.OutputChunk{Text: "warn\n"}}},
		{Seq: 4, CommandId: cid, Event: &sandboxv1.ExecuteEvent_Display{Display: &sandboxv1.Display{Data: map[string]string{"text/plain": "<Figure>", "image/png": "iVBORw0K"}}}},
		// seq 5 has a type this server does not know: skipped, not fatal.
		{Seq: 6, CommandId: cid, Event: &sandboxv1.ExecuteEvent_Result{Result: &sandboxv1.Result{Data: map[string]string{"text/plain": "42"}}}},
		{Seq: 7, CommandId: cid, Event: &sandboxv1.ExecuteEvent_Error{Error: &sandboxv1.Error{Ename: "NameError", Evalue: "y", Traceback: []string{"tb1\n", "tb2\n"}}}},
		{Seq: 8, CommandId: cid, Event: &sandboxv1.ExecuteEvent_Done{Done: &sandboxv1.Done{
			Status: sandboxv1.CommandStatus_COMMAND_STATUS_ERROR, Duration: durationpb.New(1500 * time.Millisecond),
			StateLost: true, OutputTruncated: true, Reason: "why", ExitCode: &exit, Time: timestamppb.New(t0.Add(2 * time.Second)),
			Files: []*sandboxv1.FileRef{{Path: "out.csv", Size: 120}},
		}}},
	}
}

// followScript plays script() after afterSeq, as the domain's Follow does.
func followScript(_ context.Context, _, _ string, afterSeq int64, fn func(core.Event) error) error {
	for _, e := range script() {
		if e.Seq > afterSeq {
			if err := fn(e); err != nil {
				return err
			}
		}
	}
	return nil
}

// collector returns a function that reads a command stream to its end,
// failing t on any error: collect(client.Execute(ctx, req)).
func collector(t *testing.T) func(s interface {
	Recv() (*sandboxv1.ExecuteEvent, error)
}, err error) []*sandboxv1.ExecuteEvent {
	return func(s interface {
		Recv() (*sandboxv1.ExecuteEvent, error)
	}, err error) []*sandboxv1.ExecuteEvent {
		t.Helper()
		if err != nil {
			t.Fatalf("opening stream: %v", err)
		}
		var out []*sandboxv1.ExecuteEvent
		for {
			ev, err := s.Recv()
			if errors.Is(err, io.EOF) {
				return out
			}
			if err != nil {
				t.Fatalf("stream failed after %d events: %v", len(out), err)
			}
			out = append(out, ev)
		}
	}
}

func TestExecuteStreamsEventsAndDelegatesIdempotence(t *testing.T) {
	var mu sync.Mutex
	var submitted []core.ExecRequest
	var followed []string
	fake := &fakeManager{
		SubmitFunc: func(_ context.Context, req core.ExecRequest) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			submitted = append(submitted, req)
			return req.CommandID, nil
		},
		FollowFunc: func(ctx context.Context, sid, cid string, after int64, fn func(core.Event) error) error {
			mu.Lock()
			followed = append(followed, fmt.Sprintf("%s/%s/%d", sid, cid, after))
			mu.Unlock()
			return followScript(ctx, sid, cid, after, fn)
		},
	}
	env := newTestEnv(t, fake)
	ctx := testCtx(t)
	collect := collector(t)

	req := &sandboxv1.ExecuteRequest{SandboxId: sb1, CommandId: "c1", Language: "bash", Code: "echo hi", Timeout: durationpb.New(90 * time.Second)}
	for i := range 2 { // the retry must replay the same command, not run a new one
		got := collect(env.client.Execute(ctx, req))
		if diff := cmp.Diff(wantEvents("c1"), got, protocmp.Transform()); diff != "" {
			t.Errorf("attempt %d: events (-want +got):\n%s", i+1, diff)
		}
	}
	got := collect(env.client.Execute(ctx, &sandboxv1.ExecuteRequest{SandboxId: sb1, Code: "1"}))
	mu.Lock()
	defer mu.Unlock()
	if len(submitted) != 3 || submitted[2].CommandID == "" {
		t.Fatalf("submitted %+v; want a third command with the ID the domain generated", submitted)
	}
	for _, ev := range got {
		if ev.GetCommandId() != submitted[2].CommandID {
			t.Fatalf("event %d has command_id %q, want the generated %q", ev.GetSeq(), ev.GetCommandId(), submitted[2].CommandID)
		}
	}

	wantSub := core.ExecRequest{SandboxID: sb1, CommandID: "c1", Language: "bash", Code: "echo hi", Timeout: 90 * time.Second}
	if len(submitted) != 3 || !cmp.Equal(submitted[0], wantSub) || !cmp.Equal(submitted[1], wantSub) {
		t.Errorf("submitted %+v, want twice %+v then one without ID", submitted, wantSub)
	}
	wantFollow := []string{sb1 + "/c1/0", sb1 + "/c1/0", sb1 + "/" + submitted[2].CommandID + "/0"}
	if !cmp.Equal(followed, wantFollow) {
		t.Errorf("followed %v, want %v", followed, wantFollow)
	}
}

func TestStreamCommandResumesAfterSeq(t *testing.T) {
	var gotAfter []int64
	var mu sync.Mutex
	fake := &fakeManager{FollowFunc: func(ctx context.Context, sid, cid string, after int64, fn func(core.Event) error) error {
		mu.Lock()
		gotAfter = append(gotAfter, after)
		mu.Unlock()
		return followScript(ctx, sid, cid, after, fn)
	}}
	env := newTestEnv(t, fake)
	got := collector(t)(env.client.StreamCommand(testCtx(t), &sandboxv1.StreamCommandRequest{SandboxId: sb1, CommandId: "c1", AfterSeq: 6}))
	if diff := cmp.Diff(wantEvents("c1")[5:], got, protocmp.Transform()); diff != "" {
		t.Errorf("events after seq 6 (-want +got):\n%s", diff)
	}
	if len(gotAfter) != 1 || gotAfter[0] != 6 {
		t.Errorf("domain asked for after_seq %v, want [6]", gotAfter)
	}
}

// TestLargeEventIsDelivered guards MaxSendMsgSize: a plot of several MiB
// must not fail with ResourceExhausted.
func TestLargeEventIsDelivered(t *testing.T) {
	big := strings.Repeat("A", 10<<20)
	fake := &fakeManager{FollowFunc: func(_ context.Context, _, _ string, _ int64, fn func(core.Event) error) error {
		if err := fn(core.Event{Seq: 1, Type: ioproto.EventDisplay, Data: map[string]string{"image/png": big}}); err != nil {
			return err
		}
		return fn(core.Event{Seq: 2, Type: ioproto.EventDone, Status: ioproto.StatusOK})
	}}
	env := newTestEnv(t, fake)
	got := collector(t)(env.client.StreamCommand(testCtx(t), &sandboxv1.StreamCommandRequest{SandboxId: sb1, CommandId: "c1"}))
	if len(got) != 2 || len(got[0].GetDisplay().GetData()["image/png"]) != len(big) {
		t.Fatalf("got %d events, want the 10 MiB display and done", len(got))
	}
}

func TestAcquireListGetDelete(t *testing.T) {
	sbA := core.Sandbox{ID: sb2, UserID: "alice@example.com", State: core.StateRunning, CreatedAt: t0.Add(time.Hour),
		LastActiveAt: t0.Add(2 * time.Hour), ExpiresAt: t0.Add(3 * time.Hour), Image: "img:1",
		Limits: core.Limits{MemoryBytes: 1 << 30, NanoCPUs: 1e9, PidsLimit: 256}}
	sbB := core.Sandbox{ID: sb1, UserID: "bob", State: core.StateDead, StateReason: "exit 137", CreatedAt: t0}
	var gotOpts core.Options
	var gotFilter core.ListFilter
	var deleted string
	fake := &fakeManager{
		AcquireFunc: func(_ context.Context, user string, opts core.Options) (core.AcquireResult, error) {
			gotOpts = opts
			return core.AcquireResult{Sandbox: sbA, Created: true, ReplacedID: sb1, ReplacedReason: "exit 137"}, nil
		},
		ListFunc: func(_ context.Context, f core.ListFilter) ([]core.Sandbox, error) {
			gotFilter = f
			return []core.Sandbox{sbA, sbB}, nil
		},
		GetFunc:    func(context.Context, string) (core.Sandbox, error) { return sbB, nil },
		DeleteFunc: func(_ context.Context, id string) error { deleted = id; return nil },
	}
	env := newTestEnv(t, fake)
	ctx := testCtx(t)

	acq, err := env.client.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: "alice@example.com", Options: &sandboxv1.SandboxOptions{
		Limits: &sandboxv1.ResourceLimits{MemoryBytes: 512 << 20}, Env: map[string]string{"A": "1"}}})
	if err != nil {
		t.Fatalf("AcquireSandbox: %v", err)
	}
	wantAcq := &sandboxv1.AcquireSandboxResponse{
		Sandbox: &sandboxv1.Sandbox{SandboxId: sb2, UserId: "alice@example.com", State: sandboxv1.SandboxState_SANDBOX_STATE_RUNNING,
			CreatedAt: timestamppb.New(t0.Add(time.Hour)), LastActiveAt: timestamppb.New(t0.Add(2 * time.Hour)),
			ExpiresAt: timestamppb.New(t0.Add(3 * time.Hour)), Image: "img:1",
			Limits: &sandboxv1.ResourceLimits{MemoryBytes: 1 << 30, NanoCpus: 1e9, PidsLimit: 256}},
		Created: true, ReplacedSandboxId: sb1, StateLost: true, ReplacedReason: "exit 137",
	}
	if diff := cmp.Diff(wantAcq, acq, protocmp.Transform()); diff != "" {
		t.Errorf("AcquireSandbox (-want +got):\n%s", diff)
	}
	if gotOpts.Limits.MemoryBytes != 512<<20 || gotOpts.Env["A"] != "1" {
		t.Errorf("domain got options %+v", gotOpts)
	}

	list, err := env.client.ListSandboxes(ctx, &sandboxv1.ListSandboxesRequest{UserId: "bob", State: sandboxv1.SandboxState_SANDBOX_STATE_DEAD})
	if err != nil {
		t.Fatalf("ListSandboxes: %v", err)
	}
	if !cmp.Equal(gotFilter, core.ListFilter{UserID: "bob", State: core.StateDead}, cmpopts.EquateEmpty()) {
		t.Errorf("domain got filter %+v", gotFilter)
	}
	if n := len(list.GetSandboxes()); n != 2 || list.GetSandboxes()[0].GetSandboxId() != sb1 {
		t.Errorf("ListSandboxes returned %v, want 2 sandboxes, oldest (%s) first", list.GetSandboxes(), sb1)
	}

	got, err := env.client.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: sb1})
	if err != nil {
		t.Fatalf("GetSandbox: %v", err)
	}
	if s := got.GetSandbox(); s.GetState() != sandboxv1.SandboxState_SANDBOX_STATE_DEAD || s.GetStateReason() != "exit 137" || s.ExpiresAt != nil {
		t.Errorf("GetSandbox = %v, want dead with reason and no expiry", s)
	}

	if _, err := env.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: sb1}); err != nil || deleted != sb1 {
		t.Errorf("DeleteSandbox: err %v, domain deleted %q", err, deleted)
	}
}

func TestInterrupt(t *testing.T) {
	var got string
	env := newTestEnv(t, &fakeManager{InterruptFunc: func(_ context.Context, sid, cid string) error { got = sid + "/" + cid; return nil }})
	if _, err := env.client.InterruptCommand(testCtx(t), &sandboxv1.InterruptCommandRequest{SandboxId: sb1, CommandId: "c9"}); err != nil {
		t.Fatalf("InterruptCommand: %v", err)
	}
	if got != sb1+"/c9" {
		t.Errorf("domain interrupted %q", got)
	}
}

func TestUploadReassemblesChunks(t *testing.T) {
	var got bytes.Buffer
	var gotPath string
	fake := &fakeManager{UploadFunc: func(_ context.Context, sid, path string, r io.Reader) (core.FileInfo, error) {
		gotPath = sid + ":" + path
		n, err := io.Copy(&got, r)
		if err != nil {
			return core.FileInfo{}, err
		}
		return core.FileInfo{Path: path, Size: n, ModTime: t0}, nil
	}}
	env := newTestEnv(t, fake)
	ctx := testCtx(t)

	s, err := env.client.UploadFile(ctx)
	if err != nil {
		t.Fatalf("UploadFile: %v", err)
	}
	want := []byte{}
	if err := s.Send(&sandboxv1.UploadFileRequest{Payload: &sandboxv1.UploadFileRequest_Header{Header: &sandboxv1.UploadFileHeader{SandboxId: sb1, Path: "data/in.bin"}}}); err != nil {
		t.Fatal(err)
	}
	for i, chunk := range [][]byte{[]byte("alpha-"), {}, bytes.Repeat([]byte{'b'}, 3<<20), []byte("-omega")} {
		want = append(want, chunk...)
		if err := s.Send(&sandboxv1.UploadFileRequest{Payload: &sandboxv1.UploadFileRequest_Chunk{Chunk: chunk}}); err != nil {
			t.Fatalf("sending chunk %d: %v", i, err)
		}
	}
	resp, err := s.CloseAndRecv()
	if err != nil {
		t.Fatalf("CloseAndRecv: %v", err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("domain got %d bytes, want %d in order", got.Len(), len(want))
	}
	if gotPath != sb1+":data/in.bin" || resp.GetFile().GetSize() != int64(len(want)) || resp.GetFile().GetPath() != "data/in.bin" {
		t.Errorf("upload went to %q, response %v", gotPath, resp.GetFile())
	}
}

func TestUploadSecondHeaderIsRejected(t *testing.T) {
	fake := &fakeManager{UploadFunc: func(_ context.Context, _, _ string, r io.Reader) (core.FileInfo, error) {
		_, err := io.Copy(io.Discard, r)
		// Whatever the domain makes of the read error, the client must hear
		// the protocol violation.
		return core.FileInfo{}, fmt.Errorf("writing: %w", err)
	}}
	env := newTestEnv(t, fake)
	s, err := env.client.UploadFile(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	hdr := &sandboxv1.UploadFileRequest{Payload: &sandboxv1.UploadFileRequest_Header{Header: &sandboxv1.UploadFileHeader{SandboxId: sb1, Path: "a"}}}
	for range 2 {
		if err := s.Send(hdr); err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.CloseAndRecv()
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "only the first message") {
		t.Errorf("error = %v, want InvalidArgument about the second header", err)
	}
}

func TestDownloadChunksContent(t *testing.T) {
	content := bytes.Repeat([]byte("0123456789"), (downloadChunk*5/2)/10)
	fake := &fakeManager{DownloadFunc: func(_ context.Context, _, path string) (io.ReadCloser, core.FileInfo, error) {
		return io.NopCloser(bytes.NewReader(content)), core.FileInfo{Path: path, Size: int64(len(content)), ModTime: t0}, nil
	}}
	env := newTestEnv(t, fake)
	s, err := env.client.DownloadFile(testCtx(t), &sandboxv1.DownloadFileRequest{SandboxId: sb1, Path: "out.bin"})
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	var msgs int
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		if (m.GetFile() != nil) != (msgs == 0) {
			t.Errorf("message %d: file set = %v; want it on the first message only", msgs, m.GetFile() != nil)
		}
		if msgs == 0 && (m.GetFile().GetPath() != "out.bin" || m.GetFile().GetSize() != int64(len(content))) {
			t.Errorf("file info = %v", m.GetFile())
		}
		msgs++
		got = append(got, m.GetChunk()...)
	}
	if !bytes.Equal(got, content) || msgs != 3 {
		t.Errorf("got %d bytes in %d messages, want %d bytes in 3", len(got), msgs, len(content))
	}
}

func TestDownloadEmptyFileSendsMetadata(t *testing.T) {
	fake := &fakeManager{DownloadFunc: func(_ context.Context, _, path string) (io.ReadCloser, core.FileInfo, error) {
		return io.NopCloser(strings.NewReader("")), core.FileInfo{Path: path}, nil
	}}
	env := newTestEnv(t, fake)
	s, err := env.client.DownloadFile(testCtx(t), &sandboxv1.DownloadFileRequest{SandboxId: sb1, Path: "empty"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.Recv()
	if err != nil || m.GetFile().GetPath() != "empty" {
		t.Fatalf("first message %v, err %v; want the file info", m, err)
	}
	if _, err := s.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("second Recv = %v, want EOF", err)
	}
}

func TestListFilesSorted(t *testing.T) {
	fake := &fakeManager{ListFilesFunc: func(context.Context, string, string) ([]core.FileInfo, error) {
		return []core.FileInfo{{Path: "b.txt", Size: 2}, {Path: "a", IsDir: true}}, nil
	}}
	env := newTestEnv(t, fake)
	resp, err := env.client.ListFiles(testCtx(t), &sandboxv1.ListFilesRequest{SandboxId: sb1})
	if err != nil {
		t.Fatal(err)
	}
	want := []*sandboxv1.FileInfo{{Path: "a", IsDir: true}, {Path: "b.txt", Size: 2}}
	if diff := cmp.Diff(want, resp.GetFiles(), protocmp.Transform()); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
}

func TestPanicBecomesInternal(t *testing.T) {
	fake := &fakeManager{
		GetFunc: func(context.Context, string) (core.Sandbox, error) { panic("boom in Get") },
		FollowFunc: func(context.Context, string, string, int64, func(core.Event) error) error {
			panic("boom in Follow")
		},
		DeleteFunc: func(context.Context, string) error { return nil },
	}
	env := newTestEnv(t, fake)
	ctx := testCtx(t)

	_, err := env.client.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: sb1})
	if status.Code(err) != codes.Internal || strings.Contains(err.Error(), "boom") {
		t.Errorf("unary panic: error = %v, want Internal without the panic value", err)
	}
	err = firstErr[sandboxv1.ExecuteEvent](env.client.StreamCommand(ctx, &sandboxv1.StreamCommandRequest{SandboxId: sb1, CommandId: "c1"}))
	if status.Code(err) != codes.Internal {
		t.Errorf("stream panic: error = %v, want Internal", err)
	}
	// The server survived both.
	if _, err := env.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: sb1}); err != nil {
		t.Errorf("call after panics: %v", err)
	}
	logs := env.log.String()
	for _, want := range []string{"boom in Get", "boom in Follow", "service_test.go"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q (panic value and stack); log:\n%s", want, logs)
		}
	}
}

func TestHealthAndReflection(t *testing.T) {
	env := newTestEnv(t, &fakeManager{})
	ctx := testCtx(t)
	hc := healthpb.NewHealthClient(env.conn)

	check := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("health check %q: %v", service, err)
		}
		return resp.GetStatus()
	}
	for _, svc := range []string{"", "sandbox.v1.SandboxService"} {
		if st := check(svc); st != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("before SetServing, %q is %v; want NOT_SERVING", svc, st)
		}
	}
	env.server.SetServing(true)
	for _, svc := range []string{"", "sandbox.v1.SandboxService"} {
		if st := check(svc); st != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("after SetServing(true), %q is %v; want SERVING", svc, st)
		}
	}
	env.server.SetServing(false)
	if st := check(""); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("after SetServing(false): %v", st)
	}

	rs, err := reflectionpb.NewServerReflectionClient(env.conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatalf("reflection: %v", err)
	}
	if err := rs.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatalf("reflection send: %v", err)
	}
	resp, err := rs.Recv()
	if err != nil {
		t.Fatalf("reflection recv: %v", err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{"sandbox.v1.SandboxService", "grpc.health.v1.Health"} {
		if !strings.Contains(strings.Join(names, " "), want) {
			t.Errorf("reflection lists %v, missing %s", names, want)
		}
	}
}

// TestClientCancelIsNotAnInternalError: a client that goes away mid-stream
// makes the domain fail with whatever error; that is not a server bug and
// must not be logged as one.
func TestClientCancelIsNotAnInternalError(t *testing.T) {
	following := make(chan struct{})
	returned := make(chan struct{})
	fake := &fakeManager{FollowFunc: func(ctx context.Context, _, _ string, _ int64, fn func(core.Event) error) error {
		defer close(returned)
		if err := fn(core.Event{Seq: 1, Type: ioproto.EventStarted}); err != nil {
			return err
		}
		close(following)
		<-ctx.Done()
		return errors.New("watcher torn down") // unclassified, as a real failure would be
	}}
	env := newTestEnv(t, fake)
	ctx, cancel := context.WithCancel(testCtx(t))
	s, err := env.client.StreamCommand(ctx, &sandboxv1.StreamCommandRequest{SandboxId: sb1, CommandId: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatalf("first event: %v", err)
	}
	<-following
	cancel()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("the domain's Follow did not see the cancellation within 10s")
	}
	// The handler returns right after Follow; the server's finish log line
	// marks the end of the call.
	env.log.waitFor(t, "grpc.method=StreamCommand")
	if logs := env.log.String(); strings.Contains(logs, "internal error") || strings.Contains(logs, "watcher torn down") {
		t.Errorf("a client cancel was logged as an internal error:\n%s", logs)
	}
}

// TestUnknownEventsLoggedOnce: an events file is the sandbox's to write, so
// it can hold any number of events of a type the server does not know. They
// are skipped and logged once per call, not once each (a few MB of them
// must not become a flood in sandboxd's own log).
func TestUnknownEventsLoggedOnce(t *testing.T) {
	const n = 10000
	fake := &fakeManager{FollowFunc: func(_ context.Context, _, _ string, _ int64, fn func(core.Event) error) error {
		for i := 1; i <= n; i++ {
			if err := fn(core.Event{Seq: int64(i), Type: "bogus\xff" + strings.Repeat("t", 100)}); err != nil {
				return err
			}
		}
		return fn(core.Event{Seq: n + 1, Type: ioproto.EventDone, Status: ioproto.StatusOK})
	}}
	env := newTestEnv(t, fake)
	got := collector(t)(env.client.StreamCommand(testCtx(t), &sandboxv1.StreamCommandRequest{SandboxId: sb1, CommandId: "c1"}))
	if len(got) != 1 || got[0].GetDone() == nil {
		t.Fatalf("got %d events, want only done: %v", len(got), got)
	}
	logs := env.log.String()
	if c := strings.Count(logs, "unknown type"); c != 1 {
		t.Errorf("the unknown events were logged %d times, want once:\n%.2000s", c, logs)
	}
	if !strings.Contains(logs, fmt.Sprintf("count=%d", n)) {
		t.Errorf("the log line does not give the count %d:\n%.2000s", n, logs)
	}
	if len(logs) > 4096 {
		t.Errorf("the log grew by %d bytes for %d skipped events", len(logs), n)
	}
}
