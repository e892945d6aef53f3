package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/backend/kube/iosidecar"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// netSidecar is a hibSidecar with an egress gateway: it records the
// policies it is given, and refuses them (no redirect) while refuse is set.
type netSidecar struct {
	*hibSidecar
	log *egressLog
}

type egressLog struct {
	mu     sync.Mutex
	set    []egressSet
	refuse bool
}

type egressSet struct {
	pod string
	p   iosidecar.EgressPolicy
}

func (s *netSidecar) SetEgress(_ context.Context, p iosidecar.EgressPolicy) (bool, error) {
	s.log.mu.Lock()
	defer s.log.mu.Unlock()
	if s.log.refuse {
		return false, fmt.Errorf("io sidecar: the redirect is not in force (test): %w", iosidecar.ErrEgressUnavailable)
	}
	s.log.set = append(s.log.set, egressSet{pod: s.pod, p: p})
	return true, nil
}

func (s *netSidecar) EgressStatus(context.Context) (core.NetworkCounters, []core.NetworkDenial, uint64, error) {
	return core.NetworkCounters{ConnsAllowed: 7, DNSDenied: 1}, []core.NetworkDenial{{Kind: "dns", Name: "denied.test", Reason: "denied by deny_out"}}, 1, nil
}

func (l *egressLog) sets() []egressSet {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.set)
}

