// Command sandbox-mcp is a Model Context Protocol (MCP) server that lets an
// MCP client (a desktop assistant, a coding agent, an agent framework) run
// code in sandboxd's sandboxes.
//
// It is a client of sandboxd's gRPC API (through the package client) and an
// MCP server (through the official Go SDK). It serves MCP over stdio, the
// default, for clients that start it as a subprocess, or over streamable
// HTTP with --http ADDR, at the endpoint /mcp.
//
// # Tools
//
//   - run_code: run Python (a persistent IPython-like kernel: variables,
//     imports and functions persist across calls), bash, JavaScript or
//     TypeScript (one persistent Node.js kernel) or R; returns the
//     output, the final expression's value, the traceback, figures as
//     images, the command ID and the status.
//   - run_bash: run a bash command (a fresh bash process each call; files
//     persist, shell variables and cd do not).
//   - read_file, write_file, list_files: files under /workspace, which
//     persists across calls.
//   - resume_command: the rest of a command whose output was cut off or
//     whose call was interrupted, by its command ID; never runs it again.
//
// # Sandboxes and users
//
// Every tool call works in the sandbox of one sandboxd user: --user (env
// SANDBOX_MCP_USER, default "mcp"). sandboxd keeps one sandbox per user and
// sandbox-mcp acquires it on every call, so the state survives the MCP
// session: a client that reconnects, or a restarted sandbox-mcp, finds its
// variables and files again (until sandboxd's idle TTL removes the sandbox).
// When the sandbox died and was replaced, the result says so (state_lost,
// replaced_sandbox_id). Over HTTP, --user-header NAME lets a front end pick
// the user per request (e.g. X-Sandbox-User); it is off by default, because
// whoever can reach the endpoint could then pick any user of the token's
// tenant.
//
// # Long commands
//
// When the client sends a progress token, a running command reports progress
// at most once a second (elapsed time, output so far, its last line). When
// the client cancels a call (notifications/cancelled), the command is
// interrupted in the sandbox (like Ctrl-C) rather than left running. An HTTP
// client that merely disconnects has not cancelled (the MCP specification
// says so, and the SDK cancels the call only for protocol versions from
// 2026-07-28 on): the command runs on to its end or timeout; the client
// can reconnect to the stream (Last-Event-ID: sandbox-mcp keeps the last
// 64 MiB of events in memory) or call resume_command. Idle HTTP sessions
// end after an hour; the state is in sandboxd, not in the session. Each result's text is capped (about
// 100 KB): the head and tail are kept, and a notice says how to read the
// rest with resume_command and output_offset.
//
// # The HTTP endpoint
//
// Over HTTP, a request whose Origin header is not one of the listen
// address's own origins (http://127.0.0.1:PORT, http://localhost:PORT and
// so on) nor an --allow-origin is refused with 403, as the MCP
// specification requires, and on loopback so is a Host that is not a
// loopback name (DNS rebinding). With a bearer token (--http-token-file,
// or SANDBOX_MCP_HTTP_TOKEN) every request must carry it; without one,
// sandbox-mcp serves on loopback only, as sandboxd does. Headers and
// bodies are read under deadlines, bodies are capped (4 MiB) and read a
// bounded number at a time; see http.go.
//
// Usage:
//
//	sandbox-mcp [--sandboxd ADDR] [--user ID] [--http ADDR [--http-token-file FILE] [--allow-origin ORIGIN]...] [--timeout D]
//
// The token for sandboxd (for a sandboxd started with --auth-tokens) is
// best given in SANDBOX_MCP_TOKEN, and the one HTTP clients must send in
// SANDBOX_MCP_HTTP_TOKEN or a file: arguments show in ps.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
)

const usageText = `usage: sandbox-mcp [flags]

An MCP server that runs code in sandboxd's sandboxes. It serves MCP over
stdio unless --http is given.

Flags:
  --sandboxd ADDR     sandboxd's gRPC address (env SANDBOX_MCP_SANDBOXD; default 127.0.0.1:50051)
  --token TOKEN       bearer token for a sandboxd started with --auth-tokens
                      (env SANDBOX_MCP_TOKEN; prefer the variable: arguments show in ps)
  --tls               connect to sandboxd with TLS, verifying it against the system's CAs
  --ca FILE           connect with TLS, verifying sandboxd against this CA (PEM); implies --tls
  --user ID           the sandboxd user whose sandbox the tools use (env SANDBOX_MCP_USER; default mcp)
  --user-header NAME  over HTTP, take the user from this request header when present
                      (e.g. X-Sandbox-User); off by default
  --timeout D         a command's time limit when the call gives none (default 5m)
  --http ADDR         serve streamable HTTP on ADDR (endpoint /mcp) instead of stdio;
                      beyond loopback it needs a bearer token (below)
  --http-token-file FILE
                      over HTTP, require "Authorization: Bearer TOKEN" of every request,
                      TOKEN being this file's content (env SANDBOX_MCP_HTTP_TOKEN_FILE;
                      or the token itself in SANDBOX_MCP_HTTP_TOKEN); at least 16 characters
  --allow-origin ORIGIN
                      over HTTP, also accept requests whose Origin header is ORIGIN
                      (scheme://host[:port]; repeatable). By default only the listen
                      address's own origins are; others get 403
  --log-level LEVEL   debug, info, warn or error (default info); the log goes to stderr
`

