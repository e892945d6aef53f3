package e2e

// The fault suite: faults injected into every part of a running system,
// each of which must end in a defined state the API reports (the sandbox
// recovered, or dead with a reason and replaced visibly), never a hang,
// never a lost result, never a command run twice.
//
//   - sandboxd is SIGKILLed in the middle of a running command, 20 times in
//     a row (SANDBOXD_FAULT_KILLS), with a client that resumes each command
//     by its ID (StreamCommand after the last seq it saw); once more right
//     after an Execute was sent, before any event, so the client cannot know
//     whether the command was taken and sends it again;
//   - the driver is killed from inside the sandbox, and from outside (docker
//     exec), while a command runs;
//   - the container is killed, and removed, behind sandboxd's back;
//   - dockerd restarts while a command runs, then the container is killed
//     (is the death still noticed?): TestFaultDockerdRestart, which runs
//     only with SANDBOXD_FAULT_DOCKERD=1, since it disturbs every container
//     user on the machine. `make test` runs it on its own, after every
//     other test, when the variable is set; CI sets it.
//
// Every command appends its ID to a file in /workspace and to a Python
// global, which prove after the fact that it ran exactly once. The suites
// report, per runtime:
//
//	fault suite (runc): 25 faults injected, results lost: 0, double executions: 0
//	fault suite (runc, dockerd restart): 2 faults injected, results lost: 0, double executions: 0

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sandboxd/sandboxd/ioproto"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// Environment of the fault suite.
const (
	// envFaultKills sets how many times sandboxd is killed mid-command.
	envFaultKills = "SANDBOXD_FAULT_KILLS"
	// envFaultDockerd=1 enables the dockerd restart.
	envFaultDockerd = "SANDBOXD_FAULT_DOCKERD"
)

func TestFaultSuite(t *testing.T) {
	env := needE2E(t)
	for _, rt := range suiteRuntimes(t) {
		t.Run(rt, func(t *testing.T) {
			runFaultSuite(t, env.withRuntime(t, rt), rt)
		})
	}
}

// faultRun is one runtime's run of the suite.
type faultRun struct {
	t   *testing.T
	ctx context.Context
	env *e2eEnv
	d   *daemon
	// addr is fixed for the whole run: every restarted sandboxd listens on
	// it, so the client's one connection finds it again.
	addr string
	c    sandboxv1.SandboxServiceClient

	user string
	sb   string // the user's current sandbox
	// ran lists, per sandbox, the command IDs that must have run there
	// exactly once (each appends its ID to runs.log and to runs).
	ran map[string][]string

	faults, lost, double int
}

// runsCode is the start of every command: it records that it ran.
func runsCode(id string) string {
	return fmt.Sprintf("runs.append(%[1]q)\nwith open('runs.log', 'a') as _f:\n    _f.write(%[1]q + '\\n')\n", id)
}

// tickCode is a command that records its run, then prints n numbered lines
// 50 ms apart.
func tickCode(id string, n int) string {
	return runsCode(id) + fmt.Sprintf("for _i in range(%d):\n    print(f'%s line {_i}', flush=True)\n    time.sleep(0.05)\n", n, id)
}

func tickOutput(id string, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s line %d\n", id, i)
	}
	return b.String()
}

// TestFaultDockerdRestart restarts the Docker daemon under a running
// command, then kills the container to check that sandboxd, whose event
// stream broke, still notices deaths.
func TestFaultDockerdRestart(t *testing.T) {
	if os.Getenv(envFaultDockerd) != "1" {
		t.Skipf("restarting dockerd disturbs every container on this machine; set %s=1 to run it (CI does)", envFaultDockerd)
	}
	env := needE2E(t)
	for _, rt := range suiteRuntimes(t) {
		t.Run(rt, func(t *testing.T) {
			r := newFaultRun(t, env.withRuntime(t, rt))
			r.restartDockerd()
			r.checkExactlyOnce("after the dockerd restart", true)
			r.dockerKill()
			r.finish(rt + ", dockerd restart")
		})
	}
}

