// Package tools holds the tools the model can call: a registry where adding
// a tool is one schema plus one function (with the instructions it adds to
// the system prompt), and the tools the agent ships (run_code).
package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/agent/llm"
)

// Tool is one tool the model can call.
type Tool struct {
	// Name is what the model calls (^[A-Za-z0-9_-]{1,64}$).
	Name string
	// Description tells the model what the tool does.
	Description string
	// Parameters is the JSON Schema of the arguments object.
	Parameters map[string]any
	// Instructions are added to the system prompt: how to use the tool well
	// and what the environment behind it offers.
	Instructions string
	// UsesSandbox says the tool runs in the user's sandbox, so the agent
	// provides one (Invocation.SandboxID) and a command ID.
	UsesSandbox bool
	// Run runs one call. An error means the tool could not run at all (the
	// model is told so); a failure of the user's code is a Result with
	// IsError set.
	Run func(ctx context.Context, inv Invocation) (Result, error)
}

// Invocation is one call of a tool.
type Invocation struct {
	// Arguments is the JSON object the model wrote (not validated; it may not
	// even be JSON).
	Arguments string
	// SandboxID is the sandbox to run in (tools with UsesSandbox).
	SandboxID string
	// CommandID is this call's sandbox command ID, stored by the agent
	// before the call runs, so it is the same after a crash.
	CommandID string
	// Resume is true when an earlier agent process may already have sent
	// this call's command (it crashed meanwhile): the tool must pick the
	// command up by CommandID and never run it again.
	Resume bool
	// Progress, if not nil, receives output as it happens.
	Progress func(Chunk)
}

// Chunk is a piece of a tool's console output.
type Chunk struct {
	// Kind is ChunkStdout, ChunkStderr, ChunkResult or ChunkError.
	Kind string `json:"kind"`
	// Text is the output.
	Text string `json:"text"`
}

// The kinds of Chunk.
const (
	ChunkStdout = "stdout"
	ChunkStderr = "stderr"
	ChunkResult = "result" // the value of the final expression
	ChunkError  = "error"  // a traceback or a failure of the tool
)

// Artifact is a file-like output: an image or an interactive chart.
type Artifact struct {
	// MIME is e.g. "image/png" or "text/html".
	MIME string `json:"mime"`
	// Data is the content (decoded, not base64).
	Data []byte `json:"data"`
}

// Result is what a call produced.
type Result struct {
	// Text is the result as the model reads it.
	Text string `json:"text"`
	// IsError says the call failed (the model should change something).
	IsError bool `json:"is_error,omitempty"`
	// Status is a one-word outcome for people ("ok", "error", "timeout").
	Status string `json:"status"`
	// StateLost says the sandbox's earlier state (variables) is gone.
	StateLost bool `json:"state_lost,omitempty"`
	// Console is the output as people read it, in order.
	Console []Chunk `json:"console,omitempty"`
	// Images go to the model (scaled down) and to people.
	Images []Artifact `json:"-"`
	// Charts are interactive HTML (plotly) for people only.
	Charts []Artifact `json:"-"`
	// Duration is how long the code ran.
	Duration time.Duration `json:"duration,omitempty"`
}

var toolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Registry is the set of tools offered to the model, in order.
type Registry struct {
	tools  []Tool
	byName map[string]Tool
}

// NewRegistry returns a registry of tools; names must be valid and unique.
func NewRegistry(tools ...Tool) (*Registry, error) {
	r := &Registry{byName: map[string]Tool{}}
	for _, t := range tools {
		if !toolName.MatchString(t.Name) {
			return nil, fmt.Errorf("tool name %q: want 1-64 characters of [A-Za-z0-9_-]", t.Name)
		}
		if _, dup := r.byName[t.Name]; dup {
			return nil, fmt.Errorf("tool %q registered twice", t.Name)
		}
		if t.Run == nil || t.Parameters == nil {
			return nil, fmt.Errorf("tool %q needs Run and Parameters", t.Name)
		}
		if _, err := json.Marshal(t.Parameters); err != nil {
			return nil, fmt.Errorf("tool %q: parameters schema: %w", t.Name, err)
		}
		r.tools = append(r.tools, t)
		r.byName[t.Name] = t
	}
	return r, nil
}

// Get returns the tool called name.
func (r *Registry) Get(name string) (Tool, bool) {
	t, ok := r.byName[name]
	return t, ok
}

// Specs describes the tools to the model.
func (r *Registry) Specs() []llm.ToolSpec {
	specs := make([]llm.ToolSpec, 0, len(r.tools))
	for _, t := range r.tools {
		specs = append(specs, llm.ToolSpec{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
	}
	return specs
}

// Instructions are the tools' sections of the system prompt.
func (r *Registry) Instructions() string {
	var b strings.Builder
	for _, t := range r.tools {
		if t.Instructions == "" {
			continue
		}
		fmt.Fprintf(&b, "## Tool %s\n\n%s\n\n", t.Name, strings.TrimSpace(t.Instructions))
	}
	return strings.TrimSpace(b.String())
}
