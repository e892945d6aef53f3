package docker

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Reading a container's resource use from its cgroup, for the metrics
// sampler (sampler.go). The files are read directly from the host's
// cgroup file system: no Docker API call per sample (`docker stats` would
// cost a stream per container). Their content is the kernel's, but the
// numbers in it are the sandbox's doing, and a path resolved once may later
// name something else; so every read is bounded (maxCgroupFile) and every
// parse tolerates garbage, returning "unknown" rather than failing the
// sample.
//
// Both cgroup versions are read: v1 (one hierarchy per controller, the
// cgroupfs driver's <controller>/docker/<container ID>) and v2 (one
// unified hierarchy). Where the container's cgroup is is found once per
// container (resolveCgroup), from Docker's default layout or, failing
// that, from /proc/<pid>/cgroup of its first process.

// cgroupRoot is where the host's cgroup file systems are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// maxCgroupFile bounds a read of one cgroup file: memory.stat, the
// largest read, is about 1 KiB (v1) or 2 KiB (v2).
const maxCgroupFile = 16 << 10

// cgroupPaths are the directories of one container's cgroup: one per
// controller in v1, the same one for all in v2. An empty path is a
// controller not found.
type cgroupPaths struct {
	v2                bool
	cpu, memory, pids string
}

// cgroupUsage is what one read of a container's cgroup found; ok fields say
// which were read.
type cgroupUsage struct {
	cpuNanos            uint64 // CPU time used since the container started
	memUsed, memCache   int64
	pids                int64
	cpuOK, memOK, pidOK bool
}

// readCgroupFile reads a cgroup file, at most maxCgroupFile bytes of it:
// a longer one is not a cgroup file and is refused.
func readCgroupFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readBounded(f, maxCgroupFile, path)
}

// readBounded reads all of r if it holds at most limit bytes, and fails
// naming what otherwise, having read no more than limit+1.
func readBounded(r io.Reader, limit int64, what string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", what, limit)
	}
	return b, nil
}

// parseCgroupUint parses a file holding one unsigned number ("max" is
// none: false).
func parseCgroupUint(b []byte) (uint64, bool) {
	n, err := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64)
	return n, err == nil
}

// parseCgroupStat returns the values of keys in a flat keyed file
// (memory.stat, cpu.stat: "key value" per line); a key absent or
// malformed is left out.
func parseCgroupStat(b []byte, keys ...string) map[string]uint64 {
	out := make(map[string]uint64, len(keys))
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 256), maxCgroupFile)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		for _, want := range keys {
			if k == want {
				if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
					out[k] = n
				}
			}
		}
	}
	return out
}

// clampInt64 converts a kernel counter for the domain's int64 fields.
func clampInt64(n uint64) int64 {
	return int64(min(n, 1<<63-1))
}

// read reads the container's usage. Nothing fails: what could not be
// read is left unset.
func (p cgroupPaths) read() cgroupUsage {
	var u cgroupUsage
	if p.cpu != "" {
		if p.v2 {
			if b, err := readCgroupFile(filepath.Join(p.cpu, "cpu.stat")); err == nil {
				if us, ok := parseCgroupStat(b, "usage_usec")["usage_usec"]; ok {
					u.cpuNanos, u.cpuOK = us*1000, true
				}
			}
		} else if b, err := readCgroupFile(filepath.Join(p.cpu, "cpuacct.usage")); err == nil {
			u.cpuNanos, u.cpuOK = parseCgroupUint(b)
		}
	}
	if p.memory != "" {
		usageFile, inactive, cache := "memory.usage_in_bytes", "total_inactive_file", "total_cache"
		if p.v2 {
			usageFile, inactive, cache = "memory.current", "inactive_file", "file"
		}
		b, err := readCgroupFile(filepath.Join(p.memory, usageFile))
		used, ok := parseCgroupUint(b)
		if err == nil && ok {
			if sb, err := readCgroupFile(filepath.Join(p.memory, "memory.stat")); err == nil {
				st := parseCgroupStat(sb, inactive, cache)
				// As docker stats: the inactive page cache is reclaimable
				// at once, so it is not counted as used.
				if in := st[inactive]; in <= used {
					used -= in
				}
				u.memCache = clampInt64(st[cache])
			}
			u.memUsed, u.memOK = clampInt64(used), true
		}
	}
	if p.pids != "" {
		if b, err := readCgroupFile(filepath.Join(p.pids, "pids.current")); err == nil {
			var n uint64
			n, u.pidOK = parseCgroupUint(b)
			u.pids = clampInt64(n)
		}
	}
	return u
}

// cgroupV2 reports whether the host mounts the unified hierarchy alone.
func cgroupV2(root string) bool {
	_, err := os.Stat(filepath.Join(root, "cgroup.controllers"))
	return err == nil
}

// defaultCgroupPaths are Docker's paths for a container under the
// cgroupfs driver without a cgroup parent (cgroup v1: each controller's
// docker/<id>; v2: system.slice/docker-<id>.scope under systemd, docker/<id>
// otherwise); ok is false when they do not exist.
func defaultCgroupPaths(root, containerID string) (cgroupPaths, bool) {
	if cgroupV2(root) {
		for _, rel := range []string{filepath.Join("system.slice", "docker-"+containerID+".scope"), filepath.Join("docker", containerID)} {
			if dir := filepath.Join(root, rel); isDir(dir) {
				return cgroupPaths{v2: true, cpu: dir, memory: dir, pids: dir}, true
			}
		}
		return cgroupPaths{}, false
	}
	p := cgroupPaths{
		cpu:    filepath.Join(root, "cpuacct", "docker", containerID),
		memory: filepath.Join(root, "memory", "docker", containerID),
		pids:   filepath.Join(root, "pids", "docker", containerID),
	}
	if !isDir(p.cpu) || !isDir(p.memory) {
		return cgroupPaths{}, false
	}
	if !isDir(p.pids) {
		p.pids = ""
	}
	return p, true
}

// parseProcCgroup finds a process's cgroup paths in its /proc/<pid>/cgroup
// ("id:controllers:path" per line) under root.
func parseProcCgroup(root string, b []byte) cgroupPaths {
	var p cgroupPaths
	v2 := cgroupV2(root)
	for line := range strings.SplitSeq(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") || strings.Contains(parts[2], "..") {
			continue
		}
		rel := parts[2]
		if v2 {
			if parts[0] == "0" && parts[1] == "" {
				dir := filepath.Join(root, rel)
				return cgroupPaths{v2: true, cpu: dir, memory: dir, pids: dir}
			}
			continue
		}
		for c := range strings.SplitSeq(parts[1], ",") {
			switch c {
			case "cpuacct":
				p.cpu = filepath.Join(root, "cpuacct", rel)
			case "memory":
				p.memory = filepath.Join(root, "memory", rel)
			case "pids":
				p.pids = filepath.Join(root, "pids", rel)
			}
		}
	}
	return p
}

// isDir reports whether path is a directory.
func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}