func runFaultSuite(t *testing.T, env *e2eEnv, runtime string) {
	r := newFaultRun(t, env)
	r.killSandboxd(envInt(t, envFaultKills, 20))
	r.killBeforeFirstEvent()
	r.checkExactlyOnce("after the sandboxd kills", true)

	r.killDriverFromInside()
	r.killDriverFromOutside()
	r.checkExactlyOnce("after the driver kills", false)

	// Faults that kill the sandbox come last, each followed by a visible
	// replacement.
	r.dockerKill()
	r.dockerRemove()
	r.finish(runtime)
}

// newFaultRun starts sandboxd and the user's sandbox.
func newFaultRun(t *testing.T, env *e2eEnv) *faultRun {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	t.Cleanup(cancel)
	r := &faultRun{t: t, ctx: ctx, env: env, user: "fault-user", ran: map[string][]string{}}
	r.d = env.start(t)
	r.addr = r.d.addr
	r.c = dialResilient(t, r.addr)
	r.newSandbox(false)
	return r
}

// finish reports the figures, checks them, and cleans up.
func (r *faultRun) finish(what string) {
	r.countDoubles()
	reportSummary(r.t, "fault suite (%s): %d faults injected, results lost: %d, double executions: %d", what, r.faults, r.lost, r.double)
	if r.lost > 0 || r.double > 0 {
		r.t.Errorf("%d results lost, %d double executions", r.lost, r.double)
	}
	r.deleteAll()
	r.d.stop(r.t)
}

// deleteAll deletes the user's sandboxes, the dead ones included.
func (r *faultRun) deleteAll() {
	list, err := r.c.ListSandboxes(r.ctx, &sandboxv1.ListSandboxesRequest{UserId: r.user})
	if err != nil {
		r.t.Errorf("ListSandboxes after the suite: %v", err)
		return
	}
	for _, sb := range list.GetSandboxes() {
		if _, err := r.c.DeleteSandbox(r.ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: sb.GetSandboxId()}); err != nil {
			r.t.Errorf("DeleteSandbox(%s) after the suite: %v", sb.GetSandboxId(), err)
		}
	}
}

// newSandbox acquires the user's sandbox and defines the globals the checks
// read. After a fault that killed the previous one, the response must say
// it replaced it.
func (r *faultRun) newSandbox(replacing bool) {
	t := r.t
	resp, err := r.c.AcquireSandbox(r.ctx, &sandboxv1.AcquireSandboxRequest{UserId: r.user})
	if err != nil {
		t.Fatalf("AcquireSandbox(%s): %v", r.user, err)
	}
	old := r.sb
	r.sb = resp.GetSandbox().GetSandboxId()
	if replacing {
		if !resp.GetCreated() || resp.GetReplacedSandboxId() != old || !resp.GetStateLost() || resp.GetReplacedReason() == "" {
			t.Errorf("AcquireSandbox after sandbox %s died = %v; want a new sandbox naming the old one, state_lost and a reason", old, resp)
		}
	}
	r.mustRun("setup", "import time\nruns = []\nkeep = 'intact'")
}

// mustRun runs a command that must end OK.
func (r *faultRun) mustRun(what, code string) outcome {
	r.t.Helper()
	o, err := runCollect(r.ctx, r.c, &sandboxv1.ExecuteRequest{SandboxId: r.sb, Code: code})
	if err != nil || o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_OK {
		r.t.Fatalf("%s: %v, done %v, errors %v, stderr %q", what, err, o.done, o.errs, o.stderr)
	}
	return o
}

// restart kills sandboxd with SIGKILL and starts the next one on the same
// address, returning once it serves.
func (r *faultRun) restart() {
	r.d.kill9(r.t)
	r.d = r.env.start(r.t, "--listen", r.addr)
}

