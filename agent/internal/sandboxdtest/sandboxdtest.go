// Package sandboxdtest runs the real sandboxd binary for the agent's
// integration tests, against the real Docker engine and sandbox image.
//
// Tests skip when Docker or the image is unavailable, and in -short mode;
// under CI=true a missing part fails them instead (internal/testenv decides).
// SANDBOX_IMAGE (exported by the Makefile) and SANDBOXD_E2E_RUNTIME (e.g.
// runsc) choose the image and runtime.
package sandboxdtest

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/sandboxdproc"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

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

// Start checks the prerequisites (testenv.NeedDocker), builds sandboxd and runs it on
// a free loopback port with a private state directory. When the test ends,
// its sandboxes are deleted and it is stopped.
func Start(t testing.TB, opts ...Option) *Daemon {
	t.Helper()
	image := testenv.NeedDocker(t)
	var o startOptions
	for _, opt := range opts {
		opt(&o)
	}
	dir := t.TempDir()
	bin := Build(t, dir, sandboxdproc.Package)
	d := &Daemon{StateDir: filepath.Join(dir, "state")}
	args := []string{"--listen", "127.0.0.1:0", "--state-dir", d.StateDir, "--image", image, "--log-level", "debug",
		"--default-memory", "512MiB", "--shutdown-timeout", "5s", "--warm-pool", "0"}
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

// Client returns a client of the daemon (closed when the test ends).
func (d *Daemon) Client(t testing.TB) *client.Client {
	t.Helper()
	c, err := client.Dial(d.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
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
		if c, err := client.Dial(d.Addr, client.WithToken(d.admin)); err == nil {
			if sbs, err := c.List(ctx, client.ListFilter{}); err == nil {
				for _, sb := range sbs {
					c.Delete(ctx, sb.GetSandboxId())
				}
			}
			c.Close()
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
