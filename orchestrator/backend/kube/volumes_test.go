package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandboxd/orchestrator/backend/kube/iosidecar"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	sandboxiov1 "github.com/sandboxd/sandboxd/proto/sandboxio/v1"
)

// The backend's steps of named volumes on a real API server (envtest),
// whose Pods the stand-in kubelet marks ready. No node mounts the claims
// here: every Pod's sidecar is one real io sidecar on loopback whose
// volumes directory holds a directory per volume the test made, so the
// files calls run the real sidecar's code. The real thing, claims mounted
// by a real kubelet, is e2e's.

// volSidecar answers hibernation's records as hibSidecar does and the
// volume calls through the real sidecar.
type volSidecar struct {
	*hibSidecar
	real *iosidecar.Client
}

func (s *volSidecar) Volume(id string) iosidecar.VolumeFiles { return s.real.Volume(id) }

type volEnv struct {
	*hibEnv
	volumes string // the real sidecar's volumes directory
}

func newVolEnv(t *testing.T, with ...func(*Config)) *volEnv {
	t.Helper()
	dir := t.TempDir()
	e := &volEnv{volumes: filepath.Join(dir, "volumes")}
	for _, d := range []string{"io", "workspace", "volumes"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := iosidecar.New(iosidecar.Config{IODir: filepath.Join(dir, "io"), Workspace: filepath.Join(dir, "workspace"), Volumes: e.volumes,
		Token: testToken, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.GRPC().Serve(lis)
	t.Cleanup(func() { srv.Stop(time.Second) })
	real, err := iosidecar.Dial(lis.Addr().String(), testToken)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { real.Close() })
	opts := append([]func(*Config){func(c *Config) {
		c.VolumeClass = "local"
		c.DialIO = func(_ context.Context, addr, _ string) (IOConn, error) {
			return &volSidecar{hibSidecar: &hibSidecar{env: e.hibEnv, pod: addr}, real: real}, nil
		}
	}}, with...)
	e.hibEnv = newHibEnv(t, opts...)
	return e
}

// mount makes volume id's directory in the sidecar, as a kubelet mounts
// its claim.
func (e *volEnv) mount(t *testing.T, id string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(e.volumes, id), 0o755); err != nil {
		t.Fatal(err)
	}
}

func (e *volEnv) volumeClaim(t *testing.T, tenant, name string) *corev1.PersistentVolumeClaim {
	t.Helper()
	c, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(t.Context(), volumeClaimName(tenant, name), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the claim of volume %s/%s: %v", tenant, name, err)
	}
	return c
}

// awaitVolume waits (bounded) until this replica's cache shows volume ref
// as check wants it.
func (e *volEnv) awaitVolume(t *testing.T, ctx context.Context, ref string, check func(core.Volume, error) bool) core.Volume {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ch := e.m.changed()
		v, err := e.m.GetVolume(ctx, ref)
		if check(v, err) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("volume %s: %+v, %v after 30 s", ref, v, err)
		}
		select {
		case <-ch:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Without a class for volumes' claims, every volume call and a sandbox
// asking for volumes are refused, naming the flag.
func TestVolumesNeedAClass(t *testing.T) {
	e := newHibEnv(t)
	ctx := core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
	_, err := e.m.CreateVolume(ctx, "data", 64<<20)
	if !errors.Is(err, core.ErrNotImplemented) || !strings.Contains(err.Error(), "--kube-volume-class") {
		t.Errorf("CreateVolume = %v; want UNIMPLEMENTED naming --kube-volume-class", err)
	}
	_, err = e.m.VolumeStat(ctx, "data", ".")
	if !errors.Is(err, core.ErrNotImplemented) {
		t.Errorf("VolumeStat = %v; want UNIMPLEMENTED", err)
	}
	_, err = e.m.Acquire(ctx, "alice", core.Options{Limits: e.m.cfg.DefaultLimits, Volumes: []core.VolumeMount{{Volume: "data", Path: "/mnt/data"}}})
	if !errors.Is(err, core.ErrNotImplemented) || !strings.Contains(err.Error(), "--kube-volume-class") {
		t.Errorf("Acquire with volumes = %v; want UNIMPLEMENTED naming --kube-volume-class", err)
	}
}

// A volume's life: its claim (the name unique in its tenant, by the
// claim's own name), its files through a server Pod started for them,
// mounted by a sandbox (claim, mounts, labels), counted as mounted while
// the sandbox hibernates, refused deletion while mounted, deleted with
// force, and left out of the sandbox when it wakes.
func TestVolumeLifecycleKube(t *testing.T) {
	e := newVolEnv(t)
	acme := core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
	other := core.WithCaller(t.Context(), core.Caller{Tenant: "other"})

	v, err := e.m.CreateVolume(acme, "data", 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !core.IsVolumeID(v.ID) || v.Name != "data" || v.Tenant != "acme" || v.SizeBytes != 64<<20 {
		t.Fatalf("CreateVolume = %+v", v)
	}
	c := e.volumeClaim(t, "acme", "data")
	if q := c.Spec.Resources.Requests[corev1.ResourceStorage]; q.Value() != 64<<20 || *c.Spec.StorageClassName != "local" ||
		!slices.Equal(c.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) || c.Labels[labelVolumeID] != v.ID {
		t.Fatalf("volume claim %+v", c)
	}
	if _, err := e.m.CreateVolume(acme, "data", 64<<20); !errors.Is(err, core.ErrAlreadyExists) || !strings.Contains(err.Error(), v.ID) {
		t.Errorf("CreateVolume of a taken name = %v; want ALREADY_EXISTS naming %s", err, v.ID)
	}
	ov, err := e.m.CreateVolume(other, "data", 32<<20)
	if err != nil || ov.ID == v.ID {
		t.Fatalf("another tenant's volume of the same name = %+v, %v", ov, err)
	}
	if got, err := e.m.GetVolume(acme, "data"); err != nil || got.ID != v.ID {
		t.Errorf("GetVolume(data) = %+v, %v; want %s", got, err, v.ID)
	}
	if _, err := e.m.GetVolume(other, v.ID); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("GetVolume of another tenant's volume = %v; want NOT_FOUND", err)
	}
	admin := core.WithCaller(t.Context(), core.Caller{Admin: true})
	if _, err := e.m.GetVolume(admin, "data"); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("an admin's GetVolume of a name two tenants use = %v; want INVALID_ARGUMENT", err)
	}
	e.awaitVolume(t, admin, ov.ID, func(v core.Volume, err error) bool { return err == nil })
	if list, err := e.m.ListVolumes(admin, ""); err != nil || len(list) != 2 || list[0].Tenant != "acme" || list[1].Tenant != "other" {
		t.Errorf("ListVolumes(admin) = %+v, %v; want acme's then other's", list, err)
	}

	// Its files: no Pod mounts it, so a server Pod is started for it.
	e.mount(t, v.ID)
	fi, err := e.m.VolumeUpload(acme, "data", "/in/a.txt", strings.NewReader("hello"), false)
	if err != nil || fi.Path != "in/a.txt" || fi.Size != 5 {
		t.Fatalf("VolumeUpload = %+v, %v", fi, err)
	}
	if b, err := os.ReadFile(filepath.Join(e.volumes, v.ID, "in/a.txt")); err != nil || string(b) != "hello" {
		t.Fatalf("the volume holds %q, %v", b, err)
	}
	srv, err := e.cs.CoreV1().Pods(e.ns).Get(acme, volumeServerName(v.ID), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the volume's server pod: %v", err)
	}
	if vs := srv.Spec.Volumes; len(vs) == 0 || vs[0].PersistentVolumeClaim == nil || vs[0].PersistentVolumeClaim.ClaimName != c.Name ||
		srv.Labels[labelSandboxID] != "" || srv.Labels[labelPool] != "" {
		t.Fatalf("server pod %+v; want the volume's claim, and no sandbox or pool label", srv)
	}
	if _, err := e.m.VolumeUpload(acme, "data", "in/a.txt", strings.NewReader("x"), false); !errors.Is(err, core.ErrAlreadyExists) {
		t.Errorf("VolumeUpload over a file without overwrite = %v; want ALREADY_EXISTS", err)
	}
	rc, _, err := e.m.VolumeDownload(acme, v.ID, "in/a.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "hello" {
		t.Errorf("VolumeDownload = %q", b)
	}
	if list, err := e.m.VolumeListFiles(acme, "data", "/", 2); err != nil || len(list) != 2 {
		t.Errorf("VolumeListFiles = %+v, %v", list, err)
	}
	if _, err := e.m.VolumeStat(other, v.ID, "in"); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("another tenant's VolumeStat = %v; want NOT_FOUND", err)
	}

	// A sandbox mounts it.
	r, err := e.m.Acquire(acme, "alice", core.Options{Limits: e.m.cfg.DefaultLimits,
		Volumes: []core.VolumeMount{{Volume: "data", Path: "/mnt/data", ReadOnly: true}}})
	if err != nil {
		t.Fatal(err)
	}
	id := r.Sandbox.ID
	if want := []core.VolumeMount{{Volume: v.ID, Path: "/mnt/data", ReadOnly: true}}; !slices.Equal(r.Sandbox.Volumes, want) {
		t.Errorf("the sandbox's volumes = %+v; want %+v", r.Sandbox.Volumes, want)
	}
	p := e.pod(t, id)
	assertMounted(t, p, v.ID, c.Name, "/mnt/data", true)
	if _, err := e.m.Acquire(acme, "bob", core.Options{Limits: e.m.cfg.DefaultLimits,
		Volumes: []core.VolumeMount{{Volume: ov.ID, Path: "/mnt/x"}}}); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("a sandbox mounting another tenant's volume = %v; want NOT_FOUND", err)
	}
	v = e.awaitVolume(t, acme, v.ID, func(v core.Volume, err error) bool { return err == nil && len(v.MountedBy) == 1 })
	if v.MountedBy[0] != id {
		t.Errorf("MountedBy = %v; want [%s]", v.MountedBy, id)
	}
	if err := e.m.DeleteVolume(acme, "data", false); !errors.Is(err, core.ErrFailedPrecondition) || !strings.Contains(err.Error(), id) {
		t.Errorf("DeleteVolume of a mounted volume = %v; want FAILED_PRECONDITION naming %s", err, id)
	}

	// Hibernated, it still mounts the volume.
	if _, err := e.m.Hibernate(acme, id); err != nil {
		t.Fatal(err)
	}
	e.awaitState(t, acme, id, core.StateHibernated)
	if got, err := e.m.GetVolume(acme, v.ID); err != nil || !slices.Equal(got.MountedBy, []string{id}) {
		t.Errorf("a hibernated sandbox's volume: MountedBy %v, %v; want [%s]", got.MountedBy, err, id)
	}
	if sb, err := e.m.Get(acme, id); err != nil || len(sb.Volumes) != 1 || sb.Volumes[0].Volume != v.ID {
		t.Errorf("the hibernated sandbox's volumes = %+v, %v", sb.Volumes, err)
	}

	// The leader stops the server Pod once it is idle.
	e.m.stopIdleServers(acme, time.Now().Add(volumeServerIdle+time.Minute))
	if p, err := e.cs.CoreV1().Pods(e.ns).Get(acme, volumeServerName(v.ID), metav1.GetOptions{}); err == nil && p.DeletionTimestamp == nil {
		t.Errorf("an idle volume server pod is still there")
	}

	// Deleted with force: gone for callers at once, its name taken until
	// its claim is gone (here it is never: no controller drops the claim's
	// pvc-protection finalizer).
	if err := e.m.DeleteVolume(acme, "data", true); err != nil {
		t.Fatal(err)
	}
	// Destroyed twice at once (E2B's destroy answers false the second
	// time): the second finds none, whatever this replica's cache has
	// seen of the first.
	if err := e.m.DeleteVolume(acme, v.ID, true); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("DeleteVolume of a volume just deleted = %v; want NOT_FOUND", err)
	}
	e.awaitVolume(t, acme, v.ID, func(_ core.Volume, err error) bool { return errors.Is(err, core.ErrNotFound) })
	if _, err := e.m.CreateVolume(acme, "data", 64<<20); !errors.Is(err, core.ErrAlreadyExists) || !strings.Contains(err.Error(), "being deleted") {
		t.Errorf("CreateVolume of a name being deleted = %v; want ALREADY_EXISTS saying so", err)
	}
	// The sandbox wakes without it.
	r, err = e.m.Acquire(acme, "alice", core.Options{Limits: e.m.cfg.DefaultLimits})
	if err != nil || r.Sandbox.ID != id || r.Woke == nil {
		t.Fatalf("wake = %+v, %v", r, err)
	}
	if len(r.Sandbox.Volumes) != 0 {
		t.Errorf("the woken sandbox's volumes = %+v; want none (deleted)", r.Sandbox.Volumes)
	}
	for _, vol := range e.pod(t, id).Spec.Volumes {
		if vol.PersistentVolumeClaim != nil && vol.PersistentVolumeClaim.ClaimName == c.Name {
			t.Errorf("the woken sandbox's pod mounts the deleted volume's claim")
		}
	}
}

