package chat_test

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"unicode"

	"github.com/sandboxd/sandboxd/agent/chat"
	sm "github.com/sandboxd/sandboxd/agent/internal/scriptedmodel"
	"github.com/sandboxd/sandboxd/agent/llm"
	"github.com/sandboxd/sandboxd/agent/loop"
	"github.com/sandboxd/sandboxd/agent/session"
	"github.com/sandboxd/sandboxd/agent/tools"
)

// TestChatEscapesControl: a tool's output and the model's answer, both
// with escape sequences (a sandbox's output, and a model repeating a
// hostile page), reach the terminal escaped; newlines and tabs stay.
func TestChatEscapesControl(t *testing.T) {
	probe := tools.Tool{
		Name: "probe", Description: "probes", Parameters: map[string]any{"type": "object"},
		Run: func(_ context.Context, inv tools.Invocation) (tools.Result, error) {
			inv.Progress(tools.Chunk{Kind: tools.ChunkStdout, Text: "out\x1b]0;pwned\x07\tcol\r\u202edone\n"})
			return tools.Result{Text: "probed", Status: "ok"}, nil
		},
	}
	model := sm.Start(t, sm.Script(t,
		sm.Handler(func(*sm.Request) sm.Reply {
			return sm.Reply{Calls: []sm.Call{{ID: "p1", Name: "probe", Args: map[string]any{}}}}
		}),
		sm.Say("Answer\x1b[2J with\nlines"),
	))
	dir := t.TempDir()
	store, err := session.Open(filepath.Join(dir, "agent.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	reg, _ := tools.NewRegistry(probe)
	m, _ := llm.New(llm.Config{BaseURL: model.URL, Model: "scripted", MaxRetries: 0})
	a, err := loop.New(loop.Config{Store: store, Model: m, Tools: reg, Sandboxes: noSandboxes{}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var out bytes.Buffer
	if err := chat.Run(context.Background(), chat.Options{Agent: a, UserID: "cli-test", In: strings.NewReader("probe\n"), Out: &out, ImageDir: dir}); err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, r := range got {
		if r != '\n' && r != '\t' && !unicode.IsGraphic(r) {
			t.Errorf("the chat printed %U raw:\n%q", r, got)
			break
		}
	}
	for _, want := range []string{`out\x1b]0;pwned\a` + "\tcol" + `\r\u202edone` + "\n", `Answer\x1b[2J with` + "\nlines"} {
		if !strings.Contains(got, want) {
			t.Errorf("the chat's output lacks %q:\n%q", want, got)
		}
	}
}
