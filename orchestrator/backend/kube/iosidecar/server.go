// Package iosidecar is the io sidecar of the Kubernetes backend: a gRPC
// server (sandboxio.v1, proto/sandboxio/v1) that runs in its own container
// of a sandbox Pod and does there what sandboxd does on the host with the
// Docker backend — the host half of the /io protocol (through
// orchestrator/iolog, the same code) and the files API on /workspace
// (through orchestrator/wspath, the same path rules) — and the client
// sandboxd uses to reach it (Client).
//
// The sidecar runs as root with CHOWN, DAC_OVERRIDE and FOWNER, beside a
// sandbox container that owns io/out and /workspace and is hostile by
// assumption: iolog's bounded, os.Root-confined reads protect the sidecar
// from what the sandbox writes, and the Client protects sandboxd from what
// the sidecar answers (bounded messages, events re-parsed, error texts
// truncated).
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
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/iolog"
	"github.com/sandboxd/sandboxd/orchestrator/wspath"
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
	// prunedCheckDelay, defaultRecheck: as in orchestrator/follow.go, a
	// follower re-checks its events file every second in case a
	// notification was lost, the first time after 50 ms (when it also asks
	// whether the output was pruned).
	prunedCheckDelay = 50 * time.Millisecond
	defaultRecheck   = time.Second
)

// Error messages of NOT_FOUND on Follow start with one of these, so the
// client tells pruned output from an unknown command without guessing
// from a command ID that may contain any word.
const (
	msgUnknownCommand = "unknown command: "
	msgPruned         = "pruned: "
)

// Config configures a Server.
type Config struct {
	// IODir is the sandbox's /io directory, Workspace its /workspace.
	IODir, Workspace string
	// Token is the shared secret every call but health checks must carry
	// ("authorization: Bearer <token>"); at least MinTokenLen bytes.
	Token string
	// MaxUploadBytes caps one upload; 0 means DefaultMaxUploadBytes.
	MaxUploadBytes int64
	// Logger receives the server's log; nil discards it.
	Logger *slog.Logger
	// Recheck is how often a follower re-reads its events file without a
	// notification; 0 means one second. Tests shorten it.
	Recheck time.Duration
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
	if cfg.Recheck <= 0 {
		cfg.Recheck = defaultRecheck
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
	watch, err := iolog.NewWatcher(log)
	if err != nil {
		return nil, fmt.Errorf("start the file watcher: %w", err)
	}
	s := &Server{
		cfg:      cfg,
		log:      log,
		dir:      iolog.New(cfg.IODir),
		watch:    watch,
		health:   health.NewServer(),
		tokenSum: sha256.Sum256([]byte(cfg.Token)),
		closing:  make(chan struct{}),
	}
	s.grpc = grpc.NewServer(
		grpc.MaxRecvMsgSize(MaxRecvMsgSize),
		grpc.MaxSendMsgSize(MaxSendMsgSize),
		grpc.ChainUnaryInterceptor(s.authUnary),
		grpc.ChainStreamInterceptor(s.authStream),
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
	})
}

// PrepareLayout creates what the /io protocol needs in ioDir, as sandboxd
// does for a new sandbox (orchestrator/store.go): ioDir and out/ owned by
// the sandbox user (out/ mode 0755), and an empty command log (stdin)
// owned by the caller, mode 0644, made with O_EXCL. It is idempotent: what
// exists is kept (a restarted sidecar container must keep the log of the
// Pod's life), and the directories are given to the sandbox user again.
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

