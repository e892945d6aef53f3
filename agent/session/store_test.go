package session_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sandboxd/sandboxd/agent/llm"
	"github.com/sandboxd/sandboxd/agent/session"
	"github.com/sandboxd/sandboxd/agent/tools"
)

// TestConversationLifecycle walks a conversation through a turn with a tool
// call, reopening the database in the middle as a restarted agent would.
func TestConversationLifecycle(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "agent.db")
	s, err := session.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.CreateConversation(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	user, err := s.BeginTurn(ctx, c.ID, "Plot the sine function between 0 and 2 pi and tell me what you see please")
	if err != nil || user.Turn != 1 || user.Seq != 1 {
		t.Fatalf("BeginTurn = %+v, %v", user, err)
	}
	if _, err := s.BeginTurn(ctx, c.ID, "again"); !errors.Is(err, session.ErrBusy) {
		t.Errorf("second BeginTurn while running = %v, want ErrBusy", err)
	}
	cmdID := session.NewCommandID(c.ID)
	call := llm.ToolCall{ID: "call_1", Name: "run_code", Arguments: `{"code":"1"}`}
	if _, err := s.AddAssistant(ctx, c.ID, 1, llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{call}},
		llm.Usage{PromptTokens: 100, CompletionTokens: 10}, []session.NewCall{{CallID: "call_1", Name: "run_code", Arguments: call.Arguments, CommandID: cmdID}}); err != nil {
		t.Fatal(err)
	}
	if err := s.StartRun(ctx, c.ID, "call_1", "sb-1"); err != nil {
		t.Fatal(err)
	}

	// "Crash": reopen. The turn is interrupted and the run is in flight.
	s.Close()
	if s, err = session.Open(path); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	inter, err := s.Interrupted(ctx)
	if err != nil || len(inter) != 1 || inter[0].ID != c.ID || inter[0].Title != "Plot the sine function between 0 and 2 pi and tell me what…" {
		t.Fatalf("Interrupted = %+v, %v", inter, err)
	}
	r, err := s.Run(ctx, c.ID, "call_1")
	if err != nil || r.State != session.RunRunning || r.SandboxID != "sb-1" || r.CommandID != cmdID {
		t.Fatalf("Run = %+v, %v", r, err)
	}

	res := tools.Result{Text: "status: ok", Status: "ok", Console: []tools.Chunk{{Kind: "stdout", Text: "hi\n"}},
		Images: []tools.Artifact{{MIME: "image/png", Data: []byte("png")}}, Charts: []tools.Artifact{{MIME: "text/html", Data: []byte("<div>")}}}
	if _, err := s.FinishRun(ctx, c.ID, 1, "call_1", res, llm.Message{Role: llm.RoleTool, ToolCallID: "call_1", Content: res.Text}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddAssistant(ctx, c.ID, 1, llm.Message{Role: llm.RoleAssistant, Content: "done"}, llm.Usage{PromptTokens: 200, CompletionTokens: 5}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddNotice(ctx, c.ID, 1, "note"); err != nil {
		t.Fatal(err)
	}
	if err := s.EndTurn(ctx, c.ID, 1); err != nil {
		t.Fatal(err)
	}

	es, err := s.Entries(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []session.Kind
	for _, e := range es {
		kinds = append(kinds, e.Kind)
	}
	if want := []session.Kind{"user", "assistant", "tool", "assistant", "notice"}; !slices.Equal(kinds, want) {
		t.Errorf("entry kinds = %v, want %v", kinds, want)
	}
	if es[2].Message.ToolCallID != "call_1" || es[1].Message.ToolCalls[0].Arguments != call.Arguments {
		t.Errorf("messages did not round-trip: %+v", es)
	}
	r, _ = s.Run(ctx, c.ID, "call_1")
	if r.State != session.RunDone || r.Images != 1 || r.Charts != 1 || r.Result.Console[0].Text != "hi\n" || r.Result.Text != "status: ok" {
		t.Errorf("finished run = %+v", r)
	}
	if a, err := s.Artifact(ctx, c.ID, "call_1", session.ArtifactImage, 0); err != nil || string(a.Data) != "png" || a.MIME != "image/png" {
		t.Errorf("image artifact = %+v, %v", a, err)
	}
	if _, err := s.Artifact(ctx, c.ID, "call_1", session.ArtifactImage, 1); !errors.Is(err, session.ErrNotFound) {
		t.Errorf("missing artifact: %v, want ErrNotFound", err)
	}
	c, _ = s.Conversation(ctx, c.ID)
	turn, _ := s.LastTurn(ctx, c.ID)
	if c.State != session.StateIdle || c.Usage.Total() != 315 || turn.Usage.Total() != 315 || turn.ModelCalls != 2 || turn.FinishedAt.IsZero() {
		t.Errorf("conversation %+v, turn %+v; want idle with 315 tokens over 2 calls", c, turn)
	}
	if inter, _ := s.Interrupted(ctx); len(inter) != 0 {
		t.Errorf("still interrupted: %+v", inter)
	}
	// The next turn is number 2.
	if e, err := s.BeginTurn(ctx, c.ID, "more"); err != nil || e.Turn != 2 {
		t.Errorf("second turn = %+v, %v", e, err)
	}
}

func TestUsersSeeTheirOwnConversations(t *testing.T) {
	ctx := context.Background()
	s, err := session.Open(filepath.Join(t.TempDir(), "agent.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a1, _ := s.CreateConversation(ctx, "alice")
	s.CreateConversation(ctx, "bob")
	a2, _ := s.CreateConversation(ctx, "alice")
	s.BeginTurn(ctx, a1.ID, "newest")
	cs, err := s.Conversations(ctx, "alice")
	if err != nil || len(cs) != 2 || cs[0].ID != a1.ID || cs[1].ID != a2.ID {
		t.Errorf("alice's conversations = %+v, %v; want [%s %s]", cs, err, a1.ID, a2.ID)
	}
	if _, err := s.Conversation(ctx, "cnope"); !errors.Is(err, session.ErrNotFound) {
		t.Errorf("unknown conversation: %v", err)
	}
}

// TestDeleteConversation: a conversation goes with everything stored for it
// (its tool calls and artifacts too), not while it is working, and others
// stay.
func TestDeleteConversation(t *testing.T) {
	ctx := context.Background()
	s, err := session.Open(filepath.Join(t.TempDir(), "agent.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	keep, _ := s.CreateConversation(ctx, "alice")
	c, _ := s.CreateConversation(ctx, "alice")
	if _, err := s.BeginTurn(ctx, c.ID, "plot"); err != nil {
		t.Fatal(err)
	}
	call := llm.ToolCall{ID: "call_1", Name: "run_code", Arguments: `{"code":"1"}`}
	if _, err := s.AddAssistant(ctx, c.ID, 1, llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{call}}, llm.Usage{},
		[]session.NewCall{{CallID: "call_1", Name: "run_code", Arguments: call.Arguments, CommandID: session.NewCommandID(c.ID)}}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteConversation(ctx, c.ID); !errors.Is(err, session.ErrBusy) {
		t.Errorf("deleting a working conversation: %v, want ErrBusy", err)
	}
	res := tools.Result{Text: "ok", Status: "ok", Images: []tools.Artifact{{MIME: "image/png", Data: []byte("png")}}}
	if _, err := s.FinishRun(ctx, c.ID, 1, "call_1", res, llm.Message{Role: llm.RoleTool, ToolCallID: "call_1", Content: "ok"}); err != nil {
		t.Fatal(err)
	}
	if err := s.EndTurn(ctx, c.ID, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteConversation(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Conversation(ctx, c.ID); !errors.Is(err, session.ErrNotFound) {
		t.Errorf("after delete: %v, want ErrNotFound", err)
	}
	if _, err := s.Artifact(ctx, c.ID, "call_1", session.ArtifactImage, 0); !errors.Is(err, session.ErrNotFound) {
		t.Errorf("artifact after delete: %v, want ErrNotFound", err)
	}
	if err := s.DeleteConversation(ctx, c.ID); !errors.Is(err, session.ErrNotFound) {
		t.Errorf("second delete: %v, want ErrNotFound", err)
	}
	if convs, _ := s.Conversations(ctx, "alice"); len(convs) != 1 || convs[0].ID != keep.ID {
		t.Errorf("alice's conversations after delete: %+v", convs)
	}
}
