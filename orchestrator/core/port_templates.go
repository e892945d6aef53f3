package core

import (
	"context"
	"io"
)

// Templates is a tenant's own sandbox images, built from a spec
// (template.go), which sandboxes start from (Options.Template). A
// reference (ref) is a template's ID or name.
type Templates interface {
	// PutTemplateFile stores an archive a spec's Copy steps name, under
	// key, for the caller's tenant. Keys are immutable: when key exists
	// already the upload is not read and existed is true.
	PutTemplateFile(ctx context.Context, key string, r io.Reader) (existed bool, err error)

	// HasTemplateFile reports whether the tenant has an archive under key.
	HasTemplateFile(ctx context.Context, key string) (bool, error)

	// BuildTemplate starts a build of the template name (created if new)
	// from spec and returns at once, the new version building or, when
	// the spec's hash was built before and force is false, already ready
	// (Cached). Follow it with FollowTemplateBuild. A template whose build
	// is running is FailedPrecondition; too many builds at once
	// ResourceExhausted.
	BuildTemplate(ctx context.Context, name string, spec TemplateSpec, force bool) (Template, TemplateVersion, error)

	// FollowTemplateBuild calls fn with the build log's lines after
	// afterSeq, then with the event that says how it finished, waiting
	// while it runs. It returns nil once the version is ready, and the
	// build's failure (classed, with its reason) if it failed.
	FollowTemplateBuild(ctx context.Context, ref string, version int, afterSeq int64, fn func(TemplateBuildEvent) error) error

	// TemplateBuildLog returns, without waiting, up to limit of the build
	// log's lines after afterSeq, and the version as it stands (for a
	// caller that polls, as E2B's SDK does).
	TemplateBuildLog(ctx context.Context, ref string, version int, afterSeq int64, limit int) ([]TemplateBuildEvent, TemplateVersion, error)

	GetTemplate(ctx context.Context, ref string) (Template, error)

	// ListTemplates lists the templates the caller may see (an admin: of
	// tenant, or all when tenant is ""), by tenant and name.
	ListTemplates(ctx context.Context, tenant string) ([]Template, error)

	// DeleteTemplate deletes a template: no new sandbox can use it (a
	// running build is cancelled), and its images go once no sandbox uses
	// them. A template another template is built on may still be deleted:
	// the built images stand on their own.
	DeleteTemplate(ctx context.Context, ref string) error
}