// assertMounted checks that Pod p mounts volume id (claim) at path in the
// sandbox container, read-only as asked, at /volumes/<id> in the io
// sidecar, and is labelled as mounting it.
func assertMounted(t *testing.T, p *corev1.Pod, id, claim, path string, ro bool) {
	t.Helper()
	name := ""
	for _, vol := range p.Spec.Volumes {
		if vol.PersistentVolumeClaim != nil && vol.PersistentVolumeClaim.ClaimName == claim {
			name = vol.Name
		}
	}
	if name == "" {
		t.Fatalf("pod %s has no volume of claim %s: %+v", p.Name, claim, p.Spec.Volumes)
	}
	has := func(ms []corev1.VolumeMount, at string, ro bool) bool {
		return slices.ContainsFunc(ms, func(m corev1.VolumeMount) bool { return m.Name == name && m.MountPath == at && m.ReadOnly == ro })
	}
	if !has(p.Spec.Containers[0].VolumeMounts, path, ro) {
		t.Errorf("the sandbox container's mounts %+v; want %s at %s (read-only %v)", p.Spec.Containers[0].VolumeMounts, name, path, ro)
	}
	sc := p.Spec.InitContainers[0]
	if !has(sc.VolumeMounts, volumesDir+"/"+id, false) || !slices.Contains(sc.Args, "--volumes="+volumesDir) {
		t.Errorf("the io sidecar's mounts %+v, args %v; want %s at %s/%s", sc.VolumeMounts, sc.Args, name, volumesDir, id)
	}
	if p.Labels[volumeUseLabel(id)] != "true" {
		t.Errorf("pod labels %v; want %s", p.Labels, volumeUseLabel(id))
	}
}

