package e2e

// End-to-end tests: the real sandboxd binary against the real Docker engine
// and sandbox image, driven over gRPC and through the real sandboxctl binary.
//
// They skip when Docker or the image is unavailable, except under CI=true,
// where that is a failure (so a broken CI setup cannot pass silently), and
// in -short mode. SANDBOX_IMAGE (exported by the Makefile) and
// SANDBOXD_E2E_RUNTIME (e.g. runsc) choose the image and runtime.

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sandboxd/sandboxd/internal/sandboxdproc"
	"github.com/sandboxd/sandboxd/internal/testenv"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// e2eEnv is what every end-to-end test shares: built binaries and a state
// directory.
type e2eEnv struct {
	sandboxd, sandboxctl string
	stateDir             string
	image, runtime       string
}

// needE2E skips (or, under CI=true, fails) when the prerequisites are
// missing, following testenv's rule, and builds the binaries (once per
// test process: see binaries).
func needE2E(t *testing.T) *e2eEnv {
	t.Helper()
	image := testenv.NeedDocker(t)

	sandboxd, sandboxctl, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	env := &e2eEnv{
		sandboxd:   sandboxd,
		sandboxctl: sandboxctl,
		stateDir:   filepath.Join(t.TempDir(), "state"),
		image:      image,
		runtime:    os.Getenv("SANDBOXD_E2E_RUNTIME"),
	}
	// Whatever a failed test leaves behind, no container outlives it.
	t.Cleanup(func() { env.removeContainers(t) })
	return env
}

// binaries builds sandboxd and sandboxctl the first time a test asks, into
// a directory TestMain removes, and hands every later test the same two:
// thirty-odd tests each linking both again cost minutes of the shard's CPU
// (sandboxd links client-go). No test writes to them (one that needs
// another build, with test hooks, makes its own: hibernate_test.go).
func binaries() (sandboxd, sandboxctl string, err error) {
	built.once.Do(func() { built.sandboxd, built.sandboxctl, built.err = buildBinaries(binDir) })
	return built.sandboxd, built.sandboxctl, built.err
}

var built struct {
	once                 sync.Once
	sandboxd, sandboxctl string
	err                  error
}

// binDir is the test process's directory for binaries (TestMain).
var binDir string

func buildBinaries(dir string) (sandboxd, sandboxctl string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if sandboxd, err = sandboxdproc.Build(ctx, dir, sandboxdproc.Package); err != nil {
		return "", "", err
	}
	if sandboxctl, err = sandboxdproc.Build(ctx, dir, "github.com/sandboxd/sandboxd/cmd/sandboxctl"); err != nil {
		return "", "", err
	}
	return sandboxd, sandboxctl, nil
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sandboxd-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(2)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// removeContainers force-removes the containers of this test's state dir
// and unmounts the sandbox volumes a killed sandboxd left mounted under it
// (a live one keeps them on purpose), so that the test's directory can be
// removed and no loop device is left behind.
func (e *e2eEnv) removeContainers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sandboxdproc.Cleanup(ctx, e.stateDir); err != nil {
		t.Logf("removing what sandboxd left: %v", err)
	}
}

// daemon is one running sandboxd process. cmd, logs and exited are the
// process's own, kept as fields for the tests that signal it and read its
// log.
type daemon struct {
	proc   *sandboxdproc.Process
	cmd    *exec.Cmd
	addr   string
	logs   *sandboxdproc.Log
	exited <-chan struct{}
	// kube is set for a replica on the Kubernetes backend (kube_test.go).
	kube *kubeEnv
}

// start runs sandboxd on a free loopback port and waits until it serves.
// extra flags come last, so they override the defaults (e.g. "--listen" with
// a previous run's address, to restart on the same port).
func (e *e2eEnv) start(t *testing.T, extra ...string) *daemon {
	t.Helper()
	return e.startEnv(t, nil, extra...)
}

// startEnv is start with more environment variables for sandboxd.
//
// Without a pool (--warm-pool 0) unless extra asks for one: the suites
// count their sandboxes' containers and acquire kinds, and a pool's warm-up
// (a Python importing numpy and pandas, twice per sandboxd) would cost two
// cores more than most suites take. TestE2EFastWakeDefaults runs sandboxd
// with make run's defaults, pool included (startDefaults).
func (e *e2eEnv) startEnv(t *testing.T, environ []string, extra ...string) *daemon {
	t.Helper()
	args := append(e.baseArgs(), "--log-level", "debug", "--default-memory", "512MiB", "--warm-pool", "0")
	return e.run(t, environ, append(args, extra...))
}

