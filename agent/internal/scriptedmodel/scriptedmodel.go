// Package scriptedmodel is a test fixture: an OpenAI-compatible Chat
// Completions server whose answers come from a script, and which records
// every request so a test can check what the agent sent (tool results,
// image inputs, ...). It is internal to the agent's tests; it is not a
// feature.
package scriptedmodel

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// Request is a chat completion request as the server received it.
type Request struct {
	// Model is the requested model name.
	Model string `json:"model"`
	// Stream is true for a streaming request.
	Stream bool `json:"stream"`
	// StreamOptions asks for the usage in the stream.
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	// Messages are the conversation sent.
	Messages []Message `json:"messages"`
	// Tools are the tools offered.
	Tools []struct {
		Type     string `json:"type"`
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
}

// Message is one message of a Request.
type Message struct {
	// Role is system, user, assistant or tool.
	Role string `json:"role"`
	// Content is a string or an array of content parts.
	Content json.RawMessage `json:"content"`
	// ToolCalls are an assistant message's calls.
	ToolCalls []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
	// ToolCallID is the call a tool message answers.
	ToolCallID string `json:"tool_call_id"`
}

type part struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	ImageURL struct {
		URL string `json:"url"`
	} `json:"image_url"`
}

func (m Message) parts() []part {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return []part{{Type: "text", Text: s}}
	}
	var ps []part
	_ = json.Unmarshal(m.Content, &ps)
	return ps
}

// Text is the message's text (its text parts joined).
func (m Message) Text() string {
	var b strings.Builder
	for _, p := range m.parts() {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// ImageURLs are the message's image_url parts' URLs (data: URLs from the
// agent).
func (m Message) ImageURLs() []string {
	var urls []string
	for _, p := range m.parts() {
		if p.Type == "image_url" {
			urls = append(urls, p.ImageURL.URL)
		}
	}
	return urls
}

// Last is the request's last message.
func (r *Request) Last() Message {
	if len(r.Messages) == 0 {
		return Message{}
	}
	return r.Messages[len(r.Messages)-1]
}

// ToolResult is the content of the tool message answering callID, and
// whether there is one.
func (r *Request) ToolResult(callID string) (string, bool) {
	for _, m := range r.Messages {
		if m.Role == "tool" && m.ToolCallID == callID {
			return m.Text(), true
		}
	}
	return "", false
}

// System is the system prompt (the first system message).
func (r *Request) System() string {
	for _, m := range r.Messages {
		if m.Role == "system" {
			return m.Text()
		}
	}
	return ""
}

// Reply is what the scripted model answers.
type Reply struct {
	// Text is the assistant's text.
	Text string
	// Calls are tool calls to make.
	Calls []Call
	// Status, when not 0 or 200, makes the server fail the request with this
	// HTTP status and Text as the error message.
	Status int
}

// Call is one tool call of a Reply.
type Call struct {
	// ID is the call's ID; empty means one is generated.
	ID string
	// Name is the tool to call.
	Name string
	// Args is marshalled to JSON as the call's arguments.
	Args any
}

// RunCode is a run_code call with the given language and code.
func RunCode(id, language, code string) Call {
	return Call{ID: id, Name: "run_code", Args: map[string]string{"language": language, "code": code}}
}

// Handler answers one request.
type Handler func(req *Request) Reply

// Script answers the n-th request with the n-th step; beyond the last step
// it fails the request with 400 (no retry) and the test with a message.
func Script(t testing.TB, steps ...Handler) Handler {
	var mu sync.Mutex
	n := 0
	return func(req *Request) Reply {
		mu.Lock()
		i := n
		n++
		mu.Unlock()
		if i >= len(steps) {
			t.Errorf("scripted model: request %d beyond the %d scripted steps; last message: %s %q", i+1, len(steps), req.Last().Role, req.Last().Text())
			return Reply{Status: http.StatusBadRequest, Text: "script exhausted"}
		}
		return steps[i](req)
	}
}

// Say is a step that answers with text.
func Say(text string) Handler { return func(*Request) Reply { return Reply{Text: text} } }

// StreamMode is how the server answers a streaming request.
type StreamMode int

// The stream modes.
const (
	// Streams answers in server-sent events, as OpenAI does: the text a
	// few characters per chunk, each tool call's ID and name first and its
	// arguments in pieces, then the usage, then [DONE].
	Streams StreamMode = iota
	// IgnoresStream answers a streaming request with a plain completion
	// (application/json), as some servers do.
	IgnoresStream
	// RefusesStream fails a streaming request with 400.
	RefusesStream
)

// Server is a running scripted model.
type Server struct {
	// URL is the base URL to configure as OPENAI_BASE_URL (ends in /v1).
	URL string
	// mode is how streaming requests are answered.
	mode StreamMode

	srv     *httptest.Server
	handler Handler
	mu      sync.Mutex
	reqs    []*Request
	changed chan struct{}
	nextID  int
}

// Start runs a server answering with h until the test ends; it streams
// when asked to.
func Start(t testing.TB, h Handler) *Server { return StartMode(t, h, Streams) }

// StartMode is Start with the given answer to streaming requests.
func StartMode(t testing.TB, h Handler, mode StreamMode) *Server {
	s := &Server{handler: h, changed: make(chan struct{}), mode: mode}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.complete)
	s.srv = httptest.NewServer(mux)
	s.URL = s.srv.URL + "/v1"
	t.Cleanup(s.srv.Close)
	return s
}

// Requests returns the requests received so far.
func (s *Server) Requests() []*Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Request(nil), s.reqs...)
}

