package e2e

// Shared machinery of the hardening suites (escape_test.go, fault_test.go,
// load_test.go): the runtimes they run under, the one-line summaries they
// report, a client that resumes a command across sandboxd restarts, API
// fields that only newer servers have, and the process counters the leak
// checks compare.
//
// The suites use the end-to-end harness of e2e_test.go (real sandboxd
// binary, real Docker engine, real image) and follow its skip rules.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/sandboxd/sandboxd/internal/testenv"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// Environment variables the suites read. The Makefile and .ci/run set them;
// the defaults keep a developer's `go test ./...` short.
const (
	// envSuiteSummary names a file each suite appends its summary line to,
	// so `make test` can print the figures of a run whose test output go
	// test hides (it shows only failing tests' logs).
	envSuiteSummary = "SANDBOXD_SUITE_SUMMARY"
	// envSuiteRuntimes is a comma-separated list of Docker runtimes the
	// escape suite runs under (default: runc, plus runsc when registered).
	envSuiteRuntimes = "SANDBOXD_SUITE_RUNTIMES"
)

// suiteRuntimes returns the Docker runtimes to run a suite under: runc, and
// runsc (gVisor) when dockerd has it registered. Under CI=true a missing
// runsc is a failure, since CI promises both; SANDBOXD_SUITE_RUNTIMES
// overrides the choice.
func suiteRuntimes(t *testing.T) []string {
	t.Helper()
	registered := testenv.DockerRuntimes(t)
	if v := os.Getenv(envSuiteRuntimes); v != "" {
		var rts []string
		for _, rt := range strings.Split(v, ",") {
			rt = strings.TrimSpace(rt)
			if !slices.Contains(registered, rt) {
				t.Fatalf("%s names runtime %q, which dockerd does not have (registered: %v)", envSuiteRuntimes, rt, registered)
			}
			rts = append(rts, rt)
		}
		return rts
	}
	rts := []string{"runc"}
	switch {
	case slices.Contains(registered, "runsc"):
		rts = append(rts, "runsc")
	case testenv.InCI():
		t.Fatalf("CI=true and dockerd has no runsc runtime (registered: %v); make runsc builds gVisor and registers it (scripts/ensure-runsc.sh)", registered)
	default:
		t.Logf("dockerd has no runsc runtime (registered: %v); running under runc only", registered)
	}
	return rts
}

// withRuntime returns an environment with e's binaries, a state directory
// of its own and sandboxes under the given Docker runtime.
func (e *e2eEnv) withRuntime(t *testing.T, runtime string) *e2eEnv {
	f := e.fork(t)
	f.runtime = runtime
	return f
}

// reportSummary logs a suite's summary line and appends it to the file
// named by SANDBOXD_SUITE_SUMMARY, if set.
func reportSummary(t *testing.T, format string, args ...any) {
	t.Helper()
	line := fmt.Sprintf(format, args...)
	t.Log(line)
	path := os.Getenv(envSuiteSummary)
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Errorf("writing the summary to %s: %v", path, err)
		return
	}
	defer f.Close()
	if _, err := fmt.Fprintln(f, line); err != nil {
		t.Errorf("writing the summary to %s: %v", path, err)
	}
}

// envInt reads a positive integer setting of a suite (e.g. its full size in
// CI), falling back to def.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// sandboxdHelp returns `sandboxd --help`, from which the suites learn which
// optional features (flags) the server under test has.
func (e *e2eEnv) sandboxdHelp(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(e.sandboxd, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("sandboxd --help: %v\n%s", err, out)
	}
	return string(out)
}

// hasFlag reports whether usage (sandboxd --help) lists the flag.
func hasFlag(usage, flag string) bool {
	for _, l := range strings.Split(usage, "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && strings.TrimLeft(f[0], "-") == flag {
			return true
		}
	}
	return false
}

