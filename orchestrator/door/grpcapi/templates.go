package grpcapi

import (
	"context"
	"errors"
	"io"
	"maps"

	"google.golang.org/grpc"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// The template calls. Like the volume calls they check only the request's
// shape (a reference or a key present, a spec given, no negative numbers);
// the domain checks names, keys, specs and bounds (core.Validating), and
// that a template is the caller's tenant's. TemplateBuildLog, the domain's
// poll of a build log, is not exposed: FollowTemplateBuild streams it.

// UploadTemplateFile implements sandboxv1.SandboxServiceServer, as
// UploadVolumeFile does: the header first, then chunks read as the domain
// needs them, the size bounded by the domain
// (Policy.MaxTemplateFileBytes). When the key exists already the domain
// reads nothing and the answer goes at once.
func (s *Service) UploadTemplateFile(stream grpc.ClientStreamingServer[sandboxv1.UploadTemplateFileRequest, sandboxv1.UploadTemplateFileResponse]) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return invalid("empty upload: the first message must carry the header")
	}
	if err != nil {
		return s.fail(ctx, "UploadTemplateFile", err)
	}
	h := first.GetHeader()
	if h == nil {
		return invalid("the first message must carry the header (the archive's key), not a chunk")
	}
	if err := required("key", h.GetKey()); err != nil {
		return err
	}
	r := &uploadReader{recv: func() ([]byte, bool, error) {
		msg, err := stream.Recv()
		return msg.GetChunk(), msg.GetHeader() != nil, err
	}}
	existed, err := s.m.PutTemplateFile(ctx, h.GetKey(), r)
	if r.err != nil {
		return s.fail(ctx, "UploadTemplateFile", r.err)
	}
	if err != nil {
		return s.fail(ctx, "UploadTemplateFile", err)
	}
	return stream.SendAndClose(&sandboxv1.UploadTemplateFileResponse{Existed: existed})
}

// BuildTemplate implements sandboxv1.SandboxServiceServer: it starts the
// build, sends what started, then follows the build as
// FollowTemplateBuild does from its first line.
func (s *Service) BuildTemplate(req *sandboxv1.BuildTemplateRequest, stream grpc.ServerStreamingServer[sandboxv1.BuildTemplateResponse]) error {
	ctx := stream.Context()
	if err := required("name", req.GetName()); err != nil {
		return err
	}
	if req.GetSpec() == nil {
		return invalid("spec is missing")
	}
	spec, err := templateSpecFromProto(req.GetSpec())
	if err != nil {
		return err
	}
	t, v, err := s.m.BuildTemplate(ctx, req.GetName(), spec, req.GetForce())
	if err != nil {
		return s.fail(ctx, "BuildTemplate", err)
	}
	started := &sandboxv1.TemplateBuildStarted{Template: templateToProto(t), Version: templateVersionToProto(v)}
	if err := stream.Send(&sandboxv1.BuildTemplateResponse{Event: &sandboxv1.BuildTemplateResponse_Started{Started: started}}); err != nil {
		return s.fail(ctx, "BuildTemplate", err)
	}
	return s.followTemplate(ctx, "BuildTemplate", t.ID, v.Version, 0,
		func(l *sandboxv1.TemplateBuildLine) error {
			return stream.Send(&sandboxv1.BuildTemplateResponse{Event: &sandboxv1.BuildTemplateResponse_Line{Line: l}})
		},
		func(d *sandboxv1.TemplateVersion) error {
			return stream.Send(&sandboxv1.BuildTemplateResponse{Event: &sandboxv1.BuildTemplateResponse_Done{Done: d}})
		})
}

