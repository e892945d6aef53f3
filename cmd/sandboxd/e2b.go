package main

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/orchestrator/door/e2bapi"
	"github.com/sandboxd/sandboxd/orchestrator/door/ports"
	"github.com/sandboxd/sandboxd/orchestrator/door/tokens"
)

// serveE2B serves the E2B-compatible API (orchestrator/door/e2bapi) on lis over
// m until the returned stop is called, with e2bSecret's access-token secret.
// With the ports front (front non-nil), the door passes getHost's URLs to
// it and hands out its traffic tokens.
func serveE2B(lis net.Listener, m manager, toks *tokens.Set, front *ports.Server, cfg config, log *slog.Logger) (stop func(), err error) {
	secret, err := e2bSecret(cfg)
	if err != nil {
		return nil, err
	}
	ecfg := e2bapi.Config{Tokens: toks, Secret: secret, Logger: log.With("door", "e2b"),
		CommandTimeout: cmp.Or(cfg.policy.MaxTimeout, core.DefaultMaxTimeout)}
	if front != nil {
		ecfg.Ports, ecfg.Front = front, cfg.docker.Ports
	}
	door, err := e2bapi.New(m, ecfg)
	if err != nil {
		return nil, err
	}
	srv := door.HTTPServer()
	go func() {
		if err := srv.Serve(door.LimitListener(lis)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("serving the E2B API", "error", err)
		}
	}()
	log.Info("serving the E2B API", "e2b_listen", lis.Addr().String(), "auth", toks != nil)
	var once sync.Once
	return func() {
		once.Do(func() { shutdownHTTP(srv, cfg.shutdownTimeout) })
	}, nil
}

// shutdownHTTP stops srv, letting requests finish for grace.
func shutdownHTTP(srv *http.Server, grace time.Duration) {
	{
		ctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
	}
}

// e2bSecretLabel derives the kubernetes backend's E2B access-token secret
// from the io sidecars' token.
const e2bSecretLabel = "sandboxd e2b access-token secret v1"

// e2bSecret is the secret the sandboxes' E2B access tokens are HMACs
// under, the same across restarts: on the Docker backend a file in the
// state directory; on the kubernetes backend, whose replicas each have
// their own state directory and must all accept a token any of them gave,
// derived from the io sidecars' token (kubeConfig.replicaSecret). Rotating
// that token invalidates the E2B access tokens given before (clients
// connect again).
func e2bSecret(cfg config) ([]byte, error) {
	if cfg.backend != backendKubernetes {
		return e2bapi.LoadSecret(filepath.Join(cfg.docker.StateDir, "e2b-secret"))
	}
	return cfg.kube.replicaSecret(e2bSecretLabel, "the E2B door's access tokens")
}
