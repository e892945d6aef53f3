// Package llm is the agent's view of a chat model: provider-neutral message,
// tool and usage types, and a client for any OpenAI-compatible Chat
// Completions endpoint (OpenAI, a LiteLLM proxy, vLLM, Ollama, ...).
//
// The rest of the agent stores and reasons about these types only, so the
// wire format (and the client library behind it) stays in this package.
package llm

// Role says who wrote a message.
type Role string

// The roles of a conversation. System messages are built by the agent for
// each call and never stored.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one message of a conversation, as the model sees it.
type Message struct {
	// Role says who wrote it.
	Role Role `json:"role"`
	// Content is the text (may be empty for an assistant message that only
	// calls tools).
	Content string `json:"content,omitempty"`
	// Images go to the model as image inputs. On a tool message they are the
	// images the tool produced: Chat Completions does not accept images in
	// tool messages, so the client sends them in a user message right after
	// the tool results.
	Images []Image `json:"images,omitempty"`
	// ToolCalls are the calls an assistant message asks for.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID is the call a tool message answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
}

// Image is an encoded image (PNG or JPEG) small enough to send to a model;
// see package imagefit.
type Image struct {
	// MIME is "image/png" or "image/jpeg".
	MIME string `json:"mime"`
	// Data is the encoded image.
	Data []byte `json:"data"`
}

// ToolCall is the model's request to run one tool.
type ToolCall struct {
	// ID is the model's identifier for the call, echoed in the tool message
	// that answers it.
	ID string `json:"id"`
	// Name is the tool's name.
	Name string `json:"name"`
	// Arguments is the JSON object of arguments as the model wrote it (not
	// necessarily valid JSON).
	Arguments string `json:"arguments"`
}

// ToolSpec describes a tool to the model.
type ToolSpec struct {
	// Name is the function name the model calls.
	Name string
	// Description says what the tool does and when to use it.
	Description string
	// Parameters is the JSON Schema of the arguments object.
	Parameters map[string]any
}

// Usage counts the tokens of one or more model calls.
type Usage struct {
	// PromptTokens were read by the model (the whole conversation so far).
	PromptTokens int64 `json:"prompt_tokens"`
	// CompletionTokens were written by the model.
	CompletionTokens int64 `json:"completion_tokens"`
}

// Total is prompt plus completion tokens.
func (u Usage) Total() int64 { return u.PromptTokens + u.CompletionTokens }

// Add returns the sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{PromptTokens: u.PromptTokens + v.PromptTokens, CompletionTokens: u.CompletionTokens + v.CompletionTokens}
}
