// Package e2e holds end-to-end tests of the agent binary (cmd/agent): the
// real binary, killed with SIGKILL while a tool call runs, then restarted;
// against the real sandboxd binary, real Docker and a scripted model.
package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent/internal/sandboxdtest"
	sm "github.com/sandboxd/sandboxd/agent/internal/scriptedmodel"
	"github.com/sandboxd/sandboxd/agent/session"
)

// proc is a running agent process.
type proc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	mu     sync.Mutex
	out    strings.Builder
	stderr strings.Builder
	change chan struct{}
	exited chan error
}

// startAgent runs the agent binary with args, configured for the scripted
// model and the test's sandboxd.
func startAgent(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), change: make(chan struct{}, 1), exited: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), env...)
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting agent: %v", err)
	}
	var wg sync.WaitGroup
	copyTo := func(r io.Reader, b *strings.Builder) {
		defer wg.Done()
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			p.mu.Lock()
			b.Write(buf[:n])
			p.mu.Unlock()
			select {
			case p.change <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}
	wg.Add(2)
	go copyTo(stdout, &p.out)
	go copyTo(stderr, &p.stderr)
	go func() {
		wg.Wait()
		p.exited <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() || os.Getenv("AGENT_E2E_VERBOSE") != "" {
			t.Logf("agent %v\nstdout:\n%s\nstderr:\n%s", args, p.stdout(), p.errors())
		}
	})
	return p
}

func (p *proc) stdout() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *proc) errors() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// waitFor waits until stdout matches re and returns the first submatch (or
// the match).
func (p *proc) waitFor(t *testing.T, re string, timeout time.Duration) string {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.After(timeout)
	for {
		if m := rx.FindStringSubmatch(p.stdout()); m != nil {
			return m[len(m)-1]
		}
		select {
		case <-p.change:
		case err := <-p.exited:
			p.exited <- err
			if m := rx.FindStringSubmatch(p.stdout()); m != nil {
				return m[len(m)-1]
			}
			t.Fatalf("agent exited (%v) before printing %q", err, re)
		case <-deadline:
			t.Fatalf("agent did not print %q within %v", re, timeout)
		}
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(timeout):
		t.Fatalf("agent did not exit within %v", timeout)
	}
	return p.cmd.ProcessState.ExitCode()
}

// slowCode counts its runs in a file of the sandbox's workspace, defines a
// variable, and runs for 5 seconds.
const slowCode = `import pathlib, time
counter = pathlib.Path('counter.txt')
runs = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(runs))
secret = 'kept-' + str(runs)
print('started run', runs, flush=True)
time.sleep(5)
print('finished sleeping', flush=True)`

// TestCrashDuringToolCall: kill -9 the agent while a 5-second tool call
// runs; a restarted agent (serve, which resumes at start-up) finishes the
// conversation with that call's real result; the code ran exactly once and
// its variables are intact for the next message (sent with chat --session).
func TestCrashDuringToolCall(t *testing.T) {
	d := sandboxdtest.Start(t)
	model := sm.Start(t, sm.Script(t,
		sm.Handler(func(*sm.Request) sm.Reply { return sm.Reply{Calls: []sm.Call{sm.RunCode("slow", "python", slowCode)}} }),
		func(req *sm.Request) sm.Reply {
			res, _ := req.ToolResult("slow")
			for _, want := range []string{"status: ok", "started run 1", "finished sleeping"} {
				if !strings.Contains(res, want) {
					t.Errorf("resumed tool result lacks %q:\n%s", want, res)
				}
			}
			return sm.Reply{Text: "The slow run finished."}
		},
		sm.Handler(func(*sm.Request) sm.Reply {
			return sm.Reply{Calls: []sm.Call{sm.RunCode("check", "python", "print('counter', open('counter.txt').read(), secret)")}}
		}),
		func(req *sm.Request) sm.Reply {
			res, _ := req.ToolResult("check")
			if !strings.Contains(res, "counter 1 kept-1") {
				t.Errorf("after the crash the counter or the variable is wrong:\n%s", res)
			}
			return sm.Reply{Text: "The counter is 1."}
		},
	))
	dir := t.TempDir()
	bin := sandboxdtest.Build(t, dir, "github.com/sandboxd/sandboxd/cmd/agent")
	stateDir := filepath.Join(dir, "state")
	env := []string{"OPENAI_BASE_URL=" + model.URL, "OPENAI_API_KEY=", "AGENT_MODEL=scripted",
		"AGENT_STATE_DIR=" + stateDir, "AGENT_SANDBOXD_ADDR=" + d.Addr, "AGENT_USER=crash-test", "AGENT_LOG_LEVEL=debug"}

	// 1. Chat; kill -9 as soon as the code is running.
	p := startAgent(t, bin, env, "chat")
	convID := p.waitFor(t, `conversation (c[a-z2-7]+) `, time.Minute)
	fmt.Fprintln(p.stdin, "Run the slow job")
	p.waitFor(t, `(?m)^started run 1$`, 2*time.Minute)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.wait(t, time.Minute)
	if regexp.MustCompile(`(?m)^finished sleeping$`).MatchString(p.stdout()) {
		t.Fatalf("the agent was killed only after the command finished; the test proves nothing:\n%s", p.stdout())
	}

	// 2. A restarted agent resumes the conversation by itself.
	s := startAgent(t, bin, env, "serve", "--listen", "127.0.0.1:0")
	model.WaitRequests(t, 2, 2*time.Minute)
	waitIdle(t, filepath.Join(stateDir, "agent.db"), convID)
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := s.wait(t, time.Minute); code != 0 {
		t.Errorf("agent serve exited with %d after SIGTERM", code)
	}
	if !strings.Contains(s.errors(), "resumed interrupted conversations") {
		t.Errorf("agent serve did not report resuming:\n%s", s.errors())
	}

	// 3. The conversation goes on in the terminal: same variables, the code
	// ran once.
	c := startAgent(t, bin, env, "chat", "--session", convID)
	c.waitFor(t, `The slow run finished\.`, time.Minute)
	fmt.Fprintln(c.stdin, "Check the counter")
	c.waitFor(t, `The counter is 1\.`, 2*time.Minute)
	c.waitFor(t, `tokens: this message \d+`, time.Minute)
	c.stdin.Close()
	if code := c.wait(t, time.Minute); code != 0 {
		t.Errorf("agent chat exited with %d at end of input", code)
	}
	out := c.stdout()
	for _, want := range []string{"The agent restarted while working on this message", "counter 1 kept-1"} {
		if !strings.Contains(out, want) {
			t.Errorf("chat output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "lost") {
		t.Errorf("chat reports lost state:\n%s", out)
	}
	if n := len(model.Requests()); n != 4 {
		t.Errorf("the model was called %d times, want 4", n)
	}
}

// waitIdle waits until the agent has recorded the end of the conversation's
// turn, reading the agent's database as a second SQLite client.
func waitIdle(t *testing.T, dbPath, convID string) {
	t.Helper()
	store, err := session.Open(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		c, err := store.Conversation(ctx, convID)
		if err == nil && c.State == session.StateIdle {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("conversation %s not idle after 2 minutes (state %q, err %v)", convID, c.State, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
