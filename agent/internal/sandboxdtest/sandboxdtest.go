// Package sandboxdtest runs the real sandboxd binary for the agent's
// integration tests, against the real Docker engine and sandbox image.
//
// Tests skip when Docker or the image is unavailable, except under CI=true,
// where that is a failure (so a broken CI setup cannot pass silently), and
// in -short mode. SANDBOX_IMAGE (exported by the Makefile) and
// SANDBOXD_E2E_RUNTIME (e.g. runsc) choose the image and runtime.
package sandboxdtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/sandboxd/sandboxd/internal/sandboxdproc"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// defaultImage is what `make image` builds.
const defaultImage = "sandboxd-sandbox:latest"

// Need skips (or, under CI=true, fails) t when integration tests cannot run
// here: -short mode, no Docker, or no sandbox image.
func Need(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test skipped in -short mode")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		Unavailable(t, "the docker CLI is not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		Unavailable(t, "Docker is not reachable: %v: %s", err, bytes.TrimSpace(out))
	}
	if out, err := exec.CommandContext(ctx, "docker", "image", "inspect", "--format", "{{.Id}}", Image()).CombinedOutput(); err != nil {
		Unavailable(t, "image %s is missing (build it with make image): %v: %s", Image(), err, bytes.TrimSpace(out))
	}
}

// Unavailable skips t, or fails it under CI=true.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and %s", msg)
	}
	t.Skip(msg)
}

// Image is the sandbox image the tests use.
func Image() string {
	if img := os.Getenv("SANDBOX_IMAGE"); img != "" {
		return img
	}
	return defaultImage
}

// Build compiles the package pkg (an import path of this module) into dir
// and returns the binary's path.
func Build(t testing.TB, dir, pkg string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := sandboxdproc.Build(ctx, dir, pkg)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// Daemon is a running sandboxd.
type Daemon struct {
	// Addr is its gRPC address.
	Addr string
	// StateDir is its state directory.
	StateDir string

	proc *sandboxdproc.Process
	// admin authenticates the cleanup when tokens are required.
	admin string
}

// Option changes how Start runs sandboxd.
type Option func(*startOptions)

type startOptions struct {
	tokens []string // "TOKEN TENANT ROLE" lines
}

// WithUserToken makes sandboxd require bearer tokens (--auth-tokens) and
// accept token as a user of tenant.
func WithUserToken(token, tenant string) Option {
	return func(o *startOptions) { o.tokens = append(o.tokens, token+" "+tenant+" user") }
}

// Start checks the prerequisites (see Need), builds sandboxd and runs it on
// a free loopback port with a private state directory. When the test ends,
// its sandboxes are deleted and it is stopped.
func Start(t testing.TB, opts ...Option) *Daemon {
	t.Helper()
	Need(t)
	var o startOptions
	for _, opt := range opts {
		opt(&o)
	}
	dir := t.TempDir()
	bin := Build(t, dir, sandboxdproc.Package)
	d := &Daemon{StateDir: filepath.Join(dir, "state")}
	args := []string{"--listen", "127.0.0.1:0", "--state-dir", d.StateDir, "--image", Image(), "--log-level", "debug",
		"--default-memory", "512MiB", "--shutdown-timeout", "5s"}
	if len(o.tokens) > 0 {
		d.admin = "sandboxdtest-admin-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		file := filepath.Join(dir, "tokens")
		lines := append(o.tokens, d.admin+" sandboxdtest admin")
		if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--auth-tokens", file)
	}
	if rt := os.Getenv("SANDBOXD_E2E_RUNTIME"); rt != "" {
		args = append(args, "--runtime", rt)
	}
	p, err := sandboxdproc.Start(context.Background(), sandboxdproc.Config{
		Binary: bin,
		Args:   args,
		Env:    append(os.Environ(), "SANDBOXD_LISTEN="), // the flag, not the caller's env, decides
		// Tests read the whole log, up to a goroutine dump.
		LogBytes: 32 << 20,
	})
	if err != nil {
		t.Fatalf("starting sandboxd: %v", err)
	}
	d.proc, d.Addr = p, p.Addr
	t.Cleanup(func() { d.stop(t) })
	return d
}

// Client returns a gRPC client for the daemon (closed when the test ends).
func (d *Daemon) Client(t testing.TB) sandboxv1.SandboxServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(d.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return sandboxv1.NewSandboxServiceClient(conn)
}

// Logs is what sandboxd logged so far (its last 32 MiB).
func (d *Daemon) Logs() string { return d.proc.Log().String() }

// stop deletes the daemon's sandboxes, stops it, and removes any container
// or mount left over.
func (d *Daemon) stop(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	select {
	case <-d.proc.Exited():
	default:
		if conn, err := grpc.NewClient(d.Addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err == nil {
			c := sandboxv1.NewSandboxServiceClient(conn)
			if d.admin != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+d.admin)
			}
			if l, err := c.ListSandboxes(ctx, &sandboxv1.ListSandboxesRequest{}); err == nil {
				for _, sb := range l.GetSandboxes() {
					c.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: sb.GetSandboxId()})
				}
			}
			conn.Close()
		}
	}
	stopErr := d.proc.Stop(30 * time.Second)
	if t.Failed() {
		t.Logf("sandboxd log:\n%s", d.proc.Log())
	} else if stopErr != nil {
		t.Logf("stopping sandboxd: %v", stopErr)
	}
	if err := sandboxdproc.Cleanup(ctx, d.StateDir); err != nil {
		t.Logf("removing what sandboxd left: %v", err)
	}
}
