package kubelet

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/client"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Roles of a Pod's Docker containers (LabelRole).
const (
	rolePause   = "pause"
	roleInit    = "init"    // a regular init container, run to completion
	roleSidecar = "sidecar" // an init container with restartPolicy Always
	roleMain    = "main"
)

// tick paces probes and the retry of failed steps while a Pod runs.
const tick = 250 * time.Millisecond

// reconcileEvery paces the check of running containers against Docker
// (see reconcile).
const reconcileEvery = 2 * time.Second

// ctr is one container of the Pod spec and the state of its current
// Docker container (a restart creates a new one, as the kubelet does).
type ctr struct {
	spec *corev1.Container
	role string

	id        string // current Docker container, "" when none
	imageID   string
	instances int // Docker containers started so far
	oomID     string

	restartCount     int32
	state, lastState corev1.ContainerState
	lastTerm         *corev1.ContainerStateTerminated
	ready, started   bool
	done             bool      // finished, never to run again
	retryAt          time.Time // when a restart or a failed start is retried
	failures         int       // failed starts in a row

	probeSuccesses, probeFailures int
	nextProbe                     time.Time
}

func (c *ctr) running() bool { return c.state.Running != nil }

// podWorker runs one Pod: it owns the Pod's Docker containers, reacts to
// their events and to the Pod's updates, and writes the Pod's status.
type podWorker struct {
	k        *Kubelet
	uid      types.UID
	ns, name string
	log      *slog.Logger
	finished atomic.Bool

	// mu guards everything below; the worker holds it while it works, the
	// exported helpers briefly.
	mu            sync.Mutex
	ip            netip.Addr
	pauseID       string
	bridgeIP      string
	runtime       string
	inits, mains  []*ctr
	ctrs          map[string]*ctr
	phase         corev1.PodPhase
	initialized   bool
	startTime     metav1.Time
	setupErr      string
	setupFailures int
	setupRetryAt  time.Time
	lastStatus    *corev1.PodStatus
	condSince     map[corev1.PodConditionType]condSince
	released      bool
	nextReconcile time.Time
	// reason and message are the Pod's status.reason and message, set by
	// an eviction.
	reason, message string
	evicted         bool

	podMu sync.Mutex
	pod   *corev1.Pod
	gone  bool
	poke  chan struct{}

	evMu sync.Mutex
	evs  []events.Message
}

type condSince struct {
	status corev1.ConditionStatus
	at     metav1.Time
}

func newPodWorker(k *Kubelet, pod *corev1.Pod) *podWorker {
	w := &podWorker{
		k:         k,
		uid:       pod.UID,
		ns:        pod.Namespace,
		name:      pod.Name,
		log:       k.log.With("pod", pod.Namespace+"/"+pod.Name),
		ctrs:      map[string]*ctr{},
		phase:     corev1.PodPending,
		startTime: metav1.Now(),
		condSince: map[corev1.PodConditionType]condSince{},
		pod:       pod,
		poke:      make(chan struct{}, 1),
	}
	for i := range pod.Spec.InitContainers {
		c := &ctr{spec: pod.Spec.InitContainers[i].DeepCopy(), role: roleInit}
		if p := c.spec.RestartPolicy; p != nil && *p == corev1.ContainerRestartPolicyAlways {
			c.role = roleSidecar
		}
		w.inits = append(w.inits, c)
		w.ctrs[c.spec.Name] = c
	}
	for i := range pod.Spec.Containers {
		c := &ctr{spec: pod.Spec.Containers[i].DeepCopy(), role: roleMain}
		w.mains = append(w.mains, c)
		w.ctrs[c.spec.Name] = c
	}
	return w
}

func (w *podWorker) wake() {
	select {
	case w.poke <- struct{}{}:
	default:
	}
}

// setPod hands the worker the Pod's latest version.
func (w *podWorker) setPod(pod *corev1.Pod) {
	w.podMu.Lock()
	w.pod = pod
	w.podMu.Unlock()
	w.wake()
}

// setGone tells the worker the Pod object no longer exists.
func (w *podWorker) setGone() {
	w.podMu.Lock()
	w.gone = true
	w.podMu.Unlock()
	w.wake()
}

