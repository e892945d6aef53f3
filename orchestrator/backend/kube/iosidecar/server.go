// Package iosidecar is the io sidecar of the Kubernetes backend: a gRPC
// server (sandboxio.v1, proto/sandboxio/v1) that runs in its own container
// of a sandbox Pod and does there what sandboxd does on the host with the
// Docker backend — the host half of the /io protocol (through
// orchestrator/backend/hostio/iolog, the same code, follow loop included) and the files
// API on /workspace (through orchestrator/backend/hostio/wspath, the same code) — and the
// client sandboxd uses to reach it (Client).
//
// The sidecar runs as root with CHOWN, DAC_OVERRIDE and FOWNER, beside a
// sandbox container that owns io/out and /workspace and is hostile by
// assumption: iolog's bounded, os.Root-confined reads protect the sidecar
// from what the sandbox writes, and the Client protects sandboxd from what
// the sidecar answers (bounded messages, events re-parsed, error texts
// truncated, reasons believed only from the table: errors.go).
//
// # Where requests are checked
//
// Each request is checked once per trust boundary it crosses:
//   - in sandboxd, by core.Validating, in front of the Kubernetes backend:
//     the sandbox and command IDs, the paths (core.CleanPath), the
//     command's fields. The kube Manager and the Client add no check of
//     their own (the Client encodes a record with ioproto.EncodeRecord, the
//     protocol's one encoder, which cannot write a malformed one);
//   - in the sidecar, by the Server, on what it receives: the command ID
//     (ioproto.ValidateCommandID), the record (ioproto.ParseRecord), the
//     path (core.CleanPath). Only the token's holder, sandboxd, can call
//     it; the Server checks all the same, as defence in depth: it shares
//     its Pod's network with the sandbox, and a check it skipped would be
//     a path into the host half of /io.
//
// What crosses back is checked by the Client: the sidecar may have been
// replaced by the sandboxed code.
package iosidecar

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/cmdlog"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/iolog"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/wsarchive"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/wspath"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	sandboxiov1 "github.com/sandboxd/sandboxd/proto/sandboxio/v1"
)

// Bounds of the sidecar's messages.
const (
	// MaxRecvMsgSize bounds what the server accepts in one message: an
	// Append's record (at most ioproto.MaxRecordLen: 1 MiB of code can
	// take six times that as JSON) or an upload chunk, plus room for the
	// envelope.
	MaxRecvMsgSize = ioproto.MaxRecordLen + 64<<10
	// MaxSendMsgSize bounds one message either way it is sent: an event
	// carries up to 40 MiB of artifacts read back (base64 included, see
	// iolog), a listing up to wspath.MaxListEntries paths.
	MaxSendMsgSize = 64 << 20
	// DefaultMaxUploadBytes is the server's own cap on an upload, whatever
	// the header asks: above sandboxd's default (--max-upload, 256 MiB).
	DefaultMaxUploadBytes = 1 << 30
	// downloadChunk is the size of a Download's messages.
	downloadChunk = 1 << 20
	// MinTokenLen is the shortest shared token the server accepts.
	MinTokenLen = 16
)

// Config configures a Server.
type Config struct {
	// IODir is the sandbox's /io directory, Workspace its /workspace.
	IODir, Workspace string
	// Volumes is where the Pod's named volumes are mounted, each at
	// Volumes/<volume ID> (the files calls' volume field); "" when the
	// sidecar serves none. New gives a volume's root to the sandbox user
	// the first time it is served (while root, the provisioner, owns it).
	Volumes string
	// Token is the shared secret every call but health checks must carry
	// ("authorization: Bearer <token>"); at least MinTokenLen bytes.
	Token string
	// MaxUploadBytes caps one upload; 0 means DefaultMaxUploadBytes.
	MaxUploadBytes int64
	// MaxArchiveBytes bounds an Export's or Import's content when the
	// request leaves it to the sidecar (max_bytes 0); 0 means
	// wsarchive.DefaultMaxBytes.
	MaxArchiveBytes int64
	// Logger receives the server's log; nil discards it.
	Logger *slog.Logger
	// Recheck is how often a follower re-reads its events file without a
	// notification; 0 means iolog.DefaultRecheck. Tests shorten it.
	Recheck time.Duration
	// Egress, when set, runs the Pod's egress gateway (egress.go): the
	// sidecar of a networked sandbox. Nil: SetEgress and EgressStatus
	// answer EGRESS_OFF.
	Egress *EgressConfig
}