// --- API fields newer servers have ----------------------------------------
//
// The suites exercise limits (ResourceLimits.disk_bytes) and options
// (SandboxOptions.network) that arrive with issue 4. They are set and read
// by name through protobuf reflection, so the suites build against the API
// with or without them and use them when present.

// setIntField sets the integer field name of m and reports whether m has it.
func setIntField(m proto.Message, name string, v int64) bool {
	r := m.ProtoReflect()
	fd := r.Descriptor().Fields().ByName(protoreflect.Name(name))
	if fd == nil || fd.Kind() != protoreflect.Int64Kind {
		return false
	}
	r.Set(fd, protoreflect.ValueOfInt64(v))
	return true
}

// intField reads the integer field name of m; ok is false when m has none.
func intField(m proto.Message, name string) (v int64, ok bool) {
	r := m.ProtoReflect()
	fd := r.Descriptor().Fields().ByName(protoreflect.Name(name))
	if fd == nil || fd.Kind() != protoreflect.Int64Kind {
		return 0, false
	}
	return r.Get(fd).Int(), true
}

// setBoolField sets the boolean field name of m and reports whether m has it.
func setBoolField(m proto.Message, name string, v bool) bool {
	r := m.ProtoReflect()
	fd := r.Descriptor().Fields().ByName(protoreflect.Name(name))
	if fd == nil || fd.Kind() != protoreflect.BoolKind {
		return false
	}
	r.Set(fd, protoreflect.ValueOfBool(v))
	return true
}

// --- a client that outlives sandboxd ----------------------------------------

// dialResilient connects to a fixed address with a short reconnect backoff,
// for clients that must ride out sandboxd restarts: gRPC's default backoff
// grows to two minutes between connection attempts.
func dialResilient(t *testing.T, addr string) sandboxv1.SandboxServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(sandboxv1.MaxMessageSize)),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 5 * time.Second,
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return sandboxv1.NewSandboxServiceClient(conn)
}

// resumeStats counts what a resuming client went through.
type resumeStats struct {
	// resumes counts streams reopened after a break: by StreamCommand after
	// the last seq seen, or by Execute again when no event had arrived.
	resumes int
	// reexecutes counts the Execute retries among them.
	reexecutes int
}

// maxResumes bounds how often one command is resumed before the client gives
// up: each break of the suites is followed by a restarted server, so a
// handful means the server does not come back.
const maxResumes = 10

// runResuming runs req to its done event the way a client that survives
// sandboxd crashes does: when the stream breaks, it resumes with
// StreamCommand after the last seq it saw; when it saw nothing, it cannot
// know whether sandboxd took the command, so it sends the same Execute again
// (idempotent by command ID). onEvent is called after each event, in order;
// the fault suite kills sandboxd from it. The events returned are numbered
// 1..n without gaps or duplicates, ending with done, or err says why not.
func runResuming(ctx context.Context, c sandboxv1.SandboxServiceClient, req *sandboxv1.ExecuteRequest, onEvent func(*sandboxv1.ExecuteEvent)) ([]*sandboxv1.ExecuteEvent, resumeStats, error) {
	var evs []*sandboxv1.ExecuteEvent
	var st resumeStats
	for attempt := 0; ; attempt++ {
		var s grpc.ServerStreamingClient[sandboxv1.ExecuteEvent]
		var err error
		if len(evs) == 0 {
			s, err = c.Execute(ctx, req, grpc.WaitForReady(true))
		} else {
			s, err = c.StreamCommand(ctx, &sandboxv1.StreamCommandRequest{SandboxId: req.GetSandboxId(), CommandId: req.GetCommandId(), AfterSeq: int64(len(evs))}, grpc.WaitForReady(true))
		}
		for err == nil {
			var ev *sandboxv1.ExecuteEvent
			if ev, err = s.Recv(); err != nil {
				break
			}
			if want := int64(len(evs) + 1); ev.GetSeq() != want {
				return evs, st, fmt.Errorf("got event seq %d, want %d (a duplicate or a gap) after %d resumes", ev.GetSeq(), want, st.resumes)
			}
			evs = append(evs, ev)
			if onEvent != nil {
				onEvent(ev)
			}
			if ev.GetDone() != nil {
				return evs, st, nil
			}
		}
		if errors.Is(err, io.EOF) {
			return evs, st, fmt.Errorf("stream ended cleanly after %d events without done", len(evs))
		}
		// Unavailable: the server went away mid-call, or is not back yet.
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			return evs, st, fmt.Errorf("after %d events and %d resumes: %w", len(evs), st.resumes, err)
		}
		if attempt >= maxResumes {
			return evs, st, fmt.Errorf("gave up after %d resumes: %w", st.resumes, err)
		}
		st.resumes++
		if len(evs) == 0 {
			st.reexecutes++
		}
	}
}

