package grpcapi

import (
	"context"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

func TestFileOpsValidation(t *testing.T) {
	env := newTestEnv(t, &fakeManager{})
	c := env.client
	tests := []struct {
		name string
		call func(ctx context.Context) error
		want string
	}{
		{"mkdir empty sandbox", func(ctx context.Context) error {
			_, err := c.MakeDirectory(ctx, &sandboxv1.MakeDirectoryRequest{Path: "a"})
			return err
		}, "sandbox ID is empty"},
		{"mkdir empty path", func(ctx context.Context) error {
			_, err := c.MakeDirectory(ctx, &sandboxv1.MakeDirectoryRequest{SandboxId: sb1})
			return err
		}, "path is empty"},
		{"mkdir bad sandbox", func(ctx context.Context) error {
			_, err := c.MakeDirectory(ctx, &sandboxv1.MakeDirectoryRequest{SandboxId: "../x", Path: "a"})
			return err
		}, "sandbox ID"},
		{"remove empty sandbox", func(ctx context.Context) error {
			_, err := c.Remove(ctx, &sandboxv1.RemoveRequest{Path: "a"})
			return err
		}, "sandbox ID is empty"},
		{"remove empty path", func(ctx context.Context) error {
			_, err := c.Remove(ctx, &sandboxv1.RemoveRequest{SandboxId: sb1, Recursive: true})
			return err
		}, "path is empty"},
		{"rename empty from", func(ctx context.Context) error {
			_, err := c.Rename(ctx, &sandboxv1.RenameRequest{SandboxId: sb1, To: "b"})
			return err
		}, "from is empty"},
		{"rename empty to", func(ctx context.Context) error {
			_, err := c.Rename(ctx, &sandboxv1.RenameRequest{SandboxId: sb1, From: "a"})
			return err
		}, "to is empty"},
		{"rename empty sandbox", func(ctx context.Context) error {
			_, err := c.Rename(ctx, &sandboxv1.RenameRequest{From: "a", To: "b"})
			return err
		}, "sandbox ID is empty"},
		{"watch empty sandbox", func(ctx context.Context) error {
			return firstErr[sandboxv1.WatchDirectoryResponse](c.WatchDirectory(ctx, &sandboxv1.WatchDirectoryRequest{}))
		}, "sandbox ID is empty"},
		{"list depth empty sandbox", func(ctx context.Context) error {
			_, err := c.ListFiles(ctx, &sandboxv1.ListFilesRequest{Depth: 3})
			return err
		}, "sandbox ID is empty"},
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

func TestFileOpsDelegateAndConvert(t *testing.T) {
	mod := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var got []string
	fake := &fakeManager{
		MakeDirectoryFunc: func(_ context.Context, id, p string, parents bool) (core.FileInfo, error) {
			got = append(got, "mkdir "+p+" "+map[bool]string{true: "-p", false: ""}[parents])
			return core.FileInfo{Path: "d\xff", IsDir: true, ModTime: mod, Mode: fs.ModeDir | fs.ModeSetgid | 0o755,
				Type: core.FileDirectory, UID: 1000, GID: 1000}, nil
		},
		RemoveFunc: func(_ context.Context, id, p string, recursive bool) error {
			if !recursive {
				return coretest.Errorf(core.ErrFailedPrecondition, "remove /workspace/%s: the directory is not empty", p)
			}
			return nil
		},
		RenameFunc: func(_ context.Context, id, from, to string, overwrite bool) (core.FileInfo, error) {
			if !overwrite {
				return core.FileInfo{}, coretest.Errorf(core.ErrAlreadyExists, "rename /workspace/%s to /workspace/%s: the destination exists", from, to)
			}
			return core.FileInfo{Path: to, Size: 3, Mode: fs.ModeSymlink | 0o777, Type: core.FileSymlink}, nil
		},
		ListFilesDepthFunc: func(_ context.Context, id, p string, depth int) ([]core.FileInfo, error) {
			if depth > 10 {
				return nil, coretest.Errorf(core.ErrInvalidArgument, "list depth %d is out of range", depth)
			}
			return []core.FileInfo{{Path: "b/c", Type: core.FileRegular, Mode: 0o600}, {Path: "b", IsDir: true, Type: core.FileDirectory}}, nil
		},
	}
	env := newTestEnv(t, fake)
	c, ctx := env.client, testCtx(t)

	mk, err := c.MakeDirectory(ctx, &sandboxv1.MakeDirectoryRequest{SandboxId: sb1, Path: "d", Parents: true})
	if err != nil {
		t.Fatal(err)
	}
	want := &sandboxv1.FileInfo{Path: "d\uFFFD", IsDir: true, ModTime: timestamppb.New(mod), Type: sandboxv1.FileType_FILE_TYPE_DIRECTORY, Mode: 0o2755, Uid: 1000, Gid: 1000}
	if diff := cmp.Diff(want, mk.GetFile(), protocmp.Transform()); diff != "" {
		t.Errorf("MakeDirectory (-want +got):\n%s", diff)
	}
	_, err = c.Remove(ctx, &sandboxv1.RemoveRequest{SandboxId: sb1, Path: "d"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "not empty") {
		t.Errorf("Remove = %v", err)
	}
	if _, err := c.Remove(ctx, &sandboxv1.RemoveRequest{SandboxId: sb1, Path: "d", Recursive: true}); err != nil {
		t.Errorf("Remove(recursive) = %v", err)
	}
	_, err = c.Rename(ctx, &sandboxv1.RenameRequest{SandboxId: sb1, From: "a", To: "b"})
	if status.Code(err) != codes.AlreadyExists || !strings.Contains(status.Convert(err).Message(), "/workspace/b") {
		t.Errorf("Rename = %v", err)
	}
	rn, err := c.Rename(ctx, &sandboxv1.RenameRequest{SandboxId: sb1, From: "a", To: "b", Overwrite: true})
	if err != nil || rn.GetFile().GetType() != sandboxv1.FileType_FILE_TYPE_SYMLINK || rn.GetFile().GetMode() != 0o777 {
		t.Errorf("Rename(overwrite) = %v, %v", rn, err)
	}
	ls, err := c.ListFiles(ctx, &sandboxv1.ListFilesRequest{SandboxId: sb1, Depth: 2})
	if err != nil || len(ls.GetFiles()) != 2 || ls.GetFiles()[0].GetPath() != "b" || ls.GetFiles()[1].GetMode() != 0o600 {
		t.Errorf("ListFiles(depth 2) = %v, %v", ls, err)
	}
	_, err = c.ListFiles(ctx, &sandboxv1.ListFilesRequest{SandboxId: sb1, Depth: 11})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("ListFiles(depth 11) = %v", err)
	}
	if len(got) != 1 || got[0] != "mkdir d -p" {
		t.Errorf("domain saw %v", got)
	}
	// Depth 0 and 1 are today's ListFiles.
	calls := env.fake.Calls()
	for _, name := range calls {
		if name == "ListFiles" {
			t.Errorf("depth 2 went to ListFiles: %v", calls)
		}
	}
}

func TestWatchDirectoryStreams(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	fake := &fakeManager{WatchDirectoryFunc: func(ctx context.Context, id, p string, recursive bool, fn func(core.WatchUpdate) error) error {
		if p != "w" || !recursive {
			return coretest.Errorf(core.ErrInvalidArgument, "unexpected %q %v", p, recursive)
		}
		fn(core.WatchUpdate{})
		fn(core.WatchUpdate{Event: &core.WatchEvent{Op: core.WatchCreate, Path: "w/a\xfe", Time: at}})
		fn(core.WatchUpdate{Event: &core.WatchEvent{Op: core.WatchWrite, Path: "w/b", Time: at}, Dropped: 7})
		fn(core.WatchUpdate{Event: &core.WatchEvent{Op: core.WatchRemove, Path: "w/c", Time: at}})
		fn(core.WatchUpdate{Event: &core.WatchEvent{Op: core.WatchRename, Path: "w/d", Time: at}})
		return coretest.Errorf(core.ErrNotFound, "sandbox %s not found", id)
	}}
	env := newTestEnv(t, fake)
	stream, err := env.client.WatchDirectory(testCtx(t), &sandboxv1.WatchDirectoryRequest{SandboxId: sb1, Path: "w", Recursive: true})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []*sandboxv1.WatchDirectoryResponse
	for {
		m, err := stream.Recv()
		if err != nil {
			if status.Code(err) != codes.NotFound {
				t.Errorf("end = %v, want NotFound", err)
			}
			break
		}
		msgs = append(msgs, m)
	}
	ts := timestamppb.New(at)
	want := []*sandboxv1.WatchDirectoryResponse{
		{},
		{Event: &sandboxv1.WatchEvent{Type: sandboxv1.WatchEventType_WATCH_EVENT_TYPE_CREATE, Path: "w/a\uFFFD", Time: ts}},
		{Event: &sandboxv1.WatchEvent{Type: sandboxv1.WatchEventType_WATCH_EVENT_TYPE_WRITE, Path: "w/b", Time: ts}, Dropped: 7},
		{Event: &sandboxv1.WatchEvent{Type: sandboxv1.WatchEventType_WATCH_EVENT_TYPE_REMOVE, Path: "w/c", Time: ts}},
		{Event: &sandboxv1.WatchEvent{Type: sandboxv1.WatchEventType_WATCH_EVENT_TYPE_RENAME, Path: "w/d", Time: ts}},
	}
	if diff := cmp.Diff(want, msgs, protocmp.Transform()); diff != "" {
		t.Errorf("stream (-want +got):\n%s", diff)
	}
}
