package llm_test

import (
	"context"
	"encoding/base64"
	"fmt"
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

// TestCompleteStreaming: with OnText set, the answer's text arrives in
// pieces as the server streams it, and the tool calls are assembled from
// their deltas; a server that answers a streaming request with a plain
// completion, or refuses it, still gives the whole answer (the refusing
// one is not asked to stream again).
func TestCompleteStreaming(t *testing.T) {
	const text = "Streaming, one piece at a time — ünïcode too."
	calls := []scriptedmodel.Call{
		scriptedmodel.RunCode("call_a", "python", "print('a' * 40)"),
		scriptedmodel.RunCode("call_b", "javascript", "console.log([1, 2, 3].map((x) => x * 2))"),
	}
	for _, tc := range []struct {
		name       string
		mode       scriptedmodel.StreamMode
		minDeltas  int
		wantStream []bool // the Stream flag of each request, over two calls
	}{
		{"streams", scriptedmodel.Streams, 5, []bool{true, true}},
		{"ignores stream", scriptedmodel.IgnoresStream, 1, []bool{true, true}},
		{"refuses stream", scriptedmodel.RefusesStream, 0, []bool{true, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := scriptedmodel.StartMode(t, func(*scriptedmodel.Request) scriptedmodel.Reply {
				return scriptedmodel.Reply{Text: text, Calls: calls}
			}, tc.mode)
			c, err := llm.New(llm.Config{BaseURL: srv.URL, Model: "scripted", MaxRetries: 0})
			if err != nil {
				t.Fatal(err)
			}
			for round := range 2 {
				var deltas []string
				resp, err := c.Complete(context.Background(), llm.Request{
					Messages: []llm.Message{{Role: llm.RoleUser, Content: "go"}},
					OnText:   func(d string) { deltas = append(deltas, d) },
				})
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				if resp.Message.Content != text {
					t.Errorf("round %d: content %q, want %q", round, resp.Message.Content, text)
				}
				if got := strings.Join(deltas, ""); len(deltas) > 0 && got != text {
					t.Errorf("round %d: the deltas spell %q, want %q", round, got, text)
				}
				if round == 0 && len(deltas) < tc.minDeltas {
					t.Errorf("round %d: %d text deltas, want at least %d", round, len(deltas), tc.minDeltas)
				}
				tcs := resp.Message.ToolCalls
				if len(tcs) != 2 || tcs[0].ID != "call_a" || tcs[1].ID != "call_b" || tcs[0].Name != "run_code" ||
					tcs[0].Arguments != `{"code":"print('a' * 40)","language":"python"}` ||
					tcs[1].Arguments != `{"code":"console.log([1, 2, 3].map((x) =\u003e x * 2))","language":"javascript"}` {
					t.Errorf("round %d: tool calls %+v", round, tcs)
				}
				if resp.FinishReason != "tool_calls" || resp.Usage.CompletionTokens != 10 || resp.Usage.PromptTokens == 0 {
					t.Errorf("round %d: finish %q, usage %+v", round, resp.FinishReason, resp.Usage)
				}
			}
			var got []bool
			for _, r := range srv.Requests() {
				got = append(got, r.Stream)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.wantStream) {
				t.Errorf("requests streamed %v, want %v", got, tc.wantStream)
			}
		})
	}
}
