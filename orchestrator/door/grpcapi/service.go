// Package grpcapi serves sandboxd's public gRPC API (proto/sandbox/v1) on top
// of the domain's port, core.Manager. Handlers are thin: check the
// request's shape, call the domain, convert the result, and map errors to
// gRPC codes in one place (toStatus). No sandbox logic lives here.
//
// A request's shape is what only the API can see: required fields present,
// durations valid, sequence numbers not negative, an upload's header first.
// The domain's own rules (the form of IDs, languages, limits, paths) are
// checked once, by the domain, whose InvalidArgument errors say what is
// wrong; the handlers do not repeat them.
package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/ioproto"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// downloadChunk is the size of DownloadFile's content messages: large enough
// to keep per-message overhead negligible, far below the 4 MiB a default
// client accepts.
const downloadChunk = 1 << 20

// Service implements sandboxv1.SandboxServiceServer.
type Service struct {
	sandboxv1.UnimplementedSandboxServiceServer

	m   core.Manager
	log *slog.Logger
	obs StreamObserver // never nil
	// audit answers ListAuditEvents; nil: the trail is off.
	audit AuditReader
}

// StreamObserver is told what the command streams deliver, for metrics
// (metrics.Metrics implements it). Its methods must be quick and safe for
// concurrent use.
type StreamObserver interface {
	// CommandDone: an Execute stream delivered a command's done event.
	CommandDone(language, status string, d time.Duration)
	// Streamed: n payload bytes of an event of kind (stdout, stderr,
	// display, result) were sent to a client.
	Streamed(kind string, n int)
}

type noObserver struct{}

func (noObserver) CommandDone(string, string, time.Duration) {}
func (noObserver) Streamed(string, int)                      {}

// NewService returns the API over m. A nil logger discards.
func NewService(m core.Manager, log *slog.Logger) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{m: m, log: log, obs: noObserver{}}
}

// fail maps a domain error for the method that got it. Once the call's
// context is done (the client cancelled, went away, or its deadline passed)
// whatever failed did so because of that: the error is reported as the
// context's, not logged as an internal failure (a failed stream Send is not
// a server bug).
func (s *Service) fail(ctx context.Context, method string, err error) error {
	if err != nil && ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	return toStatus(ctx, s.log, method, err)
}

// AcquireSandbox implements sandboxv1.SandboxServiceServer.
func (s *Service) AcquireSandbox(ctx context.Context, req *sandboxv1.AcquireSandboxRequest) (*sandboxv1.AcquireSandboxResponse, error) {
	if err := required("user ID", req.GetUserId()); err != nil {
		return nil, err
	}
	// The user ID's form, limits and env are checked by the domain, which
	// knows the server's defaults and maxima.
	opts, err := acquireOptionsFromProto(req.GetOptions())
	if err != nil {
		return nil, err
	}
	res, err := s.m.Acquire(ctx, req.GetUserId(), opts)
	if err != nil {
		return nil, s.fail(ctx, "AcquireSandbox", err)
	}
	return acquireResultToProto(res), nil
}

// GetSandbox implements sandboxv1.SandboxServiceServer.
func (s *Service) GetSandbox(ctx context.Context, req *sandboxv1.GetSandboxRequest) (*sandboxv1.GetSandboxResponse, error) {
	if err := required("sandbox ID", req.GetSandboxId()); err != nil {
		return nil, err
	}
	sb, err := s.m.Get(ctx, req.GetSandboxId())
	if err != nil {
		return nil, s.fail(ctx, "GetSandbox", err)
	}
	return &sandboxv1.GetSandboxResponse{Sandbox: sandboxToProto(sb)}, nil
}

// HibernateSandbox implements sandboxv1.SandboxServiceServer.
func (s *Service) HibernateSandbox(ctx context.Context, req *sandboxv1.HibernateSandboxRequest) (*sandboxv1.HibernateSandboxResponse, error) {
	if err := required("sandbox ID", req.GetSandboxId()); err != nil {
		return nil, err
	}
	sb, err := s.m.Hibernate(ctx, req.GetSandboxId())
	if err != nil {
		return nil, s.fail(ctx, "HibernateSandbox", err)
	}
	return &sandboxv1.HibernateSandboxResponse{Sandbox: sandboxToProto(sb)}, nil
}

