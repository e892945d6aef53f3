package kubelet

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// probe runs the startup and readiness probes that are due. A probe
// connects to the pause container's bridge address, not to the Pod IP:
// Docker's userland proxy accepts every connection on a published port,
// whether or not the container listens, so only the bridge address tells.
// Exec probes are not run; they count as passing.
func (w *podWorker) probe() {
	now := time.Now()
	for _, c := range w.ctrs {
		if !c.running() || c.role == roleInit || now.Before(c.nextProbe) {
			continue
		}
		switch {
		case !c.started && c.spec.StartupProbe != nil:
			if w.probeOnce(c, c.spec.StartupProbe) {
				c.started = true
				c.ready = c.spec.ReadinessProbe == nil
			}
		case !c.started:
			// A sidecar without a startup probe: started once ready.
			if w.probeOnce(c, c.spec.ReadinessProbe) {
				c.started, c.ready = true, true
				c.probeSuccesses = 1
			}
		case c.spec.ReadinessProbe != nil:
			p := c.spec.ReadinessProbe
			if w.probeOnce(c, p) {
				c.probeSuccesses++
				c.probeFailures = 0
				if c.probeSuccesses >= int(max(p.SuccessThreshold, 1)) {
					c.ready = true
				}
			} else {
				c.probeFailures++
				c.probeSuccesses = 0
				if c.probeFailures >= int(max(p.FailureThreshold, 1)) || !c.ready {
					c.ready = false
				}
			}
		default:
			continue
		}
		// Probe fast until started and ready, then once a second.
		if c.started && c.ready {
			c.nextProbe = now.Add(time.Second)
		}
	}
}

// probeOnce runs one tcpSocket or httpGet probe.
func (w *podWorker) probeOnce(c *ctr, p *corev1.Probe) bool {
	timeout := time.Second
	if p.TimeoutSeconds > 0 && time.Duration(p.TimeoutSeconds)*time.Second < timeout {
		timeout = time.Duration(p.TimeoutSeconds) * time.Second
	}
	host := w.bridgeIP
	switch {
	case p.TCPSocket != nil:
		if p.TCPSocket.Host != "" {
			host = p.TCPSocket.Host
		}
		port, ok := resolvePort(p.TCPSocket.Port, c.spec)
		if !ok {
			return false
		}
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(port)), timeout)
		if err != nil {
			return false
		}
		conn.Close()
		return true
	case p.HTTPGet != nil:
		g := p.HTTPGet
		if g.Host != "" {
			host = g.Host
		}
		port, ok := resolvePort(g.Port, c.spec)
		if !ok {
			return false
		}
		scheme := "http"
		if g.Scheme == corev1.URISchemeHTTPS {
			scheme = "https"
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, strconv.Itoa(port)), g.Path), nil)
		if err != nil {
			return false
		}
		for _, h := range g.HTTPHeaders {
			req.Header.Add(h.Name, h.Value)
		}
		tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode >= 200 && resp.StatusCode < 400
	}
	return true
}

// resolvePort resolves a probe's port, by number or by the name of one of
// the container's ports.
func resolvePort(p intstr.IntOrString, c *corev1.Container) (int, bool) {
	if p.Type == intstr.Int {
		return p.IntValue(), true
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil {
		return n, true
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), true
		}
	}
	return 0, false
}

// containerStatus is c's entry in the Pod's status.
func (w *podWorker) containerStatus(c *ctr) corev1.ContainerStatus {
	started := c.started
	st := corev1.ContainerStatus{
		Name:                 c.spec.Name,
		Image:                c.spec.Image,
		ImageID:              c.imageID,
		Ready:                c.ready,
		Started:              &started,
		RestartCount:         c.restartCount,
		State:                *c.state.DeepCopy(),
		LastTerminationState: *c.lastState.DeepCopy(),
	}
	if c.id != "" {
		st.ContainerID = "docker://" + c.id
	}
	if st.State == (corev1.ContainerState{}) {
		reason := "PodInitializing"
		if c.role != roleMain && w.pauseID == "" || c.role == roleMain && w.initialized {
			reason = "ContainerCreating"
		}
		st.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason}
	}
	return st
}