// runCollect runs req and gathers its whole outcome, stdout and stderr
// included, checking that the events are numbered 1..n (none lost or
// repeated on the way). Unlike execute it reports failures instead of
// stopping the test, for suites that count them and for goroutines.
func runCollect(ctx context.Context, c sandboxv1.SandboxServiceClient, req *sandboxv1.ExecuteRequest) (outcome, error) {
	s, err := c.Execute(ctx, req)
	if err != nil {
		return outcome{}, err
	}
	evs, err := recvEvents(s)
	o := outcomeOf(evs)
	if err != nil {
		return o, fmt.Errorf("stream failed after %d events: %w", len(evs), err)
	}
	for i, ev := range evs {
		if ev.GetSeq() != int64(i+1) {
			return o, fmt.Errorf("event %d of the stream has seq %d: events were lost or repeated (seqs %v)", i+1, ev.GetSeq(), seqsOf(evs))
		}
	}
	if o.done == nil {
		return o, fmt.Errorf("stream ended without done after %d events", len(evs))
	}
	return o, nil
}

// outcomeOf sums up a command's events.
func outcomeOf(evs []*sandboxv1.ExecuteEvent) outcome {
	var o outcome
	for _, ev := range evs {
		o.add(ev)
	}
	return o
}

// add counts one event into the outcome.
func (o *outcome) add(ev *sandboxv1.ExecuteEvent) {
	o.events++
	switch e := ev.GetEvent().(type) {
	case *sandboxv1.ExecuteEvent_Stdout:
		o.stdout += e.Stdout.GetText()
	case *sandboxv1.ExecuteEvent_Stderr:
		o.stderr += e.Stderr.GetText()
	case *sandboxv1.ExecuteEvent_Result:
		o.results = append(o.results, e.Result.GetData())
	case *sandboxv1.ExecuteEvent_Display:
		o.results = append(o.results, e.Display.GetData())
	case *sandboxv1.ExecuteEvent_Error:
		o.errs = append(o.errs, e.Error)
	case *sandboxv1.ExecuteEvent_Done:
		o.done = e.Done
	}
}

// --- process counters for leak checks ---------------------------------------

// procCounts is what a process holds that a leak would grow.
type procCounts struct {
	fds, threads int
}

func (p procCounts) String() string { return fmt.Sprintf("%d fds, %d threads", p.fds, p.threads) }

// readProcCounts reads a live process's open descriptors and threads from
// /proc.
func readProcCounts(pid int) (procCounts, error) {
	fds, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	if err != nil {
		return procCounts{}, err
	}
	st, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return procCounts{}, err
	}
	for _, l := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return procCounts{}, fmt.Errorf("/proc/%d/status: %q", pid, l)
			}
			return procCounts{fds: len(fds), threads: n}, nil
		}
	}
	return procCounts{}, fmt.Errorf("/proc/%d/status has no Threads line", pid)
}

// mountsUnder counts the host's mounts at or below dir (sandboxd may mount
// per-sandbox volumes there).
func mountsUnder(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatalf("reading mountinfo: %v", err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		// Field 5 is the mount point (octal-escaped, which a test's temp
		// directory never needs).
		if f := strings.Fields(l); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			n++
		}
	}
	return n
}
