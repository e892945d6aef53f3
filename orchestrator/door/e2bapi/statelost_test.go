package e2bapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// scriptManager runs scripted commands: Submit hands out cmd-1, cmd-2, …
// in turn, each with the events of scripts[n]; a command marked held stops
// after its first events until it is interrupted (then its done follows,
// as sandboxd's kill of an interpreter that ignored SIGINT).
type scriptManager struct {
	fakeManager
	mu          sync.Mutex
	scripts     [][]core.Event
	held        map[int]int // command number → events sent before the hold
	interrupted map[string]chan struct{}
	next        int
}

func (m *scriptManager) Submit(ctx context.Context, req core.ExecRequest) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.next++
	id := fmt.Sprintf("cmd-%d", m.next)
	m.interrupted[id] = make(chan struct{})
	return id, nil
}

func (m *scriptManager) Execute(ctx context.Context, req core.ExecRequest, submitted func(string), fn func(core.Event) error) error {
	return core.SubmitThenFollow(ctx, m, req, submitted, fn)
}

func (m *scriptManager) Interrupt(ctx context.Context, sandboxID, commandID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-m.interrupted[commandID]:
	default:
		close(m.interrupted[commandID])
	}
	return nil
}

func (m *scriptManager) Follow(ctx context.Context, sandboxID, commandID string, after int64, fn func(core.Event) error) error {
	var n int
	fmt.Sscanf(commandID, "cmd-%d", &n)
	m.mu.Lock()
	script, hold, intr := m.scripts[n-1], m.held[n], m.interrupted[commandID]
	m.mu.Unlock()
	for i, ev := range script {
		ev.Seq = int64(i + 1)
		if ev.Seq <= after {
			continue
		}
		if hold > 0 && i == hold {
			select {
			case <-intr:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
	return nil
}

// runExecute posts an /execute and returns its lines' types and texts
// ("stderr:…"), reading until end_of_execution; with leave, it returns
// after the first stdout line and drops the connection.
func runExecute(t *testing.T, srv *httptest.Server, s *Server, id string, leave bool) []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/execute", strings.NewReader(`{"code":"x"}`))
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("E2b-Sandbox-Port", InterpreterPort)
	req.Header.Set("X-Access-Token", s.accessToken(id))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var lines []string
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		var l struct{ Type, Text, Name, Value string }
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		switch l.Type {
		case "keepalive":
			continue
		case "stdout", "stderr":
			lines = append(lines, l.Type+":"+l.Text)
		case "error":
			lines = append(lines, "error:"+l.Name+": "+l.Value)
		default:
			lines = append(lines, l.Type)
		}
		if leave && l.Type == "stdout" {
			return lines
		}
	}
	return lines
}

func startScripted(t *testing.T, scripts [][]core.Event, held map[int]int) (*httptest.Server, *Server, string, *scriptManager) {
	t.Helper()
	s, fm := newTestServer(t)
	m := &scriptManager{fakeManager: *fm, scripts: scripts, held: held, interrupted: map[string]chan struct{}{}}
	s.m = m
	s.keepalive = time.Minute
	id := "sb-eeeeeeeeeeeeeeeeeeee"
	m.sandboxes[id] = core.Sandbox{ID: id, Tenant: "acme", State: core.StateRunning}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv, s, id, m
}

// waitInterrupted waits until commandID was interrupted (the door then
// remembers it: it does so first).
func (m *scriptManager) waitInterrupted(t *testing.T, commandID string) {
	t.Helper()
	m.mu.Lock()
	ch := m.interrupted[commandID]
	m.mu.Unlock()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s was not interrupted within 30 s of its client leaving", commandID)
	}
}

func started(lang string) core.Event {
	return core.Event{Type: ioproto.EventStarted, Language: lang, ContextID: ioproto.DefaultContext}
}

func stdout(text string) core.Event { return core.Event{Type: ioproto.EventStdout, Text: text} }

