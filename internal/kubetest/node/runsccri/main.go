// Command runsccri is what the test nodes' containerd runs as runc (the
// BinaryName of its runsc runtime handler, under containerd's runc shim):
// gVisor's runsc, with the flags named in the file beside it (<self>.args:
// runsc's path on the first line, one flag a line after it), and with the
// two things a Pod's other containers need that runsc does not do under
// runc's shim. (gVisor's own shim, containerd-shim-runsc-v1, does them,
// and Debian packages none; internal/kubetest/node builds this instead.)
//
// A Pod's containers other than its sandbox (pause) container run inside
// the sandbox the pause container started (runsc joins them by the CRI's
// annotations). For those:
//
//   - Standard IO. runsc gives such a container the standard IO of
//     `runsc start`, not of `runsc create` as runc does. The shim runs
//     start with its stdout and stderr on a pipe it reads to the end
//     before Start returns, so the sandbox, holding the pipe's write end
//     for the container, kept it from ever returning: the kubelet's
//     StartContainer hung. Here create leaves a keeper process holding the
//     IO the shim gave it (the container log's pipes), and start runs
//     `runsc start` with the keeper's IO.
//   - Exit. runsc writes the sandbox's PID to every container's PID file,
//     and the shim learns that a container exited when it reaps that PID:
//     a container exiting alone went unseen (the shim would report it
//     running until the whole sandbox exited). Here the PID file names
//     the keeper, which, once the container started, runs `runsc wait`
//     and exits with the container's code (128 and the signal's number
//     for a container killed by a signal, as the shim counts it).
//     The keeper is the shim's child (the shim is a subreaper), and sits
//     in the cgroup runsc makes for the container, where the shim reads
//     the container's stats.
//
// Every other command, and every command about a Pod's sandbox container,
// is runsc's, unchanged, but for the errors of kill and delete about a
// container already gone, which say so in runc's words (the shim takes
// those for a container already gone and goes on).
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// keepCmd is the hidden command runsccri runs itself as to keep a
// container's IO and wait for it.
const keepCmd = "runsccri-keep"

func main() {
	runsc, flags, err := readArgs()
	if err != nil {
		fail(err)
	}
	if len(os.Args) > 1 && os.Args[1] == keepCmd {
		keep(runsc, flags, os.Args[2:])
		return
	}
	global, cmd, rest := split(os.Args[1:])
	runscArgs := append(append(clone(flags), global...), cmd)
	switch cmd {
	case "create":
		os.Exit(create(runsc, runscArgs, global, rest))
	case "start":
		os.Exit(start(runsc, runscArgs, global, rest))
	case "kill":
		os.Exit(kill(runsc, runscArgs, global, rest))
	case "delete":
		// A keeper still there (its container never started, or is
		// deleted by force) goes first: it is in the container's cgroup,
		// which runsc delete removes.
		id := lastArg(rest)
		if pid, err := keeperPid(global, id); err == nil && isKeeper(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		code := deleteContainer(runsc, runscArgs, rest)
		if code == 0 {
			_ = os.Remove(keeperFile(global, id))
		}
		os.Exit(code)
	}
	execRunsc(runsc, append(runscArgs, rest...))
}

func clone(s []string) []string { return append([]string(nil), s...) }

// readArgs reads <self>.args.
func readArgs() (string, []string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	b, err := os.ReadFile(self + ".args")
	if err != nil {
		return "", nil, err
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return "", nil, fmt.Errorf("%s.args names no runsc", self)
	}
	return lines[0], lines[1:], nil
}

// split splits runc's command line (as containerd's go-runc writes it)
// into global flags, the command and the command's arguments.
func split(args []string) (global []string, cmd string, rest []string) {
	valued := map[string]bool{"--root": true, "--log": true, "--log-format": true, "--criu": true}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			return global, a, args[i+1:]
		}
		global = append(global, a)
		if valued[a] && i+1 < len(args) {
			i++
			global = append(global, args[i])
		}
	}
	return global, "", nil
}

// flagValue is the value of flag name (--name V or --name=V) in args.
func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

func lastArg(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[len(args)-1]
}

// keeperFile is where create writes container id's keeper's PID: beside
// runsc's own state (runc's --root, one per containerd namespace).
func keeperFile(global []string, id string) string {
	return filepath.Join(flagValue(global, "--root"), id+".runsccri-keeper")
}

