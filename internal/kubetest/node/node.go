//go:build linux

// Package node runs a real Kubernetes cluster on this machine for tests:
// envtest's API server (internal/kubetest), the real kube-scheduler and
// kube-controller-manager, and real nodes, each a real kubelet with its
// own real containerd (Debian's, through its CRI plugin), Debian's CNI
// plugins and a network namespace of its own, so that a test can lose a
// node and keep the other. Nothing here is a stand-in: Pods are scheduled,
// run, probed, evicted and garbage-collected by the components a cluster
// runs, at the API server's version (scripts/kube-node-assets.sh builds
// them; `make test` passes their directory as KUBE_NODE_ASSETS).
//
// What differs from a production node, and why:
//
//   - There is no registry: the pause image is built here (pause/) and the
//     images a test names are imported from this machine's Docker engine.
//     Each node's image store is kept between runs (under
//     ${SANDBOXD_CACHE:-~/.cache/sandboxd}/kube-node/containerd/<node>),
//     so the sandbox image is imported again only when it changed.
//   - cgroup v1 (this machine's): the kubelet is told failCgroupV1: false
//     and the cgroupfs driver; each node has a cgroup root of its own.
//   - The kubelets authenticate as cluster admins (envtest's certificate).
//     Their own API authenticates and authorises callers as a cluster's
//     does (x509 and webhook; sandboxd reads per-sandbox metrics there),
//     with serving certificates made here (Cluster.KubeletCAFile), but the
//     API server calls none of it: no kubectl exec or logs.
//   - No kube-proxy and no cluster DNS: nothing under test uses Services
//     (a Pod that talks to the API server is given its address).
//   - NetworkPolicies are enforced only when a test asks
//     (Options.NetworkPolicy): by kube-router's firewall (netpol.go), as
//     Debian's bridge plugin enforces none.
//   - The API server is envtest's, on 6443 of an address of its own, but
//     admits Pods as a cluster's does (envtest turns ServiceAccount
//     admission off; here it is on).
//   - No storage provisioner (there is none to download): the cluster's
//     StorageClass (LocalStorageClass) is of static local
//     PersistentVolumes, a pool per node in the node's directory, bound by
//     the real scheduler and PV controller, and emptied and made Available
//     again when released by the cluster's recycler (storage.go), as
//     sig-storage's local-static-provisioner does.
//   - gVisor runs under runc's shim: Debian packages no gVisor shim
//     (containerd-shim-runsc-v1). When runsc is here (gvisor.go: the one
//     `make runsc` builds), each node's containerd has runtime handler
//     runsc beside runc (still the default), its runc being runsccri/,
//     and the cluster a RuntimeClass for it (Cluster.GVisor). runsccri
//     does what runsc does not under runc's shim for a Pod's containers
//     other than its pause container: it gives them the IO the shim made
//     for them (runsc gives them `runsc start`'s, the pipe the shim reads
//     to its end before Start returns: StartContainer hung) and reports
//     their exit (runsc names the sandbox's PID for each).
//
// Addresses: see net.go. Everything a cluster makes (processes, mounts,
// cgroups, namespaces, links) is removed when the test ends, and what a
// killed test process left is removed by the next Start.
//
// This package is test-only; production code must not import it.
package node

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/sandboxd/sandboxd/internal/kubetest"
	"github.com/sandboxd/sandboxd/internal/nettest"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// Options says what cluster to run.