// WakeSandbox implements sandboxv1.SandboxServiceServer.
func (s *Service) WakeSandbox(ctx context.Context, req *sandboxv1.WakeSandboxRequest) (*sandboxv1.WakeSandboxResponse, error) {
	if err := required("sandbox ID", req.GetSandboxId()); err != nil {
		return nil, err
	}
	sb, w, err := s.m.Wake(ctx, req.GetSandboxId())
	if err != nil {
		return nil, s.fail(ctx, "WakeSandbox", err)
	}
	return &sandboxv1.WakeSandboxResponse{Sandbox: sandboxToProto(sb), Woke: wakeToProto(w)}, nil
}

// ListSandboxes implements sandboxv1.SandboxServiceServer.
func (s *Service) ListSandboxes(ctx context.Context, req *sandboxv1.ListSandboxesRequest) (*sandboxv1.ListSandboxesResponse, error) {
	st, err := stateFromProto(req.GetState())
	if err != nil {
		return nil, invalid("state: %v", err)
	}
	f := core.ListFilter{Tenant: req.GetTenant(), UserID: req.GetUserId(), State: st, Metadata: req.GetMetadata()}
	list, err := s.m.List(ctx, f)
	if err != nil {
		return nil, s.fail(ctx, "ListSandboxes", err)
	}
	// The domain returns the order the contract promises (oldest first).
	resp := &sandboxv1.ListSandboxesResponse{Sandboxes: make([]*sandboxv1.Sandbox, 0, len(list))}
	for _, sb := range list {
		resp.Sandboxes = append(resp.Sandboxes, sandboxToProto(sb))
	}
	return resp, nil
}

// DeleteSandbox implements sandboxv1.SandboxServiceServer.
func (s *Service) DeleteSandbox(ctx context.Context, req *sandboxv1.DeleteSandboxRequest) (*sandboxv1.DeleteSandboxResponse, error) {
	if err := required("sandbox ID", req.GetSandboxId()); err != nil {
		return nil, err
	}
	if err := s.m.Delete(ctx, req.GetSandboxId()); err != nil {
		return nil, s.fail(ctx, "DeleteSandbox", err)
	}
	return &sandboxv1.DeleteSandboxResponse{}, nil
}

// Execute implements sandboxv1.SandboxServiceServer. Idempotence is the
// domain's: Submit with a known command ID runs nothing and returns it, and
// following from seq 0 replays that command's events.
func (s *Service) Execute(req *sandboxv1.ExecuteRequest, stream grpc.ServerStreamingServer[sandboxv1.ExecuteEvent]) error {
	ctx := stream.Context()
	if err := required("sandbox ID", req.GetSandboxId()); err != nil {
		return err
	}
	er := core.ExecRequest{
		SandboxID: req.GetSandboxId(),
		CommandID: req.GetCommandId(),
		Language:  req.GetLanguage(),
		Code:      req.GetCode(),
		Stdin:     req.GetStdin(),
		Pty:       ptyToDomain(req.GetPty()),
		Env:       req.GetEnv(),
		ContextID: req.GetContextId(),
	}
	if t := req.GetTimeout(); t != nil {
		if err := t.CheckValid(); err != nil {
			return invalid("timeout: %v", err)
		}
		er.Timeout = t.AsDuration()
	}
	if p := req.GetPty(); p != nil && (p.GetRows() == 0 || p.GetCols() == 0) {
		return invalid("pty is set without rows and cols (%dx%d)", p.GetRows(), p.GetCols())
	}
	// One call of the domain (Execute, not Submit then Follow), so a
	// backend whose log is across a network submits and follows in one
	// round trip.
	var cmdID string // set before the first event
	return s.follow(ctx, "Execute", req.GetSandboxId(), &cmdID, stream, func(fn func(core.Event) error) error {
		return s.m.Execute(ctx, er, func(id string) {
			cmdID = id
			// The header tells the client the command is in the sandbox's
			// log before any event: SendStdin can follow at once
			// (processes.go).
			_ = grpc.SendHeader(ctx, metadata.Pairs(CommandIDHeader, id))
		}, fn)
	})
}

