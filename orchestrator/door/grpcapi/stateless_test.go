package grpcapi

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// TestRunStatelessStreamsAndDeletes: RunStateless streams the command's
// events, names the command and the sandbox in its header, and deletes the
// sandbox it made, with the request's options; a malformed request makes
// none.
func TestRunStatelessStreamsAndDeletes(t *testing.T) {
	var acquired core.Options
	var user, deleted string
	fake := &fakeManager{
		AcquireFunc: func(_ context.Context, u string, opts core.Options) (core.AcquireResult, error) {
			user, acquired = u, opts
			return core.AcquireResult{Sandbox: core.Sandbox{ID: "sb-aaaaaaaaaaaaaaaaaaaa", UserID: u, State: core.StateRunning}, Created: true}, nil
		},
		ExecuteFunc: func(_ context.Context, req core.ExecRequest, submitted func(string), fn func(core.Event) error) error {
			submitted("c1")
			for _, e := range []core.Event{
				{Seq: 1, Type: ioproto.EventStarted, Language: req.Language},
				{Seq: 2, Type: ioproto.EventStdout, Text: "4\n"},
				{Seq: 3, Type: ioproto.EventDone, Status: ioproto.StatusOK},
			} {
				if err := fn(e); err != nil {
					return err
				}
			}
			return nil
		},
		DeleteFunc: func(_ context.Context, id string) error { deleted = id; return nil },
	}
	env := newTestEnv(t, fake)
	var hdr metadata.MD
	stream, err := env.client.RunStateless(t.Context(), &sandboxv1.RunStatelessRequest{
		Language: "python", Code: "print(2 + 2)",
		Options: &sandboxv1.SandboxOptions{Env: map[string]string{"MODE": "once"}},
	}, grpc.Header(&hdr))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	var done *sandboxv1.Done
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		out.WriteString(ev.GetStdout().GetText())
		if d := ev.GetDone(); d != nil {
			done = d
		}
	}
	if out.String() != "4\n" || done == nil {
		t.Errorf("output %q, done %v", out.String(), done)
	}
	if got := hdr.Get(CommandIDHeader); !slices.Equal(got, []string{"c1"}) {
		t.Errorf("command ID header: %v", got)
	}
	if got := hdr.Get(SandboxIDHeader); !slices.Equal(got, []string{"sb-aaaaaaaaaaaaaaaaaaaa"}) {
		t.Errorf("sandbox ID header: %v", got)
	}
	if !strings.HasPrefix(user, core.StatelessUserPrefix) || acquired.Env["MODE"] != "once" {
		t.Errorf("acquired for %q with %+v; want a run- user with the request's env", user, acquired)
	}
	if deleted != "sb-aaaaaaaaaaaaaaaaaaaa" {
		t.Errorf("deleted %q; want the run's sandbox", deleted)
	}

	before := len(fake.Calls())
	stream, err = env.client.RunStateless(t.Context(), &sandboxv1.RunStatelessRequest{Language: "cobol"})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.InvalidArgument || len(fake.Calls()) != before {
		t.Errorf("unknown language: %v, calls %v; want INVALID_ARGUMENT and nothing made", err, fake.Calls()[before:])
	}
}
