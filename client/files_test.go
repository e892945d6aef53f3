package client

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/timestamppb"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// filesFake serves the workspace calls beyond upload and download: it
// records requests and answers as sandboxd would.
type filesFake struct {
	sandboxv1.UnimplementedSandboxServiceServer
	requests chan any
	watchEnd error
}

func (f *filesFake) ListFiles(_ context.Context, req *sandboxv1.ListFilesRequest) (*sandboxv1.ListFilesResponse, error) {
	f.requests <- req
	if req.GetDepth() > 10 {
		return nil, status.Error(codes.InvalidArgument, "list depth 11 is out of range: give 0 to 10")
	}
	return &sandboxv1.ListFilesResponse{Files: []*sandboxv1.FileInfo{{Path: "a", Type: sandboxv1.FileType_FILE_TYPE_DIRECTORY}, {Path: "a/b", Mode: 0o644}}}, nil
}

func (f *filesFake) MakeDirectory(_ context.Context, req *sandboxv1.MakeDirectoryRequest) (*sandboxv1.MakeDirectoryResponse, error) {
	f.requests <- req
	if !req.GetParents() {
		return nil, status.Error(codes.NotFound, "make directory /workspace/x/y: parent directory /workspace/x does not exist")
	}
	return &sandboxv1.MakeDirectoryResponse{File: &sandboxv1.FileInfo{Path: req.GetPath(), IsDir: true, Uid: 1000}}, nil
}

func (f *filesFake) Remove(_ context.Context, req *sandboxv1.RemoveRequest) (*sandboxv1.RemoveResponse, error) {
	f.requests <- req
	if req.GetPath() == "/workspace" {
		return nil, status.Error(codes.InvalidArgument, "remove /workspace: the workspace itself cannot be removed")
	}
	return &sandboxv1.RemoveResponse{}, nil
}

func (f *filesFake) Rename(_ context.Context, req *sandboxv1.RenameRequest) (*sandboxv1.RenameResponse, error) {
	f.requests <- req
	if !req.GetOverwrite() {
		return nil, status.Error(codes.AlreadyExists, "rename: the destination exists")
	}
	return &sandboxv1.RenameResponse{File: &sandboxv1.FileInfo{Path: req.GetTo()}}, nil
}

var watchTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func (f *filesFake) WatchDirectory(req *sandboxv1.WatchDirectoryRequest, stream grpc.ServerStreamingServer[sandboxv1.WatchDirectoryResponse]) error {
	f.requests <- req
	if req.GetPath() == "missing" {
		return status.Error(codes.NotFound, "watch /workspace/missing: no such file or directory")
	}
	stream.Send(&sandboxv1.WatchDirectoryResponse{})
	ts := timestamppb.New(watchTime)
	for i, typ := range []sandboxv1.WatchEventType{sandboxv1.WatchEventType_WATCH_EVENT_TYPE_CREATE, sandboxv1.WatchEventType_WATCH_EVENT_TYPE_WRITE,
		sandboxv1.WatchEventType_WATCH_EVENT_TYPE_RENAME, sandboxv1.WatchEventType_WATCH_EVENT_TYPE_REMOVE} {
		stream.Send(&sandboxv1.WatchDirectoryResponse{Event: &sandboxv1.WatchEvent{Type: typ, Path: "w/f", Time: ts}, Dropped: uint64(i)})
	}
	if f.watchEnd != nil {
		return f.watchEnd
	}
	<-stream.Context().Done()
	return stream.Context().Err()
}

