package driver

import (
	"bufio"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

// kernelSource is the Python side of the kernel, shipped inside the driver
// binary so the image cannot hold a mismatched copy.
//
//go:embed pykernel/kernel.py
var kernelSource []byte

// kernelMsg is a control message from a kernel (fd 4).
type kernelMsg struct {
	Type      string            `json:"type"`
	ID        string            `json:"id"`
	Sync      int64             `json:"sync"`
	PID       int               `json:"pid"`
	Data      map[string]string `json:"data"`
	EName     string            `json:"ename"`
	EValue    string            `json:"evalue"`
	Traceback []string          `json:"traceback"`
	Status    string            `json:"status"`
	// ExecutionCount is the kernel's cell counter (done only).
	ExecutionCount *int64 `json:"execution_count"`
	// Hib is the outcome of a snapshot or restore request (done only).
	Hib *ioproto.HibResult `json:"hib"`
}

// kernelHello is the first line the kernel reads from fd 3.
type kernelHello struct {
	Nonce string `json:"nonce"`
}

// kernelRequest is a request to a kernel (fd 3).
type kernelRequest struct {
	ID   string `json:"id"`
	Code string `json:"code"`
	// Language tells a kernel that runs several (Node.js: javascript,
	// typescript) how to read the code.
	Language string `json:"language,omitempty"`
	// Env is set in the kernel's environment for this request only and
	// restored afterwards (keys that did not exist are removed).
	Env map[string]string `json:"env,omitempty"`
	// SetEnv is set in the kernel's environment for good, before Env: the
	// sandbox's variables that env records changed since the kernel's last
	// request (env.go). Env's restore then goes back to them.
	SetEnv map[string]string `json:"setenv,omitempty"`
	// Op and Path ask the Python kernel to save ("snapshot") or load
	// ("restore") its user's globals in the file Path instead of running
	// code (hibernate.go). Op "interrupt" asks the Java kernel to stop
	// command ID (interrupt).
	Op   string `json:"op,omitempty"`
	Path string `json:"path,omitempty"`
}

// kernel is one running interpreter (kernelSpecs) with its pipes. It lives
// in its own process group, so signals reach subprocesses the user's code
// started.
type kernel struct {
	// spec says which interpreter this is (reasons name it).
	spec *kernelSpec
	cmd  *exec.Cmd
	ctrl *os.File // fd 3 of the kernel: requests
	// outR and errR are the driver's ends of fd 1 and 2; they are closed on
	// discard, so a background process that inherited them cannot pin the
	// reading goroutines forever.
	outR, errR *os.File
	// outW and errW are the driver's copies of the kernel's fd 1 and 2, kept
	// only to clear O_NONBLOCK on them (unblockOutput); closed once the
	// kernel exited, so that its output ends with EOF when its last
	// process does.
	outW, errW *os.File
	output     chan outputItem
	msgs       chan kernelMsg
	// exited is closed when the process has been waited for; state is then set.
	exited chan struct{}
	state  *os.ProcessState
	// stop is closed when the driver discards the kernel, releasing the
	// goroutines that feed output and msgs.
	stop chan struct{}
	// killedByDriver is set before the driver sends SIGKILL, so a SIGKILL
	// death can be told apart from the OOM killer's.
	killedByDriver bool
	// streams orders stdout (0) and stderr (1) against control messages;
	// emitted is the sync number of the last control message emitted.
	streams [2]streamOrder
	emitted int64
	log     *slog.Logger
	// stopReason, when set, is why the driver killed the kernel on a
	// context's restart or delete (contexts.go); deathReason reports it.
	stopReason atomic.Pointer[string]
	// env is the sandbox's environment the kernel has (env.go): nil for
	// the driver's at start. Only the context's executor uses it.
	env *envState
}

// kernelLauncher starts kernels.
type kernelLauncher struct {
	workspace string
	dir       string // holds the kernels' scripts, written once
	// bins maps a kernel kind to its interpreter ("" when absent).
	bins map[string]string
	// languages are the command languages this image supports.
	languages []string
	log       *slog.Logger
}

func newKernelLauncher(python, workspace string, log *slog.Logger) (*kernelLauncher, error) {
	dir, err := os.MkdirTemp("", "sandbox-driver-")
	if err != nil {
		return nil, fmt.Errorf("kernel: temp dir: %w", err)
	}
	for _, spec := range kernelSpecs {
		if err := os.WriteFile(filepath.Join(dir, spec.file), spec.source, 0o644); err != nil {
			return nil, fmt.Errorf("kernel: write script: %w", err)
		}
	}
	bins := lookBins(python)
	return &kernelLauncher{workspace: workspace, dir: dir, bins: bins, languages: probeLanguages(bins), log: log}, nil
}

// start launches the kernel that runs lang (kernelKind) in the working
// directory dir ("" for the workspace), with the environment env (nil: the
// driver's), and waits until it says it is ready. The first line on the kernel's control pipe is its hello,
// {"nonce": …}, the secret part of its sync markers (output.go).
func (l *kernelLauncher) start(lang, dir string, env []string, readyTimeout time.Duration) (*kernel, error) {
	spec := kernelSpecs[kernelKind(lang)]
	if spec == nil {
		return nil, fmt.Errorf("kernel: no kernel runs %s", lang)
	}
	bin := l.bins[spec.kind]
	if bin == "" {
		return nil, fmt.Errorf("kernel: this image has no %s interpreter for %s", spec.display, lang)
	}
	if dir == "" {
		dir = l.workspace
	}
	nonce, err := newNonce()
	if err != nil {
		return nil, fmt.Errorf("kernel: nonce: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(outR, outW)
		return nil, err
	}
	ctrlR, ctrlW, err := os.Pipe()
	if err != nil {
		closeAll(outR, outW, errR, errW)
		return nil, err
	}
	msgR, msgW, err := os.Pipe()
	if err != nil {
		closeAll(outR, outW, errR, errW, ctrlR, ctrlW)
		return nil, err
	}
	cmd := exec.Command(bin, spec.args(bin, filepath.Join(l.dir, spec.file))...)
	cmd.Dir = dir
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = append(slices.Clip(env), spec.env...)
	if spec.kind == kindPython && !hasEnv(env, "MPLBACKEND") {
		cmd.Env = append(cmd.Env, "MPLBACKEND=Agg")
	}
	cmd.Stdout = outW
	cmd.Stderr = errW
	cmd.ExtraFiles = []*os.File{ctrlR, msgW} // fd 3, fd 4
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		closeAll(outR, outW, errR, errW, ctrlR, ctrlW, msgR, msgW)
		return nil, fmt.Errorf("kernel: start %s: %w", bin, err)
	}
	// The child holds its own copies; the driver keeps its ends, and the
	// output pipes' other ends until the kernel exits (unblockOutput).
	closeAll(ctrlR, msgW)
	hello, _ := json.Marshal(kernelHello{Nonce: nonce})
	// The pipe is empty: a short line cannot block. A kernel that died
	// already is noticed below.
	_, _ = ctrlW.Write(append(hello, '\n'))

	k := &kernel{
		spec:   spec,
		cmd:    cmd,
		ctrl:   ctrlW,
		outR:   outR,
		errR:   errR,
		outW:   outW,
		errW:   errW,
		output: make(chan outputItem, 64),
		msgs:   make(chan kernelMsg, 16),
		exited: make(chan struct{}),
		stop:   make(chan struct{}),
		log:    l.log,
	}
	go (&outputReader{stream: "stdout", markers: true, nonce: nonce, out: k.output, stop: k.stop}).pump(outR)
	go (&outputReader{stream: "stderr", markers: true, nonce: nonce, out: k.output, stop: k.stop}).pump(errR)
	go k.readMessages(msgR)
	go func() {
		_ = cmd.Wait()
		closeAll(outW, errW)
		k.state = cmd.ProcessState
		close(k.exited)
	}()

	timer := time.NewTimer(readyTimeout)
	defer timer.Stop()
	for {
		select {
		case m, ok := <-k.msgs:
			if !ok {
				k.kill()
				return nil, errors.New("kernel: exited before it was ready")
			}
			if m.Type == "ready" {
				return k, nil
			}
		case it := <-k.output:
			// Start-up noise (warnings) is logged, not attributed to a command.
			if it.text != "" {
				l.log.Warn("kernel start-up output", "stream", it.stream, "text", it.text)
			}
		case <-timer.C:
			k.kill()
			return nil, fmt.Errorf("kernel: not ready after %s", readyTimeout)
		}
	}
}

// readMessages decodes control messages until the pipe closes.
func (k *kernel) readMessages(r *os.File) {
	defer close(k.msgs)
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<30)
	for sc.Scan() {
		var m kernelMsg
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			k.log.Warn("kernel: bad control message", "err", err)
			continue
		}
		select {
		case k.msgs <- m:
		case <-k.stop:
			return
		}
	}
}

