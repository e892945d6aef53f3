package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/sandboxd/sandboxd/orchestrator/backend/kube/iosidecar"
	"github.com/sandboxd/sandboxd/orchestrator/core"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// Networked sandboxes. Under Docker the egress gateway sits in sandboxd,
// at the host's end of each sandbox's link; a Pod's network is its CNI's,
// so here the same gateway (orchestrator/egress) runs in the Pod's io
// sidecar (iosidecar/egress.go), and three parts make it the Pod's only
// way out for the sandbox user:
//
//   - the node's CNI chain ends with sandboxd's plugin (cmd/sandbox-cni,
//     podnet), which redirects the sandbox user's TCP and DNS to the
//     sidecar and drops everything else that user sends beyond the Pod
//     (Config.EgressCNI says the nodes have it; without it network is
//     refused);
//   - the Pod carries labelNetwork, which the shipped NetworkPolicy
//     (sandbox-network) selects to let the Pod out, beyond the cluster;
//   - sandboxd gives the sidecar the policy once the Pod is ready
//     (applyEgress, on the way out of awaitReady, so before any command
//     runs in it) and whenever it changes. The sidecar first proves the
//     redirect is in force; a Pod where it is not (a node without the
//     plugin, a runtime with a network stack of its own: gVisor) is
//     ended, its sandbox dead with the reason, before anything runs.
//
// The policy is on the Pod (annNetwork, with a generation the sidecar
// orders updates from several replicas by), and on its claim through a
// hibernation, so every replica and a woken Pod have it. A rule's header
// values are secrets the Docker backend keeps on the host: here the
// record keeps the policy with them blanked, as callers see it, and the
// values sealed under the io token (iosidecar.SealRules), which only the
// sidecar opens. The sidecar makes the sandbox's CA and writes its
// certificate where the sandbox container trusts it (podNetwork). Ports
// the sandbox serves are reached through sandboxd's ports front
// (ports.go).
const (
	// labelNetwork ("on") marks a networked sandbox's Pod.
	labelNetwork = "sandboxd.io/network"
	// annNetwork is its netRecord.
	annNetwork = "sandboxd.io/network-policy"
	// podIPEnv gives the sidecar the Pod's IP, the source of the sandbox's
	// redirected traffic.
	podIPEnv = "POD_IP"
	// volumeEgress is the sidecar's own directory (mounted at
	// egressStateDir, in no other container), where its gateway keeps the
	// policy in force through a restart of its container.
	volumeEgress   = "egress-state"
	egressStateDir = "/run/sandboxd-egress"
	// volumeCA is where the sidecar writes the sandbox's CA certificate and
	// bundle (at caSidecarDir), which the sandbox container mounts
	// read-only at caMountPoint and names in caEnv; the CA's key stays in
	// egressStateDir.
	volumeCA     = "sandbox-ca"
	caSidecarDir = "/run/sandboxd-ca"
	caMountPoint = "/etc/sandboxd"
)

// caEnv makes the usual TLS stacks in the sandbox trust its CA, as on the
// Docker backend: OpenSSL and Python's ssl, requests, curl, and Node.js
// (which adds NODE_EXTRA_CA_CERTS to its own roots).
func caEnv() map[string]string {
	bundle := caMountPoint + "/" + iosidecar.CABundleFile
	return map[string]string{
		"SSL_CERT_FILE":       bundle,
		"REQUESTS_CA_BUNDLE":  bundle,
		"CURL_CA_BUNDLE":      bundle,
		"NODE_EXTRA_CA_CERTS": caMountPoint + "/" + iosidecar.CACertFile,
	}
}

// netRecord is a networked sandbox's policy as its Pod keeps it.
type netRecord struct {
	// Generation grows with each update; the sidecar keeps the highest.
	Generation uint64 `json:"generation"`
	// Policy is the sandbox's, its rules' header values blanked.
	Policy core.NetworkPolicy `json:"policy"`
	// Sealed is the rules with their values, sealed for the sidecar
	// (iosidecar.SealRules); empty without rules.
	Sealed []byte `json:"sealed,omitempty"`
}

