package llm

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// Config says which model to call and where.
type Config struct {
	// BaseURL is the endpoint's base, up to and including the version
	// ("http://localhost:11434/v1"). Empty means OpenAI's own API.
	BaseURL string
	// APIKey is sent as a bearer token. Required for OpenAI itself; local
	// servers (Ollama, vLLM) usually accept anything or nothing.
	APIKey string
	// Model is the model name the endpoint knows ("gpt-4o", "qwen2.5:7b").
	Model string
	// Timeout bounds one model call, retries included; 0 means 5 minutes.
	Timeout time.Duration
	// MaxRetries is how often a failed call (connection error, 429, 5xx) is
	// retried with backoff; negative means the library default.
	MaxRetries int
	// NoStream turns token streaming off: every call waits for the whole
	// answer. Streaming is on by default, and a server that cannot stream
	// is detected and called without it.
	NoStream bool
}

// Validate reports missing configuration in one message that says what to
// set.
func (c Config) Validate() error {
	var missing []string
	if strings.TrimSpace(c.Model) == "" {
		missing = append(missing, "AGENT_MODEL (or --model): the model name, e.g. gpt-4o or qwen2.5:7b")
	}
	if c.BaseURL == "" && c.APIKey == "" {
		missing = append(missing, "OPENAI_API_KEY (or --api-key) for OpenAI, or OPENAI_BASE_URL (or --base-url) for another OpenAI-compatible endpoint such as Ollama, vLLM or a LiteLLM proxy")
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("the model is not configured; set %s", strings.Join(missing, ", and "))
}

// Request is one call to the model.
type Request struct {
	// System is the system prompt, sent first.
	System string
	// Messages is the conversation so far.
	Messages []Message
	// Tools the model may call.
	Tools []ToolSpec
	// OnText, if set, receives the answer's text as the model writes it
	// (token streaming); the Response still carries the whole message.
	// It is called from the goroutine that called Complete.
	OnText func(delta string)
}

// Response is the model's answer to one Request.
type Response struct {
	// Message is the assistant message (text, tool calls or both).
	Message Message
	// Usage is what this call cost.
	Usage Usage
	// FinishReason is the endpoint's reason for stopping ("stop",
	// "tool_calls", "length", ...).
	FinishReason string
}

// Model is anything that answers a Request; Client is the real one.
type Model interface {
	Complete(ctx context.Context, req Request) (Response, error)
}

// MaxImageMessages bounds how many messages with images are sent: older
// messages' images are replaced by a note, since every image is re-sent on
// every call and costs tokens each time.
const MaxImageMessages = 3

// Client calls an OpenAI-compatible Chat Completions endpoint through the
// official openai-go library.
type Client struct {
	api     openai.Client
	model   string
	timeout time.Duration
	// noStream is set by NoStream, or once a server refused to stream.
	noStream atomic.Bool
}

// New returns a client for cfg, or cfg's validation error.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var opts []option.RequestOption
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	// Local servers need no key, but the library wants one to send.
	key := cfg.APIKey
	if key == "" {
		key = "none"
	}
	opts = append(opts, option.WithAPIKey(key))
	if cfg.MaxRetries >= 0 {
		opts = append(opts, option.WithMaxRetries(cfg.MaxRetries))
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	c := &Client{api: openai.NewClient(opts...), model: cfg.Model, timeout: timeout}
	c.noStream.Store(cfg.NoStream)
	return c, nil
}

// Complete sends req and returns the first choice. With req.OnText set it
// streams the answer (stream: true), passing the text on as it comes and
// assembling the tool calls from their deltas; a server that answers a
// streaming request with a plain completion is understood, and one that
// refuses to stream (a 4xx) is asked again without streaming, then never
// asked to stream again.
func (c *Client) Complete(ctx context.Context, req Request) (Response, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	params := c.params(req)
	if req.OnText == nil || c.noStream.Load() {
		resp, err := c.api.Chat.Completions.New(ctx, params)
		if err != nil {
			return Response{}, c.callError(err)
		}
		return c.response(resp)
	}
	resp, err := c.stream(ctx, params, req.OnText)
	var apiErr *openai.Error
	if errors.As(err, &apiErr) && refusesStreaming(apiErr.StatusCode) {
		plain, perr := c.api.Chat.Completions.New(ctx, params)
		if perr != nil {
			return Response{}, c.callError(perr)
		}
		c.noStream.Store(true)
		return c.response(plain)
	}
	if err != nil {
		return Response{}, c.callError(err)
	}
	return c.response(resp)
}

// refusesStreaming says an HTTP status of a streaming request may mean the
// server does not stream (rather than that the key or the quota is wrong,
// or that the server is down).
func refusesStreaming(status int) bool {
	switch status {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed,
		http.StatusNotAcceptable, http.StatusUnsupportedMediaType, http.StatusUnprocessableEntity, http.StatusNotImplemented:
		return true
	}
	return false
}

// maxPlainBody bounds a plain completion read in place of a stream.
const maxPlainBody = 32 << 20

// stream makes a streaming call and accumulates its chunks into one
// completion.
func (c *Client) stream(ctx context.Context, params openai.ChatCompletionNewParams, onText func(string)) (*openai.ChatCompletion, error) {
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	// A server that ignores "stream": it answers with JSON, which the
	// stream decoder would read as no events: keep the body aside.
	var plain []byte
	keepJSON := option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		res, err := next(r)
		if err != nil || res.StatusCode != http.StatusOK {
			return res, err
		}
		if mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type")); mt == "application/json" {
			plain, err = io.ReadAll(io.LimitReader(res.Body, maxPlainBody))
			res.Body.Close()
			res.Body = io.NopCloser(bytes.NewReader(nil))
			if err != nil {
				return nil, err
			}
		}
		return res, nil
	})
	s := c.api.Chat.Completions.NewStreaming(ctx, params, keepJSON)
	defer s.Close()
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for s.Next() {
		chunk := s.Current()
		chunks++
		acc.AddChunk(chunk)
		for _, ch := range chunk.Choices {
			if ch.Index == 0 && ch.Delta.Content != "" {
				onText(ch.Delta.Content)
			}
		}
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	if chunks == 0 && plain != nil {
		var resp openai.ChatCompletion
		if err := json.Unmarshal(plain, &resp); err != nil {
			return nil, fmt.Errorf("reading the answer: %w", err)
		}
		if len(resp.Choices) > 0 && resp.Choices[0].Message.Content != "" {
			onText(resp.Choices[0].Message.Content)
		}
		return &resp, nil
	}
	return &acc.ChatCompletion, nil
}