// A Pod that mounts the volume serves its files: no server Pod is made.
func TestVolumeServedByItsSandbox(t *testing.T) {
	e := newVolEnv(t)
	acme := core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
	v, err := e.m.CreateVolume(acme, "data", 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	e.mount(t, v.ID)
	r, err := e.m.Acquire(acme, "alice", core.Options{Limits: e.m.cfg.DefaultLimits, Volumes: []core.VolumeMount{{Volume: v.ID, Path: "/data/v"}}})
	if err != nil {
		t.Fatal(err)
	}
	e.awaitVolume(t, acme, v.ID, func(v core.Volume, err error) bool { return err == nil && len(v.MountedBy) == 1 })
	if _, err := e.m.VolumeMakeDirectory(acme, v.ID, "/d", false); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cs.CoreV1().Pods(e.ns).Get(acme, volumeServerName(v.ID), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a server pod for a volume sandbox %s mounts: %v; want none", r.Sandbox.ID, err)
	}
	if st, err := os.Stat(filepath.Join(e.volumes, v.ID, "d")); err != nil || !st.IsDir() {
		t.Errorf("the directory on the volume: %v", err)
	}
}

// hangingUsage is an io sidecar whose VolumeUsage never answers.
type hangingUsage struct {
	sandboxiov1.UnimplementedIOServiceServer
	calls atomic.Int32
}

func (h *hangingUsage) VolumeUsage(ctx context.Context, _ *sandboxiov1.VolumeUsageRequest) (*sandboxiov1.VolumeUsageResponse, error) {
	h.calls.Add(1)
	<-ctx.Done()
	return nil, ctx.Err()
}

// A sidecar that never answers a volume's usage costs ListVolumes at most
// usageWait in all, not per volume: the volumes are listed with the
// usage last recorded.
func TestVolumeUsageBounded(t *testing.T) {
	hang := &hangingUsage{}
	gs := grpc.NewServer()
	sandboxiov1.RegisterIOServiceServer(gs, hang)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	hung, err := iosidecar.Dial(lis.Addr().String(), testToken)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hung.Close() })
	var e *hibEnv
	e = newHibEnv(t, func(c *Config) {
		c.VolumeClass = "local"
		c.DialIO = func(_ context.Context, addr, _ string) (IOConn, error) {
			return &volSidecar{hibSidecar: &hibSidecar{env: e, pod: addr}, real: hung}, nil
		}
	})
	acme := core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
	const n = 3
	var mounts []core.VolumeMount
	for i := range n {
		v, err := e.m.CreateVolume(acme, fmt.Sprintf("v%d", i), 64<<20)
		if err != nil {
			t.Fatal(err)
		}
		mounts = append(mounts, core.VolumeMount{Volume: v.ID, Path: fmt.Sprintf("/mnt/v%d", i)})
	}
	if _, err := e.m.Acquire(acme, "alice", core.Options{Limits: e.m.cfg.DefaultLimits, Volumes: mounts}); err != nil {
		t.Fatal(err)
	}
	// Every volume served by the sandbox's (hanging) sidecar.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ch := e.m.changed()
		if !slices.ContainsFunc(mounts, func(vm core.VolumeMount) bool { return e.m.servingPod(vm.Volume) == nil }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sandbox's pod does not serve its volumes within 30 s")
		}
		select {
		case <-ch:
		case <-time.After(100 * time.Millisecond):
		}
	}
	done := make(chan []core.Volume, 1)
	go func() {
		list, err := e.m.ListVolumes(acme, "")
		if err != nil {
			t.Errorf("ListVolumes: %v", err)
		}
		done <- list
	}()
	select {
	case list := <-done:
		if len(list) != n {
			t.Errorf("ListVolumes = %+v; want %d volumes", list, n)
		}
		for _, v := range list {
			if v.UsedBytes != 0 || len(v.MountedBy) != 1 {
				t.Errorf("volume %+v; want it with no usage recorded, mounted by the sandbox", v)
			}
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ListVolumes did not return within 30 s with a sidecar that never answers usage")
	}
	if hang.calls.Load() == 0 {
		t.Error("the sidecar was never asked: the bound was not exercised")
	}
}
