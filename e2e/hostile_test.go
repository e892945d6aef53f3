package e2e

// The hostile-/io suite: everything a sandbox writes under /io is input to
// sandboxd, and sandboxed code (which runs as the user owning /io) can
// rewrite all of it. Each case plays one attack from inside a real sandbox,
// under every runtime CI has (runc and gVisor's runsc), through the real
// sandboxd binary, and then checks what a hostile tenant must never achieve:
//
//   - no host data comes back to the caller;
//   - sandboxd's memory stays bounded (its peak RSS during the case, from
//     VmHWM in /proc/<pid>/status, reset per case through clear_refs) and
//     its CPU goes back to idle once the attack's calls have ended;
//   - other tenants are unaffected: another user's Execute round trips,
//     measured all through the case, stay within a generous factor of a
//     baseline taken first (or under an absolute ceiling, for a loaded
//     2-core machine), without an error;
//   - the caller gets a clear gRPC status, never INTERNAL or UNKNOWN, and
//     never a hang (every call has a deadline; reaching it is a failure
//     except where the case sets a deadline on purpose);
//   - DeleteSandbox completes in bounded time and leaves nothing behind:
//     no container, no mount under the sandbox's state directory, no loop
//     device backed by its images.
//
// The same cases run on the Kubernetes backend (TestKube/HostileIO on the
// test kubelet, TestKubeRealNode/HostileIO on real nodes), where each Pod's
// io sidecar reads /io and sandboxd treats what it answers as hostile: a
// hostileBackend says how sandboxd is started, what a deleted sandbox may
// not leave behind, and which parts do not apply (kube_hostile_test.go).
//
// Each case is a subtest (go test -run 'TestHostileIO/runc/sparse' ./e2e/).
// The suite reports one line per runtime, e.g.
//
//	hostile-/io suite (runc): 13 cases, 0 harmed the service; peak sandboxd RSS 231 MiB (+212), other users' p50 round trip 4.0 ms (baseline 2.0 ms), Delete ≤ 0.6 s
//
// Sizes come from the environment (SANDBOXD_HOSTILE_*, below, set by
// .ci/run); the defaults are the full sizes except for the malformed lines
// (2 MiB, 4 MiB in CI). A runtime's run takes about a minute on 2 cores.

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sandboxd/sandboxd/orchestrator/labels"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// Environment of the hostile-/io suite.
const (
	// envHostileLogIDs: command IDs in the dense forged command log.
	envHostileLogIDs = "SANDBOXD_HOSTILE_LOG_IDS"
	// envHostileRefs: references to one sparse 64 MiB artifact in one event.
	envHostileRefs = "SANDBOXD_HOSTILE_REFS"
	// envHostileMalformedKiB: KiB of malformed events lines.
	envHostileMalformedKiB = "SANDBOXD_HOSTILE_MALFORMED_KIB"
	// envHostileFillCommands: commands printing 16 MiB of NUL bytes each.
	envHostileFillCommands = "SANDBOXD_HOSTILE_FILL_COMMANDS"
	// envHostileFloodSeconds: how long the inotify flood lasts.
	envHostileFloodSeconds = "SANDBOXD_HOSTILE_FLOOD_SECONDS"
	// envHostileRSSMiB: how far sandboxd's RSS may grow above its baseline
	// during a case.
	envHostileRSSMiB = "SANDBOXD_HOSTILE_RSS_MIB"
)

// Bounds the cases assert.
const (
	// hostileCallTimeout bounds every call of an attack that must end by
	// itself: reaching it is a hang.
	hostileCallTimeout = 30 * time.Second
	// hostilePrompt is how soon a refusal (a tampered log, a FIFO) must come.
	hostilePrompt = 10 * time.Second
	// hostileDeleteBound is how long DeleteSandbox of an attacked sandbox
	// may take.
	hostileDeleteBound = 30 * time.Second
	// othersFactor and othersCeiling: another user's median round trip
	// during a case may be othersFactor times the baseline's, or up to
	// othersCeiling, whichever is larger.
	othersFactor  = 20
	othersCeiling = 2 * time.Second
	// idleWithin and idleCPU: after a case's calls ended, sandboxd must use
	// less than idleCPU of one core over a one-second window within
	// idleWithin.
	idleWithin = 10 * time.Second
	idleCPU    = 0.2
	// floodCPU bounds sandboxd's average CPU (cores) during the inotify
	// flood: no more than the one core the attacker's own sandbox gets, so
	// that a flood cannot cost the host more than the flooding sandbox.
	floodCPU = 1.0
	// clkTck is the kernel's USER_HZ, the unit of /proc/<pid>/stat times
	// (100 on every Linux architecture Go supports).
	clkTck = 100
)

func TestHostileIO(t *testing.T) {
	env := needE2E(t)
	for _, rt := range suiteRuntimes(t) {
		t.Run(rt, func(t *testing.T) {
			runHostileSuite(t, dockerHostile(env.withRuntime(t, rt), rt))
		})
	}
}

// hostileBackend is what differs between the backends the suite runs on
// (the Docker engine here, Kubernetes in kube_test.go): the cases are the
// same.
type hostileBackend struct {
	// name names the run in the summary: a Docker runtime, or kube.
	name string
	// start starts sandboxd with more flags; a restart passes "--listen"
	// with the address sandboxd had.
	start func(t *testing.T, extra ...string) *daemon
	// skip says why the case or part of a case (case/part) named does not
	// apply to the backend; "" if it applies.
	skip func(name string) string
	// beforeDelete is called before the attacked sandbox sb is deleted,
	// to check what the backend checks of an attacked sandbox; it returns
	// what lists sb's leftovers once it is deleted.
	beforeDelete func(hc *hostileCase, sb string) (leftovers func(ctx context.Context) []string)
	// cleanWithin is how soon after the deletion nothing of it may be left.
	cleanWithin time.Duration
	// afterCase, if set, checks what the backend checks after each case
	// (on Kubernetes: the other user's Pod).
	afterCase func(hc *hostileCase)
	// acquired, if set, is told of each attacked sandbox before the
	// attack (on Kubernetes: to know its io sidecar's container).
	acquired func(hc *hostileCase, sb string)
}

// dockerHostile runs the suite on the Docker engine under runtime rt:
// an attacked sandbox leaves no container, no mount under its state
// directory and no loop device backed by its images.
func dockerHostile(env *e2eEnv, rt string) *hostileBackend {
	return &hostileBackend{
		name:        rt,
		start:       env.start,
		skip:        func(string) string { return "" },
		cleanWithin: 10 * time.Second,
		beforeDelete: func(_ *hostileCase, sb string) func(context.Context) []string {
			dir := filepath.Join(env.stateDir, "sandboxes", sb)
			return func(ctx context.Context) []string {
				var left []string
				for _, c := range dockerLinesQuiet(ctx, "ps", "-a", "-q", "--filter", "label="+labels.SandboxID+"="+sb) {
					left = append(left, "container "+c)
				}
				for _, m := range mountPointsUnder(dir) {
					left = append(left, "mount "+m)
				}
				for _, l := range loopDevicesOf(ctx, dir) {
					left = append(left, "loop device "+l)
				}
				return left
			}
		},
	}
}

// hostileRun is one backend's (or Docker runtime's) run of the suite.
type hostileRun struct {
	t   *testing.T
	ctx context.Context
	be  *hostileBackend

	// d is the running sandboxd; restart replaces it (on the same address),
	// under probeMu so that no round trip of another user spans a restart.
	d       *daemon
	addr    string
	pid     atomic.Int64
	c       sandboxv1.SandboxServiceClient
	probeMu sync.Mutex
	// cpuCarry is the CPU time (ticks) of the sandboxd processes restart
	// killed, so that CPU over a case spans restarts.
	cpuCarry atomic.Int64

	// victim is another user's sandbox, whose round trips measure whether
	// the attacks reach other tenants.
	victim     string
	baseRTT    time.Duration
	baseRSS    int64
	peakRSS    int64
	othersRTTs []time.Duration
	maxDelete  time.Duration

	cases []hostileResult
	notes []string
	mu    sync.Mutex
}

