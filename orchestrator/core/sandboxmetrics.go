package core

import "time"

// SandboxMetrics is one sample of a running sandbox's resource use, taken
// by its backend from the kernel's accounting (cgroup, file systems) and
// the egress gateway's counters, and kept for a while (Manager's
// SandboxMetrics). A field the backend could not read this time is zero;
// a limit of zero is no limit.
type SandboxMetrics struct {
	// Time is when the sample was taken.
	Time time.Time
	// CPUUsedCores is the CPU the sandbox used on average since the
	// previous sample, in cores (1.5 = one and a half cores busy); zero in
	// a sandbox's first sample, which has nothing to compare with.
	CPUUsedCores float64
	// CPULimitCores is the sandbox's CPU limit in cores (Limits.NanoCPUs).
	CPULimitCores float64
	// MemoryUsedBytes is the memory the sandbox uses, less the page cache
	// the kernel may reclaim at once (as `docker stats` counts it).
	MemoryUsedBytes int64
	// MemoryCacheBytes is the page cache charged to the sandbox.
	MemoryCacheBytes int64
	// MemoryLimitBytes is its memory limit (Limits.MemoryBytes).
	MemoryLimitBytes int64
	// Workspace and IO are the use of its /workspace and /io.
	Workspace, IO DiskUsage
	// Pids is the number of its processes and threads.
	Pids int64
	// PidsLimit is its cap on them (Limits.PidsLimit).
	PidsLimit int64
	// Network is set for a networked sandbox: the bytes its egress carried
	// since the gateway last attached it (creation, wake or sandboxd's
	// start).
	Network *NetworkBytes
}

// DiskUsage is what a sandbox stores in one of its directories.
type DiskUsage struct {
	// UsedBytes is the space in use.
	UsedBytes int64
	// LimitBytes is the directory's size (its volume's), or zero when it
	// has none (a server without disk volumes).
	LimitBytes int64
}

// NetworkBytes are the bytes a networked sandbox's egress carried.
type NetworkBytes struct {
	// In is what the world sent to the sandbox, Out what it sent.
	In, Out uint64
}

// CPUUsedPercent is CPUUsedCores as a percentage of the CPU limit (100 =
// the limit is used in full), or of one core when there is no limit.
func (s SandboxMetrics) CPUUsedPercent() float64 {
	if s.CPULimitCores > 0 {
		return 100 * s.CPUUsedCores / s.CPULimitCores
	}
	return 100 * s.CPUUsedCores
}
