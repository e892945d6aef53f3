// Package kube is sandboxd's Kubernetes backend: each sandbox is a Pod, and
// sandboxd replicas are stateless. It implements the same domain as the
// Docker backend (orchestrator/backend/docker) behind the same port
// (the ports of orchestrator/core, completed by core.Complete, with
// core.Validating in front): callers cannot tell the two apart, except
// for what it lacks. It has no templates, and hibernation, snapshots and
// forks, volumes and per-sandbox metrics only with the configuration they
// need (Manager.Lacks, unsupported.go): core.Complete answers every call
// of a capability it lacks with core.Unsupported, naming what is missing.
//
// # Where the seam is, and why
//
// The Docker backend keeps a sandbox's state in a host directory (meta.json
// as its commit point, /io and /workspace bind-mounted into the container)
// and its registry in memory; one sandboxd owns a host. On Kubernetes no
// replica owns anything: the API server is the only store, and /io lives in
// the Pod's emptyDir, on a node sandboxd cannot see. So the seam is the
// domain's interface, not a list of container operations: both backends
// apply the same rules (core's Policy, core.ExecRecord, the error
// classes), and the host half of /io and of the files API is the same code
// (orchestrator/backend/hostio/iolog, its follow loop included, orchestrator/backend/hostio/wspath,
// orchestrator/backend/hostio/wswatch for directory watches, whose updates stream back
// to sandboxd, and
// orchestrator/backend/hostio/cmdlog for the command log's rules: listings, input,
// execution contexts),
// run on the host by the Docker backend and inside the Pod by the io
// sidecar (orchestrator/backend/kube/iosidecar) here. The sidecar is the
// command log's only writer, as sandboxd is under Docker, so a command ID
// names one command however many replicas submit it: exactly once holds
// across replicas and their crashes.
//
// An error crosses the sidecar once, by reason: the sidecar sends what
// iolog and wspath said (iolog's sentinels, core's classes) as a reason in
// the status's details, the iosidecar.Client reads it back through the
// same table (iosidecar/errors.go), believing only reasons it may get, and
// ioError adds the sandbox's context, as the Docker backend does on the
// host. Requests are checked by core.Validating in front of this backend
// and again by the sidecar on what it receives, nowhere in between.
//
// # What is stored where
//
//   - A sandbox is a Pod named after its ID (podName). Its labels say what
//     it is (sandbox ID, pool, the user's hash) and its annotations hold
//     everything else the domain knows: tenant, user, creation, last
//     activity (written back, throttled: activity.go), idle TTL, limits,
//     metadata, and the reason it died.
//   - A user's current sandbox is named by a coordination.k8s.io Lease
//     ("binding", binding.go) whose name is derived from (tenant, user).
//     Creating it is the one-sandbox-per-user arbitration: a concurrent
//     create by another replica fails with AlreadyExists and the loser adopts
//     the winner's sandbox. A replacement moves it with a conditional update
//     (resourceVersion). The design derived the Pod's name from the
//     user instead; that cannot work with a warm pool, whose Pods exist
//     before their user is known, so the derived name moved to the binding.
//   - Warm-pool Pods are claimed with a conditional update of their labels
//     (pool.go): no Pod is claimed twice. A claim with env or other
//     limits marks the Pod shaping, appends an env record and resizes it
//     in place, then clears the mark before the Pod is bound and handed
//     out; the leader removes a Pod a dead replica left marked
//     (shape.go).
//   - With Config.StorageClass, a sandbox's /io and /workspace are a
//     PersistentVolumeClaim named as its Pod (claim.go), which outlives
//     it. A hibernated sandbox has no Pod: its claim carries its record
//     (the Pod's annotations, and the hibernation's), and the sandbox log's
//     own content seals it against new commands until the restore record
//     (hibernate.go says the steps, each one any replica can finish).
//   - Named snapshots and forks' are the one thing not on the API server:
//     with Config.SnapshotDir, each is a directory there (its record and a
//     tar archive the io sidecar exported), which every replica mounts; a
//     sandbox started from one carries the start on its Pod as a wake
//     does (snapshots.go).
//   - With Config.VolumeClass, a named volume is a PersistentVolumeClaim
//     named after its tenant and name (so the API server keeps names
//     unique), mounted by the sandbox Pods that use it and, at
//     /volumes/<ID>, by their io sidecars, which serve its files; while no
//     sandbox mounts it, a volume server Pod (the sidecar alone) does
//     (volumes.go).
//   - A networked sandbox's policy is on its Pod (and its claim while it
//     hibernates), with a generation, its header rules' values sealed for
//     the sidecar (iosidecar/seal.go); its egress gateway is
//     orchestrator/egress run in its io sidecar, to which the node's CNI
//     chain (cmd/sandbox-cni, podnet) sends the sandbox user's traffic.
//     sandboxd gives the sidecar the policy when the Pod is ready and at
//     each update (network.go). Its ports are sandboxd's ports front's,
//     dialled at the Pod's IP (ports.go); its egress counters, the
//     leader's reads of the gateway (egress_metrics.go).
//
// Every replica watches Pods and Leases with informers and serves reads from
// that cache; writes go to the API server, whose conflicts arbitrate. The
// chores that must happen once (refilling the pool, expiring idle sandboxes,
// recording deaths) run on the elected leader (client-go's leaderelection,
// on a Lease of its own); each is idempotent, so a leader that changes in
// the middle of one does no harm.
//
// # Failures are reported, never hidden
//
// A Pod deleted behind sandboxd's back, evicted, lost with its node, or
// whose sandbox container was OOM-killed makes its sandbox DEAD with that
// reason (podState). A finalizer keeps a deleted Pod's object until the
// death has been reported: the user's next AcquireSandbox names it
// (ReplacedID, ReplacedReason), and Get shows it dead until it expires.
package kube
