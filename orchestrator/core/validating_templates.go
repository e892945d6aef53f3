package core

import (
	"context"
	"io"
)

// validatingTemplates is Validating's wrapper of a Templates port.
type validatingTemplates struct {
	*validator
	m Templates
}

// The template calls' request rules (template.go): references, names,
// keys, specs; archives cut off past Policy.MaxTemplateFileBytes.

func (v validatingTemplates) PutTemplateFile(ctx context.Context, key string, r io.Reader) (bool, error) {
	if err := ValidateTemplateFileKey(key); err != nil {
		return false, err
	}
	max := v.p.MaxTemplateFileBytes
	return v.m.PutTemplateFile(ctx, key, &uploadLimit{r: r, max: max, left: max,
		what: "template archive " + key[:12] + "… (sandboxd --max-template-file)"})
}

func (v validatingTemplates) HasTemplateFile(ctx context.Context, key string) (bool, error) {
	if err := ValidateTemplateFileKey(key); err != nil {
		return false, err
	}
	return v.m.HasTemplateFile(ctx, key)
}

func (v validatingTemplates) BuildTemplate(ctx context.Context, name string, spec TemplateSpec, force bool) (Template, TemplateVersion, error) {
	if err := ValidateTemplateName(name); err != nil {
		return Template{}, TemplateVersion{}, err
	}
	if err := spec.Validate(); err != nil {
		return Template{}, TemplateVersion{}, err
	}
	return v.m.BuildTemplate(ctx, name, spec, force)
}

func (v validatingTemplates) FollowTemplateBuild(ctx context.Context, ref string, version int, afterSeq int64, fn func(TemplateBuildEvent) error) error {
	if err := ValidateTemplateRef(ref); err != nil {
		return err
	}
	if version < 0 || afterSeq < 0 {
		return Invalidf("template build: version %d and after %d must not be negative", version, afterSeq)
	}
	return v.m.FollowTemplateBuild(ctx, ref, version, afterSeq, fn)
}

func (v validatingTemplates) TemplateBuildLog(ctx context.Context, ref string, version int, afterSeq int64, limit int) ([]TemplateBuildEvent, TemplateVersion, error) {
	if err := ValidateTemplateRef(ref); err != nil {
		return nil, TemplateVersion{}, err
	}
	if version < 0 || afterSeq < 0 || limit < 1 || limit > MaxTemplateLogPage {
		return nil, TemplateVersion{}, Invalidf("template build log: version %d and after %d must not be negative, limit %d must be 1 to %d", version, afterSeq, limit, MaxTemplateLogPage)
	}
	return v.m.TemplateBuildLog(ctx, ref, version, afterSeq, limit)
}

func (v validatingTemplates) GetTemplate(ctx context.Context, ref string) (Template, error) {
	if err := ValidateTemplateRef(ref); err != nil {
		return Template{}, err
	}
	return v.m.GetTemplate(ctx, ref)
}

func (v validatingTemplates) ListTemplates(ctx context.Context, tenant string) ([]Template, error) {
	if tenant != "" {
		if err := ValidateTenant(tenant); err != nil {
			return nil, err
		}
		if c := CallerOf(ctx); !c.Admin && tenant != c.Tenant {
			return nil, Invalidf("only an admin may list another tenant's templates")
		}
	}
	return v.m.ListTemplates(ctx, tenant)
}

func (v validatingTemplates) DeleteTemplate(ctx context.Context, ref string) error {
	if err := ValidateTemplateRef(ref); err != nil {
		return err
	}
	return v.m.DeleteTemplate(ctx, ref)
}
