package docker

import (
	"context"
	"io"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// WORK IN PROGRESS: the template builder.

func (m *Manager) PutTemplateFile(ctx context.Context, key string, r io.Reader) (bool, error) {
	return false, core.Unsupported("docker", "templates")
}

func (m *Manager) HasTemplateFile(ctx context.Context, key string) (bool, error) {
	return false, core.Unsupported("docker", "templates")
}

func (m *Manager) BuildTemplate(ctx context.Context, name string, spec core.TemplateSpec, force bool) (core.Template, core.TemplateVersion, error) {
	return core.Template{}, core.TemplateVersion{}, core.Unsupported("docker", "templates")
}

func (m *Manager) FollowTemplateBuild(ctx context.Context, ref string, version int, afterSeq int64, fn func(core.TemplateBuildEvent) error) error {
	return core.Unsupported("docker", "templates")
}

func (m *Manager) GetTemplate(ctx context.Context, ref string) (core.Template, error) {
	return core.Template{}, core.Unsupported("docker", "templates")
}

func (m *Manager) ListTemplates(ctx context.Context, tenant string) ([]core.Template, error) {
	return nil, core.Unsupported("docker", "templates")
}

func (m *Manager) DeleteTemplate(ctx context.Context, ref string) error {
	return core.Unsupported("docker", "templates")
}

func (m *Manager) TemplateBuildLog(ctx context.Context, ref string, version int, afterSeq int64, limit int) ([]core.TemplateBuildEvent, core.TemplateVersion, error) {
	return nil, core.TemplateVersion{}, core.Unsupported("docker", "templates")
}
