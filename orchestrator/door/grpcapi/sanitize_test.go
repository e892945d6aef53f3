package grpcapi

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sandboxd/sandboxd/ioproto"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// Sandboxed code can put any bytes in the strings the API passes on (file
// names, events files and artifacts it rewrites); these tests send invalid
// UTF-8 in every such field and check that the calls succeed with the
// strings made valid instead of failing with INTERNAL at marshalling.

const bad = "\xff\xfe" // never valid UTF-8

// R is what a run of invalid bytes becomes.
const R = "\uFFFD"

// hostileScript is script() with invalid UTF-8 in every sandbox-originated
// string.
func hostileScript() []core.Event {
	exit := 1
	return []core.Event{
		{Seq: 1, Type: ioproto.EventStarted, Language: "py" + bad, Time: t0},
		{Seq: 2, Type: ioproto.EventStdout, Text: "out" + bad + "\n"},
		{Seq: 3, Type: ioproto.EventStderr, Text: bad},
		{Seq: 4, Type: ioproto.EventDisplay, Data: map[string]string{
			"text/plain":  "fig" + bad,
			"image/png":   "iVBORw0K",
			"text/" + bad: "a", // these three keys all become "text/\uFFFD"
			"text/\xfe":   "b",
			"text/" + R:   "valid key",
			"text/html":   "<b>" + bad + "</b>",
		}},
		{Seq: 5, Type: ioproto.EventResult, Data: map[string]string{"text/plain": bad + "42"}},
		{Seq: 6, Type: ioproto.EventError, EName: "E" + bad, EValue: bad + "v", Traceback: []string{"ok\n", "tb" + bad + "\n"}},
		{Seq: 7, Type: ioproto.EventDone, Status: ioproto.StatusError, DurationMS: 10, Reason: "why" + bad,
			ExitCode: &exit, Time: t0, Files: []ioproto.File{{Path: "f" + bad + ".csv", Size: 1}, {Path: "ok.txt", Size: 2}}},
	}
}

func wantHostile(cid string) []*sandboxv1.ExecuteEvent {
	exit := int32(1)
	return []*sandboxv1.ExecuteEvent{
		{Seq: 1, CommandId: cid, Event: &sandboxv1.ExecuteEvent_Started{Started: &sandboxv1.Started{Language: "py" + R, Time: timestamppb.New(t0)}}},
		{Seq: 2, CommandId: cid, Event: &sandboxv1.ExecuteEvent_Stdout{Stdout: &sandboxv1.OutputChunk{Text: "out" + R + "\n"}}},
		{Seq: 3, CommandId: cid, Event: &sandboxv1.ExecuteEvent_Stderr{Stderr: &sandboxv1.OutputChunk{Text: R}}},
		{Seq: 4, CommandId: cid, Event: &sandboxv1.ExecuteEvent_Display{Display: &sandboxv1.Display{Data: map[string]string{
			"text/plain": "fig" + R,
			"image/png":  "iVBORw0K",
			// The valid key keeps its name; the invalid ones follow in the
			// order of their raw bytes ("text/\xfe" < "text/\xff\xfe").
			"text/" + R:        "valid key",
			"text/" + R + "#2": "b",
			"text/" + R + "#3": "a",
			"text/html":        "<b>" + R + "</b>",
		}}}},
		{Seq: 5, CommandId: cid, Event: &sandboxv1.ExecuteEvent_Result{Result: &sandboxv1.Result{Data: map[string]string{"text/plain": R + "42"}}}},
		{Seq: 6, CommandId: cid, Event: &sandboxv1.ExecuteEvent_Error{Error: &sandboxv1.Error{Ename: "E" + R, Evalue: R + "v", Traceback: []string{"ok\n", "tb" + R + "\n"}}}},
		{Seq: 7, CommandId: cid, Event: &sandboxv1.ExecuteEvent_Done{Done: &sandboxv1.Done{
			Status: sandboxv1.CommandStatus_COMMAND_STATUS_ERROR, Duration: durationpb.New(10 * time.Millisecond),
			Reason: "why" + R, ExitCode: &exit, Time: timestamppb.New(t0),
			Files: []*sandboxv1.FileRef{{Path: "f" + R + ".csv", Size: 1}, {Path: "ok.txt", Size: 2}},
		}}},
	}
}

