package grpcapi

import (
	"bytes"
	"context"
	"errors"
	"io"
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

const vol1 = "vol-aaaaaaaaaaaaaaaaaaaa"

func TestVolumeCallsValidation(t *testing.T) {
	env := newTestEnv(t, &fakeManager{})
	c := env.client
	tests := []struct {
		name string
		call func(ctx context.Context) error
		want string
	}{
		{"create empty name", func(ctx context.Context) error {
			_, err := c.CreateVolume(ctx, &sandboxv1.CreateVolumeRequest{SizeBytes: 1 << 30})
			return err
		}, "name is empty"},
		{"create negative size", func(ctx context.Context) error {
			_, err := c.CreateVolume(ctx, &sandboxv1.CreateVolumeRequest{Name: "data", SizeBytes: -1})
			return err
		}, "negative"},
		{"create bad name (domain)", func(ctx context.Context) error {
			_, err := c.CreateVolume(ctx, &sandboxv1.CreateVolumeRequest{Name: "../x"})
			return err
		}, "volume name"},
		{"create tiny (domain)", func(ctx context.Context) error {
			_, err := c.CreateVolume(ctx, &sandboxv1.CreateVolumeRequest{Name: "data", SizeBytes: 1024})
			return err
		}, "at least"},
		{"get empty", func(ctx context.Context) error {
			_, err := c.GetVolume(ctx, &sandboxv1.GetVolumeRequest{})
			return err
		}, "volume is empty"},
		{"delete empty", func(ctx context.Context) error {
			_, err := c.DeleteVolume(ctx, &sandboxv1.DeleteVolumeRequest{Force: true})
			return err
		}, "volume is empty"},
		{"list bad tenant (domain)", func(ctx context.Context) error {
			_, err := c.ListVolumes(ctx, &sandboxv1.ListVolumesRequest{Tenant: "a b"})
			return err
		}, "tenant"},
		{"upload no header", func(ctx context.Context) error {
			s, err := c.UploadVolumeFile(ctx)
			if err != nil {
				return err
			}
			s.Send(&sandboxv1.UploadVolumeFileRequest{Payload: &sandboxv1.UploadVolumeFileRequest_Chunk{Chunk: []byte("x")}})
			_, err = s.CloseAndRecv()
			return err
		}, "header"},
		{"upload empty stream", func(ctx context.Context) error {
			s, err := c.UploadVolumeFile(ctx)
			if err != nil {
				return err
			}
			_, err = s.CloseAndRecv()
			return err
		}, "empty upload"},
		{"upload empty volume", func(ctx context.Context) error {
			return uploadVolume(ctx, c, &sandboxv1.UploadVolumeFileHeader{Path: "a"}, nil)
		}, "volume is empty"},
		{"upload empty path", func(ctx context.Context) error {
			return uploadVolume(ctx, c, &sandboxv1.UploadVolumeFileHeader{Volume: vol1}, nil)
		}, "path is empty"},
		{"upload root (domain)", func(ctx context.Context) error {
			return uploadVolume(ctx, c, &sandboxv1.UploadVolumeFileHeader{Volume: vol1, Path: "/"}, nil)
		}, "upload path is empty"},
		{"upload dotdot (domain)", func(ctx context.Context) error {
			return uploadVolume(ctx, c, &sandboxv1.UploadVolumeFileHeader{Volume: vol1, Path: "a/../../b"}, nil)
		}, "escapes the volume"},
		{"download empty volume", func(ctx context.Context) error {
			return firstErr[sandboxv1.DownloadVolumeFileResponse](c.DownloadVolumeFile(ctx, &sandboxv1.DownloadVolumeFileRequest{Path: "a"}))
		}, "volume is empty"},
		{"download empty path", func(ctx context.Context) error {
			return firstErr[sandboxv1.DownloadVolumeFileResponse](c.DownloadVolumeFile(ctx, &sandboxv1.DownloadVolumeFileRequest{Volume: vol1}))
		}, "path is empty"},
		{"list empty volume", func(ctx context.Context) error {
			_, err := c.ListVolumeFiles(ctx, &sandboxv1.ListVolumeFilesRequest{Path: "a"})
			return err
		}, "volume is empty"},
		{"list depth 11 (domain)", func(ctx context.Context) error {
			_, err := c.ListVolumeFiles(ctx, &sandboxv1.ListVolumeFilesRequest{Volume: vol1, Depth: 11})
			return err
		}, "depth"},
		{"list negative depth (domain)", func(ctx context.Context) error {
			_, err := c.ListVolumeFiles(ctx, &sandboxv1.ListVolumeFilesRequest{Volume: vol1, Depth: -1})
			return err
		}, "depth"},
		{"stat empty volume", func(ctx context.Context) error {
			_, err := c.StatVolumeFile(ctx, &sandboxv1.StatVolumeFileRequest{Path: "a"})
			return err
		}, "volume is empty"},
		{"stat bad ref (domain)", func(ctx context.Context) error {
			_, err := c.StatVolumeFile(ctx, &sandboxv1.StatVolumeFileRequest{Volume: "a/b", Path: "a"})
			return err
		}, "volume"},
		{"mkdir empty volume", func(ctx context.Context) error {
			_, err := c.MakeVolumeDirectory(ctx, &sandboxv1.MakeVolumeDirectoryRequest{Path: "a"})
			return err
		}, "volume is empty"},
		{"mkdir empty path", func(ctx context.Context) error {
			_, err := c.MakeVolumeDirectory(ctx, &sandboxv1.MakeVolumeDirectoryRequest{Volume: vol1})
			return err
		}, "path is empty"},
		{"rmfile empty volume", func(ctx context.Context) error {
			_, err := c.RemoveVolumeFile(ctx, &sandboxv1.RemoveVolumeFileRequest{Path: "a"})
			return err
		}, "volume is empty"},
		{"rmfile empty path", func(ctx context.Context) error {
			_, err := c.RemoveVolumeFile(ctx, &sandboxv1.RemoveVolumeFileRequest{Volume: vol1, Recursive: true})
			return err
		}, "path is empty"},
		{"rmfile root (domain)", func(ctx context.Context) error {
			_, err := c.RemoveVolumeFile(ctx, &sandboxv1.RemoveVolumeFileRequest{Volume: vol1, Path: "/"})
			return err
		}, "root cannot be removed"},
		{"acquire with a bad mount (domain)", func(ctx context.Context) error {
			_, err := c.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: "u", Options: &sandboxv1.SandboxOptions{
				Volumes: []*sandboxv1.VolumeMount{{Volume: "data", MountPath: "/etc"}}}})
			return err
		}, "under /mnt or /data"},
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
		t.Errorf("invalid requests reached the backend: %v", calls)
	}
}