type Options struct {
	// Nodes are the nodes' names (at most three); one if empty.
	Nodes []string
	// Images maps images of this machine's Docker engine to the names
	// the nodes know them by. A name should not be tagged latest: a Pod's
	// image pull policy would then be Always, and there is no registry.
	Images map[string]string
	// NodeMonitorGracePeriod is how long a node may stop reporting before
	// the controller manager marks it NotReady (its own default: 50s).
	NodeMonitorGracePeriod time.Duration
	// LocalVolumes is how many local PersistentVolumes of StorageClass
	// LocalStorageClass each node has (24 if 0): one per claim that a
	// test keeps on the node at once.
	LocalVolumes int
	// NetworkPolicy enforces the cluster's NetworkPolicies on every node
	// (netpol.go), as a CNI that enforces them does; callers check
	// NeedNetworkPolicy first.
	NetworkPolicy bool
	// EgressCNI ends every node's CNI chain with sandboxd's egress plugin
	// (cmd/sandbox-cni, built from this tree), as a cluster that offers
	// networked sandboxes does: every Pod's uid-1000 traffic is then sent
	// to its io sidecar's egress gateway (refused where none runs).
	EgressCNI bool
}

// APIPort is the API server's port on its address.
const APIPort = 6443

// Cluster is a running cluster.
type Cluster struct {
	// RestConfig and Kubeconfig (a file) are a cluster admin's.
	RestConfig *rest.Config
	Kubeconfig string
	Client     kubernetes.Interface
	Nodes      []*Node
	// GVisor is the RuntimeClass whose Pods run under gVisor
	// (GVisorRuntimeClass), "" when runsc is not here (NeedGVisor).
	GVisor string
	// StorageClass is LocalStorageClass: its claims are bound to static
	// local PVs of the nodes, emptied and made Available again once their
	// claim is deleted.
	StorageClass string

	// KubeletCAFile holds the CAs of the kubelets' serving certificates
	// (sandboxd's --kube-kubelet-ca-file).
	KubeletCAFile string

	clientCA    string // the API server's client CA, which the kubelets trust
	noGVisor    string // why GVisor is ""
	runsccri    string // the nodes' runc for runsc ("": no gVisor)
	cniBin      string // the nodes' CNI plugins' directory
	assets      string
	dir         string
	apiLink     netlink.Link
	stopAPI     func() error
	scheduler   *proc
	controllers *proc
	// stopRecycler stops the local PVs' recycler (nil: not started).
	stopRecycler func()
	block        netip.Prefix // the cluster's addresses (net.go)
}

// Node is one running node.
type Node struct {
	Name    string
	Addr    netip.Addr   // its address (the kubelet's node IP)
	PodCIDR netip.Prefix // its Pods' addresses
	// CRI and Images talk to its containerd, as its kubelet does.
	CRI    runtimeapi.RuntimeServiceClient
	Images runtimeapi.ImageServiceClient

	netns           string
	dir             string // configuration, logs, the kubelet's root
	containerdRoot  string // kept between runs when its lock is free
	containerdState string
	runsccri        string // the runsc handler's runc ("": none)
	cniBin          string // its CNI plugins' directory
	egressCNI       bool   // its chain ends with sandbox-cni
	kubeletRoot     string // named after netns, so that sweepStale finds a killed run's
	criSocket       string
	hostEnd         netip.Addr
	hostLink        netlink.Link
	rootLock        *os.File
	conn            *grpc.ClientConn
	containerd      *proc
	kubelet         *proc
	netpol          *proc // kube-router (Options.NetworkPolicy), else nil
	lost            bool
	// clientCA authenticates the API server's users to the kubelet;
	// servingCert is the kubelet's serving certificate and its CA (PEM),
	// made for its address.
	clientCA    string
	servingCert []byte
	// memoryEviction is the kubelet's memory.available hard eviction
	// threshold ("": its default here), set by SetMemoryEviction.
	memoryEviction string
}

// assetsDir is where scripts/kube-node-assets.sh puts the node binaries:
// KUBE_NODE_ASSETS when set, else its cache directory.
func assetsDir() string {
	if dir := os.Getenv("KUBE_NODE_ASSETS"); dir != "" {
		return dir
	}
	return filepath.Join(cacheRoot(), "kube-node", "k8s-"+kubetest.K8sVersion)
}

func cacheRoot() string {
	if c := os.Getenv("SANDBOXD_CACHE"); c != "" {
		return c
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "sandboxd")
}