// WaitRequests waits until n requests have been received, or fails the test
// after timeout.
func (s *Server) WaitRequests(t testing.TB, n int, timeout time.Duration) []*Request {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		s.mu.Lock()
		got, ch := len(s.reqs), s.changed
		s.mu.Unlock()
		if got >= n {
			return s.Requests()
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("scripted model: %d requests after %v, want %d", got, timeout, n)
		}
	}
}

func (s *Server) complete(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req Request
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, &req)
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()

	reply := s.handler(&req)
	if reply.Status != 0 && reply.Status != http.StatusOK {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(reply.Status)
		json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": reply.Text, "type": "scripted_error"}})
		return
	}
	msg := map[string]any{"role": "assistant", "content": reply.Text}
	finish := "stop"
	if len(reply.Calls) > 0 {
		finish = "tool_calls"
		var calls []map[string]any
		for _, c := range reply.Calls {
			args, err := json.Marshal(c.Args)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			if s, ok := c.Args.(string); ok {
				args = []byte(s) // raw (possibly invalid) arguments
			}
			id := c.ID
			if id == "" {
				s.mu.Lock()
				s.nextID++
				id = fmt.Sprintf("call_%d", s.nextID)
				s.mu.Unlock()
			}
			calls = append(calls, map[string]any{"id": id, "type": "function", "function": map[string]any{"name": c.Name, "arguments": string(args)}})
		}
		msg["tool_calls"] = calls
	}
	// Deterministic usage: a token per 4 bytes of request, 10 per answer.
	prompt := len(body) / 4
	usage := map[string]any{"prompt_tokens": prompt, "completion_tokens": 10, "total_tokens": prompt + 10}
	if req.Stream && s.mode == RefusesStream {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": "stream is not supported", "type": "invalid_request_error"}})
		return
	}
	if req.Stream && s.mode == Streams {
		s.stream(w, req, msg, finish, usage)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-scripted", "object": "chat.completion", "created": time.Now().Unix(), "model": req.Model,
		"choices": []map[string]any{{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   usage,
	})
}

// pieces cuts s into pieces of at most n bytes, on rune boundaries.
func pieces(s string, n int) []string {
	var out []string
	for len(s) > 0 {
		i := min(n, len(s))
		for i < len(s) && !utf8.RuneStart(s[i]) {
			i++
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	return out
}

// stream answers in server-sent events (chat.completion.chunk objects).
func (s *Server) stream(w http.ResponseWriter, req Request, msg map[string]any, finish string, usage map[string]any) {
	w.Header().Set("Content-Type", "text/event-stream")
	flusher, _ := w.(http.Flusher)
	created := time.Now().Unix()
	send := func(choices []map[string]any, extra map[string]any) {
		chunk := map[string]any{"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": created, "model": req.Model, "choices": choices}
		for k, v := range extra {
			chunk[k] = v
		}
		b, _ := json.Marshal(chunk)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	delta := func(d map[string]any) { send([]map[string]any{{"index": 0, "delta": d, "finish_reason": nil}}, nil) }
	delta(map[string]any{"role": "assistant", "content": ""})
	for _, p := range pieces(msg["content"].(string), 4) {
		delta(map[string]any{"content": p})
	}
	calls, _ := msg["tool_calls"].([]map[string]any)
	for i, c := range calls {
		fn := c["function"].(map[string]any)
		delta(map[string]any{"tool_calls": []map[string]any{{"index": i, "id": c["id"], "type": "function", "function": map[string]any{"name": fn["name"], "arguments": ""}}}})
		for _, p := range pieces(fn["arguments"].(string), 7) {
			delta(map[string]any{"tool_calls": []map[string]any{{"index": i, "function": map[string]any{"arguments": p}}}})
		}
	}
	send([]map[string]any{{"index": 0, "delta": map[string]any{}, "finish_reason": finish}}, nil)
	if req.StreamOptions.IncludeUsage {
		send([]map[string]any{}, map[string]any{"usage": usage})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}