// uploadVolume sends one header and the chunks, and returns the outcome.
func uploadVolume(ctx context.Context, c sandboxv1.SandboxServiceClient, h *sandboxv1.UploadVolumeFileHeader, chunks [][]byte) error {
	s, err := c.UploadVolumeFile(ctx)
	if err != nil {
		return err
	}
	if err := s.Send(&sandboxv1.UploadVolumeFileRequest{Payload: &sandboxv1.UploadVolumeFileRequest_Header{Header: h}}); err != nil {
		return err
	}
	for _, ch := range chunks {
		if err := s.Send(&sandboxv1.UploadVolumeFileRequest{Payload: &sandboxv1.UploadVolumeFileRequest_Chunk{Chunk: ch}}); err != nil {
			return err
		}
	}
	_, err = s.CloseAndRecv()
	return err
}

func TestVolumeLifecycleConvertsAndMapsErrors(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	v := core.Volume{ID: vol1, Name: "data", Tenant: "acme", SizeBytes: 1 << 30, UsedBytes: 4096, CreatedAt: at, MountedBy: []string{sb1, sb2}}
	var created []string
	fake := &fakeManager{
		CreateVolumeFunc: func(_ context.Context, name string, size int64) (core.Volume, error) {
			created = append(created, name)
			if name == "taken" {
				return core.Volume{}, coretest.Errorf(core.ErrAlreadyExists, "volume %s exists", name)
			}
			w := v
			w.SizeBytes, w.MountedBy = size, nil
			return w, nil
		},
		GetVolumeFunc: func(_ context.Context, ref string) (core.Volume, error) {
			if ref != "data" && ref != vol1 {
				return core.Volume{}, core.VolumeNotFound(ref)
			}
			return v, nil
		},
		ListVolumesFunc: func(_ context.Context, tenant string) ([]core.Volume, error) {
			if tenant != "" {
				return nil, nil
			}
			return []core.Volume{v, {ID: "vol-bbbbbbbbbbbbbbbbbbbb", Name: "n\xff", Tenant: "acme"}}, nil
		},
		DeleteVolumeFunc: func(_ context.Context, ref string, force bool) error {
			if !force {
				return core.VolumeInUse(ref, []string{sb1})
			}
			return nil
		},
	}
	env := newTestEnv(t, fake)
	c, ctx := env.client, testCtx(t)

	cr, err := c.CreateVolume(ctx, &sandboxv1.CreateVolumeRequest{Name: "data"})
	if err != nil {
		t.Fatal(err)
	}
	// Size 0 is the domain's default, filled in before the backend.
	if cr.GetVolume().GetSizeBytes() != core.DefaultVolumeBytes {
		t.Errorf("created size = %d, want the default %d", cr.GetVolume().GetSizeBytes(), core.DefaultVolumeBytes)
	}
	if _, err := c.CreateVolume(ctx, &sandboxv1.CreateVolumeRequest{Name: "taken", SizeBytes: 32 << 20}); status.Code(err) != codes.AlreadyExists {
		t.Errorf("CreateVolume(taken) = %v, want AlreadyExists", err)
	}
	g, err := c.GetVolume(ctx, &sandboxv1.GetVolumeRequest{Volume: "data"})
	if err != nil {
		t.Fatal(err)
	}
	want := &sandboxv1.Volume{Id: vol1, Name: "data", Tenant: "acme", SizeBytes: 1 << 30, UsedBytes: 4096,
		CreatedAt: timestamppb.New(at), MountedBy: []string{sb1, sb2}}
	if diff := cmp.Diff(want, g.GetVolume(), protocmp.Transform()); diff != "" {
		t.Errorf("GetVolume (-want +got):\n%s", diff)
	}
	if _, err := c.GetVolume(ctx, &sandboxv1.GetVolumeRequest{Volume: "other"}); status.Code(err) != codes.NotFound {
		t.Errorf("GetVolume(other) = %v, want NotFound", err)
	}
	ls, err := c.ListVolumes(ctx, &sandboxv1.ListVolumesRequest{})
	if err != nil || len(ls.GetVolumes()) != 2 || ls.GetVolumes()[1].GetName() != "n\uFFFD" {
		t.Errorf("ListVolumes = %v, %v", ls, err)
	}
	_, err = c.DeleteVolume(ctx, &sandboxv1.DeleteVolumeRequest{Volume: "data"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), sb1) {
		t.Errorf("DeleteVolume(in use) = %v, want FailedPrecondition naming %s", err, sb1)
	}
	if _, err := c.DeleteVolume(ctx, &sandboxv1.DeleteVolumeRequest{Volume: "data", Force: true}); err != nil {
		t.Errorf("DeleteVolume(force) = %v", err)
	}
	if diff := cmp.Diff([]string{"data", "taken"}, created); diff != "" {
		t.Errorf("created (-want +got):\n%s", diff)
	}
}