func (c *Client) callError(err error) error {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		return fmt.Errorf("model %s: HTTP %d: %s", c.model, apiErr.StatusCode, firstNonEmpty(apiErr.Message, apiErr.Code, apiErr.Type))
	}
	return fmt.Errorf("model %s: %w", c.model, err)
}

func (c *Client) params(req Request) openai.ChatCompletionNewParams {
	params := openai.ChatCompletionNewParams{
		Model:    shared.ChatModel(c.model),
		Messages: toParams(req.System, req.Messages),
	}
	for _, t := range req.Tools {
		params.Tools = append(params.Tools, openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name:        t.Name,
			Description: openai.String(t.Description),
			Parameters:  shared.FunctionParameters(t.Parameters),
		}))
	}
	return params
}

// response converts the first choice.
func (c *Client) response(resp *openai.ChatCompletion) (Response, error) {
	if len(resp.Choices) == 0 {
		return Response{}, fmt.Errorf("model %s answered with no choices", c.model)
	}
	ch := resp.Choices[0]
	out := Response{
		Message:      Message{Role: RoleAssistant, Content: ch.Message.Content},
		Usage:        Usage{PromptTokens: resp.Usage.PromptTokens, CompletionTokens: resp.Usage.CompletionTokens},
		FinishReason: string(ch.FinishReason),
	}
	for _, tc := range ch.Message.ToolCalls {
		out.Message.ToolCalls = append(out.Message.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	return out, nil
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return "(no message)"
}

// toParams converts a conversation to the wire format. Images of tool
// messages follow each run of tool messages in one user message, and only
// the newest MaxImageMessages messages keep their images.
func toParams(system string, msgs []Message) []openai.ChatCompletionMessageParamUnion {
	keep := imageKeepers(msgs)
	var out []openai.ChatCompletionMessageParamUnion
	if system != "" {
		out = append(out, openai.SystemMessage(system))
	}
	var toolImages []openai.ChatCompletionContentPartUnionParam
	flushToolImages := func() {
		if len(toolImages) == 0 {
			return
		}
		parts := append([]openai.ChatCompletionContentPartUnionParam{
			openai.TextContentPart("The figures captured by the tool calls above, for you to check:"),
		}, toolImages...)
		out = append(out, openai.UserMessage(parts))
		toolImages = nil
	}
	for i, m := range msgs {
		images := m.Images
		dropped := 0
		if !keep[i] {
			images, dropped = nil, len(m.Images)
		}
		if m.Role != RoleTool {
			flushToolImages()
		}
		switch m.Role {
		case RoleUser:
			text := withDroppedNote(m.Content, dropped)
			if len(images) == 0 {
				out = append(out, openai.UserMessage(text))
				continue
			}
			parts := []openai.ChatCompletionContentPartUnionParam{openai.TextContentPart(text)}
			for _, img := range images {
				parts = append(parts, imagePart(img))
			}
			out = append(out, openai.UserMessage(parts))
		case RoleAssistant:
			a := openai.ChatCompletionAssistantMessageParam{}
			if m.Content != "" {
				a.Content.OfString = openai.String(m.Content)
			}
			for _, tc := range m.ToolCalls {
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID:       tc.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: tc.Arguments},
					},
				})
			}
			out = append(out, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		case RoleTool:
			out = append(out, openai.ToolMessage(withDroppedNote(m.Content, dropped), m.ToolCallID))
			for _, img := range images {
				toolImages = append(toolImages, imagePart(img))
			}
		case RoleSystem:
			out = append(out, openai.SystemMessage(m.Content))
		}
	}
	flushToolImages()
	return out
}

// imageKeepers marks the newest MaxImageMessages messages that have images.
func imageKeepers(msgs []Message) []bool {
	keep := make([]bool, len(msgs))
	n := 0
	for i := len(msgs) - 1; i >= 0 && n < MaxImageMessages; i-- {
		if len(msgs[i].Images) > 0 {
			keep[i] = true
			n++
		}
	}
	return keep
}

func withDroppedNote(text string, dropped int) string {
	if dropped == 0 {
		return text
	}
	return fmt.Sprintf("%s\n[%d older image(s) omitted to save tokens]", text, dropped)
}

func imagePart(img Image) openai.ChatCompletionContentPartUnionParam {
	return openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{
		URL: "data:" + img.MIME + ";base64," + base64.StdEncoding.EncodeToString(img.Data),
	})
}