// hostileResult is one case's outcome, for the summary.
type hostileResult struct {
	name   string
	harmed bool
	detail string
}

// hostileCase is one case while it runs.
type hostileCase struct {
	*hostileRun
	t       *testing.T
	details []string
}

func runHostileSuite(t *testing.T, be *hostileBackend) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	r := &hostileRun{t: t, ctx: ctx, be: be}
	r.d = be.start(t)
	r.addr = r.d.addr
	r.pid.Store(int64(r.d.cmd.Process.Pid))
	r.c = dialResilient(t, r.addr)

	// The other tenant, and the baseline of its round trips and of
	// sandboxd's memory.
	r.victim = acquire(t, ctx, r.c, "hostile-other-user").GetSandbox().GetSandboxId()
	var base []time.Duration
	for range 12 {
		d, err := r.roundTrip()
		if err != nil {
			t.Fatalf("the other user's baseline round trip: %v", err)
		}
		base = append(base, d)
	}
	r.baseRTT = median(base[2:]) // the first ones warm the interpreter up
	r.baseRSS = r.rss("VmRSS")
	r.peakRSS = r.baseRSS
	t.Logf("baseline: other user's round trip p50 %v, sandboxd RSS %d MiB", r.baseRTT, r.baseRSS>>20)

	r.run("sparse-log", (*hostileCase).sparseLog)
	r.run("dense-log", (*hostileCase).denseLog)
	r.run("refs-blowup", (*hostileCase).refsBlowup)
	r.run("huge-events", (*hostileCase).hugeEvents)
	r.run("log-amplification", (*hostileCase).logAmplification)
	r.run("io-full", (*hostileCase).ioFull)
	r.run("non-utf8", (*hostileCase).nonUTF8)
	r.run("sync-markers", (*hostileCase).syncMarkers)
	r.run("large-output", (*hostileCase).largeOutput)
	r.run("file-types", (*hostileCase).fileTypes)
	r.run("inotify-flood", (*hostileCase).inotifyFlood)
	r.run("command-id-reuse", (*hostileCase).commandIDReuse)
	r.run("driver-status", (*hostileCase).driverStatus)

	if len(r.cases) == 0 {
		return // -run chose none of the cases
	}
	harmed := 0
	for _, c := range r.cases {
		verdict := "ok"
		if c.harmed {
			harmed++
			verdict = "HARMED"
		}
		t.Logf("%s: %s: %s", verdict, c.name, c.detail)
	}
	reportSummary(t, "hostile-/io suite (%s): %d cases, %d harmed the service; peak sandboxd RSS %d MiB (+%d), other users' p50 round trip %s (baseline %s), Delete ≤ %.1f s",
		be.name, len(r.cases), harmed, r.peakRSS>>20, (r.peakRSS-r.baseRSS)>>20,
		fmtMS(median(r.othersRTTs)), fmtMS(r.baseRTT), r.maxDelete.Seconds())
	for _, n := range r.notes {
		reportSummary(t, "  note (%s): %s", be.name, n)
	}
	if err := r.d.proc.Stop(30 * time.Second); err != nil {
		t.Errorf("stopping sandboxd after the suite: %v", err)
	}
}

// run runs one case as a subtest, with the checks every case shares around
// it: memory, other users' round trips, CPU back to idle.
func (r *hostileRun) run(name string, f func(hc *hostileCase)) {
	r.t.Run(name, func(t *testing.T) {
		if why := r.be.skip(name); why != "" {
			r.mu.Lock()
			r.notes = append(r.notes, name+": skipped: "+why)
			r.mu.Unlock()
			t.Skip(why)
		}
		hc := &hostileCase{hostileRun: r, t: t}
		// Go returns freed memory to the system slowly: a case is measured
		// from the RSS it starts with, so an earlier case's heap is not
		// blamed on it.
		r.resetPeakRSS()
		startRSS := max(r.baseRSS, r.rss("VmRSS"))
		stopProbe := r.probeOthers()
		// The checks are deferred, so that a case that stops (t.Fatal)
		// still stops its probe and counts in the summary.
		defer r.afterCase(hc, name, startRSS, stopProbe)
		f(hc)
	})
}