func TestInvalidUTF8EventsAreMadeValid(t *testing.T) {
	fake := &fakeManager{
		SubmitFunc: func(context.Context, core.ExecRequest) (string, error) { return "c1", nil },
		FollowFunc: func(_ context.Context, _, _ string, after int64, fn func(core.Event) error) error {
			for _, e := range hostileScript() {
				if e.Seq > after {
					if err := fn(e); err != nil {
						return err
					}
				}
			}
			return nil
		},
	}
	env := newTestEnv(t, fake)
	ctx := testCtx(t)
	collect := collector(t) // fails the test on any stream error (INTERNAL before the fix)

	got := collect(env.client.Execute(ctx, &sandboxv1.ExecuteRequest{SandboxId: sb1, CommandId: "c1", Code: "x"}))
	if diff := cmp.Diff(wantHostile("c1"), got, protocmp.Transform()); diff != "" {
		t.Errorf("Execute events (-want +got):\n%s", diff)
	}
	got = collect(env.client.StreamCommand(ctx, &sandboxv1.StreamCommandRequest{SandboxId: sb1, CommandId: "c1", AfterSeq: 3}))
	if diff := cmp.Diff(wantHostile("c1")[3:], got, protocmp.Transform()); diff != "" {
		t.Errorf("StreamCommand events (-want +got):\n%s", diff)
	}
}

