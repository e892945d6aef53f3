package grpcapi

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// firstErr returns the first error of a server stream, whether opening it
// failed or its first Recv did: firstErr[Msg](client.Method(ctx, req)).
func firstErr[T any](s interface{ Recv() (*T, error) }, err error) error {
	if err != nil {
		return err
	}
	_, err = s.Recv()
	return err
}

func TestValidation(t *testing.T) {
	env := newTestEnv(t, &fakeManager{})
	c := env.client
	tests := []struct {
		name string
		call func(ctx context.Context) error
		want string // substring of the message
	}{
		{"acquire empty user", func(ctx context.Context) error {
			_, err := c.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{})
			return err
		}, "user ID is empty"},
		{"acquire bad user", func(ctx context.Context) error {
			_, err := c.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: "../etc"})
			return err
		}, "user ID"},
		{"get empty id", func(ctx context.Context) error {
			_, err := c.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{})
			return err
		}, "sandbox ID is empty"},
		{"get bad id", func(ctx context.Context) error {
			_, err := c.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: "../../x"})
			return err
		}, "sandbox ID"},
		{"list bad user", func(ctx context.Context) error {
			_, err := c.ListSandboxes(ctx, &sandboxv1.ListSandboxesRequest{UserId: "a b"})
			return err
		}, "user ID"},
		{"list unknown state", func(ctx context.Context) error {
			_, err := c.ListSandboxes(ctx, &sandboxv1.ListSandboxesRequest{State: 42})
			return err
		}, "state"},
		{"delete empty id", func(ctx context.Context) error {
			_, err := c.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{})
			return err
		}, "sandbox ID is empty"},
		{"execute empty sandbox", func(ctx context.Context) error {
			return firstErr[sandboxv1.ExecuteEvent](c.Execute(ctx, &sandboxv1.ExecuteRequest{Code: "1"}))
		}, "sandbox ID is empty"},
		{"execute bad command id", func(ctx context.Context) error {
			return firstErr[sandboxv1.ExecuteEvent](c.Execute(ctx, &sandboxv1.ExecuteRequest{SandboxId: sb1, CommandId: ".hidden"}))
		}, "command_id"},
		{"execute unknown language", func(ctx context.Context) error {
			return firstErr[sandboxv1.ExecuteEvent](c.Execute(ctx, &sandboxv1.ExecuteRequest{SandboxId: sb1, Language: "ruby"}))
		}, `language "ruby"`},
		{"execute negative timeout", func(ctx context.Context) error {
			return firstErr[sandboxv1.ExecuteEvent](c.Execute(ctx, &sandboxv1.ExecuteRequest{SandboxId: sb1, Timeout: durationpb.New(-1)}))
		}, "negative"},
		{"execute invalid timeout", func(ctx context.Context) error {
			return firstErr[sandboxv1.ExecuteEvent](c.Execute(ctx, &sandboxv1.ExecuteRequest{SandboxId: sb1, Timeout: &durationpb.Duration{Seconds: 1, Nanos: -1}}))
		}, "timeout"},
		{"stream empty command id", func(ctx context.Context) error {
			return firstErr[sandboxv1.ExecuteEvent](c.StreamCommand(ctx, &sandboxv1.StreamCommandRequest{SandboxId: sb1}))
		}, "command_id is empty"},
		{"stream negative after_seq", func(ctx context.Context) error {
			return firstErr[sandboxv1.ExecuteEvent](c.StreamCommand(ctx, &sandboxv1.StreamCommandRequest{SandboxId: sb1, CommandId: "c1", AfterSeq: -1}))
		}, "after_seq -1"},
		{"stream bad sandbox", func(ctx context.Context) error {
			return firstErr[sandboxv1.ExecuteEvent](c.StreamCommand(ctx, &sandboxv1.StreamCommandRequest{SandboxId: "x/y", CommandId: "c1"}))
		}, "sandbox ID"},
		{"interrupt empty command", func(ctx context.Context) error {
			_, err := c.InterruptCommand(ctx, &sandboxv1.InterruptCommandRequest{SandboxId: sb1})
			return err
		}, "command_id is empty"},
		{"interrupt empty sandbox", func(ctx context.Context) error {
			_, err := c.InterruptCommand(ctx, &sandboxv1.InterruptCommandRequest{CommandId: "c1"})
			return err
		}, "sandbox ID is empty"},
		{"download empty path", func(ctx context.Context) error {
			return firstErr[sandboxv1.DownloadFileResponse](c.DownloadFile(ctx, &sandboxv1.DownloadFileRequest{SandboxId: sb1}))
		}, "path is empty"},
		{"download empty sandbox", func(ctx context.Context) error {
			return firstErr[sandboxv1.DownloadFileResponse](c.DownloadFile(ctx, &sandboxv1.DownloadFileRequest{Path: "a.txt"}))
		}, "sandbox ID is empty"},
		{"list files empty sandbox", func(ctx context.Context) error {
			_, err := c.ListFiles(ctx, &sandboxv1.ListFilesRequest{})
			return err
		}, "sandbox ID is empty"},
		{"upload without header", func(ctx context.Context) error {
			s, err := c.UploadFile(ctx)
			if err != nil {
				return err
			}
			if err := s.Send(&sandboxv1.UploadFileRequest{Payload: &sandboxv1.UploadFileRequest_Chunk{Chunk: []byte("x")}}); err != nil {
				return err
			}
			_, err = s.CloseAndRecv()
			return err
		}, "first message must carry the header"},
		{"upload empty stream", func(ctx context.Context) error {
			s, err := c.UploadFile(ctx)
			if err != nil {
				return err
			}
			_, err = s.CloseAndRecv()
			return err
		}, "empty upload"},
		{"upload empty path", func(ctx context.Context) error {
			s, err := c.UploadFile(ctx)
			if err != nil {
				return err
			}
			if err := s.Send(&sandboxv1.UploadFileRequest{Payload: &sandboxv1.UploadFileRequest_Header{Header: &sandboxv1.UploadFileHeader{SandboxId: sb1}}}); err != nil {
				return err
			}
			_, err = s.CloseAndRecv()
			return err
		}, "path is empty"},
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
		t.Errorf("invalid requests reached the domain: %v", calls)
	}
}

// TestLongInvalidValuesAreClipped: a huge invalid value is not echoed in
// full in the error message.
func TestLongInvalidValuesAreClipped(t *testing.T) {
	env := newTestEnv(t, &fakeManager{})
	s, err := env.client.Execute(testCtx(t), &sandboxv1.ExecuteRequest{SandboxId: sb1, Language: strings.Repeat("x", 5000)})
	if err == nil {
		_, err = s.Recv()
	}
	st, _ := status.FromError(err)
	if st.Code() != codes.InvalidArgument || len(st.Message()) > 200 || !strings.Contains(st.Message(), "is not supported") {
		t.Errorf("error = %v (%d bytes); want a short InvalidArgument", err, len(st.Message()))
	}
}
