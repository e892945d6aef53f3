package kube

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// TestNetworkRefused: without --kube-egress-cni no sandbox gets a network,
// so every request for one is refused with core.Unsupported naming the
// flag, never ignored: an Acquire asking for network or a policy (before
// anything is created), and each network operation, port URLs included.
func TestNetworkRefused(t *testing.T) {
	var m Manager // refused before any use of the API server
	ctx := core.WithCaller(t.Context(), core.DefaultCaller)
	const id = "sb-aaaaaaaaaaaaaaaaaaaa"
	_, errNet := m.Acquire(ctx, "alice", core.Options{Network: true})
	_, errPolicy := m.Acquire(ctx, "alice", core.Options{NetworkPolicy: &core.NetworkPolicy{DenyOut: []string{"0.0.0.0/0"}}})
	_, errUpdate := m.UpdateNetworkPolicy(ctx, id, core.NetworkPolicy{})
	_, errStatus := m.NetworkStatus(ctx, id)
	_, errHost := m.GetHost(ctx, id, 8080)
	_, errTarget := m.PortTarget(ctx, id, 8080, true)
	for i, err := range []error{errNet, errPolicy, errUpdate, errStatus, errHost, errTarget} {
		if !errors.Is(err, core.ErrNotImplemented) || !strings.Contains(err.Error(), "networked sandboxes") ||
			!strings.Contains(err.Error(), "--kube-egress-cni") || !strings.Contains(err.Error(), "--backend kubernetes") {
			t.Errorf("call %d: %v; want core.Unsupported naming networked sandboxes and --kube-egress-cni", i, err)
		}
	}
}

// TestAcquireRefusesWhatItCannotKeep: an Acquire asking for hibernation on
// idle (the E2B door's autoPause) or a start from a snapshot is refused
// with core.Unsupported naming the feature, before anything is created,
// never served as a sandbox that is deleted when idle or starts empty;
// the same for volumes (without Config.VolumeClass) and templates.
func TestAcquireRefusesWhatItCannotKeep(t *testing.T) {
	var m Manager // refused before any use of the API server
	ctx := core.WithCaller(t.Context(), core.DefaultCaller)
	for _, tc := range []struct {
		opts    core.Options
		feature string
	}{
		{core.Options{OnIdle: core.OnIdleHibernate}, featHibernation},
		{core.Options{FromSnapshot: "snap-aaaaaaaaaaaaaaaaaaaa"}, featSnapshots},
		{core.Options{Volumes: []core.VolumeMount{{Volume: "vol-aaaaaaaaaaaaaaaaaaaa", Path: "/data"}}}, featVolumes},
		{core.Options{Template: "tpl-aaaaaaaaaaaaaaaaaaaa"}, featTemplates},
	} {
		_, err := m.Acquire(ctx, "alice", tc.opts)
		if !core.IsUnsupported(err) || !errors.Is(err, core.ErrNotImplemented) ||
			!strings.Contains(err.Error(), tc.feature) || !strings.Contains(err.Error(), "--backend kubernetes") {
			t.Errorf("Acquire(%+v): %v; want core.Unsupported naming %q", tc.opts, err, tc.feature)
		}
	}
}

// TestHibernationNeedsAStorageClass: without Config.StorageClass there is
// no volume that outlives a Pod, so hibernating and waking are refused
// naming the flag that enables them, before any use of the API server.
func TestHibernationNeedsAStorageClass(t *testing.T) {
	var m Manager
	ctx := core.WithCaller(t.Context(), core.DefaultCaller)
	_, errHib := m.Hibernate(ctx, "sb-aaaaaaaaaaaaaaaaaaaa")
	_, _, errWake := m.Wake(ctx, "sb-aaaaaaaaaaaaaaaaaaaa")
	for i, err := range []error{errHib, errWake} {
		if !core.IsUnsupported(err) || !strings.Contains(err.Error(), "--kube-storage-class") {
			t.Errorf("call %d: %v; want core.Unsupported naming --kube-storage-class", i, err)
		}
	}
	if got := m.onIdleOf(map[string]string{annOnIdle: core.OnIdleHibernate}); got != core.OnIdleDelete {
		t.Errorf("on-idle without a storage class = %q; want %q", got, core.OnIdleDelete)
	}
}