// newNetRecord is policy p of sandbox id at generation gen: its rules'
// values sealed, blanked in the clear copy.
func (m *Manager) newNetRecord(id string, gen uint64, p core.NetworkPolicy) (*netRecord, error) {
	sealed, err := iosidecar.SealRules(m.cfg.IOToken, id, p.Rules)
	if err != nil {
		return nil, fmt.Errorf("seal the network rules: %w", err)
	}
	return &netRecord{Generation: gen, Policy: p.Redacted(), Sealed: sealed}, nil
}

// parseNetRecord reads annNetwork; nil without one.
func parseNetRecord(s string) *netRecord {
	if s == "" {
		return nil
	}
	var r netRecord
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return &netRecord{Policy: core.NetworkPolicy{DenyOut: []string{"0.0.0.0/0"}}} // unreadable: nothing out
	}
	return &r
}

func (r *netRecord) encode() string {
	b, _ := json.Marshal(r)
	return string(b)
}

// networkOf is the policy of a new sandbox with opts (nil without
// network), or why this backend cannot give it.
func (m *Manager) networkOf(opts core.Options) (*core.NetworkPolicy, error) {
	if !opts.Network && opts.NetworkPolicy == nil {
		return nil, nil
	}
	if err := m.networking(); err != nil {
		return nil, err
	}
	var p core.NetworkPolicy
	if opts.NetworkPolicy != nil {
		p = opts.NetworkPolicy.Clone()
	}
	return &p, nil
}

// networking refuses the network calls unless the nodes confine networked
// sandboxes (Config.EgressCNI).
func (m *Manager) networking() error {
	if !m.cfg.EgressCNI {
		return unsupported(featNetwork + " without --kube-egress-cni (the nodes' CNI chain must confine each sandbox to its Pod's egress gateway: docs/kubernetes.md)")
	}
	return nil
}

// podNetwork puts r on a sandbox Pod: its label, its record, and the
// sidecar's gateway, with a directory of its own for the policy in force.
// Names with a dot are asked as they are first (ndots 1, where the
// cluster's default is 5): otherwise every lookup of "pypi.org" would
// first ask the gateway for it under each of the Pod's search domains,
// each refused by an allow-list and filling the sandbox's denials.
func podNetwork(pod *corev1.Pod, r *netRecord) {
	pod.Labels[labelNetwork] = "on"
	pod.Annotations[annNetwork] = r.encode()
	pod.Spec.DNSConfig = &corev1.PodDNSConfig{Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("1")}}}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.Name != containerIO {
			continue
		}
		c.Args = append(c.Args, "--egress", "--egress-state="+egressStateDir+"/policy.pb",
			"--egress-ca-dir="+caSidecarDir, "--egress-ca-key="+egressStateDir+"/ca-key.pem")
		c.Env = append(c.Env, corev1.EnvVar{Name: podIPEnv, ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}})
		c.VolumeMounts = append(c.VolumeMounts,
			corev1.VolumeMount{Name: volumeEgress, MountPath: egressStateDir},
			corev1.VolumeMount{Name: volumeCA, MountPath: caSidecarDir})
	}
	// The sandbox trusts its CA: the sidecar, which starts first (its
	// startup probe passes once it listens, after it wrote the CA), writes
	// it; the sandbox reads it. The caller's environment wins, as on
	// Docker: it is the caller's sandbox to break.
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if c.Name != containerSandbox {
			continue
		}
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: volumeCA, MountPath: caMountPoint, ReadOnly: true})
		have := map[string]bool{}
		for _, e := range c.Env {
			have[e.Name] = true
		}
		env := caEnv()
		for _, k := range slices.Sorted(maps.Keys(env)) {
			if !have[k] {
				c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: env[k]})
			}
		}
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes,
		corev1.Volume{Name: volumeEgress, VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: resource.NewQuantity(8<<20, resource.BinarySI)}}},
		corev1.Volume{Name: volumeCA, VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: resource.NewQuantity(16<<20, resource.BinarySI)}}})
}

