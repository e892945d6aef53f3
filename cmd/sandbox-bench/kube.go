package main

// The Kubernetes backend's figures: sandboxd replicas with --backend
// kubernetes, measured in the same run as the Docker backend and compared
// with its figures.
//
// There is no cluster here, so the bench (a developer tool, not production
// code) stands up what the end-to-end tests use (e2e/kube_test.go): by
// default (--kube-nodes real) a real cluster on this machine
// (internal/kubetest/node: envtest's API server, the real scheduler and
// controller manager, two real kubelets with containerd and Debian's CNI
// bridge, each node in a network namespace of its own, which sandboxd
// reaches through a veth); with --kube-nodes test, envtest's API server and
// the test kubelet (internal/kubetest/kubelet), which runs the Pods on this
// machine's Docker engine. Either way one machine holds sandboxd, the
// control plane and the nodes.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sandboxd/sandboxd/internal/kubetest"
	"github.com/sandboxd/sandboxd/internal/kubetest/kubelet"
	"github.com/sandboxd/sandboxd/internal/kubetest/node"
	"github.com/sandboxd/sandboxd/ioproto"
)

// kubeMetrics are the rows of the kubernetes phase.
var kubeMetrics = []metric{mKubeWarmP50, mKubeWarmP99, mKubeWarmBase, mKubeCold, mKubePool, mKubeAcquire, mKubeHib, mKubeWake, mKubeSnapTake, mKubeSnapFirst, mKubeFork, mKubeVolFirst, mKubeVolMount, mKubeVolUpload,
	mKubeEgressGetP50, mKubeEgressDownload, mKubeEgressRuleP50, mKubeIngressP50}

// Labels and annotation of the sandbox Pods the bench reads (the kube
// backend's, orchestrator/backend/kube/pod.go).
const (
	kubeLabelPool      = "sandboxd.io/pool"
	kubeLabelSandboxID = "sandboxd.io/sandbox-id"
	kubeLabelManaged   = "app.kubernetes.io/managed-by=sandboxd"
	kubeAnnDeleting    = "sandboxd.io/deleting"
)

// kubeEnv is a running API server with nodes, and what replicas
// need to use it.
type kubeEnv struct {
	cs         kubernetes.Interface
	kl         *kubelet.Kubelet // the test kubelet, or nil
	cluster    *node.Cluster    // the real nodes, or nil
	image      string           // the replicas' --image ("": the bench's)
	baseline   string           // --kube-baseline-image as the nodes know it, or ""
	extra      []string         // more flags for every replica
	stopAPI    func() error
	dir        string
	kubeletDir string // the test kubelet's state: <dir>/<pod UID>/<volume>
	kubeconfig string
	tokenFile  string
	namespace  string
	runtime    string // RuntimeClass for --runtime, or ""
}

// kubernetes measures the Kubernetes backend. Whatever fails, every
// kubernetes row is in the report, with the reason when it is not
// measured, and nothing the phase started is left running.
func (b *bench) kubernetes(ctx context.Context) (err error) {
	defer func() {
		reason := "not measured"
		if err != nil {
			reason = "not measured: " + err.Error()
		}
		b.kubeUnmeasured(reason)
	}()
	switch {
	case !b.cfg.kube:
		b.kubeUnmeasured("not measured: --kube=false")
		return nil
	case b.d == nil:
		b.kubeUnmeasured("not measured: needs a self-started sandboxd (no --addr) to start replicas with --backend kubernetes")
		return nil
	}
	dir := kubetest.AssetsDir()
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return fmt.Errorf("the envtest binary %s is missing: run make envtest-assets (or set KUBEBUILDER_ASSETS)", filepath.Join(dir, name))
		}
	}
	b.progress("starting the API server and the %s nodes", b.cfg.kubeNodes)
	k, err := b.startKube(ctx, dir)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, b.stopKube(k)) }()

	b.progress("kubernetes: two replicas, no pool")
	a, err := b.replica(ctx, k, "bench-a")
	if err != nil {
		return err
	}
	r2, err := b.replica(ctx, k, "bench-b")
	if err != nil {
		a.stop()
		return err
	}
	err = b.kubeNoPool(ctx, k, a, r2)
	err = errors.Join(err, a.stop(), r2.stop())
	if err != nil {
		return err
	}
	if err := b.kubeHibernation(ctx, k); err != nil {
		return err
	}
	if err := b.kubeSnapshots(ctx, k); err != nil {
		return err
	}
	if err := b.kubeVolumes(ctx, k); err != nil {
		return err
	}
	if err := b.kubeNetwork(ctx, k); err != nil {
		return err
	}
	if b.cfg.WarmPool == 0 {
		b.rep.add(row(mKubePool, nan, "", nan, nil, "not measured: --warm-pool 0"))
		return nil
	}
	b.progress("kubernetes: two replicas with --warm-pool %d", b.cfg.WarmPool)
	pool := []string{"--warm-pool", fmt.Sprint(b.cfg.WarmPool)}
	pa, err := b.replica(ctx, k, "bench-pool-a", pool...)
	if err != nil {
		return err
	}
	pb, err := b.replica(ctx, k, "bench-pool-b", pool...)
	if err != nil {
		pa.stop()
		return err
	}
	err = b.kubePool(ctx, k, pa)
	return errors.Join(err, pa.stop(), pb.stop())
}