// Need skips t (fails it under CI=true) unless everything a cluster needs
// is here: root, the API server's and the node's binaries, containerd,
// ctr, nsenter, Debian's CNI plugins and the Docker engine (the images'
// source).
func Need(t testing.TB) {
	t.Helper()
	kubetest.NeedAPIServer(t)
	testenv.NeedDocker(t)
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "a real Kubernetes node needs root (containerd, network namespaces, cgroups)")
	}
	dir := assetsDir()
	for _, b := range []string{"kubelet", "kube-scheduler", "kube-controller-manager"} {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.Mode().Perm()&0o111 == 0 {
			testenv.Unavailable(t, "%s is missing (run scripts/kube-node-assets.sh to build kubelet, kube-scheduler and kube-controller-manager once into %s; `make test` does)", filepath.Join(dir, b), dir)
		}
	}
	for _, b := range []string{"containerd", "ctr", "nsenter", "/usr/lib/cni/bridge", "/usr/lib/cni/host-local"} {
		if _, err := exec.LookPath(b); err != nil {
			testenv.Unavailable(t, "%s is missing (Debian's containerd, util-linux and containernetworking-plugins; `make test-deps` installs them)", b)
		}
	}
}

// owner is this process's lock file (lockOwner), held until it exits.
var (
	ownerOnce sync.Once
	owner     *os.File
	ownerErr  error
)

// Start runs the cluster o asks for until t ends, and waits until every
// node is Ready. Anything missing skips t, or fails it under CI=true.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	Need(t)
	dir := t.TempDir()
	if keep := os.Getenv("KUBE_NODE_KEEP"); keep != "" {
		// For debugging by hand: the components' configuration and logs
		// stay in a directory named in the test's log.
		var err error
		if dir, err = os.MkdirTemp(keep, "cluster-"); err != nil {
			t.Fatal(err)
		}
		t.Logf("node: KUBE_NODE_KEEP: the cluster's files are kept in %s", dir)
	}
	c, err := New(t.Context(), dir, o, t.Logf)
	if c != nil {
		t.Cleanup(func() {
			if t.Failed() {
				c.logEvents(t.Logf)
			}
			c.Close(t.Failed(), t.Logf)
		})
	}
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	return c
}