// egressKey says which policy a ready Pod's sidecar was given: the Pod, the
// generation, and the sidecar container's restarts (a restarted sidecar
// has none).
func egressKey(p *corev1.Pod, gen uint64) string {
	restarts := int32(0)
	for _, s := range p.Status.InitContainerStatuses {
		if s.Name == containerIO {
			restarts = s.RestartCount
		}
	}
	return string(p.UID) + "/" + strconv.FormatUint(gen, 10) + "/" + strconv.Itoa(int(restarts))
}

// applyEgress gives ready Pod p's sidecar its policy, unless this replica
// already gave it this one. A Pod whose redirect is not in force is ended:
// its sandbox is dead, with the reason, before anything ran in it.
func (m *Manager) applyEgress(ctx context.Context, p *corev1.Pod) error {
	if p.Labels[labelNetwork] == "" {
		return nil
	}
	rec := parseNetRecord(p.Annotations[annNetwork])
	if rec == nil {
		rec = &netRecord{Policy: core.NetworkPolicy{DenyOut: []string{"0.0.0.0/0"}}}
	}
	key := egressKey(p, rec.Generation)
	m.mu.Lock()
	done := m.egressDone[string(p.UID)] == key
	m.mu.Unlock()
	if done {
		return nil
	}
	id := p.Labels[labelSandboxID]
	conn, err := m.io(ctx, p)
	if err != nil {
		return err
	}
	_, err = conn.SetEgress(ctx, m.egressPolicy(id, rec))
	switch {
	case errors.Is(err, iosidecar.ErrEgressUnavailable):
		reason := "its pod cannot confine a networked sandbox: " + err.Error()
		m.log.Error("networked sandbox ended: its pod's egress redirect is not in force", "sandbox_id", id, "node", p.Spec.NodeName, "error", err)
		m.retire(context.WithoutCancel(ctx), id, reason)
		m.awaitCached(ctx, id, func(q *corev1.Pod) bool { return q.Annotations[annDeadReason] != "" })
		return deadError(id, reason)
	case err != nil:
		return m.ioError(id, "", err)
	}
	m.mu.Lock()
	m.egressDone[string(p.UID)] = key
	m.mu.Unlock()
	return nil
}

// egressPolicy is what the sidecar gets: r's policy under the operator's
// bounds.
func (m *Manager) egressPolicy(id string, r *netRecord) iosidecar.EgressPolicy {
	return iosidecar.EgressPolicy{SandboxID: id, Generation: r.Generation,
		AllowOut: r.Policy.AllowOut, DenyOut: r.Policy.DenyOut, SealedRules: r.Sealed,
		Ceiling: m.cfg.EgressCeiling, AllowPrivate: m.cfg.EgressAllowPrivate,
		Cluster: m.cfg.EgressCluster, Hosts: m.cfg.EgressHosts, UpstreamRoots: m.cfg.EgressRoots}
}

