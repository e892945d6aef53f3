// Command sandboxd serves the sandboxd gRPC API (proto/sandbox/v1): per-user,
// long-lived code execution sandboxes in Docker containers.
//
// On start it reattaches to the sandboxes a previous run left behind (their
// containers keep running across restarts), then serves. With --auth-tokens
// every call needs a bearer token, which names the caller's tenant; without
// it sandboxd serves on loopback only, unless --insecure. On SIGINT or SIGTERM
// it reports NOT_SERVING, lets calls finish for --shutdown-timeout, and exits
// leaving the containers running for the next start. Flags can also be set
// through SANDBOXD_* environment variables; see sandboxd --help.
//
// Settings can also come from a TOML file (--config, SANDBOXD_CONFIG);
// `sandboxd config default` prints every key at its default, `sandboxd
// config check FILE` names every bad key and value of a file, and `sandboxd
// config doc` writes docs/configuration.md's reference (configcmd.go).
//
// `sandboxd egress cleanup [--instance NAME]` removes what a stopped
// sandboxd's egress networking left on the host (egress_cleanup.go).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sandboxd/sandboxd/orchestrator/audit"
	"github.com/sandboxd/sandboxd/orchestrator/backend/docker"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/door/grpcapi"
	"github.com/sandboxd/sandboxd/orchestrator/door/ports"
	"github.com/sandboxd/sandboxd/orchestrator/door/tokens"
	"github.com/sandboxd/sandboxd/orchestrator/metrics"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "egress":
		err = egressCommand(os.Args[2:], os.Stdout, os.Stderr, docker.CleanupEgress)
	case len(os.Args) > 1 && os.Args[1] == "config":
		err = configCommand(os.Args[2:], os.Getenv, os.Stdout, os.Stderr)
	default:
		err = run(ctx, stop, os.Args[1:], os.Getenv, os.Stderr)
	}
	stop()
	switch {
	case err == nil:
	case errors.Is(err, errHelp):
	default:
		fmt.Fprintf(os.Stderr, "sandboxd: %v\n", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// manager is what serve needs of the domain: the API's calls, and Close
// for shutdown.
type manager interface {
	core.Manager
	Close() error
}

// backend is a backend as sandboxd starts it: the capabilities it has
// (core.Complete answers the others), the policy it applies (which
// core.Validating enforces in front of it) and Close.
type backend interface {
	core.Backend
	Close() error
	Policy() core.Policy
}

// validated is a backend behind core.Validating and, unless --audit=false,
// the audit decorator in front of it: every door calls the domain through
// them, so every mutating call is recorded once whichever door made it,
// refused ones included. Close reaches the backend, then writes the audit
// records still queued and closes the log.
type validated struct {
	core.Manager
	b   backend
	log *audit.Log // nil: no audit trail
}

func newValidated(name string, b backend, log *audit.Log) validated {
	v := validated{Manager: core.Validating(core.Complete(name, b), b.Policy()), b: b, log: log}
	if log != nil {
		v.Manager = audit.Audited(v.Manager, log)
	}
	return v
}

func (v validated) Close() error {
	err := v.b.Close()
	if v.log != nil {
		if cerr := v.log.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("closing the audit log: %w", cerr))
		}
	}
	return err
}