// killSandboxd: n commands, each interrupted by a SIGKILL of sandboxd after
// its k-th line of output (k varies), and resumed by a client that saw the
// stream break.
func (r *faultRun) killSandboxd(n int) {
	const lines = 12
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("kill-%02d", i)
		killAfter := 1 + i%4
		seen, killed := 0, false
		evs, st, err := runResuming(r.ctx, r.c, &sandboxv1.ExecuteRequest{SandboxId: r.sb, CommandId: id, Code: tickCode(id, lines)},
			func(ev *sandboxv1.ExecuteEvent) {
				if ev.GetStdout() == nil || killed {
					return
				}
				if seen++; seen == killAfter {
					killed = true
					r.faults++
					r.restart()
				}
			})
		r.ran[r.sb] = append(r.ran[r.sb], id)
		switch {
		case err != nil:
			r.lost++
			r.t.Errorf("%s: %v", id, err)
		case !killed || st.resumes == 0:
			r.t.Errorf("%s: sandboxd was not killed mid-command (killed %v, resumes %d): the fault was not injected", id, killed, st.resumes)
		default:
			o := outcomeOf(evs)
			if o.stdout != tickOutput(id, lines) || o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_OK || o.done.GetStateLost() {
				r.lost++
				r.t.Errorf("%s, killed after line %d and resumed %d times: stdout %q, done %v; want every line once and OK", id, killAfter, st.resumes, o.stdout, o.done)
			}
		}
	}
}

// killBeforeFirstEvent: sandboxd dies right after an Execute was sent, so the
// client cannot know whether the command was taken, and sends it again.
func (r *faultRun) killBeforeFirstEvent() {
	const lines = 4
	id := "kill-before-events"
	req := &sandboxv1.ExecuteRequest{SandboxId: r.sb, CommandId: id, Code: tickCode(id, lines)}
	sctx, cancel := context.WithCancel(r.ctx)
	s, err := r.c.Execute(sctx, req)
	if err != nil {
		r.t.Fatalf("Execute %s: %v", id, err)
	}
	r.faults++
	r.restart()
	if _, err := recvEvents(s); err == nil {
		r.t.Logf("%s: the first stream ended cleanly before the kill took effect", id)
	}
	cancel()
	evs, st, err := runResuming(r.ctx, r.c, req, nil)
	r.ran[r.sb] = append(r.ran[r.sb], id)
	if err != nil {
		r.lost++
		r.t.Errorf("%s: %v", id, err)
		return
	}
	if o := outcomeOf(evs); o.stdout != tickOutput(id, lines) || o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_OK {
		r.lost++
		r.t.Errorf("%s, sent again after sandboxd died (%d resumes): stdout %q, done %v", id, st.resumes, o.stdout, o.done)
	}
}

// checkExactlyOnce compares the runs global (when the Python state must
// have survived) and runs.log with the commands that ran in the current
// sandbox, and checks the keep global.
func (r *faultRun) checkExactlyOnce(when string, globalsKept bool) {
	want := r.ran[r.sb]
	if globalsKept {
		o := r.mustRun("reading the globals "+when, "print(keep)\nprint('\\n'.join(runs))")
		if got := strings.Split(strings.TrimSuffix(o.stdout, "\n"), "\n"); strings.Join(got, ",") != "intact,"+strings.Join(want, ",") {
			r.t.Errorf("globals %s: keep and runs = %v; want intact and %v", when, got, want)
		}
	}
	if got := r.runsLog(); strings.Join(got, ",") != strings.Join(want, ",") {
		r.t.Errorf("runs.log %s = %v; want %v", when, got, want)
	}
}

func (r *faultRun) runsLog() []string {
	b, err := tryDownload(r.ctx, r.c, r.sb, "runs.log")
	if err != nil {
		r.t.Fatalf("DownloadFile runs.log: %v", err)
	}
	return strings.Fields(string(b))
}