// UpdateNetworkPolicy replaces a networked sandbox's policy (checked and
// normalised by core.Validating): written to its Pod (or, hibernated, its
// claim) with the next generation, then given to its sidecar if the Pod is
// ready (else when it is). It neither wakes a hibernated sandbox nor
// counts as a use. A sandbox without network is core.NoNetwork.
//
// An update racing a hibernation or a wake is not lost. Each side writes,
// then reads what the other writes: a hibernation marks the Pod, then
// takes the record from the Pod as the mark left it (hibernatePod), while
// an update writes the Pod on the condition that it has not changed since
// it read it unmarked, and joins a marked Pod's hibernation, then writes the
// claim; an update of a hibernated sandbox writes the claim, then looks for
// a Pod a wake made meanwhile (and writes it too), while a wake makes the
// Pod, then looks for a newer record on the claim (syncWake).
func (m *Manager) UpdateNetworkPolicy(ctx context.Context, sandboxID string, np core.NetworkPolicy) (core.Sandbox, error) {
	if err := m.networking(); err != nil {
		return core.Sandbox{}, err
	}
	for range maxAcquireRounds {
		p, c, err := m.lookup(ctx, sandboxID)
		if err != nil {
			return core.Sandbox{}, err
		}
		if p == nil {
			// Hibernated: the claim keeps the record until the wake.
			rec := parseNetRecord(c.Annotations[annNetwork])
			if rec == nil {
				return core.Sandbox{}, core.NoNetwork(sandboxID)
			}
			next, err := m.newNetRecord(sandboxID, rec.Generation+1, np)
			if err != nil {
				return core.Sandbox{}, err
			}
			qc, err := m.cfg.Client.CoreV1().PersistentVolumeClaims(m.cfg.Namespace).Patch(ctx, c.Name, types.MergePatchType,
				netPatch(c.ResourceVersion, *next), metav1.PatchOptions{})
			if apierrors.IsConflict(err) {
				continue
			}
			if err != nil {
				return core.Sandbox{}, apiError("write the network policy", err)
			}
			// A wake may have made the Pod from the record before this
			// write: the Pod takes the update too.
			woken, err := m.podFromAPI(ctx, sandboxID)
			if err != nil {
				return core.Sandbox{}, err
			}
			if woken != nil && woken.Annotations[annDeleting] == "" {
				sb, retry, err := m.updatePodNet(ctx, sandboxID, woken, np)
				if retry {
					continue
				}
				return sb, err
			}
			m.logPolicy(sandboxID, np)
			return m.sandboxOfClaim(qc), nil
		}
		if _, dead, reason, _ := podState(p); dead {
			return core.Sandbox{}, deadError(sandboxID, reason)
		}
		if parseNetRecord(p.Annotations[annNetwork]) == nil {
			return core.Sandbox{}, core.NoNetwork(sandboxID)
		}
		// From the API server: the cache may lag another replica's update,
		// and the generation must grow past it.
		fresh, err := m.podFromAPI(ctx, sandboxID)
		if err != nil {
			return core.Sandbox{}, err
		}
		if fresh == nil {
			continue
		}
		sb, retry, err := m.updatePodNet(ctx, sandboxID, fresh, np)
		if retry {
			continue
		}
		return sb, err
	}
	return core.Sandbox{}, core.Errorf(core.ErrUnavailable, "gave up updating the network policy of sandbox %s after %d conflicting writes; try again", sandboxID, maxAcquireRounds)
}

// updatePodNet writes np to Pod fresh (as read from the API server) with
// the generation after its own, on the condition that fresh is still the
// Pod's latest version, and gives it to the sidecar if the Pod is ready.
// retry says to look the sandbox up again: the write conflicted, or the
// Pod is being hibernated, which this call first helps finish, so that the
// update goes to the claim once the hibernation has taken its record.
func (m *Manager) updatePodNet(ctx context.Context, id string, fresh *corev1.Pod, np core.NetworkPolicy) (core.Sandbox, bool, error) {
	if fresh.Annotations[annHibernating] != "" {
		if _, err := m.hibernatePod(ctx, fresh, "finishing a hibernation under way"); err != nil {
			return core.Sandbox{}, false, err
		}
		m.awaitCached(ctx, id, func(q *corev1.Pod) bool { return q.UID != fresh.UID || q.Annotations[annDeleting] != "" })
		return core.Sandbox{}, true, nil
	}
	rec := parseNetRecord(fresh.Annotations[annNetwork])
	if rec == nil {
		return core.Sandbox{}, false, core.NoNetwork(id)
	}
	next, err := m.newNetRecord(id, rec.Generation+1, np)
	if err != nil {
		return core.Sandbox{}, false, err
	}
	q, err := m.cfg.Client.CoreV1().Pods(m.cfg.Namespace).Patch(ctx, fresh.Name, types.MergePatchType,
		netPatch(fresh.ResourceVersion, *next), metav1.PatchOptions{})
	if apierrors.IsConflict(err) {
		return core.Sandbox{}, true, nil
	}
	if err != nil {
		return core.Sandbox{}, false, apiError("write the network policy", err)
	}
	if _, _, _, ready := podState(q); ready {
		if err := m.applyEgress(ctx, q); err != nil {
			return core.Sandbox{}, false, err
		}
	}
	// Read our write: this replica's next status and uses see it.
	m.awaitCached(ctx, id, func(c *corev1.Pod) bool {
		r := parseNetRecord(c.Annotations[annNetwork])
		return r != nil && r.Generation >= next.Generation
	})
	m.logPolicy(id, np)
	return m.sandboxOf(q), false, nil
}

