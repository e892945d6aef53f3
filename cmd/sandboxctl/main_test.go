package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
	"github.com/sandboxd/sandboxd/orchestrator/door/grpcapi"
)

const (
	sbA = "sb-aaaaaaaaaaaaaaaaaaaa"
	sbB = "sb-bbbbbbbbbbbbbbbbbbbb"
)

var t0 = time.Date(2026, 11, 21, 7, 30, 0, 0, time.UTC)

// realNewCommandID is the generator before init pins it (package variables
// are initialised before init functions run).
var realNewCommandID = newCommandID

func init() {
	displayLoc = time.UTC
	newCommandID = func() string { return "gen-1" }
}

// startServer serves the real API over fake on a loopback port.
func startServer(t *testing.T, fake *coretest.Manager) string {
	t.Helper()
	return startServerOver(t, coretest.Validated(fake))
}

// startServerOver serves the real API over m on a loopback port.
func startServerOver(t *testing.T, m *coretest.ValidatedManager) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := grpcapi.NewServer(m, nil)
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("server did not stop within 10s")
		}
	})
	return lis.Addr().String()
}

type result struct {
	code           int
	stdout, stderr string
}

// runCLI runs sandboxctl against addr with a bounded context.
func runCLI(t *testing.T, ctx context.Context, addr, stdin string, args ...string) result {
	t.Helper()
	if ctx == nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
	}
	var out, errOut strings.Builder
	env := func(k string) string {
		if k == "SANDBOXCTL_ADDR" {
			return addr
		}
		return ""
	}
	code := run(ctx, args, env, strings.NewReader(stdin), &out, &errOut)
	return result{code, out.String(), errOut.String()}
}

// oneLine checks that stderr is exactly one line containing want.
func oneLine(t *testing.T, stderr, want string) {
	t.Helper()
	if strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, want) {
		t.Errorf("stderr = %q; want one line containing %q", stderr, want)
	}
}

func sandboxes() []core.Sandbox {
	return []core.Sandbox{
		{ID: sbA, Tenant: "default", UserID: "alice", State: core.StateRunning, CreatedAt: t0, LastActiveAt: t0.Add(time.Minute),
			ExpiresAt: t0.Add(31 * time.Minute), Image: "sandboxd-sandbox:latest", Limits: core.Limits{MemoryBytes: 1 << 30}},
		{ID: sbB, Tenant: "acme", UserID: "bob@example.com", State: core.StateDead, StateReason: "exit 137", CreatedAt: t0.Add(time.Hour),
			LastActiveAt: t0.Add(time.Hour), Image: "img:2"},
	}
}

func TestListTable(t *testing.T) {
	var got core.ListFilter
	addr := startServer(t, &coretest.Manager{ListFunc: func(_ context.Context, f core.ListFilter) ([]core.Sandbox, error) {
		got = f
		return sandboxes(), nil
	}})
	r := runCLI(t, nil, addr, "", "list", "--user", "alice", "--state", "running")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	want := "" +
		"ID                       TENANT   USER             STATE    CREATED              LAST ACTIVE          EXPIRES              IMAGE\n" +
		"sb-aaaaaaaaaaaaaaaaaaaa  default  alice            running  2026-11-21 07:30:00  2026-11-21 07:31:00  2026-11-21 08:01:00  sandboxd-sandbox:latest\n" +
		"sb-bbbbbbbbbbbbbbbbbbbb  acme     bob@example.com  dead     2026-11-21 08:30:00  2026-11-21 08:30:00  -                    img:2\n"
	if r.stdout != want {
		t.Errorf("table:\n%s\nwant:\n%s", r.stdout, want)
	}
	if !reflect.DeepEqual(got, core.ListFilter{UserID: "alice", State: core.StateRunning}) {
		t.Errorf("server got filter %+v", got)
	}
}