// TestNetworkedSandbox: with EgressCNI, a networked sandbox's Pod carries
// its label, its policy and a sidecar running the gateway; the policy and
// the operator's bounds reach the gateway once the Pod is ready (once per
// Pod and generation, not per use), an update reaches it with the next
// generation, a hibernated sandbox keeps its policy on its claim (updated
// there too) and its woken Pod gets the newest; the status is the
// gateway's. A Pod whose redirect is not in force ends its sandbox, dead
// with the reason, before it is handed out. A sandbox without network has
// none of it.
func TestNetworkedSandbox(t *testing.T) {
	e, log, front := newNetEnv(t)
	cluster := e.m.cfg.EgressCluster
	ctx := core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
	policy := core.NetworkPolicy{AllowOut: []string{"allowed.test"}, DenyOut: []string{"0.0.0.0/0"}}
	r, err := e.m.Acquire(ctx, "alice", core.Options{Limits: e.m.cfg.DefaultLimits, Network: true, NetworkPolicy: &policy})
	if err != nil {
		t.Fatalf("Acquire with network: %v", err)
	}
	id := r.Sandbox.ID
	if !r.Sandbox.Network || r.Sandbox.NetworkPolicy == nil || !slices.Equal(r.Sandbox.NetworkPolicy.AllowOut, policy.AllowOut) {
		t.Errorf("acquired sandbox: network %v, policy %+v; want the policy", r.Sandbox.Network, r.Sandbox.NetworkPolicy)
	}
	p := e.pod(t, id)
	var sidecar *string
	mountsState := func(c corev1.Container) bool {
		return slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == volumeEgress })
	}
	for _, c := range p.Spec.InitContainers {
		if c.Name == containerIO && slices.Contains(c.Args, "--egress") && slices.ContainsFunc(c.Env, func(v corev1.EnvVar) bool {
			return v.Name == podIPEnv && v.ValueFrom != nil && v.ValueFrom.FieldRef != nil && v.ValueFrom.FieldRef.FieldPath == "status.podIP"
		}) && slices.Contains(c.Args, "--egress-state="+egressStateDir+"/policy.pb") && mountsState(c) {
			sidecar = &c.Name
		}
	}
	// The sidecar's state directory is its own; the CA's certificate, which
	// the sidecar writes, the sandbox mounts read-only and trusts.
	for _, c := range p.Spec.Containers {
		if mountsState(c) {
			t.Errorf("container %s mounts the io sidecar's egress state", c.Name)
		}
		if c.Name != containerSandbox {
			continue
		}
		if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
			return m.Name == volumeCA && m.MountPath == caMountPoint && m.ReadOnly
		}) || !slices.ContainsFunc(c.Env, func(v corev1.EnvVar) bool {
			return v.Name == "SSL_CERT_FILE" && v.Value == caMountPoint+"/ca-bundle.pem"
		}) {
			t.Errorf("the sandbox container mounts %+v with env %+v; want the CA read-only at %s, named by SSL_CERT_FILE", c.VolumeMounts, c.Env, caMountPoint)
		}
	}
	if !slices.ContainsFunc(p.Spec.InitContainers, func(c corev1.Container) bool {
		return c.Name == containerIO && slices.Contains(c.Args, "--egress-ca-dir="+caSidecarDir) &&
			slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == volumeCA && !m.ReadOnly })
	}) {
		t.Errorf("the io sidecar does not write the CA where the sandbox reads it")
	}
	if p.Labels[labelNetwork] != "on" || parseNetRecord(p.Annotations[annNetwork]) == nil || sidecar == nil ||
		p.Spec.DNSConfig == nil || len(p.Spec.DNSConfig.Options) != 1 || p.Spec.DNSConfig.Options[0].Name != "ndots" {
		t.Fatalf("networked pod: labels %v, annotation %q, sidecar running the gateway: %v, DNS config %+v; want ndots 1", p.Labels, p.Annotations[annNetwork], sidecar != nil, p.Spec.DNSConfig)
	}
	sets := log.sets()
	if len(sets) != 1 || sets[0].p.Generation != 1 || !slices.Equal(sets[0].p.AllowOut, policy.AllowOut) || !slices.Equal(sets[0].p.DenyOut, policy.DenyOut) ||
		sets[0].p.SandboxID != id || !slices.Equal(sets[0].p.Cluster, cluster) || !slices.Equal(sets[0].p.Ceiling, []string{"*.example.test"}) || len(sets[0].p.Hosts) != 1 {
		t.Fatalf("policies given: %+v; want generation 1 of the sandbox's, under the operator's bounds", sets)
	}
	// A use of a Pod whose gateway has its policy asks nothing more.
	if _, err := e.m.Acquire(ctx, "alice", core.Options{Limits: e.m.cfg.DefaultLimits, Network: true, NetworkPolicy: &policy}); err != nil {
		t.Fatal(err)
	}
	if n := len(log.sets()); n != 1 {
		t.Errorf("%d policies given after a second acquire; want still 1", n)
	}

	// The sidecar container restarted (its gateway has no policy): the
	// next use gives it the policy again.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := e.pod(t, id)
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: containerIO, RestartCount: 1, Ready: true}}
		_, err := e.cs.CoreV1().Pods(e.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	e.m.awaitCached(ctx, id, func(q *corev1.Pod) bool { return len(q.Status.InitContainerStatuses) == 1 })
	if _, err := e.m.Acquire(ctx, "alice", core.Options{Limits: e.m.cfg.DefaultLimits, Network: true, NetworkPolicy: &policy}); err != nil {
		t.Fatal(err)
	}
	if sets := log.sets(); len(sets) != 2 || sets[1].p.Generation != 1 {
		t.Fatalf("policies given after the sidecar restarted: %+v; want generation 1 again", sets)
	}
	log.mu.Lock()
	log.set = log.set[:1]
	log.mu.Unlock()

	// An update: the next generation, on the Pod and in the gateway. Its
	// rule's header value is a secret: sealed on the Pod's object and on
	// the way to the sidecar, opened with the io token alone.
	const secret = "Bearer sbx-rule-secret-0123456789"
	withRule := func(p core.NetworkPolicy) core.NetworkPolicy {
		p.Rules = map[string]core.NetworkRule{"allowed.test": {Headers: map[string]string{"Authorization": secret}}}
		return p
	}
	checkSealed := func(what string, ep iosidecar.EgressPolicy, ann string) {
		t.Helper()
		if strings.Contains(ann, secret) || strings.Contains(ann, "sbx-rule-secret") {
			t.Errorf("%s: the record %s holds the rule's value in clear", what, ann)
		}
		rules, err := iosidecar.OpenRules(e.m.cfg.IOToken, id, ep.SealedRules)
		if err != nil || rules["allowed.test"].Headers["Authorization"] != secret {
			t.Errorf("%s: the sidecar opens rules %+v (%v); want the header's value", what, rules, err)
		}
		if _, err := iosidecar.OpenRules(e.m.cfg.IOToken+"-rotated", id, ep.SealedRules); !errors.Is(err, iosidecar.ErrRulesSealed) {
			t.Errorf("%s: rules opened under another token: %v; want ErrRulesSealed", what, err)
		}
		if _, err := iosidecar.OpenRules(e.m.cfg.IOToken, "sb-bbbbbbbbbbbbbbbbbbbb", ep.SealedRules); !errors.Is(err, iosidecar.ErrRulesSealed) {
			t.Errorf("%s: rules opened for another sandbox: %v; want ErrRulesSealed", what, err)
		}
	}
	open := withRule(core.NetworkPolicy{AllowOut: []string{"allowed.test", "other.test"}, DenyOut: []string{"0.0.0.0/0"}, AllowPublicTraffic: true})
	sb, err := e.m.UpdateNetworkPolicy(ctx, id, open)
	if err != nil || !slices.Equal(sb.NetworkPolicy.AllowOut, open.AllowOut) {
		t.Fatalf("UpdateNetworkPolicy: %+v, %v", sb.NetworkPolicy, err)
	}
	if h, ok := sb.NetworkPolicy.Rules["allowed.test"].Headers["Authorization"]; !ok || h != "" {
		t.Errorf("UpdateNetworkPolicy answered rules %+v; want the header's name, its value blank", sb.NetworkPolicy.Rules)
	}
	sets = log.sets()
	if len(sets) != 2 || sets[1].p.Generation != 2 || !slices.Equal(sets[1].p.AllowOut, open.AllowOut) {
		t.Fatalf("policies given after the update: %+v; want generation 2", sets)
	}
	checkSealed("the update", sets[1].p, e.pod(t, id).Annotations[annNetwork])
	checkPorts(t, e, ctx, id, front, true)
	// The leader's read of the egress counters, for the per-sandbox series.
	e.m.readEgress(ctx)
	if got := e.m.SandboxEgress(); len(got) != 1 || got[0].SandboxID != id || got[0].Tenant != "acme" || got[0].ConnsAllowed != 7 {
		t.Errorf("SandboxEgress after a read: %+v; want sandbox %s's counters (7 connections allowed), tenant acme", got, id)
	}
	st, err := e.m.NetworkStatus(ctx, id)
	if err != nil || st.Counters.ConnsAllowed != 7 || len(st.Denials) != 1 || !slices.Equal(st.Policy.AllowOut, open.AllowOut) {
		t.Fatalf("NetworkStatus: %+v, %v; want the gateway's counters and the policy", st, err)
	}

	// Hibernated: the claim keeps the policy, and takes updates; the
	// woken Pod's gateway gets the newest.
	if _, err := e.m.Hibernate(ctx, id); err != nil {
		t.Fatalf("Hibernate: %v", err)
	}
	e.awaitState(t, ctx, id, core.StateHibernated)
	e.m.readEgress(ctx)
	if got := e.m.SandboxEgress(); len(got) != 0 {
		t.Errorf("SandboxEgress with the sandbox hibernated: %+v; want none", got)
	}
	third := withRule(core.NetworkPolicy{AllowOut: []string{"third.test"}, DenyOut: []string{"0.0.0.0/0"}})
	if sb, err := e.m.UpdateNetworkPolicy(ctx, id, third); err != nil || sb.State != core.StateHibernated || !slices.Equal(sb.NetworkPolicy.AllowOut, third.AllowOut) {
		t.Fatalf("UpdateNetworkPolicy of a hibernated sandbox: %+v, %v", sb, err)
	}
	if c, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx, podName(id), metav1.GetOptions{}); err != nil || strings.Contains(c.Annotations[annNetwork], "sbx-rule-secret") {
		t.Errorf("the hibernated sandbox's claim holds the rule's value in clear (or cannot be read: %v)", err)
	}
	if st, err := e.m.NetworkStatus(ctx, id); err != nil || !slices.Equal(st.Policy.AllowOut, third.AllowOut) {
		t.Fatalf("NetworkStatus of a hibernated sandbox: %+v, %v", st, err)
	}
	// A port of a hibernated sandbox: its URL, and a target the front
	// wakes (as the sandbox's tenant) before it proxies.
	if h, err := e.m.GetHost(ctx, id, 8000); err != nil || h.URL != front.URL(id, 8000) || !h.TokenRequired || h.Token != front.Token(id) {
		t.Errorf("GetHost of a hibernated sandbox: %+v, %v", h, err)
	}
	if tg, err := e.m.PortTarget(core.WithCaller(ctx, core.DefaultCaller), id, 8000, true); err != nil ||
		tg.State != core.StateHibernated || tg.Tenant != "acme" || tg.Addr.IsValid() {
		t.Errorf("PortTarget of a hibernated sandbox: %+v, %v; want hibernated, tenant acme, no address", tg, err)
	}
	if _, err := e.m.Acquire(ctx, "alice", core.Options{Limits: e.m.cfg.DefaultLimits}); err != nil {
		t.Fatalf("Acquire (wake): %v", err)
	}
	woken := e.pod(t, id)
	sets = log.sets()
	if woken.Labels[labelNetwork] != "on" || len(sets) != 3 || sets[2].p.Generation != 3 || !slices.Equal(sets[2].p.AllowOut, third.AllowOut) {
		t.Fatalf("after the wake: label %q, policies given %+v; want generation 3 given to the woken pod", woken.Labels[labelNetwork], sets)
	}
	checkSealed("the wake", sets[2].p, woken.Annotations[annNetwork])

	// Without network: none of it.
	plain, err := e.m.Acquire(ctx, "bob", core.Options{Limits: e.m.cfg.DefaultLimits})
	if err != nil {
		t.Fatal(err)
	}
	if pp := e.pod(t, plain.Sandbox.ID); pp.Labels[labelNetwork] != "" || pp.Annotations[annNetwork] != "" || plain.Sandbox.Network {
		t.Errorf("a sandbox without network: labels %v, network %v", pp.Labels, plain.Sandbox.Network)
	}
	if _, err := e.m.UpdateNetworkPolicy(ctx, plain.Sandbox.ID, open); !errors.Is(err, core.ErrFailedPrecondition) || !strings.Contains(err.Error(), "has no network") {
		t.Errorf("UpdateNetworkPolicy without network: %v; want no network", err)
	}
	if _, err := e.m.NetworkStatus(ctx, plain.Sandbox.ID); !errors.Is(err, core.ErrFailedPrecondition) {
		t.Errorf("NetworkStatus without network: %v; want no network", err)
	}
	if _, err := e.m.GetHost(ctx, plain.Sandbox.ID, 8000); !errors.Is(err, core.ErrFailedPrecondition) || !strings.Contains(err.Error(), "has no network") {
		t.Errorf("GetHost without network: %v; want no network", err)
	}
	if _, err := e.m.PortTarget(core.WithCaller(ctx, core.DefaultCaller), plain.Sandbox.ID, 8000, true); !errors.Is(err, core.ErrFailedPrecondition) {
		t.Errorf("PortTarget without network: %v; want no network", err)
	}

	// No redirect in the Pod: its sandbox is dead before it is handed out.
	log.mu.Lock()
	log.refuse = true
	log.mu.Unlock()
	_, err = e.m.Acquire(ctx, "carol", core.Options{Limits: e.m.cfg.DefaultLimits, Network: true, NetworkPolicy: &policy})
	if !errors.Is(err, core.ErrFailedPrecondition) || !strings.Contains(err.Error(), "cannot confine a networked sandbox") {
		t.Fatalf("Acquire on a pod without the redirect: %v; want its sandbox dead, saying why", err)
	}
	list, _ := e.m.List(ctx, core.ListFilter{UserID: "carol"})
	if len(list) != 1 || list[0].State != core.StateDead || !strings.Contains(list[0].StateReason, "cannot confine") {
		t.Fatalf("carol's sandboxes: %+v; want one, dead, saying why", list)
	}
	if p, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, podName(list[0].ID), metav1.GetOptions{}); err == nil && p.DeletionTimestamp == nil {
		t.Errorf("the pod without the redirect is not being deleted")
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// newNetEnv is newHibEnv with networking: the nodes' plugin, the
// operator's bounds, the ports front, and sidecars whose gateways log
// what they are given.
func newNetEnv(t *testing.T) (*hibEnv, *egressLog, *core.PortsFront) {
	t.Helper()
	log := &egressLog{}
	front, err := core.NewPortsFront("http://127.0.0.1:8090", "", []byte("a secret of the replicas, 32 B.."))
	if err != nil {
		t.Fatal(err)
	}
	cluster := []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}
	hosts := map[string][]netip.Addr{"allowed.test": {netip.MustParseAddr("198.18.0.1")}}
	e := newHibEnv(t, func(c *Config) {
		c.AllowNetwork, c.EgressCNI, c.EgressCluster, c.EgressHosts = true, true, cluster, hosts
		c.EgressCeiling = []string{"*.example.test"}
		c.Ports = front
		dial := c.DialIO
		c.DialIO = func(ctx context.Context, addr, tok string) (IOConn, error) {
			conn, err := dial(ctx, addr, tok)
			if err != nil {
				return nil, err
			}
			return &netSidecar{hibSidecar: conn.(*hibSidecar), log: log}, nil
		}
	})
	return e, log, front
}

