// Package client is the Go client of sandboxd's public API (sandbox.v1).
//
// It exists so that every Go program talking to sandboxd (the agent,
// sandboxctl, sandbox-bench, tests) dials, authenticates, sizes messages,
// resumes dropped commands and classifies errors the same way, instead of
// each writing its own gRPC plumbing. It depends only on the API in
// proto/sandbox/v1 and on gRPC, never on the server's code.
//
// The heart of it is [Client.Run]: it runs a command by a caller-chosen
// command ID and, when the stream breaks (a dropped connection, a sandboxd
// restart, a crash of the caller itself), resumes it by that ID after the
// last event received, so a command is never run twice and no event is
// seen twice.
//
// Errors from sandboxd keep its message and gRPC code, and wrap one of the
// error classes ([ErrNotFound], [ErrInvalidArgument], ...) for errors.Is.
package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// Client is a connection to sandboxd. It is safe for concurrent use.
type Client struct {
	conn   *grpc.ClientConn
	api    sandboxv1.SandboxServiceClient
	health healthpb.HealthClient
	// retryFor bounds how long Run retries a broken stream while sandboxd
	// restarts.
	retryFor time.Duration
}

// Option configures Dial.
type Option func(*options)

type options struct {
	token   string
	tls     *tls.Config // nil: plaintext
	maxRecv int
	extra   []grpc.DialOption
}

// WithToken sends token with every call as "authorization: Bearer <token>",
// which a sandboxd started with --auth-tokens requires. It works over
// plaintext too, since sandboxd is usually reached over loopback. An empty
// token sends nothing.
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// WithTLS connects over TLS with cfg, as built by [TLSConfig]; a nil cfg
// verifies the server against the system's CAs. Without it the connection
// is plaintext.
func WithTLS(cfg *tls.Config) Option {
	return func(o *options) {
		if cfg == nil {
			cfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		o.tls = cfg
	}
}

// WithMaxMessageSize sets the largest message the client accepts. The
// default, sandboxv1.MaxMessageSize, is what sandboxd may send (a large plot
// inline); lower it only if you know your commands' outputs are small.
func WithMaxMessageSize(n int) Option { return func(o *options) { o.maxRecv = n } }

// WithDialOptions adds gRPC dial options after the client's own, so they
// win: tests use it to dial an in-memory listener, callers to tune
// keepalives or back-off.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.extra = append(o.extra, opts...) }
}

// TLSConfig is a TLS configuration that verifies the server against the CAs
// in caFile (PEM), or the system's CAs when caFile is empty. It is separate
// from WithTLS so that a bad file is reported before dialling, naming the
// caller's own flag or setting.
func TLSConfig(caFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no PEM certificate in %s", caFile)
	}
	cfg.RootCAs = pool
	return cfg, nil
}

// Dial connects to sandboxd at addr (host:port, or any gRPC target). The
// connection is made lazily: a sandboxd that is down shows up as
// ErrUnavailable from the calls, which lets a caller start before sandboxd
// does.
func Dial(addr string, opts ...Option) (*Client, error) {
	o := options{maxRecv: sandboxv1.MaxMessageSize}
	for _, opt := range opts {
		opt(&o)
	}
	creds := insecure.NewCredentials()
	if o.tls != nil {
		creds = credentials.NewTLS(o.tls)
	}
	dopts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(o.maxRecv)),
	}
	if o.token != "" {
		dopts = append(dopts, grpc.WithPerRPCCredentials(bearer(o.token)))
	}
	conn, err := grpc.NewClient(addr, append(dopts, o.extra...)...)
	if err != nil {
		return nil, fmt.Errorf("sandboxd address %q: %w", addr, err)
	}
	return &Client{
		conn:     conn,
		api:      sandboxv1.NewSandboxServiceClient(conn),
		health:   healthpb.NewHealthClient(conn),
		retryFor: 2 * time.Minute,
	}, nil
}

// Close closes the connection; calls in flight fail.
func (c *Client) Close() error { return c.conn.Close() }

// Ready returns nil when sandboxd's standard health service says SERVING,
// so that a caller that started sandboxd can wait for it. It needs no
// token.
func (c *Client) Ready(ctx context.Context) error {
	r, err := c.health.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return fmt.Errorf("sandboxd health: %w", fromGRPC(err))
	}
	if s := r.GetStatus(); s != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("%w: sandboxd health is %v", ErrUnavailable, s)
	}
	return nil
}

// bearer sends a token as gRPC metadata. Unlike grpc's oauth credentials it
// does not require transport security: sandboxd is normally reached over
// loopback without TLS.
type bearer string

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials: the
// token may travel in plaintext (over loopback).
func (bearer) RequireTransportSecurity() bool { return false }