// kubeUnmeasured adds the kubernetes rows the report lacks, with note.
func (b *bench) kubeUnmeasured(note string) {
	for _, m := range kubeMetrics {
		if find(b.rep, m.key) == nil {
			if m == mKubeAcquire {
				m.name = fmt.Sprintf(m.name, b.cfg.KubeAcquires)
			}
			b.rep.add(row(m, nan, "", nan, nil, note))
		}
	}
}

// find returns the report's row with key, or nil.
func find(rep *Report, key string) *Row {
	for i := range rep.Rows {
		if rep.Rows[i].Key == key {
			return &rep.Rows[i]
		}
	}
	return nil
}

// startKube starts the API server (binaries in dir) and the nodes,
// and creates the namespace and the io sidecars' token Secret, as
// e2e/kube_test.go does.
func (b *bench) startKube(ctx context.Context, dir string) (*kubeEnv, error) {
	k := &kubeEnv{dir: filepath.Join(b.tmp, "kube"), namespace: "sandbox-bench-" + b.runID}
	if err := os.MkdirAll(k.dir, 0o700); err != nil {
		return nil, err
	}
	var rc *rest.Config
	if b.cfg.kubeNodes == "real" {
		if b.cfg.runtime != "" {
			return nil, fmt.Errorf("--runtime %s: on the real nodes the bench runs runc only (their gVisor RuntimeClass is tested by TestKubeRealNode/GVisor, not measured here; --kube-nodes test runs it)", b.cfg.runtime)
		}
		images := map[string]string{b.cfg.image: benchNodeImage}
		baseline := ""
		switch b.cfg.kubeBaseline {
		case "":
		case b.cfg.image: // an A/B of one build: one import
			baseline = benchNodeImage
		default:
			images[b.cfg.kubeBaseline], baseline = benchNodeBaselineImage, benchNodeBaselineImage
		}
		c, err := node.New(ctx, filepath.Join(k.dir, "cluster"), node.Options{
			Nodes:     []string{"node-a", "node-b"},
			Images:    images,
			EgressCNI: true, // networked sandboxes (kubeNetwork)
		}, func(format string, args ...any) { b.progress(format, args...) })
		if err != nil {
			if c != nil {
				c.Close(true, func(format string, args ...any) { b.progress(format, args...) })
			}
			return nil, fmt.Errorf("start the real nodes: %w", err)
		}
		k.cluster, rc, k.image = c, c.RestConfig, benchNodeImage
		k.baseline = baseline
		k.stopAPI = func() error { return nil } // Close stops it
		// A real scheduler counts requests: the bench's users would not
		// fit two nodes of this machine at the default limits (a CPU and
		// 1 GiB each: 100 users ask 100 GiB of two nodes' 48). The
		// figures do not depend on the limits.
		k.extra = []string{"--kube-cpu-request", "0.01", "--default-memory", "256m"}
	} else {
		var err error
		var stopAPI func() error
		if rc, stopAPI, err = kubetest.StartAt(dir); err != nil {
			return nil, err
		}
		k.stopAPI = stopAPI
		k.kubeletDir = filepath.Join(k.dir, "kubelet")
		k.baseline = b.cfg.kubeBaseline // the test kubelet runs Docker's images
	}
	k.kubeconfig = filepath.Join(k.dir, "kubeconfig")
	k.tokenFile = filepath.Join(k.dir, "io-token")
	fail := func(err error) (*kubeEnv, error) { return nil, errors.Join(err, b.stopKube(k)) }
	var err error
	if k.cs, err = kubernetes.NewForConfig(rc); err != nil {
		return fail(err)
	}
	if err := kubetest.WriteKubeconfig(rc, k.kubeconfig); err != nil {
		return fail(err)
	}
	token := "sandbox-bench-io-token-" + b.runID + "-" + randomID() + randomID()
	if err := os.WriteFile(k.tokenFile, []byte(token+"\n"), 0o600); err != nil {
		return fail(err)
	}
	if _, err := k.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: k.namespace}}, metav1.CreateOptions{}); err != nil {
		return fail(fmt.Errorf("create namespace %s: %w", k.namespace, err))
	}
	if k.cluster != nil {
		if err := k.cluster.WaitNamespace(ctx, k.namespace); err != nil {
			return fail(err)
		}
	}
	if _, err := k.cs.CoreV1().Secrets(k.namespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "sandboxd-io-token"},
		StringData: map[string]string{"token": token},
	}, metav1.CreateOptions{}); err != nil {
		return fail(fmt.Errorf("create the io token secret: %w", err))
	}
	// --runtime (e.g. runsc) becomes a RuntimeClass whose handler the
	// kubelet passes to Docker, as a cluster's would to its runtime.
	if rt := b.cfg.runtime; rt != "" {
		if _, err := k.cs.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: rt}, Handler: rt}, metav1.CreateOptions{}); err != nil {
			return fail(fmt.Errorf("create RuntimeClass %s: %w", rt, err))
		}
		k.runtime = rt
	}
	if k.cluster != nil {
		return k, nil
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if k.kl, err = kubelet.Start(sctx, kubelet.Config{RestConfig: rc, StateDir: k.kubeletDir}); err != nil {
		return fail(fmt.Errorf("start the test kubelet: %w", err))
	}
	return k, nil
}

