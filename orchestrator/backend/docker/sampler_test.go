package docker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// writeFiles creates files (path relative to root → content) under root.
func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for rel, content := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCgroupV1Read: a cgroup v1 container's figures are read as docker
// stats reads them: memory less the inactive page cache.
func TestCgroupV1Read(t *testing.T) {
	root := t.TempDir()
	const id = "abc123"
	writeFiles(t, root, map[string]string{
		"cpuacct/docker/abc123/cpuacct.usage":        "1500000000\n",
		"memory/docker/abc123/memory.usage_in_bytes": "300000000\n",
		"memory/docker/abc123/memory.stat":           "cache 100\nrss 5\ntotal_cache 50000000\ntotal_inactive_file 40000000\n",
		"pids/docker/abc123/pids.current":            "7\n",
	})
	p, ok := defaultCgroupPaths(root, id)
	if !ok || p.v2 {
		t.Fatalf("defaultCgroupPaths = %+v, %v", p, ok)
	}
	u := p.read()
	want := cgroupUsage{cpuNanos: 1500000000, memUsed: 260000000, memCache: 50000000, pids: 7, cpuOK: true, memOK: true, pidOK: true}
	if u != want {
		t.Errorf("read = %+v, want %+v", u, want)
	}
	if _, ok := defaultCgroupPaths(root, "other"); ok {
		t.Error("a container without a cgroup directory was found")
	}
}

// TestCgroupV2Read: the unified hierarchy's files, found from
// /proc/<pid>/cgroup.
func TestCgroupV2Read(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"cgroup.controllers":        "cpu memory pids\n",
		"x/y/cpu.stat":              "usage_usec 2500\nuser_usec 2000\n",
		"x/y/memory.current":        "1000\n",
		"x/y/memory.stat":           "anon 10\nfile 300\ninactive_file 200\n",
		"x/y/pids.current":          "3\n",
		"system.slice/other/ignore": "",
	})
	p := parseProcCgroup(root, []byte("0::/x/y\n"))
	if !p.v2 || p.cpu != filepath.Join(root, "x/y") {
		t.Fatalf("parseProcCgroup = %+v", p)
	}
	want := cgroupUsage{cpuNanos: 2500000, memUsed: 800, memCache: 300, pids: 3, cpuOK: true, memOK: true, pidOK: true}
	if u := p.read(); u != want {
		t.Errorf("read = %+v, want %+v", u, want)
	}
}

// TestParseProcCgroupV1 maps v1 lines to each controller's hierarchy and
// ignores malformed ones and paths climbing out of the root.
func TestParseProcCgroupV1(t *testing.T) {
	root := "/cg"
	p := parseProcCgroup(root, []byte("12:pids:/docker/c1\n4:cpu,cpuacct:/docker/c1\nbad line\n9:memory:/../../etc\n2:memory:/docker/c1\n"))
	want := cgroupPaths{cpu: "/cg/cpuacct/docker/c1", memory: "/cg/memory/docker/c1", pids: "/cg/pids/docker/c1"}
	if p != want {
		t.Errorf("parseProcCgroup = %+v, want %+v", p, want)
	}
}

// TestCgroupHostileFiles: garbage, overflowing numbers and files far
// larger than any cgroup file give "unknown", after a bounded read.
func TestCgroupHostileFiles(t *testing.T) {
	root := t.TempDir()
	huge := strings.Repeat("total_inactive_file 1\n", 100000) // ~2 MB
	writeFiles(t, root, map[string]string{
		"cpuacct/docker/c/cpuacct.usage":        "not a number",
		"memory/docker/c/memory.usage_in_bytes": "99999999999999999999999999\n",
		"memory/docker/c/memory.stat":           huge,
		"pids/docker/c/pids.current":            strings.Repeat("9", maxCgroupFile+10),
	})
	p, ok := defaultCgroupPaths(root, "c")
	if !ok {
		t.Fatal("paths not found")
	}
	if u := p.read(); u.cpuOK || u.memOK || u.pidOK {
		t.Errorf("read = %+v; want nothing read", u)
	}
	writeFiles(t, root, map[string]string{
		"memory/docker/c/memory.usage_in_bytes": "100\n",
		"memory/docker/c/memory.stat":           "total_inactive_file 500\ntotal_cache x\n" + strings.Repeat("a", 70000) + " 1\n",
	})
	// inactive above usage is ignored; a line longer than any cgroup
	// file's stops the parse, keeping what came before.
	if u := p.read(); !u.memOK || u.memUsed != 100 {
		t.Errorf("read = %+v; want memory 100", u)
	}
	if _, err := readCgroupFile(filepath.Join(root, "memory/docker/c/memory.stat")); err == nil {
		t.Error("an oversized file was read")
	}
}

// TestMetricsRing: bounded, oldest first, since filters, keepLast keeps the
// newest alone.
func TestMetricsRing(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := newMetricsRing(3)
	if got := r.since(time.Time{}); len(got) != 0 {
		t.Fatalf("empty ring: %v", got)
	}
	for i := range 5 {
		r.add(core.SandboxMetrics{Time: t0.Add(time.Duration(i) * time.Second), Pids: int64(i)})
	}
	pids := func(ss []core.SandboxMetrics) (out []int64) {
		for _, s := range ss {
			out = append(out, s.Pids)
		}
		return out
	}
	if got := pids(r.since(time.Time{})); len(got) != 3 || got[0] != 2 || got[2] != 4 {
		t.Errorf("since(zero) = %v, want [2 3 4]", got)
	}
	if got := pids(r.since(t0.Add(3 * time.Second))); len(got) != 1 || got[0] != 4 {
		t.Errorf("since(t0+3s) = %v, want [4]", got)
	}
	r.keepLast()
	if got := pids(r.since(time.Time{})); len(got) != 1 || got[0] != 4 || len(r.buf) != 1 {
		t.Errorf("after keepLast: %v (room %d), want [4] in room 1", got, len(r.buf))
	}
	r.add(core.SandboxMetrics{Time: t0.Add(9 * time.Second), Pids: 9})
	if got := pids(r.since(time.Time{})); len(got) != 1 || got[0] != 9 {
		t.Errorf("frozen ring after add: %v, want [9]", got)
	}
	e := newMetricsRing(4)
	e.keepLast()
	if got := e.since(time.Time{}); len(got) != 0 {
		t.Errorf("empty ring after keepLast: %v", got)
	}
}