// RunStateless implements sandboxv1.SandboxServiceServer: the domain's
// stateless run (core.RunStateless), its events streamed as Execute's.
func (s *Service) RunStateless(req *sandboxv1.RunStatelessRequest, stream grpc.ServerStreamingServer[sandboxv1.ExecuteEvent]) error {
	ctx := stream.Context()
	opts, err := acquireOptionsFromProto(req.GetOptions())
	if err != nil {
		return err
	}
	er := core.ExecRequest{Language: req.GetLanguage(), Code: req.GetCode()}
	if t := req.GetTimeout(); t != nil {
		if err := t.CheckValid(); err != nil {
			return invalid("timeout: %v", err)
		}
		er.Timeout = t.AsDuration()
	}
	var cmdID string // set before the first event
	return s.follow(ctx, "RunStateless", "", &cmdID, stream, func(fn func(core.Event) error) error {
		return core.RunStateless(ctx, s.m, opts, er, func(sandboxID, id string) {
			cmdID = id
			_ = grpc.SendHeader(ctx, metadata.Pairs(CommandIDHeader, id, SandboxIDHeader, sandboxID))
		}, fn, func(id string, err error) {
			if err != nil {
				s.log.WarnContext(ctx, "delete a stateless run's sandbox; its idle timeout removes it", "sandbox_id", id, "error", err)
			}
		})
	})
}

// StreamCommand implements sandboxv1.SandboxServiceServer.
func (s *Service) StreamCommand(req *sandboxv1.StreamCommandRequest, stream grpc.ServerStreamingServer[sandboxv1.ExecuteEvent]) error {
	if err := required("sandbox ID", req.GetSandboxId()); err != nil {
		return err
	}
	if err := required("command_id", req.GetCommandId()); err != nil {
		return err
	}
	if req.GetAfterSeq() < 0 {
		return invalid("after_seq %d is negative; use 0 to stream from the first event", req.GetAfterSeq())
	}
	ctx, cmdID := stream.Context(), req.GetCommandId()
	return s.follow(ctx, "StreamCommand", req.GetSandboxId(), &cmdID, stream, func(fn func(core.Event) error) error {
		return s.m.Follow(ctx, req.GetSandboxId(), cmdID, req.GetAfterSeq(), fn)
	})
}

// follow sends the events of command *commandID that run delivers
// (Execute's or Follow's) until it is done. The ID is read as events come:
// Execute learns it once the command is submitted, before any event.
//
// Events of a type this server does not know are skipped. The events file
// is the sandbox's to write, so it can hold millions of them: they are
// logged once per call, with their count and the first one's type and seq,
// never once each (a few MB of them must not become a flood in sandboxd's
// own log).
//
// What was sent is reported to s.obs: the payload bytes of every event,
// and, for Execute only, the command's end when its done event was sent.
// Counting commands where the client receives their end is the honest
// place for the API (the domain has no single point that sees every
// command end), and leaving StreamCommand out keeps a command resumed
// after a broken stream from being counted twice; a command whose
// Execute stream broke before its done event is not counted.
func (s *Service) follow(ctx context.Context, method, sandboxID string, commandID *string, stream grpc.ServerStreamingServer[sandboxv1.ExecuteEvent],
	run func(fn func(core.Event) error) error) error {
	var skipped int
	var first core.Event
	var language string // from the started event
	err := run(func(e core.Event) error {
		ev, ok := eventToProto(e, *commandID)
		if !ok {
			if skipped == 0 {
				first = e
			}
			skipped++
			return nil
		}
		if err := stream.Send(ev); err != nil {
			return err
		}
		s.observe(method, e, &language)
		return nil
	})
	if skipped > 0 {
		typ := first.Type
		if len(typ) > 64 {
			typ = typ[:64] + "…"
		}
		s.log.WarnContext(ctx, "skipped events of unknown type", "sandbox_id", sandboxID, "command_id", *commandID,
			"count", skipped, "first_seq", first.Seq, "first_type", validUTF8(typ))
	}
	return s.fail(ctx, method, err)
}

// observe reports a sent event to s.obs (see follow).
func (s *Service) observe(method string, e core.Event, language *string) {
	switch e.Type {
	case ioproto.EventStarted:
		*language = e.Language
	case ioproto.EventStdout, ioproto.EventStderr:
		s.obs.Streamed(e.Type, len(e.Text))
	case ioproto.EventDisplay, ioproto.EventResult:
		n := 0
		for _, v := range e.Data {
			n += len(v)
		}
		s.obs.Streamed(e.Type, n)
	case ioproto.EventDone:
		if method == "Execute" || method == "RunStateless" {
			s.obs.CommandDone(*language, e.Status, time.Duration(e.DurationMS)*time.Millisecond)
		}
	}
}

