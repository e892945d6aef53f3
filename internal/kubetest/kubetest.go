// Package kubetest runs a real Kubernetes API server (kube-apiserver and
// etcd, through controller-runtime's envtest) for tests of code that talks
// to Kubernetes. There is no kubelet: objects are stored, validated,
// admitted and watched exactly as on a cluster, but no Pod ever runs.
//
// The binaries are built from Go modules by scripts/envtest-assets.sh
// (`make envtest-assets`) into a versioned cache outside the repository;
// KUBEBUILDER_ASSETS, which `make test` sets, names another directory. A
// test that needs the API server follows internal/testenv's rule: it skips
// when the binaries are missing, and fails under CI=true.
//
// This package is test-only; production code must not import it.
package kubetest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// K8sVersion is the Kubernetes version scripts/envtest-assets.sh builds by
// default (its K8S_VERSION); it names the cache directory AssetsDir falls
// back to and pairs with the k8s.io/client-go release in go.mod (v0.37.x).
const K8sVersion = "1.37.2"

// startTimeout bounds the start of etcd and of kube-apiserver, each. Both
// usually come up in a few seconds; the margin is for a loaded two-core
// machine, where a timeout would otherwise make tests flaky.
const startTimeout = 90 * time.Second

// AssetsDir is the directory holding kube-apiserver and etcd:
// KUBEBUILDER_ASSETS when set, else the cache scripts/envtest-assets.sh
// fills, ${SANDBOXD_CACHE:-$HOME/.cache/sandboxd}/envtest/k8s-<K8sVersion>.
func AssetsDir() string {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	return cacheDir()
}

// cacheDir is where scripts/envtest-assets.sh puts the binaries.
func cacheDir() string {
	cache := os.Getenv("SANDBOXD_CACHE")
	if cache == "" {
		// Without a home directory this is relative and NeedAPIServer
		// reports the binaries missing, naming the path.
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "sandboxd")
	}
	return filepath.Join(cache, "envtest", "k8s-"+K8sVersion)
}

// NeedAPIServer skips t (fails it under CI=true) unless kube-apiserver and
// etcd are executables in AssetsDir; in -short mode it skips. It returns
// the directory.
func NeedAPIServer(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("test with a real Kubernetes API server skipped in -short mode")
	}
	dir := AssetsDir()
	for _, name := range []string{"kube-apiserver", "etcd"} {
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			testenv.Unavailable(t, "the envtest binary %s is missing (run `make envtest-assets` to build kube-apiserver and etcd once into %s; `make test` passes that directory as KUBEBUILDER_ASSETS)", p, cacheDir())
		}
	}
	return dir
}

// quietLogs silences controller-runtime's global logger once: envtest logs
// through it, and without a logger controller-runtime prints a warning with
// a stack trace. Start reports envtest's errors itself.
var quietLogs sync.Once

// Start starts a fresh API server (its own etcd, data in temporary
// directories) for t and returns an admin (system:masters) client config
// for it; it is stopped and its data removed when t ends. A missing binary
// skips or fails t as NeedAPIServer does; a server that does not come up
// fails t with the tail of its output.
func Start(t testing.TB) *rest.Config {
	t.Helper()
	dir := NeedAPIServer(t)
	cfg, stop, err := StartAt(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("stopping the envtest API server: %v", err)
		}
	})
	return cfg
}

// StartAt starts a fresh API server from the binaries in dir, for code
// that is not a test (sandbox-bench); stop stops it and removes its data.
func StartAt(dir string) (cfg *rest.Config, stop func() error, err error) {
	cfg, _, stop, err = StartOn(dir, "", 0)
	return cfg, stop, err
}

// StartOn is StartAt with the API server bound to address:port instead of
// a free loopback port (port 0: a free port of address): a real node's
// kubelet, in a network namespace of its own, cannot reach the host's
// loopback. The serving certificate names the address. clientCA is the
// file of the CA that signs the API server's client certificates (cfg's
// among them), which a kubelet trusts to authenticate cfg's user. With an
// address, Pods are admitted as on a cluster (ServiceAccount admission).
func StartOn(dir, address string, port int) (cfg *rest.Config, clientCA string, stop func() error, err error) {
	quietLogs.Do(func() { ctrllog.SetLogger(logr.Discard()) })

	// The servers' output is kept (its tail) for the error message only:
	// etcd logs a lot, so each has its own buffer.
	apiOut, etcdOut := &tailBuffer{max: 16 << 10}, &tailBuffer{max: 4 << 10}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    dir,
		ControlPlaneStartTimeout: startTimeout,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	api := env.ControlPlane.GetAPIServer()
	api.Path = filepath.Join(dir, "kube-apiserver")
	api.Out, api.Err = apiOut, apiOut
	if address != "" {
		if port == 0 {
			if port, err = freePort(address); err != nil {
				return nil, "", nil, err
			}
		}
		api.SecureServing.Address, api.SecureServing.Port = address, strconv.Itoa(port)
		// Nodes run this server's Pods: admit them as a cluster does,
		// with the ServiceAccount plugin envtest turns off, which gives
		// a Pod its service account's token unless it opts out.
		api.Configure().Disable("disable-admission-plugins")
	}
	env.ControlPlane.Etcd = &envtest.Etcd{Path: filepath.Join(dir, "etcd"), Out: etcdOut, Err: etcdOut}

	cfg, err = env.Start()
	if err != nil {
		// Start may leave a half-started control plane behind.
		_ = env.Stop()
		return nil, "", nil, fmt.Errorf("starting the envtest API server from %s: %v\nlast output of kube-apiserver:\n%s\nlast output of etcd:\n%s", dir, err, apiOut, etcdOut)
	}
	// Where envtest's certificate authenticator keeps its CA
	// (controlplane.CertAuthn).
	return cfg, filepath.Join(api.CertDir, "client-cert-auth-ca.crt"), env.Stop, nil
}

// freePort is a TCP port free on address now.
func freePort(address string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(address, "0"))
	if err != nil {
		return 0, fmt.Errorf("a free port on %s for the API server: %w", address, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tailBuffer keeps the last max bytes written to it, for error messages;
// the API server and etcd write to it from their own goroutines.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (w *tailBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = append(w.b, p...)
	if over := len(w.b) - w.max; over > 0 {
		w.b = append(w.b[:0], w.b[over:]...)
	}
	return len(p), nil
}

func (w *tailBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.b) == 0 {
		return "(none)"
	}
	return string(w.b)
}
