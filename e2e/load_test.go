package e2e

// The load suite: many users run many commands at once through one
// sandboxd, with no errors, and leave nothing behind, under each runtime.
// Its size is SANDBOXD_LOAD_USERS × SANDBOXD_LOAD_COMMANDS under runc (10 ×
// 20 by default, seconds on a laptop; CI runs the full 50 × 200, about 20 s
// on 2 cores) and SANDBOXD_LOAD_RUNSC_USERS × SANDBOXD_LOAD_RUNSC_COMMANDS
// under gVisor (5 × 10 by default; CI runs 10 × 20: gVisor on the ptrace
// platform of Debian's 2022 runsc ran some 20 commands/s on 2 cores, so
// 50 × 200 would have taken ten minutes). A hard time cap
// (SANDBOXD_LOAD_MINUTES, 5 by default) fails the suite rather than
// letting it run on.
//
// Leaks are measured against a baseline taken after a warm-up, once every
// user's sandbox has been deleted again: sandboxd's goroutines (counted in
// the stack dump a SIGQUIT makes it print), its open descriptors and
// threads (from /proc), the test client's goroutines, and the containers,
// state directories and mounts that belong to the server's state
// directory. The suite reports one line, e.g.
//
//	load suite (runc): 50 users × 200 commands in 20s (500 commands/s, p50 20ms, p99 250ms), errors: 0; leaked: 0 containers, 0 state dirs, 0 mounts, 0 sandboxd goroutines (11→11), 0 fds (16→16), 0 client goroutines; sandboxd threads 8→37
//
// Threads are reported, not checked: Go's runtime keeps the threads a busy
// moment needed.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// Environment of the load suite.
const (
	envLoadUsers         = "SANDBOXD_LOAD_USERS"
	envLoadCommands      = "SANDBOXD_LOAD_COMMANDS"
	envLoadRunscUsers    = "SANDBOXD_LOAD_RUNSC_USERS"
	envLoadRunscCommands = "SANDBOXD_LOAD_RUNSC_COMMANDS"
	envLoadMinutes       = "SANDBOXD_LOAD_MINUTES"
)

// loadWarmPool is the warm pool the suite runs with when sandboxd has one:
// small, so the pool is exercised (claims and refills under load) without
// dominating the figures.
const loadWarmPool = 2

// fdSlack allows for descriptors a server opens once and keeps (idle
// keep-alive connections to the Docker engine): a leak grows with the
// number of commands or sandboxes, far past this.
const fdSlack = 8

func TestLoadSuite(t *testing.T) {
	env := needE2E(t)
	for _, rt := range suiteRuntimes(t) {
		t.Run(rt, func(t *testing.T) {
			users, commands := envInt(t, envLoadUsers, 10), envInt(t, envLoadCommands, 20)
			if rt == "runsc" {
				users, commands = envInt(t, envLoadRunscUsers, 5), envInt(t, envLoadRunscCommands, 10)
			}
			runLoadSuite(t, env.withRuntime(t, rt), rt, users, commands)
		})
	}
}

