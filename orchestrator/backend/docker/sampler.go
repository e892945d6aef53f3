package docker

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Per-sandbox metrics (core.Manager's SandboxMetrics). One goroutine,
// sampleLoop, samples every running sandbox each Config.MetricsSampleInterval:
// CPU, memory and processes from its container's cgroup (cgroup.go), disk
// from its volumes, network bytes from the egress gateway's counters (one
// call for all sandboxes). It costs no Docker API call per sample: a
// container's cgroup is found once, when the sampler first sees it. Each
// sandbox keeps a bounded ring of samples (metricsWindow of them); a
// hibernated or dead sandbox keeps only its last, a removed one nothing.

const (
	// metricsWindow is how far back a running sandbox's samples go.
	metricsWindow = 10 * time.Minute
	// maxMetricsSamples bounds one ring whatever the interval.
	maxMetricsSamples = 720
	// maxDirWalkEntries bounds the entries counted in one directory's
	// size on a server without disk volumes (a sandbox can create
	// millions); past it the size is a lower bound.
	maxDirWalkEntries = 10000
	// cgroupResolveTimeout bounds the one inspect that finds a container's
	// process when its cgroup is not where Docker puts it by default.
	cgroupResolveTimeout = 5 * time.Second
)

// metricsRing holds a sandbox's last samples, oldest first.
type metricsRing struct {
	buf   []core.SandboxMetrics
	start int // index of the oldest
	n     int
}

func newMetricsRing(size int) *metricsRing {
	return &metricsRing{buf: make([]core.SandboxMetrics, max(size, 1))}
}

// add appends s, forgetting the oldest sample when full.
func (r *metricsRing) add(s core.SandboxMetrics) {
	if r.n < len(r.buf) {
		r.buf[(r.start+r.n)%len(r.buf)] = s
		r.n++
		return
	}
	r.buf[r.start] = s
	r.start = (r.start + 1) % len(r.buf)
}

// since returns the samples taken after t, oldest first.
func (r *metricsRing) since(t time.Time) []core.SandboxMetrics {
	var out []core.SandboxMetrics
	for i := range r.n {
		if s := r.buf[(r.start+i)%len(r.buf)]; s.Time.After(t) {
			out = append(out, s)
		}
	}
	return out
}

// keepLast forgets every sample but the newest, and the ring's room.
func (r *metricsRing) keepLast() {
	if r.n == 0 {
		r.buf = r.buf[:1]
		r.start = 0
		return
	}
	last := r.buf[(r.start+r.n-1)%len(r.buf)]
	r.buf, r.start, r.n = []core.SandboxMetrics{last}, 0, 1
}

// sampler holds the samples. The rings are guarded by mu, a leaf lock;
// the rest of each entry belongs to the sampling goroutine alone.
type sampler struct {
	interval time.Duration
	size     int    // samples per running sandbox
	root     string // cgroupRoot; tests substitute

	mu    sync.Mutex
	boxes map[string]*sampled
}

// sampled is the sampler's record of one sandbox.
type sampled struct {
	ring *metricsRing // mu

	containerID string // the container paths are for
	paths       cgroupPaths
	volumes     bool // its /io and /workspace are volumes
	prevCPU     uint64
	prevAt      time.Time
	prevOK      bool
	frozen      bool // holds only its last sample (not running)
}

func newSampler(interval time.Duration) *sampler {
	size := min(max(int(metricsWindow/interval), 2), maxMetricsSamples)
	return &sampler{interval: interval, size: size, root: cgroupRoot, boxes: map[string]*sampled{}}
}

// samples returns sandboxID's samples taken after since.
func (s *sampler) samples(sandboxID string, since time.Time) []core.SandboxMetrics {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.boxes[sandboxID]; b != nil {
		return b.ring.since(since)
	}
	return nil
}

// SandboxMetrics returns the sandbox's samples taken after since (see
// core.Manager). It neither wakes a hibernated sandbox nor counts as a
// use. With sampling off (Config.MetricsSampleInterval 0) there are none.
func (m *Manager) SandboxMetrics(ctx context.Context, sandboxID string, since time.Time) ([]core.SandboxMetrics, error) {
	if _, err := m.lookup(ctx, sandboxID); err != nil {
		return nil, err
	}
	if m.sampler == nil {
		return nil, nil
	}
	return m.sampler.samples(sandboxID, since), nil
}

// sampleLoop samples every sandbox each interval until ctx ends.
func (m *Manager) sampleLoop(ctx context.Context) {
	t := time.NewTicker(m.sampler.interval)
	defer t.Stop()
	for {
		m.sampleAll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sampleAll takes one sample of every running sandbox, freezes the others'
// rings at their last sample and forgets removed sandboxes.
func (m *Manager) sampleAll(ctx context.Context) {
	s := m.sampler
	var net map[string]core.NetworkBytes
	if m.net != nil && m.net.started.Load() {
		_, stats := m.net.gw.Counters()
		net = make(map[string]core.NetworkBytes, len(stats))
		for id, st := range stats {
			net[id] = core.NetworkBytes{In: st.BytesIn, Out: st.BytesOut}
		}
	}
	live := map[string]bool{}
	for _, sb := range m.reg.all() {
		live[sb.id] = true
		sb.mu.Lock()
		state, containerID := sb.state, sb.containerID
		sb.mu.Unlock()
		s.mu.Lock()
		b := s.boxes[sb.id]
		if b == nil {
			b = &sampled{ring: newMetricsRing(s.size)}
			s.boxes[sb.id] = b
		}
		if state != core.StateRunning || containerID == "" {
			if !b.frozen {
				b.ring.keepLast()
				b.frozen, b.containerID, b.prevOK = true, "", false
			}
			s.mu.Unlock()
			continue
		}
		if b.frozen {
			b.ring, b.frozen = newMetricsRing(s.size), false
		}
		s.mu.Unlock()
		if b.containerID != containerID {
			b.containerID, b.prevOK = containerID, false
			b.paths = m.resolveCgroup(ctx, containerID)
			b.volumes = hasVolume(sb.dir, workspaceDir)
		}
		sample := m.takeSample(sb, b)
		if sb.network {
			if nb, ok := net[sb.id]; ok {
				sample.Network = &nb
			} else {
				sample.Network = &core.NetworkBytes{}
			}
		}
		s.mu.Lock()
		b.ring.add(sample)
		s.mu.Unlock()
	}
	s.mu.Lock()
	for id := range s.boxes {
		if !live[id] {
			delete(s.boxes, id)
		}
	}
	s.mu.Unlock()
}

// takeSample reads sb's use now, b being its sampler record.
func (m *Manager) takeSample(sb *sandbox, b *sampled) core.SandboxMetrics {
	u := b.paths.read()
	now := time.Now()
	out := core.SandboxMetrics{
		Time:             now,
		CPULimitCores:    float64(sb.limits.NanoCPUs) / 1e9,
		MemoryUsedBytes:  u.memUsed,
		MemoryCacheBytes: u.memCache,
		MemoryLimitBytes: sb.limits.MemoryBytes,
		Pids:             u.pids,
		PidsLimit:        sb.limits.PidsLimit,
		Workspace:        diskUsage(sb.dir, workspaceDir, b.volumes),
		IO:               diskUsage(sb.dir, ioDir, b.volumes),
	}
	if u.cpuOK {
		if b.prevOK && u.cpuNanos >= b.prevCPU && now.After(b.prevAt) {
			out.CPUUsedCores = float64(u.cpuNanos-b.prevCPU) / float64(now.Sub(b.prevAt).Nanoseconds())
		}
		b.prevCPU, b.prevAt, b.prevOK = u.cpuNanos, now, true
	}
	return out
}

// resolveCgroup finds a container's cgroup: where Docker puts it by
// default, else where its first process is (one inspect). Not found, the
// sandbox's samples carry no CPU, memory or process figures.
func (m *Manager) resolveCgroup(ctx context.Context, containerID string) cgroupPaths {
	root := m.sampler.root
	if p, ok := defaultCgroupPaths(root, containerID); ok {
		return p
	}
	ictx, cancel := context.WithTimeout(ctx, cgroupResolveTimeout)
	defer cancel()
	info, err := m.docker.ContainerInspect(ictx, containerID)
	if err != nil || info.State == nil || info.State.Pid <= 0 {
		m.log.Debug("metrics: container's cgroup not found", "container_id", containerID, "error", err)
		return cgroupPaths{}
	}
	b, err := readCgroupFile(filepath.Join("/proc", strconv.Itoa(info.State.Pid), "cgroup"))
	if err != nil {
		return cgroupPaths{}
	}
	return parseProcCgroup(root, b)
}

// diskUsage is the use of the sandbox directory dir's subdirectory name:
// its file system's figures when it is a mounted volume, else the size of
// what it holds (bounded: maxDirWalkEntries).
func diskUsage(dir, name string, volumes bool) core.DiskUsage {
	mp := filepath.Join(dir, name)
	if volumes {
		var st syscall.Statfs_t
		if !mountedOn(dir, mp) || syscall.Statfs(mp, &st) != nil {
			return core.DiskUsage{} // not mounted: the host's figures would mislead
		}
		bs := uint64(st.Bsize)
		return core.DiskUsage{UsedBytes: clampInt64((st.Blocks - st.Bfree) * bs), LimitBytes: clampInt64(st.Blocks * bs)}
	}
	return core.DiskUsage{UsedBytes: dirSize(mp, maxDirWalkEntries)}
}

// mountedOn reports whether mp is a mount point below dir (another device),
// without reading the mount table.
func mountedOn(dir, mp string) bool {
	var a, b syscall.Stat_t
	return syscall.Lstat(dir, &a) == nil && syscall.Lstat(mp, &b) == nil && a.Dev != b.Dev
}

// dirSize is the disk space the files under root take, counting at most
// limit entries. The tree is the sandbox's, and it may change it while it
// is read: directories are read through an os.Root (a directory swapped
// for a symbolic link does not lead out of the tree) and in chunks (a
// directory of millions of entries costs no more memory than a chunk), and
// nothing is followed.
func dirSize(root string, limit int) int64 {
	r, err := os.OpenRoot(root)
	if err != nil {
		return 0
	}
	defer r.Close()
	var total int64
	budget := limit
	dirs := []string{"."}
	for len(dirs) > 0 && budget > 0 {
		dir := dirs[len(dirs)-1]
		dirs = dirs[:len(dirs)-1]
		f, err := openDir(r, dir)
		if err != nil {
			continue // gone, unreadable or no longer a directory: skipped
		}
		for budget > 0 {
			ents, err := f.ReadDir(min(budget, 256))
			for _, e := range ents {
				budget--
				rel := filepath.Join(dir, e.Name())
				fi, err := r.Lstat(rel)
				if err != nil {
					continue
				}
				if st, ok := fi.Sys().(*syscall.Stat_t); ok {
					total += st.Blocks * 512
				} else {
					total += fi.Size()
				}
				if fi.IsDir() {
					dirs = append(dirs, rel)
				}
			}
			if err != nil || len(ents) == 0 {
				break // io.EOF at the end
			}
		}
		f.Close()
	}
	return total
}

// openDir opens directory name under r to read it, never anything else:
// the sandbox may have swapped it for a FIFO since it was seen (which a
// plain open would wait on for good) or a device. O_DIRECTORY refuses
// both, O_NONBLOCK makes sure a FIFO's open returns whatever happens.
func openDir(r *os.Root, name string) (*os.File, error) {
	return r.OpenFile(name, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
}