func (w *podWorker) current() (*corev1.Pod, bool) {
	w.podMu.Lock()
	defer w.podMu.Unlock()
	return w.pod, w.gone
}

// event queues a Docker event of one of the Pod's containers.
func (w *podWorker) event(m events.Message) {
	w.evMu.Lock()
	w.evs = append(w.evs, m)
	w.evMu.Unlock()
	w.wake()
}

func (w *podWorker) isFinished() bool { return w.finished.Load() }

// run is the worker's loop: sync, then wait for a change, a tick or the
// next retry.
func (w *podWorker) run() {
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for {
		w.mu.Lock()
		w.sync()
		w.mu.Unlock()
		if w.finished.Load() {
			return
		}
		select {
		case <-w.k.ctx.Done():
			return
		case <-w.poke:
		case <-ticker.C:
		}
	}
}

// sync moves the Pod one step towards what its spec and state ask for and
// writes its status.
func (w *podWorker) sync() {
	// A sync that has begun finishes even if Stop cancels the kubelet's
	// context: Stop waits for it, then removes every container, including
	// one whose creation was under way (a cancelled create may still
	// create it in dockerd, after Stop looked).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.k.ctx), 2*time.Minute)
	defer cancel()
	pod, gone := w.current()
	w.drainEvents(ctx, pod)
	if gone || pod.DeletionTimestamp != nil {
		w.teardown(pod, gone)
		return
	}
	if w.reason == "Evicted" && !w.evicted {
		w.evicted = true
		w.log.Info("pod evicted", "message", w.message)
		w.stopContainers(w.mains, gracePeriod(pod))
		w.stopContainers(w.inits, 2*time.Second)
		w.phase = corev1.PodFailed
	}
	if w.terminal() {
		w.writeStatus(pod)
		return
	}
	if w.pauseID == "" {
		if time.Now().Before(w.setupRetryAt) {
			return
		}
		if err := w.setup(ctx, pod); err != nil {
			if ctx.Err() != nil {
				return
			}
			w.setupFailures++
			w.setupErr = err.Error()
			w.setupRetryAt = time.Now().Add(backoff(w.setupFailures))
			w.log.Error("pod sandbox", "err", err)
			w.writeStatus(pod)
			return
		}
		w.setupErr = ""
	}
	w.probe()
	w.reconcile(ctx, pod)

	initFailed := false
	if !w.initialized {
		w.initialized = true
		for _, c := range w.inits {
			if c.role == roleSidecar {
				w.ensureRunning(ctx, pod, c)
				if !c.started {
					w.initialized = false
					break
				}
				continue
			}
			if c.done {
				if t := c.state.Terminated; t != nil && t.ExitCode != 0 {
					initFailed = true // restartPolicy Never
					w.initialized = false
					break
				}
				continue
			}
			w.ensureRunning(ctx, pod, c)
			w.initialized = false
			break
		}
	} else {
		for _, c := range w.inits {
			if c.role == roleSidecar {
				w.ensureRunning(ctx, pod, c)
			}
		}
	}
	if w.initialized {
		for _, c := range w.mains {
			w.ensureRunning(ctx, pod, c)
		}
	}
	w.phase = w.computePhase(initFailed)
	if w.terminal() {
		w.log.Info("pod finished", "phase", w.phase)
		w.stopContainers(slices.Concat(w.mains, w.inits), 2*time.Second)
	}
	w.writeStatus(pod)
}

func (w *podWorker) terminal() bool {
	return w.phase == corev1.PodSucceeded || w.phase == corev1.PodFailed
}

// computePhase is the Pod's phase as the kubelet computes it.
func (w *podWorker) computePhase(initFailed bool) corev1.PodPhase {
	if initFailed {
		return corev1.PodFailed
	}
	if !w.initialized {
		return corev1.PodPending
	}
	allDone, failed, started := true, false, false
	for _, c := range w.mains {
		if c.instances > 0 {
			started = true
		}
		if !c.done {
			allDone = false
		} else if t := c.state.Terminated; t == nil || t.ExitCode != 0 {
			failed = true
		}
	}
	switch {
	case allDone && failed:
		return corev1.PodFailed
	case allDone:
		return corev1.PodSucceeded
	case started:
		return corev1.PodRunning
	}
	return corev1.PodPending
}

