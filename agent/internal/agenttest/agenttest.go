// Package agenttest wires a real agent (session store, sandboxd client,
// run_code tool, model client, loop) for tests, against a sandboxd and a
// scripted model the test started.
package agenttest

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent/llm"
	"github.com/sandboxd/sandboxd/agent/loop"
	"github.com/sandboxd/sandboxd/agent/session"
	"github.com/sandboxd/sandboxd/agent/tools"
	"github.com/sandboxd/sandboxd/client"
)

// New returns an agent talking to the sandboxd at sandboxdAddr and the
// OpenAI-compatible model at modelURL, with its store in a temporary
// directory. Everything is closed when the test ends.
func New(t testing.TB, sandboxdAddr, modelURL string) (*loop.Agent, *session.Store) {
	t.Helper()
	store, err := session.Open(filepath.Join(t.TempDir(), "agent.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	sbc, err := client.Dial(sandboxdAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sbc.Close() })
	reg, err := tools.NewRegistry(tools.RunCode(sbc, tools.RunCodeOptions{Timeout: 2 * time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	m, err := llm.New(llm.Config{BaseURL: modelURL, Model: "scripted", MaxRetries: 0})
	if err != nil {
		t.Fatal(err)
	}
	a, err := loop.New(loop.Config{Store: store, Model: m, Tools: reg, Sandboxes: sbc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a, store
}
