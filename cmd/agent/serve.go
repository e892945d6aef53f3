package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/sandboxd/sandboxd/agent/web"
)

func runServe(ctx context.Context, cfg config, logger *slog.Logger, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	a, err := assemble(cfg, logger)
	if err != nil {
		fmt.Fprintf(stderr, "agent serve: %v\n", err)
		return exitFailure
	}
	defer a.close()
	ws, err := web.New(web.Options{Agent: a.agent, PlotlyJS: cfg.plotlyJS, Logger: logger, Metrics: a.sandboxd})
	if err != nil {
		fmt.Fprintf(stderr, "agent serve: %v\n", err)
		return exitFailure
	}
	// Conversations a crash interrupted continue before anyone asks.
	n, err := a.agent.ResumeAll(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "agent serve: resuming interrupted conversations: %v\n", err)
		return exitFailure
	}
	if n > 0 {
		logger.Info("resumed interrupted conversations", "count", n)
	}
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		fmt.Fprintf(stderr, "agent serve: %v\n", err)
		return exitFailure
	}
	srv := ws.HTTPServer()
	srv.RegisterOnShutdown(ws.Shutdown)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ws.LimitListener(ln)) }()
	logger.Info("serving", "url", "http://"+ln.Addr().String(), "state_dir", cfg.stateDir, "sandboxd", cfg.sandboxdAddr)

	select {
	case err := <-errc:
		fmt.Fprintf(stderr, "agent serve: %v\n", err)
		return exitFailure
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		logger.Warn("shutdown", "err", err)
	}
	return exitOK
}