// backoff is the delay before the n-th retry of a failing step: the
// kubelet's CrashLoopBackOff, scaled down for tests (0.5 s doubling, at
// most 10 s).
func backoff(n int) time.Duration {
	if n <= 0 {
		return 0
	}
	d := 500 * time.Millisecond << min(n-1, 5)
	return min(d, 10*time.Second)
}

// ensureRunning starts c unless it runs, is finished, or waits for its
// back-off.
func (w *podWorker) ensureRunning(ctx context.Context, pod *corev1.Pod, c *ctr) {
	if c.running() || c.done || time.Now().Before(c.retryAt) {
		return
	}
	if err := w.startContainer(ctx, pod, c); err != nil {
		if ctx.Err() != nil {
			return
		}
		c.failures++
		c.retryAt = time.Now().Add(backoff(c.failures))
		w.log.Error("starting container", "container", c.spec.Name, "err", err)
		return
	}
	c.failures = 0
}

// labels are the Docker labels of one of the Pod's containers.
func (w *podWorker) labels(role, name string) map[string]string {
	return map[string]string{
		LabelNode:      w.k.cfg.NodeName,
		LabelInstance:  w.k.instance,
		LabelPodUID:    string(w.uid),
		LabelPodNS:     w.ns,
		LabelPodName:   w.name,
		LabelContainer: name,
		LabelRole:      role,
		LabelPID:       strconv.Itoa(os.Getpid()),
	}
}

// dockerName names a Docker container of the Pod; n tells the instances of
// one container apart.
func (w *podWorker) dockerName(name string, n int) string {
	return fmt.Sprintf("sbxkubelet_%s_%s_%s_%s_%s_%d", w.k.cfg.NodeName, w.ns, w.name, name, string(w.uid)[:8], n)
}

// podDir is the Pod's host directory, parent of its volumes.
func (w *podWorker) podDir() string { return filepath.Join(w.k.cfg.StateDir, string(w.uid)) }

// setup creates the Pod's sandbox: its volume directories, its IP and its
// pause container.
func (w *podWorker) setup(ctx context.Context, pod *corev1.Pod) error {
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory {
			continue
		}
		dir := filepath.Join(w.podDir(), v.Name)
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return fmt.Errorf("volume %s: %w", v.Name, err)
		}
		if err := os.Chmod(dir, 0o777); err != nil {
			return fmt.Errorf("volume %s: %w", v.Name, err)
		}
	}
	w.runtime = ""
	if rc := pod.Spec.RuntimeClassName; rc != nil && *rc != "" {
		obj, err := w.k.cs.NodeV1().RuntimeClasses().Get(ctx, *rc, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("runtimeClass %s: %w", *rc, err)
		}
		w.runtime = obj.Handler
	}
	// The IP is taken only if its ports can be published: something
	// outside the kubelets may hold one of them.
	avoid := map[netip.Addr]bool{}
	for attempt := 0; ; attempt++ {
		ip, err := w.k.ips.alloc(avoid)
		if err != nil {
			return err
		}
		id, err := w.startPause(ctx, pod, ip)
		if err == nil {
			w.ip, w.pauseID = ip, id
			break
		}
		w.k.ips.free(ip)
		if attempt < 5 && (strings.Contains(err.Error(), "already allocated") || strings.Contains(err.Error(), "address already in use")) {
			w.log.Warn("pod IP's ports are taken, trying another IP", "ip", ip, "err", err)
			avoid[ip] = true
			continue
		}
		return err
	}
	ins, err := w.k.docker.ContainerInspect(ctx, w.pauseID)
	if err != nil {
		// Without its bridge address the Pod cannot be probed: start
		// over.
		w.remove(w.pauseID)
		w.k.ips.free(w.ip)
		w.pauseID, w.ip = "", netip.Addr{}
		return fmt.Errorf("inspect pause: %w", err)
	}
	if n := ins.NetworkSettings; n != nil && n.Networks["bridge"] != nil {
		w.bridgeIP = n.Networks["bridge"].IPAddress
	}
	w.log.Info("pod sandbox up", "ip", w.ip, "bridgeIP", w.bridgeIP)
	return nil
}

