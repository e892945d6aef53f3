package docker

import (
	"context"
	"io"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// validated is the backend as sandboxd serves it: the port's methods go
// through core.Validating, as in production (the backend applies no request
// rules of its own), while the backend's internals stay reachable for the
// tests that look at them.
type validated struct {
	*Manager
	v core.Manager
}

// newValidated is New, validated.
func newValidated(ctx context.Context, cfg Config, d DockerAPI) (*validated, error) {
	m, err := New(ctx, cfg, d)
	if err != nil {
		return nil, err
	}
	return validate(m), nil
}

// validate puts m behind the validating layer with its own policy.
func validate(m *Manager) *validated {
	return &validated{Manager: m, v: core.Validating(m, m.Policy())}
}

func (v *validated) Acquire(ctx context.Context, userID string, opts core.Options) (core.AcquireResult, error) {
	return v.v.Acquire(ctx, userID, opts)
}

func (v *validated) Get(ctx context.Context, sandboxID string) (core.Sandbox, error) {
	return v.v.Get(ctx, sandboxID)
}

func (v *validated) List(ctx context.Context, f core.ListFilter) ([]core.Sandbox, error) {
	return v.v.List(ctx, f)
}

func (v *validated) Delete(ctx context.Context, sandboxID string) error {
	return v.v.Delete(ctx, sandboxID)
}

func (v *validated) SetTimeout(ctx context.Context, sandboxID string, d time.Duration) (core.Sandbox, error) {
	return v.v.SetTimeout(ctx, sandboxID, d)
}

func (v *validated) Hibernate(ctx context.Context, sandboxID string) (core.Sandbox, error) {
	return v.v.Hibernate(ctx, sandboxID)
}

func (v *validated) Wake(ctx context.Context, sandboxID string) (core.Sandbox, *core.WakeInfo, error) {
	return v.v.Wake(ctx, sandboxID)
}

func (v *validated) SandboxMetrics(ctx context.Context, sandboxID string, since time.Time) ([]core.SandboxMetrics, error) {
	return v.v.SandboxMetrics(ctx, sandboxID, since)
}

func (v *validated) UpdateNetworkPolicy(ctx context.Context, sandboxID string, p core.NetworkPolicy) (core.Sandbox, error) {
	return v.v.UpdateNetworkPolicy(ctx, sandboxID, p)
}

func (v *validated) NetworkStatus(ctx context.Context, sandboxID string) (core.NetworkStatus, error) {
	return v.v.NetworkStatus(ctx, sandboxID)
}

func (v *validated) GetHost(ctx context.Context, sandboxID string, port int) (core.HostInfo, error) {
	return v.v.GetHost(ctx, sandboxID, port)
}

func (v *validated) PortTarget(ctx context.Context, sandboxID string, port int, token bool) (core.PortTarget, error) {
	return v.v.PortTarget(ctx, sandboxID, port, token)
}

func (v *validated) Submit(ctx context.Context, req core.ExecRequest) (commandID string, err error) {
	return v.v.Submit(ctx, req)
}

func (v *validated) Follow(ctx context.Context, sandboxID, commandID string, afterSeq int64, fn func(core.Event) error) error {
	return v.v.Follow(ctx, sandboxID, commandID, afterSeq, fn)
}

func (v *validated) Interrupt(ctx context.Context, sandboxID, commandID string) error {
	return v.v.Interrupt(ctx, sandboxID, commandID)
}

func (v *validated) SendStdin(ctx context.Context, sandboxID, commandID string, data []byte) error {
	return v.v.SendStdin(ctx, sandboxID, commandID, data)
}

func (v *validated) CloseStdin(ctx context.Context, sandboxID, commandID string) error {
	return v.v.CloseStdin(ctx, sandboxID, commandID)
}

func (v *validated) ResizePty(ctx context.Context, sandboxID, commandID string, size core.PtySize) error {
	return v.v.ResizePty(ctx, sandboxID, commandID, size)
}

func (v *validated) ListCommands(ctx context.Context, sandboxID string, pageSize int, pageToken string) (core.CommandPage, error) {
	return v.v.ListCommands(ctx, sandboxID, pageSize, pageToken)
}

func (v *validated) CreateContext(ctx context.Context, sandboxID, language, cwd string) (core.ContextInfo, error) {
	return v.v.CreateContext(ctx, sandboxID, language, cwd)
}

func (v *validated) ListContexts(ctx context.Context, sandboxID string) ([]core.ContextInfo, error) {
	return v.v.ListContexts(ctx, sandboxID)
}

func (v *validated) RestartContext(ctx context.Context, sandboxID, contextID string) error {
	return v.v.RestartContext(ctx, sandboxID, contextID)
}

func (v *validated) DeleteContext(ctx context.Context, sandboxID, contextID string) error {
	return v.v.DeleteContext(ctx, sandboxID, contextID)
}

func (v *validated) Upload(ctx context.Context, sandboxID, path string, r io.Reader) (core.FileInfo, error) {
	return v.v.Upload(ctx, sandboxID, path, r)
}

func (v *validated) Download(ctx context.Context, sandboxID, path string) (io.ReadCloser, core.FileInfo, error) {
	return v.v.Download(ctx, sandboxID, path)
}

func (v *validated) ListFiles(ctx context.Context, sandboxID, path string) ([]core.FileInfo, error) {
	return v.v.ListFiles(ctx, sandboxID, path)
}

func (v *validated) ListFilesDepth(ctx context.Context, sandboxID, path string, depth int) ([]core.FileInfo, error) {
	return v.v.ListFilesDepth(ctx, sandboxID, path, depth)
}

func (v *validated) MakeDirectory(ctx context.Context, sandboxID, path string, parents bool) (core.FileInfo, error) {
	return v.v.MakeDirectory(ctx, sandboxID, path, parents)
}

func (v *validated) Remove(ctx context.Context, sandboxID, path string, recursive bool) error {
	return v.v.Remove(ctx, sandboxID, path, recursive)
}

func (v *validated) Rename(ctx context.Context, sandboxID, from, to string, overwrite bool) (core.FileInfo, error) {
	return v.v.Rename(ctx, sandboxID, from, to, overwrite)
}

func (v *validated) WatchDirectory(ctx context.Context, sandboxID, path string, recursive bool, fn func(core.WatchUpdate) error) error {
	return v.v.WatchDirectory(ctx, sandboxID, path, recursive, fn)
}

func (v *validated) CreateVolume(ctx context.Context, name string, size int64) (core.Volume, error) {
	return v.v.CreateVolume(ctx, name, size)
}

func (v *validated) GetVolume(ctx context.Context, ref string) (core.Volume, error) {
	return v.v.GetVolume(ctx, ref)
}

func (v *validated) ListVolumes(ctx context.Context, tenant string) ([]core.Volume, error) {
	return v.v.ListVolumes(ctx, tenant)
}

func (v *validated) DeleteVolume(ctx context.Context, ref string, force bool) error {
	return v.v.DeleteVolume(ctx, ref, force)
}

func (v *validated) VolumeUpload(ctx context.Context, ref, path string, r io.Reader, overwrite bool) (core.FileInfo, error) {
	return v.v.VolumeUpload(ctx, ref, path, r, overwrite)
}

func (v *validated) VolumeDownload(ctx context.Context, ref, path string) (io.ReadCloser, core.FileInfo, error) {
	return v.v.VolumeDownload(ctx, ref, path)
}

func (v *validated) VolumeStat(ctx context.Context, ref, path string) (core.FileInfo, error) {
	return v.v.VolumeStat(ctx, ref, path)
}

func (v *validated) VolumeListFiles(ctx context.Context, ref, path string, depth int) ([]core.FileInfo, error) {
	return v.v.VolumeListFiles(ctx, ref, path, depth)
}

func (v *validated) VolumeMakeDirectory(ctx context.Context, ref, path string, parents bool) (core.FileInfo, error) {
	return v.v.VolumeMakeDirectory(ctx, ref, path, parents)
}

func (v *validated) VolumeRemove(ctx context.Context, ref, path string, recursive bool) error {
	return v.v.VolumeRemove(ctx, ref, path, recursive)
}

func (v *validated) VolumeSetAttributes(ctx context.Context, ref, path string, a core.FileAttributes) (core.FileInfo, error) {
	return v.v.VolumeSetAttributes(ctx, ref, path, a)
}

func (v *validated) BuildTemplate(ctx context.Context, name string, spec core.TemplateSpec, force bool) (core.Template, core.TemplateVersion, error) {
	return v.v.BuildTemplate(ctx, name, spec, force)
}

func (v *validated) PutTemplateFile(ctx context.Context, key string, r io.Reader) (bool, error) {
	return v.v.PutTemplateFile(ctx, key, r)
}