func TestVolumeFilesRoundTrip(t *testing.T) {
	mod := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	files := map[string][]byte{}
	var seen []string
	fake := &fakeManager{
		VolumeUploadFunc: func(_ context.Context, ref, p string, r io.Reader, overwrite bool) (core.FileInfo, error) {
			seen = append(seen, "upload "+ref+" "+p)
			if _, ok := files[p]; ok && !overwrite {
				return core.FileInfo{}, coretest.Errorf(core.ErrAlreadyExists, "/%s exists", p)
			}
			b, err := io.ReadAll(r)
			if err != nil {
				return core.FileInfo{}, err
			}
			files[p] = b
			return core.FileInfo{Path: p, Size: int64(len(b)), ModTime: mod, Type: core.FileRegular, Mode: 0o644, UID: 1000, GID: 1000}, nil
		},
		VolumeDownloadFunc: func(_ context.Context, ref, p string) (io.ReadCloser, core.FileInfo, error) {
			b, ok := files[p]
			if !ok {
				return nil, core.FileInfo{}, coretest.Errorf(core.ErrNotFound, "/%s not found", p)
			}
			return io.NopCloser(bytes.NewReader(b)), core.FileInfo{Path: p, Size: int64(len(b)), Type: core.FileRegular}, nil
		},
		VolumeStatFunc: func(_ context.Context, ref, p string) (core.FileInfo, error) {
			seen = append(seen, "stat "+p)
			return core.FileInfo{Path: p, IsDir: true, Type: core.FileDirectory}, nil
		},
		VolumeListFilesFunc: func(_ context.Context, ref, p string, depth int) ([]core.FileInfo, error) {
			seen = append(seen, "ls "+p+" "+string(rune('0'+depth)))
			// A sandbox named a file with invalid UTF-8: it is sent valid,
			// and the list stays sorted.
			return []core.FileInfo{{Path: "a", IsDir: true, Type: core.FileDirectory}, {Path: "a/\xff", Type: core.FileRegular}, {Path: "a/b", Type: core.FileRegular}}, nil
		},
		VolumeMakeDirectoryFunc: func(_ context.Context, ref, p string, parents bool) (core.FileInfo, error) {
			seen = append(seen, "mkdir "+p)
			if !parents {
				return core.FileInfo{}, coretest.Errorf(core.ErrNotFound, "/%s: parent not found", p)
			}
			return core.FileInfo{Path: p + "\xfe", IsDir: true, Type: core.FileDirectory}, nil
		},
		VolumeRemoveFunc: func(_ context.Context, ref, p string, recursive bool) error {
			seen = append(seen, "rm "+p)
			if !recursive {
				return coretest.Errorf(core.ErrFailedPrecondition, "/%s is not empty", p)
			}
			return nil
		},
	}
	env := newTestEnv(t, fake)
	c, ctx := env.client, testCtx(t)

	content := bytes.Repeat([]byte("0123456789"), (downloadChunk*5/2)/10)
	hdr := &sandboxv1.UploadVolumeFileHeader{Volume: "data", Path: "/dir/f.bin"}
	chunks := [][]byte{content[:100], {}, content[100 : 3<<20/2], content[3<<20/2:]}
	s, err := c.UploadVolumeFile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.Send(&sandboxv1.UploadVolumeFileRequest{Payload: &sandboxv1.UploadVolumeFileRequest_Header{Header: hdr}})
	for _, ch := range chunks {
		s.Send(&sandboxv1.UploadVolumeFileRequest{Payload: &sandboxv1.UploadVolumeFileRequest_Chunk{Chunk: ch}})
	}
	up, err := s.CloseAndRecv()
	if err != nil {
		t.Fatal(err)
	}
	wantUp := &sandboxv1.FileInfo{Path: "dir/f.bin", Size: int64(len(content)), ModTime: timestamppb.New(mod), Type: sandboxv1.FileType_FILE_TYPE_FILE, Mode: 0o644, Uid: 1000, Gid: 1000}
	if diff := cmp.Diff(wantUp, up.GetFile(), protocmp.Transform()); diff != "" {
		t.Errorf("UploadVolumeFile (-want +got):\n%s", diff)
	}
	// Again without overwrite: AlreadyExists; with it, replaced.
	if err := uploadVolume(ctx, c, hdr, [][]byte{[]byte("x")}); status.Code(err) != codes.AlreadyExists {
		t.Errorf("second upload = %v, want AlreadyExists", err)
	}
	hdr.Overwrite = true
	if err := uploadVolume(ctx, c, hdr, chunks); err != nil {
		t.Errorf("overwrite upload = %v", err)
	}

	d, err := c.DownloadVolumeFile(ctx, &sandboxv1.DownloadVolumeFileRequest{Volume: "data", Path: "dir/f.bin"})
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	var msgs int
	for {
		m, err := d.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		if (m.GetFile() != nil) != (msgs == 0) {
			t.Errorf("message %d: file set = %v; want it on the first message only", msgs, m.GetFile() != nil)
		}
		msgs++
		got = append(got, m.GetChunk()...)
	}
	if !bytes.Equal(got, content) || msgs != 3 {
		t.Errorf("downloaded %d bytes in %d messages, want %d in 3", len(got), msgs, len(content))
	}
	err = firstErr[sandboxv1.DownloadVolumeFileResponse](c.DownloadVolumeFile(ctx, &sandboxv1.DownloadVolumeFileRequest{Volume: "data", Path: "nope"}))
	if status.Code(err) != codes.NotFound {
		t.Errorf("download missing = %v, want NotFound", err)
	}

	// Depth 0 is 1; the list's hostile name is made valid and kept sorted.
	ls, err := c.ListVolumeFiles(ctx, &sandboxv1.ListVolumeFilesRequest{Volume: "data"})
	if err != nil {
		t.Fatal(err)
	}
	wantLs := []*sandboxv1.FileInfo{
		{Path: "a", IsDir: true, Type: sandboxv1.FileType_FILE_TYPE_DIRECTORY},
		{Path: "a/b", Type: sandboxv1.FileType_FILE_TYPE_FILE},
		{Path: "a/\uFFFD", Type: sandboxv1.FileType_FILE_TYPE_FILE},
	}
	if diff := cmp.Diff(wantLs, ls.GetFiles(), protocmp.Transform()); diff != "" {
		t.Errorf("ListVolumeFiles (-want +got):\n%s", diff)
	}
	if _, err := c.ListVolumeFiles(ctx, &sandboxv1.ListVolumeFilesRequest{Volume: "data", Path: "/a", Depth: 3}); err != nil {
		t.Error(err)
	}
	// The root is "" on the wire.
	st, err := c.StatVolumeFile(ctx, &sandboxv1.StatVolumeFileRequest{Volume: "data"})
	if err != nil || st.GetFile().GetPath() != "" || !st.GetFile().GetIsDir() {
		t.Errorf("StatVolumeFile(root) = %v, %v", st, err)
	}
	if _, err := c.MakeVolumeDirectory(ctx, &sandboxv1.MakeVolumeDirectoryRequest{Volume: "data", Path: "x/y"}); status.Code(err) != codes.NotFound {
		t.Errorf("mkdir without parents = %v, want NotFound", err)
	}
	mk, err := c.MakeVolumeDirectory(ctx, &sandboxv1.MakeVolumeDirectoryRequest{Volume: "data", Path: "x/y", Parents: true})
	if err != nil || mk.GetFile().GetPath() != "x/y\uFFFD" {
		t.Errorf("mkdir -p = %v, %v", mk, err)
	}
	if _, err := c.RemoveVolumeFile(ctx, &sandboxv1.RemoveVolumeFileRequest{Volume: "data", Path: "x"}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("rm non-empty = %v, want FailedPrecondition", err)
	}
	if _, err := c.RemoveVolumeFile(ctx, &sandboxv1.RemoveVolumeFileRequest{Volume: "data", Path: "x", Recursive: true}); err != nil {
		t.Errorf("rm -r = %v", err)
	}
	// The backend sees clean paths relative to the root.
	want := []string{"upload data dir/f.bin", "upload data dir/f.bin", "upload data dir/f.bin", "ls . 1", "ls a 3", "stat .", "mkdir x/y", "mkdir x/y", "rm x", "rm x"}
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Errorf("backend saw (-want +got):\n%s", diff)
	}
}