// hopPath says how sandboxd reaches a Pod's io sidecar here, for notes.
func (k *kubeEnv) hopPath() string {
	if k.cluster != nil {
		return "through a veth into the node's network namespace and its CNI bridge"
	}
	return "over loopback, through Docker's userland proxy"
}

// benchNodeBaselineImage is the name the real nodes know
// --kube-baseline-image by.
const benchNodeBaselineImage = "sandboxd.bench/sandbox:baseline"

// benchNodeImage is the name the real nodes know the sandbox image by: not
// tagged latest, whose pull policy would be Always (there is no registry).
const benchNodeImage = "sandboxd.test/sandbox:bench"

// volumeDir is the directory on this machine holding volume vol of Pod p.
func (k *kubeEnv) volumeDir(p *corev1.Pod, vol string) string {
	if k.cluster != nil {
		return k.cluster.VolumeDir(p.Spec.NodeName, string(p.UID), vol)
	}
	return filepath.Join(k.kubeletDir, string(p.UID), vol)
}

// stopKube stops the kubelet, which removes every container it made, and
// the API server, and checks that no Pod container is left.
func (b *bench) stopKube(k *kubeEnv) error {
	if k.cluster != nil {
		k.cluster.Close(false, func(format string, args ...any) { b.progress(format, args...) })
		return nil
	}
	var errs []error
	if k.kl != nil {
		k.kl.Stop()
	}
	if err := k.stopAPI(); err != nil {
		errs = append(errs, fmt.Errorf("stop the API server: %w", err))
	}
	// The safety net: the kubelet's Stop removes its containers, and its
	// labels name the bench's own namespace.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "ps", "-aq", "--filter", "label="+kubelet.LabelPodNS+"="+k.namespace).Output()
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("list the kubelet's containers: %w", err))...)
	}
	if left := strings.Fields(string(out)); len(left) > 0 {
		errs = append(errs, fmt.Errorf("%d pod containers were left after the kubelet stopped (removed now)", len(left)))
		if out, err := exec.CommandContext(ctx, "docker", append([]string{"rm", "-f", "-v"}, left...)...).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("docker rm: %v: %s", err, strings.TrimSpace(string(out))))
		}
	}
	return errors.Join(errs...)
}

// replica is one sandboxd replica on k's API server, with a client.
type replica struct {
	d *daemon
	c *client
}

