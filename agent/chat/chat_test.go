package chat_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/agent/chat"
	sm "github.com/sandboxd/sandboxd/agent/internal/scriptedmodel"
	"github.com/sandboxd/sandboxd/agent/llm"
	"github.com/sandboxd/sandboxd/agent/loop"
	"github.com/sandboxd/sandboxd/agent/session"
	"github.com/sandboxd/sandboxd/agent/tools"
	"github.com/sandboxd/sandboxd/client"
)

// noSandboxes fails every sandbox operation: the tool here needs none (the
// chat with real sandboxes is covered by the agent's end-to-end test).
type noSandboxes struct{}

var errNone = errors.New("no sandboxes in this test")

func (noSandboxes) Acquire(context.Context, string, ...client.AcquireOption) (client.Acquired, error) {
	return client.Acquired{}, errNone
}
func (noSandboxes) Check(context.Context, string) error             { return errNone }
func (noSandboxes) Interrupt(context.Context, string, string) error { return errNone }

// TestChatSession: a message, the tool call's output and saved figure, the
// answer and the usage appear in order; the session can be continued.
func TestChatSession(t *testing.T) {
	draw := tools.Tool{
		Name: "draw", Description: "draws", Parameters: map[string]any{"type": "object"},
		Run: func(_ context.Context, inv tools.Invocation) (tools.Result, error) {
			inv.Progress(tools.Chunk{Kind: tools.ChunkStdout, Text: "drawing...\n"})
			return tools.Result{Text: "drawn", Status: "ok", Console: []tools.Chunk{{Kind: "stdout", Text: "drawing...\n"}},
				Images: []tools.Artifact{{MIME: "image/png", Data: []byte("\x89PNG fake")}}}, nil
		},
	}
	model := sm.Start(t, sm.Script(t,
		sm.Handler(func(*sm.Request) sm.Reply {
			return sm.Reply{Calls: []sm.Call{{ID: "d1", Name: "draw", Args: map[string]any{}}}}
		}),
		sm.Say("Here is your **drawing**."),
		sm.Say("Still here."),
	))
	dir := t.TempDir()
	store, err := session.Open(filepath.Join(dir, "agent.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	reg, _ := tools.NewRegistry(draw)
	m, _ := llm.New(llm.Config{BaseURL: model.URL, Model: "scripted", MaxRetries: 0})
	a, err := loop.New(loop.Config{Store: store, Model: m, Tools: reg, Sandboxes: noSandboxes{}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()

	var out bytes.Buffer
	err = chat.Run(context.Background(), chat.Options{Agent: a, UserID: "cli-test", In: strings.NewReader("draw something\n"), Out: &out, ImageDir: dir})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	got := out.String()
	order := []string{"conversation c", "── draw", "drawing...", "── ok", "image saved: ", "Here is your **drawing**.", "tokens: this message"}
	pos := 0
	for _, want := range order {
		i := strings.Index(got[pos:], want)
		if i < 0 {
			t.Fatalf("output lacks %q after position %d:\n%s", want, pos, got)
		}
		pos += i + len(want)
	}
	path := regexp.MustCompile(`image saved: (\S+)`).FindStringSubmatch(got)[1]
	if data, err := os.ReadFile(path); err != nil || string(data) != "\x89PNG fake" {
		t.Errorf("saved image %s: %q, %v", path, data, err)
	}

	convID := regexp.MustCompile(`conversation (c[a-z2-7]+)`).FindStringSubmatch(got)[1]
	out.Reset()
	if err := chat.Run(context.Background(), chat.Options{Agent: a, ConversationID: convID, In: strings.NewReader("again\n"), Out: &out, ImageDir: dir}); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, "> draw something") || !strings.Contains(got, "Still here.") {
		t.Errorf("continued session:\n%s", got)
	}
}

// TestChatReasonsMarkdownCharts: a call that fails before any output says
// why (not only "error"); the answer's Markdown is rendered (no raw ** or
// table rules); a chart is saved as an HTML file that carries plotly.js.
func TestChatReasonsMarkdownCharts(t *testing.T) {
	calls := 0
	flaky := tools.Tool{
		Name: "plot", Description: "plots", Parameters: map[string]any{"type": "object"},
		Run: func(context.Context, tools.Invocation) (tools.Result, error) {
			calls++
			if calls == 1 {
				msg := "acquiring a sandbox: cannot reach sandboxd at 127.0.0.1:1: connection refused"
				return tools.Result{Text: "error: " + msg, Status: "error", IsError: true, Console: []tools.Chunk{{Kind: tools.ChunkError, Text: msg}}}, nil
			}
			return tools.Result{Text: "ok", Status: "ok", Charts: []tools.Artifact{{MIME: "text/html",
				Data: []byte(`<div id="p"></div><script src="https://cdn.plot.ly/plotly-2.6.3.min.js"></script><script>Plotly.newPlot("p", [])</script>`)}}}, nil
		},
	}
	model := sm.Start(t, sm.Script(t,
		sm.Handler(func(*sm.Request) sm.Reply {
			return sm.Reply{Calls: []sm.Call{{ID: "p1", Name: "plot", Args: map[string]any{}}}}
		}),
		sm.Handler(func(*sm.Request) sm.Reply {
			return sm.Reply{Calls: []sm.Call{{ID: "p2", Name: "plot", Args: map[string]any{}}}}
		}),
		sm.Say("The **second** try worked.\n\n| letter | count |\n|---|---|\n| a | 3 |\n| c | 4 |"),
	))
	dir := t.TempDir()
	store, err := session.Open(filepath.Join(dir, "agent.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	reg, _ := tools.NewRegistry(flaky)
	m, _ := llm.New(llm.Config{BaseURL: model.URL, Model: "scripted", MaxRetries: 0})
	a, err := loop.New(loop.Config{Store: store, Model: m, Tools: reg, Sandboxes: noSandboxes{}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	render, err := chat.MarkdownRenderer("dark", 80)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := chat.Run(context.Background(), chat.Options{Agent: a, UserID: "cli-test", In: strings.NewReader("plot\n"), Out: &out, ImageDir: dir, Markdown: render}); err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	got := regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAllString(out.String(), "")
	if !strings.Contains(got, "cannot reach sandboxd at 127.0.0.1:1: connection refused\n── error") {
		t.Errorf("the failed call's reason is missing:\n%s", got)
	}
	if strings.Contains(got, "**second**") || strings.Contains(got, "|---|") || !strings.Contains(got, "second") || !regexp.MustCompile(`a\s+│?\s*3`).MatchString(got) {
		t.Errorf("the Markdown was not rendered:\n%s", got)
	}
	path := regexp.MustCompile(`chart saved: (\S+)`).FindStringSubmatch(got)
	if path == nil {
		t.Fatalf("no chart saved:\n%s", got)
	}
	if data, err := os.ReadFile(path[1]); err != nil || !bytes.Contains(data, []byte("plotly.js v")) || bytes.Contains(data, []byte("cdn.plot.ly/plotly-2")) {
		t.Errorf("saved chart %s is not self-contained (%d bytes, %v)", path[1], len(data), err)
	}
}
