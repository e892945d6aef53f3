package e2bapi

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/ioproto"
)

// execManager runs one command whose events the test releases: Follow
// blocks on release (or the request's end) before its done event.
type execManager struct {
	fakeManager
	release     chan struct{}
	interrupted chan string
}

func (e *execManager) Submit(ctx context.Context, req core.ExecRequest) (string, error) {
	return "cmd-1", nil
}

func (e *execManager) Follow(ctx context.Context, sandboxID, commandID string, after int64, fn func(core.Event) error) error {
	if err := fn(core.Event{Seq: 1, Type: ioproto.EventStdout, Text: "before\xff\n"}); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-e.release:
	}
	return fn(core.Event{Seq: 2, Type: ioproto.EventDone, Status: ioproto.StatusOK})
}

func (e *execManager) Execute(ctx context.Context, req core.ExecRequest, submitted func(string), fn func(core.Event) error) error {
	return core.SubmitThenFollow(ctx, e, req, submitted, fn)
}

func (e *execManager) Interrupt(ctx context.Context, sandboxID, commandID string) error {
	e.interrupted <- commandID
	return nil
}

func startExec(t *testing.T) (*execManager, *httptest.Server, *http.Request) {
	t.Helper()
	s, fm := newTestServer(t)
	em := &execManager{fakeManager: *fm, release: make(chan struct{}), interrupted: make(chan string, 1)}
	s.m = em
	s.keepalive = 20 * time.Millisecond
	id := "sb-eeeeeeeeeeeeeeeeeeee"
	em.sandboxes[id] = core.Sandbox{ID: id, Tenant: "acme", State: core.StateRunning}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest("POST", srv.URL+"/execute", strings.NewReader(`{"code":"x"}`))
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("E2b-Sandbox-Port", InterpreterPort)
	req.Header.Set("X-Access-Token", s.accessToken(id))
	return em, srv, req
}

// TestExecuteKeepaliveThenEnd: a silent command gets keepalive lines, and
// the stream ends with end_of_execution; output is valid UTF-8 JSON.
func TestExecuteKeepaliveThenEnd(t *testing.T) {
	em, _, req := startExec(t)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	var types []string
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("line %q is not JSON: %v", sc.Text(), err)
		}
		typ, _ := line["type"].(string)
		types = append(types, typ)
		if typ == "stdout" && line["text"] != "before\uFFFD\n" {
			t.Errorf("stdout text %q, want invalid UTF-8 replaced", line["text"])
		}
		if typ == "keepalive" && len(types) == 2 {
			close(em.release)
		}
	}
	want := "stdout keepalive"
	if got := strings.Join(types, " "); !strings.HasPrefix(got, want) || types[len(types)-1] != "end_of_execution" {
		t.Errorf("lines %v: want stdout, keepalive(s), end_of_execution", types)
	}
}

// TestExecuteDisconnectInterrupts: a client that goes away mid-execution
// interrupts the command, as E2B's code interpreter does.
func TestExecuteDisconnectInterrupts(t *testing.T) {
	em, _, req := startExec(t)
	ctx, cancel := context.WithCancel(context.Background())
	res, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(res.Body)
	if _, err := br.ReadString('\n'); err != nil { // the stdout line: the command runs
		t.Fatal(err)
	}
	cancel()
	res.Body.Close()
	select {
	case id := <-em.interrupted:
		if id != "cmd-1" {
			t.Errorf("interrupted %q", id)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the command was not interrupted within 30 s of the client leaving")
	}
}