// afterCase ends a case: its probe of the other user, and the checks every
// case shares; it records the case for the summary.
func (r *hostileRun) afterCase(hc *hostileCase, name string, startRSS int64, stopProbe func() ([]time.Duration, []error)) {
	t := hc.t
	rtts, errs := stopProbe()
	// Memory: the peak of the case (VmHWM was reset at its start, or
	// sandboxd was restarted during it).
	peak := r.rss("VmHWM")
	limit := startRSS + int64(envInt(t, envHostileRSSMiB, 256))<<20
	hc.note("peak RSS %d MiB (from %d)", peak>>20, startRSS>>20)
	if peak > limit {
		t.Errorf("sandboxd's RSS peaked at %d MiB during the case; the bound is %d MiB (%d MiB at the start + %s)", peak>>20, limit>>20, startRSS>>20, envHostileRSSMiB)
	}
	// Other tenants.
	p50 := median(rtts)
	hc.note("other user: %d round trips, p50 %s, max %s", len(rtts), fmtMS(p50), fmtMS(maxDur(rtts)))
	if len(errs) > 0 {
		t.Errorf("another user's round trips failed %d times during the case, first: %v", len(errs), errs[0])
	}
	if bound := max(othersFactor*r.baseRTT, othersCeiling); p50 > bound {
		t.Errorf("another user's median round trip was %v during the case; the bound is %v (%dx the baseline %v, at least %v)", p50, bound, othersFactor, r.baseRTT, othersCeiling)
	}
	// CPU: back to idle once the case's calls are over.
	if d, ok := r.waitIdle(); ok {
		hc.note("idle %s after", fmtMS(d))
	} else {
		t.Errorf("sandboxd was still using more than %.0f%% of a core %v after the case's calls ended", idleCPU*100, idleWithin)
	}
	if r.be.afterCase != nil {
		r.be.afterCase(hc)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	r.peakRSS = max(r.peakRSS, peak)
	r.othersRTTs = append(r.othersRTTs, rtts...)
	r.cases = append(r.cases, hostileResult{name: name, harmed: t.Failed(), detail: strings.Join(hc.details, "; ")})
}

// note adds to the case's line in the suite's log.
func (hc *hostileCase) note(format string, args ...any) {
	hc.details = append(hc.details, fmt.Sprintf(format, args...))
}

// --- the cases -------------------------------------------------------------

// sparseLog: the command log replaced by a 16 TiB sparse copy; after a
// restart sandboxd must answer an Execute in that sandbox promptly with a
// clear error, and delete it in bounded time.
func (hc *hostileCase) sparseLog() {
	t := hc.t
	sb := hc.attacker("sparse-log")
	defer hc.deleteAndCheck(sb)
	o := hc.mustRun(sb, "python", `import os, shutil
shutil.copyfile("/io/stdin", "/io/x")
`+growSparse("/io/x")+`
os.rename("/io/x", "/io/stdin")`)
	hc.note("forged log of %s bytes", strings.TrimSpace(o.stdout))
	hc.restart()
	start := time.Now()
	_, err := hc.execute(sb, &sandboxv1.ExecuteRequest{Code: "print('never')"}, hostileCallTimeout)
	took := time.Since(start)
	hc.note("Execute: %s in %s", codeOf(err), fmtMS(took))
	hc.wantRefused("Execute with a 16 TiB sparse command log", err)
	if took > hostilePrompt {
		t.Errorf("Execute with a 16 TiB sparse command log took %v; want an answer within %v", took, hostilePrompt)
	}
}

// denseLog: millions of short valid exec records (distinct IDs) renamed
// over the command log; after a restart sandboxd's memory stays bounded and
// the caller gets a clear status.
func (hc *hostileCase) denseLog() {
	t := hc.t
	n := envInt(t, envHostileLogIDs, 3_000_000)
	sb := hc.attacker("dense-log")
	defer hc.deleteAndCheck(sb)
	// The driver keeps its own descriptor of the original log, so the copy
	// only reaches sandboxd.
	hc.mustRun(sb, "python", fmt.Sprintf(`import shutil, os
shutil.copyfile("/io/stdin", "/io/x")
with open("/io/x", "a") as f:
    for i in range(0, %d, 10000):
        f.write("".join('{"type":"exec","command_id":"d%%d"}\n' %% j for j in range(i, min(i + 10000, %d))))
os.rename("/io/x", "/io/stdin")
print(os.path.getsize("/io/stdin"))`, n, n))
	hc.note("%d IDs", n)
	hc.restart()
	start := time.Now()
	_, err := hc.execute(sb, &sandboxv1.ExecuteRequest{Code: "print('never')"}, hostileCallTimeout)
	hc.note("Execute: %s in %s", codeOf(err), fmtMS(time.Since(start)))
	hc.wantClear("Execute with a forged dense command log", err, true)
	// A command the forged log names: its output does not exist.
	_, err = hc.stream(sb, "d12345", hostileCallTimeout)
	hc.note("StreamCommand of a forged ID: %s", codeOf(err))
	hc.wantClear("StreamCommand of an ID in the forged log", err, true)
}

// refsBlowup: a forged display event whose MIME values all refer to one
// sparse 64 MiB artifact; replaying it must not multiply sandboxd's memory.
func (hc *hostileCase) refsBlowup() {
	refs := envInt(hc.t, envHostileRefs, 8)
	sb := hc.attacker("refs-blowup")
	defer hc.deleteAndCheck(sb)
	hc.mustRun(sb, "python", forgeEvents("refs-bomb", fmt.Sprintf(`
with open("/io/out/refs-bomb.2.1", "wb") as f:
    f.truncate(64 << 20)
refs = {"text/x-ref-%%d" %% i: "refs-bomb.2.1" for i in range(%d)}
refs["image/png"] = "refs-bomb.2.1"
events = [started, {"seq": 2, "type": "display", "data": {"text/plain": "x"}, "refs": refs}, {"seq": 3, "type": "done", "status": "ok"}]
`, refs)))
	hc.note("%d refs to one 64 MiB artifact", refs+1)
	o, err := hc.execute(sb, &sandboxv1.ExecuteRequest{CommandId: "refs-bomb", Code: "print('never')"}, hostileCallTimeout)
	hc.note("Execute: %s, %d events", codeOf(err), o.events)
	hc.wantClear("Execute of a command with a references bomb", err, true)
	o, err = hc.stream(sb, "refs-bomb", hostileCallTimeout)
	hc.note("StreamCommand replay: %s, %d events", codeOf(err), o.events)
	hc.wantClear("StreamCommand replay of a references bomb", err, true)

	// The same with a dense 16 MiB artifact, which a reader refusing sparse
	// or oversized files still has to read: once, not once per reference.
	hc.mustRun(sb, "python", forgeEvents("refs-dense", fmt.Sprintf(`
with open("/io/out/refs-dense.2.1", "wb") as f:
    for _ in range(16):
        f.write(os.urandom(1 << 20))
refs = {"text/x-ref-%%d" %% i: "refs-dense.2.1" for i in range(%d)}
refs["image/png"] = "refs-dense.2.1"
events = [started, {"seq": 2, "type": "display", "data": {"text/plain": "x"}, "refs": refs}, {"seq": 3, "type": "done", "status": "ok"}]
`, refs)))
	o, err = hc.execute(sb, &sandboxv1.ExecuteRequest{CommandId: "refs-dense", Code: "print('never')"}, hostileCallTimeout)
	delivered := 0
	for _, r := range o.results {
		for _, v := range r {
			delivered += len(v)
		}
	}
	hc.note("dense 16 MiB artifact: Execute %s, %d events, %d MiB of values delivered", codeOf(err), o.events, delivered>>20)
	hc.wantClear("Execute of a command with a references bomb on a dense artifact", err, true)
}

// hugeEvents: a sparse events file of terabytes, followed with a short
// deadline: sandboxd must stop reading once the call is over, and Delete
// must leave no loop device.
func (hc *hostileCase) hugeEvents() {
	t := hc.t
	sb := hc.attacker("huge-events")
	defer hc.deleteAndCheck(sb)
	o := hc.mustRun(sb, "python", forgeEvents("huge", `
events = [started]
`)+growSparse("/io/out/huge.events"))
	hc.note("events file of %s bytes", strings.TrimSpace(o.stdout))
	const deadline = 3 * time.Second
	for _, call := range []string{"Execute", "StreamCommand"} {
		start := time.Now()
		var err error
		if call == "Execute" {
			_, err = hc.execute(sb, &sandboxv1.ExecuteRequest{CommandId: "huge", Code: "print('never')"}, deadline)
		} else {
			_, err = hc.stream(sb, "huge", deadline)
		}
		took := time.Since(start)
		hc.note("%s: %s in %s", call, codeOf(err), fmtMS(took))
		// The deadline is the caller's choice here: reaching it is fine,
		// so is a clear refusal before it; not an INTERNAL, not a call
		// that outlives its deadline.
		if status.Code(err) != codes.DeadlineExceeded {
			hc.wantClear(call+" of a terabyte sparse events file", err, false)
		}
		if took > deadline+2*time.Second {
			t.Errorf("%s with a %v deadline returned after %v", call, deadline, took)
		}
	}
	// run checks that the CPU goes back to idle; deleteAndCheck that no
	// loop device remains.
}

// logAmplification: megabytes of malformed events lines and of events of
// unknown types; each Follow may log less about them than their own size.
func (hc *hostileCase) logAmplification() {
	t := hc.t
	kib := envInt(t, envHostileMalformedKiB, 2048)
	sb := hc.attacker("log-amplification")
	defer hc.deleteAndCheck(sb)
	hc.mustRun(sb, "python", forgeEvents("amp", `
events = [started]
`)+fmt.Sprintf(`
# Half malformed lines, half well-formed events of unknown types.
bad = [b"x", b"{}", b'{"seq":"a"}', b"[1,2]", b'{"seq":2}', b"\xff\xfe", b'{"type":"stdout"}', b"not json at all"]
out, size, i, seq = [], 0, 0, 2
while size < %[1]d << 9:
    line = bad[i %% len(bad)] + b"\n"
    out.append(line)
    size += len(line)
    i += 1
while size < %[1]d << 10:
    line = b'{"seq":%%d,"type":"x-unknown"}\n' %% seq
    out.append(line)
    size += len(line)
    seq += 1
out.append(b'{"seq":%%d,"type":"stdout","text":"end\\n"}\n{"seq":%%d,"type":"done","status":"ok"}\n' %% (seq, seq + 1))
with open("/io/out/amp.events", "ab") as f:
    f.write(b"".join(out))
print(size)`, kib))
	input := int64(kib) << 10
	before, beforeFirst := hc.logSnapshot()
	// Events of unknown types are not passed on, so seq has gaps: the
	// stream is read as it comes.
	o, err := hc.executeAsIs(sb, &sandboxv1.ExecuteRequest{CommandId: "amp", Code: "print('never')"}, time.Minute)
	hc.wantClear("Execute of a command with malformed events", err, true)
	if err == nil && o.stdout != "end\n" {
		t.Errorf("Execute of a command with malformed events: stdout %q, want the one valid stdout event", o.stdout)
	}
	_, err = hc.stream(sb, "amp", time.Minute)
	hc.wantClear("StreamCommand replay of malformed events", err, true)
	after, afterFirst := hc.logSnapshot()
	grew, atLeast := after-before, ""
	if beforeFirst != afterFirst {
		// The harness keeps the log's tail only: it was cut, so the log
		// grew by more than what is measured.
		atLeast = "at least "
	}
	ratio := float64(grew) / float64(2*input)
	hc.note("%d KiB malformed or of unknown types, 2 follows: the log grew %s%d KiB (%.2fx per follow)", kib, atLeast, grew>>10, ratio)
	if ratio >= 1 {
		t.Errorf("sandboxd's log grew by %s%d KiB over 2 follows of %d KiB of malformed events lines and events of unknown types: %s%.1fx the input per follow, want < 1x", atLeast, grew>>10, kib, atLeast, ratio)
	}
}

// ioFull: /io filled by ordinary use (commands printing 16 MiB of NUL
// bytes), then by the code itself: commands still end, promptly.
func (hc *hostileCase) ioFull() {
	t := hc.t
	n := envInt(t, envHostileFillCommands, 10)
	sb := hc.attacker("io-full")
	defer hc.deleteAndCheck(sb)
	var slowest time.Duration
	for i := range n {
		start := time.Now()
		o, err := hc.execute(sb, &sandboxv1.ExecuteRequest{Language: "bash", Code: "head -c 16M /dev/zero"}, 2*time.Minute)
		slowest = max(slowest, time.Since(start))
		if err != nil || o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_OK {
			t.Errorf("command %d printing 16 MiB of NUL bytes: %v, done %v", i+1, err, o.done)
		}
	}
	hc.note("%d × 16 MiB of NUL bytes, slowest %s", n, fmtMS(slowest))
	hc.promptPrint(sb, "after the NUL floods", true)

	// Now the code fills /io itself, up to ENOSPC.
	if why := hc.be.skip("io-full/fill"); why != "" {
		hc.note("/io filled by the code: not here: %s", why)
		hc.mu.Lock()
		hc.notes = append(hc.notes, "io-full: /io filled by the code: not here: "+why)
		hc.mu.Unlock()
		return
	}
	o := hc.mustRun(sb, "bash", `dd if=/dev/zero of=/io/filler bs=1M 2>&1 | tail -n1; df -k /io | tail -n1`)
	hc.note("/io filled by the code: %s", strings.Join(strings.Fields(o.stdout), " "))
	hc.promptPrint(sb, "with /io full", false)
}

// promptPrint runs print(1) and wants it answered within a bound: OK with
// its output, or (when okOnly is false) an error done saying /io is full.
func (hc *hostileCase) promptPrint(sb, when string, okOnly bool) {
	t := hc.t
	start := time.Now()
	o, err := hc.execute(sb, &sandboxv1.ExecuteRequest{Code: "print(1)"}, hostileCallTimeout)
	took := time.Since(start)
	hc.note("print(1) %s: %s in %s (%s)", when, o.done.GetStatus(), fmtMS(took), truncateText(o.done.GetReason(), 80))
	switch {
	case err != nil:
		t.Errorf("print(1) %s: %v", when, err)
	case o.done.GetStatus() == sandboxv1.CommandStatus_COMMAND_STATUS_OK && o.stdout == "1\n":
	case !okOnly && o.done.GetStatus() == sandboxv1.CommandStatus_COMMAND_STATUS_ERROR && strings.Contains(o.done.GetReason(), "/io is full"):
	default:
		t.Errorf("print(1) %s: stdout %q, done %v; want OK%s", when, o.stdout, o.done, map[bool]string{false: ", or an error saying /io is full"}[okOnly])
	}
	if took > hostilePrompt {
		t.Errorf("print(1) %s took %v; want an answer within %v", when, took, hostilePrompt)
	}
}

// nonUTF8: names and output that are not UTF-8, from the code and from
// forged events, reach the caller without breaking a call.
func (hc *hostileCase) nonUTF8() {
	t := hc.t
	sb := hc.attacker("non-utf8")
	defer hc.deleteAndCheck(sb)
	o, err := hc.execute(sb, &sandboxv1.ExecuteRequest{Code: `import os
os.makedirs("u8", exist_ok=True)
open(b"u8/bad-\xff\xfe.txt", "wb").write(b"x")
open("u8/good.txt", "w").write("y")`}, hostileCallTimeout)
	hc.wantOK("a command creating a file whose name is not UTF-8", o, err)
	lf, err := hc.listFiles(sb, "u8")
	hc.note("ListFiles of a directory with a non-UTF-8 name: %s, %d entries", codeOf(err), len(lf.GetFiles()))
	if err != nil || len(lf.GetFiles()) != 2 {
		t.Errorf("ListFiles of a directory holding a non-UTF-8 name: %d entries, %v; want both files", len(lf.GetFiles()), err)
	}
	o, err = hc.execute(sb, &sandboxv1.ExecuteRequest{Code: `import sys
sys.stdout.buffer.write(b"py \xff\xfe \xc3\x28 \xed\xa0\x80 end\n")
sys.stdout.flush()
sys.stderr.buffer.write(b"err \x80\n")`}, hostileCallTimeout)
	hc.wantOK("Python printing invalid UTF-8", o, err)
	if !strings.HasPrefix(o.stdout, "py ") || !strings.HasSuffix(o.stdout, " end\n") {
		t.Errorf("Python printing invalid UTF-8: stdout %q, want its text around the bad bytes", o.stdout)
	}
	o, err = hc.execute(sb, &sandboxv1.ExecuteRequest{Language: "bash", Code: `printf 'sh \xff\xfe end\n'`}, hostileCallTimeout)
	hc.wantOK("bash printing invalid UTF-8", o, err)
	// Forged events carry raw invalid bytes in their strings, and a text
	// artifact that is not UTF-8.
	hc.mustRun(sb, "python", forgeEvents("u8-forged", `
with open("/io/out/u8-forged.2.1", "wb") as f:
    f.write(b"<b>\xff\xfe</b>" * 100)
events = [started, {"seq": 2, "type": "display", "data": {"text/plain": "x"}, "refs": {"text/html": "u8-forged.2.1"}}]
raw = [b'{"seq":3,"type":"stdout","text":"forged \xff\xfe out\\n"}', b'{"seq":4,"type":"error","ename":"E\xff","evalue":"\xc3\x28","traceback":["\x80"]}', b'{"seq":5,"type":"done","status":"error","reason":"\xfe"}']
`))
	o, err = hc.execute(sb, &sandboxv1.ExecuteRequest{CommandId: "u8-forged", Code: "print('never')"}, hostileCallTimeout)
	hc.note("forged non-UTF-8 events: %s, %d events", codeOf(err), o.events)
	if err != nil || o.done == nil {
		t.Errorf("Execute of forged events with invalid UTF-8: %v after %d events; want the stream to complete", err, o.events)
	}
}

// syncMarkers: output containing the driver's old sync marker, followed
// by more text, arrives whole.
func (hc *hostileCase) syncMarkers() {
	t := hc.t
	sb := hc.attacker("sync-markers")
	defer hc.deleteAndCheck(sb)
	const marker = "\x00\x1eSBX-SYNC:1\x1e\x00"
	o, err := hc.execute(sb, &sandboxv1.ExecuteRequest{Code: `import sys
M = "\x00\x1eSBX-SYNC:1\x1e\x00"
print("before" + M + "after")
sys.stdout.write(M)
sys.stdout.flush()
print("tail")
sys.stderr.write("e" + M + "rr\n")
print(M + "0123456789abcdef" * 4 + M)`}, hostileCallTimeout)
	hc.wantOK("Python printing sync markers", o, err)
	want := "before" + marker + "after\n" + marker + "tail\n" + marker + strings.Repeat("0123456789abcdef", 4) + marker + "\n"
	if o.stdout != want || o.stderr != "e"+marker+"rr\n" {
		t.Errorf("Python printing sync markers: stdout %q, stderr %q; want %q, %q", o.stdout, o.stderr, want, "e"+marker+"rr\n")
	}
	o, err = hc.execute(sb, &sandboxv1.ExecuteRequest{Language: "bash", Code: `printf 'a\000\036SBX-SYNC:1\036\000b\n'; echo more`}, hostileCallTimeout)
	hc.wantOK("bash printing a sync marker", o, err)
	if o.stdout != "a"+marker+"b\nmore\n" {
		t.Errorf("bash printing a sync marker: stdout %q", o.stdout)
	}
	hc.note("all text arrived: %v", !t.Failed())
}

// largeOutput: in every kernel language, a command printing far more than
// a pipe holds (150 lines of 60 KB, 9 MB, under the 16 MiB cap) gets all of
// it back, in order, with status OK; the next command gets exactly its own
// output; 300 lines (18 MB) are reported truncated at the cap, never cut
// silently; and 9 MB still come back whole after a child process left the
// kernel's pipes non-blocking (as a Node.js child killed by SIGKILL does).
// (Issue 22, item 6: the Node.js kernel queued its stdout in memory once
// the pipe was full, and its done overtook the queue: 4 of 150 lines came
// back with status OK and the rest went to the next command.)
func (hc *hostileCase) largeOutput() {
	t := hc.t
	sb := hc.attacker("large-output")
	defer hc.deleteAndCheck(sb)
	lines := func(n int) string {
		var b strings.Builder
		x := strings.Repeat("x", 60000)
		for i := range n {
			fmt.Fprintf(&b, "<A%d>%s\n", i, x)
		}
		return b.String()
	}
	// where says where got first differs from want, without megabytes.
	where := func(got, want string) string {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		return fmt.Sprintf("%d bytes, want %d, first difference at byte %d (%q)", len(got), len(want), i, truncateText(got[i:], 12))
	}
	const nonBlocking = `"import os; os.set_blocking(1, False); os.set_blocking(2, False)"`
	for _, l := range []struct{ lang, print, own, child string }{
		{"javascript", "const s = 'x'.repeat(60000); for (let i = 0; i < %d; i++) console.log('<A' + i + '>' + s)", "console.log('B-own')",
			"require('node:child_process').execFileSync('python3', ['-c', " + nonBlocking + "], { stdio: 'inherit' })"},
		{"r", "s <- strrep('x', 60000); for (i in seq_len(%d) - 1) cat('<A', i, '>', s, '\\n', sep = '')", "cat('B-own\\n')",
			"invisible(system2('python3', c('-c', shQuote(" + nonBlocking + "))))"},
		{"python", "s = 'x' * 60000\nfor i in range(%d): print('<A%%d>' %% i + s)", "print('B-own')",
			"import subprocess, sys\nsubprocess.run([sys.executable, '-c', " + nonBlocking + "], check=True)"},
	} {
		own := func(after string) {
			o, err := hc.execute(sb, &sandboxv1.ExecuteRequest{Language: l.lang, Code: l.own}, hostileCallTimeout)
			hc.wantOK(l.lang+" command after "+after, o, err)
			if o.stdout != "B-own\n" || o.stderr != "" {
				t.Errorf("%s: the command after %s got stdout %s and %d bytes of stderr; want exactly its own output", l.lang, after, where(o.stdout, "B-own\n"), len(o.stderr))
			}
		}
		whole := func(after string) {
			o, err := hc.execute(sb, &sandboxv1.ExecuteRequest{Language: l.lang, Code: fmt.Sprintf(l.print, 150)}, hostileCallTimeout)
			hc.wantOK(l.lang+" printing 9 MB"+after, o, err)
			if want := lines(150); o.stdout != want || o.done.GetOutputTruncated() {
				t.Errorf("%s printing 150 lines of 60 KB%s: stdout %s, truncated %v; want all of it", l.lang, after, where(o.stdout, want), o.done.GetOutputTruncated())
			}
			own("9 MB" + after)
		}
		whole("")
		o, err := hc.execute(sb, &sandboxv1.ExecuteRequest{Language: l.lang, Code: fmt.Sprintf(l.print, 300)}, hostileCallTimeout)
		hc.wantOK(l.lang+" printing 18 MB", o, err)
		all := lines(300)
		if !o.done.GetOutputTruncated() || !strings.Contains(o.done.GetReason(), "output truncated") || len(o.stdout) < 16<<20-64<<10 || !strings.HasPrefix(all, o.stdout) {
			t.Errorf("%s printing 18 MB over the 16 MiB cap: truncated %v, reason %q, stdout %s; want its first 16 MiB, reported truncated",
				l.lang, o.done.GetOutputTruncated(), o.done.GetReason(), where(o.stdout, all))
		}
		own("18 MB")
		hc.mustRun(sb, l.lang, l.child)
		whole(" after a child left the pipes non-blocking")
	}
	hc.note("all output whole or reported truncated: %v", !t.Failed())
}

// fileTypes: stdin, events files and artifacts replaced by FIFOs, links to
// host files, hard links and device nodes, and an events file truncated and
// regrown under a Follow.
func (hc *hostileCase) fileTypes() {
	t := hc.t
	shadow := hostFileSum(t, "/etc/shadow")
	sb := hc.attacker("file-types")
	defer hc.deleteAndCheck(sb)

	// Events files and artifacts of other types. Hard links and device
	// nodes are expected to be refused by the kernel; the code says.
	o := hc.mustRun(sb, "python", forgeEvents("art-fifo", `
events = [started, {"seq": 2, "type": "display", "data": {"text/plain": "x"}, "refs": {"text/html": "art-fifo.2.1", "text/plain": "art-fifo.2.2"}}, {"seq": 3, "type": "done", "status": "ok"}]
`)+`
for name, make in (("FIFO artifact", lambda: os.mkfifo("/io/out/art-fifo.2.1")),
                   ("artifact linking to /etc/shadow", lambda: os.symlink("/etc/shadow", "/io/out/art-fifo.2.2")),
                   ("FIFO events file", lambda: os.mkfifo("/io/out/ev-fifo.events")),
                   ("events file linking to /etc/shadow", lambda: os.symlink("/etc/shadow", "/io/out/ev-link.events")),
                   ("hard link of /etc/shadow", lambda: os.link("/etc/shadow", "/io/out/ev-hard.events")),
                   ("hard link of a root-owned file on /io", lambda: os.link("/io/stdin", "/io/out/ev-hard.events")),
                   ("device node /dev/null", lambda: os.mknod("/io/out/ev-dev.events", 0o20644, os.makedev(1, 3)))):
    try:
        make()
        print(name + ": made")
    except OSError as e:
        print(name + ": refused: " + e.strerror)`)
	for _, l := range strings.Split(strings.TrimSpace(o.stdout), "\n") {
		hc.note("%s", l)
		hc.mu.Lock()
		hc.notes = append(hc.notes, "file-types: "+l)
		hc.mu.Unlock()
	}
	ids := []string{"art-fifo"}
	for id, made := range map[string]string{"ev-fifo": "FIFO events file: made", "ev-link": "linking to /etc/shadow: made",
		"ev-hard": "hard link of /etc/shadow: made", "ev-dev": "device node /dev/null: made"} {
		if strings.Contains(o.stdout, made) || (id == "ev-hard" && strings.Contains(o.stdout, "on /io: made")) {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		start := time.Now()
		o, err := hc.execute(sb, &sandboxv1.ExecuteRequest{CommandId: id, Code: "print('never')"}, hostileCallTimeout)
		hc.note("%s: %s in %s", id, codeOf(err), fmtMS(time.Since(start)))
		hc.wantClear("Execute of "+id, err, true)
		hc.noHostData(id, o)
		if time.Since(start) > hostilePrompt {
			t.Errorf("Execute of %s took %v; want an answer within %v", id, time.Since(start), hostilePrompt)
		}
	}

	// An events file truncated and regrown (shorter) while a Follow reads it.
	hc.mustRun(sb, "python", forgeEvents("regrow", `
events = [started] + [{"seq": i, "type": "stdout", "text": "x" * 1000 + "\n"} for i in range(2, 12)]
`))
	first := make(chan struct{})
	res := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(hc.ctx, 15*time.Second)
		defer cancel()
		s, err := hc.c.Execute(ctx, &sandboxv1.ExecuteRequest{SandboxId: sb, CommandId: "regrow", Code: "print('never')"})
		once := sync.OnceFunc(func() { close(first) })
		defer once()
		for err == nil {
			var ev *sandboxv1.ExecuteEvent
			if ev, err = s.Recv(); err == nil {
				once()
				if ev.GetDone() != nil {
					break
				}
			}
		}
		if errors.Is(err, io.EOF) {
			err = errors.New("the stream ended without done")
		}
		res <- err
	}()
	<-first
	hc.mustRun(sb, "python", `import json
with open("/io/out/regrow.events", "r+") as f:
    f.truncate(0)
    f.write(json.dumps({"seq": 1, "type": "started", "command_id": "regrow"}) + "\n" + json.dumps({"seq": 2, "type": "done", "status": "ok"}) + "\n")`)
	err := <-res
	hc.note("Follow of an events file truncated and regrown: %s", codeOf(err))
	hc.wantClear("a Follow of an events file truncated and regrown", err, true)

	// The command log replaced by a FIFO, then by a link to /etc/shadow.
	// Once the log is a FIFO no command can be sent, so a thread left in
	// the sandbox's interpreter makes the second swap when a file is
	// uploaded.
	hc.mustRun(sb, "python", `import os, threading, time
def _swap():
    deadline = time.time() + 120
    while not os.path.exists("/workspace/.next") and time.time() < deadline:
        time.sleep(0.05)
    os.remove("/io/stdin")
    os.symlink("/etc/shadow", "/io/stdin")
    open("/workspace/.swapped", "w").close()
threading.Thread(target=_swap, daemon=True).start()
os.rename("/io/stdin", "/io/stdin.orig")
os.mkfifo("/io/stdin")`)
	for i, what := range []string{"a FIFO", "a link to /etc/shadow"} {
		if i == 1 {
			ctx, cancel := context.WithTimeout(hc.ctx, hostileCallTimeout)
			_, err := upload(ctx, hc.c, sb, ".next", nil)
			swapped := err == nil && pollUntil(hostilePrompt, func() bool {
				_, err := tryDownload(ctx, hc.c, sb, ".swapped")
				return err == nil
			})
			cancel()
			if !swapped {
				t.Errorf("the sandbox's thread did not replace the FIFO log by a link (upload: %v)", err)
				break
			}
		}
		start := time.Now()
		_, err := hc.execute(sb, &sandboxv1.ExecuteRequest{Code: "print('never')"}, hostileCallTimeout)
		hc.note("stdin as %s: %s in %s", what, codeOf(err), fmtMS(time.Since(start)))
		hc.wantRefused("Execute with the command log replaced by "+what, err)
		if time.Since(start) > hostilePrompt {
			t.Errorf("Execute with the command log replaced by %s took %v", what, time.Since(start))
		}
	}
	if got := hostFileSum(t, "/etc/shadow"); got != shadow {
		t.Errorf("the host's /etc/shadow changed during the case")
	}
}

// inotifyFlood: the code creates and removes files in /io/out as fast as it
// can; other users are unaffected and sandboxd's CPU stays bounded.
func (hc *hostileCase) inotifyFlood() {
	t := hc.t
	secs := envInt(t, envHostileFloodSeconds, 5)
	sb := hc.attacker("inotify-flood")
	defer hc.deleteAndCheck(sb)
	cpu0, t0 := hc.cpuTicks(), time.Now()
	o := hc.mustRun(sb, "python", fmt.Sprintf(`import os, time
end, n = time.time() + %d, 0
while time.time() < end:
    for name in ("flood%%d.events" %% n, ".tmp-%%d" %% n, "flood%%d.2.1" %% n, "x%%d" %% n):
        p = "/io/out/" + name
        with open(p, "w") as f:
            f.write("x")
        os.remove(p)
    n += 1
print(n * 4)`, secs))
	cores := float64(hc.cpuTicks()-cpu0) / clkTck / time.Since(t0).Seconds()
	hc.note("%s files created and removed in %ds; sandboxd used %.2f cores", strings.TrimSpace(o.stdout), secs, cores)
	if cores > floodCPU {
		t.Errorf("sandboxd used %.2f cores on average during the inotify flood; the bound is %.2f", cores, floodCPU)
	}
}

// commandIDReuse: a command ID already used, with different code, is a
// conflict, not a replay of the other command.
func (hc *hostileCase) commandIDReuse() {
	t := hc.t
	sb := hc.attacker("command-id-reuse")
	defer hc.deleteAndCheck(sb)
	first := &sandboxv1.ExecuteRequest{CommandId: "reused", Code: "print('first')"}
	o, err := hc.execute(sb, first, hostileCallTimeout)
	hc.wantOK("the first command", o, err)
	o, err = hc.execute(sb, &sandboxv1.ExecuteRequest{CommandId: "reused", Code: "print('first')"}, hostileCallTimeout)
	if err != nil || o.stdout != "first\n" {
		t.Errorf("the same command again (a retry): stdout %q, %v; want a replay", o.stdout, err)
	}
	o, err = hc.execute(sb, &sandboxv1.ExecuteRequest{CommandId: "reused", Code: "print('second')"}, hostileCallTimeout)
	hc.note("reuse with other code: %s %s", codeOf(err), truncateText(status.Convert(err).Message(), 120))
	switch c := status.Code(err); {
	case c != codes.AlreadyExists && c != codes.FailedPrecondition:
		t.Errorf("a command ID reused with different code: %v, stdout %q; want ALREADY_EXISTS or FAILED_PRECONDITION naming the conflict, not a replay", err, o.stdout)
	case !strings.Contains(status.Convert(err).Message(), "reused"):
		t.Errorf("a command ID reused with different code: %v; want the message to name the command ID", err)
	}
}

// driverStatus: /io/driver.json, which sandboxd reads for the sandbox's
// health, replaced by each of hostileDriverStatuses: GetSandbox and
// ListSandboxes answer promptly, with a bounded, valid reason and nothing
// of the host (checkDriverStatusAnswers).
func (hc *hostileCase) driverStatus() {
	sb := hc.attacker("driver-status")
	defer hc.deleteAndCheck(sb)
	for _, st := range hostileDriverStatuses() {
		hc.mustRun(sb, "python", forgeDriverStatus(st.code))
		took, reason, err, lerr := checkDriverStatusAnswers(hc.t, hc.ctx, hc.c, sb, st.what)
		hc.note("driver.json as %s: GetSandbox %s, ListSandboxes %s in %s, reason of %d bytes", st.what, codeOf(err), codeOf(lerr), fmtMS(took), len(reason))
	}
}

// driverStatusForgery is one way a sandbox replaces its /io/driver.json:
// what it is, and the Python (for forgeDriverStatus) that does it.
type driverStatusForgery struct{ what, code string }

// hostileDriverStatuses are the driver.json a hostile sandbox plants, on
// either backend (TestHostileIO's driver-status, TestKube's Health): an
// oversized reason, a reason that is not UTF-8, a FIFO, a terabyte
// sparse file and a link to a host file.
func hostileDriverStatuses() []driverStatusForgery {
	return []driverStatusForgery{
		{"a 1 MiB reason", `st["health"] = "io_full"; st["health_reason"] = "A" * (1 << 20); put(json.dumps(st).encode())`},
		{"a reason that is not UTF-8", `st["health"] = "io_full"; put(json.dumps(st).encode().replace(b'"io_full"', b'"io_full", "health_reason": "bad \xff\xfe \xc3\x28 ' + b"x" * 3000 + b'"', 1))`},
		{"a FIFO", `os.mkfifo("/io/.tmp-status"); os.rename("/io/.tmp-status", "/io/driver.json")`},
		{"a terabyte sparse file", "put(b\"\")\n" + growSparse("/io/driver.json")},
		{"a link to /etc/shadow", `os.symlink("/etc/shadow", "/io/.tmp-status"); os.rename("/io/.tmp-status", "/io/driver.json")`},
	}
}

// forgeDriverStatus is Python, run in the sandbox, that runs code with st,
// the driver's status as a dict (a minimal one when /io/driver.json is not
// the driver's), and put(b), which replaces the file with b atomically as
// the driver would.
func forgeDriverStatus(code string) string {
	return `import json, os
import stat
try:
    _st = os.lstat("/io/driver.json")
    if not stat.S_ISREG(_st.st_mode) or _st.st_size > 4096:
        raise ValueError("not the driver's")
    st = json.load(open("/io/driver.json", "rb"))
except (OSError, ValueError):
    st = {"version": 1, "pid": 1}
def put(b):
    with open("/io/.tmp-status", "wb") as f:
        f.write(b)
    os.rename("/io/.tmp-status", "/io/driver.json")
` + code
}

// checkDriverStatusAnswers checks that GetSandbox and ListSandboxes of
// sandbox sb, whose driver.json is as what says, both answer within
// hostilePrompt, with a health_reason of at most 4 KiB and nothing of the
// host; it returns how long they took, Get's reason and their errors.
func checkDriverStatusAnswers(t *testing.T, ctx context.Context, c sandboxv1.SandboxServiceClient, sb, what string) (took time.Duration, reason string, err, lerr error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, hostilePrompt)
	defer cancel()
	start := time.Now()
	g, err := c.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: sb})
	l, lerr := c.ListSandboxes(ctx, &sandboxv1.ListSandboxesRequest{})
	took = time.Since(start)
	reason = g.GetSandbox().GetHealthReason()
	if err != nil || lerr != nil {
		t.Errorf("driver.json as %s: GetSandbox: %v, ListSandboxes: %v; want both to answer", what, err, lerr)
	}
	reasons := []string{reason}
	for _, s := range l.GetSandboxes() {
		if s.GetSandboxId() == sb {
			reasons = append(reasons, s.GetHealthReason())
		}
	}
	for _, r := range reasons {
		if len(r) > 4<<10 || strings.Contains(r, "root:") {
			t.Errorf("driver.json as %s: health_reason of %d bytes: %q; want at most 4 KiB and nothing of the host", what, len(r), truncateText(r, 200))
		}
	}
	return took, reason, err, lerr
}