// FollowTemplateBuild implements sandboxv1.SandboxServiceServer.
func (s *Service) FollowTemplateBuild(req *sandboxv1.FollowTemplateBuildRequest, stream grpc.ServerStreamingServer[sandboxv1.FollowTemplateBuildResponse]) error {
	ctx := stream.Context()
	if err := required("template", req.GetTemplate()); err != nil {
		return err
	}
	if req.GetVersion() < 0 {
		return invalid("version %d is negative; use 0 for the latest", req.GetVersion())
	}
	if req.GetAfterSeq() < 0 {
		return invalid("after_seq %d is negative; use 0 to stream from the first line", req.GetAfterSeq())
	}
	ref, version := req.GetTemplate(), int(req.GetVersion())
	if version == 0 {
		// The latest version, resolved here: the port names versions.
		t, err := s.m.GetTemplate(ctx, ref)
		if err != nil {
			return s.fail(ctx, "FollowTemplateBuild", err)
		}
		latest, ok := t.Latest()
		if !ok {
			return s.fail(ctx, "FollowTemplateBuild", core.NotFoundf("template %q has no builds", core.Truncate(ref, 80)))
		}
		ref, version = t.ID, latest.Version
	}
	return s.followTemplate(ctx, "FollowTemplateBuild", ref, version, req.GetAfterSeq(),
		func(l *sandboxv1.TemplateBuildLine) error {
			return stream.Send(&sandboxv1.FollowTemplateBuildResponse{Event: &sandboxv1.FollowTemplateBuildResponse_Line{Line: l}})
		},
		func(d *sandboxv1.TemplateVersion) error {
			return stream.Send(&sandboxv1.FollowTemplateBuildResponse{Event: &sandboxv1.FollowTemplateBuildResponse_Done{Done: d}})
		})
}

// followTemplate streams a build's lines after afterSeq with line, then
// the version it finished as with done, and ends with the build's outcome:
// nil for a ready version, the build's failure (classed by the domain,
// hence its gRPC code) for a failed one. A failed send (the client went
// away) ends the domain's follow through fn's error.
func (s *Service) followTemplate(ctx context.Context, method, ref string, version int, afterSeq int64,
	line func(*sandboxv1.TemplateBuildLine) error, done func(*sandboxv1.TemplateVersion) error) error {
	err := s.m.FollowTemplateBuild(ctx, ref, version, afterSeq, func(e core.TemplateBuildEvent) error {
		if e.Done != nil {
			return done(templateVersionToProto(*e.Done))
		}
		return line(&sandboxv1.TemplateBuildLine{Seq: e.Seq, Time: timestampToProto(e.Time), Line: validUTF8(e.Line)})
	})
	if err != nil {
		return s.fail(ctx, method, err)
	}
	return nil
}

// GetTemplate implements sandboxv1.SandboxServiceServer.
func (s *Service) GetTemplate(ctx context.Context, req *sandboxv1.GetTemplateRequest) (*sandboxv1.GetTemplateResponse, error) {
	if err := required("template", req.GetTemplate()); err != nil {
		return nil, err
	}
	t, err := s.m.GetTemplate(ctx, req.GetTemplate())
	if err != nil {
		return nil, s.fail(ctx, "GetTemplate", err)
	}
	return &sandboxv1.GetTemplateResponse{Template: templateToProto(t)}, nil
}

// ListTemplates implements sandboxv1.SandboxServiceServer.
func (s *Service) ListTemplates(ctx context.Context, req *sandboxv1.ListTemplatesRequest) (*sandboxv1.ListTemplatesResponse, error) {
	ts, err := s.m.ListTemplates(ctx, req.GetTenant())
	if err != nil {
		return nil, s.fail(ctx, "ListTemplates", err)
	}
	out := &sandboxv1.ListTemplatesResponse{Templates: make([]*sandboxv1.Template, 0, len(ts))}
	for _, t := range ts {
		out.Templates = append(out.Templates, templateToProto(t))
	}
	return out, nil
}

// DeleteTemplate implements sandboxv1.SandboxServiceServer.
func (s *Service) DeleteTemplate(ctx context.Context, req *sandboxv1.DeleteTemplateRequest) (*sandboxv1.DeleteTemplateResponse, error) {
	if err := required("template", req.GetTemplate()); err != nil {
		return nil, err
	}
	if err := s.m.DeleteTemplate(ctx, req.GetTemplate()); err != nil {
		return nil, s.fail(ctx, "DeleteTemplate", err)
	}
	return &sandboxv1.DeleteTemplateResponse{}, nil
}