// Server is one sandbox's io sidecar.
type Server struct {
	sandboxiov1.UnimplementedIOServiceServer
	cfg    Config
	log    *slog.Logger
	dir    *iolog.Dir
	watch  *iolog.Watcher
	grpc   *grpc.Server
	health *health.Server
	// tokenSum is the SHA-256 of the token: comparing digests in constant
	// time does not leak the token's length either.
	tokenSum [32]byte

	egress    *egressState  // nil without Config.Egress
	watches   atomic.Int32  // WatchDirectory calls in progress
	closing   chan struct{} // closed by Stop: followers end
	closeOnce sync.Once
}

// New prepares the /io layout (PrepareLayout), gives the workspace's root
// to the sandbox user, and returns a server ready
// to Serve, its health SERVING: the layout exists before the port opens,
// so that "port open" means "layout ready".
func New(cfg Config) (*Server, error) {
	if len(cfg.Token) < MinTokenLen {
		return nil, fmt.Errorf("the token is %d bytes long; at least %d are needed", len(cfg.Token), MinTokenLen)
	}
	if cfg.IODir == "" || cfg.Workspace == "" {
		return nil, errors.New("the io and workspace directories are required")
	}
	if cfg.MaxUploadBytes <= 0 {
		cfg.MaxUploadBytes = DefaultMaxUploadBytes
	}
	if cfg.MaxArchiveBytes <= 0 {
		cfg.MaxArchiveBytes = wsarchive.DefaultMaxBytes
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := PrepareLayout(cfg.IODir); err != nil {
		return nil, fmt.Errorf("prepare %s: %w", cfg.IODir, err)
	}
	if err := chownDir(cfg.Workspace); err != nil {
		return nil, fmt.Errorf("prepare %s: %w", cfg.Workspace, err)
	}
	if err := prepareVolumes(cfg.Volumes, log); err != nil {
		return nil, err
	}
	var eg *egressState
	if cfg.Egress != nil {
		var err error
		if eg, err = newEgress(*cfg.Egress, cfg.Token, log); err != nil {
			return nil, err
		}
	}
	watch, err := iolog.NewWatcher(log)
	if err != nil {
		if eg != nil {
			eg.close()
		}
		return nil, fmt.Errorf("start the file watcher: %w", err)
	}
	dir := iolog.New(cfg.IODir)
	// A Pod's hibernation spans it and the Pod that wakes it, and any
	// replica may send a command meanwhile: the log itself refuses them
	// (HIBERNATING) from the snapshot record to the restore record.
	dir.SealWhileHibernating()
	s := &Server{
		cfg:      cfg,
		log:      log,
		dir:      dir,
		watch:    watch,
		health:   health.NewServer(),
		tokenSum: sha256.Sum256([]byte(cfg.Token)),
		closing:  make(chan struct{}),
		egress:   eg,
	}
	s.grpc = grpc.NewServer(
		grpc.MaxRecvMsgSize(MaxRecvMsgSize),
		grpc.MaxSendMsgSize(MaxSendMsgSize),
		grpc.ChainUnaryInterceptor(s.unary),
		grpc.ChainStreamInterceptor(s.stream),
	)
	sandboxiov1.RegisterIOServiceServer(s.grpc, s)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(sandboxiov1.IOService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	return s, nil
}

// GRPC is the underlying server, for Serve.
func (s *Server) GRPC() *grpc.Server { return s.grpc }

// Stop ends the server within grace: health turns NOT_SERVING, followers
// end with UNAVAILABLE (sandboxd follows again, from its last seq, once the
// sidecar is back), calls in progress get grace to finish, the rest are cut.
func (s *Server) Stop(grace time.Duration) {
	s.closeOnce.Do(func() {
		s.health.Shutdown()
		close(s.closing)
		done := make(chan struct{})
		go func() {
			s.grpc.GracefulStop()
			close(done)
		}()
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			s.grpc.Stop()
			<-done
		}
		s.dir.Close(grace)
		s.watch.Close()
		if s.egress != nil {
			s.egress.close()
		}
	})
}

// PrepareLayout creates what the /io protocol needs in ioDir, as sandboxd
// does for a new sandbox (orchestrator/backend/docker/store.go): ioDir and
// out/ owned by the sandbox user (out/ mode 0755), and an empty command
// log (stdin) owned by the caller, mode 0644, made with O_EXCL. It is
// idempotent: what exists is kept (a restarted sidecar container must keep
// the log of the Pod's life), and the directories are given to the sandbox
// user again.
func PrepareLayout(ioDir string) error {
	if err := chownDir(ioDir); err != nil {
		return err
	}
	out := filepath.Join(ioDir, ioproto.OutDir)
	if err := os.Mkdir(out, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := chownDir(out); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(ioDir, ioproto.StdinFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return nil // a restart: iolog checks the log when it loads it
	}
	if err != nil {
		return err
	}
	return f.Close()
}

// chownDir gives directory p to the sandbox user, as store.go's
// chownSandboxUser does: a volume's root (an emptyDir is root's, mode
// 0777; a fresh claim's file system root is root's, mode 0755) must be
// writable by the sandbox. A p that is not a directory (a symlink the
// sandbox planted as out/) is refused.
func chownDir(p string) error {
	st, err := os.Lstat(p)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory (%v)", p, st.Mode().Type())
	}
	if err := os.Lchown(p, wspath.UID, wspath.GID); err != nil && !(errors.Is(err, fs.ErrPermission) && os.Geteuid() == wspath.UID) {
		return fmt.Errorf("chown %s to the sandbox user %d:%d (the sidecar must run as root with CAP_CHOWN): %w", p, wspath.UID, wspath.GID, err)
	}
	return nil
}

// authorized checks the call's "authorization: Bearer <token>" metadata.
// Health checks need none: the kubelet and load balancers probe them.
func (s *Server) authorized(ctx context.Context, method string) error {
	if strings.HasPrefix(method, "/grpc.health.v1.Health/") {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) != 1 {
		return status.Error(codes.Unauthenticated, "missing authorization")
	}
	tok, ok := strings.CutPrefix(vals[0], "Bearer ")
	if !ok {
		return status.Error(codes.Unauthenticated, "authorization is not a bearer token")
	}
	sum := sha256.Sum256([]byte(tok))
	if subtle.ConstantTimeCompare(sum[:], s.tokenSum[:]) != 1 {
		return status.Error(codes.Unauthenticated, "wrong token")
	}
	return nil
}

// unary and stream check the token, then send a handler's error as the
// table says (statusOf): handlers return the domain's errors and iolog's
// (and a stream's own failure as it is), never a status of their own.
func (s *Server) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := s.authorized(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	resp, err := handler(ctx, req)
	if err != nil {
		return nil, statusOf(err)
	}
	return resp, nil
}

func (s *Server) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := s.authorized(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return statusOf(handler(srv, ss))
}

// Append appends one record to the command log, once (iolog.Dir.Append).
// Input (stdin, its close, a resize) is appended only to a command that
// takes it, and a command naming a context only while the context exists
// and runs its language, by cmdlog's rules, as the Docker backend appends
// them: the sidecar is the log's only writer, so the checks are made here,
// next to the log, and no caller can skip them.
func (s *Server) Append(ctx context.Context, req *sandboxiov1.AppendRequest) (*sandboxiov1.AppendResponse, error) {
	rec, _, err := ioproto.ParseRecord(req.GetRecord()) // the sidecar's own check (package doc)
	if err != nil {
		return nil, core.Invalidf("%v", err)
	}
	appended, err := s.append(ctx, rec)
	if err != nil {
		return nil, err
	}
	return &sandboxiov1.AppendResponse{Appended: appended}, nil
}

// append appends rec, checked by cmdlog's rules, and says what a refusal
// means (the table's reasons); Append and Run share it.
func (s *Server) append(ctx context.Context, rec ioproto.Record) (bool, error) {
	var appended bool
	var err error
	if cmdlog.IsInput(rec) {
		err = cmdlog.AppendInput(ctx, s.dir, rec, nil)
		appended = err == nil
	} else {
		appended, err = s.dir.AppendContext(ctx, rec, func() error { return cmdlog.CheckExecContext(s.dir, rec) })
	}
	switch {
	case errors.Is(err, cmdlog.ErrNoTerminal), errors.Is(err, cmdlog.ErrNoInput), errors.Is(err, cmdlog.ErrFinished),
		errors.Is(err, cmdlog.ErrUnknownContext), errors.Is(err, cmdlog.ErrContextLanguage), errors.Is(err, cmdlog.ErrContextsUnreadable),
		errors.Is(err, iolog.ErrHibernating):
		return false, err // the table's reasons (errors.go)
	case err == nil:
		if appended {
			s.log.Debug("record appended", "type", rec.Type, "command_id", rec.CommandID)
		}
		return appended, nil
	case errors.Is(err, iolog.ErrConflict):
		return false, reasonf(iolog.ErrConflict, "command ID %s is already used for a different command", rec.CommandID)
	case errors.Is(err, iolog.ErrUnknownCommand):
		return false, reasonf(iolog.ErrUnknownCommand, "command %s is not in the command log", rec.CommandID)
	case errors.Is(err, iolog.ErrLogFull):
		return false, err
	case errors.Is(err, ioproto.ErrMalformed):
		return false, core.Invalidf("%v", err)
	}
	return false, s.logError(err)
}

// logError says what a failure to read or append the command log means,
// as the Docker backend's logError does: a log that is missing or was
// replaced makes the sandbox unusable. The context's end and the
// sidecar's own failures are returned as they are.
func (s *Server) logError(err error) error {
	switch {
	case errors.Is(err, iolog.ErrTampered) || errors.Is(err, fs.ErrNotExist):
		s.log.Error("command log tampered with", "error", err)
		return reasonf(iolog.ErrTampered, "the command log was altered from inside the sandbox: %v", err)
	case errors.Is(err, iolog.ErrClosed):
		return core.Unavailablef("the io sidecar is shutting down")
	}
	return err
}

// Follow streams a command's events after after_seq until its done event:
// iolog's follow loop, as the Docker backend runs it on the host, ended by
// the sidecar's Stop.
func (s *Server) Follow(req *sandboxiov1.FollowRequest, stream grpc.ServerStreamingServer[sandboxiov1.FollowResponse]) error {
	cmd := req.GetCommandId()
	if err := ioproto.ValidateCommandID(cmd); err != nil { // the sidecar's own check (package doc)
		return core.Invalidf("%v", err)
	}
	return s.follow(stream.Context(), cmd, req.GetAfterSeq(), func(b []byte) error {
		return stream.Send(&sandboxiov1.FollowResponse{Event: b})
	})
}

// Run appends a command, then streams its events from the first: Append
// and Follow in one call (the proto's doc).
func (s *Server) Run(req *sandboxiov1.RunRequest, stream grpc.ServerStreamingServer[sandboxiov1.RunResponse]) error {
	rec, _, err := ioproto.ParseRecord(req.GetRecord()) // the sidecar's own check (package doc)
	if err != nil {
		return core.Invalidf("%v", err)
	}
	switch rec.Type {
	case ioproto.KindExec, ioproto.KindSnapshot, ioproto.KindRestore:
	default:
		return core.Invalidf("Run takes an exec, snapshot or restore record, not %q (send it with Append)", rec.Type)
	}
	appended, err := s.append(stream.Context(), rec)
	if err != nil {
		return err
	}
	if err := stream.Send(&sandboxiov1.RunResponse{Appended: appended}); err != nil {
		return err
	}
	return s.follow(stream.Context(), rec.CommandID, 0, func(b []byte) error {
		return stream.Send(&sandboxiov1.RunResponse{Event: b})
	})
}

// follow sends command cmd's events after afterSeq, each encoded as one
// JSON object, until its done event: iolog's follow loop, as the Docker
// backend runs it on the host, ended by the sidecar's Stop.
func (s *Server) follow(ctx context.Context, cmd string, afterSeq int64, sendJSON func([]byte) error) error {
	evs, err := s.dir.EventsContext(ctx, cmd, afterSeq, s.log)
	switch {
	case errors.Is(err, iolog.ErrUnknownCommand):
		return reasonf(iolog.ErrUnknownCommand, "command %s is not in the command log", cmd)
	case err != nil:
		return s.logError(err)
	}
	defer evs.Close()
	send := func(ev ioproto.Event) error {
		b, err := encodeEvent(ev, maxEventJSON, s.log)
		if err != nil {
			return err
		}
		return sendJSON(b)
	}
	err = evs.Follow(s.watch, iolog.FollowOptions{Recheck: s.cfg.Recheck, Stop: s.closing}, send)
	switch {
	case errors.Is(err, iolog.ErrTampered):
		return fmt.Errorf("the events file of command %s was altered from inside the sandbox; its output cannot be read: %w", cmd, err)
	case errors.Is(err, iolog.ErrPruned):
		return reasonf(iolog.ErrPruned, "the output of command %s is no longer available", cmd)
	case errors.Is(err, iolog.ErrStopped):
		return core.Unavailablef("the io sidecar is shutting down; follow again")
	}
	return s.logError(err) // nil, the stream's failure, the context's end, or the Dir closed
}

// Status returns the driver's status file, read through iolog's bounded
// read and encoded again: what the sidecar sends is what it checked.
func (s *Server) Status(ctx context.Context, _ *sandboxiov1.StatusRequest) (*sandboxiov1.StatusResponse, error) {
	ds, _, err := s.dir.ReadDriverStatus()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &sandboxiov1.StatusResponse{}, nil
	case errors.Is(err, iolog.ErrTampered):
		return nil, reasonf(iolog.ErrTampered, "the driver status file was altered from inside the sandbox: %v", err)
	case err != nil:
		return nil, reasonf(iolog.ErrTampered, "cannot read the driver status: %v", err)
	}
	b, err := json.Marshal(ds)
	if err != nil {
		return nil, err
	}
	return &sandboxiov1.StatusResponse{DriverStatus: b}, nil
}
