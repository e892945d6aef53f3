// Package sandboxdtest runs the real sandboxd binary for the agent's
// integration tests, against the real Docker engine and sandbox image.
//
// Tests skip when Docker or the image is unavailable, except under CI=true,
// where that is a failure (so a broken CI setup cannot pass silently), and
// in -short mode. SANDBOX_IMAGE (exported by the Makefile) and
// SANDBOXD_E2E_RUNTIME (e.g. runsc) choose the image and runtime.
package sandboxdtest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// defaultImage is what `make image` builds.
const defaultImage = "sandboxd-sandbox:latest"

// labelStateDir is the Docker label sandboxd puts on its containers, naming
// its state directory; used to remove what a failed test leaves behind.
const labelStateDir = "sandboxd.state-dir"

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
	bin := filepath.Join(dir, filepath.Base(pkg))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// Daemon is a running sandboxd.
type Daemon struct {
	// Addr is its gRPC address.
	Addr string
	// StateDir is its state directory.
	StateDir string

	cmd    *exec.Cmd
	logs   *lockedBuffer
	exited chan error
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

var servingLine = regexp.MustCompile(`msg=serving listen=(\S+)`)

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
	bin := Build(t, dir, "github.com/sandboxd/sandboxd/cmd/sandboxd")
	d := &Daemon{StateDir: filepath.Join(dir, "state"), logs: &lockedBuffer{}, exited: make(chan error, 1)}
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
	d.cmd = exec.Command(bin, args...)
	d.cmd.Env = append(os.Environ(), "SANDBOXD_LISTEN=")
	stderr, err := d.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("starting sandboxd: %v", err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(d.logs, line)
			if m := servingLine.FindStringSubmatch(line); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		d.exited <- d.cmd.Wait()
	}()
	t.Cleanup(func() { d.stop(t) })
	select {
	case d.Addr = <-addr:
	case err := <-d.exited:
		t.Fatalf("sandboxd exited before serving: %v\n%s", err, d.logs.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("sandboxd did not serve within 2 minutes\n%s", d.logs.String())
	}
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

// Logs is what sandboxd logged so far.
func (d *Daemon) Logs() string { return d.logs.String() }

// stop deletes the daemon's sandboxes, stops it, and removes any container
// left over.
func (d *Daemon) stop(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if d.cmd.ProcessState == nil {
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
		d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(30 * time.Second):
			d.cmd.Process.Kill()
			<-d.exited
		}
	}
	if t.Failed() {
		t.Logf("sandboxd log:\n%s", d.logs.String())
	}
	out, err := exec.CommandContext(ctx, "docker", "ps", "-aq", "--filter", "label="+labelStateDir+"="+d.StateDir).Output()
	if err != nil {
		t.Logf("listing leftover containers: %v", err)
		return
	}
	if ids := strings.Fields(string(out)); len(ids) > 0 {
		if out, err := exec.CommandContext(ctx, "docker", append([]string{"rm", "-f"}, ids...)...).CombinedOutput(); err != nil {
			t.Logf("removing leftover containers: %v: %s", err, out)
		}
	}
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
