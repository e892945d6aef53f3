package e2e

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// Named volumes on the real nodes (orchestrator/backend/kube/volumes.go):
// replicas with --kube-storage-class (and so volumes of that class, the
// cluster's local volumes) make a claim per volume. A file uploaded
// through one replica while no sandbox mounts the volume (a server Pod
// serves it) is read by a sandbox that mounts it through the other, whose
// own writes come back through the API; a second sandbox mounts it
// read-only; the volume is mounted while its sandbox hibernates, and is
// there again when the sandbox wakes and in a sandbox started from the
// sandbox's snapshot; it is not deleted while mounted, and is once its
// sandboxes are gone.
func kubeVolumes(t *testing.T, k *kubeEnv) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	flags := []string{"--kube-storage-class=" + k.cluster.StorageClass, "--kube-snapshot-dir=" + t.TempDir()}
	a, b := k.replica(t, "vol-a", flags...), k.replica(t, "vol-b", flags...)
	ca, _ := a.client(t)
	cb, _ := b.client(t)

	cr, err := ca.CreateVolume(ctx, &sandboxv1.CreateVolumeRequest{Name: "kv", SizeBytes: 64 << 20})
	if err != nil {
		t.Fatalf("CreateVolume: %v", err)
	}
	vol := cr.GetVolume().GetId()
	if _, err := cb.CreateVolume(ctx, &sandboxv1.CreateVolumeRequest{Name: "kv"}); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("CreateVolume of the name through the other replica: %v; want ALREADY_EXISTS", err)
	}
	up, err := ca.UploadVolumeFile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*sandboxv1.UploadVolumeFileRequest{
		{Payload: &sandboxv1.UploadVolumeFileRequest_Header{Header: &sandboxv1.UploadVolumeFileHeader{Volume: "kv", Path: "/in/data.csv"}}},
		{Payload: &sandboxv1.UploadVolumeFileRequest_Chunk{Chunk: []byte("a,b\n1,2\n")}},
	} {
		if err := up.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := up.CloseAndRecv(); err != nil {
		t.Fatalf("UploadVolumeFile with no sandbox mounting the volume: %v", err)
	}

	mount := func(user, path string, ro bool) string {
		t.Helper()
		r, err := cb.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: user, Options: &sandboxv1.SandboxOptions{
			Volumes: []*sandboxv1.VolumeMount{{Volume: "kv", MountPath: path, ReadOnly: ro}}}})
		if err != nil {
			t.Fatalf("AcquireSandbox(%s) mounting the volume: %v", user, err)
		}
		return r.GetSandbox().GetSandboxId()
	}
	rw := mount("vol-rw", "/mnt/kv", false)
	defer deleteQuietly(cb, rw)
	o := execute(t, ctx, cb, &sandboxv1.ExecuteRequest{SandboxId: rw, Code: strings.Join([]string{
		"import os",
		"x = 7",
		"print(open('/mnt/kv/in/data.csv').read().splitlines()[1], os.stat('/mnt/kv').st_uid)",
		"open('/mnt/kv/out.txt', 'w').write('from the sandbox')",
	}, "\n")})
	if o.stdout != "1,2 1000\n" {
		t.Fatalf("the sandbox reads %q %v; want the uploaded file, on a volume the sandbox user owns", o.stdout, o.errs)
	}
	if got := downloadVolumeFile(t, ctx, ca, vol, "/out.txt"); got != "from the sandbox" {
		t.Fatalf("DownloadVolumeFile through replica A = %q; want what the sandbox wrote", got)
	}

	ro := mount("vol-ro", "/data/kv", true)
	defer deleteQuietly(cb, ro)
	o = execute(t, ctx, cb, &sandboxv1.ExecuteRequest{SandboxId: ro, Code: strings.Join([]string{
		"import errno",
		"try:",
		"    open('/data/kv/nope.txt', 'w')",
		"except OSError as e:",
		"    print(open('/data/kv/out.txt').read(), errno.errorcode[e.errno])",
	}, "\n")})
	if o.stdout != "from the sandbox EROFS\n" {
		t.Fatalf("the read-only sandbox: %q %v; want it reads and cannot write", o.stdout, o.errs)
	}
	g, err := ca.GetVolume(ctx, &sandboxv1.GetVolumeRequest{Volume: vol})
	if err != nil {
		t.Fatal(err)
	}
	if by := g.GetVolume().GetMountedBy(); !slices.Contains(by, rw) || !slices.Contains(by, ro) {
		t.Fatalf("mounted_by = %v; want %s and %s", by, rw, ro)
	}
	if _, err := ca.DeleteVolume(ctx, &sandboxv1.DeleteVolumeRequest{Volume: "kv"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("DeleteVolume of a mounted volume: %v; want FAILED_PRECONDITION", err)
	}

	// A snapshot keeps the mount by reference: a sandbox started from it
	// mounts the volume (not a copy of it).
	if _, err := cb.CreateSnapshot(ctx, &sandboxv1.CreateSnapshotRequest{SandboxId: rw, Name: "vol-snap"}); err != nil {
		t.Fatalf("CreateSnapshot: %v", err)
	}
	// Hibernated, the sandbox still mounts the volume; woken, it has it.
	if _, err := ca.HibernateSandbox(ctx, &sandboxv1.HibernateSandboxRequest{SandboxId: rw}); err != nil {
		t.Fatalf("HibernateSandbox: %v", err)
	}
	if _, err := ca.DeleteVolume(ctx, &sandboxv1.DeleteVolumeRequest{Volume: vol}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("DeleteVolume while its sandbox hibernates: %v; want FAILED_PRECONDITION", err)
	}
	o = execute(t, ctx, cb, &sandboxv1.ExecuteRequest{SandboxId: rw, Code: "print(x, open('/mnt/kv/in/data.csv').read().count(','))"})
	if o.stdout != "7 2\n" {
		t.Fatalf("the woken sandbox: %q %v; want x and the volume back", o.stdout, o.errs)
	}
	r, err := ca.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: "vol-copy", Options: &sandboxv1.SandboxOptions{FromSnapshot: "vol-snap"}})
	if err != nil {
		t.Fatalf("AcquireSandbox from the snapshot: %v", err)
	}
	cp := r.GetSandbox().GetSandboxId()
	defer deleteQuietly(ca, cp)
	if vs := r.GetSandbox().GetVolumes(); len(vs) != 1 || vs[0].GetVolume() != vol || vs[0].GetMountPath() != "/mnt/kv" {
		t.Fatalf("the sandbox from the snapshot mounts %v; want the volume at /mnt/kv", vs)
	}
	o = execute(t, ctx, ca, &sandboxv1.ExecuteRequest{SandboxId: cp, Code: "open('/mnt/kv/from-copy.txt', 'w').write('copy'); print(x)"})
	if o.stdout != "7\n" {
		t.Fatalf("the sandbox from the snapshot: %q %v", o.stdout, o.errs)
	}
	if got := downloadVolumeFile(t, ctx, cb, vol, "/from-copy.txt"); got != "copy" {
		t.Fatalf("what the sandbox from the snapshot wrote: %q; want it on the one volume", got)
	}

	for _, id := range []string{rw, ro, cp} {
		if _, err := ca.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: id}); err != nil {
			t.Fatalf("DeleteSandbox(%s): %v", id, err)
		}
	}
	if _, err := cb.DeleteVolume(ctx, &sandboxv1.DeleteVolumeRequest{Volume: "kv"}); err != nil {
		t.Fatalf("DeleteVolume once its sandboxes are gone: %v", err)
	}
	if !pollUntil(30*time.Second, func() bool {
		_, err := ca.GetVolume(ctx, &sandboxv1.GetVolumeRequest{Volume: vol})
		return status.Code(err) == codes.NotFound
	}) {
		t.Fatalf("the deleted volume is still found through replica A")
	}
}

// downloadVolumeFile reads a volume's file whole.
func downloadVolumeFile(t *testing.T, ctx context.Context, c sandboxv1.SandboxServiceClient, vol, path string) string {
	t.Helper()
	s, err := c.DownloadVolumeFile(ctx, &sandboxv1.DownloadVolumeFileRequest{Volume: vol, Path: path})
	if err != nil {
		t.Fatal(err)
	}
	var b []byte
	for {
		m, err := s.Recv()
		if err == io.EOF {
			return string(b)
		}
		if err != nil {
			t.Fatalf("DownloadVolumeFile(%s): %v", path, err)
		}
		b = append(b, m.GetChunk()...)
	}
}
