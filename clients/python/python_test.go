// Package python_test runs the Python client's unittest suite
// (clients/python/tests) under Debian's /usr/bin/python3: the unit tests
// alone, and the live tests against a real sandboxd that this test builds
// and runs.
//
// The live tests kill and restart sandboxd themselves, through a small HTTP
// control endpoint served here on loopback (SANDBOXD_TEST_CONTROL):
// POST /kill SIGKILLs sandboxd and returns once it is dead; POST /start
// starts it again on the same address and state directory and returns once
// it serves. Each answers 200, or 500 with the reason.
package python_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/sandboxdproc"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// python is Debian's interpreter, which has python3-grpcio and
// python3-protobuf (a python3 earlier on PATH may lack them).
const python = "/usr/bin/python3"

// needPython skips (fails under CI=true) unless Debian's python3 with the
// gRPC and protobuf packages is installed.
func needPython(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		testenv.Unavailable(t, "%s is missing (apt-get install python3)", python)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, python, "-c", "import grpc, google.protobuf").CombinedOutput(); err != nil {
		testenv.Unavailable(t, "%s cannot import grpc and google.protobuf (make python-proto-tools installs python3-grpcio and python3-protobuf): %v: %s", python, err, out)
	}
}

// unittest runs the suite's files matching pattern with extra environment
// variables, failing t with the output if any test fails.
func unittest(t *testing.T, timeout time.Duration, pattern string, env ...string) {
	t.Helper()
	dir, err := os.Getwd() // the package directory: clients/python
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-m", "unittest", "discover", "-s", "tests", "-p", pattern, "-v")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append([]string{"PYTHONPATH=" + dir, "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"}, env...)...)
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("%s -m unittest discover -p %s (%.1fs):\n%s", python, pattern, time.Since(start).Seconds(), out)
	if ctx.Err() != nil {
		t.Fatalf("the Python tests did not finish within %v", timeout)
	}
	if err != nil {
		t.Fatalf("the Python tests failed: %v", err)
	}
}

// TestPythonUnit runs the tests that need no server: error mapping, event
// conversion, and resumption against a fake stub.
func TestPythonUnit(t *testing.T) {
	needPython(t)
	unittest(t, 2*time.Minute, "test_unit_*.py")
}

// TestPythonLive runs the live tests against a real sandboxd.
func TestPythonLive(t *testing.T) {
	needPython(t)
	image := testenv.NeedDocker(t)

	dir := t.TempDir()
	bctx, bcancel := context.WithTimeout(context.Background(), 5*time.Minute)
	bin, err := sandboxdproc.Build(bctx, dir, sandboxdproc.Package)
	bcancel()
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{bin: bin, stateDir: filepath.Join(dir, "state"), image: image}
	t.Cleanup(d.cleanup(t))
	if err := d.start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	control := d.serveControl(t)
	unittest(t, 8*time.Minute, "test_live_*.py",
		"SANDBOXD_TEST_ADDR="+d.addr,
		"SANDBOXD_TEST_CONTROL="+control,
	)
}

// daemon is the sandboxd under test, restartable on the same address.
type daemon struct {
	bin, stateDir, image string

	mu   sync.Mutex
	addr string // fixed by the first start
	proc *sandboxdproc.Process
}

// start runs sandboxd on listen and waits until it serves; d.mu is held or
// not needed.
func (d *daemon) start(listen string) error {
	args := []string{"--listen", listen, "--state-dir", d.stateDir, "--image", d.image,
		"--log-level", "debug", "--default-memory", "512MiB", "--shutdown-timeout", "5s", "--warm-pool", "0"}
	if rt := os.Getenv("SANDBOXD_E2E_RUNTIME"); rt != "" {
		args = append(args, "--runtime", rt)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, err := sandboxdproc.Start(ctx, sandboxdproc.Config{
		Binary:       d.bin,
		Args:         args,
		Env:          append(os.Environ(), "SANDBOXD_LISTEN="), // the flag decides
		ServeTimeout: 2 * time.Minute,
	})
	if err != nil {
		return fmt.Errorf("starting sandboxd: %w", err)
	}
	d.proc, d.addr = p, p.Addr
	return nil
}

// serveControl serves /kill and /start on a loopback port until the test
// ends and returns its base URL.
func (d *daemon) serveControl(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /kill", func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		defer d.mu.Unlock()
		t.Logf("control: SIGKILL sandboxd (pid %d)", d.proc.Pid())
		d.proc.Kill()
		fmt.Fprintln(w, "killed")
	})
	mux.HandleFunc("POST /start", func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		defer d.mu.Unlock()
		select {
		case <-d.proc.Exited():
		default:
			http.Error(w, "sandboxd is still running", http.StatusConflict)
			return
		}
		start := time.Now()
		if err := d.start(d.addr); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		t.Logf("control: sandboxd restarted on %s in %.1fs", d.addr, time.Since(start).Seconds())
		fmt.Fprintln(w, "started")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("control server: %v", err)
		}
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return "http://" + ln.Addr().String()
}

// cleanup stops sandboxd and removes the containers and mounts it leaves,
// logging its log if the test failed.
func (d *daemon) cleanup(t *testing.T) func() {
	return func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.proc != nil {
			if err := d.proc.Stop(30 * time.Second); err != nil {
				t.Logf("stopping sandboxd: %v", err)
			}
			if t.Failed() {
				t.Logf("sandboxd log (last run):\n%s", d.proc.Log())
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := sandboxdproc.Cleanup(ctx, d.stateDir); err != nil {
			t.Logf("removing what sandboxd left: %v", err)
		}
	}
}