// replica starts sandboxd replica name, with the Docker backend's defaults
// otherwise (no --default-cpus etc.), so that the figures compare.
func (b *bench) replica(ctx context.Context, k *kubeEnv, name string, extra ...string) (*replica, error) {
	return b.replicaOf(ctx, k, name, cmp.Or(k.image, b.cfg.image), extra...)
}

// replicaOf is replica with its Pods running image.
func (b *bench) replicaOf(ctx context.Context, k *kubeEnv, name, image string, extra ...string) (*replica, error) {
	cfg := daemonConfig{binary: b.dcfg.binary, stateDir: filepath.Join(k.dir, "state-"+name), image: image}
	cfg.extra = append([]string{"--backend", "kubernetes", "--kubeconfig", k.kubeconfig, "--kube-namespace", k.namespace,
		"--kube-io-token-file", k.tokenFile, "--kube-identity", name, "--kube-leader-lease", "3s"}, k.extra...)
	cfg.extra = append(cfg.extra, extra...)
	if k.runtime != "" {
		cfg.extra = append(cfg.extra, "--kube-runtime-class", k.runtime)
	}
	d, err := startDaemon(ctx, cfg, "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("start replica %s: %w", name, err)
	}
	c, err := dial(d.addr, b.runID)
	if err != nil {
		d.kill()
		return nil, err
	}
	return &replica{d: d, c: c}, nil
}

func (r *replica) stop() error {
	r.c.close()
	return r.d.stop()
}

// kubeWarm measures the warm round trip, through a replica of its own
// whose sandboxes request a whole CPU (the backend's default, as the Docker
// backend's sandboxes have a CPU's weight): the replicas of the other
// figures request a hundredth of one so that a hundred fit the nodes, and
// a Pod that asks so little of the CPU waits behind everything else on a
// busy node (its cgroup's share is a hundredth), which measures the node's
// load rather than the hop. The Docker backend's round trip, its peer, is
// measured in the same loop, and with --kube-baseline-image so is a
// second replica's whose Pods run that image: each iteration runs the
// command in every sandbox, in rotating order, so that the machine's load
// weighs on all alike.
func (b *bench) kubeWarm(ctx context.Context, k *kubeEnv) (err error) {
	cpu := []string{"--kube-cpu-request", "1"}
	a, err := b.replica(ctx, k, "bench-warm", cpu...)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, a.stop()) }()
	sb, err := a.c.acquire(ctx, b.user("kube-warm"), nil)
	if err != nil {
		return err
	}
	if _, err := a.c.exec(ctx, sb, "python", "x = 21"); err != nil {
		return err
	}
	var base *replica
	var baseSB string
	if k.baseline != "" {
		if base, err = b.replicaOf(ctx, k, "bench-baseline", k.baseline, cpu...); err != nil {
			return err
		}
		defer func() { err = errors.Join(err, base.stop()) }()
		if baseSB, err = base.c.acquire(ctx, b.user("kube-warm-baseline"), nil); err != nil {
			return err
		}
		if _, err := base.c.exec(ctx, baseSB, "python", "x = 21"); err != nil {
			return err
		}
	}
	// The Docker backend's sandbox, measured in the same loop: the
	// figures compare at the same load.
	dsb, err := b.newSandbox(ctx, "kube-warm-docker", nil)
	if err != nil {
		return err
	}
	if _, err := b.c.exec(ctx, dsb, "python", "x = 21"); err != nil {
		return err
	}
	type measured struct {
		c   *client
		sb  string
		lat latencies
	}
	kube, docker := &measured{c: a.c, sb: sb}, &measured{c: b.c, sb: dsb}
	all := []*measured{kube, docker}
	var baseline *measured
	if base != nil {
		baseline = &measured{c: base.c, sb: baseSB}
		all = append(all, baseline)
	}
	// Each iteration runs the command once in each sandbox, starting
	// from a different one each time, so that none is always first.
	for i := range b.cfg.Warmup + b.cfg.Iterations {
		for j := range all {
			t := all[(i+j)%len(all)]
			d, err := t.c.expect(ctx, t.sb, "x * 2", "42")
			if err != nil {
				return err
			}
			if i >= b.cfg.Warmup {
				t.lat = append(t.lat, d)
			}
		}
	}
	warm, dockerP50, dockerP99 := kube.lat, ms(docker.lat.percentile(50)), ms(docker.lat.percentile(99))
	if err := b.c.delete(ctx, dsb); err != nil {
		return fmt.Errorf("delete sandbox %s: %w", dsb, err)
	}
	warmTarget := atMost(dockerP50+0.5, "≤ the Docker backend's + 0.5 ms")
	hop := fmt.Sprintf("; the sidecar hop adds %s ms at p50", fmtNum(ms(warm.percentile(50))-dockerP50))
	if !math.IsNaN(b.warmP50) {
		hop += fmt.Sprintf(" (the Docker backend's phase before: %s ms)", fmtNum(b.warmP50))
	}
	b.rep.add(row(mKubeWarmP50, ms(warm.percentile(50)), "Docker backend (same run, interleaved, p50)", dockerP50, warmTarget,
		fmt.Sprintf("over %d round trips through one replica, interleaved with as many through the Docker backend's sandboxd: sandboxd → io sidecar (gRPC %s) → /io in the Pod%s", b.cfg.Iterations, k.hopPath(), hop)))
	b.rep.add(row(mKubeWarmP99, ms(warm.percentile(99)), "Docker backend (same run, interleaved, p99)", dockerP99, nil, ""))
	if base != nil {
		b.rep.add(row(mKubeWarmBase, ms(warm.percentile(50)), "--kube-baseline-image "+b.cfg.kubeBaseline+" (same run, interleaved, p50)", ms(baseline.lat.percentile(50)), nil,
			fmt.Sprintf("over %d round trips each, interleaved, through two replicas of this sandboxd, one per image; p99 %s vs %s ms",
				b.cfg.Iterations, fmtNum(ms(warm.percentile(99))), fmtNum(ms(baseline.lat.percentile(99))))))
		if err := base.c.delete(ctx, baseSB); err != nil {
			return fmt.Errorf("delete sandbox %s: %w", baseSB, err)
		}
	} else {
		b.rep.add(row(mKubeWarmBase, nan, "", nan, nil, "not measured: no --kube-baseline-image"))
	}
	if err := a.c.delete(ctx, sb); err != nil {
		return fmt.Errorf("delete sandbox %s: %w", sb, err)
	}
	return nil
}

