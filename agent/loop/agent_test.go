package loop_test

// Integration tests: the real agent loop, the real sandboxd binary, real
// Docker containers, and a scripted OpenAI-compatible model server.

import (
	"bytes"
	"context"
	"encoding/base64"
	"image"
	_ "image/jpeg"
	_ "image/png"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent/internal/agenttest"
	"github.com/sandboxd/sandboxd/agent/internal/sandboxdtest"
	sm "github.com/sandboxd/sandboxd/agent/internal/scriptedmodel"
	"github.com/sandboxd/sandboxd/agent/loop"
	"github.com/sandboxd/sandboxd/agent/session"
)

// harness is an agent wired to a real sandboxd and a scripted model.
type harness struct {
	agent *loop.Agent
	store *session.Store
	model *sm.Server
	d     *sandboxdtest.Daemon
}

func newHarness(t *testing.T, d *sandboxdtest.Daemon, h sm.Handler) *harness {
	t.Helper()
	model := sm.Start(t, h)
	a, store := agenttest.New(t, d.Addr, model.URL)
	return &harness{agent: a, store: store, model: model, d: d}
}

// send sends a message and waits for the turn to end.
func (h *harness) send(t *testing.T, convID, text string) {
	t.Helper()
	if err := h.agent.Send(context.Background(), convID, text); err != nil {
		t.Fatalf("Send(%q): %v", text, err)
	}
	select {
	case <-h.agent.Done(convID):
	case <-time.After(3 * time.Minute):
		t.Fatalf("turn %q did not finish within 3 minutes", text)
	}
}

// answers returns the assistant's texts and the notices, in order.
func (h *harness) answers(t *testing.T, convID string) (texts, notices []string) {
	t.Helper()
	es, err := h.store.Entries(context.Background(), convID)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		switch {
		case e.Kind == session.KindAssistant && e.Message.Content != "":
			texts = append(texts, e.Message.Content)
		case e.Kind == session.KindNotice:
			notices = append(notices, e.Notice)
		}
	}
	return texts, notices
}

// expectResult is a step that checks the tool result of callID contains
// every want, then replies.
func expectResult(t *testing.T, callID string, reply sm.Reply, want ...string) sm.Handler {
	return func(req *sm.Request) sm.Reply {
		res, ok := req.ToolResult(callID)
		if !ok {
			t.Errorf("request has no result for %s; last message: %s %q", callID, req.Last().Role, req.Last().Text())
		}
		for _, w := range want {
			if !strings.Contains(res, w) {
				t.Errorf("result of %s lacks %q:\n%s", callID, w, res)
			}
		}
		return reply
	}
}

func newConversation(t *testing.T, h *harness, user string) string {
	t.Helper()
	c, err := h.store.CreateConversation(context.Background(), user)
	if err != nil {
		t.Fatal(err)
	}
	return c.ID
}

// TestTwoMessagesShareVariables: the second message's code uses a variable
// the first one's code defined.
func TestTwoMessagesShareVariables(t *testing.T) {
	d := sandboxdtest.Start(t)
	h := newHarness(t, d, sm.Script(t,
		func(req *sm.Request) sm.Reply {
			sys := strings.ToLower(req.System())
			for _, want := range []string{"persistent", "plt.show() is unnecessary", "figures are captured automatically", "numpy"} {
				if !strings.Contains(sys, want) {
					t.Errorf("system prompt lacks %q:\n%s", want, req.System())
				}
			}
			if len(req.Tools) != 1 || req.Tools[0].Function.Name != "run_code" {
				t.Errorf("tools offered: %+v", req.Tools)
			}
			return sm.Reply{Calls: []sm.Call{sm.RunCode("c1", "python", "data = [1, 2, 3, 4]\ntotal = sum(data)\nprint('total is', total)")}}
		},
		expectResult(t, "c1", sm.Reply{Text: "The total is **10**."}, "status: ok", "total is 10"),
		func(req *sm.Request) sm.Reply {
			if last := req.Last(); last.Role != "user" || last.Text() != "Now double it" {
				t.Errorf("second message's first call ends with %s %q", last.Role, last.Text())
			}
			return sm.Reply{Calls: []sm.Call{sm.RunCode("c2", "python", "total * 2")}}
		},
		expectResult(t, "c2", sm.Reply{Text: "Twice the total is 20."}, "status: ok", "result:\n20"),
	))
	conv := newConversation(t, h, "loop-vars")
	h.send(t, conv, "Sum 1 to 4")
	h.send(t, conv, "Now double it")

	texts, notices := h.answers(t, conv)
	if strings.Join(texts, "|") != "The total is **10**.|Twice the total is 20." || len(notices) != 0 {
		t.Errorf("answers %q, notices %q", texts, notices)
	}
	c, err := h.store.Conversation(context.Background(), conv)
	if err != nil {
		t.Fatal(err)
	}
	turn, _ := h.store.LastTurn(context.Background(), conv)
	if c.State != session.StateIdle || turn.N != 2 || turn.ModelCalls != 2 || turn.Usage.Total() == 0 || c.Usage.Total() <= turn.Usage.Total() {
		t.Errorf("conversation %+v, last turn %+v: want idle, 2 turns of 2 calls, usage counted per turn and in total", c, turn)
	}
}