// countDoubles adds the commands that ran more than once in the current
// sandbox, from its runs.log read on the host (the sandbox may be dead), and
// fails for a command that did not run at all.
func (r *faultRun) countDoubles() {
	b, err := os.ReadFile(filepath.Join(r.env.stateDir, "sandboxes", r.sb, "workspace", "runs.log"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		r.t.Errorf("reading runs.log of %s on the host: %v", r.sb, err)
		return
	}
	count := map[string]int{}
	for _, id := range strings.Fields(string(b)) {
		count[id]++
	}
	for _, id := range r.ran[r.sb] {
		switch n := count[id]; {
		case n > 1:
			r.double++
			r.t.Errorf("command %s ran %d times in %s", id, n, r.sb)
		case n == 0:
			r.lost++
			r.t.Errorf("command %s never ran in %s", id, r.sb)
		}
	}
}

// killDriverFromInside: the command kills the driver (same user, so it
// can). The container's init exits with it and Docker restarts the
// container; the command ends KILLED with state_lost, is not run again,
// and the sandbox works on, saying its state was lost.
func (r *faultRun) killDriverFromInside() {
	id := "kill-driver-inside"
	code := "echo " + id + " >> runs.log\n" +
		"kill -9 \"$(python3 -c 'import json; print(json.load(open(\"/io/driver.json\"))[\"pid\"])')\"\n" +
		"sleep 30\necho survived"
	r.faults++
	o, err := runCollect(r.ctx, r.c, &sandboxv1.ExecuteRequest{SandboxId: r.sb, CommandId: id, Language: "bash", Code: code, Timeout: durationpb.New(2 * time.Minute)})
	r.ran[r.sb] = append(r.ran[r.sb], id)
	if err != nil {
		r.lost++
		r.t.Errorf("%s: %v", id, err)
	} else if o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_KILLED || !o.done.GetStateLost() || o.done.GetReason() == "" || strings.Contains(o.stdout, "survived") {
		r.t.Errorf("%s: done %v, stdout %q; want KILLED with state_lost and a reason", id, o.done, o.stdout)
	}
	r.expectRecovered(id)
}

// killDriverFromOutside: while a command runs, the driver is killed with
// docker exec, as an operator or a crash would.
func (r *faultRun) killDriverFromOutside() {
	const lines = 40
	id := "kill-driver-outside"
	var pid string
	evs, _, err := runResuming(r.ctx, r.c, &sandboxv1.ExecuteRequest{SandboxId: r.sb, CommandId: id, Code: tickCode(id, lines)},
		func(ev *sandboxv1.ExecuteEvent) {
			if ev.GetStdout() == nil || pid != "" {
				return
			}
			var ds ioproto.DriverStatus
			if err := ioproto.ReadJSONFile(filepath.Join(r.env.stateDir, "sandboxes", r.sb, "io", "driver.json"), &ds); err != nil {
				r.t.Fatalf("reading the driver's pid: %v", err)
			}
			pid = strconv.Itoa(ds.PID)
			ctr := runningContainer(r.t, r.ctx, r.sb)
			// Detached (-d): an attached docker exec can wait forever for a
			// process whose container died under it (seen under runsc).
			ectx, cancel := context.WithTimeout(r.ctx, time.Minute)
			defer cancel()
			if out, err := exec.CommandContext(ectx, "docker", "exec", "-d", ctr.id, "kill", "-9", pid).CombinedOutput(); err != nil {
				r.t.Fatalf("docker exec -d %s kill -9 %s: %v: %s", ctr.id, pid, err, out)
			}
			r.faults++
		})
	r.ran[r.sb] = append(r.ran[r.sb], id)
	o := outcomeOf(evs)
	switch {
	case err != nil:
		r.lost++
		r.t.Errorf("%s: %v", id, err)
	case pid == "":
		r.t.Errorf("%s: the command printed nothing, so the driver was not killed", id)
	case o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_KILLED || !o.done.GetStateLost() || o.done.GetReason() == "":
		r.t.Errorf("%s: done %v; want KILLED with state_lost and a reason", id, o.done)
	case !strings.HasPrefix(tickOutput(id, lines), o.stdout) || o.stdout == "":
		r.lost++
		r.t.Errorf("%s: stdout %q is not a prefix of the lines printed in order", id, o.stdout)
	}
	r.expectRecovered(id)
}

// expectRecovered: after the driver died, the sandbox is running, runs
// code, and its next command says the Python state was lost.
func (r *faultRun) expectRecovered(after string) {
	g, err := r.c.GetSandbox(r.ctx, &sandboxv1.GetSandboxRequest{SandboxId: r.sb})
	if err != nil || g.GetSandbox().GetState() != sandboxv1.SandboxState_SANDBOX_STATE_RUNNING {
		r.t.Errorf("GetSandbox after %s: %v, %v; want the same sandbox, running", after, g, err)
	}
	o, err := runCollect(r.ctx, r.c, &sandboxv1.ExecuteRequest{SandboxId: r.sb, Code: "globals().get('keep', 'gone')"})
	if err != nil || len(o.results) != 1 {
		r.t.Fatalf("the first command after %s: %v, results %v, done %v", after, err, o.results, o.done)
	}
	if !o.done.GetStateLost() || o.results[0]["text/plain"] != "'gone'" {
		r.t.Errorf("the first command after %s: result %v, done %v; want the globals gone and state_lost reported", after, o.results, o.done)
	}
	r.mustRun("setting the globals again after "+after, "import time\nruns = []\nkeep = 'intact'")
}

// restartDockerd stops dockerd (SIGTERM, as a service manager would) while a
// command runs, waits until it is gone, checks that sandboxd answers during
// the outage without hanging, and starts dockerd again with
// scripts/ensure-docker.sh. With live-restore the container keeps running:
// the command finishes, nothing is lost, the sandbox stays the same.
func (r *faultRun) restartDockerd() {
	const lines = 60
	id := "restart-dockerd"
	restarted := false
	evs, _, err := runResuming(r.ctx, r.c, &sandboxv1.ExecuteRequest{SandboxId: r.sb, CommandId: id, Code: tickCode(id, lines)},
		func(ev *sandboxv1.ExecuteEvent) {
			if ev.GetStdout() == nil || restarted {
				return
			}
			restarted = true
			r.faults++
			pid := dockerdPID(r.t)
			if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
				r.t.Fatalf("SIGTERM to dockerd (pid %d): %v", pid, err)
			}
			if !pollUntil(90*time.Second, func() bool { return syscall.Kill(pid, 0) != nil }) {
				r.t.Fatalf("dockerd (pid %d) did not exit within 90s of SIGTERM", pid)
			}
			// During the outage: a defined answer, in bounded time.
			gctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
			_, gerr := r.c.GetSandbox(gctx, &sandboxv1.GetSandboxRequest{SandboxId: r.sb})
			cancel()
			r.t.Logf("GetSandbox while dockerd is down: %v", gerr)
			if c := status.Code(gerr); c != codes.OK && c != codes.Unavailable {
				r.t.Errorf("GetSandbox while dockerd is down: %v; want OK (the container runs on) or Unavailable, in bounded time", gerr)
			}
			ectx, ecancel := context.WithTimeout(r.ctx, 3*time.Minute)
			defer ecancel()
			script := filepath.Join("..", "scripts", "ensure-docker.sh")
			if out, err := exec.CommandContext(ectx, script).CombinedOutput(); err != nil {
				r.t.Fatalf("restarting dockerd with %s: %v\n%s", script, err, out)
			}
		})
	r.ran[r.sb] = append(r.ran[r.sb], id)
	o := outcomeOf(evs)
	switch {
	case err != nil:
		r.lost++
		r.t.Errorf("%s: %v", id, err)
	case !restarted:
		r.t.Errorf("%s: dockerd was not restarted mid-command", id)
	case o.stdout != tickOutput(id, lines) || o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_OK || o.done.GetStateLost():
		r.lost++
		r.t.Errorf("%s: stdout %q, done %v; want every line and OK (the container outlives dockerd)", id, o.stdout, o.done)
	}
	g, err := r.c.GetSandbox(r.ctx, &sandboxv1.GetSandboxRequest{SandboxId: r.sb})
	if err != nil || g.GetSandbox().GetState() != sandboxv1.SandboxState_SANDBOX_STATE_RUNNING {
		r.t.Errorf("GetSandbox after the dockerd restart: %v, %v; want the same sandbox, running", g, err)
	}
	r.mustRun("a command after the dockerd restart", "keep")
}

