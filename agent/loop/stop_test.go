package loop_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent/events"
	"github.com/sandboxd/sandboxd/agent/internal/sandboxdtest"
	sm "github.com/sandboxd/sandboxd/agent/internal/scriptedmodel"
	"github.com/sandboxd/sandboxd/agent/llm"
	"github.com/sandboxd/sandboxd/agent/loop"
	"github.com/sandboxd/sandboxd/agent/session"
	"github.com/sandboxd/sandboxd/agent/tools"
	"github.com/sandboxd/sandboxd/client"
)

// TestStopInterruptsRunningCommand: Stop interrupts the running command
// (the Python state survives), ends the turn without calling the model
// again, and the conversation goes on.
func TestStopInterruptsRunningCommand(t *testing.T) {
	d := sandboxdtest.Start(t)
	h := newHarness(t, d, sm.Script(t,
		sm.Handler(func(*sm.Request) sm.Reply {
			return sm.Reply{Calls: []sm.Call{sm.RunCode("long", "python", "x = 5\nimport time\nprint('sleeping', flush=True)\ntime.sleep(120)\nprint('woke')")}}
		}),
		// After Stop the model is not called: the next call is the next message's.
		func(req *sm.Request) sm.Reply {
			if res, _ := req.ToolResult("long"); !strings.Contains(res, "status: interrupted") {
				t.Errorf("the stopped call's result says:\n%s", res)
			}
			return sm.Reply{Calls: []sm.Call{sm.RunCode("after", "python", "x")}}
		},
		expectResult(t, "after", sm.Reply{Text: "x is still 5."}, "result:\n5"),
	))
	conv := newConversation(t, h, "loop-stop")
	sub := h.agent.Hub().Subscribe(conv)
	defer sub.Close()
	if err := h.agent.Send(context.Background(), conv, "sleep"); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(2 * time.Minute)
	for running := false; !running; {
		select {
		case ev := <-sub.C:
			running = ev.Kind == events.RunOutput && strings.Contains(ev.Chunk.Text, "sleeping")
		case <-timeout:
			t.Fatal("the command did not start within 2 minutes")
		}
	}
	h.agent.Stop(conv)
	select {
	case <-h.agent.Done(conv):
	case <-time.After(time.Minute):
		t.Fatal("the turn did not end within a minute of Stop")
	}
	r, err := h.store.Run(context.Background(), conv, "long")
	if err != nil || r.Result.Status != "interrupted" {
		t.Errorf("stopped run: %+v, %v; want status interrupted", r.Result, err)
	}
	if _, notices := h.answers(t, conv); len(notices) != 1 || notices[0] != "Stopped." {
		t.Errorf("notices %q, want [Stopped.]", notices)
	}
	if n := len(h.model.Requests()); n != 1 {
		t.Errorf("the model was called %d times during the stopped turn, want 1", n)
	}
	h.send(t, conv, "is x still there?")
	if texts, _ := h.answers(t, conv); len(texts) != 1 || texts[0] != "x is still 5." {
		t.Errorf("answers %q", texts)
	}
}

// noSandboxes fails every sandbox operation.
type noSandboxes struct{}

var errNoSandboxes = errors.New("no sandboxes in this test")

func (noSandboxes) Acquire(context.Context, string, ...client.AcquireOption) (client.Acquired, error) {
	return client.Acquired{}, errNoSandboxes
}
func (noSandboxes) Check(context.Context, string) error             { return errNoSandboxes }
func (noSandboxes) Interrupt(context.Context, string, string) error { return errNoSandboxes }

// TestIterationBound: a model that never stops calling tools is cut off
// after MaxIterations calls; unknown tools and reused call IDs (as some
// local servers send) are answered, not fatal.
func TestIterationBound(t *testing.T) {
	model := sm.Start(t, func(req *sm.Request) sm.Reply {
		return sm.Reply{Calls: []sm.Call{{ID: "call_0", Name: "no_such_tool", Args: map[string]any{}}}}
	})
	store, err := session.Open(filepath.Join(t.TempDir(), "agent.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	reg, err := tools.NewRegistry(tools.RunCode(nil, tools.RunCodeOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	m, err := llm.New(llm.Config{BaseURL: model.URL, Model: "scripted", MaxRetries: 0})
	if err != nil {
		t.Fatal(err)
	}
	a, err := loop.New(loop.Config{Store: store, Model: m, Tools: reg, Sandboxes: noSandboxes{}, MaxIterations: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	c, _ := store.CreateConversation(context.Background(), "loop-bound")
	if err := a.Send(context.Background(), c.ID, "loop forever"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Done(c.ID):
	case <-time.After(time.Minute):
		t.Fatal("turn did not end")
	}
	reqs := model.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d model calls, want 3", len(reqs))
	}
	last := reqs[2]
	seen := map[string]bool{}
	for _, msg := range last.Messages {
		if msg.Role != "tool" {
			continue
		}
		if seen[msg.ToolCallID] {
			t.Errorf("call ID %s answered twice", msg.ToolCallID)
		}
		seen[msg.ToolCallID] = true
		if !strings.Contains(msg.Text(), `there is no tool "no_such_tool"`) {
			t.Errorf("unknown tool result: %q", msg.Text())
		}
	}
	if len(seen) != 2 {
		t.Errorf("third call carries %d tool results, want 2", len(seen))
	}
	es, _ := store.Entries(context.Background(), c.ID)
	if last := es[len(es)-1]; last.Kind != session.KindNotice || !strings.Contains(last.Notice, "after 3 model calls") {
		t.Errorf("last entry = %+v, want the iteration notice", last)
	}
	if c, _ = store.Conversation(context.Background(), c.ID); c.State != session.StateIdle {
		t.Errorf("conversation state %s, want idle", c.State)
	}
}
