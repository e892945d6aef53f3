package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/testing/protocmp"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// volumesFake serves the volume calls over one volume's flat map of files,
// recording requests, answering as sandboxd would.
type volumesFake struct {
	sandboxv1.UnimplementedSandboxServiceServer
	mu       sync.Mutex
	files    map[string][]byte
	requests []any
	acquired *sandboxv1.AcquireSandboxRequest
}

func (f *volumesFake) record(req any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, req)
}

var fakeVolume = &sandboxv1.Volume{Id: "vol-aaaaaaaaaaaaaaaaaaaa", Name: "data", Tenant: "default", SizeBytes: 1 << 30}

func (f *volumesFake) CreateVolume(_ context.Context, req *sandboxv1.CreateVolumeRequest) (*sandboxv1.CreateVolumeResponse, error) {
	f.record(req)
	if req.GetName() == "data" {
		return nil, status.Error(codes.AlreadyExists, "volume data exists")
	}
	return &sandboxv1.CreateVolumeResponse{Volume: &sandboxv1.Volume{Id: "vol-bbbbbbbbbbbbbbbbbbbb", Name: req.GetName(), SizeBytes: req.GetSizeBytes()}}, nil
}

func (f *volumesFake) GetVolume(_ context.Context, req *sandboxv1.GetVolumeRequest) (*sandboxv1.GetVolumeResponse, error) {
	f.record(req)
	if req.GetVolume() != "data" {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolume())
	}
	return &sandboxv1.GetVolumeResponse{Volume: fakeVolume}, nil
}

func (f *volumesFake) ListVolumes(_ context.Context, req *sandboxv1.ListVolumesRequest) (*sandboxv1.ListVolumesResponse, error) {
	f.record(req)
	return &sandboxv1.ListVolumesResponse{Volumes: []*sandboxv1.Volume{fakeVolume}}, nil
}

func (f *volumesFake) DeleteVolume(_ context.Context, req *sandboxv1.DeleteVolumeRequest) (*sandboxv1.DeleteVolumeResponse, error) {
	f.record(req)
	if !req.GetForce() {
		return nil, status.Error(codes.FailedPrecondition, "volume data is mounted by sandbox sb-1")
	}
	return &sandboxv1.DeleteVolumeResponse{}, nil
}