func TestListJSON(t *testing.T) {
	addr := startServer(t, &coretest.Manager{ListFunc: func(context.Context, core.ListFilter) ([]core.Sandbox, error) {
		return sandboxes(), nil
	}})
	r := runCLI(t, nil, addr, "", "list", "--json")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	var got []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("output is not a JSON array: %v\n%s", err, r.stdout)
	}
	if len(got) != 2 || got[0]["sandbox_id"] != sbA || got[1]["state"] != "SANDBOX_STATE_DEAD" ||
		got[1]["state_reason"] != "exit 137" || got[0]["created_at"] != "2026-11-21T07:30:00Z" {
		t.Errorf("unexpected JSON: %s", r.stdout)
	}
	if lim, _ := got[0]["limits"].(map[string]any); lim["memory_bytes"] != "1073741824" {
		t.Errorf("limits = %v; want memory_bytes as protojson's int64 string", got[0]["limits"])
	}

	empty := startServer(t, &coretest.Manager{ListFunc: func(context.Context, core.ListFilter) ([]core.Sandbox, error) {
		return nil, nil
	}})
	if r := runCLI(t, nil, empty, "", "list", "--json"); r.code != 0 || r.stdout != "[]\n" {
		t.Errorf("empty list: exit %d, stdout %q; want []", r.code, r.stdout)
	}
}

func TestInspect(t *testing.T) {
	addr := startServer(t, &coretest.Manager{GetFunc: func(_ context.Context, id string) (core.Sandbox, error) {
		if id != sbB {
			return core.Sandbox{}, coretest.Errorf(core.ErrNotFound, "sandbox %s not found", id)
		}
		return sandboxes()[1], nil
	}})
	r := runCLI(t, nil, addr, "", "inspect", sbB)
	var got map[string]any
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &got) != nil || got["user_id"] != "bob@example.com" {
		t.Errorf("inspect: exit %d, stdout %s, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, nil, addr, "", "inspect", sbA)
	if r.code != 1 {
		t.Errorf("inspect unknown: exit %d, want 1", r.code)
	}
	oneLine(t, r.stderr, "sandboxctl: inspect "+sbA+": ")
}

func TestKill(t *testing.T) {
	var mu sync.Mutex
	var deleted []string
	fake := &coretest.Manager{
		DeleteFunc: func(_ context.Context, id string) error {
			if id != sbA && id != sbB {
				return coretest.Errorf(core.ErrNotFound, "sandbox %s not found", id)
			}
			mu.Lock()
			defer mu.Unlock()
			deleted = append(deleted, id)
			return nil
		},
		ListFunc: func(_ context.Context, f core.ListFilter) ([]core.Sandbox, error) {
			if f.UserID == "alice" {
				return sandboxes(), nil
			}
			return nil, nil
		},
	}
	addr := startServer(t, fake)
	unknown := "sb-cccccccccccccccccccc"

	r := runCLI(t, nil, addr, "", "kill", unknown)
	if r.code != 1 {
		t.Errorf("kill unknown: exit %d, want 1", r.code)
	}
	oneLine(t, r.stderr, "sandboxctl: kill "+unknown+": sandbox "+unknown+" not found")

	// Every ID is attempted even after a failure.
	r = runCLI(t, nil, addr, "", "kill", unknown, sbA, "not-an-id", sbB)
	if r.code != 1 || r.stdout != sbA+"\n"+sbB+"\n" {
		t.Errorf("kill mixed: exit %d, stdout %q; want 1 and both known IDs", r.code, r.stdout)
	}
	if n := strings.Count(r.stderr, "\n"); n != 2 || !strings.Contains(r.stderr, "kill not-an-id: ") {
		t.Errorf("kill mixed: stderr %q; want one line per failure", r.stderr)
	}

	mu.Lock()
	deleted = nil
	mu.Unlock()
	r = runCLI(t, nil, addr, "", "kill", "--user", "alice")
	mu.Lock()
	if r.code != 0 || !slices.Equal(deleted, []string{sbA, sbB}) {
		t.Errorf("kill --user: exit %d (stderr %q), deleted %v", r.code, r.stderr, deleted)
	}
	mu.Unlock()

	if r := runCLI(t, nil, addr, "", "kill", "--user", "nobody"); r.code != 0 || !strings.Contains(r.stderr, "no sandboxes") {
		t.Errorf("kill --user without sandboxes: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestUsageErrors(t *testing.T) {
	addr := startServer(t, &coretest.Manager{})
	tests := [][]string{
		{"frobnicate"},
		{"list", "--state", "zombie"},
		{"list", "extra"},
		{"kill"},
		{"kill", "--user", "u", sbA},
		{"inspect"},
		{"exec", "print(1)"},
		{"exec", "--user", "u"},
		{"exec", "--user", "u", "--timeout", "-1s", "1"},
		{"resume", sbA},
		{"resume", sbA, "c1", "--after-seq", "-2"},
		{"--bogus", "list"},
	}
	for _, args := range tests {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := runCLI(t, nil, addr, "", args...)
			if r.code != 2 {
				t.Errorf("exit %d, want 2 (stderr %q)", r.code, r.stderr)
			}
			oneLine(t, r.stderr, "sandboxctl")
		})
	}
	if r := runCLI(t, nil, addr, ""); r.code != 2 || !strings.Contains(r.stderr, "Usage:") {
		t.Errorf("no command: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := runCLI(t, nil, addr, "", "help"); r.code != 0 || !strings.Contains(r.stdout, "Usage:") {
		t.Errorf("help: exit %d, stdout %q", r.code, r.stdout)
	}
	for _, args := range [][]string{{"exec", "--help"}, {"help", "exec"}, {"exec", "-h", "--user", "u"}} {
		r := runCLI(t, nil, addr, "", args...)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "Usage: sandboxctl exec ") || !strings.Contains(r.stdout, "Examples:\n  sandboxctl exec --user alice") ||
			strings.Contains(r.stdout, "Commands:") {
			t.Errorf("%v: exit %d, stdout %q; want exec's own help with examples", args, r.code, r.stdout)
		}
	}
	// A mistyped command gets suggestions.
	for typo, want := range map[string]string{"exce": "did you mean exec?", "lst": "did you mean list or ls?", "resu": "did you mean resume?"} {
		r := runCLI(t, nil, addr, "", typo)
		if r.code != 2 {
			t.Errorf("%s: exit %d, want 2", typo, r.code)
		}
		oneLine(t, r.stderr, want)
	}
}

func TestUnreachableServer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there now
	r := runCLI(t, nil, "", "", "--addr", addr, "list")
	if r.code != 1 {
		t.Errorf("exit %d, want 1", r.code)
	}
	oneLine(t, r.stderr, "cannot reach sandboxd at "+addr)
}