// InterruptCommand implements sandboxv1.SandboxServiceServer.
func (s *Service) InterruptCommand(ctx context.Context, req *sandboxv1.InterruptCommandRequest) (*sandboxv1.InterruptCommandResponse, error) {
	if err := required("sandbox ID", req.GetSandboxId()); err != nil {
		return nil, err
	}
	if err := required("command_id", req.GetCommandId()); err != nil {
		return nil, err
	}
	if err := s.m.Interrupt(ctx, req.GetSandboxId(), req.GetCommandId()); err != nil {
		return nil, s.fail(ctx, "InterruptCommand", err)
	}
	return &sandboxv1.InterruptCommandResponse{}, nil
}

// UploadFile implements sandboxv1.SandboxServiceServer.
func (s *Service) UploadFile(stream grpc.ClientStreamingServer[sandboxv1.UploadFileRequest, sandboxv1.UploadFileResponse]) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return invalid("empty upload: the first message must carry the header")
	}
	if err != nil {
		return s.fail(ctx, "UploadFile", err)
	}
	h := first.GetHeader()
	if h == nil {
		return invalid("the first message must carry the header (sandbox_id and path), not a chunk")
	}
	if err := required("sandbox ID", h.GetSandboxId()); err != nil {
		return err
	}
	if err := required("path", h.GetPath()); err != nil {
		return err
	}
	r := &uploadReader{recv: func() ([]byte, bool, error) {
		msg, err := stream.Recv()
		return msg.GetChunk(), msg.GetHeader() != nil, err
	}}
	info, err := s.m.Upload(ctx, h.GetSandboxId(), h.GetPath(), r)
	if r.err != nil {
		// The stream broke or the client misbehaved: that, not however the
		// domain wrapped the read error, is what the client must hear.
		return s.fail(ctx, "UploadFile", r.err)
	}
	if err != nil {
		return s.fail(ctx, "UploadFile", err)
	}
	return stream.SendAndClose(&sandboxv1.UploadFileResponse{File: fileInfoToProto(info)})
}

// uploadReader presents the chunks of an upload stream (UploadFile,
// UploadVolumeFile) as an io.Reader.
type uploadReader struct {
	// recv receives the stream's next message: its chunk, and whether it
	// carried a header instead.
	recv func() (chunk []byte, header bool, err error)
	buf  []byte
	// err is the first failure other than the clean end of the stream,
	// already a status error or a stream error for toStatus.
	err error
}