// startPause creates and starts the pause container on ip.
func (w *podWorker) startPause(ctx context.Context, pod *corev1.Pod, ip netip.Addr) (string, error) {
	cfg, hc := w.pauseConfig(pod, ip)
	id, err := w.create(ctx, cfg, hc, w.dockerName("POD", 0))
	if err != nil {
		return "", fmt.Errorf("create pause: %w", err)
	}
	if err := w.k.docker.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		w.remove(id)
		return "", fmt.Errorf("start pause: %w", err)
	}
	return id, nil
}

// startContainer creates and starts a new Docker container for c.
func (w *podWorker) startContainer(ctx context.Context, pod *corev1.Pod, c *ctr) error {
	env, vals, err := w.containerEnv(ctx, pod, c.spec)
	if err != nil {
		c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: err.Error()}}
		return err
	}
	cfg, hc, err := w.containerConfig(pod, c, env, vals)
	if err != nil {
		c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: err.Error()}}
		return err
	}
	id, err := w.create(ctx, cfg, hc, w.dockerName(c.spec.Name, c.instances))
	if err != nil {
		c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerError", Message: err.Error()}}
		return err
	}
	if err := w.k.docker.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		w.remove(id)
		c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "RunContainerError", Message: err.Error()}}
		return err
	}
	startedAt := metav1.Now()
	if ins, err := w.k.docker.ContainerInspect(ctx, id); err == nil {
		c.imageID = "docker://" + ins.Image
		if t, err := time.Parse(time.RFC3339Nano, ins.State.StartedAt); err == nil {
			startedAt = metav1.NewTime(t)
		}
	}
	if old := c.id; old != "" {
		w.remove(old)
	}
	if c.instances > 0 {
		c.restartCount++
		if c.lastTerm != nil {
			c.lastState = corev1.ContainerState{Terminated: c.lastTerm}
		}
	}
	c.instances++
	c.id = id
	c.state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: startedAt}}
	c.probeSuccesses, c.probeFailures, c.nextProbe = 0, 0, time.Time{}
	// Without a probe to wait for, a running container is started (and
	// ready, unless it is a regular init container).
	c.started = c.spec.StartupProbe == nil && (c.role != roleSidecar || c.spec.ReadinessProbe == nil)
	c.ready = c.started && c.role != roleInit && c.spec.ReadinessProbe == nil
	w.log.Info("container started", "container", c.spec.Name, "id", id[:12], "restartCount", c.restartCount)
	return nil
}

// create creates a Docker container, pulling its image once if missing.
func (w *podWorker) create(ctx context.Context, cfg *container.Config, hc *container.HostConfig, name string) (string, error) {
	resp, err := w.k.docker.ContainerCreate(ctx, cfg, hc, nil, nil, name)
	if err != nil && client.IsErrNotFound(err) && strings.Contains(err.Error(), "image") {
		if perr := w.k.pull(ctx, cfg.Image); perr != nil {
			return "", fmt.Errorf("%w (pull: %v)", err, perr)
		}
		resp, err = w.k.docker.ContainerCreate(ctx, cfg, hc, nil, nil, name)
	}
	if err != nil {
		return "", err
	}
	return resp.ID, nil
}

// remove force-removes a Docker container.
func (w *podWorker) remove(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.k.docker.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !client.IsErrNotFound(err) {
		w.log.Error("removing container", "id", id, "err", err)
	}
}

// drainEvents applies the queued Docker events.
func (w *podWorker) drainEvents(ctx context.Context, pod *corev1.Pod) {
	w.evMu.Lock()
	evs := w.evs
	w.evs = nil
	w.evMu.Unlock()
	for _, m := range evs {
		var c *ctr
		for _, x := range w.ctrs {
			if x.id != "" && x.id == m.Actor.ID {
				c = x
			}
		}
		if c == nil {
			if m.Actor.ID == w.pauseID && m.Action == events.ActionDie {
				w.log.Warn("pause container died; the pod's network is gone")
			}
			if m.Action == events.ActionOOM {
				w.lateOOM(m.Actor.ID)
			}
			continue
		}
		switch m.Action {
		case events.ActionOOM:
			// cgroup v2's memory.oom.group, which Kubernetes sets: an
			// OOM kill takes the whole container down, not one process.
			c.oomID = c.id
			if err := w.k.docker.ContainerKill(ctx, c.id, "KILL"); err != nil && !client.IsErrNotFound(err) {
				w.log.Warn("killing OOM container", "container", c.spec.Name, "err", err)
			}
		case events.ActionDie:
			if c.running() {
				w.containerDied(ctx, pod, c, m.Actor.Attributes["exitCode"])
			}
		}
	}
}