// New runs the cluster o asks for, its files in dir, and waits until every
// node is Ready; for programs that are not tests (sandbox-bench), which
// call Close when done. On an error, the cluster returned (if any) must
// still be closed.
func New(ctx context.Context, dir string, o Options, logf func(string, ...any)) (*Cluster, error) {
	if len(o.Nodes) == 0 {
		o.Nodes = []string{"node-a"}
	}
	if len(o.Nodes) > maxNodes {
		return nil, fmt.Errorf("%d nodes; at most %d", len(o.Nodes), maxNodes)
	}
	ownerOnce.Do(func() { owner, ownerErr = lockOwner() })
	if ownerErr != nil {
		return nil, ownerErr
	}
	sweepStale(logf)
	c := &Cluster{assets: assetsDir(), dir: dir}

	// The API server, on an address of its own the nodes reach.
	block, err := nettest.FreeBlockErr()
	if err != nil {
		return nil, err
	}
	c.block = block
	tag := fmt.Sprintf("%04x", rand.IntN(1<<16))
	apiAddr := blockAddr(block, 1)
	if c.apiLink, err = makeAPILink("sbxkn"+tag, apiAddr); err != nil {
		return nil, err
	}
	// On 6443, a cluster's usual port, which deploy/kubernetes's
	// NetworkPolicy lets sandboxd's Pods reach (the address is this
	// cluster's alone, so the port is free).
	cfg, clientCA, stopAPI, err := kubetest.StartOn(kubetest.AssetsDir(), apiAddr.String(), APIPort)
	if err != nil {
		return c, err
	}
	c.clientCA = clientCA
	c.stopAPI = stopAPI
	c.RestConfig = cfg
	c.Kubeconfig = filepath.Join(c.dir, "admin.kubeconfig")
	if err := kubetest.WriteKubeconfig(cfg, c.Kubeconfig); err != nil {
		return c, err
	}
	if c.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		return c, err
	}
	if err := c.startControlPlane(o); err != nil {
		return c, err
	}
	pauseBin, err := buildPause(c.dir)
	if err != nil {
		return c, err
	}
	c.cniBin = debianCNI
	if o.EgressCNI {
		if c.cniBin, err = cniBinDir(c.dir); err != nil {
			return c, err
		}
	}
	if runsc, err := runscBinary(); err != nil {
		c.noGVisor = err.Error()
		logf("node: no gVisor RuntimeClass: %v", err)
	} else if c.runsccri, err = c.setUpGVisor(runsc); err != nil {
		return c, err
	}
	for i, name := range o.Nodes {
		n := &Node{
			Name:     name,
			Addr:     blockAddr(block, 2*(i+1)+1),
			hostEnd:  blockAddr(block, 2*(i+1)),
			PodCIDR:  podCIDR(block, i),
			netns:    fmt.Sprintf("%s%d-%s", nsPrefix, os.Getpid(), name),
			dir:      filepath.Join(c.dir, name),
			runsccri: c.runsccri,
			clientCA: c.clientCA,
			cniBin:   c.cniBin, egressCNI: o.EgressCNI,
		}
		c.Nodes = append(c.Nodes, n)
		if err := c.startNode(ctx, n, fmt.Sprintf("sbxkn%s%d", tag, i), pauseBin, o.Images); err != nil {
			return c, fmt.Errorf("node %s: %w", name, err)
		}
	}
	var cas []byte
	for _, n := range c.Nodes {
		if err := c.waitReady(ctx, n, 3*time.Minute); err != nil {
			return c, fmt.Errorf("node %s: %w", n.Name, err)
		}
		cas = append(cas, n.servingCert...)
		if o.NetworkPolicy {
			// After Ready: kube-router reads its node's address from
			// the Node the kubelet registered.
			if why := needNetworkPolicy(); why != "" {
				return c, fmt.Errorf("NetworkPolicy: %s", why)
			}
			if err := c.startNetworkPolicy(ctx, n); err != nil {
				return c, fmt.Errorf("node %s: %w", n.Name, err)
			}
		}
	}
	c.KubeletCAFile = filepath.Join(c.dir, "kubelets-ca.crt")
	if err := os.WriteFile(c.KubeletCAFile, cas, 0o644); err != nil {
		return c, err
	}
	volumes := o.LocalVolumes
	if volumes == 0 {
		volumes = defaultLocalVolumes
	}
	if err := c.makeLocalStorage(ctx, volumes); err != nil {
		return c, err
	}
	c.startRecycler(logf)
	c.StorageClass = LocalStorageClass
	if err := c.WaitNamespace(ctx, metav1.NamespaceDefault); err != nil {
		return c, err
	}
	if c.runsccri != "" {
		if err := c.makeRuntimeClass(ctx); err != nil {
			return c, fmt.Errorf("RuntimeClass %s: %w", GVisorRuntimeClass, err)
		}
		c.GVisor = GVisorRuntimeClass
	}
	return c, nil
}

// startControlPlane starts the scheduler and the controller manager (on
// the host, as cluster admins, without leader election).
func (c *Cluster) startControlPlane(o Options) error {
	grace := o.NodeMonitorGracePeriod
	if grace == 0 {
		grace = 50 * time.Second
	}
	var err error
	c.scheduler, err = startProc("kube-scheduler", filepath.Join(c.dir, "kube-scheduler.log"), "",
		filepath.Join(c.assets, "kube-scheduler"), "--kubeconfig="+c.Kubeconfig, "--leader-elect=false", "--secure-port=0")
	if err != nil {
		return err
	}
	c.controllers, err = startProc("kube-controller-manager", filepath.Join(c.dir, "kube-controller-manager.log"), "",
		filepath.Join(c.assets, "kube-controller-manager"), "--kubeconfig="+c.Kubeconfig, "--leader-elect=false", "--secure-port=0",
		"--use-service-account-credentials=false", "--controllers=*,-serviceaccount-token",
		"--node-monitor-period=2s", "--node-monitor-grace-period="+grace.String())
	return err
}

