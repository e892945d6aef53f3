package grpcapi

import (
	"context"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// MaxSendMsgSize bounds one message the server sends. Rich outputs are sent
// inline in an ExecuteEvent, and a large plot is several MiB of base64, well
// above gRPC's 4 MiB default. Clients must raise their receive limit to match.
const MaxSendMsgSize = 64 << 20

// Server is sandboxd's gRPC server: the SandboxService, the standard health
// service and server reflection, behind logging and panic recovery. The
// embedded *grpc.Server provides Serve, GracefulStop and Stop.
type Server struct {
	*grpc.Server
	health *health.Server
}

// NewServer builds the server over m. Health reports NOT_SERVING until
// SetServing(true): sandboxd calls it once the Manager has reattached every
// sandbox, so load balancers and probes never route to a half-started
// server. Extra options (TLS credentials, say) are appended to the defaults.
// A nil logger discards.
func NewServer(m Manager, logger *slog.Logger, opts ...grpc.ServerOption) *Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}

	// One line per finished call with its code and duration. Health checks
	// are left out: probes call them every few seconds and would drown the
	// log.
	logOpts := []logging.Option{logging.WithLogOnEvents(logging.FinishCall)}
	notHealth := selector.MatchFunc(func(_ context.Context, c interceptors.CallMeta) bool {
		return c.Service != healthpb.Health_ServiceDesc.ServiceName
	})
	// Recovery is innermost (last) so a panic becomes an Internal status that
	// the logging interceptor then reports like any other failure.
	recOpts := []recovery.Option{recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		logger.ErrorContext(ctx, "panic in gRPC handler", "panic", p, "stack", string(debug.Stack()))
		return status.Error(codes.Internal, internalMessage)
	})}

	all := append([]grpc.ServerOption{
		grpc.ChainUnaryInterceptor(
			selector.UnaryServerInterceptor(logging.UnaryServerInterceptor(interceptorLogger(logger), logOpts...), notHealth),
			recovery.UnaryServerInterceptor(recOpts...),
		),
		grpc.ChainStreamInterceptor(
			selector.StreamServerInterceptor(logging.StreamServerInterceptor(interceptorLogger(logger), logOpts...), notHealth),
			recovery.StreamServerInterceptor(recOpts...),
		),
		grpc.MaxSendMsgSize(MaxSendMsgSize),
		// Execute streams can be quiet for minutes while code runs; allow
		// clients to keep such connections alive through NATs and proxies
		// with pings, without being cut off as abusive.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             10 * time.Second,
			PermitWithoutStream: true,
		}),
	}, opts...)

	gs := grpc.NewServer(all...)
	sandboxv1.RegisterSandboxServiceServer(gs, NewService(m, logger))

	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)

	s := &Server{Server: gs, health: hs}
	s.SetServing(false)
	return s
}

// SetServing sets the health status of the server as a whole ("") and of
// sandbox.v1.SandboxService. sandboxd sets false first thing on shutdown, so
// balancers drain before connections close.
func (s *Server) SetServing(serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(sandboxv1.SandboxService_ServiceDesc.ServiceName, st)
}

// interceptorLogger adapts slog to go-grpc-middleware's logging interface
// (the adapter from the library's examples).
func interceptorLogger(l *slog.Logger) logging.Logger {
	return logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		l.Log(ctx, slog.Level(lvl), msg, fields...)
	})
}
