package kube

import (
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// What the Kubernetes backend does not offer, or offers only with the
// configuration it needs: each call answers core.Unsupported (UNIMPLEMENTED
// on gRPC, 501 on the E2B door, naming this backend and the feature), as
// every backend says "not here"; docs/kubernetes.md lists them.

// backendName is this backend's --backend value.
const backendName = "kubernetes"

// unsupported is the error of an operation this backend lacks.
func unsupported(feature string) error { return core.Unsupported(backendName, feature) }

// The features this backend lacks, as unsupported names them.
const (
	featHibernation = "hibernation and wake"
	featNetwork     = "networked sandboxes (options.network and network policies)" // without Config.EgressCNI
	featMetrics     = "per-sandbox metrics"
	featSnapshots   = "snapshots and forks" // without Config.SnapshotDir
	featVolumes     = "volumes"             // without Config.VolumeClass
	featTemplates   = "templates (this backend runs the one image its Pods name; a template would need a registry the cluster pulls from)"
)

// refuseOptions is Acquire's answer to options this backend lacks,
// templates, and hibernation on idle without a storage class (a
// start from a snapshot without a snapshot directory is refused when it
// is resolved, snapshots.go): no sandbox here gets them (its Pod runs the
// one image; network is networkOf's to refuse), and an option silently
// ignored would let a caller believe it is in force (an E2B autoPause
// sandbox deleted at its timeout, with everything in it). The server's own
// --on-idle default is not an option of the caller's: without a storage
// class, Config says it is not followed here.
func (m *Manager) refuseOptions(opts core.Options) error {
	if opts.OnIdle == core.OnIdleHibernate {
		if err := m.hibernation(); err != nil {
			return err
		}
	}
	if opts.Template != "" {
		return unsupported(featTemplates)
	}
	return nil
}

// The capabilities this backend has; templates it has not.
var (
	_ core.Backend    = (*Manager)(nil)
	_ core.Network    = (*Manager)(nil)
	_ core.Snapshots  = (*Manager)(nil)
	_ core.Volumes    = (*Manager)(nil)
	_ core.Monitoring = (*Manager)(nil)
	_ core.Lacker     = (*Manager)(nil)
)

// Lacks says which of the capabilities this backend has depend on its
// configuration, and why they are missing (core.Complete answers every
// call of a missing one with it): snapshots and forks need a snapshot
// directory, volumes a class for their claims, per-sandbox metrics the
// kubelets' stats. Templates it lacks whatever its configuration.
func (m *Manager) Lacks(c core.Capability) error {
	switch c {
	case core.CapSnapshots:
		_, err := m.snapshotsOn()
		return err
	case core.CapVolumes:
		return m.volumesOn()
	case core.CapMonitoring:
		if m.stats == nil {
			return unsupported(featMetrics)
		}
	case core.CapTemplates:
		return unsupported(featTemplates)
	}
	return nil
}
