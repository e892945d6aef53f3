package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sandboxd/sandboxd/internal/httpguard"
)

// newMetricsRegistry is sandboxd's own registry (not Prometheus' global
// one): the Go runtime's and the process's series, plus what sandboxd adds.
func newMetricsRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// maxMetricsConns bounds the connections of the metrics listener (at most
// half the descriptor limit): scrapers are few.
const maxMetricsConns = 64

// serveMetrics serves reg at /metrics on lis until the returned function is
// called, which stops it. Nothing there reads a request body: one declared
// is refused, one sent is never waited for (httpguard: the answer closes
// the connection).
func serveMetrics(lis net.Listener, reg *prometheus.Registry, log *slog.Logger) (stop func()) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		Registry:          reg, // promhttp_metric_handler_errors_total
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelError),
		EnableOpenMetrics: true,
	}))
	guard := httpguard.New(httpguard.Limits{}, log)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w, body := guard.Start(w, r)
			defer body.End()
			// Nothing here takes a body: one declared is refused (413)
			// before 100 Continue; one chunked is not read, and the
			// guard sends the answer before it drains the body.
			if httpguard.TooLarge(w, httpguard.LimitBody(w, r, 0)) {
				return
			}
			mux.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(httpguard.LimitListener(lis, httpguard.ConnLimit(maxMetricsConns))); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server failed", "error", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}
}

// newTracerProvider exports spans in batches over OTLP/HTTP to endpoint
// (a URL; without a path, the standard /v1/traces).
func newTracerProvider(ctx context.Context, endpoint string) (*sdktrace.TracerProvider, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, err
	}
	if strings.Trim(u.Path, "/") == "" {
		u.Path = "/v1/traces"
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(u.String()))
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", "sandboxd")))
	if err != nil {
		return nil, err
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}