// Read implements io.Reader.
func (r *uploadReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	for len(r.buf) == 0 {
		chunk, header, err := r.recv()
		if errors.Is(err, io.EOF) {
			return 0, io.EOF
		}
		if err != nil {
			r.err = err
			return 0, err
		}
		if header {
			r.err = invalid("only the first message may carry a header")
			return 0, r.err
		}
		r.buf = chunk
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// DownloadFile implements sandboxv1.SandboxServiceServer.
func (s *Service) DownloadFile(req *sandboxv1.DownloadFileRequest, stream grpc.ServerStreamingServer[sandboxv1.DownloadFileResponse]) error {
	ctx := stream.Context()
	if err := required("sandbox ID", req.GetSandboxId()); err != nil {
		return err
	}
	if err := required("path", req.GetPath()); err != nil {
		return err
	}
	rc, info, err := s.m.Download(ctx, req.GetSandboxId(), req.GetPath())
	if err != nil {
		return s.fail(ctx, "DownloadFile", err)
	}
	defer rc.Close()
	return s.sendChunks(ctx, "DownloadFile", req.GetPath(), rc, func(first bool, chunk []byte) error {
		msg := &sandboxv1.DownloadFileResponse{Chunk: chunk}
		if first {
			msg.File = fileInfoToProto(info)
		}
		return stream.Send(msg)
	})
}

// sendChunks sends a download's content in messages of at most
// downloadChunk bytes, the first one always (it carries the file's
// metadata, possibly with no content), for method; path names the file in
// a read error.
func (s *Service) sendChunks(ctx context.Context, method, path string, rc io.Reader, send func(first bool, chunk []byte) error) error {
	buf := make([]byte, downloadChunk)
	first := true
	for {
		n, rerr := io.ReadFull(rc, buf)
		if n > 0 || first {
			if err := send(first, buf[:n]); err != nil {
				return s.fail(ctx, method, err)
			}
			first = false
		}
		switch {
		case rerr == nil:
		case errors.Is(rerr, io.EOF), errors.Is(rerr, io.ErrUnexpectedEOF):
			return nil
		default:
			return s.fail(ctx, method, fmt.Errorf("reading %s: %w", path, rerr))
		}
	}
}

// ListFiles implements sandboxv1.SandboxServiceServer.
func (s *Service) ListFiles(ctx context.Context, req *sandboxv1.ListFilesRequest) (*sandboxv1.ListFilesResponse, error) {
	if err := required("sandbox ID", req.GetSandboxId()); err != nil {
		return nil, err
	}
	if d := req.GetDepth(); d < 0 || d > 1 {
		return s.listFilesDepth(ctx, req)
	}
	files, err := s.m.ListFiles(ctx, req.GetSandboxId(), req.GetPath())
	if err != nil {
		return nil, s.fail(ctx, "ListFiles", err)
	}
	return &sandboxv1.ListFilesResponse{Files: filesToProto(files)}, nil
}

// listFilesDepth is ListFiles with a depth other than 0 and 1 (the domain
// checks its range).
func (s *Service) listFilesDepth(ctx context.Context, req *sandboxv1.ListFilesRequest) (*sandboxv1.ListFilesResponse, error) {
	files, err := s.m.ListFilesDepth(ctx, req.GetSandboxId(), req.GetPath(), int(req.GetDepth()))
	if err != nil {
		return nil, s.fail(ctx, "ListFiles", err)
	}
	return &sandboxv1.ListFilesResponse{Files: filesToProto(files)}, nil
}

// MakeDirectory implements sandboxv1.SandboxServiceServer.
func (s *Service) MakeDirectory(ctx context.Context, req *sandboxv1.MakeDirectoryRequest) (*sandboxv1.MakeDirectoryResponse, error) {
	if err := required("sandbox ID", req.GetSandboxId()); err != nil {
		return nil, err
	}
	if err := required("path", req.GetPath()); err != nil {
		return nil, err
	}
	info, err := s.m.MakeDirectory(ctx, req.GetSandboxId(), req.GetPath(), req.GetParents())
	if err != nil {
		return nil, s.fail(ctx, "MakeDirectory", err)
	}
	return &sandboxv1.MakeDirectoryResponse{File: fileInfoToProto(info)}, nil
}

// Remove implements sandboxv1.SandboxServiceServer.
func (s *Service) Remove(ctx context.Context, req *sandboxv1.RemoveRequest) (*sandboxv1.RemoveResponse, error) {
	if err := required("sandbox ID", req.GetSandboxId()); err != nil {
		return nil, err
	}
	if err := required("path", req.GetPath()); err != nil {
		return nil, err
	}
	if err := s.m.Remove(ctx, req.GetSandboxId(), req.GetPath(), req.GetRecursive()); err != nil {
		return nil, s.fail(ctx, "Remove", err)
	}
	return &sandboxv1.RemoveResponse{}, nil
}

// Rename implements sandboxv1.SandboxServiceServer.
func (s *Service) Rename(ctx context.Context, req *sandboxv1.RenameRequest) (*sandboxv1.RenameResponse, error) {
	if err := required("sandbox ID", req.GetSandboxId()); err != nil {
		return nil, err
	}
	if err := required("from", req.GetFrom()); err != nil {
		return nil, err
	}
	if err := required("to", req.GetTo()); err != nil {
		return nil, err
	}
	info, err := s.m.Rename(ctx, req.GetSandboxId(), req.GetFrom(), req.GetTo(), req.GetOverwrite())
	if err != nil {
		return nil, s.fail(ctx, "Rename", err)
	}
	return &sandboxv1.RenameResponse{File: fileInfoToProto(info)}, nil
}

// WatchDirectory implements sandboxv1.SandboxServiceServer.
func (s *Service) WatchDirectory(req *sandboxv1.WatchDirectoryRequest, stream grpc.ServerStreamingServer[sandboxv1.WatchDirectoryResponse]) error {
	ctx := stream.Context()
	if err := required("sandbox ID", req.GetSandboxId()); err != nil {
		return err
	}
	err := s.m.WatchDirectory(ctx, req.GetSandboxId(), req.GetPath(), req.GetRecursive(), func(u core.WatchUpdate) error {
		return stream.Send(watchUpdateToProto(u))
	})
	if err == nil {
		return nil
	}
	return s.fail(ctx, "WatchDirectory", err)
}