// TestChartReachesModelAsImage: a matplotlib figure comes back to the model
// as an image input, scaled to the model limits; a plotly figure goes to
// the UI only.
func TestChartReachesModelAsImage(t *testing.T) {
	d := sandboxdtest.Start(t)
	code := "import matplotlib.pyplot as plt\n" +
		"fig = plt.figure(figsize=(16, 12), dpi=100)\n" + // 1600x1200: larger than the model limit
		"plt.plot([1, 2, 3], [1, 4, 9])\nplt.title('squares')\n" +
		"import plotly.express as px\npx.line(x=[1, 2, 3], y=[1, 4, 9]).show()"
	h := newHarness(t, d, sm.Script(t,
		sm.Handler(func(*sm.Request) sm.Reply { return sm.Reply{Calls: []sm.Call{sm.RunCode("plot", "python", code)}} }),
		func(req *sm.Request) sm.Reply {
			res, _ := req.ToolResult("plot")
			if !strings.Contains(res, "1 figure(s) captured") || !strings.Contains(res, "1 plotly chart(s)") {
				t.Errorf("tool result does not announce the figure and the chart:\n%s", res)
			}
			var urls []string
			for _, m := range req.Messages {
				urls = append(urls, m.ImageURLs()...)
			}
			// (Errorf, not Fatalf: this runs on the server's goroutine.)
			failed := sm.Reply{Status: 400, Text: "test failed"}
			if len(urls) != 1 {
				t.Errorf("request carries %d image inputs, want 1 (the matplotlib figure)", len(urls))
				return failed
			}
			mime, b64, _ := strings.Cut(strings.TrimPrefix(urls[0], "data:"), ";base64,")
			data, err := base64.StdEncoding.DecodeString(b64)
			if err != nil {
				t.Errorf("image URL is not base64 data: %v", err)
				return failed
			}
			cfg, format, err := image.DecodeConfig(bytes.NewReader(data))
			if err != nil || mime != "image/"+format {
				t.Errorf("image input (%s) does not decode: %v (format %q)", mime, err, format)
				return failed
			}
			if cfg.Width > 1024 || cfg.Height > 1024 || cfg.Width < 500 {
				t.Errorf("image input is %dx%d, want it scaled to fit 1024", cfg.Width, cfg.Height)
			}
			return sm.Reply{Text: "The chart shows a rising curve."}
		},
	))
	conv := newConversation(t, h, "loop-chart")
	h.send(t, conv, "Plot the squares")
	if texts, notices := h.answers(t, conv); len(texts) != 1 || len(notices) != 0 {
		t.Errorf("answers %q, notices %q", texts, notices)
	}
	r, err := h.store.Run(context.Background(), conv, "plot")
	if err != nil || r.Images != 1 || r.Charts != 1 || r.Result.Status != "ok" {
		t.Fatalf("run = %+v, %v; want 1 image and 1 chart", r, err)
	}
	img, err := h.store.Artifact(context.Background(), conv, "plot", session.ArtifactImage, 0)
	if err != nil || !bytes.HasPrefix(img.Data, []byte("\x89PNG")) {
		t.Errorf("stored image: %v, %.8q", err, img.Data)
	}
}

// TestToolErrorThenFix: the model sees the traceback of its failing code
// and fixes it.
func TestToolErrorThenFix(t *testing.T) {
	d := sandboxdtest.Start(t)
	h := newHarness(t, d, sm.Script(t,
		sm.Handler(func(*sm.Request) sm.Reply {
			return sm.Reply{Calls: []sm.Call{sm.RunCode("bad", "python", "answer = missing_value + 1")}}
		}),
		expectResult(t, "bad", sm.Reply{Calls: []sm.Call{sm.RunCode("good", "python", "missing_value = 41\nanswer = missing_value + 1\nanswer")}},
			"status: error", "NameError", "missing_value"),
		expectResult(t, "good", sm.Reply{Text: "The answer is 42."}, "status: ok", "result:\n42"),
	))
	conv := newConversation(t, h, "loop-fix")
	h.send(t, conv, "Compute the answer")
	if texts, _ := h.answers(t, conv); len(texts) != 1 || texts[0] != "The answer is 42." {
		t.Errorf("answers %q", texts)
	}
	bad, _ := h.store.Run(context.Background(), conv, "bad")
	good, _ := h.store.Run(context.Background(), conv, "good")
	if !bad.Result.IsError || bad.Result.Status != "error" || good.Result.IsError {
		t.Errorf("bad run %+v, good run %+v", bad.Result, good.Result)
	}
}

// TestSandboxLostIsReported: when the conversation's sandbox disappears
// between messages, the user gets a notice, the model is told that the
// state is lost, and the code runs in a new sandbox.
func TestSandboxLostIsReported(t *testing.T) {
	d := sandboxdtest.Start(t)
	h := newHarness(t, d, sm.Script(t,
		sm.Handler(func(*sm.Request) sm.Reply { return sm.Reply{Calls: []sm.Call{sm.RunCode("c1", "python", "x = 1")}} }),
		sm.Say("x is set"),
		sm.Handler(func(*sm.Request) sm.Reply { return sm.Reply{Calls: []sm.Call{sm.RunCode("c2", "python", "x")}} }),
		expectResult(t, "c2", sm.Reply{Text: "x is gone"}, "NOTE:", "lost", "NameError"),
	))
	conv := newConversation(t, h, "loop-lost")
	h.send(t, conv, "set x")
	c, _ := h.store.Conversation(context.Background(), conv)
	old := c.SandboxID
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := d.Client(t).Delete(ctx, old); err != nil {
		t.Fatalf("deleting the sandbox: %v", err)
	}
	h.send(t, conv, "show x")
	_, notices := h.answers(t, conv)
	if len(notices) != 1 || !strings.Contains(notices[0], "lost") || !strings.Contains(notices[0], old) {
		t.Errorf("notices %q; want one saying %s is gone and state is lost", notices, old)
	}
	if c, _ = h.store.Conversation(context.Background(), conv); c.SandboxID == old || c.SandboxID == "" {
		t.Errorf("conversation still uses sandbox %q", c.SandboxID)
	}
}
