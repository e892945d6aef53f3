//go:build linux

package node

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// proc is a component's process (containerd, a kubelet, the scheduler, the
// controller manager); its output goes to a log file, whose tail failures
// quote.
type proc struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // after done
}

// startProc starts argv as name, in network namespace netnsName ("" for
// the host's). nsenter enters the network namespace only: the mount
// namespace stays the host's, so that what the kubelet mounts (a Pod's
// volumes) containerd sees and gives to containers, as on a real node.
func startProc(name, logPath, netnsName string, argv ...string) (*proc, error) {
	if netnsName != "" {
		argv = append([]string{"nsenter", "--net=/run/netns/" + netnsName, "--"}, argv...)
	}
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	// The owner's mark, by which sweepStale finds what a killed test left.
	cmd.Env = append(os.Environ(), ownerEnv+"="+strconv.Itoa(os.Getpid()))
	// Its own process group: a Ctrl-C of the test does not reach it
	// before the clean-up does. No Pdeathsig: it fires when the thread
	// that started the process ends, and this package ends threads (those
	// that entered a namespace). What a killed test leaves, the next
	// Start removes (sweepStale).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// ownerEnv marks every process this package starts with its test
// process's PID.
const ownerEnv = "SANDBOXD_KUBE_NODE_OWNER"

// ownerDir holds one lock file per test process running clusters, locked
// (flock) while it runs: a PID may be reused, a lock dies with its holder.
const ownerDir = "/run/sandboxd-kube-node"

// lockOwner locks this process's lock file, for the life of the process.
func lockOwner() (*os.File, error) {
	if err := os.MkdirAll(ownerDir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(ownerDir, strconv.Itoa(os.Getpid())+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// ownerGone reports whether test process pid no longer runs clusters: its
// lock file is missing or free.
func ownerGone(pid int) bool {
	if pid == os.Getpid() {
		return false
	}
	path := filepath.Join(ownerDir, strconv.Itoa(pid)+".lock")
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	defer f.Close()
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		return false
	}
	_ = os.Remove(path)
	return true
}

// killOrphans kills the processes this package started for test
// processes that are gone: the control plane components on the host's
// network (a node's are found by its namespace).
func killOrphans() {
	mark := []byte(ownerEnv + "=")
	for _, pid := range pids() {
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			owner, ok := bytes.CutPrefix(kv, mark)
			if !ok {
				continue
			}
			if o, err := strconv.Atoi(string(owner)); err == nil && ownerGone(o) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			break
		}
	}
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop ends the process: SIGTERM, then SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	if p == nil || p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// kill ends the process at once, as a crash would.
func (p *proc) kill() {
	if p == nil || p.exited() {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// tail is the end of the process's log, for failure messages.
func (p *proc) tail() string {
	f, err := os.Open(p.log)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer f.Close()
	const max = 6 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > max {
		_, _ = f.Seek(fi.Size()-max, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// killNodeProcesses kills, with SIGKILL, every process of the node whose
// network namespace is named name: those in that namespace (its kubelet,
// containerd and containerd's shims) and those in the cgroups its kubelet
// made (/<name> in every hierarchy: the Pods' containers, which have
// network namespaces of their own), then removes those cgroups. It is how
// a node is lost, and how one left by a killed test goes.
func killNodeProcesses(name string, logf func(string, ...any)) {
	var st unix.Stat_t
	if err := unix.Stat("/run/netns/"+name, &st); err == nil {
		for _, pid := range pids() {
			// Never this process: a thread of it that entered the
			// namespace may be its main thread, which the Go runtime
			// keeps (wedged) instead of ending, and /proc/<pid>/ns/net
			// is the main thread's.
			if pid == os.Getpid() {
				continue
			}
			var pst unix.Stat_t
			if unix.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &pst) == nil && pst.Ino == st.Ino && pst.Dev == st.Dev {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	// The cgroups may hold processes forking as they are killed: a few
	// rounds, freezing nothing (cgroup v1's freezer would have to be
	// thawed again on every path).
	for range 10 {
		alive := false
		for _, h := range hierarchies {
			_ = filepath.WalkDir(filepath.Join(h, name), func(path string, d os.DirEntry, err error) error {
				if err != nil || !d.IsDir() {
					return nil
				}
				for _, pid := range readPids(filepath.Join(path, "cgroup.procs")) {
					alive = true
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
				return nil
			})
		}
		if !alive {
			break
		}
		time.Sleep(100 * time.Millisecond) // the kernel's reaping, not a synchronisation
	}
	for _, h := range hierarchies {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, name), func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		slices.Reverse(dirs) // the deepest first
		for _, d := range dirs {
			if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				logf("node: remove cgroup %s: %v", d, err)
			}
		}
	}
}

// makeCgroupRoot makes the node's cgroup root, /<name> in every cgroup v1
// hierarchy (the kubelet refuses a root that is missing in one), with the
// parent's CPUs and memory nodes for cpuset, which cgroup v1 leaves empty.
func makeCgroupRoot(name string) error {
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hierarchies {
		if filepath.Base(h) == "unified" {
			continue
		}
		d := filepath.Join(h, name)
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		if filepath.Base(h) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				b, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(d, f), b, 0o644); err != nil {
					return fmt.Errorf("%s: %w", filepath.Join(d, f), err)
				}
			}
		}
	}
	return nil
}

// pids lists the processes of the host.
func pids() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// readPids reads a cgroup.procs file.
func readPids(path string) []int {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// unmountUnder detaches every mount at or under the given directories,
// the deepest first: a node's Pod volumes (the kubelet's), container root
// file systems and network namespaces (containerd's).
func unmountUnder(logf func(string, ...any), dirs ...string) {
	var points []string
	for _, d := range dirs {
		mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(d))
		if err != nil {
			logf("node: list mounts under %s: %v", d, err)
			continue
		}
		for _, m := range mounts {
			points = append(points, m.Mountpoint)
		}
	}
	slices.SortFunc(points, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, p := range slices.Compact(points) {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			logf("node: unmount %s: %v", p, err)
		}
	}
}
