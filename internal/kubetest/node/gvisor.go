//go:build linux

package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// GVisorRuntimeClass is the RuntimeClass a cluster makes when gVisor is
// here (Cluster.GVisor): Pods naming it run under runsc, through the
// nodes' runtime handler runscHandler.
const GVisorRuntimeClass = "gvisor"

// runscHandler is the nodes' containerd runtime handler for gVisor.
const runscHandler = "runsc"

// runscBinary is the runsc the nodes run: KUBE_NODE_RUNSC when set, else
// the one the Docker engine runs as runsc-net (`make runsc` builds it,
// gVisor at a pinned version, the binary of all three of the engine's
// gVisor runtimes, whose default platform is systrap: Debian's, of
// 2022-12, refuses --network=sandbox on this machine's kernel, and a
// Pod's gVisor needs a network stack for its io sidecar's port).
func runscBinary() (string, error) {
	if p := os.Getenv("KUBE_NODE_RUNSC"); p != "" {
		return p, executable(p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "info", "--format", `{{with index .Runtimes "runsc-net"}}{{.Path}}{{end}}`).Output()
	if err != nil {
		return "", fmt.Errorf("docker info (runtimes): %w", err)
	}
	p := strings.TrimSpace(string(out))
	if p == "" {
		return "", errors.New("the Docker engine has no runsc-net runtime (run `make runsc`, or set KUBE_NODE_RUNSC)")
	}
	return p, executable(p)
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err == nil && fi.Mode().Perm()&0o111 == 0 {
		err = fmt.Errorf("%s is not executable", p)
	}
	return err
}

// setUpGVisor builds runsccri (the nodes' runc for runsc: see its package
// doc) into the cluster's directory with its arguments beside it, and
// returns its path. The Pods' gVisor has its own network stack on the
// Pod's interface (--network=sandbox). KUBE_NODE_RUNSC_DEBUG=1 has runsc
// write debug logs, one directory per container, under the cluster's
// directory (runsc/).
func (c *Cluster) setUpGVisor(runsc string) (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot find runsccri's source")
	}
	out := filepath.Join(c.dir, "runsccri")
	cmd := exec.Command("go", "build", "-ldflags=-s", "-o", out, ".")
	cmd.Dir = filepath.Join(filepath.Dir(file), "runsccri")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build runsccri: %v: %s", err, b)
	}
	args := []string{runsc, "--network=sandbox"}
	if os.Getenv("KUBE_NODE_RUNSC_DEBUG") == "1" {
		args = append(args, "--debug", "--debug-log="+filepath.Join(c.dir, "runsc")+"/%ID%/")
	}
	if err := os.WriteFile(out+".args", []byte(strings.Join(args, "\n")+"\n"), 0o644); err != nil {
		return "", err
	}
	return out, nil
}

// makeRuntimeClass makes the gVisor RuntimeClass.
func (c *Cluster) makeRuntimeClass(ctx context.Context) error {
	_, err := c.Client.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{
		ObjectMeta: metav1.ObjectMeta{Name: GVisorRuntimeClass},
		Handler:    runscHandler,
	}, metav1.CreateOptions{})
	return err
}

// NeedGVisor skips t (fails it under CI=true) unless the cluster runs
// gVisor, and returns its RuntimeClass.
func (c *Cluster) NeedGVisor(t testing.TB) string {
	t.Helper()
	if c.GVisor == "" {
		testenv.Unavailable(t, "the cluster has no gVisor: %s", c.noGVisor)
	}
	return c.GVisor
}