// run starts sandboxd and blocks until ctx is done (a signal) or serving
// fails. stopSignals is called once shutdown begins, so a second Ctrl-C
// kills the process at once instead of waiting for the graceful stop.
func run(ctx context.Context, stopSignals func(), args []string, getenv func(string) string, stderr io.Writer) error {
	cfg, err := parseConfig(args, getenv, stderr)
	if err != nil {
		return err
	}
	log := newLogger(cfg, stderr)
	cfg.docker.Logger = log
	installTestHooks(&cfg, getenv, log) // none but in the test build (testhooks.go)

	var opts []grpcapi.Option
	var toks *tokens.Set
	if cfg.authTokens != "" {
		toks, err = tokens.Load(cfg.authTokens)
		if err != nil {
			return fmt.Errorf("--auth-tokens: %w", err)
		}
		if st, err := os.Stat(cfg.authTokens); err == nil && st.Mode().Perm()&0o077 != 0 {
			log.Warn("the token file is readable by other users; chmod 600 it", "file", cfg.authTokens, "mode", st.Mode().Perm())
		}
		opts = append(opts, grpcapi.WithTokens(toks))
		log.Info("authentication on", "tokens", toks.Len(), "tenants", toks.Tenants())
	}
	// The audit trail (orchestrator/audit), on unless --audit=false.
	var auditLog *audit.Log
	if cfg.audit.enabled {
		auditLog, err = audit.Open(audit.Config{Dir: filepath.Join(cfg.docker.StateDir, "audit"),
			MaxFileBytes: cfg.audit.maxFileBytes, MaxFiles: cfg.audit.maxFiles, Logger: log})
		if err != nil {
			return fmt.Errorf("--audit: %w", err)
		}
		opts = append(opts, grpcapi.WithAudit(auditLog))
		// Closed with the manager (validated.Close); this covers the
		// returns before there is one.
		defer auditLog.Close()
	}
	tenants := 1 // without tokens, every caller is the default tenant
	if toks != nil {
		tenants = toks.Tenants()
	}
	fitTenantCaps(&cfg.policy, tenants, log)
	cfg.ports.fitTenants(tenants)
	useTLS := cfg.tlsCert != ""
	if useTLS {
		creds, err := credentials.NewServerTLSFromFile(cfg.tlsCert, cfg.tlsKey)
		if err != nil {
			return fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		opts = append(opts, grpcapi.WithGRPCOptions(grpc.Creds(creds)))
	}

	// Metrics and traces (observe.go), when asked for.
	var met *metrics.Metrics
	var metricsLis net.Listener
	if cfg.metricsListen != "" {
		reg := newMetricsRegistry()
		met = metrics.New(reg)
		cfg.docker.Metrics = met
		opts = append(opts, grpcapi.WithMetrics(met))
		if metricsLis, err = net.Listen("tcp", cfg.metricsListen); err != nil {
			return fmt.Errorf("--metrics-listen: %w", err)
		}
		defer metricsLis.Close()
		defer serveMetrics(metricsLis, reg, log)()
		if ip := metricsLis.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
			log.Warn("serving metrics beyond loopback, without authentication; they name tenants", "metrics_listen", metricsLis.Addr().String())
		}
		log.Info("serving metrics", "metrics_listen", metricsLis.Addr().String())
	}
	// Lifecycle webhooks (orchestrator/webhooks), when a file names
	// endpoints: open before the backend, whose reconcile may publish.
	// Closed after the manager (deferred before serve closes it).
	if cfg.webhooks.file != "" {
		hooks, err := openWebhooks(cfg, log)
		if err != nil {
			return fmt.Errorf("--webhooks: %w", err)
		}
		defer hooks.Close()
		cfg.docker.Lifecycle = hooks
		if met != nil {
			met.WatchWebhooks(hooks)
		}
	}
	if cfg.otlpEndpoint != "" {
		tp, err := newTracerProvider(ctx, cfg.otlpEndpoint)
		if err != nil {
			return fmt.Errorf("--otlp-endpoint: %w", err)
		}
		defer func() {
			// Flush the last spans, but never hang the exit on a collector.
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tp.Shutdown(sctx); err != nil {
				log.Warn("flushing traces", "error", err)
			}
		}()
		opts = append(opts, grpcapi.WithTracerProvider(tp))
		log.Info("tracing on", "otlp_endpoint", cfg.otlpEndpoint)
	}

	// Listen before the (possibly slow) reattachment, so a taken port or a
	// typo in --listen fails at once.
	lis, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return err
	}
	defer lis.Close()
	// Judged on the address actually bound: ":50051" and "0.0.0.0:50051"
	// are every interface, and a host name may resolve anywhere.
	if ip := lis.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
		switch {
		case cfg.authTokens == "" && !cfg.insecure:
			return usageError{fmt.Errorf("refusing to serve on %s without authentication: anyone who can connect would control every sandbox; give --auth-tokens FILE, listen on loopback, or pass --insecure to accept the risk", lis.Addr())}
		case cfg.authTokens == "":
			log.Warn("serving beyond loopback WITHOUT authentication (--insecure)", "listen", lis.Addr().String())
		case !useTLS:
			log.Warn("serving tokens over plaintext beyond loopback; use --tls-cert/--tls-key unless the network is trusted", "listen", lis.Addr().String())
		}
	}

	// The E2B-compatible door (--e2b-listen), bound early for the same
	// reason; it serves once the manager is up.
	var e2bLis net.Listener
	if cfg.e2bListen != "" {
		if e2bLis, err = net.Listen("tcp", cfg.e2bListen); err != nil {
			return fmt.Errorf("--e2b-listen: %w", err)
		}
		defer e2bLis.Close()
		if ip := e2bLis.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() && cfg.authTokens == "" && !cfg.insecure {
			return usageError{fmt.Errorf("refusing to serve the E2B API on %s without authentication: give --auth-tokens FILE (its tokens are the API keys), listen on loopback, or pass --insecure", e2bLis.Addr())}
		}
	}

	// The ports front (--ports-listen), bound early too; its URLs and
	// tokens (core.PortsFront) are the backend's GetHost's.
	var portsLis net.Listener
	if cfg.ports.listen != "" {
		if portsLis, err = net.Listen("tcp", cfg.ports.listen); err != nil {
			return fmt.Errorf("--ports-listen: %w", err)
		}
		defer portsLis.Close()
		if cfg.docker.Ports, err = newPortsFront(cfg, portsLis, log); err != nil {
			return err
		}
	}

	log.Info("starting", "listen", lis.Addr().String(), "state_dir", cfg.docker.StateDir, "image", cfg.policy.Image,
		"runtime", cfg.policy.Runtime, "tls", useTLS, "auth", cfg.authTokens != "")
	var m validated
	if cfg.backend == backendKubernetes {
		km, err := newKubeManager(ctx, cfg, log)
		if err != nil {
			return fmt.Errorf("starting the kubernetes backend: %w", err)
		}
		if met != nil {
			met.Watch(km)              // sandboxes by state and the pool's size: the leader reports them
			met.WatchSandboxEgress(km) // networked sandboxes' egress counters, read from their Pods by the leader
		}
		m = newValidated(cfg.backend, km, auditLog)
	} else {
		dc := cfg.docker
		dc.Policy = cfg.policy // the one policy, shared with the Kubernetes backend
		dm, err := docker.New(ctx, dc, nil)
		if err != nil {
			return fmt.Errorf("starting the sandbox manager: %w", err)
		}
		if met != nil {
			met.Watch(dm)       // sandboxes by state and the pool's size, read at scrape time
			met.WatchEgress(dm) // the egress gateway's counters, per sandbox and in all
		}
		m = newValidated(cfg.backend, dm, auditLog)
	}
	var front *ports.Server
	if portsLis != nil {
		var stopPorts func()
		if front, stopPorts, err = servePorts(portsLis, cfg.docker.Ports, m, cfg.ports, cfg, log); err != nil {
			m.Close()
			return err
		}
		defer stopPorts()
		next := stopSignals
		stopSignals = func() { next(); stopPorts() }
	}
	if e2bLis != nil {
		stopE2B, err := serveE2B(e2bLis, m, toks, front, cfg, log)
		if err != nil {
			m.Close()
			return err
		}
		// Stopped when shutdown begins, before the manager closes.
		defer stopE2B()
		next := stopSignals
		stopSignals = func() { next(); stopE2B() }
	}
	return serve(ctx, stopSignals, lis, m, cfg.shutdownTimeout, log, opts...)
}