// TestDirSizeBounded: the size of a directory without a volume counts at
// most the bound's entries, goes into subdirectories and follows no link.
func TestDirSizeBounded(t *testing.T) {
	dir := t.TempDir()
	for i := range 20 {
		if err := os.WriteFile(filepath.Join(dir, "f"+strings.Repeat("x", i)), make([]byte, 8192), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	all, some := dirSize(dir, 1000), dirSize(dir, 5)
	if all < 20*8192 || some >= all || some == 0 {
		t.Errorf("dirSize all %d, bounded %d", all, some)
	}
	// Subdirectories count; a link to a tree outside is not followed.
	tree, outside := t.TempDir(), t.TempDir()
	writeFiles(t, tree, map[string]string{"a/b/f": strings.Repeat("x", 64<<10)})
	writeFiles(t, outside, map[string]string{"big": strings.Repeat("y", 1<<20)})
	if err := os.Symlink(outside, filepath.Join(tree, "a", "out")); err != nil {
		t.Fatal(err)
	}
	if got := dirSize(tree, 1000); got < 64<<10 || got >= 1<<20 {
		t.Errorf("dirSize of a tree with a 64 KiB file and a link out to 1 MiB: %d", got)
	}
	if d := diskUsage(dir, "missing", false); d != (core.DiskUsage{}) {
		t.Errorf("diskUsage of a missing directory: %+v", d)
	}
	if d := diskUsage(filepath.Dir(dir), filepath.Base(dir), true); d != (core.DiskUsage{}) {
		t.Errorf("diskUsage of an unmounted volume: %+v; want nothing (the host's figures would mislead)", d)
	}
}

// TestSamplerLifecycle drives the sampler by hand over the fake engine and
// a fake cgroup tree: a running sandbox's samples carry its cgroup's
// figures and its limits, CPU as the usage's rate; a dead sandbox keeps its
// last sample alone; a deleted one nothing; SandboxMetrics is the
// caller's tenant's and filters by since.
func TestSamplerLifecycle(t *testing.T) {
	fd := newFakeDocker(testImage)
	m := newTestManager(t, testConfig(t), fd) // no sampling loop: the test samples
	m.sampler = newSampler(time.Second)
	m.sampler.root = t.TempDir()
	ctx := t.Context()
	res := acquire(t, m, "alice")
	id, cid := res.Sandbox.ID, res.Sandbox.ContainerID
	cg := func(usage string) {
		writeFiles(t, m.sampler.root, map[string]string{
			"cpuacct/docker/" + cid + "/cpuacct.usage":        usage,
			"memory/docker/" + cid + "/memory.usage_in_bytes": "5000\n",
			"memory/docker/" + cid + "/memory.stat":           "total_inactive_file 1000\ntotal_cache 1500\n",
			"pids/docker/" + cid + "/pids.current":            "4\n",
		})
	}
	cg("1000000000\n")
	m.sampleAll(ctx)
	cg("100000000000\n") // 99 s of CPU since: a rate far above zero whatever the time between
	m.sampleAll(ctx)
	ss, err := m.SandboxMetrics(ctx, id, time.Time{})
	if err != nil || len(ss) != 2 {
		t.Fatalf("SandboxMetrics = %d samples, %v; want 2", len(ss), err)
	}
	first, last := ss[0], ss[1]
	if first.CPUUsedCores != 0 || last.CPUUsedCores <= 0 {
		t.Errorf("CPU: first %v (want 0: nothing to compare with), then %v (want > 0)", first.CPUUsedCores, last.CPUUsedCores)
	}
	lim := res.Sandbox.Limits
	if last.MemoryUsedBytes != 4000 || last.MemoryCacheBytes != 1500 || last.Pids != 4 ||
		last.MemoryLimitBytes != lim.MemoryBytes || last.CPULimitCores != float64(lim.NanoCPUs)/1e9 || last.PidsLimit != lim.PidsLimit {
		t.Errorf("sample %+v; limits %+v", last, lim)
	}
	if got, _ := m.SandboxMetrics(ctx, id, first.Time); len(got) != 1 || !got[0].Time.Equal(last.Time) {
		t.Errorf("since the first sample: %+v", got)
	}
	_, err = m.SandboxMetrics(as(t, "beta", false), id, time.Time{})
	wantClass(t, err, core.ErrNotFound, id)

	fd.exit(cid, 137, false)
	awaitDead(t, m, id)
	m.sampleAll(ctx)
	m.sampleAll(ctx)
	if ss, _ := m.SandboxMetrics(ctx, id, time.Time{}); len(ss) != 1 || !ss[0].Time.Equal(last.Time) {
		t.Errorf("dead sandbox keeps %d samples; want its last alone", len(ss))
	}
	if err := m.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	m.sampleAll(ctx)
	m.sampler.mu.Lock()
	n := len(m.sampler.boxes)
	m.sampler.mu.Unlock()
	if n != 0 {
		t.Errorf("the sampler keeps %d sandboxes after the delete", n)
	}
}
