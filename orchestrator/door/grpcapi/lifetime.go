package grpcapi

import (
	"context"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"google.golang.org/protobuf/types/known/durationpb"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// SetSandboxTimeout implements sandboxv1.SandboxServiceServer. The
// timeout's bounds (the server's minimum and maximum) are the domain's.
func (s *Service) SetSandboxTimeout(ctx context.Context, req *sandboxv1.SetSandboxTimeoutRequest) (*sandboxv1.SetSandboxTimeoutResponse, error) {
	if err := required("sandbox ID", req.GetSandboxId()); err != nil {
		return nil, err
	}
	t := req.GetTimeout()
	if t == nil {
		return nil, invalid("timeout is required")
	}
	if err := t.CheckValid(); err != nil {
		return nil, invalid("timeout: %v", err)
	}
	sb, err := s.m.SetTimeout(ctx, req.GetSandboxId(), t.AsDuration())
	if err != nil {
		return nil, s.fail(ctx, "SetSandboxTimeout", err)
	}
	return &sandboxv1.SetSandboxTimeoutResponse{Sandbox: sandboxToProto(sb)}, nil
}

// acquireOptionsFromProto is optionsFromProto with the options' lifetime
// fields; a malformed idle_timeout is INVALID_ARGUMENT (its bounds are the
// domain's).
func acquireOptionsFromProto(o *sandboxv1.SandboxOptions) (core.Options, error) {
	opts := optionsFromProto(o)
	opts.Metadata = o.GetMetadata()
	opts.FromSnapshot = o.GetFromSnapshot()
	opts.Volumes = volumeMountsFromProto(o.GetVolumes())
	opts.Template = o.GetTemplate()
	switch a := o.GetOnIdle(); a {
	case sandboxv1.IdleAction_IDLE_ACTION_UNSPECIFIED:
	case sandboxv1.IdleAction_IDLE_ACTION_HIBERNATE:
		opts.OnIdle = core.OnIdleHibernate
	case sandboxv1.IdleAction_IDLE_ACTION_DELETE:
		opts.OnIdle = core.OnIdleDelete
	default:
		return core.Options{}, invalid("options.on_idle %d is not an IdleAction", a)
	}
	if t := o.GetIdleTimeout(); t != nil {
		if err := t.CheckValid(); err != nil {
			return core.Options{}, invalid("options.idle_timeout: %v", err)
		}
		opts.IdleTimeout = t.AsDuration()
		if opts.IdleTimeout == 0 {
			// Set but zero: the caller asked for something, not the default.
			return core.Options{}, invalid("options.idle_timeout is zero; leave it unset for the server's default")
		}
	}
	return opts, nil
}

// metadataToProto copies a sandbox's metadata. The domain accepted only
// valid UTF-8, but every string entering a proto is sanitised all the same.
func metadataToProto(md map[string]string) map[string]string {
	if len(md) == 0 {
		return nil
	}
	out := make(map[string]string, len(md))
	for k, v := range md {
		out[validUTF8(k)] = validUTF8(v)
	}
	return out
}

// idleTimeoutToProto gives a sandbox's idle TTL; unset when unknown (zero).
func idleTimeoutToProto(d time.Duration) *durationpb.Duration {
	if d <= 0 {
		return nil
	}
	return durationpb.New(d)
}