// kubeNoPool measures the warm round trip (kubeWarm), then, through
// replicas without a warm pool, a new user's first result and many new
// users at once; it deletes the sandboxes it made and waits for their Pods
// to be gone.
func (b *bench) kubeNoPool(ctx context.Context, k *kubeEnv, a, r2 *replica) error {
	if err := b.kubeWarm(ctx, k); err != nil {
		return err
	}

	// Cold: a replica without a pool creates a Pod for each new user, as
	// the Docker figure's sandboxd (no pool) creates a container.
	var total, acquire latencies
	for i := range b.cfg.Cold {
		start := time.Now()
		sb, err := a.c.acquire(ctx, b.user(fmt.Sprintf("kube-cold-%d", i)), nil)
		acq := time.Since(start)
		if err != nil {
			return err
		}
		if _, err := a.c.expect(ctx, sb, "1 + 1", "2"); err != nil {
			return err
		}
		total, acquire = append(total, time.Since(start)), append(acquire, acq)
		if err := a.c.delete(ctx, sb); err != nil {
			return fmt.Errorf("delete sandbox %s: %w", sb, err)
		}
	}
	b.rep.add(row(mKubeCold, ms(total.percentile(50)), "Docker backend, no pool (same run, p50)", b.coldP50, nil,
		fmt.Sprintf("over %d new users; AcquireSandbox alone (create the Pod, wait until it is Ready) p50 %s ms; max %s ms",
			b.cfg.Cold, fmtNum(ms(acquire.percentile(50))), fmtNum(ms(total.percentile(100))))))
	if err := waitPodsGone(ctx, k, 2*time.Minute); err != nil {
		return err
	}

	// Many new users at once, half through each replica.
	n := b.cfg.KubeAcquires
	b.progress("kubernetes: %d new users acquiring at once", n)
	ids := make([]string, n)
	calls := make(latencies, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			c := []*client{a.c, r2.c}[i%2]
			<-gate
			start := time.Now()
			ids[i], errs[i] = c.acquire(ctx, b.user(fmt.Sprintf("kube-many-%d", i)), nil)
			calls[i] = time.Since(start)
		})
	}
	start := time.Now()
	close(gate)
	wg.Wait()
	wall := time.Since(start)
	var made []string
	for _, id := range ids {
		if id != "" {
			made = append(made, id)
		}
	}
	deleteAll(a.c, made, b.progress)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%d new users acquiring at once: %w", n, err)
	}
	m := mKubeAcquire
	m.name = fmt.Sprintf(m.name, n)
	b.rep.add(row(m, ms(wall), "", nan, nil, fmt.Sprintf("each AcquireSandbox (a new Pod, Ready) p50 %s ms, p99 %s ms; %d users alternating between two replicas",
		fmtNum(ms(calls.percentile(50))), fmtNum(ms(calls.percentile(99))), n)))
	return waitPodsGone(ctx, k, 3*time.Minute)
}

