// Package hostio groups the outer half of a sandbox's /io directory and of
// its files API, which both backends run: the Docker backend on the host,
// the Kubernetes backend in each sandbox Pod's io sidecar
// (orchestrator/backend/kube/iosidecar). The driver (driver/) is the inner
// half; ioproto/PROTOCOL.md is the contract between them.
//
//   - iolog: appending to the command log (io/stdin) and following the
//     commands' events files (io/out), read as hostile input.
//   - cmdlog: the domain's rules on the command log (ListCommands' pages,
//     input, execution contexts, the driver's health), so both backends
//     page, refuse and word their errors alike.
//   - wspath: the files API on /workspace through an os.Root.
//   - wswatch: bounded directory watches under /workspace.
//   - wsarchive: a snapshot's portable form, a workspace and its globals
//     as one tar stream, read by each end as hostile.
//
// They import core and ioproto, never a backend's SDK or a door.
package hostio