// templateToProto converts a template. Its name and tenant were validated
// when it was made; they are made valid UTF-8 all the same, as a
// volume's are.
func templateToProto(t core.Template) *sandboxv1.Template {
	p := &sandboxv1.Template{
		Id:        validUTF8(t.ID),
		Name:      validUTF8(t.Name),
		Tenant:    validUTF8(t.Tenant),
		CreatedAt: timestampToProto(t.CreatedAt),
	}
	for _, v := range t.Versions {
		p.Versions = append(p.Versions, templateVersionToProto(v))
	}
	return p
}

// templateVersionToProto converts a version. Its reason can quote what a
// build printed: it is made valid UTF-8.
func templateVersionToProto(v core.TemplateVersion) *sandboxv1.TemplateVersion {
	return &sandboxv1.TemplateVersion{
		Version:    int32(v.Version),
		SpecHash:   validUTF8(v.SpecHash),
		State:      templateStateToProto(v.State),
		Reason:     validUTF8(v.Reason),
		Cached:     v.Cached,
		StartedAt:  timestampToProto(v.StartedAt),
		FinishedAt: timestampToProto(v.FinishedAt),
		SizeBytes:  v.SizeBytes,
		UsedBy:     int32(v.UsedBy),
	}
}

func templateStateToProto(s core.TemplateState) sandboxv1.TemplateState {
	switch s {
	case core.TemplateBuilding:
		return sandboxv1.TemplateState_TEMPLATE_STATE_BUILDING
	case core.TemplateReady:
		return sandboxv1.TemplateState_TEMPLATE_STATE_READY
	case core.TemplateFailed:
		return sandboxv1.TemplateState_TEMPLATE_STATE_FAILED
	}
	return sandboxv1.TemplateState_TEMPLATE_STATE_UNSPECIFIED
}

// templateSpecFromProto converts a requested spec. Only the shape is
// checked here (each step sets one thing); the domain checks the rest
// (core.TemplateSpec.Validate). An apt or env step sent empty stays a
// step of its kind (an empty, non-nil list or map), so the domain names
// it rather than counting it as no step at all.
func templateSpecFromProto(p *sandboxv1.TemplateSpec) (core.TemplateSpec, error) {
	spec := core.TemplateSpec{Base: p.GetBase(), Steps: make([]core.TemplateStep, 0, len(p.GetSteps()))}
	for i, st := range p.GetSteps() {
		var cs core.TemplateStep
		switch x := st.GetStep().(type) {
		case *sandboxv1.TemplateStep_Apt:
			cs.Apt = append([]string{}, x.Apt.GetPackages()...)
		case *sandboxv1.TemplateStep_Copy:
			c := x.Copy
			cs.Copy = &core.TemplateCopy{Archive: c.GetArchive(), Src: c.GetSrc(), Dest: c.GetDest(), Mode: c.GetMode(), Owner: c.GetOwner()}
		case *sandboxv1.TemplateStep_Env:
			cs.Env = maps.Clone(x.Env.GetVars())
			if cs.Env == nil {
				cs.Env = map[string]string{}
			}
		case *sandboxv1.TemplateStep_Workdir:
			if x.Workdir == "" {
				return core.TemplateSpec{}, invalid("spec step %d: workdir is empty", i+1)
			}
			cs.Workdir = x.Workdir
		case *sandboxv1.TemplateStep_User:
			if x.User == "" {
				return core.TemplateSpec{}, invalid("spec step %d: user is empty", i+1)
			}
			cs.User = x.User
		case *sandboxv1.TemplateStep_Run:
			if x.Run == "" {
				return core.TemplateSpec{}, invalid("spec step %d: run is empty", i+1)
			}
			cs.Run = x.Run
		default:
			return core.TemplateSpec{}, invalid("spec step %d: set one of apt, copy, env, workdir, user, run", i+1)
		}
		spec.Steps = append(spec.Steps, cs)
	}
	return spec, nil
}