// After a client left an execution that ignored SIGINT and was killed with
// its interpreter, the next execution of the context says so on stderr,
// before its output; the one after says nothing. An execution of another
// interpreter is not told about Python's globals.
func TestStateLostAfterAbandonedExecute(t *testing.T) {
	const reason = "the command did not stop within 2s of SIGINT (interrupted), so the Python process was killed and restarted; Python globals are gone"
	srv, s, id, m := startScripted(t, [][]core.Event{
		{started("python"), stdout("running\n"), {Type: ioproto.EventDone, Status: ioproto.StatusKilled, StateLost: true, Reason: reason}},
		{started("javascript"), stdout("js\n"), {Type: ioproto.EventDone, Status: ioproto.StatusOK}},
		{started("python"), stdout("None\n"), {Type: ioproto.EventDone, Status: ioproto.StatusOK}},
		{started("python"), stdout("None\n"), {Type: ioproto.EventDone, Status: ioproto.StatusOK}},
	}, map[int]int{1: 2})
	runExecute(t, srv, s, id, true) // leaves: the command is interrupted, then killed
	m.waitInterrupted(t, "cmd-1")
	js := runExecute(t, srv, s, id, false)
	if strings.Contains(strings.Join(js, "|"), "state_lost") {
		t.Errorf("a JavaScript execution was told of Python's lost globals: %q", js)
	}
	next := runExecute(t, srv, s, id, false)
	want := "stderr:[sandboxd] state_lost: an earlier execution in this context (command cmd-1) ended after its client had gone, and its state was lost: " + reason + "\n"
	if len(next) < 2 || next[0] != want || next[1] != "stdout:None\n" {
		t.Errorf("the next Python execution's lines: %q; want first %q, then its output", next, want)
	}
	if after := runExecute(t, srv, s, id, false); strings.Contains(strings.Join(after, "|"), "state_lost") {
		t.Errorf("the notice came twice: %q", after)
	}
}

// An execution interrupted without losing its state (the interpreter
// stopped on SIGINT) leaves no notice.
func TestNoNoticeWhenStateKept(t *testing.T) {
	srv, s, id, m := startScripted(t, [][]core.Event{
		{started("python"), stdout("running\n"), {Type: ioproto.EventDone, Status: ioproto.StatusInterrupted}},
		{started("python"), stdout("kept\n"), {Type: ioproto.EventDone, Status: ioproto.StatusOK}},
	}, map[int]int{1: 2})
	runExecute(t, srv, s, id, true)
	m.waitInterrupted(t, "cmd-1")
	if next := runExecute(t, srv, s, id, false); strings.Contains(strings.Join(next, "|"), "state_lost") {
		t.Errorf("a notice without state lost: %q", next)
	}
}

// State lost that an execution's own done reports (the sandbox restarted
// since the previous command), and globals a wake did not keep, reach the
// client as stderr lines.
func TestStateLostOfTheExecutionItself(t *testing.T) {
	srv, s, id, _ := startScripted(t, [][]core.Event{
		{started("python"), stdout("None\n"), {Type: ioproto.EventDone, Status: ioproto.StatusOK, StateLost: true,
			Reason: "the sandbox restarted since the previous command; Python globals defined before are gone"}},
		{{Type: ioproto.EventStarted, Language: "python", Wake: &ioproto.HibResult{Level: ioproto.LevelGlobals, Names: []string{"a"},
			Lost: []ioproto.LostName{{Name: "sock", Why: "cannot pickle socket"}}}}, stdout("1\n"), {Type: ioproto.EventDone, Status: ioproto.StatusOK}},
		{{Type: ioproto.EventStarted, Language: "python", Wake: &ioproto.HibResult{Level: ioproto.LevelFiles, Reason: "the snapshot failed"}},
			{Type: ioproto.EventDone, Status: ioproto.StatusOK}},
	}, nil)
	for _, want := range []string{"the sandbox restarted since the previous command", "globals not kept: sock", "with its files only"} {
		lines := strings.Join(runExecute(t, srv, s, id, false), "|")
		if !strings.Contains(lines, "stderr:[sandboxd] state_lost: ") || !strings.Contains(lines, want) {
			t.Errorf("lines %q; want a state_lost notice saying %q", lines, want)
		}
	}
}

// TestKernelKinds: each language's executions share the globals of their
// interpreter, Java's its own.
func TestKernelKinds(t *testing.T) {
	for lang, want := range map[string]string{"": "python", "python": "python", "bash": "", "js": "node", "typescript": "node", "R": "r", "java": "java"} {
		if got := kernelKind(lang); got != want {
			t.Errorf("kernelKind(%q) = %q; want %q", lang, got, want)
		}
	}
}