// lateOOM handles an oom event that comes after the container's die
// event was handled: its end is reported OOMKilled after all.
func (w *podWorker) lateOOM(id string) {
	cid := "docker://" + id
	for _, c := range w.ctrs {
		fix := func(t *corev1.ContainerStateTerminated) *corev1.ContainerStateTerminated {
			if t == nil || t.ContainerID != cid || t.Reason == "OOMKilled" {
				return t
			}
			nt := *t
			nt.Reason, nt.ExitCode = "OOMKilled", 137
			return &nt
		}
		if c.lastTerm != nil && c.lastTerm.ContainerID == cid {
			w.log.Info("late oom event", "container", c.spec.Name)
		}
		c.lastTerm = fix(c.lastTerm)
		c.state.Terminated = fix(c.state.Terminated)
		c.lastState.Terminated = fix(c.lastState.Terminated)
	}
}

// reconcile looks at the running containers in Docker, in case the event
// stream lost a die event; it runs every reconcileEvery.
func (w *podWorker) reconcile(ctx context.Context, pod *corev1.Pod) {
	if time.Now().Before(w.nextReconcile) {
		return
	}
	w.nextReconcile = time.Now().Add(reconcileEvery)
	for _, c := range w.ctrs {
		if !c.running() {
			continue
		}
		ins, err := w.k.docker.ContainerInspect(ctx, c.id)
		switch {
		case client.IsErrNotFound(err):
			w.log.Warn("container vanished from Docker", "container", c.spec.Name)
			w.containerDied(ctx, pod, c, "137")
		case err == nil && ins.State != nil && !ins.State.Running:
			w.log.Warn("container exited without a die event", "container", c.spec.Name)
			w.containerDied(ctx, pod, c, "")
		}
	}
}

// terminated reads the end of c's current Docker container.
func (w *podWorker) terminated(ctx context.Context, c *ctr, exitAttr string) *corev1.ContainerStateTerminated {
	t := &corev1.ContainerStateTerminated{ContainerID: "docker://" + c.id, FinishedAt: metav1.Now()}
	if c.state.Running != nil {
		t.StartedAt = c.state.Running.StartedAt
	}
	if n, err := strconv.Atoi(exitAttr); err == nil {
		t.ExitCode = int32(n)
	}
	oom := c.oomID == c.id
	if ins, err := w.k.docker.ContainerInspect(ctx, c.id); err == nil && ins.State != nil {
		t.ExitCode = int32(ins.State.ExitCode)
		oom = oom || ins.State.OOMKilled
		if ft, err := time.Parse(time.RFC3339Nano, ins.State.FinishedAt); err == nil && !ft.IsZero() && ft.Year() > 1 {
			t.FinishedAt = metav1.NewTime(ft)
		}
	}
	switch {
	case oom:
		t.Reason, t.ExitCode = "OOMKilled", 137
	case t.ExitCode == 0:
		t.Reason = "Completed"
	default:
		t.Reason = "Error"
	}
	return t
}

// containerDied records the end of c's container and decides, as the
// kubelet does, whether and when it restarts.
func (w *podWorker) containerDied(ctx context.Context, pod *corev1.Pod, c *ctr, exitAttr string) {
	t := w.terminated(ctx, c, exitAttr)
	w.log.Info("container exited", "container", c.spec.Name, "exitCode", t.ExitCode, "reason", t.Reason)
	c.lastTerm = t
	c.state = corev1.ContainerState{Terminated: t}
	c.ready, c.started = false, false
	if w.terminal() || pod.DeletionTimestamp != nil {
		c.done = true
		return
	}
	var restart bool
	switch {
	case c.role == roleSidecar:
		restart = true
	case c.role == roleInit && t.ExitCode == 0:
		c.ready, c.done = true, true
		return
	default:
		switch pod.Spec.RestartPolicy {
		case corev1.RestartPolicyNever:
		case corev1.RestartPolicyOnFailure:
			restart = t.ExitCode != 0
		default:
			restart = true
		}
	}
	if !restart {
		c.done = true
		return
	}
	// A container that ran for a while restarts at once, as after the
	// kubelet's back-off reset; one that keeps crashing backs off.
	n := int(c.restartCount) + 1
	if t.FinishedAt.Sub(t.StartedAt.Time) > 10*time.Second {
		n = 0
	}
	delay := backoff(n - 1)
	c.retryAt = time.Now().Add(delay)
	if delay > 0 {
		c.lastState = corev1.ContainerState{Terminated: t}
		c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
			Reason:  "CrashLoopBackOff",
			Message: fmt.Sprintf("back-off %v restarting failed container=%s pod=%s_%s(%s)", delay, c.spec.Name, w.name, w.ns, w.uid),
		}}
	}
}

