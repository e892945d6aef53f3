package llm_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/agent/internal/scriptedmodel"
	"github.com/sandboxd/sandboxd/agent/llm"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  llm.Config
		want []string // substrings of the error; nil means valid
	}{
		{llm.Config{Model: "m", APIKey: "k"}, nil},
		{llm.Config{Model: "m", BaseURL: "http://localhost:11434/v1"}, nil},
		{llm.Config{}, []string{"AGENT_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL"}},
		{llm.Config{APIKey: "k"}, []string{"AGENT_MODEL"}},
		{llm.Config{Model: "m"}, []string{"OPENAI_API_KEY"}},
	} {
		err := tc.cfg.Validate()
		if tc.want == nil {
			if err != nil {
				t.Errorf("%+v: %v, want valid", tc.cfg, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%+v: valid, want an error naming %v", tc.cfg, tc.want)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: error %q does not name %s", tc.cfg, err, w)
			}
		}
	}
}

// TestCompleteWireFormat: tools, tool calls and results, and tool images
// (sent as a user message after the tool results) reach the endpoint in the
// Chat Completions format, and the answer's tool calls and usage come back.
func TestCompleteWireFormat(t *testing.T) {
	srv := scriptedmodel.Start(t, func(*scriptedmodel.Request) scriptedmodel.Reply {
		return scriptedmodel.Reply{Text: "thinking", Calls: []scriptedmodel.Call{scriptedmodel.RunCode("call_9", "python", "1+1")}}
	})
	c, err := llm.New(llm.Config{BaseURL: srv.URL, Model: "scripted", MaxRetries: 0})
	if err != nil {
		t.Fatal(err)
	}
	png := []byte("\x89PNG fake")
	resp, err := c.Complete(context.Background(), llm.Request{
		System: "be brief",
		Messages: []llm.Message{
			{Role: llm.RoleUser, Content: "plot"},
			{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "c1", Name: "run_code", Arguments: `{"code":"x"}`}}},
			{Role: llm.RoleTool, ToolCallID: "c1", Content: "ok", Images: []llm.Image{{MIME: "image/png", Data: png}}},
		},
		Tools: []llm.ToolSpec{{Name: "run_code", Description: "runs code", Parameters: map[string]any{"type": "object"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != "thinking" || len(resp.Message.ToolCalls) != 1 || resp.Message.ToolCalls[0].ID != "call_9" ||
		resp.Message.ToolCalls[0].Name != "run_code" || !strings.Contains(resp.Message.ToolCalls[0].Arguments, `"1+1"`) {
		t.Errorf("response message = %+v", resp.Message)
	}
	if resp.Usage.CompletionTokens != 10 || resp.Usage.PromptTokens == 0 {
		t.Errorf("usage = %+v", resp.Usage)
	}

	req := srv.Requests()[0]
	var roles []string
	for _, m := range req.Messages {
		roles = append(roles, m.Role)
	}
	if got := strings.Join(roles, ","); got != "system,user,assistant,tool,user" {
		t.Fatalf("roles = %s, want system,user,assistant,tool,user", got)
	}
	if req.System() != "be brief" || len(req.Tools) != 1 || req.Tools[0].Function.Name != "run_code" {
		t.Errorf("system %q, tools %+v", req.System(), req.Tools)
	}
	if res, ok := req.ToolResult("c1"); !ok || res != "ok" {
		t.Errorf("tool result = %q, %v", res, ok)
	}
	urls := req.Last().ImageURLs()
	if want := "data:image/png;base64," + base64.StdEncoding.EncodeToString(png); len(urls) != 1 || urls[0] != want {
		t.Errorf("image parts = %v, want [%s]", urls, want)
	}
}

// TestOldImagesDropped: only the newest MaxImageMessages messages keep their
// images; the others say images were omitted.
func TestOldImagesDropped(t *testing.T) {
	srv := scriptedmodel.Start(t, func(*scriptedmodel.Request) scriptedmodel.Reply { return scriptedmodel.Reply{Text: "ok"} })
	c, err := llm.New(llm.Config{BaseURL: srv.URL, Model: "scripted", MaxRetries: 0})
	if err != nil {
		t.Fatal(err)
	}
	img := []llm.Image{{MIME: "image/png", Data: []byte("x")}}
	var msgs []llm.Message
	for range llm.MaxImageMessages + 2 {
		msgs = append(msgs, llm.Message{Role: llm.RoleUser, Content: "look", Images: img}, llm.Message{Role: llm.RoleAssistant, Content: "seen"})
	}
	if _, err := c.Complete(context.Background(), llm.Request{Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	images, omitted := 0, 0
	for _, m := range srv.Requests()[0].Messages {
		images += len(m.ImageURLs())
		if strings.Contains(m.Text(), "omitted") {
			omitted++
		}
	}
	if images != llm.MaxImageMessages || omitted != 2 {
		t.Errorf("sent %d images and %d omission notes, want %d and 2", images, omitted, llm.MaxImageMessages)
	}
}

func TestCompleteHTTPError(t *testing.T) {
	srv := scriptedmodel.Start(t, func(*scriptedmodel.Request) scriptedmodel.Reply {
		return scriptedmodel.Reply{Status: http.StatusUnauthorized, Text: "bad key"}
	})
	c, err := llm.New(llm.Config{BaseURL: srv.URL, Model: "scripted", MaxRetries: 0})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Complete(context.Background(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}})
	if err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "bad key") {
		t.Errorf("error = %v, want HTTP 401 and the server's message", err)
	}
}