// startDefaults starts sandboxd as make run does, with nothing but the
// test's own listener, state directory, image and runtime and extra.
func (e *e2eEnv) startDefaults(t *testing.T, extra ...string) *daemon {
	t.Helper()
	return e.run(t, nil, append(e.baseArgs(), extra...))
}

// baseArgs are the flags every sandboxd of the suite gets: where it
// listens and keeps state, the image and runtime under test.
func (e *e2eEnv) baseArgs() []string {
	args := []string{"--listen", "127.0.0.1:0", "--state-dir", e.stateDir, "--image", e.image, "--shutdown-timeout", "5s"}
	if e.runtime != "" {
		args = append(args, "--runtime", e.runtime)
	}
	return args
}

// run starts sandboxd with args and stops it when the test ends.
func (e *e2eEnv) run(t *testing.T, environ []string, args []string) *daemon {
	t.Helper()
	p, err := sandboxdproc.Start(context.Background(), sandboxdproc.Config{
		Binary: e.sandboxd,
		Args:   args,
		Env:    append(append(os.Environ(), "SANDBOXD_LISTEN="), environ...), // the flag, not the caller's env, decides
		// Tests read the whole log, up to a goroutine dump under load.
		LogBytes: 32 << 20,
	})
	if err != nil {
		t.Fatalf("starting sandboxd: %v", err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("sandboxd log:\n%s", p.Log())
		}
	})
	return &daemon{proc: p, cmd: p.Cmd(), addr: p.Addr, logs: p.Log(), exited: p.Exited()}
}

// stop sends SIGTERM and checks that sandboxd exits cleanly, in time.
func (d *daemon) stop(t *testing.T) {
	t.Helper()
	if err := d.proc.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
}