// version is reported to MCP clients.
const version = "0.1.0"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandbox-mcp: %v\n", err)
		os.Exit(1)
	}
}

// config is the command line.
type config struct {
	sandboxd   string
	token      string
	useTLS     bool
	caFile     string
	user       string
	userHeader string
	timeout    time.Duration
	httpAddr   string
	logLevel   string
	// httpToken is the bearer token HTTP clients must send (from
	// --http-token-file or SANDBOX_MCP_HTTP_TOKEN); empty: none.
	httpToken    string
	allowOrigins []string
}

// stringList is a repeatable flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func parseFlags(args []string, getenv func(string) string, stdout io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("sandbox-mcp", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&c.sandboxd, "sandboxd", "", "")
	fs.StringVar(&c.token, "token", "", "")
	fs.BoolVar(&c.useTLS, "tls", false, "")
	fs.StringVar(&c.caFile, "ca", "", "")
	fs.StringVar(&c.user, "user", "", "")
	fs.StringVar(&c.userHeader, "user-header", "", "")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Minute, "")
	fs.StringVar(&c.httpAddr, "http", "", "")
	fs.StringVar(&c.logLevel, "log-level", "info", "")
	var tokenFile string
	fs.StringVar(&tokenFile, "http-token-file", "", "")
	fs.Var((*stringList)(&c.allowOrigins), "allow-origin", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usageText)
		}
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q (see --help)", fs.Arg(0))
	}
	or := func(v *string, env, def string) {
		if *v == "" {
			*v = getenv(env)
		}
		if *v == "" {
			*v = def
		}
	}
	or(&c.sandboxd, "SANDBOX_MCP_SANDBOXD", "127.0.0.1:50051")
	or(&c.token, "SANDBOX_MCP_TOKEN", "")
	or(&c.user, "SANDBOX_MCP_USER", "mcp")
	if c.timeout <= 0 {
		return c, fmt.Errorf("--timeout %v: must be positive", c.timeout)
	}
	if c.httpAddr == "" {
		if tokenFile != "" || len(c.allowOrigins) > 0 {
			return c, errors.New("--http-token-file and --allow-origin apply only with --http")
		}
		return c, nil
	}
	or(&tokenFile, "SANDBOX_MCP_HTTP_TOKEN_FILE", "")
	token := getenv("SANDBOX_MCP_HTTP_TOKEN")
	switch {
	case tokenFile != "" && token != "":
		return c, errors.New("both a token file (--http-token-file or SANDBOX_MCP_HTTP_TOKEN_FILE) and SANDBOX_MCP_HTTP_TOKEN are set; give one")
	case tokenFile != "":
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return c, fmt.Errorf("--http-token-file: %v", err)
		}
		if c.httpToken, err = checkHTTPToken(string(b)); err != nil {
			return c, fmt.Errorf("--http-token-file %s: %v", tokenFile, err)
		}
	case token != "":
		var err error
		if c.httpToken, err = checkHTTPToken(token); err != nil {
			return c, fmt.Errorf("SANDBOX_MCP_HTTP_TOKEN: %v", err)
		}
	}
	return c, nil
}

// checkHTTPToken is the token with surrounding white space (a file's final
// newline) removed, or an error that does not echo it.
func checkHTTPToken(s string) (string, error) {
	t := strings.TrimSpace(s)
	if len(t) < minTokenLen {
		return "", fmt.Errorf("the token is %d characters long; use at least %d random characters", len(t), minTokenLen)
	}
	for _, c := range t {
		if c < '!' || c > '~' {
			return "", errors.New("the token has a character outside printable ASCII (or white space inside it)")
		}
	}
	return t, nil
}

func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, getenv, stdout)
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.logLevel)); err != nil {
		return fmt.Errorf("--log-level %q: %v", cfg.logLevel, err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	opts := []client.Option{client.WithToken(cfg.token)}
	if cfg.useTLS || cfg.caFile != "" {
		tlsCfg, err := client.TLSConfig(cfg.caFile)
		if err != nil {
			return fmt.Errorf("--ca %s: %v", cfg.caFile, err)
		}
		opts = append(opts, client.WithTLS(tlsCfg))
	}
	sandboxd, err := client.Dial(cfg.sandboxd, opts...)
	if err != nil {
		return fmt.Errorf("--sandboxd: %v", err)
	}
	defer sandboxd.Close()

	svc := &service{sandboxd: sandboxd, addr: cfg.sandboxd, user: cfg.user, userHeader: cfg.userHeader, timeout: cfg.timeout, log: log}
	server := svc.newServer()

	if cfg.httpAddr == "" {
		log.Info("serving MCP over stdio", "sandboxd", cfg.sandboxd, "user", cfg.user)
		err := server.Run(ctx, &mcp.IOTransport{Reader: io.NopCloser(stdin), Writer: nopWriteCloser{stdout}})
		if ctx.Err() != nil || errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	e, err := listenHTTP(httpConfig{addr: cfg.httpAddr, token: cfg.httpToken, allowOrigins: cfg.allowOrigins}, server, log)
	if err != nil {
		return err
	}
	// Tests (and people) starting it on port 0 read the address here.
	log.Info("serving MCP over streamable HTTP", "url", e.URL(), "auth", cfg.httpToken != "")
	return e.serve(ctx)
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