// --- what the cases share ------------------------------------------------------

// attacker acquires a fresh sandbox for a case.
func (hc *hostileCase) attacker(name string) string {
	ctx, cancel := context.WithTimeout(hc.ctx, 2*time.Minute)
	defer cancel()
	sb := acquire(hc.t, ctx, hc.c, "hostile-"+name).GetSandbox().GetSandboxId()
	if hc.be.acquired != nil {
		hc.be.acquired(hc, sb)
	}
	return sb
}

// forgeEvents is a Python program that writes /io/out/<id>.events from the
// list events (of dicts) and raw (extra lines, bytes) that body defines,
// atomically as the driver would. started is the first event.
func forgeEvents(id, body string) string {
	return fmt.Sprintf(`import json, os
started = {"seq": 1, "type": "started", "command_id": %[1]q, "language": "python", "time": "2026-01-01T00:00:00Z"}
raw = []
%[2]s
with open("/io/out/.tmp-forge", "wb") as f:
    f.write(b"".join(json.dumps(e).encode() + b"\n" for e in events) + b"".join(l + b"\n" for l in raw))
os.rename("/io/out/.tmp-forge", "/io/out/%[1]s.events")
`, id, body)
}

// growSparse is Python that makes the file at path sparse and as large as
// the file system takes (16 TiB on the ext4 volume under runc; gVisor
// silently ignores a 16 TiB truncate, so each size is checked), and prints
// the size.
func growSparse(path string) string {
	return fmt.Sprintf(`
for _size in (16 << 40, (16 << 40) - 4096, 8 << 40, 1 << 40, 64 << 30):
    try:
        os.truncate(%[1]q, _size)
    except OSError:
        continue
    if os.path.getsize(%[1]q) == _size:
        break
else:
    raise SystemExit("no sparse size took")
print(os.path.getsize(%[1]q))
`, path)
}