// buildPause builds the pause program (pause/, beside this file) into dir.
func buildPause(dir string) (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot find the pause program's source")
	}
	out := filepath.Join(dir, "pause")
	cmd := exec.Command("go", "build", "-ldflags=-s", "-o", out, ".")
	cmd.Dir = filepath.Join(filepath.Dir(file), "pause")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build pause: %v: %s", err, b)
	}
	return out, nil
}

// debianCNI holds Debian's CNI plugins.
const debianCNI = "/usr/lib/cni"

// cniBinDir is a directory of Debian's CNI plugins and sandbox-cni, built
// from this tree: containerd 1.6 takes one plugin directory.
func cniBinDir(dir string) (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot find sandbox-cni's source")
	}
	bin := filepath.Join(dir, "cni-bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return "", err
	}
	plugins, err := os.ReadDir(debianCNI)
	if err != nil {
		return "", err
	}
	for _, p := range plugins {
		if err := os.Symlink(filepath.Join(debianCNI, p.Name()), filepath.Join(bin, p.Name())); err != nil {
			return "", err
		}
	}
	cmd := exec.Command("go", "build", "-o", filepath.Join(bin, "sandbox-cni"), "./cmd/sandbox-cni")
	cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..", "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build sandbox-cni: %v: %s", err, b)
	}
	return bin, nil
}

// Block is the cluster's addresses: the API server's, the nodes' and
// their Pods' (sandboxd's --kube-egress-deny in tests).
func (c *Cluster) Block() netip.Prefix { return c.block }

// startNode makes node n's network, starts its containerd, gives it the
// images and starts its kubelet.
func (c *Cluster) startNode(ctx context.Context, n *Node, veth, pauseBin string, images map[string]string) error {
	n.containerdState = filepath.Join("/run", n.netns)
	n.criSocket = filepath.Join(n.containerdState, "containerd.sock")
	n.kubeletRoot = filepath.Join(os.TempDir(), n.netns)
	for _, d := range []string{n.dir, n.kubeletRoot, filepath.Join(n.dir, "cni"), filepath.Join(n.dir, "opt"), filepath.Join(n.dir, "pod-logs"), n.containerdState} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	n.containerdRoot, n.rootLock = keptRoot(n)
	if err := makeNodeNet(n, veth); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(n.dir, "containerd.toml"), []byte(containerdConfig(n)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(n.dir, "cni", "10-bridge.conflist"), []byte(cniConfig(n)), 0o644); err != nil {
		return err
	}
	var err error
	if n.containerd, err = startProc("containerd", filepath.Join(n.dir, "containerd.log"), n.netns,
		"containerd", "--config", filepath.Join(n.dir, "containerd.toml")); err != nil {
		return err
	}
	if n.conn, err = dialCRI(n.criSocket); err != nil {
		return err
	}
	n.CRI, n.Images = runtimeapi.NewRuntimeServiceClient(n.conn), runtimeapi.NewImageServiceClient(n.conn)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := n.waitCRI(wctx); err != nil {
		return err
	}
	ictx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	// What a killed run left in the kept store.
	if err := n.removeAllPods(ictx); err != nil {
		return err
	}
	if err := n.importPause(ictx, pauseBin); err != nil {
		return err
	}
	for ref, name := range images {
		if err := n.importImage(ictx, ref, name); err != nil {
			return err
		}
	}

	if err := makeCgroupRoot(n.netns); err != nil {
		return err
	}
	if err := kubetest.WriteKubeconfig(c.RestConfig, filepath.Join(n.dir, "kubelet.kubeconfig")); err != nil {
		return err
	}
	// A serving certificate for the node's address, as a cluster's
	// kubelets get theirs signed (the kubelet's own would name only its
	// host name).
	cert, key, err := certutil.GenerateSelfSignedCertKey(n.Addr.String(), nil, nil)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(n.dir, "pki"), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(n.dir, "pki", "serving.crt"), cert, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(n.dir, "pki", "serving.key"), key, 0o600); err != nil {
		return err
	}
	n.servingCert = cert
	return c.startKubelet(n)
}

