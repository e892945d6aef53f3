package docker

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxd/sandboxd/ioproto"

	"github.com/sandboxd/sandboxd/orchestrator/labels"
)

// containerUser is who runs in the sandbox: an unprivileged user that owns
// /io and /workspace (see sandboxUID).
var containerUser = fmt.Sprintf("%d:%d", sandboxUID, sandboxGID)

// tmpfsOptions bounds the writable /tmp the read-only root file system
// leaves: libraries (matplotlib, pip caches, tempfile) need one.
const tmpfsOptions = "rw,nosuid,nodev,size=256m"

// restartPolicy is "unless-stopped", not "on-failure". Either brings a
// crashed driver back (its /io state makes it resume without running
// anything twice and report lost Python state), but:
//   - on-failure does not restart a driver that exits with status 0, e.g.
//     after the sandboxed code sent it SIGTERM: the sandbox would die for
//     a reason nobody can see;
//   - unless-stopped also brings sandboxes back after the Docker daemon or
//     the host restarts, which is what "sandboxes outlive sandboxd" means
//     for the layer below too;
//   - it still respects an operator's explicit `docker stop`, which then
//     shows up as a dead sandbox with a reason.
//
// The cost is that a driver that crashes at every start is retried forever
// (with Docker's backoff, up to a minute apart) instead of being declared
// dead after N attempts; commands then wait until their caller gives up. A
// broken image is caught by the integration tests, not in production.
const restartPolicy = container.RestartPolicyUnlessStopped

// containerSpec is everything sandboxd asks Docker for, in one place so the
// security posture can be reviewed at a glance. stateDir is the Manager's
// StateDir; env is the caller's environment (already validated).
func containerSpec(sb *sandbox, runtime, stateDir string, env map[string]string) (*container.Config, *container.HostConfig) {
	envList := make([]string, 0, len(env))
	for k, v := range env {
		envList = append(envList, k+"="+v)
	}
	slices.Sort(envList) // deterministic specs make `docker inspect` diffs meaningful

	cfg := &container.Config{
		Image: sb.image,
		User:  containerUser,
		Env:   envList,
		Labels: map[string]string{
			labels.Managed:   "true",
			labels.SandboxID: sb.id,
			labels.CreatedAt: sb.createdAt.UTC().Format(time.RFC3339),
			labels.StateDir:  stateDir,
		},
		// No TTY, no stdin: the sandbox is driven only through /io.
	}
	// A warm-pool sandbox is labelled as such and gets its tenant and user
	// only when claimed, in meta.json: labels cannot change on a container.
	if sb.pool {
		cfg.Labels[labels.Pool] = "true"
	} else {
		cfg.Labels[labels.Tenant] = sb.tenant
		cfg.Labels[labels.UserID] = sb.userID
	}
	init := true
	pids := sb.limits.PidsLimit
	host := &container.HostConfig{
		Binds: []string{
			filepath.Join(sb.dir, ioDir) + ":/io:rw",
			filepath.Join(sb.dir, workspaceDir) + ":/workspace:rw",
		},
		NetworkMode:    "none",
		RestartPolicy:  container.RestartPolicy{Name: restartPolicy},
		Runtime:        runtime,
		ReadonlyRootfs: true,
		Tmpfs:          map[string]string{"/tmp": tmpfsOptions},
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		// An init as PID 1 reaps the zombies that sandboxed code leaves behind
		// and forwards signals to the driver.
		Init: &init,
		Resources: container.Resources{
			Memory: sb.limits.MemoryBytes,
			// Equal to Memory: no swap, so a memory-hungry command meets the
			// OOM killer (which the driver reports) instead of thrashing.
			MemorySwap: sb.limits.MemoryBytes,
			NanoCPUs:   sb.limits.NanoCPUs,
			PidsLimit:  &pids,
		},
		// Docker's json-file default grows without bound; the driver logs
		// little, but sandboxed code can write to the driver's stderr.
		LogConfig: container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "10m", "max-file": "2"}},
	}
	if sb.net != nil {
		// Its holder's network namespace, the only way out of which is
		// the egress gateway (network.go).
		netSpec(sb, cfg, host, env)
	}
	return cfg, host
}

// carrierSpec turns the spec of warm-pool sandbox dir's container into
// one that can carry a fast wake (carrier.go): its io/ and workspace/
// bound with rslave propagation, so mounts the host stacks on them later
// reach it (the others, a networked one's CA directory, stay as they
// are: nothing is stacked on them), and its driver told that it may be
// adopted.
func carrierSpec(dir string, cfg *container.Config, host *container.HostConfig) {
	for i, b := range host.Binds {
		src, _, _ := strings.Cut(b, ":")
		if src == filepath.Join(dir, ioDir) || src == filepath.Join(dir, workspaceDir) {
			host.Binds[i] = b + ",rslave"
		}
	}
	cfg.Env = append(cfg.Env, ioproto.EnvPoolDriver+"=1")
	cfg.Labels[labels.Carrier] = "true"
}

// Reasons given for dead sandboxes.
const (
	reasonRemoved = "container removed outside sandboxd"
)

// containerAlive interprets an inspected container state: running, paused
// (an operator's doing, reversible) and restarting (the restart policy at
// work) all count as alive. Otherwise it returns the reason the sandbox is
// dead, e.g. "container exited with code 137 (OOM-killed)".
func containerAlive(st *container.State) (alive bool, reason string) {
	if st == nil {
		return false, "container has no state"
	}
	if st.Running || st.Restarting || st.Paused {
		return true, ""
	}
	switch st.Status {
	case "exited":
		reason = fmt.Sprintf("container exited with code %d", st.ExitCode)
		if st.OOMKilled {
			reason += " (OOM-killed: it ran out of memory)"
		}
	case "created":
		reason = "container was created but never started"
	case "removing":
		reason = reasonRemoved
	default:
		reason = fmt.Sprintf("container is %s", st.Status)
	}
	if st.Error != "" {
		reason += ": " + st.Error
	}
	return false, reason
}

// summaryAlive is containerAlive for a ContainerList entry. A list entry has
// no exit code, so for a dead one the caller inspects to learn the reason.
func summaryAlive(state container.ContainerState) bool {
	switch state {
	case container.StateRunning, container.StatePaused, container.StateRestarting:
		return true
	}
	return false
}
