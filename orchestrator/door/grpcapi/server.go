package grpcapi

import (
	"context"
	"log/slog"
	"runtime/debug"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/door/tokens"
	"github.com/sandboxd/sandboxd/orchestrator/metrics"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// Server is sandboxd's gRPC server: the SandboxService, the standard health
// service and server reflection, behind logging, authentication and panic
// recovery. The embedded *grpc.Server provides Serve, GracefulStop and Stop.
type Server struct {
	*grpc.Server
	health *health.Server
}

// Option configures NewServer.
type Option func(*serverOptions)

type serverOptions struct {
	tokens  *tokens.Set
	grpc    []grpc.ServerOption
	metrics *metrics.Metrics
	tracer  trace.TracerProvider
	audit   AuditReader
}

// WithTokens makes every call except health checks require one of tokens
// as a bearer token, and act as the token's tenant and role. Without it
// every call acts as core.DefaultCaller (the implicit tenant, with
// admin rights).
func WithTokens(t *tokens.Set) Option {
	return func(o *serverOptions) { o.tokens = t }
}

// WithMetrics records the gRPC server's metrics (go-grpc-middleware's
// Prometheus provider: calls started and handled by method and code,
// messages, handling-time histograms) on m's registry, and reports the
// commands and bytes the streams deliver to m.
func WithMetrics(m *metrics.Metrics) Option {
	return func(o *serverOptions) { o.metrics = m }
}

// WithTracerProvider traces every call but health checks with tp
// (OpenTelemetry's gRPC stats handler: a server span per call, a child of
// the caller's span when the call carries a W3C traceparent). Without it
// nothing is traced and nothing is added to calls.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *serverOptions) { o.tracer = tp }
}

// WithGRPCOptions appends options (TLS credentials, say) to the defaults.
func WithGRPCOptions(opts ...grpc.ServerOption) Option {
	return func(o *serverOptions) { o.grpc = append(o.grpc, opts...) }
}

// NewServer builds the server over m. Health reports NOT_SERVING until
// SetServing(true): sandboxd calls it once the Manager has reattached every
// sandbox, so load balancers and probes never route to a half-started
// server. A nil logger discards.
//
// Interceptors run in the order of go-grpc-middleware's examples: metrics
// (with WithMetrics; outermost, so every call is counted and timed), logging
// (so refused and failed calls are logged too), authentication, recovery
// (innermost). Tracing (WithTracerProvider) is a stats handler, around them
// all. Only the health service is open without a token:
// probes carry none, and it reveals nothing but "serving". Reflection needs
// a token like the API does (grpcurl sends -H headers with its reflection
// calls too); the schema is no secret, but nothing is served to strangers.
func NewServer(m core.Manager, logger *slog.Logger, opts ...Option) *Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var o serverOptions
	for _, opt := range opts {
		opt(&o)
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

	authFn := authenticate(o.tokens)
	// The codec's refusals come first: a request it did not build is
	// answered before anything looks at it (codec.go).
	codec := newBoundedCodec()
	unary := []grpc.UnaryServerInterceptor{
		codec.unary,
		selector.UnaryServerInterceptor(logging.UnaryServerInterceptor(interceptorLogger(logger), logOpts...), notHealth),
		selector.UnaryServerInterceptor(auth.UnaryServerInterceptor(authFn), notHealth),
		recovery.UnaryServerInterceptor(recOpts...),
	}
	stream := []grpc.StreamServerInterceptor{
		codec.stream,
		selector.StreamServerInterceptor(logging.StreamServerInterceptor(interceptorLogger(logger), logOpts...), notHealth),
		selector.StreamServerInterceptor(auth.StreamServerInterceptor(authFn), notHealth),
		recovery.StreamServerInterceptor(recOpts...),
	}
	var srvMetrics *grpcprom.ServerMetrics
	if o.metrics != nil {
		// Metrics go first (outermost), as in go-grpc-middleware's
		// examples: they then count every call, health checks and calls
		// refused by authentication included, with the code the client
		// got (Unauthenticated, or Internal from a recovered panic), and
		// time the whole of the handling.
		srvMetrics = grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(
			grpcprom.WithHistogramBuckets([]float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}),
		))
		o.metrics.Registerer().MustRegister(srvMetrics)
		unary = append([]grpc.UnaryServerInterceptor{srvMetrics.UnaryServerInterceptor()}, unary...)
		stream = append([]grpc.StreamServerInterceptor{srvMetrics.StreamServerInterceptor()}, stream...)
	}
	var base []grpc.ServerOption
	if o.tracer != nil {
		// A stats handler, not an interceptor: it sees the call before any
		// interceptor, so the span covers all of them and carries the
		// caller's trace context (W3C traceparent) into the handler's ctx.
		base = append(base, grpc.StatsHandler(otelgrpc.NewServerHandler(
			otelgrpc.WithTracerProvider(o.tracer),
			// Metrics are Prometheus' (WithMetrics); the handler's own
			// OpenTelemetry metrics are not recorded.
			otelgrpc.WithMeterProvider(noop.NewMeterProvider()),
			otelgrpc.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})),
			otelgrpc.WithFilter(filters.Not(filters.ServiceName(healthpb.Health_ServiceDesc.ServiceName))),
		)))
	}
	all := append(base,
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
		grpc.MaxSendMsgSize(sandboxv1.MaxMessageSize),
		grpc.ForceServerCodecV2(codec),
		// gRPC's default is no bound on the streams of one connection;
		// each is a request being decoded, or a stream holding one of
		// sandboxd's places (core.Policy's stream caps). More wait for a
		// free one (HTTP/2 flow control), never fail.
		grpc.MaxConcurrentStreams(maxConcurrentStreams),
		// Execute streams can be quiet for minutes while code runs; allow
		// clients to keep such connections alive through NATs and proxies
		// with pings, without being cut off as abusive.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             10 * time.Second,
			PermitWithoutStream: true,
		}),
	)
	all = append(all, o.grpc...)

	gs := grpc.NewServer(all...)
	svc := NewService(m, logger)
	if o.metrics != nil {
		svc.obs = o.metrics
	}
	svc.audit = o.audit
	sandboxv1.RegisterSandboxServiceServer(gs, svc)

	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	if srvMetrics != nil {
		// Zero series for every method, so rates exist before first use.
		srvMetrics.InitializeMetrics(gs)
	}

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
