package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/sandboxdproc"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// The end-to-end tests share one real sandboxd (and one build of
// sandbox-mcp), started by the first test that needs it and stopped by
// TestMain; each test uses its own sandboxd user, hence its own sandbox.
var shared struct {
	once   sync.Once
	err    error
	dir    string
	proc   *sandboxdproc.Process
	mcpBin string
	state  string
	egress sandboxdproc.EgressNet
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.proc != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		if c, err := client.Dial(shared.proc.Addr); err == nil {
			if sbs, err := c.List(ctx, client.ListFilter{}); err == nil {
				for _, sb := range sbs {
					c.Delete(ctx, sb.GetSandboxId())
				}
			}
			c.Close()
		}
		if err := shared.proc.Stop(30 * time.Second); err != nil {
			fmt.Fprintf(os.Stderr, "stopping sandboxd: %v\n", err)
		}
		if err := sandboxdproc.Cleanup(ctx, shared.state); err != nil {
			fmt.Fprintf(os.Stderr, "removing what sandboxd left: %v\n", err)
		}
		if err := shared.egress.Remove(); err != nil {
			fmt.Fprintf(os.Stderr, "removing sandboxd's network objects: %v\n", err)
		}
		cancel()
	}
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// sandboxd returns the address of the shared sandboxd, starting it (and
// building sandbox-mcp) on first use; it skips the test (fails it under
// CI=true) without Docker and the sandbox image.
func sandboxd(t *testing.T) string {
	t.Helper()
	image := testenv.NeedDocker(t)
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if shared.dir, shared.err = os.MkdirTemp("", "sandbox-mcp-test-"); shared.err != nil {
			return
		}
		bin, err := sandboxdproc.Build(ctx, shared.dir, sandboxdproc.Package)
		if err != nil {
			shared.err = err
			return
		}
		if shared.mcpBin, shared.err = sandboxdproc.Build(ctx, shared.dir, "github.com/sandboxd/sandboxd/cmd/sandbox-mcp"); shared.err != nil {
			return
		}
		shared.state = filepath.Join(shared.dir, "state")
		args := []string{"--listen", "127.0.0.1:0", "--state-dir", shared.state, "--image", image,
			"--default-memory", "512MiB", "--shutdown-timeout", "5s", "--allow-network", "--warm-pool", "0"}
		// Network objects of this sandboxd's own (go test runs the packages'
		// sandboxd side by side), removed by TestMain once it stopped.
		if shared.egress, shared.err = sandboxdproc.NewEgressNet('m', netip.MustParsePrefix("100.123.0.0/16")); shared.err != nil {
			return
		}
		args = append(args, shared.egress.Flags()...)
		if rt := os.Getenv("SANDBOXD_E2E_RUNTIME"); rt != "" {
			args = append(args, "--runtime", rt)
		}
		shared.proc, shared.err = sandboxdproc.Start(ctx, sandboxdproc.Config{Binary: bin, Args: args,
			Env: append(os.Environ(), "SANDBOXD_LISTEN=")})
	})
	if shared.err != nil {
		t.Fatalf("starting sandboxd: %v", shared.err)
	}
	return shared.proc.Addr
}