// kubePool measures a new user's first result from the warm pool through
// replica a: before each new user it waits until the pool is full again
// and every pool Pod's Python runs, so each figure is what a user arriving
// at a steady pool gets. (The kube backend runs no warm-up command in a
// pool Pod, unlike the Docker backend: its first command pays what the
// driver's first command costs.)
func (b *bench) kubePool(ctx context.Context, k *kubeEnv, a *replica) error {
	var first latencies
	var claimed []string
	defer func() { deleteAll(a.c, claimed, b.progress) }()
	fromPool := 0
	for i := range b.cfg.PoolAcquisitions {
		pool, err := waitPool(ctx, k, b.cfg.WarmPool, 3*time.Minute)
		if err != nil {
			return err
		}
		start := time.Now()
		sb, err := a.c.acquire(ctx, b.user(fmt.Sprintf("kube-pool-%d", i)), nil)
		if err != nil {
			return err
		}
		claimed = append(claimed, sb)
		if _, err := a.c.expect(ctx, sb, "1 + 1", "2"); err != nil {
			return err
		}
		first = append(first, time.Since(start))
		if pool[sb] {
			fromPool++
		}
	}
	note := fmt.Sprintf("replicas with --warm-pool %d, %d new users, each after the pool refilled; %d served from the pool; max %s ms",
		b.cfg.WarmPool, b.cfg.PoolAcquisitions, fromPool, fmtNum(ms(first.percentile(100))))
	if !math.IsNaN(b.poolP50) {
		note += fmt.Sprintf("; the Docker backend's warm-pool figure: %s ms", fmtNum(b.poolP50))
	}
	b.rep.add(row(mKubePool, ms(first.percentile(50)), "kubernetes, no pool (same run, p50)", valueOf(b.rep, mKubeCold.key), nil, note))
	return nil
}

// waitPool waits until at least n warm-pool Pods are Ready with Python
// running in their sandbox container (the driver's /io/driver.json, in
// the kubelet's volume directory, names its kernel) and returns their
// sandbox IDs.
func waitPool(ctx context.Context, k *kubeEnv, n int, limit time.Duration) (map[string]bool, error) {
	deadline := time.Now().Add(limit)
	for {
		list, err := k.cs.CoreV1().Pods(k.namespace).List(ctx, metav1.ListOptions{LabelSelector: kubeLabelPool + "=true"})
		if err != nil {
			return nil, err
		}
		ready := map[string]bool{}
		for _, p := range list.Items {
			if p.DeletionTimestamp != nil || p.Annotations[kubeAnnDeleting] != "" || !podReady(&p) {
				continue
			}
			var st ioproto.DriverStatus
			if ioproto.ReadJSONFile(filepath.Join(k.volumeDir(&p, "io"), ioproto.DriverStatusFile), &st) == nil && st.KernelPID != 0 {
				ready[p.Labels[kubeLabelSandboxID]] = true
			}
		}
		if len(ready) >= n {
			return ready, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("only %d of %d warm-pool pods were ready after %v", len(ready), n, limit)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// waitPodsGone waits until the namespace holds no sandbox Pod, so that
// the next figure does not pay for the teardown of the last one's.
func waitPodsGone(ctx context.Context, k *kubeEnv, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		list, err := k.cs.CoreV1().Pods(k.namespace).List(ctx, metav1.ListOptions{LabelSelector: kubeLabelManaged})
		if err != nil {
			return err
		}
		if len(list.Items) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d sandbox pods still exist %v after their sandboxes were deleted", len(list.Items), limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// podReady reports a Pod's Ready condition.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// valueOf is the value of the report's row key, NaN when not measured.
func valueOf(rep *Report, key string) float64 {
	if r := find(rep, key); r != nil && r.Value != nil {
		return *r.Value
	}
	return nan
}