// mustRun runs attack code (the forging) that must succeed.
func (hc *hostileCase) mustRun(sb, lang, code string) outcome {
	hc.t.Helper()
	o, err := hc.execute(sb, &sandboxv1.ExecuteRequest{Language: lang, Code: code, Timeout: durationpb.New(2 * time.Minute)}, 3*time.Minute)
	if err != nil || o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_OK {
		hc.t.Fatalf("the attack's own code failed: %v, done %v, errors %v, stdout %q, stderr %q", err, o.done, o.errs, truncateText(o.stdout, 400), truncateText(o.stderr, 400))
	}
	return o
}

// execute runs req in sb within timeout.
func (hc *hostileCase) execute(sb string, req *sandboxv1.ExecuteRequest, timeout time.Duration) (outcome, error) {
	ctx, cancel := context.WithTimeout(hc.ctx, timeout)
	defer cancel()
	req.SandboxId = sb
	return runCollect(ctx, hc.c, req)
}

// executeAsIs runs req in sb within timeout, taking the events as they
// come (no check that seq has no gaps).
func (hc *hostileCase) executeAsIs(sb string, req *sandboxv1.ExecuteRequest, timeout time.Duration) (outcome, error) {
	ctx, cancel := context.WithTimeout(hc.ctx, timeout)
	defer cancel()
	req.SandboxId = sb
	s, err := hc.c.Execute(ctx, req)
	if err != nil {
		return outcome{}, err
	}
	evs, err := recvEvents(s)
	o := outcomeOf(evs)
	if err == nil && o.done == nil {
		err = fmt.Errorf("stream ended without done after %d events", len(evs))
	}
	return o, err
}

