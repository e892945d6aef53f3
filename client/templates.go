package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// Templates are a tenant's own sandbox images, built by sandboxd from a
// spec (a base and ordered steps: apt, copy, env, workdir, user, run) and
// named when a sandbox is created (WithTemplate). Files a spec copies come
// from archives uploaded first (UploadTemplateArchive), named by their
// SHA-256. A ref is a template's ID (tpl-…) or its name.

// WithTemplate creates the sandbox from a template (its ID or name): its
// latest ready version's image instead of sandboxd's. ErrNotFound for a
// template the tenant does not have, ErrFailedPrecondition for one never
// built ready. Sandbox.Template reports it by ID, with its version.
func WithTemplate(ref string) AcquireOption {
	return func(o *sandboxv1.SandboxOptions) { o.Template = ref }
}

// UploadTemplateFile uploads r's content, a tar (plain or gzip), as the
// archive named key: the SHA-256 of the content, in lower-case hex
// (sandboxd does not check that it is). Keys are immutable: when the
// tenant has one under key already, existed is true and r is not sent in
// full (sandboxd answers at once).
func (c *Client) UploadTemplateFile(ctx context.Context, key string, r io.Reader) (existed bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // abandons the upload on a read error
	stream, err := c.api.UploadTemplateFile(ctx)
	if err != nil {
		return false, fmt.Errorf("uploading template archive %s: %w", key, fromGRPC(err))
	}
	hdr := &sandboxv1.UploadTemplateFileRequest{Payload: &sandboxv1.UploadTemplateFileRequest_Header{
		Header: &sandboxv1.UploadTemplateFileHeader{Key: key}}}
	resp, err := sendStream(stream, hdr, func(b []byte) *sandboxv1.UploadTemplateFileRequest {
		return &sandboxv1.UploadTemplateFileRequest{Payload: &sandboxv1.UploadTemplateFileRequest_Chunk{Chunk: b}}
	}, r)
	if err != nil {
		return false, fmt.Errorf("uploading template archive %s: %w", key, err)
	}
	return resp.GetExisted(), nil
}

// UploadTemplateArchive uploads r's content (a tar, plain or gzip) and
// returns its key, the SHA-256 of the content, for CopyStep.archive. The
// content is spooled to a temporary file while it is hashed (the key goes
// first on the wire), and sent from there.
func (c *Client) UploadTemplateArchive(ctx context.Context, r io.Reader) (key string, err error) {
	f, err := os.CreateTemp("", "sandboxd-template-*.tar")
	if err != nil {
		return "", fmt.Errorf("uploading a template archive: %w", err)
	}
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(f, h), r); err != nil {
		return "", fmt.Errorf("uploading a template archive: reading it: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", fmt.Errorf("uploading a template archive: %w", err)
	}
	key = hex.EncodeToString(h.Sum(nil))
	if _, err := c.UploadTemplateFile(ctx, key, f); err != nil {
		return "", err
	}
	return key, nil
}

// BuildTemplate builds the template name (created if new) from spec and
// waits for the build, calling onLog (when not nil) with each line of the
// build's log. It returns the template as the build started and the
// version as it finished. A failed build returns them too, with its error:
// ErrFailedPrecondition for a failed step (the version's reason names it),
// ErrResourceExhausted past a bound, context.DeadlineExceeded past
// sandboxd's time limit for a build (the version is then FAILED, which
// tells it from ctx's own deadline), ErrUnavailable when the engine
// failed. A spec built before is ready at once (TemplateVersion.cached)
// unless force.
//
// When the stream breaks before the build finished (a dropped connection,
// a sandboxd restart), the build goes on in sandboxd: BuildTemplate
// follows it again after the last line received, for a while, as Run
// does a command.
func (c *Client) BuildTemplate(ctx context.Context, name string, spec *sandboxv1.TemplateSpec, force bool, onLog func(*sandboxv1.TemplateBuildLine)) (*sandboxv1.Template, *sandboxv1.TemplateVersion, error) {
	stream, err := c.api.BuildTemplate(ctx, &sandboxv1.BuildTemplateRequest{Name: name, Spec: spec, Force: force})
	if err != nil {
		return nil, nil, fmt.Errorf("building template %s: %w", name, fromGRPC(err))
	}
	first, err := stream.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = status.Error(codes.Internal, "the build's stream ended before it started")
		}
		return nil, nil, fmt.Errorf("building template %s: %w", name, fromGRPC(err))
	}
	started := first.GetStarted()
	if started == nil {
		return nil, nil, fmt.Errorf("building template %s: %w", name, fromGRPC(status.Error(codes.Internal, "the build's stream did not start with what started")))
	}
	t := started.GetTemplate()
	v := started.GetVersion()
	done, last, err := followBuild(stream, 0, onLog, func(m *sandboxv1.BuildTemplateResponse) (*sandboxv1.TemplateBuildLine, *sandboxv1.TemplateVersion) {
		return m.GetLine(), m.GetDone()
	})
	if done == nil && isBroken(err) {
		done, err = c.refollow(ctx, t.GetId(), int(v.GetVersion()), last, onLog, err)
	}
	if done != nil {
		t = withVersion(t, done)
		v = done
	}
	if err != nil {
		return t, v, fmt.Errorf("building template %s version %d: %w", name, v.GetVersion(), err)
	}
	return t, v, nil
}