func (d *daemon) client(t *testing.T) (sandboxv1.SandboxServiceClient, *grpc.ClientConn) {
	t.Helper()
	conn, err := grpc.NewClient(d.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(sandboxv1.MaxMessageSize)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return sandboxv1.NewSandboxServiceClient(conn), conn
}

// e2eCtx bounds a whole test; container starts take seconds, not minutes.
func e2eCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// outcome is a finished command as a client sees it.
type outcome struct {
	stdout, stderr string
	results        []map[string]string
	errs           []*sandboxv1.Error
	done           *sandboxv1.Done
	events         int
}

func execute(t *testing.T, ctx context.Context, c sandboxv1.SandboxServiceClient, req *sandboxv1.ExecuteRequest) outcome {
	t.Helper()
	s, err := c.Execute(ctx, req)
	if err != nil {
		t.Fatalf("Execute %q: %v", req.GetCode(), err)
	}
	return drain(t, s)
}

func drain(t *testing.T, s grpc.ServerStreamingClient[sandboxv1.ExecuteEvent]) outcome {
	t.Helper()
	evs, err := recvEvents(s)
	if err != nil {
		t.Fatalf("stream failed after %d events: %v", len(evs), err)
	}
	o := outcomeOf(evs)
	if o.done == nil {
		t.Fatalf("stream ended without done after %d events", o.events)
	}
	return o
}

func TestE2ELifecycle(t *testing.T) {
	env := needE2E(t)
	ctx := e2eCtx(t)
	d := env.start(t)
	c, conn := d.client(t)

	hs, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || hs.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, %v; want SERVING", hs, err)
	}

	acq, err := c.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: "e2e-alice"})
	if err != nil {
		t.Fatalf("AcquireSandbox: %v", err)
	}
	sbID := acq.GetSandbox().GetSandboxId()
	if !acq.GetCreated() || acq.GetSandbox().GetState() != sandboxv1.SandboxState_SANDBOX_STATE_RUNNING {
		t.Fatalf("AcquireSandbox = %v; want a new running sandbox", acq)
	}

	// Python state persists between commands.
	if o := execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: sbID, Code: "x = 21"}); o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_OK {
		t.Fatalf("x = 21: %v", o.done)
	}
	o := execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: sbID, Code: "print('hi')\nx * 2"})
	if o.stdout != "hi\n" || len(o.results) != 1 || o.results[0]["text/plain"] != "42" {
		t.Errorf("print + result: stdout %q, results %v", o.stdout, o.results)
	}

	// Idempotence: the same command ID replays, it does not run again.
	req := &sandboxv1.ExecuteRequest{SandboxId: sbID, CommandId: "e2e-once", Code: "import random; print(random.random())"}
	first, again := execute(t, ctx, c, req), execute(t, ctx, c, req)
	if first.stdout == "" || first.stdout != again.stdout || first.events != again.events {
		t.Errorf("retried command ran again: %q then %q", first.stdout, again.stdout)
	}
	// And its stream resumes after a given seq.
	s, err := c.StreamCommand(ctx, &sandboxv1.StreamCommandRequest{SandboxId: sbID, CommandId: "e2e-once", AfterSeq: 1})
	if err != nil {
		t.Fatal(err)
	}
	if resumed := drain(t, s); resumed.events != first.events-1 || resumed.stdout != first.stdout {
		t.Errorf("resume after seq 1: %d events, stdout %q; want %d, %q", resumed.events, resumed.stdout, first.events-1, first.stdout)
	}

	// Errors, bash and timeouts.
	o = execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: sbID, Code: "undefined_name"})
	if o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_ERROR || len(o.errs) != 1 || o.errs[0].GetEname() != "NameError" {
		t.Errorf("NameError: done %v, errors %v", o.done, o.errs)
	}
	o = execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: sbID, Language: "bash", Code: "echo out; echo err >&2; exit 3"})
	if o.stdout != "out\n" || o.stderr != "err\n" || o.done.GetExitCode() != 3 || o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_ERROR {
		t.Errorf("bash: stdout %q stderr %q done %v", o.stdout, o.stderr, o.done)
	}
	o = execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: sbID, Code: "import time; time.sleep(60)", Timeout: durationpb.New(time.Second)})
	if o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_TIMEOUT {
		t.Errorf("timeout: done %v", o.done)
	}

	// Files: upload, see it from Python, list, download.
	up, err := c.UploadFile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte("0123456789abcdef"), 200_000) // 3.2 MB, several chunks
	msgs := []*sandboxv1.UploadFileRequest{{Payload: &sandboxv1.UploadFileRequest_Header{Header: &sandboxv1.UploadFileHeader{SandboxId: sbID, Path: "in/data.bin"}}}}
	for off := 0; off < len(payload); off += 1 << 20 {
		msgs = append(msgs, &sandboxv1.UploadFileRequest{Payload: &sandboxv1.UploadFileRequest_Chunk{Chunk: payload[off:min(off+1<<20, len(payload))]}})
	}
	for _, m := range msgs {
		if err := up.Send(m); err != nil {
			t.Fatalf("upload send: %v", err)
		}
	}
	ur, err := up.CloseAndRecv()
	if err != nil || ur.GetFile().GetSize() != int64(len(payload)) {
		t.Fatalf("upload: %v, %v", ur, err)
	}
	o = execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: sbID, Code: "import os; print(os.path.getsize('in/data.bin'))\nopen('out.txt', 'w').write('hello')"})
	if strings.TrimSpace(o.stdout) != fmt.Sprint(len(payload)) {
		t.Errorf("python sees size %q, want %d", o.stdout, len(payload))
	}
	// The driver reports files changed since its previous look, which may
	// include the upload; out.txt must be there in any case.
	if !slices.ContainsFunc(o.done.GetFiles(), func(f *sandboxv1.FileRef) bool { return f.GetPath() == "out.txt" && f.GetSize() == 5 }) {
		t.Errorf("done.files = %v, want out.txt (5 bytes) among them", o.done.GetFiles())
	}
	lf, err := c.ListFiles(ctx, &sandboxv1.ListFilesRequest{SandboxId: sbID})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range lf.GetFiles() {
		names = append(names, f.GetPath())
	}
	if strings.Join(names, ",") != "in,out.txt" {
		t.Errorf("ListFiles = %v, want [in out.txt]", names)
	}
	dl, err := c.DownloadFile(ctx, &sandboxv1.DownloadFileRequest{SandboxId: sbID, Path: "in/data.bin"})
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	for {
		m, err := dl.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("download: %v", err)
		}
		got = append(got, m.GetChunk()...)
	}
	if !bytes.Equal(got, payload) {
		t.Errorf("downloaded %d bytes, differing from the %d uploaded", len(got), len(payload))
	}

	// A restart of sandboxd keeps the sandbox and its Python state.
	d.stop(t)
	d = env.start(t)
	c, _ = d.client(t)
	acq, err = c.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: "e2e-alice"})
	if err != nil {
		t.Fatalf("AcquireSandbox after restart: %v", err)
	}
	if acq.GetSandbox().GetSandboxId() != sbID || acq.GetCreated() || acq.GetStateLost() {
		t.Fatalf("after restart got %v; want the same sandbox %s, not created", acq, sbID)
	}
	if o := execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: sbID, Code: "x"}); len(o.results) != 1 || o.results[0]["text/plain"] != "21" {
		t.Errorf("x after restart: %v %v", o.results, o.errs)
	}

	// The CLI, against the real server.
	ctl := sandboxctlRunner(t, ctx, env.sandboxctl, d.addr)
	if out, errOut, code := ctl("print(x + 1)\n", "exec", "--user", "e2e-alice", "-"); code != 0 || out != "22\n" {
		t.Errorf("sandboxctl exec: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if out, _, code := ctl("", "list"); code != 0 || !strings.Contains(out, sbID) || !strings.Contains(out, "e2e-alice") {
		t.Errorf("sandboxctl list: exit %d:\n%s", code, out)
	}
	if out, errOut, code := ctl("", "kill", sbID); code != 0 || strings.TrimSpace(out) != sbID {
		t.Errorf("sandboxctl kill: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, err := c.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: sbID}); status.Code(err) != codes.NotFound {
		t.Errorf("GetSandbox after kill: %v, want NotFound", err)
	}
	if _, errOut, code := ctl("", "kill", sbID); code != 1 || !strings.Contains(errOut, "not found") {
		t.Errorf("second kill: exit %d, stderr %q; want 1 and not found", code, errOut)
	}
	d.stop(t)
}

// TestE2ELargePlot: a plot larger than the /io artifact threshold and gRPC's
// default 4 MiB message limit arrives whole, as a valid PNG.
func TestE2ELargePlot(t *testing.T) {
	env := needE2E(t)
	ctx := e2eCtx(t)
	d := env.start(t)
	c, _ := d.client(t)
	acq, err := c.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: "e2e-plot"})
	if err != nil {
		t.Fatalf("AcquireSandbox: %v", err)
	}
	sbID := acq.GetSandbox().GetSandboxId()
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c.DeleteSandbox(cctx, &sandboxv1.DeleteSandboxRequest{SandboxId: sbID})
	})
	// Random noise does not compress: 1500x1500 pixels is several MiB of PNG.
	code := "import numpy as np, matplotlib.pyplot as plt\n" +
		"fig = plt.figure(figsize=(15, 15), dpi=100)\n" +
		"plt.imshow(np.random.default_rng(0).random((1500, 1500, 3)))\n" +
		"plt.show()"
	o := execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: sbID, Code: code})
	if o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_OK {
		t.Fatalf("plot failed: %v %v stderr %q", o.done, o.errs, o.stderr)
	}
	var png []byte
	for _, r := range o.results {
		if v, ok := r["image/png"]; ok {
			if png, err = base64.StdEncoding.DecodeString(v); err != nil {
				t.Fatalf("image/png is not base64: %v", err)
			}
		}
	}
	if len(png) < 4<<20 || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("got a %d-byte image/png (header %q); want a PNG above 4 MiB", len(png), png[:min(8, len(png))])
	}
	d.stop(t)
}

// sandboxctlRunner returns a function that runs the sandboxctl binary bin
// against addr with stdin as its input, and returns its stdout, stderr and
// exit code; failing to start it at all fails the test.
func sandboxctlRunner(t *testing.T, ctx context.Context, bin, addr string) func(stdin string, args ...string) (string, string, int) {
	return func(stdin string, args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, append([]string{"--addr", addr}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("sandboxctl: %v", err)
		}
		return out.String(), errOut.String(), code
	}
}
