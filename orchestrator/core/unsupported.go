package core

import (
	"context"
	"io"
	"time"
)

// The stand-ins Complete puts in place of a capability a backend lacks:
// every call answers err, the backend's Lacks error or Unsupported naming
// it and the capability, whatever its arguments (Validating has checked
// them before).

type unsupportedNetwork struct{ err error }

var _ Network = unsupportedNetwork{}

func (u unsupportedNetwork) UpdateNetworkPolicy(context.Context, string, NetworkPolicy) (Sandbox, error) {
	return Sandbox{}, u.err
}

func (u unsupportedNetwork) NetworkStatus(context.Context, string) (NetworkStatus, error) {
	return NetworkStatus{}, u.err
}

func (u unsupportedNetwork) GetHost(context.Context, string, int) (HostInfo, error) {
	return HostInfo{}, u.err
}

func (u unsupportedNetwork) PortTarget(context.Context, string, int, bool) (PortTarget, error) {
	return PortTarget{}, u.err
}

type unsupportedSnapshots struct{ err error }

var _ Snapshots = unsupportedSnapshots{}

func (u unsupportedSnapshots) CreateSnapshot(context.Context, string, string) (Snapshot, error) {
	return Snapshot{}, u.err
}

func (u unsupportedSnapshots) ListSnapshots(context.Context, SnapshotFilter) ([]Snapshot, error) {
	return nil, u.err
}

func (u unsupportedSnapshots) DeleteSnapshot(context.Context, string) error { return u.err }

func (u unsupportedSnapshots) Fork(context.Context, string, ForkRequest) ([]ForkResult, error) {
	return nil, u.err
}

type unsupportedVolumes struct{ err error }

var _ Volumes = unsupportedVolumes{}

func (u unsupportedVolumes) CreateVolume(context.Context, string, int64) (Volume, error) {
	return Volume{}, u.err
}

func (u unsupportedVolumes) GetVolume(context.Context, string) (Volume, error) {
	return Volume{}, u.err
}

func (u unsupportedVolumes) ListVolumes(context.Context, string) ([]Volume, error) { return nil, u.err }

func (u unsupportedVolumes) DeleteVolume(context.Context, string, bool) error { return u.err }

func (u unsupportedVolumes) VolumeUpload(context.Context, string, string, io.Reader, bool) (FileInfo, error) {
	return FileInfo{}, u.err
}

func (u unsupportedVolumes) VolumeDownload(context.Context, string, string) (io.ReadCloser, FileInfo, error) {
	return nil, FileInfo{}, u.err
}

func (u unsupportedVolumes) VolumeStat(context.Context, string, string) (FileInfo, error) {
	return FileInfo{}, u.err
}

func (u unsupportedVolumes) VolumeListFiles(context.Context, string, string, int) ([]FileInfo, error) {
	return nil, u.err
}

func (u unsupportedVolumes) VolumeMakeDirectory(context.Context, string, string, bool) (FileInfo, error) {
	return FileInfo{}, u.err
}

func (u unsupportedVolumes) VolumeRemove(context.Context, string, string, bool) error { return u.err }

func (u unsupportedVolumes) VolumeSetAttributes(context.Context, string, string, FileAttributes) (FileInfo, error) {
	return FileInfo{}, u.err
}

type unsupportedTemplates struct{ err error }

var _ Templates = unsupportedTemplates{}

func (u unsupportedTemplates) PutTemplateFile(context.Context, string, io.Reader) (bool, error) {
	return false, u.err
}

func (u unsupportedTemplates) HasTemplateFile(context.Context, string) (bool, error) {
	return false, u.err
}

func (u unsupportedTemplates) BuildTemplate(context.Context, string, TemplateSpec, bool) (Template, TemplateVersion, error) {
	return Template{}, TemplateVersion{}, u.err
}

func (u unsupportedTemplates) TemplateBuildLog(context.Context, string, int, int64, int) ([]TemplateBuildEvent, TemplateVersion, error) {
	return nil, TemplateVersion{}, u.err
}

func (u unsupportedTemplates) GetTemplate(context.Context, string) (Template, error) {
	return Template{}, u.err
}

func (u unsupportedTemplates) ListTemplates(context.Context, string) ([]Template, error) {
	return nil, u.err
}

func (u unsupportedTemplates) DeleteTemplate(context.Context, string) error { return u.err }

type unsupportedMonitoring struct{ err error }

var _ Monitoring = unsupportedMonitoring{}

func (u unsupportedMonitoring) SandboxMetrics(context.Context, string, time.Time) ([]SandboxMetrics, error) {
	return nil, u.err
}

func (u unsupportedTemplates) FollowTemplateBuild(context.Context, string, int, int64, func(TemplateBuildEvent) error) error {
	return u.err
}
