package llm

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
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
	return &Client{api: openai.NewClient(opts...), model: cfg.Model, timeout: timeout}, nil
}

// Complete sends req and returns the first choice.
func (c *Client) Complete(ctx context.Context, req Request) (Response, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
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
	resp, err := c.api.Chat.Completions.New(ctx, params)
	if err != nil {
		var apiErr *openai.Error
		if errors.As(err, &apiErr) {
			return Response{}, fmt.Errorf("model %s: HTTP %d: %s", c.model, apiErr.StatusCode, firstNonEmpty(apiErr.Message, apiErr.Code, apiErr.Type))
		}
		return Response{}, fmt.Errorf("model %s: %w", c.model, err)
	}
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