// stream follows command id of sb from its start within timeout.
func (hc *hostileCase) stream(sb, id string, timeout time.Duration) (outcome, error) {
	ctx, cancel := context.WithTimeout(hc.ctx, timeout)
	defer cancel()
	s, err := hc.c.StreamCommand(ctx, &sandboxv1.StreamCommandRequest{SandboxId: sb, CommandId: id})
	if err != nil {
		return outcome{}, err
	}
	evs, err := recvEvents(s)
	o := outcomeOf(evs)
	if err == nil && o.done == nil {
		err = fmt.Errorf("stream ended without done after %d events", len(evs))
	}
	return o, err
}

func (hc *hostileCase) listFiles(sb, dir string) (*sandboxv1.ListFilesResponse, error) {
	ctx, cancel := context.WithTimeout(hc.ctx, hostileCallTimeout)
	defer cancel()
	return hc.c.ListFiles(ctx, &sandboxv1.ListFilesRequest{SandboxId: sb, Path: dir})
}

// wantOK fails unless a command completed OK.
func (hc *hostileCase) wantOK(what string, o outcome, err error) {
	hc.t.Helper()
	if err != nil || o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_OK {
		hc.t.Errorf("%s: %v, done %v; want it completed OK", what, err, o.done)
	}
}

// wantClear fails unless err is a clear answer: nil (okAllowed) or a status
// that says what is wrong, never INTERNAL, UNKNOWN or a call that hit its
// deadline.
func (hc *hostileCase) wantClear(what string, err error, okAllowed bool) {
	hc.t.Helper()
	if err == nil {
		if !okAllowed {
			hc.t.Errorf("%s: succeeded; want a clear refusal", what)
		}
		return
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied,
		codes.ResourceExhausted, codes.FailedPrecondition, codes.OutOfRange, codes.Aborted:
		if status.Convert(err).Message() == "" {
			hc.t.Errorf("%s: %v without a message", what, status.Code(err))
		}
	case codes.DeadlineExceeded:
		hc.t.Errorf("%s: no answer within the call's deadline (a hang): %v", what, err)
	default:
		hc.t.Errorf("%s: %v; want a clear status (FAILED_PRECONDITION, NOT_FOUND, ...), not %v", what, err, status.Code(err))
	}
}