func runLoadSuite(t *testing.T, env *e2eEnv, rt string, users, commands int) {
	capTime := time.Duration(envInt(t, envLoadMinutes, 5)) * time.Minute

	// GOTRACEBACK=all makes a SIGQUIT dump every goroutine, which is how
	// the suite counts sandboxd's.
	t.Setenv("GOTRACEBACK", "all")
	var extra []string
	pool := 0
	if hasFlag(env.sandboxdHelp(t), "warm-pool") {
		pool = loadWarmPool
		extra = append(extra, "--warm-pool", fmt.Sprint(pool))
	}
	// Room for every user; the default pids and memory limits are per
	// sandbox and not reservations.
	extra = append(extra, "--max-sandboxes", fmt.Sprint(users+pool+2))

	// Warm-up, then the baseline: a server that has served and deleted a
	// few sandboxes, with its pool full.
	d := env.start(t, extra...)
	c, conn := d.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), capTime+5*time.Minute)
	defer cancel()
	if res := runLoad(ctx, c, "warmup", 2, 3); res.errors > 0 {
		t.Fatalf("warm-up: %d errors, first: %v", res.errors, res.firstErrs)
	}
	deleteAllSandboxes(t, ctx, c)
	base := settledFootprint(t, env, pool)
	procBase, err := readProcCounts(d.cmd.Process.Pid)
	if err != nil {
		t.Fatalf("reading sandboxd's /proc: %v", err)
	}
	conn.Close()
	goBase := sigquitGoroutines(t, d)
	clientBase := runtime.NumGoroutine()

	// The load, against a restarted sandboxd on the same state directory.
	d = env.start(t, extra...)
	c, conn = d.client(t)
	pid := d.cmd.Process.Pid
	if got := settledFootprint(t, env, pool); got != base {
		t.Fatalf("the restarted sandboxd's footprint %v differs from the baseline %v", got, base)
	}
	procStart, _ := readProcCounts(pid)
	lctx, lcancel := context.WithTimeout(ctx, capTime)
	res := runLoad(lctx, c, "load", users, commands)
	capped := lctx.Err() != nil
	lcancel()
	if capped {
		t.Errorf("the load did not finish within the %v cap (%s=%d): %d of %d commands done", capTime, envLoadMinutes, int(capTime.Minutes()), res.done, users*commands)
	}
	if res.errors > 0 {
		t.Errorf("%d errors under load; the first: %v", res.errors, res.firstErrs)
	}

	deleteAllSandboxes(t, ctx, c)
	after := settledFootprint(t, env, pool)
	procAfter, err := readProcCounts(pid)
	if err != nil {
		t.Fatalf("reading sandboxd's /proc: %v", err)
	}
	conn.Close()
	goAfter := sigquitGoroutines(t, d)
	clientLeak := 0
	if !pollUntil(10*time.Second, func() bool { return runtime.NumGoroutine() <= clientBase }) {
		clientLeak = runtime.NumGoroutine() - clientBase
		buf := make([]byte, 1<<20)
		t.Errorf("the client's goroutines went from %d to %d:\n%s", clientBase, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
	}

	leaked := footprint{after.containers - base.containers, after.dirs - base.dirs, after.mounts - base.mounts}
	if leaked != (footprint{}) {
		t.Errorf("after deleting every sandbox: %v; the baseline was %v", after, base)
	}
	goLeak := 0
	for creator, n := range goAfter {
		if extra := n - goBase[creator]; extra > 0 {
			goLeak += extra
			t.Errorf("sandboxd has %d more goroutines created by %s after the load than before it", extra, creator)
		}
	}
	if goLeak > 0 {
		t.Logf("sandboxd's stack dump:\n%s", d.logs.String())
	}
	if procAfter.fds > procBase.fds+fdSlack {
		t.Errorf("sandboxd holds %d descriptors after the load, %d before it", procAfter.fds, procBase.fds)
	}
	p50, p99 := res.percentile(50), res.percentile(99)
	reportSummary(t, "load suite (%s): %d users × %d commands in %v (%.0f commands/s, p50 %v, p99 %v), errors: %d; "+
		"leaked: %d containers, %d state dirs, %d mounts, %d sandboxd goroutines (%d→%d), %d fds (%d→%d), %d client goroutines; sandboxd threads %d→%d",
		rt, users, commands, res.elapsed.Round(time.Second), float64(res.done)/res.elapsed.Seconds(), p50, p99, res.errors,
		leaked.containers, leaked.dirs, leaked.mounts, goLeak, goBase.total(), goAfter.total(), max(0, procAfter.fds-procBase.fds), procBase.fds, procAfter.fds,
		clientLeak, procStart.threads, procAfter.threads)
}

// loadResult is what a load run measured.
type loadResult struct {
	done, errors int
	firstErrs    []string
	latencies    []time.Duration
	elapsed      time.Duration
}

func (r *loadResult) percentile(p int) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(r.latencies))
	return s[(len(s)-1)*p/100].Round(time.Millisecond)
}

// runLoad runs users concurrent users, each acquiring a sandbox and running
// commands one after another: Python that counts in a global (so state must
// persist, in order), printing and bash. Every unexpected result counts as
// an error.
func runLoad(ctx context.Context, c sandboxv1.SandboxServiceClient, prefix string, users, commands int) *loadResult {
	res := &loadResult{}
	var mu sync.Mutex
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		res.errors++
		if len(res.firstErrs) < 5 {
			res.firstErrs = append(res.firstErrs, fmt.Sprintf(format, args...))
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	for u := range users {
		wg.Go(func() {
			user := fmt.Sprintf("%s-%02d", prefix, u)
			acq, err := c.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: user})
			if err != nil {
				fail("AcquireSandbox(%s): %v", user, err)
				return
			}
			id := acq.GetSandbox().GetSandboxId()
			n := 0 // what the global n must be
			for k := 1; k <= commands && ctx.Err() == nil; k++ {
				var req *sandboxv1.ExecuteRequest
				var want func(o outcome) bool
				if k%5 == 0 {
					req = &sandboxv1.ExecuteRequest{SandboxId: id, Language: "bash", Code: fmt.Sprintf("echo %s $((%d * 2))", user, k)}
					want = func(o outcome) bool { return o.stdout == fmt.Sprintf("%s %d\n", user, 2*k) }
				} else {
					n++
					req = &sandboxv1.ExecuteRequest{SandboxId: id, Code: fmt.Sprintf("n = globals().get('n', 0) + 1\nprint('%s', n)\nn", user)}
					want = func(o outcome) bool {
						return o.stdout == fmt.Sprintf("%s %d\n", user, n) && len(o.results) == 1 && o.results[0]["text/plain"] == fmt.Sprint(n)
					}
				}
				t0 := time.Now()
				o, err := runCollect(ctx, c, req)
				lat := time.Since(t0)
				mu.Lock()
				res.done++
				res.latencies = append(res.latencies, lat)
				mu.Unlock()
				if err != nil || o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_OK || !want(o) {
					fail("%s command %d (%.40q): %v, stdout %q, results %v, done %v", user, k, req.GetCode(), err, o.stdout, o.results, o.done)
				}
			}
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	return res
}

// deleteAllSandboxes deletes every sandbox the server lists, concurrently.
func deleteAllSandboxes(t *testing.T, ctx context.Context, c sandboxv1.SandboxServiceClient) {
	t.Helper()
	list, err := c.ListSandboxes(ctx, &sandboxv1.ListSandboxesRequest{})
	if err != nil {
		t.Fatalf("ListSandboxes: %v", err)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, sb := range list.GetSandboxes() {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if _, err := c.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: sb.GetSandboxId()}); err != nil {
				t.Errorf("DeleteSandbox(%s): %v", sb.GetSandboxId(), err)
			}
		})
	}
	wg.Wait()
}