func keeperPid(global []string, id string) (int, error) {
	b, err := os.ReadFile(keeperFile(global, id))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// isKeeper reports whether process pid is a keeper (and not another
// process that reused a gone keeper's PID).
func isKeeper(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && bytes.Contains(b, []byte("\x00"+keepCmd+"\x00"))
}

// subcontainer reports whether the bundle's container joins a Pod's
// sandbox (the CRI's container type "container"; the Pod's pause
// container is "sandbox").
func subcontainer(bundle string) bool {
	return readSpec(bundle).Annotations["io.kubernetes.cri.container-type"] == "container"
}

// spec is what runsccri reads of a bundle's OCI spec.
type spec struct {
	Annotations map[string]string `json:"annotations"`
	Linux       struct {
		CgroupsPath string `json:"cgroupsPath"`
	} `json:"linux"`
}

func readSpec(bundle string) spec {
	var s spec
	if b, err := os.ReadFile(filepath.Join(bundle, "config.json")); err == nil {
		_ = json.Unmarshal(b, &s)
	}
	return s
}

// joinCgroups moves process pid into the bundle's container's cgroup
// (cgroupfs, v1), in every hierarchy that has it: runsc makes one for a
// Pod's container, and holds no process in it (the container runs in the
// Pod's sandbox). The shim reads a container's stats and OOM events from
// the cgroup of its PID file's process, the keeper's: the shim's own
// otherwise (this machine's root cgroup). Best effort: a keeper outside
// changes what the shim reports, not what runs.
func joinCgroups(pid int, bundle string) {
	path := readSpec(bundle).Linux.CgroupsPath
	if path == "" || strings.Contains(path, ":") { // systemd's slice:prefix:name
		return
	}
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hierarchies {
		procs := filepath.Join(h, path, "cgroup.procs")
		if _, err := os.Stat(procs); err == nil {
			_ = os.WriteFile(procs, []byte(strconv.Itoa(pid)), 0o644)
		}
	}
}

// create runs runsc create; for a Pod's container, it then starts the
// container's keeper with this process's IO (the shim's pipes) and names
// the keeper in the PID file.
func create(runsc string, runscArgs, global, rest []string) int {
	code := run(runsc, append(runscArgs, rest...))
	bundle, pidFile, id := flagValue(rest, "--bundle"), flagValue(rest, "--pid-file"), lastArg(rest)
	if code != 0 || pidFile == "" || !subcontainer(bundle) {
		return code
	}
	self, err := os.Executable()
	if err != nil {
		return failed(err)
	}
	k := exec.Command(self, append(append([]string{keepCmd}, global...), id)...)
	k.Stdin, k.Stdout, k.Stderr = os.Stdin, os.Stdout, os.Stderr
	k.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := k.Start(); err != nil {
		return failed(err)
	}
	joinCgroups(k.Process.Pid, bundle)
	pid := strconv.Itoa(k.Process.Pid)
	if err := os.WriteFile(keeperFile(global, id), []byte(pid), 0o600); err != nil {
		_ = k.Process.Kill()
		return failed(err)
	}
	if err := os.WriteFile(pidFile, []byte(pid), 0o644); err != nil {
		_ = k.Process.Kill()
		return failed(err)
	}
	// Not waited for: the shim, a subreaper, inherits and reaps it.
	_ = k.Process.Release()
	return 0
}

// start runs runsc start; for a Pod's container, with its keeper's IO,
// and then tells the keeper to wait for the container.
func start(runsc string, runscArgs, global, rest []string) int {
	id := lastArg(rest)
	pid, err := keeperPid(global, id)
	if errors.Is(err, os.ErrNotExist) {
		execRunsc(runsc, append(runscArgs, rest...))
	}
	if err != nil {
		return failed(err)
	}
	var stdio []*os.File
	for fd, mode := range []int{os.O_RDONLY, os.O_WRONLY, os.O_WRONLY} {
		f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/%d", pid, fd), mode, 0)
		if err != nil {
			return failed(fmt.Errorf("the IO of container %s's keeper: %w", id, err))
		}
		defer f.Close()
		stdio = append(stdio, f)
	}
	c := exec.Command(runsc, append(runscArgs, rest...)...)
	c.Stdin, c.Stdout, c.Stderr = stdio[0], stdio[1], stdio[2]
	if err := c.Run(); err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return failed(fmt.Errorf("runsc start %s: %w (runsc's log says why)", id, err))
	}
	if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
		return failed(fmt.Errorf("container %s's keeper: %w", id, err))
	}
	return 0
}