func TestUploadVolumeSecondHeaderIsRejected(t *testing.T) {
	fake := &fakeManager{VolumeUploadFunc: func(_ context.Context, _, _ string, r io.Reader, _ bool) (core.FileInfo, error) {
		_, err := io.Copy(io.Discard, r)
		return core.FileInfo{}, err
	}}
	env := newTestEnv(t, fake)
	h := &sandboxv1.UploadVolumeFileHeader{Volume: vol1, Path: "a"}
	s, err := env.client.UploadVolumeFile(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		s.Send(&sandboxv1.UploadVolumeFileRequest{Payload: &sandboxv1.UploadVolumeFileRequest_Header{Header: h}})
	}
	_, err = s.CloseAndRecv()
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "only the first message") {
		t.Errorf("error = %v, want InvalidArgument about the second header", err)
	}
}

func TestAcquireVolumeMountsBothWays(t *testing.T) {
	var gotOpts core.Options
	fake := &fakeManager{AcquireFunc: func(_ context.Context, user string, opts core.Options) (core.AcquireResult, error) {
		gotOpts = opts
		sb := core.Sandbox{ID: sb1, UserID: user, State: core.StateRunning,
			Volumes: []core.VolumeMount{{Volume: vol1, Path: "/mnt/data"}, {Volume: "vol-bbbbbbbbbbbbbbbbbbbb", Path: "/data/ref", ReadOnly: true}}}
		return core.AcquireResult{Sandbox: sb, Created: true}, nil
	}}
	env := newTestEnv(t, fake)
	resp, err := env.client.AcquireSandbox(testCtx(t), &sandboxv1.AcquireSandboxRequest{UserId: "u", Options: &sandboxv1.SandboxOptions{
		Volumes: []*sandboxv1.VolumeMount{{Volume: "data", MountPath: "/mnt/data"}, {Volume: "ref", MountPath: "/data/ref", ReadOnly: true}}}})
	if err != nil {
		t.Fatal(err)
	}
	wantIn := []core.VolumeMount{{Volume: "data", Path: "/mnt/data"}, {Volume: "ref", Path: "/data/ref", ReadOnly: true}}
	if diff := cmp.Diff(wantIn, gotOpts.Volumes); diff != "" {
		t.Errorf("options.volumes (-want +got):\n%s", diff)
	}
	wantOut := []*sandboxv1.VolumeMount{{Volume: vol1, MountPath: "/mnt/data"}, {Volume: "vol-bbbbbbbbbbbbbbbbbbbb", MountPath: "/data/ref", ReadOnly: true}}
	if diff := cmp.Diff(wantOut, resp.GetSandbox().GetVolumes(), protocmp.Transform()); diff != "" {
		t.Errorf("sandbox.volumes (-want +got):\n%s", diff)
	}
	// A sandbox without volumes reports none.
	if got := sandboxToProto(core.Sandbox{ID: sb1}).GetVolumes(); got != nil {
		t.Errorf("no mounts = %v, want nil", got)
	}
}