// dockerdPID finds the running dockerd.
func dockerdPID(t *testing.T) int {
	out, err := exec.Command("pidof", "dockerd").Output()
	if f := strings.Fields(string(out)); err == nil && len(f) == 1 {
		if pid, err := strconv.Atoi(f[0]); err == nil {
			return pid
		}
	}
	t.Fatalf("cannot find the one dockerd process: pidof said %q (%v)", out, err)
	return 0
}

// dockerKill: `docker kill` of the container while a command runs. Docker
// does not restart a killed container, so the sandbox is dead: the command's
// stream ends (never hangs) with a status or an error saying so, GetSandbox
// reports DEAD with a reason, and the user's next AcquireSandbox creates a
// new sandbox that names the old one.
func (r *faultRun) dockerKill() {
	const lines = 200
	id := "docker-kill"
	ctr := runningContainer(r.t, r.ctx, r.sb)
	killed := false
	sctx, cancel := context.WithTimeout(r.ctx, 2*time.Minute)
	defer cancel()
	evs, _, err := runResuming(sctx, r.c, &sandboxv1.ExecuteRequest{SandboxId: r.sb, CommandId: id, Code: tickCode(id, lines)},
		func(ev *sandboxv1.ExecuteEvent) {
			if ev.GetStdout() == nil || killed {
				return
			}
			killed = true
			r.faults++
			kctx, cancel := context.WithTimeout(r.ctx, time.Minute)
			defer cancel()
			if out, err := exec.CommandContext(kctx, "docker", "kill", ctr.id).CombinedOutput(); err != nil {
				r.t.Fatalf("docker kill: %v: %s", err, out)
			}
		})
	r.ran[r.sb] = append(r.ran[r.sb], id)
	done := outcomeOf(evs).done
	switch {
	case errors.Is(sctx.Err(), context.DeadlineExceeded):
		r.t.Errorf("%s: the command's stream hung after the container was killed: %v", id, err)
	case err == nil && (done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_KILLED || !done.GetStateLost()):
		r.t.Errorf("%s: done %v; want KILLED with state_lost", id, done)
	case err != nil && status.Code(err) != codes.FailedPrecondition:
		r.t.Errorf("%s: the stream ended with %v; want done or FAILED_PRECONDITION saying the sandbox died", id, err)
	}
	r.t.Logf("%s: the stream ended with done %v, error %v", id, done, err)
	r.expectDead(id)
}