// TestNetworkUpdateRacesHibernation: an update of a networked sandbox's
// policy racing its hibernation or its wake is never lost.
//
//   - A hibernation that began from a Pod read before an update takes the
//     update's record to the claim (it takes the record from the Pod as
//     its mark left it).
//   - An update that finds the Pod marked hibernating, its record already
//     taken to the claim, helps the hibernation finish, then writes the
//     claim: the hibernated sandbox has it.
//   - A Pod a wake made from a record older than its claim's (an update
//     wrote the claim after the wake read it) takes the claim's.
func TestNetworkUpdateRacesHibernation(t *testing.T) {
	e, _, _ := newNetEnv(t)
	ctx := core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
	policy := func(host string) core.NetworkPolicy {
		return core.NetworkPolicy{AllowOut: []string{host}, DenyOut: []string{"0.0.0.0/0"}}
	}
	first := policy("first.test")
	r, err := e.m.Acquire(ctx, "alice", core.Options{Limits: e.m.cfg.DefaultLimits, Network: true, NetworkPolicy: &first})
	if err != nil {
		t.Fatal(err)
	}
	id := r.Sandbox.ID
	claimRecord := func() *netRecord {
		t.Helper()
		r := parseNetRecord(e.claim(t, id).Annotations[annNetwork])
		if r == nil {
			t.Fatalf("sandbox %s's claim has no network record", id)
		}
		return r
	}

	// A hibernation from a stale Pod.
	stale := e.pod(t, id)
	if _, err := e.m.UpdateNetworkPolicy(ctx, id, policy("second.test")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.hibernatePod(ctx, stale, "test"); err != nil {
		t.Fatalf("hibernatePod: %v", err)
	}
	if rec := claimRecord(); rec.Generation != 2 || !slices.Equal(rec.Policy.AllowOut, []string{"second.test"}) {
		t.Fatalf("the claim after a hibernation begun from a pod read before an update: %+v; want generation 2, second.test", rec)
	}

	// An update meeting a hibernation that has taken the record to the
	// claim but not yet dropped the Pod.
	if _, err := e.m.Acquire(ctx, "alice", core.Options{Limits: e.m.cfg.DefaultLimits}); err != nil {
		t.Fatalf("Acquire (wake): %v", err)
	}
	midHibernation(t, e, ctx, id)
	sb, err := e.m.UpdateNetworkPolicy(ctx, id, policy("third.test"))
	if err != nil || sb.State != core.StateHibernated || !slices.Equal(sb.NetworkPolicy.AllowOut, []string{"third.test"}) {
		t.Fatalf("UpdateNetworkPolicy during a hibernation: %s %+v, %v; want the sandbox hibernated with third.test", sb.State, sb.NetworkPolicy, err)
	}
	if rec := claimRecord(); !slices.Equal(rec.Policy.AllowOut, []string{"third.test"}) || rec.Generation <= 2 {
		t.Fatalf("the claim after an update during a hibernation: %+v; want third.test past generation 2", rec)
	}

	// A woken Pod older than its claim's record.
	if _, err := e.m.Acquire(ctx, "alice", core.Options{Limits: e.m.cfg.DefaultLimits}); err != nil {
		t.Fatalf("Acquire (wake): %v", err)
	}
	p := e.pod(t, id)
	woken := parseNetRecord(p.Annotations[annNetwork])
	if woken == nil || !slices.Equal(woken.Policy.AllowOut, []string{"third.test"}) {
		t.Fatalf("the woken pod's record: %+v; want third.test", woken)
	}
	later := netRecord{Generation: woken.Generation + 1, Policy: policy("fourth.test")}
	c := e.claim(t, id)
	if _, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Patch(ctx, c.Name, types.MergePatchType, netPatch(c.ResourceVersion, later), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	q, err := e.m.syncWake(ctx, p, p.Annotations)
	if rec := parseNetRecord(q.Annotations[annNetwork]); err != nil || rec == nil || rec.Generation != later.Generation || !slices.Equal(rec.Policy.AllowOut, []string{"fourth.test"}) {
		t.Fatalf("syncWake: %+v, %v; want the claim's newer record, fourth.test", rec, err)
	}
	if q2, err := e.m.syncWake(ctx, q, q.Annotations); err != nil || q2.ResourceVersion != q.ResourceVersion {
		t.Errorf("syncWake of a pod as new as its claim wrote it again (%v)", err)
	}
}

// midHibernation leaves sandbox id as a hibernation that stalled after it
// took the sandbox's record to its claim: its Pod marked hibernating (now,
// so that the leader does not finish it), the claim hibernated, the Pod
// not yet dropped.
func midHibernation(t *testing.T, e *hibEnv, ctx context.Context, id string) {
	t.Helper()
	p := e.pod(t, id)
	mark := "sbx-snapshot-" + uidKey(p) + " " + time.Now().UTC().Format(time.RFC3339)
	p, err := e.m.patchPod(ctx, id, map[string]string{annHibernating: mark})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	hr, _ := json.Marshal(hibRecord{Level: ioproto.LevelFiles, TakenAt: now, HibernatedAt: now})
	ann := annotationsAny(recordAnnotations(p.Annotations))
	ann[annHibernated], ann[annImage] = string(hr), imageOf(p)
	if _, err := e.m.patchClaim(ctx, id, claimLabels(p), ann); err != nil {
		t.Fatal(err)
	}
	e.m.awaitCached(ctx, id, func(q *corev1.Pod) bool { return q.Annotations[annHibernating] != "" })
}

// TestSetTimeoutRacesHibernation: an idle timeout set while the sandbox is
// being hibernated, or while it is being woken, is not lost.
func TestSetTimeoutRacesHibernation(t *testing.T) {
	e := newHibEnv(t)
	ctx := core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
	r, err := e.m.Acquire(ctx, "dave", core.Options{Limits: e.m.cfg.DefaultLimits})
	if err != nil {
		t.Fatal(err)
	}
	id := r.Sandbox.ID
	if sb, err := e.m.SetTimeout(ctx, id, time.Hour); err != nil || sb.IdleTimeout != time.Hour || sb.State != core.StateRunning {
		t.Fatalf("SetTimeout of a running sandbox: %s %v, %v; want running, 1h", sb.State, sb.IdleTimeout, err)
	}

	midHibernation(t, e, ctx, id)
	sb, err := e.m.SetTimeout(ctx, id, 2*time.Hour)
	if err != nil || sb.State != core.StateHibernated || sb.IdleTimeout != 2*time.Hour {
		t.Fatalf("SetTimeout during a hibernation: %s %v, %v; want the sandbox hibernated with 2h", sb.State, sb.IdleTimeout, err)
	}
	if got := e.claim(t, id).Annotations[annIdleTimeout]; got != "2h0m0s" {
		t.Fatalf("the claim's idle timeout after SetTimeout during a hibernation: %q; want 2h0m0s", got)
	}

	// A Pod a wake made before a write to the claim takes the write.
	if _, err := e.m.Acquire(ctx, "dave", core.Options{Limits: e.m.cfg.DefaultLimits}); err != nil {
		t.Fatalf("Acquire (wake): %v", err)
	}
	p := e.pod(t, id)
	if got := p.Annotations[annIdleTimeout]; got != "2h0m0s" {
		t.Fatalf("the woken pod's idle timeout: %q; want 2h0m0s", got)
	}
	c := e.claim(t, id)
	used := maps.Clone(c.Annotations)
	if _, err := e.m.patchClaim(ctx, id, nil, map[string]any{annIdleTimeout: "3h0m0s"}); err != nil {
		t.Fatal(err)
	}
	q, err := e.m.syncWake(ctx, p, used)
	if err != nil || q.Annotations[annIdleTimeout] != "3h0m0s" {
		t.Fatalf("syncWake after the claim's idle timeout changed: %v, %v; want 3h0m0s", q.Annotations[annIdleTimeout], err)
	}
}

// checkPorts: a running networked sandbox's port is at its Pod's IP, with
// the front's URL and token (none when public is true, the policy's
// AllowPublicTraffic); the io sidecar's port is never a sandbox's; another
// tenant does not see the sandbox.
func checkPorts(t *testing.T, e *hibEnv, ctx context.Context, id string, front *core.PortsFront, public bool) {
	t.Helper()
	h, err := e.m.GetHost(ctx, id, 8000)
	if err != nil || h.URL != front.URL(id, 8000) || h.TokenRequired == public || (h.Token == front.Token(id)) == public {
		t.Errorf("GetHost: %+v, %v; want the front's URL, token required %v", h, err, !public)
	}
	p := e.pod(t, id)
	tg, err := e.m.PortTarget(core.WithCaller(ctx, core.DefaultCaller), id, 8000, true)
	if err != nil || tg.State != core.StateRunning || tg.Addr.String() != p.Status.PodIP+":8000" || tg.Tenant != "acme" || tg.Public != public {
		t.Errorf("PortTarget: %+v, %v; want running at %s:8000, tenant acme, public %v", tg, err, p.Status.PodIP, public)
	}
	for _, call := range []func() error{
		func() error { _, err := e.m.GetHost(ctx, id, e.m.cfg.IOPort); return err },
		func() error {
			_, err := e.m.PortTarget(core.WithCaller(ctx, core.DefaultCaller), id, e.m.cfg.IOPort, true)
			return err
		},
	} {
		if err := call(); !errors.Is(err, core.ErrFailedPrecondition) || !strings.Contains(err.Error(), "io sidecar") {
			t.Errorf("the io sidecar's port %d: %v; want refused, naming the sidecar", e.m.cfg.IOPort, err)
		}
	}
	if _, err := e.m.GetHost(core.WithCaller(ctx, core.Caller{Tenant: "other"}), id, 8000); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("GetHost by another tenant: %v; want not found", err)
	}
}
