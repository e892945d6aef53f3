package kube

import (
	"context"
	"io"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// The operations the Kubernetes backend does not offer yet. Each answers
// core.Unsupported (FAILED_PRECONDITION naming this backend and the
// feature), as every backend says "not here"; docs/kubernetes.md lists
// them.

// backendName is this backend's --backend value.
const backendName = "kubernetes"

// unsupported is the error of an operation this backend lacks.
func unsupported(feature string) error { return core.Unsupported(backendName, feature) }

// The features this backend lacks, as unsupported names them.
const (
	featHibernation = "hibernation and wake"
	featNetwork     = "networked sandboxes (options.network and network policies)" // without Config.EgressCNI
	featMetrics     = "per-sandbox metrics"
	featSnapshots   = "snapshots and forks" // without Config.SnapshotDir
	featVolumes     = "volumes"             // without Config.VolumeClass
	featTemplates   = "templates (this backend runs the one image its Pods name; a template would need a registry the cluster pulls from)"
)

// refuseOptions is Acquire's answer to options this backend lacks,
// templates, and hibernation on idle without a storage class (a
// start from a snapshot without a snapshot directory is refused when it
// is resolved, snapshots.go): no sandbox here gets them (its Pod runs the
// one image; network is networkOf's to refuse), and an option silently
// ignored would let a caller believe it is in force (an E2B autoPause
// sandbox deleted at its timeout, with everything in it). The server's own
// --on-idle default is not an option of the caller's: without a storage
// class, Config says it is not followed here.
func (m *Manager) refuseOptions(opts core.Options) error {
	if opts.OnIdle == core.OnIdleHibernate {
		if err := m.hibernation(); err != nil {
			return err
		}
	}
	if opts.Template != "" {
		return unsupported(featTemplates)
	}
	return nil
}

// Every operation of the port, supported or not.
var _ core.Manager = (*Manager)(nil)

// PutTemplateFile is not supported on this backend.
func (m *Manager) PutTemplateFile(context.Context, string, io.Reader) (bool, error) {
	return false, unsupported(featTemplates)
}

// HasTemplateFile is not supported on this backend.
func (m *Manager) HasTemplateFile(context.Context, string) (bool, error) {
	return false, unsupported(featTemplates)
}

// BuildTemplate is not supported on this backend.
func (m *Manager) BuildTemplate(context.Context, string, core.TemplateSpec, bool) (core.Template, core.TemplateVersion, error) {
	return core.Template{}, core.TemplateVersion{}, unsupported(featTemplates)
}

// FollowTemplateBuild is not supported on this backend.
func (m *Manager) FollowTemplateBuild(context.Context, string, int, int64, func(core.TemplateBuildEvent) error) error {
	return unsupported(featTemplates)
}

// GetTemplate is not supported on this backend.
func (m *Manager) GetTemplate(context.Context, string) (core.Template, error) {
	return core.Template{}, unsupported(featTemplates)
}

// ListTemplates is not supported on this backend.
func (m *Manager) ListTemplates(context.Context, string) ([]core.Template, error) {
	return nil, unsupported(featTemplates)
}

// DeleteTemplate is not supported on this backend.
func (m *Manager) DeleteTemplate(context.Context, string) error {
	return unsupported(featTemplates)
}

// TemplateBuildLog is not supported on this backend.
func (m *Manager) TemplateBuildLog(context.Context, string, int, int64, int) ([]core.TemplateBuildEvent, core.TemplateVersion, error) {
	return nil, core.TemplateVersion{}, unsupported(featTemplates)
}