// send writes a request line to the kernel.
func (k *kernel) send(req kernelRequest) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	_, err = k.ctrl.Write(append(b, '\n'))
	return err
}

// unblockOutput clears O_NONBLOCK on the kernel's output pipes; the driver
// calls it before each command. The flag belongs to the pipe's open file
// description, which the kernel shares with every child it starts: a
// Node.js child sets it on the stdout and stderr it inherits, and one
// killed before it could clear it again left it to the kernel. Then the
// large outputs of later commands were cut short without a word (Python
// and R drop what a full non-blocking pipe refuses), and a marker could be
// written in part.
func (k *kernel) unblockOutput() {
	for _, f := range []*os.File{k.outW, k.errW} {
		rc, err := f.SyscallConn()
		if err != nil {
			continue
		}
		// Control fails when the file is closed: the kernel has exited.
		_ = rc.Control(func(fd uintptr) {
			if err := syscall.SetNonblock(int(fd), false); err != nil {
				k.log.Warn("kernel: cannot make its output pipe blocking", "err", err)
			}
		})
	}
}

// signal sends sig to the kernel's process group (the kernel and whatever
// it started), like a terminal's Ctrl-C does.
func (k *kernel) signal(sig syscall.Signal) {
	if sig == syscall.SIGKILL {
		k.killedByDriver = true
	}
	_ = syscall.Kill(-k.cmd.Process.Pid, sig)
}

