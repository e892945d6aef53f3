package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent/internal/sandboxdtest"
	sm "github.com/sandboxd/sandboxd/agent/internal/scriptedmodel"
)

// TestSandboxdToken: against a sandboxd that requires bearer tokens, the
// agent with AGENT_SANDBOXD_TOKEN runs code; without it, the model is told
// the sandbox refused it.
func TestSandboxdToken(t *testing.T) {
	const token = "agent-e2e-token-0123456789"
	d := sandboxdtest.Start(t, sandboxdtest.WithUserToken(token, "agents"))
	model := sm.Start(t, sm.Script(t,
		sm.Handler(func(*sm.Request) sm.Reply {
			return sm.Reply{Calls: []sm.Call{sm.RunCode("a", "python", "print('authorized', 6 * 7)")}}
		}),
		func(req *sm.Request) sm.Reply {
			if res, _ := req.ToolResult("a"); !strings.Contains(res, "authorized 42") {
				t.Errorf("with the token, the tool result is:\n%s", res)
			}
			return sm.Reply{Text: "It ran."}
		},
		sm.Handler(func(*sm.Request) sm.Reply {
			return sm.Reply{Calls: []sm.Call{sm.RunCode("b", "python", "print('should not run')")}}
		}),
		func(req *sm.Request) sm.Reply {
			if res, _ := req.ToolResult("b"); !strings.Contains(res, "Unauthenticated") {
				t.Errorf("without the token, the tool result is:\n%s", res)
			}
			return sm.Reply{Text: "No access."}
		},
	))
	dir := t.TempDir()
	bin := sandboxdtest.Build(t, dir, "github.com/sandboxd/sandboxd/cmd/agent")
	env := []string{"OPENAI_BASE_URL=" + model.URL, "OPENAI_API_KEY=", "AGENT_MODEL=scripted", "AGENT_SANDBOXD_ADDR=" + d.Addr, "AGENT_USER=token-test"}

	for _, tc := range []struct {
		name, token, answer string
	}{
		{"with token", token, "It ran."},
		{"without token", "", "No access."},
	} {
		p := startAgent(t, bin, append(env, "AGENT_STATE_DIR="+filepath.Join(dir, tc.name), "AGENT_SANDBOXD_TOKEN="+tc.token), "chat")
		fmt.Fprintln(p.stdin, "run something")
		p.waitFor(t, tc.answer, 2*time.Minute)
		p.stdin.Close()
		if code := p.wait(t, time.Minute); code != 0 {
			t.Errorf("%s: agent chat exited with %d", tc.name, code)
		}
	}
}