// startKubelet writes node n's kubelet configuration and starts its
// kubelet.
func (c *Cluster) startKubelet(n *Node) error {
	cfg, err := kubeletConfig(n)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(n.dir, "kubelet.yaml"), cfg, 0o644); err != nil {
		return err
	}
	n.kubelet, err = startProc("kubelet", filepath.Join(n.dir, "kubelet.log"), n.netns,
		filepath.Join(c.assets, "kubelet"), "--config="+filepath.Join(n.dir, "kubelet.yaml"), "--kubeconfig="+filepath.Join(n.dir, "kubelet.kubeconfig"),
		"--hostname-override="+n.Name, "--node-ip="+n.Addr.String(), "--root-dir="+n.kubeletRoot,
		"--cert-dir="+filepath.Join(n.dir, "pki"), "--v=1")
	return err
}

// keptRoot is the node's containerd root: the kept one (its image store
// survives the run) when no other test process holds it, else a fresh
// one in the node's directory.
func keptRoot(n *Node) (string, *os.File) {
	root := filepath.Join(cacheRoot(), "kube-node", "containerd", n.Name)
	if err := os.MkdirAll(root, 0o700); err == nil {
		if f, err := os.OpenFile(root+".lock", os.O_CREATE|os.O_RDWR, 0o600); err == nil {
			if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
				return root, f
			}
			f.Close()
		}
	}
	return filepath.Join(n.dir, "containerd"), nil
}

// waitReady waits until node n's Node is Ready.
func (c *Cluster) waitReady(ctx context.Context, n *Node, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	why := "not registered"
	for ctx.Err() == nil {
		if n.kubelet.exited() {
			return fmt.Errorf("the kubelet exited: %v\n%s", n.kubelet.err, n.kubelet.tail())
		}
		node, err := c.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		switch {
		case err == nil:
			for _, cond := range node.Status.Conditions {
				if cond.Type == corev1.NodeReady {
					if cond.Status == corev1.ConditionTrue {
						return nil
					}
					why = cond.Reason + ": " + cond.Message
				}
			}
		case !apierrors.IsNotFound(err):
			why = err.Error()
		}
		time.Sleep(200 * time.Millisecond) // polling the API server
	}
	return fmt.Errorf("not Ready within %v (%s); the kubelet's log ends:\n%s", limit, why, n.kubelet.tail())
}

// Node is the node named name.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// VolumeDir is where the kubelet of node nodeName keeps emptyDir volume vol
// of the Pod with UID uid ("" for an unknown node).
func (c *Cluster) VolumeDir(nodeName, uid, vol string) string {
	n := c.Node(nodeName)
	if n == nil {
		return ""
	}
	return filepath.Join(n.kubeletRoot, "pods", uid, "volumes", "kubernetes.io~empty-dir", vol)
}

// Lose kills node n as a power cut would: its kubelet, its containerd and
// every process of its Pods, at once (SIGKILL). Its Node stops reporting;
// what the cluster makes of that is the controller manager's business.
func (n *Node) Lose() {
	n.lost = true
	n.kubelet.kill()
	n.containerd.kill()
	killNodeProcesses(n.netns, func(string, ...any) {})
}

// Lost reports whether Lose was called.
func (n *Node) Lost() bool { return n.lost }