func (s *Server) authUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := s.authorized(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (s *Server) authStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := s.authorized(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}

// Append appends one record to the command log, once (iolog.Dir.Append).
func (s *Server) Append(ctx context.Context, req *sandboxiov1.AppendRequest) (*sandboxiov1.AppendResponse, error) {
	rec, _, err := ioproto.ParseRecord(req.GetRecord())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	appended, err := s.dir.AppendContext(ctx, rec, nil)
	switch {
	case err == nil:
		if appended {
			s.log.Debug("record appended", "type", rec.Type, "command_id", rec.CommandID)
		}
		return &sandboxiov1.AppendResponse{Appended: appended}, nil
	case errors.Is(err, iolog.ErrConflict):
		return nil, status.Errorf(codes.AlreadyExists, "command ID %s is already used for a different command", rec.CommandID)
	case errors.Is(err, iolog.ErrUnknownCommand):
		return nil, status.Errorf(codes.NotFound, "%scommand %s is not in the command log", msgUnknownCommand, rec.CommandID)
	case errors.Is(err, iolog.ErrLogFull):
		return nil, status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, ioproto.ErrMalformed):
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return nil, s.logError(err)
}

// logError classifies a failure to read or append the command log, as
// orchestrator's logError does: a log that is missing or was replaced makes
// the sandbox unusable.
func (s *Server) logError(err error) error {
	switch {
	case errors.Is(err, iolog.ErrTampered) || errors.Is(err, fs.ErrNotExist):
		s.log.Error("command log tampered with", "error", err)
		return status.Errorf(codes.FailedPrecondition, "the command log was altered from inside the sandbox: %v", err)
	case errors.Is(err, iolog.ErrClosed):
		return status.Error(codes.Unavailable, "the io sidecar is shutting down")
	}
	return ctxOr(err)
}

// ctxOr turns a context's end into its status, anything else into INTERNAL.
func ctxOr(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.Internal, err.Error())
}

// Follow streams a command's events after after_seq until its done event,
// as orchestrator's follow does: it wakes on inotify events for io/out and
// re-checks every Recheck, and reports pruned output as NOT_FOUND.
func (s *Server) Follow(req *sandboxiov1.FollowRequest, stream grpc.ServerStreamingServer[sandboxiov1.FollowResponse]) error {
	ctx := stream.Context()
	cmd := req.GetCommandId()
	if err := ioproto.ValidateCommandID(cmd); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	evs, err := s.dir.EventsContext(ctx, cmd, req.GetAfterSeq(), s.log)
	switch {
	case errors.Is(err, iolog.ErrUnknownCommand):
		return status.Errorf(codes.NotFound, "%scommand %s is not in the command log", msgUnknownCommand, cmd)
	case err != nil:
		return s.logError(err)
	}
	defer evs.Close()
	// Subscribe before the first read: a write between the read and the
	// wait then still wakes us.
	sub := s.watch.Subscribe(s.dir, cmd)
	defer sub.Cancel()

	send := func(ev ioproto.Event) error {
		b, err := json.Marshal(ev)
		if err != nil {
			return status.Errorf(codes.Internal, "encode event %d: %v", ev.Seq, err)
		}
		return stream.Send(&sandboxiov1.FollowResponse{Event: b})
	}
	tick := time.NewTicker(min(prunedCheckDelay, s.cfg.Recheck))
	defer tick.Stop()
	recheck := false
	for {
		done, err := evs.Drain(send)
		if done {
			return nil
		}
		if err != nil {
			if errors.Is(err, iolog.ErrTampered) {
				return status.Errorf(codes.FailedPrecondition, "the events file of command %s was altered from inside the sandbox; its output cannot be read: %v", cmd, err)
			}
			return s.logError(err)
		}
		// A missing events file means that the command has not started yet
		// or that its output was pruned; only the re-checks tell them apart.
		if recheck && evs.Pruned() {
			return status.Errorf(codes.NotFound, "%sthe output of command %s is no longer available", msgPruned, cmd)
		}
		recheck = false
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-s.closing:
			return status.Error(codes.Unavailable, "the io sidecar is shutting down; follow again")
		case <-sub.C:
		case <-tick.C:
			tick.Reset(s.cfg.Recheck)
			recheck = true
		}
	}
}

// Status returns the driver's status file, read through iolog's bounded
// read and encoded again: what the sidecar sends is what it checked.
func (s *Server) Status(ctx context.Context, _ *sandboxiov1.StatusRequest) (*sandboxiov1.StatusResponse, error) {
	ds, _, err := s.dir.ReadDriverStatus()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &sandboxiov1.StatusResponse{}, nil
	case errors.Is(err, iolog.ErrTampered):
		return nil, status.Errorf(codes.FailedPrecondition, "the driver status file was altered from inside the sandbox: %v", err)
	case err != nil:
		return nil, status.Errorf(codes.FailedPrecondition, "cannot read the driver status: %v", err)
	}
	b, err := json.Marshal(ds)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &sandboxiov1.StatusResponse{DriverStatus: b}, nil
}