// serve serves the API over m on lis until ctx is done, then shuts down
// within grace (--shutdown-timeout), whatever is stuck: NOT_SERVING
// first, then a graceful stop of the calls (and of the HTTP fronts,
// stopSignals) bounded by grace less closeReserve(grace), then m.Close
// (which leaves the containers running) bounded by what is left. A
// manager that does not close by then is left behind and serve returns
// an error saying so: the process exits, and the next start recovers
// the state directory as after a crash. (A call stuck where its context
// could not reach once held Close, and sandboxd ran on for 26 s of a 5 s
// timeout until it was killed.) It owns m from here on.
func serve(ctx context.Context, stopSignals func(), lis net.Listener, m manager, grace time.Duration, log *slog.Logger, opts ...grpcapi.Option) (err error) {
	var deadline time.Time // of the whole shutdown, once it began
	defer func() {
		if deadline.IsZero() {
			deadline = time.Now().Add(grace)
		}
		if cerr := closeBy(m, deadline); cerr != nil {
			err = errors.Join(err, fmt.Errorf("closing the sandbox manager: %w", cerr))
		}
	}()

	srv := grpcapi.NewServer(m, log, opts...)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	srv.SetServing(true)
	log.Info("serving", "listen", lis.Addr().String())

	select {
	case err := <-served:
		// Serve only returns early on a listener failure.
		srv.Stop()
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	deadline = time.Now().Add(grace)
	callsEnd := deadline.Add(-closeReserve(grace))
	fronts := make(chan struct{})
	go func() {
		defer close(fronts)
		stopSignals() // and the HTTP fronts, each bounded by grace
	}()
	log.Info("shutting down", "grace", grace)
	srv.SetServing(false)

	stopped := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(stopped)
	}()
	timer := time.NewTimer(time.Until(callsEnd))
	defer timer.Stop()
	select {
	case <-stopped:
	case <-timer.C:
		// Long Execute streams would hold GracefulStop forever; their
		// commands keep running and clients resume with StreamCommand.
		// Their contexts are cancelled; a handler deaf to its context
		// is not waited for (GracefulStop would, for ever).
		log.Warn("grace period over; closing the remaining calls")
		srv.Stop()
	}
	// Serve returns once the server stopped; its error then is nil.
	select {
	case <-served:
		log.Info("gRPC server stopped")
	case <-time.After(time.Until(callsEnd)):
		log.Warn("the gRPC server has not stopped within the grace period; closing the sandbox manager anyway")
	}
	select {
	case <-fronts:
	case <-time.After(time.Until(callsEnd)):
		log.Warn("the HTTP fronts have not stopped within the grace period; closing the sandbox manager anyway")
	}
	return nil
}

// closeReserve is the part of the shutdown's grace kept for the manager's
// Close: a fifth, at most 2 s.
func closeReserve(grace time.Duration) time.Duration { return min(grace/5, 2*time.Second) }

// closeBy closes m, waiting for it until deadline (at least a moment:
// a grace spent by the calls still lets a healthy Close persist state).
func closeBy(m manager, deadline time.Time) error {
	closed := make(chan error, 1)
	go func() { closed <- m.Close() }()
	timer := time.NewTimer(max(time.Until(deadline), 100*time.Millisecond))
	defer timer.Stop()
	select {
	case err := <-closed:
		return err
	case <-timer.C:
		return errors.New("it did not finish within the shutdown timeout; exiting without it (the next start recovers its state)")
	}
}

// newLogger logs to stderr, where service managers collect it.
func newLogger(cfg config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.logLevel.Level}
	if cfg.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
