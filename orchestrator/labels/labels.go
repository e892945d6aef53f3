// Package labels names the labels sandboxd puts on every container it
// creates. It is a leaf (no imports) so that tools and test harnesses that
// look at a Docker engine — `docker ps --filter label=…`, the benchmark, the
// end-to-end harness's clean-up — can name them without linking the
// orchestrator.
package labels

// The labels. Managed is how sandboxd finds its containers again after a
// restart (and never touches anyone else's); the others make `docker ps`
// readable and let reconcile match containers to state directories.
const (
	Managed   = "sandboxd.managed"
	SandboxID = "sandboxd.sandbox-id"
	UserID    = "sandboxd.user-id"
	Tenant    = "sandboxd.tenant"
	CreatedAt = "sandboxd.created-at"
	// Pool marks a container created for the warm pool. It keeps the label
	// after a user claims it (labels cannot change); meta.json records the
	// claim, and then the tenant and user, which such a container's labels
	// do not carry.
	Pool = "sandboxd.pool"
	// StateDir names the state directory of the sandboxd that owns the
	// container, so that two sandboxd instances sharing an engine never
	// take each other's containers for orphans.
	StateDir = "sandboxd.state-dir"
	// NetHolder ("true") marks the container holding a networked
	// sandbox's network namespace (sandboxd-net-<sandbox ID>), which the
	// sandbox's own container joins. It carries the sandbox's ID, StateDir
	// and Managed too, so that reconcile and the test harnesses' clean-up
	// find it with the sandbox's container.
	NetHolder = "sandboxd.net-holder"
	// Carrier ("true") marks a warm-pool container made to carry a fast
	// wake (rslave binds, a driver that may be adopted); one without it,
	// from a sandboxd that had fast wake off, never carries one.
	Carrier = "sandboxd.carrier"
)