// wantRefused: a tampered command log makes the sandbox unusable, which
// the caller must hear as FAILED_PRECONDITION.
func (hc *hostileCase) wantRefused(what string, err error) {
	hc.t.Helper()
	hc.wantClear(what, err, false)
	if err != nil && status.Code(err) != codes.FailedPrecondition && status.Code(err) != codes.DeadlineExceeded {
		hc.t.Errorf("%s: %v; want FAILED_PRECONDITION saying the sandbox is unusable", what, err)
	}
}

// noHostData fails if a host file's content came back in a command's
// events.
func (hc *hostileCase) noHostData(what string, o outcome) {
	all := o.stdout + o.stderr + fmt.Sprint(o.results) + fmt.Sprint(o.errs) + o.done.GetReason()
	if strings.Contains(all, "root:") || strings.Contains(all, "daemon:") {
		hc.t.Errorf("%s: host data came back: %q", what, truncateText(all, 300))
	}
}

// deleteAndCheck deletes an attacked sandbox within a bound and checks that
// nothing of it is left (what the backend lists: on Docker no container,
// no mount, no loop device; on Kubernetes no Pod, no container on a node).
func (hc *hostileCase) deleteAndCheck(sb string) {
	t := hc.t
	leftovers := hc.be.beforeDelete(hc, sb)
	ctx, cancel := context.WithTimeout(hc.ctx, 2*hostileDeleteBound)
	defer cancel()
	start := time.Now()
	_, err := hc.c.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: sb})
	took := time.Since(start)
	hc.note("Delete %s", fmtMS(took))
	hc.mu.Lock()
	hc.maxDelete = max(hc.maxDelete, took)
	hc.mu.Unlock()
	if err != nil {
		t.Errorf("DeleteSandbox of the attacked sandbox: %v (after %v)", err, took)
	} else if took > hostileDeleteBound {
		t.Errorf("DeleteSandbox of the attacked sandbox took %v; the bound is %v", took, hostileDeleteBound)
	}
	ctx, cancel = context.WithTimeout(hc.ctx, hc.be.cleanWithin+time.Minute)
	defer cancel()
	var left []string
	if !pollUntil(hc.be.cleanWithin, func() bool { left = leftovers(ctx); return len(left) == 0 }) {
		t.Errorf("%v after DeleteSandbox of the attacked sandbox: %s left; want nothing", hc.be.cleanWithin, strings.Join(left, ", "))
	}
}

