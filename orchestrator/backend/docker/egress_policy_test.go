package docker

import (
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// secret is a header value that must never leave the host's meta.json.
const secret = "Bearer sk-live-0123456789abcdef"

// netConfig is testConfig with network allowed.
func netConfig(t *testing.T) Config {
	cfg := testConfig(t)
	cfg.AllowNetwork = true
	return cfg
}

// noSecret fails t if v, marshalled, holds the secret.
func noSecret(t *testing.T, what string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), secret) || strings.Contains(string(b), "sk-live") {
		t.Errorf("%s shows the secret: %s", what, b)
	}
}

// readMetaFile reads a sandbox's meta.json as it is on disk.
func readMetaFile(t *testing.T, cfg Config, id string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cfg.StateDir, sandboxesDir, id, metaFile))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestNetworkPolicyStoredAndRedacted: a sandbox's policy is kept in full
// in its meta.json alone, shown redacted everywhere else, replaced by
// UpdateNetworkPolicy (persisted at once), and back after a restart.
func TestNetworkPolicyStoredAndRedacted(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := netConfig(t)
	m1, err := newValidated(t.Context(), cfg, fd)
	if err != nil {
		t.Fatal(err)
	}
	policy := core.NetworkPolicy{
		AllowOut: []string{"api.example.com", "pypi.org"},
		DenyOut:  []string{"0.0.0.0/0"},
		Rules:    map[string]core.NetworkRule{"API.example.com": {Headers: map[string]string{"Authorization": secret}}},
	}
	res, err := m1.Acquire(t.Context(), "nina", core.Options{NetworkPolicy: &policy})
	if err != nil {
		t.Fatal(err)
	}
	sb := res.Sandbox
	wantShown := &core.NetworkPolicy{AllowOut: policy.AllowOut, DenyOut: policy.DenyOut,
		Rules: map[string]core.NetworkRule{"api.example.com": {Headers: map[string]string{"Authorization": ""}}}}
	if !sb.Network || !reflect.DeepEqual(sb.NetworkPolicy, wantShown) {
		t.Fatalf("acquired: network %v, policy %+v; want network and %+v", sb.Network, sb.NetworkPolicy, wantShown)
	}
	noSecret(t, "Acquire", res)
	if meta := readMetaFile(t, cfg, sb.ID); !strings.Contains(meta, secret) || !strings.Contains(meta, `"allow_out":["api.example.com","pypi.org"]`) {
		t.Errorf("meta.json does not keep the policy in full: %s", meta)
	}
	got, err := m1.Get(t.Context(), sb.ID)
	if err != nil || !reflect.DeepEqual(got.NetworkPolicy, wantShown) {
		t.Errorf("Get: %+v, %v", got.NetworkPolicy, err)
	}
	noSecret(t, "Get", got)
	list, err := m1.List(t.Context(), core.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	noSecret(t, "List", list)
	st, err := m1.NetworkStatus(t.Context(), sb.ID)
	if err != nil || !reflect.DeepEqual(st.Policy, *wantShown) || st.Counters != (core.NetworkCounters{}) || len(st.Denials) != 0 {
		t.Errorf("NetworkStatus: %+v, %v", st, err)
	}
	noSecret(t, "NetworkStatus", st)
	if full := m1.reg.get(sb.ID).networkPolicy(); full.Rules["api.example.com"].Headers["Authorization"] != secret {
		t.Errorf("the gateway's copy lacks the secret: %+v", full)
	}

	const secret2 = "Bearer sk-live-second"
	updated, err := m1.UpdateNetworkPolicy(t.Context(), sb.ID, core.NetworkPolicy{AllowOut: []string{"*.example.com"},
		Rules: map[string]core.NetworkRule{"*.example.com": {Headers: map[string]string{"X-Api-Key": secret2}}}, AllowPublicTraffic: true})
	if err != nil {
		t.Fatal(err)
	}
	wantUpdated := &core.NetworkPolicy{AllowOut: []string{"*.example.com"},
		Rules: map[string]core.NetworkRule{"*.example.com": {Headers: map[string]string{"X-Api-Key": ""}}}, AllowPublicTraffic: true}
	if !reflect.DeepEqual(updated.NetworkPolicy, wantUpdated) || strings.Contains(mustJSON(t, updated), secret2) {
		t.Errorf("UpdateNetworkPolicy returned %+v", updated.NetworkPolicy)
	}
	if meta := readMetaFile(t, cfg, sb.ID); !strings.Contains(meta, secret2) || strings.Contains(meta, secret) {
		t.Errorf("meta.json after the update: %s", meta)
	}
	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}

	m2 := newTestManager(t, cfg, fd)
	got, err = m2.Get(t.Context(), sb.ID)
	if err != nil || !got.Network || !reflect.DeepEqual(got.NetworkPolicy, wantUpdated) {
		t.Fatalf("after a restart: %+v, %v; want %+v", got.NetworkPolicy, err, wantUpdated)
	}
	if full := m2.reg.get(sb.ID).networkPolicy(); full.Rules["*.example.com"].Headers["X-Api-Key"] != secret2 {
		t.Errorf("after a restart the gateway's copy is %+v", full)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestNetworkPolicyDefaults: network without a policy is the server's
// default, else the empty policy; a sandbox from before policies existed
// reads as the empty policy it had in effect; a sealed sandbox has none.
func TestNetworkPolicyDefaults(t *testing.T) {
	fd := newFakeDocker(testImage)
	cfg := netConfig(t)
	cfg.EgressDefault = &core.NetworkPolicy{AllowOut: []string{"pypi.org"}, DenyOut: []string{"0.0.0.0/0"}}
	m := newTestManager(t, cfg, fd)
	def, err := m.Acquire(t.Context(), "dora", core.Options{Network: true})
	if err != nil || !reflect.DeepEqual(def.Sandbox.NetworkPolicy, cfg.EgressDefault) {
		t.Fatalf("network without a policy: %+v, %v; want the server's default", def.Sandbox.NetworkPolicy, err)
	}
	sealed := acquire(t, m, "sam").Sandbox
	if sealed.Network || sealed.NetworkPolicy != nil {
		t.Errorf("a sandbox without network: %+v", sealed)
	}
	if strings.Contains(readMetaFile(t, cfg, sealed.ID), "network_policy") {
		t.Error("a sealed sandbox's meta.json has a policy")
	}

	// meta.json as written before policies: network, no policy.
	var md meta
	if err := json.Unmarshal([]byte(readMetaFile(t, cfg, def.Sandbox.ID)), &md); err != nil {
		t.Fatal(err)
	}
	md.NetworkPolicy = nil
	old := newSandbox(sandboxDir(cfg.StateDir, md.ID), md)
	if p := old.networkPolicy(); p == nil || !reflect.DeepEqual(*p, core.NetworkPolicy{}) {
		t.Errorf("a networked sandbox from before policies has %+v; want the empty policy", p)
	}
	md.Network = false
	md.NetworkPolicy = policyToMeta(cfg.EgressDefault)
	if p := newSandbox(sandboxDir(cfg.StateDir, md.ID), md).networkPolicy(); p != nil {
		t.Errorf("a sandbox without network has policy %+v", p)
	}
}

// TestNetworkOperationsRefused: a sandbox without network has no policy,
// status or ports; a dead one takes no policy; without the ports front
// GetHost says that it is off.
func TestNetworkOperationsRefused(t *testing.T) {
	fd := newFakeDocker(testImage)
	m := newTestManager(t, netConfig(t), fd)
	sealed := acquire(t, m, "sealed").Sandbox
	_, e1 := m.UpdateNetworkPolicy(t.Context(), sealed.ID, core.NetworkPolicy{})
	_, e2 := m.NetworkStatus(t.Context(), sealed.ID)
	_, e3 := m.GetHost(t.Context(), sealed.ID, 8080)
	_, e4 := m.PortTarget(t.Context(), sealed.ID, 8080, true)
	for _, err := range []error{e1, e2, e3, e4} {
		wantClass(t, err, core.ErrFailedPrecondition, "has no network")
	}
	net, err := m.Acquire(t.Context(), "net", core.Options{Network: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.GetHost(t.Context(), net.Sandbox.ID, 8080)
	wantClass(t, err, core.ErrFailedPrecondition, "port URLs need sandboxd's HTTP front for ports, which is off on this server (sandboxd --ports-listen)")
	fd.exit(net.Sandbox.ContainerID, 1, false)
	awaitDead(t, m, net.Sandbox.ID)
	_, err = m.UpdateNetworkPolicy(t.Context(), net.Sandbox.ID, core.NetworkPolicy{})
	wantClass(t, err, core.ErrFailedPrecondition, "is dead")
	_, err = m.UpdateNetworkPolicy(as(t, "other", false), net.Sandbox.ID, core.NetworkPolicy{})
	if !errors.Is(err, core.ErrNotFound) {
		t.Errorf("another tenant's update: %v; want NOT_FOUND", err)
	}
}

// TestEgressSubnetConfig: the sandboxes' block defaults to
// DefaultEgressSubnet and must be an IPv4 block with room for them.
func TestEgressSubnetConfig(t *testing.T) {
	cfg := testConfig(t)
	if err := cfg.applyDefaults(); err != nil || cfg.EgressSubnet != DefaultEgressSubnet {
		t.Fatalf("default: %v, %v", cfg.EgressSubnet, err)
	}
	for _, bad := range []string{"fd00::/64", "10.0.0.0/30", "10.0.0.0/7", "10.1.2.3/16"} {
		cfg := testConfig(t)
		cfg.EgressSubnet = netip.MustParsePrefix(bad)
		if err := cfg.applyDefaults(); !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), "EgressSubnet "+bad) {
			t.Errorf("EgressSubnet %s: %v", bad, err)
		}
	}
}
