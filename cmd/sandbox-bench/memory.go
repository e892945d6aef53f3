package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/docker/go-units"

	"github.com/sandboxd/sandboxd/orchestrator/labels"
)

// containerOf returns the full ID of a sandbox's container, found by the
// label sandboxd puts on it.
func containerOf(ctx context.Context, sandboxID string) (string, error) {
	out, err := exec.CommandContext(ctx, "docker", "ps", "-aq", "--no-trunc",
		"--filter", "label="+labels.SandboxID+"="+sandboxID).Output()
	if err != nil {
		return "", fmt.Errorf("docker ps: %w", err)
	}
	ids := strings.Fields(string(out))
	if len(ids) != 1 {
		return "", fmt.Errorf("sandbox %s has %d containers, want 1", sandboxID, len(ids))
	}
	return ids[0], nil
}

// containerMemory is a container's memory as its cgroup accounts it.
type containerMemory struct {
	// total is everything charged to the cgroup, page cache included
	// (memory.usage_in_bytes, memory.current on cgroup v2).
	total int64
	// workingSet is total minus inactive file cache: what `docker stats`
	// shows, and what the kernel cannot simply drop under pressure.
	workingSet int64
	source     string
}

// cgroupDirs are where a container's memory cgroup lives on the common
// layouts: cgroup v1 with the cgroupfs driver, v2 with systemd, v2 with
// cgroupfs.
var cgroupDirs = []string{
	"/sys/fs/cgroup/memory/docker/%s",
	"/sys/fs/cgroup/system.slice/docker-%s.scope",
	"/sys/fs/cgroup/docker/%s",
}

// readContainerMemory reads a container's memory from its cgroup, falling
// back to `docker stats` when the cgroup is not where we look.
func readContainerMemory(ctx context.Context, containerID string) (containerMemory, error) {
	for _, pattern := range cgroupDirs {
		dir := fmt.Sprintf(pattern, containerID)
		for _, pair := range [][2]string{{"memory.usage_in_bytes", "total_inactive_file"}, {"memory.current", "inactive_file"}} {
			total, err := readInt(filepath.Join(dir, pair[0]))
			if err != nil {
				continue
			}
			stat, err := readKeyed(filepath.Join(dir, "memory.stat"))
			if err != nil {
				return containerMemory{}, err
			}
			inactive := stat[pair[1]]
			return containerMemory{total: total, workingSet: max(total-inactive, 0), source: fmt.Sprintf(pattern, "<id>") + "/" + pair[0]}, nil
		}
	}
	out, err := exec.CommandContext(ctx, "docker", "stats", "--no-stream", "--format", "{{.MemUsage}}", containerID).Output()
	if err != nil {
		return containerMemory{}, fmt.Errorf("no memory cgroup found for %s and docker stats failed: %w", containerID, err)
	}
	used, _, _ := strings.Cut(string(out), "/")
	n, err := units.RAMInBytes(strings.TrimSpace(used))
	if err != nil {
		return containerMemory{}, fmt.Errorf("docker stats said %q: %w", out, err)
	}
	return containerMemory{total: n, workingSet: n, source: "docker stats"}, nil
}

// cpuDirs are where a container's CPU accounting lives, as cgroupDirs.
var cpuDirs = []struct{ pattern, file string }{
	{"/sys/fs/cgroup/cpuacct/docker/%s", "cpuacct.usage"},       // v1: nanoseconds
	{"/sys/fs/cgroup/system.slice/docker-%s.scope", "cpu.stat"}, // v2: usage_usec
	{"/sys/fs/cgroup/docker/%s", "cpu.stat"},
}

// readContainerCPU returns the CPU time a container's cgroup has used.
func readContainerCPU(containerID string) (time.Duration, error) {
	for _, c := range cpuDirs {
		path := filepath.Join(fmt.Sprintf(c.pattern, containerID), c.file)
		if c.file == "cpuacct.usage" {
			if ns, err := readInt(path); err == nil {
				return time.Duration(ns), nil
			}
			continue
		}
		if kv, err := readKeyed(path); err == nil {
			return time.Duration(kv["usage_usec"]) * time.Microsecond, nil
		}
	}
	return 0, fmt.Errorf("no CPU accounting cgroup found for container %s", containerID)
}

// processMemory reads a process's resident set now (VmRSS) and at its peak
// (VmHWM), in bytes.
func processMemory(pid int) (rss, hwm int64, err error) {
	kv, err := readKeyed(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	// /proc/<pid>/status gives kB.
	return kv["VmRSS:"] * 1024, kv["VmHWM:"] * 1024, nil
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// readKeyed reads "key value ..." lines into a map of the first number.
func readKeyed(path string) (map[string]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		if n, err := strconv.ParseInt(fields[1], 10, 64); err == nil {
			out[fields[0]] = n
		}
	}
	return out, sc.Err()
}
