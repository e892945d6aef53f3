package docker

import (
	"context"
	"io"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Named volumes: being built (a placeholder that refuses every call).

func unsupportedVolumes() error { return core.Unsupported("docker", "volumes") }

func (m *Manager) CreateVolume(context.Context, string, int64) (core.Volume, error) {
	return core.Volume{}, unsupportedVolumes()
}
func (m *Manager) GetVolume(context.Context, string) (core.Volume, error) {
	return core.Volume{}, unsupportedVolumes()
}
func (m *Manager) ListVolumes(context.Context, string) ([]core.Volume, error) {
	return nil, unsupportedVolumes()
}
func (m *Manager) DeleteVolume(context.Context, string, bool) error { return unsupportedVolumes() }
func (m *Manager) VolumeUpload(context.Context, string, string, io.Reader, bool) (core.FileInfo, error) {
	return core.FileInfo{}, unsupportedVolumes()
}
func (m *Manager) VolumeDownload(context.Context, string, string) (io.ReadCloser, core.FileInfo, error) {
	return nil, core.FileInfo{}, unsupportedVolumes()
}
func (m *Manager) VolumeStat(context.Context, string, string) (core.FileInfo, error) {
	return core.FileInfo{}, unsupportedVolumes()
}
func (m *Manager) VolumeListFiles(context.Context, string, string, int) ([]core.FileInfo, error) {
	return nil, unsupportedVolumes()
}
func (m *Manager) VolumeMakeDirectory(context.Context, string, string, bool) (core.FileInfo, error) {
	return core.FileInfo{}, unsupportedVolumes()
}
func (m *Manager) VolumeRemove(context.Context, string, string, bool) error {
	return unsupportedVolumes()
}