// dockerRemove: the container is removed behind sandboxd's back while idle.
func (r *faultRun) dockerRemove() {
	id := "docker-rm"
	ctr := runningContainer(r.t, r.ctx, r.sb)
	r.faults++
	rctx, cancel := context.WithTimeout(r.ctx, time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(rctx, "docker", "rm", "-f", ctr.id).CombinedOutput(); err != nil {
		r.t.Fatalf("docker rm -f: %v: %s", err, out)
	}
	r.expectDead(id)
}

// expectDead: the sandbox is reported dead with a reason, and the user's
// next acquire replaces it visibly.
func (r *faultRun) expectDead(after string) {
	// Docker reports the death by an event sandboxd follows; GetSandbox
	// also inspects the container, so the first answer is already right.
	g, err := r.c.GetSandbox(r.ctx, &sandboxv1.GetSandboxRequest{SandboxId: r.sb})
	if err != nil || g.GetSandbox().GetState() != sandboxv1.SandboxState_SANDBOX_STATE_DEAD || g.GetSandbox().GetStateReason() == "" {
		r.t.Errorf("GetSandbox after %s: %v, %v; want DEAD with a reason", after, g, err)
	} else {
		r.t.Logf("after %s: DEAD: %s", after, g.GetSandbox().GetStateReason())
	}
	if _, err := runCollect(r.ctx, r.c, &sandboxv1.ExecuteRequest{SandboxId: r.sb, Code: "1"}); status.Code(err) != codes.FailedPrecondition {
		r.t.Errorf("Execute in the dead sandbox after %s: %v; want FAILED_PRECONDITION", after, err)
	}
	r.countDoubles()
	r.newSandbox(true)
}