func TestInvalidUTF8FileInfosAreMadeValid(t *testing.T) {
	fake := &fakeManager{
		ListFilesFunc: func(context.Context, string, string) ([]core.FileInfo, error) {
			return []core.FileInfo{
				{Path: "a.txt", Size: 1, ModTime: t0},
				{Path: "dir/\xf5x", Size: 2, ModTime: t0}, // 0xF5 sorts after "\xf0\x9f\x98\x80", U+FFFD before it
				{Path: "dir/\xf0\x9f\x98\x80", Size: 3, ModTime: t0},
				{Path: "sub" + bad, IsDir: true, ModTime: t0},
			}, nil
		},
		UploadFunc: func(_ context.Context, _, _ string, r io.Reader) (core.FileInfo, error) {
			io.Copy(io.Discard, r)
			return core.FileInfo{Path: "up" + bad, Size: 4, ModTime: t0}, nil
		},
		DownloadFunc: func(context.Context, string, string) (io.ReadCloser, core.FileInfo, error) {
			return io.NopCloser(bytes.NewReader([]byte("content"))), core.FileInfo{Path: "down" + bad, Size: 7, ModTime: t0}, nil
		},
	}
	env := newTestEnv(t, fake)
	ctx := testCtx(t)

	list, err := env.client.ListFiles(ctx, &sandboxv1.ListFilesRequest{SandboxId: sb1})
	if err != nil {
		t.Fatalf("ListFiles: %v", err)
	}
	want := []*sandboxv1.FileInfo{
		{Path: "a.txt", Size: 1, ModTime: timestamppb.New(t0)},
		{Path: "dir/" + R + "x", Size: 2, ModTime: timestamppb.New(t0)},
		{Path: "dir/\U0001F600", Size: 3, ModTime: timestamppb.New(t0)},
		{Path: "sub" + R, IsDir: true, ModTime: timestamppb.New(t0)},
	}
	if diff := cmp.Diff(want, list.GetFiles(), protocmp.Transform()); diff != "" {
		t.Errorf("ListFiles (-want +got), sorted by the paths sent:\n%s", diff)
	}

	up, err := env.client.UploadFile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := up.Send(&sandboxv1.UploadFileRequest{Payload: &sandboxv1.UploadFileRequest_Header{Header: &sandboxv1.UploadFileHeader{SandboxId: sb1, Path: "up"}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := up.CloseAndRecv()
	if err != nil || resp.GetFile().GetPath() != "up"+R {
		t.Errorf("UploadFile = %v, %v; want path %q", resp, err, "up"+R)
	}

	down, err := env.client.DownloadFile(ctx, &sandboxv1.DownloadFileRequest{SandboxId: sb1, Path: "down"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := down.Recv()
	if err != nil || first.GetFile().GetPath() != "down"+R || string(first.GetChunk()) != "content" {
		t.Errorf("DownloadFile first message = %v, %v; want path %q", first, err, "down"+R)
	}
}

func TestInvalidUTF8SandboxReasonsAreMadeValid(t *testing.T) {
	sb := core.Sandbox{ID: sb1, UserID: "u", Tenant: "default", State: core.StateDead,
		StateReason: "exited: " + bad, HealthReason: "/io is full: " + bad, CreatedAt: t0}
	fake := &fakeManager{
		GetFunc: func(context.Context, string) (core.Sandbox, error) { return sb, nil },
		ListFunc: func(context.Context, core.ListFilter) ([]core.Sandbox, error) {
			return []core.Sandbox{sb}, nil
		},
		AcquireFunc: func(context.Context, string, core.Options) (core.AcquireResult, error) {
			return core.AcquireResult{Sandbox: sb, Created: true, ReplacedID: sb2, ReplacedReason: "oom " + bad}, nil
		},
	}
	env := newTestEnv(t, fake)
	ctx := testCtx(t)
	check := func(what string, got *sandboxv1.Sandbox) {
		t.Helper()
		if got.GetStateReason() != "exited: "+R || got.GetHealthReason() != "/io is full: "+R {
			t.Errorf("%s: state_reason %q, health_reason %q; want them made valid", what, got.GetStateReason(), got.GetHealthReason())
		}
	}
	g, err := env.client.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: sb1})
	if err != nil {
		t.Fatalf("GetSandbox: %v", err)
	}
	check("GetSandbox", g.GetSandbox())
	l, err := env.client.ListSandboxes(ctx, &sandboxv1.ListSandboxesRequest{})
	if err != nil || len(l.GetSandboxes()) != 1 {
		t.Fatalf("ListSandboxes = %v, %v", l, err)
	}
	check("ListSandboxes", l.GetSandboxes()[0])
	a, err := env.client.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: "u"})
	if err != nil {
		t.Fatalf("AcquireSandbox: %v", err)
	}
	check("AcquireSandbox", a.GetSandbox())
	if a.GetReplacedReason() != "oom "+R {
		t.Errorf("replaced_reason = %q", a.GetReplacedReason())
	}
}

func TestValidUTF8(t *testing.T) {
	for in, want := range map[string]string{
		"":                 "",
		"plain":            "plain",
		"caf\u00e9":        "caf\u00e9",
		"a\xffb":           "a" + R + "b",
		"a\xff\xfe\xfdb":   "a" + R + "b", // a run becomes one U+FFFD
		"\xed\xa0\x80":     R,             // an encoded surrogate
		"\xe2\x82":         R,             // a truncated character
		"x\xc3\xa9\x80end": "x\u00e9" + R + "end",
	} {
		if got := validUTF8(in); got != want {
			t.Errorf("validUTF8(%q) = %q, want %q", in, got, want)
		}
	}
	valid := "a valid line of output\n"
	if n := testing.AllocsPerRun(100, func() { _ = validUTF8(valid) }); n != 0 {
		t.Errorf("validUTF8 of a valid string allocates %v times; want 0", n)
	}
	tb := []string{"a\n", "b\n"}
	if got := validUTF8s(tb); &got[0] != &tb[0] {
		t.Errorf("validUTF8s copied a valid traceback")
	}
	in := []string{"a\n", bad, "c" + bad}
	got := validUTF8s(in)
	if diff := cmp.Diff([]string{"a\n", R, "c" + R}, got); diff != "" || in[1] != bad {
		t.Errorf("validUTF8s (-want +got):\n%s\n(input after: %q)", diff, in)
	}
}

func TestMIMEBundleValidIsUnchanged(t *testing.T) {
	data := map[string]string{"text/plain": "x", "image/png": "iVBORw0K"}
	if n := testing.AllocsPerRun(100, func() { _ = mimeBundleToProto(data) }); n != 0 {
		t.Errorf("mimeBundleToProto of a valid bundle allocates %v times; want 0", n)
	}
	if mimeBundleToProto(nil) != nil {
		t.Errorf("nil bundle became non-nil")
	}
}

// FuzzMIMEBundleToProto: whatever the bundle, the result marshals, keeps
// every entry, and keeps valid entries unchanged.
func FuzzMIMEBundleToProto(f *testing.F) {
	f.Add("text/plain", "x", "text/\xff", "y", "text/\xfe", "z")
	f.Add("text/\uFFFD", "x", "text/\uFFFD#2", "y", "text/\xff", "z")
	f.Add("a\xff", "\xff", "a\xfe", "\xfe", "a\xfd", "")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3 string) {
		in := map[string]string{k1: v1, k2: v2, k3: v3}
		out := mimeBundleToProto(in)
		if len(out) != len(in) {
			t.Fatalf("%q became %q: entries lost", in, out)
		}
		for k, v := range in {
			if utf8.ValidString(k) && out[k] != validUTF8(v) {
				t.Fatalf("valid key %q: %q became %q", k, v, out[k])
			}
		}
		if _, err := proto.Marshal(&sandboxv1.Display{Data: out}); err != nil {
			t.Fatalf("%q: marshal: %v", out, err)
		}
	})
}