// Close removes everything the cluster made, whatever state it is in;
// with verbose, it first logs the end of the control plane's logs.
func (c *Cluster) Close(verbose bool, logf func(string, ...any)) {
	if c.stopRecycler != nil {
		c.stopRecycler()
	}
	for _, n := range c.Nodes {
		n.stop(logf)
	}
	if verbose {
		for _, p := range []*proc{c.scheduler, c.controllers} {
			if p != nil {
				logf("node: the end of %s's log:\n%s", p.name, p.tail())
			}
		}
	}
	c.scheduler.stop(5 * time.Second)
	c.controllers.stop(5 * time.Second)
	if c.stopAPI != nil {
		if err := c.stopAPI(); err != nil {
			logf("node: stopping the API server: %v", err)
		}
	}
	if c.apiLink != nil {
		if err := netlink.LinkDel(c.apiLink); err != nil {
			logf("node: remove link %s: %v", c.apiLink.Attrs().Name, err)
		}
	}
}

// logEvents logs the cluster's last events, for a failed test.
func (c *Cluster) logEvents(logf func(string, ...any)) {
	if c.Client == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := c.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	items := list.Items
	if len(items) > 40 {
		items = items[len(items)-40:]
	}
	var b strings.Builder
	for _, e := range items {
		fmt.Fprintf(&b, "%s %s/%s %s: %s\n", e.LastTimestamp.Format(time.TimeOnly), e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
	}
	logf("node: the cluster's last events:\n%s", b.String())
}

// stop stops node n and removes what it made: an orderly kubelet and
// containerd stop (their Pods removed through the CRI, so that their
// mounts and namespaces go), then, whatever is left, killed and unmounted.
func (n *Node) stop(logf func(string, ...any)) {
	n.netpol.stop(10 * time.Second)
	n.kubelet.stop(10 * time.Second)
	if n.CRI != nil && n.containerd != nil && !n.containerd.exited() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := n.removeAllPods(ctx); err != nil {
			logf("node %s: removing its pods: %v", n.Name, err)
		}
		cancel()
	}
	n.containerd.stop(10 * time.Second)
	if n.conn != nil {
		_ = n.conn.Close()
	}
	killNodeProcesses(n.netns, logf)
	unmountUnder(logf, n.dir, n.kubeletRoot, n.containerdState, n.containerdRoot)
	for _, d := range []string{n.containerdState, n.kubeletRoot} {
		if err := os.RemoveAll(d); err != nil {
			logf("node %s: remove %s: %v", n.Name, d, err)
		}
	}
	if n.hostLink != nil {
		if err := netlink.LinkDel(n.hostLink); err != nil {
			logf("node %s: remove veth: %v", n.Name, err)
		}
	}
	if err := netns.DeleteNamed(n.netns); err != nil && !errors.Is(err, syscall.ENOENT) {
		logf("node %s: remove namespace: %v", n.Name, err)
	}
	if n.rootLock != nil {
		n.rootLock.Close()
	}
}

// Logs is the end of the node's kubelet and containerd logs, for failure
// messages.
func (n *Node) Logs() string {
	var b strings.Builder
	for _, p := range []*proc{n.kubelet, n.containerd, n.netpol} {
		if p != nil {
			fmt.Fprintf(&b, "--- %s (node %s):\n%s\n", p.name, n.Name, p.tail())
		}
	}
	return b.String()
}

// WaitNamespace waits until namespace ns, just created, admits Pods: the
// API server admits Pods as a cluster's does (ServiceAccount admission),
// so a namespace's first Pod waits for the default ServiceAccount that
// the controller manager makes.
func (c *Cluster) WaitNamespace(ctx context.Context, ns string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		_, err := c.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("namespace %s has no default ServiceAccount within a minute: %w", ns, err)
		case <-time.After(100 * time.Millisecond): // polling the API server
		}
	}
}