// footprint is what a server leaves on the host for its state directory.
type footprint struct {
	containers, dirs, mounts int
}

func (f footprint) String() string {
	return fmt.Sprintf("%d containers, %d state dirs, %d mounts", f.containers, f.dirs, f.mounts)
}

// settledFootprint waits (bounded) until only the warm pool is left, which
// refills in the background, and returns the footprint then.
func settledFootprint(t *testing.T, env *e2eEnv, pool int) footprint {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var f footprint
	measure := func() bool {
		f.containers = len(dockerLines(t, ctx, "ps", "-aq", "--filter", "label=sandboxd.state-dir="+env.stateDir))
		entries, err := os.ReadDir(filepath.Join(env.stateDir, "sandboxes"))
		if err != nil && !os.IsNotExist(err) {
			t.Fatalf("reading the state directory: %v", err)
		}
		f.dirs = len(entries)
		f.mounts = mountsUnder(t, env.stateDir)
		return f.containers == pool && f.dirs == pool
	}
	if !pollUntil(2*time.Minute, measure) {
		t.Logf("the footprint did not settle at the warm pool's %d sandboxes within 2 minutes: %v", pool, f)
	}
	return f
}

// goroutineCounts counts a process's goroutines by the function that
// created them, which is what tells a leak (per command or per sandbox)
// apart from a goroutine a server starts once.
type goroutineCounts map[string]int

func (g goroutineCounts) total() int {
	n := 0
	for _, c := range g {
		n += c
	}
	return n
}

// Goroutines that vary without leaking: the runtime's own, the HTTP
// transport's idle connections to the Docker engine (their pool is bounded),
// and gRPC's per-connection transport, which outlives a client's Close by
// the moment the server takes to notice. A leaked call shows as its handler
// instead.
var ignoredCreators = regexp.MustCompile(`^(runtime\.|net/http\.\(\*Transport\)\.dialConn|google\.golang\.org/grpc/internal/transport\.NewServerTransport|google\.golang\.org/grpc\.\(\*Server\)\.handleRawConn)`)

// goroutineHeader starts a goroutine's block in the dump. Goroutine 0 is
// not one: it is the g0 of the thread that took the signal, printed only
// when that thread was idle, so counting it made a dump one goroutine
// "longer" at random (CI once saw 14→15 from that alone).
var (
	goroutineHeader = regexp.MustCompile(`^goroutine [1-9]\d* .*\]:$`)
	createdBy       = regexp.MustCompile(`(?m)^created by (\S+)`)
)

// sigquitGoroutines makes sandboxd dump its goroutines and exit (SIGQUIT;
// GOTRACEBACK=all), and counts them by creator, leaving out ignoredCreators.
func sigquitGoroutines(t *testing.T, d *daemon) goroutineCounts {
	t.Helper()
	d.signalExit(t, syscall.SIGQUIT, "SIGQUIT")
	counts := goroutineCounts{}
	for _, block := range strings.Split(d.logs.String(), "\n\n") {
		if !goroutineHeader.MatchString(strings.SplitN(strings.TrimSpace(block), "\n", 2)[0]) {
			continue
		}
		creator := "main"
		if m := createdBy.FindStringSubmatch(block); m != nil {
			creator = m[1]
		}
		if !ignoredCreators.MatchString(creator) {
			counts[creator]++
		}
	}
	if len(counts) == 0 {
		t.Fatalf("sandboxd's SIGQUIT dump lists no goroutines:\n%s", lastLines(d.logs.String(), 20))
	}
	return counts
}

func lastLines(s string, n int) string {
	l := strings.Split(s, "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}