// status is the Pod's status as the worker knows it; pod supplies what
// the kubelet does not own (QoS class, others' conditions).
func (w *podWorker) status(pod *corev1.Pod) corev1.PodStatus {
	st := corev1.PodStatus{
		Phase:     w.phase,
		HostIP:    hostIP,
		HostIPs:   []corev1.HostIP{{IP: hostIP}},
		StartTime: &w.startTime,
		QOSClass:  pod.Status.QOSClass,
	}
	if w.ip.IsValid() {
		st.PodIP = w.ip.String()
		st.PodIPs = []corev1.PodIP{{IP: st.PodIP}}
	}
	if w.setupErr != "" && w.pauseID == "" {
		st.Message = "creating the pod sandbox: " + w.setupErr
	}
	if w.reason != "" {
		st.Reason, st.Message = w.reason, w.message
	}
	containersReady := true
	for _, c := range w.inits {
		st.InitContainerStatuses = append(st.InitContainerStatuses, w.containerStatus(c))
		if c.role == roleSidecar && !c.ready {
			containersReady = false
		}
	}
	for _, c := range w.mains {
		st.ContainerStatuses = append(st.ContainerStatuses, w.containerStatus(c))
		if !c.ready {
			containersReady = false
		}
	}
	if w.terminal() {
		containersReady = false
	}
	ready := containersReady
	for _, g := range pod.Spec.ReadinessGates {
		ok := false
		for _, cond := range pod.Status.Conditions {
			if cond.Type == g.ConditionType && cond.Status == corev1.ConditionTrue {
				ok = true
			}
		}
		ready = ready && ok
	}
	mine := map[corev1.PodConditionType]bool{}
	add := func(t corev1.PodConditionType, ok bool, reason string) {
		mine[t] = true
		s := corev1.ConditionFalse
		if ok {
			s, reason = corev1.ConditionTrue, ""
		}
		if w.terminal() && !ok && t != corev1.PodInitialized {
			reason = "PodCompleted"
		}
		prev, seen := w.condSince[t]
		if !seen || prev.status != s {
			prev = condSince{status: s, at: metav1.Now()}
			w.condSince[t] = prev
		}
		st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: s, Reason: reason, LastTransitionTime: prev.at})
	}
	add(corev1.PodReadyToStartContainers, w.pauseID != "" && !w.released, "")
	add(corev1.PodInitialized, w.initialized, "ContainersNotInitialized")
	add(corev1.ContainersReady, containersReady, "ContainersNotReady")
	add(corev1.PodReady, ready, "ContainersNotReady")
	add(corev1.PodScheduled, true, "")
	if w.evicted {
		mine[corev1.DisruptionTarget] = true
		st.Conditions = append(st.Conditions, corev1.PodCondition{
			Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "TerminationByKubelet",
			Message: w.message, LastTransitionTime: w.condSince[corev1.PodReady].at,
		})
	}
	for _, cond := range pod.Status.Conditions {
		if !mine[cond.Type] {
			st.Conditions = append(st.Conditions, cond)
		}
	}
	return st
}

// writeStatus writes the Pod's status if it changed since the last write;
// a conflict is retried on a fresh copy of the Pod.
func (w *podWorker) writeStatus(pod *corev1.Pod) {
	st := w.status(pod)
	if w.lastStatus != nil && equality.Semantic.DeepEqual(*w.lastStatus, st) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	obj := pod.DeepCopy()
	obj.Status = st
	pods := w.k.cs.CoreV1().Pods(w.ns)
	for range 5 {
		_, err := pods.UpdateStatus(ctx, obj, metav1.UpdateOptions{})
		switch {
		case err == nil:
			w.lastStatus = &st
			return
		case apierrors.IsNotFound(err):
			return
		case apierrors.IsConflict(err):
			fresh, err := pods.Get(ctx, w.name, metav1.GetOptions{})
			if err != nil || fresh.UID != w.uid {
				return
			}
			obj = fresh
			st = w.status(fresh)
			obj.Status = st
			continue
		}
		// Retried at the next sync.
		w.log.Error("writing pod status", "err", err)
		return
	}
}