func dial(t *testing.T, addr string) *client.Client {
	t.Helper()
	c, err := client.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// inMemory connects an SDK client to a sandbox-mcp server in this process,
// for user; progress receives the client's progress notifications.
func inMemory(t *testing.T, user string, progress func(*mcp.ProgressNotificationClientRequest)) *mcp.ClientSession {
	t.Helper()
	addr := sandboxd(t)
	svc := &service{sandboxd: dial(t, addr), user: user, timeout: 2 * time.Minute,
		log: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	st, ct := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := svc.newServer().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	opts := &mcp.ClientOptions{}
	if progress != nil {
		opts.ProgressNotificationHandler = func(_ context.Context, r *mcp.ProgressNotificationClientRequest) { progress(r) }
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, opts).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// call calls a tool with a bounded wait and returns its text and result.
func call(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) (string, *mcp.CallToolResult) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return text(res), res
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

var commandIDRe = regexp.MustCompile(`command_id: (mcp-[0-9a-f-]+)`)

func TestToolsList(t *testing.T) {
	// Listing needs no sandboxd; the server is the one the command serves.
	svc := &service{user: "u", timeout: time.Minute, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	st, ct := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := svc.newServer().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	required := map[string][]string{
		"run_code":       {"language", "code"},
		"run_once":       {"language", "code"},
		"run_bash":       {"command"},
		"resume_command": {"command_id"},
		"read_file":      {"path"},
		"write_file":     {"path", "content"},
		"list_files":     nil,
	}
	seen := map[string]bool{}
	for _, tool := range res.Tools {
		seen[tool.Name] = true
		want, ok := required[tool.Name]
		if !ok {
			t.Errorf("unexpected tool %s", tool.Name)
			continue
		}
		if len(tool.Description) < 100 {
			t.Errorf("%s: description too short for a model to use it well: %q", tool.Name, tool.Description)
		}
		sch, ok := tool.InputSchema.(map[string]any)
		if !ok || sch["type"] != "object" {
			t.Errorf("%s: input schema %#v is not an object schema", tool.Name, tool.InputSchema)
			continue
		}
		var got []string
		for _, r := range asSlice(sch["required"]) {
			got = append(got, r.(string))
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: required %v, want %v", tool.Name, got, want)
		}
		props, _ := sch["properties"].(map[string]any)
		for name, p := range props {
			if d, _ := p.(map[string]any)["description"].(string); d == "" {
				t.Errorf("%s: property %s has no description", tool.Name, name)
			}
		}
		if tool.Name == "run_code" {
			lang := props["language"].(map[string]any)
			if fmt.Sprint(lang["enum"]) != "[python bash javascript typescript r java]" {
				t.Errorf("run_code language enum %v", lang["enum"])
			}
			if out, ok := tool.OutputSchema.(map[string]any); !ok || out["properties"].(map[string]any)["command_id"] == nil {
				t.Errorf("run_code output schema %v lacks command_id", tool.OutputSchema)
			}
		}
	}
	for name := range required {
		if !seen[name] {
			t.Errorf("tool %s missing", name)
		}
	}
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// TestNetworkedSandbox: the MCP server asks for nothing new, but the
// user's sandbox may be a networked one (acquired with a policy by another
// client): its tools work there, and the sandbox's traffic goes through
// the egress gateway under its policy (here an allow-list allowing
// nothing, so a name is refused without ever leaving this machine).
func TestNetworkedSandbox(t *testing.T) {
	addr := sandboxd(t)
	c := dial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const user = "mcp-test-net"
	acq, err := c.Acquire(ctx, user, client.WithNetworkPolicy(client.NetworkPolicy{DenyOut: []string{"0.0.0.0/0"}}))
	if err != nil {
		t.Fatal(err)
	}
	cs := inMemory(t, user, nil)
	out, res := call(t, cs, "run_code", map[string]any{"language": "bash", "code": "ls /sys/class/net"})
	if res.IsError || !strings.Contains(out, "eth0") {
		t.Fatalf("the MCP user's sandbox is not the networked one (no eth0):\n%s", out)
	}
	out, res = call(t, cs, "run_code", map[string]any{"language": "python", "code": "import socket\n" +
		"try:\n    socket.getaddrinfo('refused.example.test', 443)\n    r = 'resolved'\nexcept socket.gaierror as e:\n    r = 'refused'\nr"})
	if res.IsError || !strings.Contains(out, "result: 'refused'") {
		t.Fatalf("a name the policy does not allow: %s", out)
	}
	if _, res = call(t, cs, "write_file", map[string]any{"path": "net.txt", "content": "kept"}); res.IsError {
		t.Fatalf("write_file in the networked sandbox: %s", text(res))
	}
	st, err := c.NetworkStatus(ctx, acq.ID)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, d := range st.GetDenials() {
		found = found || d.GetName() == "refused.example.test"
	}
	if !found {
		t.Errorf("the gateway recorded no denial of refused.example.test for %s: %v", acq.ID, st.GetDenials())
	}
}

// TestRunOnce: run_once runs code in a sandbox of its own, which keeps
// nothing: the user's sandbox does not see its variables, and it leaves
// no sandbox behind.
func TestRunOnce(t *testing.T) {
	cs := inMemory(t, "mcp-test-once", nil)
	out, res := call(t, cs, "run_code", map[string]any{"language": "python", "code": "mine = 1"})
	if res.IsError {
		t.Fatalf("run_code: %s", out)
	}
	out, res = call(t, cs, "run_once", map[string]any{"language": "python", "code": "once = 6 * 7\nprint(once, 'mine' in globals())"})
	if res.IsError || !strings.Contains(out, "42 False") || !strings.Contains(out, "status: ok") {
		t.Fatalf("run_once: %s", out)
	}
	out, res = call(t, cs, "run_code", map[string]any{"language": "python", "code": "print('once' in globals(), mine)"})
	if res.IsError || !strings.Contains(out, "False 1") {
		t.Fatalf("the user's sandbox after run_once: %s", out)
	}
	out, res = call(t, cs, "run_once", map[string]any{"language": "cobol", "code": "1"})
	if !res.IsError || !strings.Contains(out, "cobol") {
		t.Errorf("run_once with an unknown language: %s; want refused, naming it", out)
	}
}

func TestStateAndFigures(t *testing.T) {
	cs := inMemory(t, "mcp-test-state", nil)
	out, res := call(t, cs, "run_code", map[string]any{"language": "python", "code": "x = 41"})
	if res.IsError || !commandIDRe.MatchString(out) || !strings.Contains(out, "status: ok") {
		t.Fatalf("x = 41: %s", out)
	}
	out, res = call(t, cs, "run_code", map[string]any{"language": "python", "code": "x + 1"})
	if res.IsError || !strings.Contains(out, "result: 42") {
		t.Fatalf("x + 1: want result 42:\n%s", out)
	}
	sc, _ := res.StructuredContent.(map[string]any)
	if sc["status"] != "ok" || !strings.HasPrefix(fmt.Sprint(sc["command_id"]), "mcp-") {
		t.Errorf("structured content %v", res.StructuredContent)
	}

	out, res = call(t, cs, "run_code", map[string]any{"language": "python", "code": "import matplotlib\nmatplotlib.use('Agg')\n" +
		"import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title('squares')\nplt.show()"})
	if res.IsError {
		t.Fatalf("figure: %s", out)
	}
	var png []byte
	for _, c := range res.Content {
		if img, ok := c.(*mcp.ImageContent); ok && img.MIMEType == "image/png" {
			png = img.Data
		}
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("no PNG image content in the figure's result (%d contents):\n%s", len(res.Content), out)
	}

	// A figure saved to a file comes back from read_file as an image.
	call(t, cs, "run_code", map[string]any{"language": "python", "code": "plt.savefig('fig.png')"})
	out, res = call(t, cs, "read_file", map[string]any{"path": "fig.png"})
	if len(res.Content) != 2 || res.IsError {
		t.Fatalf("read_file fig.png: %s", out)
	}
	if img, ok := res.Content[1].(*mcp.ImageContent); !ok || img.MIMEType != "image/png" || !bytes.HasPrefix(img.Data, []byte("\x89PNG")) {
		t.Errorf("read_file fig.png: want a PNG image, got %#v", res.Content[1])
	}
	// Binary content goes in as base64 and is described, not returned.
	call(t, cs, "write_file", map[string]any{"path": "blob.bin", "content": "AAECAw==", "encoding": "base64"})
	out, _ = call(t, cs, "read_file", map[string]any{"path": "blob.bin"})
	if !strings.Contains(out, "binary file of 4 bytes") {
		t.Errorf("read_file blob.bin: %s", out)
	}

	// A large text file is read in pieces.
	call(t, cs, "write_file", map[string]any{"path": "big.txt", "content": strings.Repeat("ab\n", 50_000) + "LAST\n"})
	out, _ = call(t, cs, "read_file", map[string]any{"path": "big.txt"})
	m := regexp.MustCompile(`read_file with offset=(\d+)`).FindStringSubmatch(out)
	if m == nil || len(out) > maxText+1024 {
		t.Fatalf("read_file big.txt: %d bytes, want a cut with a notice: %s", len(out), out[max(0, len(out)-300):])
	}
	offset, _ := strconv.Atoi(m[1])
	out, _ = call(t, cs, "read_file", map[string]any{"path": "big.txt", "offset": offset})
	if !strings.HasSuffix(out, "LAST\n") {
		t.Errorf("read_file big.txt from %s: %.200s", m[1], out)
	}

	out, _ = call(t, cs, "run_bash", map[string]any{"command": "echo hello from bash; exit 3"})
	if !strings.Contains(out, "hello from bash") || !strings.Contains(out, "exit code 3") {
		t.Errorf("run_bash: %s", out)
	}

	out, res = call(t, cs, "run_code", map[string]any{"language": "python", "code": "1/0"})
	if !res.IsError || !strings.Contains(out, "ZeroDivisionError") || !commandIDRe.MatchString(out) {
		t.Errorf("1/0: want an error result with the traceback and the command ID:\n%s", out)
	}

	// Files: write, list, read; a long output is cut with a notice and
	// read on with resume_command.
	call(t, cs, "write_file", map[string]any{"path": "dir/notes.txt", "content": "hello file\n"})
	out, _ = call(t, cs, "list_files", map[string]any{"path": "dir"})
	if !strings.Contains(out, "notes.txt\t11") {
		t.Errorf("list_files: %s", out)
	}
	out, res = call(t, cs, "read_file", map[string]any{"path": "dir/notes.txt"})
	if res.IsError || !strings.Contains(out, "hello file") {
		t.Errorf("read_file: %s", out)
	}
	out, _ = call(t, cs, "run_code", map[string]any{"language": "python", "code": "print('y' * 200_000)\nprint('THE END')"})
	m = regexp.MustCompile(`output_offset (\d+)`).FindStringSubmatch(out)
	if len(out) > maxText+4096 || m == nil || !strings.Contains(out, "THE END") {
		t.Fatalf("long output: %d bytes, want it cut with a notice and its tail kept:\n%.300s", len(out), out)
	}
	id := commandIDRe.FindStringSubmatch(out)[1]
	out, res = call(t, cs, "resume_command", map[string]any{"command_id": id, "output_offset": 150_000})
	if res.IsError || !strings.Contains(out, "THE END") || !strings.Contains(out, "output from byte 150000") {
		t.Errorf("resume_command: %.400s", out)
	}
}

// TestOtherLanguages: JavaScript and R keep their state across run_code
// calls and return the last expression's value, as Python does.
func TestOtherLanguages(t *testing.T) {
	cs := inMemory(t, "mcp-test-langs", nil)
	for _, c := range []struct{ lang, set, get, want string }{
		{"javascript", "const nums = [1, 2, 3]", "nums.map(n => n * 2)", "result: [ 2, 4, 6 ]"},
		{"typescript", "let total: number = 40", "total + 2", "result: 42"},
		{"r", "v <- c(1, 2, 3)", "sum(v)", "result: [1] 6"},
	} {
		if out, res := call(t, cs, "run_code", map[string]any{"language": c.lang, "code": c.set}); res.IsError || !strings.Contains(out, "status: ok") {
			t.Fatalf("%s %q: %s", c.lang, c.set, out)
		}
		if out, res := call(t, cs, "run_code", map[string]any{"language": c.lang, "code": c.get}); res.IsError || !strings.Contains(out, c.want) {
			t.Errorf("%s %q: want %q in:\n%s", c.lang, c.get, c.want, out)
		}
	}
}

func TestBadInput(t *testing.T) {
	cs := inMemory(t, "mcp-test-bad", nil)
	out, res := call(t, cs, "run_code", map[string]any{"language": "ruby", "code": "puts 1"})
	if !res.IsError || !strings.Contains(out, "language") {
		t.Errorf("unknown language: want a tool error naming the language, got isError=%v %q", res.IsError, out)
	}
	out, res = call(t, cs, "resume_command", map[string]any{"command_id": "mcp-no-such"})
	if !res.IsError || !strings.Contains(out, "mcp-no-such") {
		t.Errorf("unknown command: want a tool error, got isError=%v %q", res.IsError, out)
	}
	// The session still works.
	out, res = call(t, cs, "run_code", map[string]any{"language": "python", "code": "print('still here')"})
	if res.IsError || !strings.Contains(out, "still here") {
		t.Errorf("after bad input: %s", out)
	}
}

// Cancelling a call interrupts its command in the sandbox.
func TestCancelInterrupts(t *testing.T) {
	const user = "mcp-test-cancel"
	ids, progress := progressIDs(t)
	cs := inMemory(t, user, progress)
	checkCancelInterrupts(t, cs, ids, user)
}

// progressIDs collects the command IDs that progress notifications name,
// and checks that they come at most about once a second.
func progressIDs(t *testing.T) (<-chan string, func(*mcp.ProgressNotificationClientRequest)) {
	ids := make(chan string, 16)
	re := regexp.MustCompile(`command (mcp-[0-9a-f-]+) running`)
	var mu sync.Mutex
	var last time.Time
	return ids, func(r *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		if gap := time.Since(last); !last.IsZero() && gap < 900*time.Millisecond {
			t.Errorf("progress notifications %v apart, want at most one a second", gap)
		}
		last = time.Now()
		mu.Unlock()
		// Once the command printed (not merely started: a SIGINT before
		// Python runs the code is not a KeyboardInterrupt).
		if m := re.FindStringSubmatch(r.Params.Message); m != nil && strings.HasSuffix(r.Params.Message, ": sleeping") {
			select {
			case ids <- m[1]:
			default:
			}
		}
	}
}

// checkCancelInterrupts starts a minute-long command, cancels the call once
// a progress notification named it, and checks (with client/) that the
// command ended INTERRUPTED within seconds.
func checkCancelInterrupts(t *testing.T, cs *mcp.ClientSession, ids <-chan string, user string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		p := &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"language": "python",
			"code": "import time\nprint('sleeping', flush=True)\ntime.sleep(60)"}}
		p.SetProgressToken("cancel-test")
		_, err := cs.CallTool(ctx, p)
		errc <- err
	}()
	var id string
	select {
	case id = <-ids:
	case err := <-errc:
		t.Fatalf("the call ended before any progress notification: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("no progress notification within 2 minutes")
	}
	cancelled := time.Now()
	cancel()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("the cancelled call succeeded")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the cancelled call did not return within 30s")
	}

	c := dial(t, sandboxd(t))
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	sb, err := c.Acquire(sctx, user)
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.StreamCommand(sctx, sb.ID, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := st.Recv()
		if err != nil {
			t.Fatalf("command %s: stream ended without done (the command still runs?): %v", id, err)
		}
		if ev.Kind == client.KindDone {
			if ev.Done.Status != client.StatusInterrupted {
				t.Fatalf("command %s ended %s (%s), want interrupted", id, ev.Done.Status, ev.Done.Reason)
			}
			break
		}
	}
	if took := time.Since(cancelled); took > 15*time.Second {
		t.Errorf("the command ended %v after the cancellation, want within seconds", took)
	}
	// The interpreter keeps working.
	out, res := call(t, cs, "run_code", map[string]any{"language": "python", "code": "print('after')"})
	if res.IsError || !strings.Contains(out, "after") {
		t.Errorf("after the interrupt: %s", out)
	}
}

// A sandbox that died is replaced, and the next result says the state is
// lost.
func TestStateLost(t *testing.T) {
	const user = "mcp-test-lost"
	cs := inMemory(t, user, nil)
	out, res := call(t, cs, "run_code", map[string]any{"language": "python", "code": "x = 1"})
	if res.IsError {
		t.Fatal(out)
	}
	old := res.StructuredContent.(map[string]any)["sandbox_id"].(string)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if b, err := exec.CommandContext(ctx, "docker", "kill", "--signal", "KILL", containerOf(t, ctx, old)).CombinedOutput(); err != nil {
		t.Fatalf("docker kill: %v: %s", err, b)
	}
	out, res = call(t, cs, "run_code", map[string]any{"language": "python", "code": "print(x)"})
	sc := res.StructuredContent.(map[string]any)
	if !strings.Contains(out, "state_lost") || sc["state_lost"] != true || sc["replaced_sandbox_id"] != old || !strings.Contains(out, "NameError") {
		t.Fatalf("after the sandbox died: want state_lost, replaced_sandbox_id %s and a NameError:\n%s\n%v", old, out, sc)
	}
}

// containerOf is the ID of the sandbox's running container.
func containerOf(t *testing.T, ctx context.Context, sandboxID string) string {
	t.Helper()
	b, err := exec.CommandContext(ctx, "docker", "ps", "-q", "--filter", "label=sandboxd.sandbox-id="+sandboxID).Output()
	if err != nil || len(strings.Fields(string(b))) != 1 {
		t.Fatalf("the container of %s: %q, %v", sandboxID, b, err)
	}
	return strings.TrimSpace(string(b))
}

// The built command over stdio, as a desktop client runs it: state kept
// across calls and across a reconnect (a new process).
func TestStdioCommand(t *testing.T) {
	addr := sandboxd(t)
	connect := func() *mcp.ClientSession {
		cmd := exec.Command(shared.mcpBin, "--sandboxd", addr, "--user", "mcp-test-stdio")
		cmd.Stderr = testWriter{t}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	cs := connect()
	call(t, cs, "run_code", map[string]any{"language": "python", "code": "x = 41"})
	out, _ := call(t, cs, "run_code", map[string]any{"language": "python", "code": "x + 1"})
	if !strings.Contains(out, "result: 42") {
		t.Fatalf("x + 1 over stdio: %s", out)
	}
	if err := cs.Close(); err != nil {
		t.Logf("closing: %v", err)
	}
	cs = connect()
	defer cs.Close()
	out, _ = call(t, cs, "run_code", map[string]any{"language": "python", "code": "x * 2"})
	if !strings.Contains(out, "result: 82") {
		t.Fatalf("x * 2 after reconnecting: want 82 (state kept in the user's sandbox):\n%s", out)
	}
}

// startHTTP runs the built command with --http on a free loopback port and
// returns its endpoint.
func startHTTP(t *testing.T, addr string, args ...string) string {
	t.Helper()
	cmd := exec.Command(shared.mcpBin, append([]string{"--sandboxd", addr, "--http", "127.0.0.1:0"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			t.Log(sc.Text())
			if m := regexp.MustCompile(`url=(http://\S+/mcp)`).FindStringSubmatch(sc.Text()); m != nil {
				select {
				case urls <- m[1]:
				default:
				}
			}
		}
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Error("sandbox-mcp did not exit within 15s of SIGINT")
		}
	})
	select {
	case u := <-urls:
		return u
	case <-exited:
		t.Fatal("sandbox-mcp exited before serving")
	case <-time.After(time.Minute):
		t.Fatal("sandbox-mcp did not serve within a minute")
	}
	return ""
}

// headerTransport sends its headers with every request.
type headerTransport http.Header

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, vs := range h {
		r.Header[k] = vs
	}
	return http.DefaultTransport.RoundTrip(r)
}

// The built command over streamable HTTP, the user taken from a header,
// with a bearer token required.
func TestHTTPCommand(t *testing.T) {
	addr := sandboxd(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	url := startHTTP(t, addr, "--user-header", "X-Sandbox-User", "--http-token-file", tokenFile)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Without the token, no session.
	if _, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil); err == nil {
		t.Fatal("connected without the token")
	}
	tr := &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: headerTransport{
		"X-Sandbox-User": {"mcp-test-http"}, "Authorization": {"Bearer " + testToken}}}}
	ids, progress := progressIDs(t)
	opts := &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) { progress(r) }}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, opts).Connect(ctx, tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call(t, cs, "run_code", map[string]any{"language": "python", "code": "x = 41"})
	out, _ := call(t, cs, "run_code", map[string]any{"language": "python", "code": "x + 1"})
	if !strings.Contains(out, "result: 42") {
		t.Fatalf("x + 1 over HTTP: %s", out)
	}
	call(t, cs, "write_file", map[string]any{"path": "from-http.txt", "content": "via header"})
	// The header chose the user: the file is in that user's sandbox.
	c := dial(t, addr)
	sb, err := c.Acquire(ctx, "mcp-test-http")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := c.Download(ctx, sb.ID, "from-http.txt", &buf); err != nil || buf.String() != "via header" {
		t.Fatalf("the file in mcp-test-http's sandbox: %q, %v", buf.String(), err)
	}
	checkCancelInterrupts(t, cs, ids, "mcp-test-http")
}