// stopContainers stops the running containers among cs, SIGTERM first
// and SIGKILL after grace, all at once, and records how they ended.
func (w *podWorker) stopContainers(cs []*ctr, grace time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), grace+30*time.Second)
	defer cancel()
	secs := int(grace.Round(time.Second) / time.Second)
	var wg sync.WaitGroup
	for _, c := range cs {
		if !c.running() {
			continue
		}
		wg.Go(func() {
			if err := w.k.docker.ContainerStop(ctx, c.id, container.StopOptions{Timeout: &secs}); err != nil && !client.IsErrNotFound(err) {
				w.log.Warn("stopping container", "container", c.spec.Name, "err", err)
			}
		})
	}
	wg.Wait()
	for _, c := range cs {
		if c.running() {
			t := w.terminated(ctx, c, "")
			c.lastTerm = t
			c.state = corev1.ContainerState{Terminated: t}
			c.ready, c.started = false, false
		}
		c.done = true
	}
}

// teardown ends a deleted Pod as the kubelet does: its containers stopped
// within the grace period (regular containers first, then init and
// sidecar containers), its sandbox removed, a final status, and the Pod
// object deleted for good.
func (w *podWorker) teardown(pod *corev1.Pod, gone bool) {
	grace := gracePeriod(pod)
	w.log.Info("pod deleted, tearing down", "grace", grace, "gone", gone)
	start := time.Now()
	w.stopContainers(w.mains, grace)
	w.stopContainers(w.inits, max(time.Second, grace-time.Since(start)))
	if !w.terminal() {
		w.phase = corev1.PodSucceeded
		for _, c := range w.mains {
			if t := c.state.Terminated; t == nil || t.ExitCode != 0 {
				w.phase = corev1.PodFailed
			}
		}
	}
	if !gone {
		w.writeStatus(pod)
	}
	for _, c := range w.ctrs {
		if c.id != "" {
			w.remove(c.id)
		}
	}
	if w.pauseID != "" {
		w.remove(w.pauseID)
	}
	w.releaseHost()
	if !gone {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		zero := int64(0)
		uid := w.uid
		err := w.k.cs.CoreV1().Pods(w.ns).Delete(ctx, w.name, metav1.DeleteOptions{
			GracePeriodSeconds: &zero,
			Preconditions:      &metav1.Preconditions{UID: &uid},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			w.log.Error("deleting pod", "err", err)
		}
	}
	w.log.Info("pod torn down")
	w.finished.Store(true)
}

// gracePeriod is the Pod's termination grace period (its deletion's, if
// any), at most maxGrace.
func gracePeriod(pod *corev1.Pod) time.Duration {
	grace := 30 * time.Second
	if s := pod.Spec.TerminationGracePeriodSeconds; s != nil {
		grace = time.Duration(*s) * time.Second
	}
	if s := pod.DeletionGracePeriodSeconds; s != nil {
		grace = time.Duration(*s) * time.Second
	}
	return min(grace, maxGrace)
}

// releaseHost removes the Pod's directories and frees its IP; the caller
// holds w.mu or owns w.
func (w *podWorker) releaseHost() {
	if w.released {
		return
	}
	w.released = true
	if err := os.RemoveAll(w.podDir()); err != nil {
		w.log.Error("removing pod directory", "err", err)
	}
	if w.ip.IsValid() {
		w.k.ips.free(w.ip)
	}
}