func (f *volumesFake) UploadVolumeFile(stream grpc.ClientStreamingServer[sandboxv1.UploadVolumeFileRequest, sandboxv1.UploadVolumeFileResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	h := first.GetHeader()
	if h == nil || strings.Contains(h.GetPath(), "..") {
		return status.Error(codes.InvalidArgument, "path escapes the volume")
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
	p := strings.TrimLeft(h.GetPath(), "/")
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.files[p]; ok && !h.GetOverwrite() {
		return status.Errorf(codes.AlreadyExists, "/%s exists", p)
	}
	f.files[p] = buf.Bytes()
	return stream.SendAndClose(&sandboxv1.UploadVolumeFileResponse{File: &sandboxv1.FileInfo{Path: p, Size: int64(buf.Len())}})
}

func (f *volumesFake) DownloadVolumeFile(req *sandboxv1.DownloadVolumeFileRequest, stream grpc.ServerStreamingServer[sandboxv1.DownloadVolumeFileResponse]) error {
	p := strings.TrimLeft(req.GetPath(), "/")
	f.mu.Lock()
	data, ok := f.files[p]
	f.mu.Unlock()
	if !ok {
		return status.Errorf(codes.NotFound, "file %s not found", p)
	}
	msg := &sandboxv1.DownloadVolumeFileResponse{File: &sandboxv1.FileInfo{Path: p, Size: int64(len(data))}}
	for {
		n := min(len(data), 1<<20)
		msg.Chunk = data[:n]
		if err := stream.Send(msg); err != nil {
			return err
		}
		data = data[n:]
		if len(data) == 0 {
			return nil
		}
		msg = &sandboxv1.DownloadVolumeFileResponse{}
	}
}

func (f *volumesFake) ListVolumeFiles(_ context.Context, req *sandboxv1.ListVolumeFilesRequest) (*sandboxv1.ListVolumeFilesResponse, error) {
	f.record(req)
	return &sandboxv1.ListVolumeFilesResponse{Files: []*sandboxv1.FileInfo{{Path: "a", IsDir: true}, {Path: "a/b", Size: 1}}}, nil
}

func (f *volumesFake) StatVolumeFile(_ context.Context, req *sandboxv1.StatVolumeFileRequest) (*sandboxv1.StatVolumeFileResponse, error) {
	f.record(req)
	return &sandboxv1.StatVolumeFileResponse{File: &sandboxv1.FileInfo{Path: req.GetPath(), IsDir: true}}, nil
}

func (f *volumesFake) MakeVolumeDirectory(_ context.Context, req *sandboxv1.MakeVolumeDirectoryRequest) (*sandboxv1.MakeVolumeDirectoryResponse, error) {
	f.record(req)
	return &sandboxv1.MakeVolumeDirectoryResponse{File: &sandboxv1.FileInfo{Path: req.GetPath(), IsDir: true}}, nil
}

func (f *volumesFake) RemoveVolumeFile(_ context.Context, req *sandboxv1.RemoveVolumeFileRequest) (*sandboxv1.RemoveVolumeFileResponse, error) {
	f.record(req)
	if !req.GetRecursive() {
		return nil, status.Error(codes.FailedPrecondition, "/d is not empty")
	}
	return &sandboxv1.RemoveVolumeFileResponse{}, nil
}

func (f *volumesFake) AcquireSandbox(_ context.Context, req *sandboxv1.AcquireSandboxRequest) (*sandboxv1.AcquireSandboxResponse, error) {
	f.mu.Lock()
	f.acquired = req
	f.mu.Unlock()
	return &sandboxv1.AcquireSandboxResponse{Sandbox: &sandboxv1.Sandbox{SandboxId: "sb-1", Volumes: req.GetOptions().GetVolumes()}, Created: true}, nil
}

func startVolumesFake(t *testing.T, f *volumesFake) *Client {
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

func TestVolumes(t *testing.T) {
	f := &volumesFake{files: map[string][]byte{}}
	c := startVolumesFake(t, f)
	ctx := t.Context()

	v, err := c.CreateVolume(ctx, "scratch", 64<<20)
	if err != nil || v.GetName() != "scratch" || v.GetSizeBytes() != 64<<20 {
		t.Errorf("CreateVolume = %v, %v", v, err)
	}
	if _, err := c.CreateVolume(ctx, "data", 0); !errors.Is(err, ErrAlreadyExists) {
		t.Errorf("CreateVolume(taken) = %v, want ErrAlreadyExists", err)
	}
	if v, err := c.GetVolume(ctx, "data"); err != nil || v.GetId() != fakeVolume.GetId() {
		t.Errorf("GetVolume = %v, %v", v, err)
	}
	if _, err := c.GetVolume(ctx, "nope"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "volume nope") {
		t.Errorf("GetVolume(nope) = %v, want ErrNotFound", err)
	}
	if vs, err := c.ListVolumes(ctx, "acme"); err != nil || len(vs) != 1 {
		t.Errorf("ListVolumes = %v, %v", vs, err)
	}
	if err := c.DeleteVolume(ctx, "data", false); !errors.Is(err, ErrFailedPrecondition) {
		t.Errorf("DeleteVolume(in use) = %v, want ErrFailedPrecondition", err)
	}
	if err := c.DeleteVolume(ctx, "data", true); err != nil {
		t.Errorf("DeleteVolume(force) = %v", err)
	}
	if _, err := c.ListVolumeFiles(ctx, "data", "/a", WithDepth(3)); err != nil {
		t.Error(err)
	}
	if _, err := c.StatVolumeFile(ctx, "data", ""); err != nil {
		t.Error(err)
	}
	if _, err := c.MakeVolumeDirectory(ctx, "data", "d/e", true); err != nil {
		t.Error(err)
	}
	if err := c.RemoveVolumeFile(ctx, "data", "d", false); !errors.Is(err, ErrFailedPrecondition) {
		t.Errorf("RemoveVolumeFile = %v, want ErrFailedPrecondition", err)
	}
	want := []any{
		&sandboxv1.CreateVolumeRequest{Name: "scratch", SizeBytes: 64 << 20},
		&sandboxv1.CreateVolumeRequest{Name: "data"},
		&sandboxv1.GetVolumeRequest{Volume: "data"},
		&sandboxv1.GetVolumeRequest{Volume: "nope"},
		&sandboxv1.ListVolumesRequest{Tenant: "acme"},
		&sandboxv1.DeleteVolumeRequest{Volume: "data"},
		&sandboxv1.DeleteVolumeRequest{Volume: "data", Force: true},
		&sandboxv1.ListVolumeFilesRequest{Volume: "data", Path: "/a", Depth: 3},
		&sandboxv1.StatVolumeFileRequest{Volume: "data"},
		&sandboxv1.MakeVolumeDirectoryRequest{Volume: "data", Path: "d/e", Parents: true},
		&sandboxv1.RemoveVolumeFileRequest{Volume: "data", Path: "d"},
	}
	if diff := cmp.Diff(want, f.requests, protocmp.Transform()); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

func TestVolumeFilesRoundTrip(t *testing.T) {
	f := &volumesFake{files: map[string][]byte{}}
	c := startVolumesFake(t, f)
	ctx := t.Context()
	data := bytes.Repeat([]byte("0123456789abcdef"), 200_000) // 3.2 MB: several chunks
	info, err := c.UploadVolumeFile(ctx, "data", "/in/data.bin", iotest.HalfReader(bytes.NewReader(data)), false)
	if err != nil || info.GetSize() != int64(len(data)) || info.GetPath() != "in/data.bin" {
		t.Fatalf("UploadVolumeFile = %v, %v", info, err)
	}
	if _, err := c.UploadVolumeFile(ctx, "data", "in/data.bin", strings.NewReader("x"), false); !errors.Is(err, ErrAlreadyExists) {
		t.Errorf("second upload = %v, want ErrAlreadyExists", err)
	}
	if _, err := c.UploadVolumeFile(ctx, "data", "in/data.bin", bytes.NewReader(data), true); err != nil {
		t.Errorf("overwrite = %v", err)
	}
	var back bytes.Buffer
	info, err = c.DownloadVolumeFile(ctx, "data", "in/data.bin", &back)
	if err != nil || !bytes.Equal(back.Bytes(), data) || info.GetSize() != int64(len(data)) {
		t.Fatalf("DownloadVolumeFile = %v, %v; %d bytes back, want %d", info, err, back.Len(), len(data))
	}
	if _, err := c.DownloadVolumeFile(ctx, "data", "missing", io.Discard); !errors.Is(err, ErrNotFound) {
		t.Errorf("DownloadVolumeFile(missing) = %v, want ErrNotFound", err)
	}
	if _, err := c.UploadVolumeFile(ctx, "data", "../x", strings.NewReader("x"), false); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("upload outside = %v, want ErrInvalidArgument", err)
	}
	broken := errors.New("read failed")
	if _, err := c.UploadVolumeFile(ctx, "data", "half", io.MultiReader(strings.NewReader("x"), iotest.ErrReader(broken)), false); !errors.Is(err, broken) {
		t.Errorf("upload with a failing reader = %v, want its error", err)
	}
	f.mu.Lock()
	_, stored := f.files["half"]
	f.mu.Unlock()
	if stored {
		t.Error("an upload whose reader failed was stored")
	}
}

func TestWithVolume(t *testing.T) {
	f := &volumesFake{files: map[string][]byte{}}
	c := startVolumesFake(t, f)
	a, err := c.Acquire(t.Context(), "alice", WithVolume("data", "/mnt/data", false), WithVolume("ref", "/data/ref", true))
	if err != nil {
		t.Fatal(err)
	}
	want := []*sandboxv1.VolumeMount{{Volume: "data", MountPath: "/mnt/data"}, {Volume: "ref", MountPath: "/data/ref", ReadOnly: true}}
	if diff := cmp.Diff(want, f.acquired.GetOptions().GetVolumes(), protocmp.Transform()); diff != "" {
		t.Errorf("options.volumes (-want +got):\n%s", diff)
	}
	if len(a.Sandbox.GetVolumes()) != 2 {
		t.Errorf("sandbox volumes = %v", a.Sandbox.GetVolumes())
	}
}