// FollowTemplateBuild follows a build of a template (version 0: its
// latest), calling onLog with its log's lines after afterSeq, until it
// finishes; it returns the version as it finished, and the build's error
// as BuildTemplate does. For a finished build it returns at once, after
// the lines.
func (c *Client) FollowTemplateBuild(ctx context.Context, ref string, version int, afterSeq int64, onLog func(*sandboxv1.TemplateBuildLine)) (*sandboxv1.TemplateVersion, error) {
	done, err := c.refollow(ctx, ref, version, afterSeq, onLog, nil)
	if err != nil {
		return done, fmt.Errorf("following template %s: %w", ref, err)
	}
	return done, nil
}

// refollow follows a build with FollowTemplateBuild after afterSeq,
// again after a broken stream (for c.retryFor); broke is the error that
// broke an earlier stream (nil: none). It returns the finished version
// and the build's error, fromGRPC's.
func (c *Client) refollow(ctx context.Context, ref string, version int, afterSeq int64, onLog func(*sandboxv1.TemplateBuildLine), broke error) (*sandboxv1.TemplateVersion, error) {
	var deadline time.Time
	backoff := 100 * time.Millisecond
	for {
		if broke != nil {
			if deadline.IsZero() {
				deadline = time.Now().Add(c.retryFor)
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("sandboxd unreachable for %v: %w", c.retryFor, broke)
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
		}
		stream, err := c.api.FollowTemplateBuild(ctx, &sandboxv1.FollowTemplateBuildRequest{Template: ref, Version: int32(version), AfterSeq: afterSeq})
		var done *sandboxv1.TemplateVersion
		if err == nil {
			done, afterSeq, err = followBuild(stream, afterSeq, onLog, func(m *sandboxv1.FollowTemplateBuildResponse) (*sandboxv1.TemplateBuildLine, *sandboxv1.TemplateVersion) {
				return m.GetLine(), m.GetDone()
			})
		} else {
			err = fromGRPC(err)
		}
		if done != nil || !isBroken(err) {
			return done, err
		}
		broke = err
	}
}

// followBuild reads a build's stream to its end: lines after *last go to
// onLog, and the done message is returned with the stream's final error
// (nil for a ready version), fromGRPC's. A stream that ends without done
// is a broken one (Unavailable).
func followBuild[M any](stream grpc.ServerStreamingClient[M], last int64, onLog func(*sandboxv1.TemplateBuildLine),
	parts func(*M) (*sandboxv1.TemplateBuildLine, *sandboxv1.TemplateVersion)) (done *sandboxv1.TemplateVersion, lastSeq int64, err error) {
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			if done == nil {
				return nil, last, fromGRPC(errNoBuildDone)
			}
			return done, last, nil
		}
		if err != nil {
			return done, last, fromGRPC(err)
		}
		line, d := parts(m)
		switch {
		case d != nil:
			done = d
		case line != nil && line.GetSeq() > last:
			last = line.GetSeq()
			if onLog != nil {
				onLog(line)
			}
		}
	}
}

// errNoBuildDone is a build's stream that ended without its done message.
var errNoBuildDone = status.Error(codes.Unavailable, "stream ended before the build's done message")

// isBroken says whether err is a broken stream (sandboxd restarting, a
// dropped connection) rather than an answer. A build's own failure comes
// after its done message, so it is never taken for one.
func isBroken(err error) bool {
	return errors.Is(err, ErrUnavailable)
}

// withVersion returns t with its version v replaced by (or added as) v.
func withVersion(t *sandboxv1.Template, v *sandboxv1.TemplateVersion) *sandboxv1.Template {
	if t == nil {
		return nil
	}
	t = proto.CloneOf(t)
	for i, w := range t.GetVersions() {
		if w.GetVersion() == v.GetVersion() {
			t.Versions[i] = v
			return t
		}
	}
	t.Versions = append(t.Versions, v)
	return t
}

// GetTemplate describes a template and its versions. ErrNotFound when the
// caller has none by that reference.
func (c *Client) GetTemplate(ctx context.Context, ref string) (*sandboxv1.Template, error) {
	r, err := c.api.GetTemplate(ctx, &sandboxv1.GetTemplateRequest{Template: ref})
	if err != nil {
		return nil, fmt.Errorf("getting template %s: %w", ref, fromGRPC(err))
	}
	return r.GetTemplate(), nil
}

// ListTemplates lists the caller's templates by tenant and name; tenant,
// for an admin, keeps one tenant's ("" for all it may see).
func (c *Client) ListTemplates(ctx context.Context, tenant string) ([]*sandboxv1.Template, error) {
	r, err := c.api.ListTemplates(ctx, &sandboxv1.ListTemplatesRequest{Tenant: tenant})
	if err != nil {
		return nil, fmt.Errorf("listing templates: %w", fromGRPC(err))
	}
	return r.GetTemplates(), nil
}

// DeleteTemplate deletes a template: no new sandbox can use it, a running
// build of it is cancelled; sandboxes created from it keep running.
func (c *Client) DeleteTemplate(ctx context.Context, ref string) error {
	if _, err := c.api.DeleteTemplate(ctx, &sandboxv1.DeleteTemplateRequest{Template: ref}); err != nil {
		return fmt.Errorf("deleting template %s: %w", ref, fromGRPC(err))
	}
	return nil
}
