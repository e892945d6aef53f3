// Package testenv decides, in one place, what a test does when a real part
// it needs is missing: the Docker engine, the sandbox image, gVisor's runsc
// runtime, Chromium. Developers' machines may lack them, so such a test
// skips; under CI=true it fails instead, because CI promises every part and
// a skip there would hide a broken set-up. -short skips every such test.
package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// DefaultImage is the sandbox image `make image` builds (the Makefile's
// IMAGE); SANDBOX_IMAGE, which the Makefile exports, overrides it.
const DefaultImage = "sandboxd-sandbox:latest"

// InCI reports whether the tests run in CI (CI=true), where missing parts
// fail tests rather than skip them.
func InCI() bool { return os.Getenv("CI") == "true" }

// Unavailable skips t with a message saying what is missing, or fails it
// under CI=true.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatalf("CI=true and %s", msg)
	}
	t.Skip(msg)
}

// Image is the sandbox image tests run: SANDBOX_IMAGE, else DefaultImage.
func Image() string {
	if img := os.Getenv("SANDBOX_IMAGE"); img != "" {
		return img
	}
	return DefaultImage
}

// NeedDocker skips t (fails it under CI=true) unless the docker CLI is
// installed, the engine answers and the sandbox image exists; in -short
// mode it skips. It returns the image.
func NeedDocker(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("test with real containers skipped in -short mode")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		Unavailable(t, "the docker CLI is not installed (run `make docker`)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		Unavailable(t, "the Docker engine is not reachable (run `make docker`): %v: %s", err, bytes.TrimSpace(out))
	}
	img := Image()
	if out, err := exec.CommandContext(ctx, "docker", "image", "inspect", "--format", "{{.Id}}", img).CombinedOutput(); err != nil {
		Unavailable(t, "sandbox image %s is missing (run `make image`): %v: %s", img, err, bytes.TrimSpace(out))
	}
	return img
}

// DockerRuntimes lists the runtimes the Docker engine has registered
// (runc, and runsc where gVisor is installed).
func DockerRuntimes(t testing.TB) []string {
	t.Helper()
	rts, err := Runtimes()
	if err != nil {
		t.Fatal(err)
	}
	return rts
}

// Runtimes is DockerRuntimes for callers without a test at hand: an
// unreachable engine is an error.
func Runtimes() ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{range $name, $_ := .Runtimes}}{{$name}} {{end}}").Output()
	if err != nil {
		return nil, fmt.Errorf("docker info (runtimes): %w", err)
	}
	return strings.Fields(string(out)), nil
}

// HasRuntime reports whether the engine has the runtime registered.
func HasRuntime(t testing.TB, name string) bool {
	t.Helper()
	return slices.Contains(DockerRuntimes(t), name)
}

// NeedRuntime skips t (fails it under CI=true) unless the engine has the
// runtime registered.
func NeedRuntime(t testing.TB, name string) {
	t.Helper()
	if rts := DockerRuntimes(t); !slices.Contains(rts, name) {
		Unavailable(t, "dockerd has no %s runtime (registered: %v); make runsc builds gVisor and registers runsc, runsc-net and runsc-build", name, rts)
	}
}

// Chromium returns the path of a Chromium binary, skipping t (failing it
// under CI=true) when there is none.
func Chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	Unavailable(t, "chromium is not installed (apt-get install chromium)")
	return ""
}

// WaitServing blocks until the server behind conn reports SERVING on the
// standard health service, failing t after 10 seconds. It uses Watch, so
// no polling or sleeping is needed.
func WaitServing(t testing.TB, conn *grpc.ClientConn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A server that is starting may accept and then reset connections (a
	// restarted container behind docker-proxy does): such a failure is
	// Unavailable, and the watch is opened again until the deadline.
	var last error
	for ctx.Err() == nil {
		w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		for err == nil {
			var resp *healthpb.HealthCheckResponse
			if resp, err = w.Recv(); err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
				return
			}
		}
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("server never reported SERVING: %v", err)
		}
		last = err
	}
	t.Fatalf("server never reported SERVING within 10 s: %v", last)
}