func (m *Manager) logPolicy(id string, np core.NetworkPolicy) {
	m.log.Info("sandbox network policy updated", "sandbox_id", id,
		"allow_out", len(np.AllowOut), "deny_out", len(np.DenyOut), "rules", len(np.Rules), "public_traffic", np.AllowPublicTraffic)
}

// wakeNetRecord is the policy a woken Pod of hibernated claim c gets: the
// newest, read from the API server, since an update of the hibernated
// sandbox's policy (through any replica) may not be in this replica's
// cache yet; the cached one if the read fails. nil without network.
func (m *Manager) wakeNetRecord(ctx context.Context, c *corev1.PersistentVolumeClaim) *netRecord {
	rec := parseNetRecord(c.Annotations[annNetwork])
	if rec == nil {
		return nil
	}
	fresh, err := m.cfg.Client.CoreV1().PersistentVolumeClaims(m.cfg.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
	if err != nil {
		return rec
	}
	if r := parseNetRecord(fresh.Annotations[annNetwork]); r != nil && r.Generation > rec.Generation {
		return r
	}
	return rec
}

// netPatch is the merge patch writing r, if the object is still at
// resourceVersion.
func netPatch(resourceVersion string, r netRecord) []byte {
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": resourceVersion,
		"annotations":     map[string]string{annNetwork: r.encode()},
	}})
	return b
}

// NetworkStatus returns a networked sandbox's policy, redacted, with what
// its Pod's gateway counted and refused since its sidecar started (nothing
// while it is hibernated). It neither wakes a hibernated sandbox nor
// counts as a use.
func (m *Manager) NetworkStatus(ctx context.Context, sandboxID string) (core.NetworkStatus, error) {
	if err := m.networking(); err != nil {
		return core.NetworkStatus{}, err
	}
	p, c, err := m.lookup(ctx, sandboxID)
	if err != nil {
		return core.NetworkStatus{}, err
	}
	if p == nil {
		rec := m.wakeNetRecord(ctx, c) // the newest, as a wake would give it
		if rec == nil {
			return core.NetworkStatus{}, core.NoNetwork(sandboxID)
		}
		return core.NetworkStatus{Policy: rec.Policy.Redacted()}, nil
	}
	rec := parseNetRecord(p.Annotations[annNetwork])
	if rec == nil {
		return core.NetworkStatus{}, core.NoNetwork(sandboxID)
	}
	st := core.NetworkStatus{Policy: rec.Policy.Redacted()}
	_, dead, reason, ready := podState(p)
	switch {
	case dead:
		return core.NetworkStatus{}, deadError(sandboxID, reason)
	case !ready:
		return st, nil
	}
	if err := m.applyEgress(ctx, p); err != nil {
		return core.NetworkStatus{}, err
	}
	conn, err := m.io(ctx, p)
	if err != nil {
		return core.NetworkStatus{}, err
	}
	counters, denials, _, err := conn.EgressStatus(ctx)
	if err != nil {
		return core.NetworkStatus{}, m.ioError(sandboxID, "", err)
	}
	st.Counters, st.Denials = counters, denials
	return st, nil
}

// networkOfPod is what a caller sees of a sandbox's network (annotations
// a, a Pod's or a hibernated claim's).
func networkOfPod(sb *core.Sandbox, a map[string]string) {
	if r := parseNetRecord(a[annNetwork]); r != nil {
		p := r.Policy.Redacted()
		sb.Network, sb.NetworkPolicy = true, &p
	}
}