func startFilesFake(t *testing.T, f *filesFake) *Client {
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

func TestFileOps(t *testing.T) {
	f := &filesFake{requests: make(chan any, 100)}
	c := startFilesFake(t, f)
	ctx := t.Context()

	// ListFiles keeps its signature; WithDepth adds the depth.
	files, err := c.ListFiles(ctx, "sb-1", "")
	if err != nil || len(files) != 2 {
		t.Fatalf("ListFiles = %v, %v", files, err)
	}
	if req := (<-f.requests).(*sandboxv1.ListFilesRequest); req.GetDepth() != 0 {
		t.Errorf("depth without option = %d", req.GetDepth())
	}
	if _, err := c.ListFiles(ctx, "sb-1", "a", WithDepth(3)); err != nil {
		t.Fatal(err)
	}
	if req := (<-f.requests).(*sandboxv1.ListFilesRequest); req.GetDepth() != 3 || req.GetPath() != "a" {
		t.Errorf("ListFiles request = %v", req)
	}
	if _, err := c.ListFiles(ctx, "sb-1", "a", WithDepth(11)); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("ListFiles(depth 11) = %v", err)
	}
	<-f.requests

	fi, err := c.MakeDirectory(ctx, "sb-1", "x/y", true)
	if err != nil || fi.GetPath() != "x/y" || !fi.GetIsDir() {
		t.Errorf("MakeDirectory = %v, %v", fi, err)
	}
	if req := (<-f.requests).(*sandboxv1.MakeDirectoryRequest); !req.GetParents() || req.GetSandboxId() != "sb-1" {
		t.Errorf("MakeDirectory request = %v", req)
	}
	if _, err := c.MakeDirectory(ctx, "sb-1", "x/y", false); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "/workspace/x does not exist") {
		t.Errorf("MakeDirectory(no parents) = %v", err)
	}
	<-f.requests

	if err := c.Remove(ctx, "sb-1", "x", true); err != nil {
		t.Error(err)
	}
	if req := (<-f.requests).(*sandboxv1.RemoveRequest); !req.GetRecursive() || req.GetPath() != "x" {
		t.Errorf("Remove request = %v", req)
	}
	if err := c.Remove(ctx, "sb-1", "/workspace", true); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Remove(/workspace) = %v", err)
	}
	<-f.requests

	if _, err := c.Rename(ctx, "sb-1", "a", "b", false); !errors.Is(err, ErrAlreadyExists) {
		t.Errorf("Rename = %v, want ErrAlreadyExists", err)
	}
	<-f.requests
	fi, err = c.Rename(ctx, "sb-1", "a", "b", true)
	if err != nil || fi.GetPath() != "b" {
		t.Errorf("Rename(overwrite) = %v, %v", fi, err)
	}
	if req := (<-f.requests).(*sandboxv1.RenameRequest); req.GetFrom() != "a" || req.GetTo() != "b" || !req.GetOverwrite() {
		t.Errorf("Rename request = %v", req)
	}
}

func TestWatchDirectory(t *testing.T) {
	f := &filesFake{requests: make(chan any, 100), watchEnd: status.Error(codes.NotFound, "sandbox sb-1 not found")}
	c := startFilesFake(t, f)
	ctx := t.Context()

	if _, err := c.WatchDirectory(ctx, "sb-1", "missing", false); !errors.Is(err, ErrNotFound) {
		t.Errorf("WatchDirectory(missing) = %v", err)
	}
	<-f.requests
	w, err := c.WatchDirectory(ctx, "sb-1", "w", true)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if req := (<-f.requests).(*sandboxv1.WatchDirectoryRequest); !req.GetRecursive() || req.GetPath() != "w" {
		t.Errorf("request = %v", req)
	}
	for i, op := range []WatchOp{WatchCreate, WatchWrite, WatchRename, WatchRemove} {
		ev, err := w.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev != (WatchEvent{Op: op, Path: "w/f", Time: watchTime, Dropped: uint64(i)}) {
			t.Errorf("event %d = %+v", i, ev)
		}
	}
	if _, err := w.Next(); !errors.Is(err, ErrNotFound) {
		t.Errorf("end = %v, want ErrNotFound (sandbox deleted)", err)
	}

	// Close ends a watch the server keeps open.
	f.watchEnd = nil
	w, err = c.WatchDirectory(ctx, "sb-1", "w", false)
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		w.Next()
	}
	w.Close()
	if _, err := w.Next(); !errors.Is(err, context.Canceled) {
		t.Errorf("after Close: %v, want context.Canceled", err)
	}
}