// interrupt stops command id, which the kernel runs: SIGINT to the
// process group and, for a kernel that wants it, an interrupt request
// naming the command.
func (k *kernel) interrupt(id string) {
	k.signal(syscall.SIGINT)
	if k.spec.interruptOp {
		if err := k.send(kernelRequest{ID: id, Op: "interrupt"}); err != nil {
			k.log.Warn("kernel: send interrupt", "err", err)
		}
	}
}

// kill ends the kernel and its process group, waits for it and releases
// its goroutines. The kernel is unusable afterwards.
func (k *kernel) kill() {
	k.signal(syscall.SIGKILL)
	<-k.exited
	k.discard()
}

// discard releases an exited kernel's resources; it kills stragglers left
// in its process group (background processes the user's code started).
func (k *kernel) discard() {
	select {
	case <-k.stop:
		return
	default:
	}
	killGroup(k.cmd.Process.Pid)
	close(k.stop)
	closeAll(k.ctrl, k.outR, k.errR)
}

// alive reports whether the kernel process is still running.
func (k *kernel) alive() bool {
	select {
	case <-k.exited:
		return false
	default:
		return true
	}
}

// deathReason explains why an exited kernel died, for the done event.
func (k *kernel) deathReason() string {
	if r := k.stopReason.Load(); r != nil {
		return *r
	}
	st := k.state
	name := k.spec.display
	if st == nil {
		return "the " + name + " process died"
	}
	ws, ok := st.Sys().(syscall.WaitStatus)
	switch {
	case ok && ws.Signaled():
		sig := ws.Signal()
		if sig == syscall.SIGKILL && !k.killedByDriver {
			return "the " + name + " process was killed by SIGKILL from outside the driver (likely out of memory)"
		}
		return fmt.Sprintf("the %s process was killed by signal %d (%s)", name, int(sig), sig)
	case ok && ws.Exited():
		return fmt.Sprintf("the %s process exited with code %d", name, ws.ExitStatus())
	}
	return "the " + name + " process died: " + st.String()
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// hasEnv reports whether the environment env has a non-empty variable
// name, as os.Getenv(name) != "" does for the driver's own.
func hasEnv(env []string, name string) bool {
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); k == name && v != "" {
			return true
		}
	}
	return false
}