// execFake serves one user's sandbox and plays events for every command.
func execFake(events func(cid string) []core.Event) (*coretest.Manager, *[]core.ExecRequest, *sync.Mutex) {
	var mu sync.Mutex
	var submitted []core.ExecRequest
	fake := &coretest.Manager{
		AcquireFunc: func(_ context.Context, user string, _ core.Options) (core.AcquireResult, error) {
			return core.AcquireResult{Sandbox: core.Sandbox{ID: sbA, UserID: user, State: core.StateRunning}}, nil
		},
		SubmitFunc: func(_ context.Context, req core.ExecRequest) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			submitted = append(submitted, req)
			if req.CommandID == "" {
				return "gen-1", nil
			}
			return req.CommandID, nil
		},
		FollowFunc: func(_ context.Context, _, cid string, after int64, fn func(core.Event) error) error {
			for _, e := range events(cid) {
				if e.Seq > after {
					if err := fn(e); err != nil {
						return err
					}
				}
			}
			return nil
		},
	}
	return fake, &submitted, &mu
}

func TestExecStreamsOutput(t *testing.T) {
	png := base64.StdEncoding.EncodeToString(make([]byte, 100))
	fake, submitted, mu := execFake(func(cid string) []core.Event {
		return []core.Event{
			{Seq: 1, Type: ioproto.EventStarted, CommandID: cid, Language: "python"},
			{Seq: 2, Type: ioproto.EventStdout, Text: "hello\n"},
			{Seq: 3, Type: ioproto.EventStderr, Text: "careful\n"},
			{Seq: 4, Type: ioproto.EventDisplay, Data: map[string]string{"text/plain": "<Figure>", "image/png": png}},
			{Seq: 5, Type: ioproto.EventDisplay, Data: map[string]string{"text/html": "<b>x</b>"}},
			{Seq: 6, Type: ioproto.EventResult, Data: map[string]string{"text/plain": "42"}},
			{Seq: 7, Type: ioproto.EventError, EName: "NameError", EValue: "name 'y' is not defined",
				Traceback: []string{"Traceback (most recent call last):\n", "  File \"<cell>\", line 1\n", "NameError: name 'y' is not defined"}},
			{Seq: 8, Type: ioproto.EventDone, Status: ioproto.StatusError, Reason: "exception"},
		}
	})
	addr := startServer(t, fake)
	r := runCLI(t, nil, addr, "", "exec", "--user", "alice", "print('hello')")
	wantOut := "hello\n[image/png 100 bytes; --save DIR keeps it]\n[text/html 8 bytes]\n42\n"
	if r.stdout != wantOut {
		t.Errorf("stdout = %q, want %q", r.stdout, wantOut)
	}
	wantErr := "careful\nTraceback (most recent call last):\n  File \"<cell>\", line 1\nNameError: name 'y' is not defined\n" +
		"sandboxctl: exec: command gen-1 ended with status error: exception\n"
	if r.stderr != wantErr {
		t.Errorf("stderr = %q, want %q", r.stderr, wantErr)
	}
	if r.code != 1 {
		t.Errorf("exit %d, want 1 for status error", r.code)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(*submitted) != 1 || (*submitted)[0].Code != "print('hello')" || (*submitted)[0].Language != "python" || (*submitted)[0].SandboxID != sbA {
		t.Errorf("submitted %+v", *submitted)
	}
}

func TestExecFromStdinWithOptions(t *testing.T) {
	exit := 0
	fake, submitted, mu := execFake(func(cid string) []core.Event {
		return []core.Event{
			{Seq: 1, Type: ioproto.EventStarted, CommandID: cid, Language: "bash"},
			{Seq: 2, Type: ioproto.EventStdout, Text: "hi\n"},
			{Seq: 3, Type: ioproto.EventDone, Status: ioproto.StatusOK, ExitCode: &exit},
		}
	})
	addr := startServer(t, fake)
	r := runCLI(t, nil, addr, "echo hi\n", "exec", "--user", "alice", "--language", "bash", "--timeout", "5s", "--command-id", "c9", "-")
	if r.code != 0 || r.stdout != "hi\n" || r.stderr != "" {
		t.Errorf("exit %d, stdout %q, stderr %q; want 0, \"hi\\n\", nothing", r.code, r.stdout, r.stderr)
	}
	mu.Lock()
	defer mu.Unlock()
	want := core.ExecRequest{SandboxID: sbA, CommandID: "c9", Language: "bash", Code: "echo hi\n", Timeout: 5 * time.Second}
	if len(*submitted) != 1 || !reflect.DeepEqual((*submitted)[0], want) {
		t.Errorf("submitted %+v, want %+v", *submitted, want)
	}
}

func TestExecTimeoutAndStateLost(t *testing.T) {
	fake, _, _ := execFake(func(cid string) []core.Event {
		return []core.Event{
			{Seq: 1, Type: ioproto.EventStarted, CommandID: cid},
			{Seq: 2, Type: ioproto.EventDone, Status: ioproto.StatusKilled, StateLost: true, Reason: "likely out of memory"},
		}
	})
	fake.AcquireFunc = func(_ context.Context, user string, _ core.Options) (core.AcquireResult, error) {
		return core.AcquireResult{Sandbox: core.Sandbox{ID: sbA, UserID: user}, Created: true,
			ReplacedID: sbB, ReplacedReason: "container exited with code 137"}, nil
	}
	addr := startServer(t, fake)
	r := runCLI(t, nil, addr, "", "exec", "--user", "alice", "x = [0] * 10**12")
	if r.code != 1 {
		t.Errorf("exit %d, want 1", r.code)
	}
	for _, want := range []string{
		"previous sandbox " + sbB + " died (container exited with code 137)",
		"Python state was lost: likely out of memory",
		"ended with status killed",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
}

func TestResumeAfterSeq(t *testing.T) {
	var gotAfter int64 = -1
	fake, _, _ := execFake(func(cid string) []core.Event {
		return []core.Event{
			{Seq: 1, Type: ioproto.EventStarted, CommandID: cid},
			{Seq: 2, Type: ioproto.EventStdout, Text: "one\n"},
			{Seq: 3, Type: ioproto.EventStdout, Text: "two\n"},
			{Seq: 4, Type: ioproto.EventDone, Status: ioproto.StatusOK},
		}
	})
	follow := fake.FollowFunc
	fake.FollowFunc = func(ctx context.Context, sid, cid string, after int64, fn func(core.Event) error) error {
		gotAfter = after
		return follow(ctx, sid, cid, after, fn)
	}
	addr := startServer(t, fake)
	r := runCLI(t, nil, addr, "", "resume", sbA, "c1", "--after-seq", "2")
	if r.code != 0 || r.stdout != "two\n" || gotAfter != 2 {
		t.Errorf("exit %d, stdout %q, server after_seq %d; want 0, \"two\\n\", 2", r.code, r.stdout, gotAfter)
	}
	r = runCLI(t, nil, addr, "", "resume", sbA, ".bad")
	if r.code != 1 {
		t.Errorf("resume bad command id: exit %d, want 1", r.code)
	}
	oneLine(t, r.stderr, "sandboxctl: resume: command_id")
}

// TestExecInterruptOnCtrlC: cancelling the CLI (what SIGINT does) while a
// command streams asks the server to interrupt that command.
func TestExecInterruptOnCtrlC(t *testing.T) {
	started := make(chan struct{})
	interrupted := make(chan string, 1)
	fake, _, _ := execFake(nil)
	fake.FollowFunc = func(ctx context.Context, _, cid string, _ int64, fn func(core.Event) error) error {
		if err := fn(core.Event{Seq: 1, Type: ioproto.EventStarted, CommandID: cid}); err != nil {
			return err
		}
		if err := fn(core.Event{Seq: 2, Type: ioproto.EventStdout, Text: "working\n"}); err != nil {
			return err
		}
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}
	fake.InterruptFunc = func(_ context.Context, sid, cid string) error {
		interrupted <- sid + "/" + cid
		return nil
	}
	addr := startServer(t, fake)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cliCtx, ctrlC := context.WithCancel(ctx)
	// Press Ctrl-C once the command's output has reached the terminal, so
	// the resume hint's seq is deterministic.
	stdout := &notifyWriter{want: "working\n", seen: ctrlC}
	var stderr strings.Builder
	code := run(cliCtx, []string{"--addr", addr, "exec", "--user", "alice", "while True: pass"},
		func(string) string { return "" }, strings.NewReader(""), stdout, &stderr)
	r := result{code, stdout.buf.String(), stderr.String()}
	<-started
	if r.code != exitInterrupted {
		t.Errorf("exit %d, want %d (stderr %q)", r.code, exitInterrupted, r.stderr)
	}
	select {
	case got := <-interrupted:
		if got != sbA+"/gen-1" {
			t.Errorf("interrupted %q, want %s/gen-1", got, sbA)
		}
	default:
		t.Error("the command was not interrupted")
	}
	if !strings.Contains(r.stderr, "sandboxctl resume "+sbA+" gen-1 --after-seq 2") {
		t.Errorf("stderr %q lacks the resume hint", r.stderr)
	}
}

// notifyWriter collects output and calls seen once it contains want.
type notifyWriter struct {
	mu   sync.Mutex
	buf  strings.Builder
	want string
	seen func()
	done bool
}

func (w *notifyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.done && strings.Contains(w.buf.String(), w.want) {
		w.done = true
		w.seen()
	}
	return len(p), nil
}

func TestGeneratedCommandID(t *testing.T) {
	gen := realNewCommandID
	id := gen()
	if err := ioproto.ValidateCommandID(id); err != nil || !strings.HasPrefix(id, "ctl-") || gen() == id {
		t.Errorf("generated ID %q (err %v): want a valid, fresh ctl- ID", id, err)
	}
}

func TestParseArgsInterspersed(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	n := fs.Int("n", 0, "")
	pos, err := parseArgs(fs, []string{"a", "-n", "3", "b", "--", "-n", "c"})
	if err != nil || *n != 3 || !slices.Equal(pos, []string{"a", "b", "-n", "c"}) {
		t.Errorf("pos %q, n %d, err %v", pos, *n, err)
	}
	fs = flag.NewFlagSet("y", flag.ContinueOnError)
	pos, err = parseArgs(fs, []string{"-"})
	if err != nil || !slices.Equal(pos, []string{"-"}) {
		t.Errorf("lone dash: pos %q, err %v", pos, err)
	}
}