// keep holds its IO until told (SIGUSR1) that container id started, then
// waits for it and exits as it did.
func keep(runsc string, flags, args []string) {
	global, id := args[:len(args)-1], lastArg(args)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	<-sig
	signal.Stop(sig)
	var out bytes.Buffer
	c := exec.Command(runsc, append(append(clone(flags), global...), "wait", id)...)
	c.Stdout = &out
	// runsc's exit status: the container's code, or 128 and the signal
	// that killed it, as the shim would count the keeper's.
	var st struct {
		ExitStatus *int `json:"exitStatus"`
	}
	if err := c.Run(); err != nil || json.Unmarshal(lastLine(out.Bytes()), &st) != nil || st.ExitStatus == nil {
		// The sandbox went with the container in it.
		os.Exit(128 + int(syscall.SIGKILL))
	}
	os.Exit(*st.ExitStatus)
}

func lastLine(b []byte) []byte {
	var last []byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if l := bytes.TrimSpace(sc.Bytes()); len(l) > 0 {
			last = append([]byte(nil), l...)
		}
	}
	return last
}

// kill runs runsc kill. The shim takes runc's "container not running"
// and "does not exist" (in its error, which quotes the output) for a
// process already gone; runsc says "sandbox is not running", or names
// no state at all, and the shim's error then failed the CRI's
// StopPodSandbox after the Pod's sandbox had exited (containerd kills
// an exited sandbox again before deleting it). Its state decides.
//
// Some runsc (Debian's) cannot signal a container that never started,
// which runc can: the shim's clean-up of a failed start, which kills and
// waits for the exit before it deletes, failed. There a SIGKILL is
// runc's: the container's process (the sandbox, or the keeper) goes,
// with the container (runsc delete --force).
func kill(runsc string, runscArgs, global, rest []string) int {
	out, code := output(runsc, append(runscArgs, rest...))
	if code != 0 {
		var args []string // kill [--all] ID SIGNAL
		for _, a := range rest {
			if !strings.HasPrefix(a, "-") {
				args = append(args, a)
			}
		}
		if len(args) != 2 {
			_, _ = os.Stdout.Write(out)
			return code
		}
		id, sig := args[0], args[1]
		runscGlobal := clone(runscArgs[:len(runscArgs)-1])
		st, scode := output(runsc, append(clone(runscGlobal), "state", id))
		var state struct {
			Status string `json:"status"`
		}
		switch {
		case scode != 0:
			out = append(out, "\nrunsccri: container does not exist"...)
		case json.Unmarshal(st, &state) != nil:
		case state.Status == "stopped":
			out = append(out, "\nrunsccri: container not running"...)
		case state.Status == "created" && (sig == "9" || sig == "KILL" || sig == "SIGKILL"):
			if pid, err := keeperPid(global, id); err == nil && isKeeper(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			if dout, dcode := output(runsc, append(clone(runscGlobal), "delete", "--force", id)); dcode != 0 {
				out = append(append(out, "\nrunsccri: delete --force: "...), dout...)
			} else {
				out, code = nil, 0
			}
		}
	}
	_, _ = os.Stdout.Write(out)
	return code
}

// deleteContainer runs runsc delete. The shim ignores runc's "does not
// exist" (a container runc already deleted); runsc says "not found" of
// a Pod's container its sandbox already destroyed (one whose start
// failed), or when the sandbox has gone.
func deleteContainer(runsc string, runscArgs, rest []string) int {
	out, code := output(runsc, append(runscArgs, rest...))
	if code != 0 && (bytes.Contains(out, []byte("not found")) || bytes.Contains(out, []byte("not running"))) {
		out = append(out, "\nrunsccri: container does not exist"...)
	}
	_, _ = os.Stdout.Write(out)
	return code
}

// output runs runsc and returns its output (stdout and stderr) and exit
// code.
func output(runsc string, args []string) ([]byte, int) {
	c := exec.Command(runsc, args...)
	var b bytes.Buffer
	c.Stdout, c.Stderr = &b, &b
	err := c.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return b.Bytes(), 0
	case errors.As(err, &ee):
		return b.Bytes(), 1
	default:
		fmt.Fprintf(&b, "runsccri: %v\n", err)
		return b.Bytes(), 1
	}
}

// run runs runsc with this process's IO and returns its exit code.
func run(runsc string, args []string) int {
	c := exec.Command(runsc, args...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := c.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	default:
		return failed(err)
	}
}

// execRunsc replaces this process by runsc.
func execRunsc(runsc string, args []string) {
	fail(syscall.Exec(runsc, append([]string{runsc}, args...), os.Environ()))
}

func failed(err error) int {
	fmt.Fprintln(os.Stderr, "runsccri:", err)
	return 1
}

func fail(err error) {
	os.Exit(failed(err))
}