// restart kills sandboxd (SIGKILL) and starts it again on the same state
// directory and address; the other user's round trips pause meanwhile.
func (hc *hostileCase) restart() {
	hc.probeMu.Lock()
	defer hc.probeMu.Unlock()
	hc.cpuCarry.Add(cpuTicksOf(int(hc.pid.Load())))
	hc.d.kill9(hc.t)
	hc.d = hc.be.start(hc.hostileRun.t, "--listen", hc.addr)
	hc.pid.Store(int64(hc.d.cmd.Process.Pid))
	hc.note("restarted sandboxd")
}

// roundTrip is one Execute of the other user, timed.
func (r *hostileRun) roundTrip() (time.Duration, error) {
	ctx, cancel := context.WithTimeout(r.ctx, hostileCallTimeout)
	defer cancel()
	start := time.Now()
	o, err := runCollect(ctx, r.c, &sandboxv1.ExecuteRequest{SandboxId: r.victim, Code: "6 * 7"})
	took := time.Since(start)
	if err == nil && (len(o.results) != 1 || o.results[0]["text/plain"] != "42") {
		err = fmt.Errorf("6 * 7 gave results %v, done %v", o.results, o.done)
	}
	return took, err
}

// probeOthers measures the other user's round trips, five a second, until
// the returned function is called, which returns them and the errors.
func (r *hostileRun) probeOthers() func() ([]time.Duration, []error) {
	stop := make(chan struct{})
	var (
		rtts []time.Duration
		errs []error
		wg   sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			r.probeMu.Lock()
			d, err := r.roundTrip()
			r.probeMu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else {
				rtts = append(rtts, d)
			}
		}
	}()
	return func() ([]time.Duration, []error) {
		close(stop)
		wg.Wait()
		return rtts, errs
	}
}

// waitIdle waits until sandboxd uses less than idleCPU of a core over one
// second, and says how long that took.
func (r *hostileRun) waitIdle() (time.Duration, bool) {
	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	prev := r.cpuTicks()
	for time.Since(start) < idleWithin {
		<-tick.C
		now := r.cpuTicks()
		if float64(now-prev)/clkTck < idleCPU {
			return time.Since(start), true
		}
		prev = now
	}
	return time.Since(start), false
}

// cpuTicks is sandboxd's CPU time (utime + stime), in clock ticks, summed
// over the processes of the run.
func (r *hostileRun) cpuTicks() int64 {
	return r.cpuCarry.Load() + cpuTicksOf(int(r.pid.Load()))
}

func cpuTicksOf(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces; fields count from ")".
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return ut + st
}

// rss reads a memory figure (VmRSS, VmHWM) of sandboxd, in bytes.
func (r *hostileRun) rss(field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", r.pid.Load()))
	if err != nil {
		r.t.Errorf("reading sandboxd's /proc status: %v", err)
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	r.t.Errorf("sandboxd's /proc status has no %s line", field)
	return 0
}

// resetPeakRSS resets sandboxd's VmHWM to its current RSS (clear_refs 5),
// so that each case measures its own peak.
func (r *hostileRun) resetPeakRSS() {
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", r.pid.Load()), []byte("5"), 0); err != nil {
		r.t.Logf("resetting sandboxd's peak RSS: %v (the peak then spans earlier cases)", err)
	}
}

// logSnapshot is the size of sandboxd's log kept so far and its first line
// (which changes once the harness starts cutting the log's head).
func (hc *hostileCase) logSnapshot() (int64, string) {
	s := hc.d.logs.String()
	first, _, _ := strings.Cut(s, "\n")
	return int64(len(s)), first
}

// mountPointsUnder lists the host's mounts at or below dir.
func mountPointsUnder(dir string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return []string{"reading mountinfo: " + err.Error()}
	}
	var m []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			m = append(m, f[4])
		}
	}
	return m
}

// loopDevicesOf lists the loop devices whose backing file is under dir
// (losetup prints each with its full backing path).
func loopDevicesOf(ctx context.Context, dir string) []string {
	out, err := exec.CommandContext(ctx, "losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE").CombinedOutput()
	if err != nil {
		return []string{fmt.Sprintf("losetup: %v: %s", err, out)}
	}
	var l []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, dir+"/") {
			l = append(l, strings.TrimSpace(line))
		}
	}
	return l
}

// dockerLinesQuiet is dockerLines for polls: a failure is one line.
func dockerLinesQuiet(ctx context.Context, args ...string) []string {
	out, err := exec.CommandContext(ctx, "docker", args...).Output()
	if err != nil {
		return []string{fmt.Sprintf("docker %v: %v", args, err)}
	}
	return strings.Fields(string(out))
}

// hostFileSum is the SHA-256 of a host file, to check it did not change.
func hostFileSum(t *testing.T, path string) [32]byte {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s on the host: %v", path, err)
	}
	return sha256.Sum256(b)
}

// codeOf names a call's outcome for the case's line.
func codeOf(err error) string {
	if err == nil {
		return "OK"
	}
	return status.Code(err).String()
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func maxDur(d []time.Duration) time.Duration {
	var m time.Duration
	for _, x := range d {
		m = max(m, x)
	}
	return m
}

func fmtMS(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}