// TestSetVolumeFileAttributes: the fields given, and only those, reach the
// domain, the mode's chmod bits as fs.FileMode; setuid and a missing
// attribute are refused (the domain's rule, through Validating) before the
// backend; the answer is the file as it now is.
func TestSetVolumeFileAttributes(t *testing.T) {
	var got []core.FileAttributes
	fake := &fakeManager{
		VolumeSetAttributesFunc: func(_ context.Context, ref, p string, a core.FileAttributes) (core.FileInfo, error) {
			got = append(got, a)
			fi := core.FileInfo{Path: p, Type: core.FileRegular, Mode: 0o644, UID: 1000, GID: 1000}
			if a.Mode != nil {
				fi.Mode = *a.Mode
			}
			if a.UID != nil {
				fi.UID = *a.UID
			}
			return fi, nil
		},
	}
	env := newTestEnv(t, fake)
	c, ctx := env.client, testCtx(t)
	u := func(n uint32) *uint32 { return &n }
	r, err := c.SetVolumeFileAttributes(ctx, &sandboxv1.SetVolumeFileAttributesRequest{Volume: "data", Path: "/f", Uid: u(0), Mode: u(0o1750)})
	if err != nil {
		t.Fatal(err)
	}
	sticky := fs.FileMode(0o750) | fs.ModeSticky
	if len(got) != 1 || got[0].UID == nil || *got[0].UID != 0 || got[0].GID != nil || got[0].Mode == nil || *got[0].Mode != sticky {
		t.Errorf("the domain was asked for %+v", got)
	}
	if f := r.GetFile(); f.GetPath() != "f" || f.GetUid() != 0 {
		t.Errorf("answer %v", f)
	}
	for _, req := range []*sandboxv1.SetVolumeFileAttributesRequest{
		{Volume: "data", Path: "f"},                    // nothing to set
		{Volume: "data", Path: "f", Mode: u(0o4755)},   // setuid
		{Volume: "data", Path: "f", Mode: u(0o170755)}, // a file type
		{Volume: "", Path: "f", Uid: u(0)},             // no volume
		{Volume: "data", Path: "../f", Uid: u(0)},      // escapes
		{Volume: "data", Path: "f", Gid: u(70000)},     // too high
	} {
		if _, err := c.SetVolumeFileAttributes(ctx, req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v; want InvalidArgument", req, err)
		}
	}
	if len(got) != 1 {
		t.Errorf("refused requests reached the backend: %+v", got[1:])
	}
}
