package e2e

// Interactive commands end to end: standard input, a pseudo-terminal with
// resize, and ListCommands, through the gRPC API and the Go client, against
// real containers under every runtime the suites run (runc, and gVisor's
// runsc where dockerd has it). No sleeps: the tests await stream events and
// poll ListCommands with a deadline.

import (
	"context"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/client"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

func TestProcesses(t *testing.T) {
	env := needE2E(t)
	for _, rt := range suiteRuntimes(t) {
		t.Run(rt, func(t *testing.T) {
			renv := env.withRuntime(t, rt)
			runProcesses(t, renv, renv.start(t))
		})
	}
}

// waiter runs p.Wait in the background and lets the test await output.
type waiter struct {
	mu     sync.Mutex
	stdout string
	change chan struct{}
	done   chan struct{}
	out    *client.Outcome
	err    error
}

func startWait(p *client.Process) *waiter {
	w := &waiter{change: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.out, w.err = p.Wait(func(ev client.Event) {
			if ev.Kind == client.KindStdout {
				w.mu.Lock()
				w.stdout += ev.Text
				w.mu.Unlock()
				select {
				case w.change <- struct{}{}:
				default:
				}
			}
		})
	}()
	return w
}

// awaitStdout waits until the output so far contains want.
func (w *waiter) awaitStdout(t *testing.T, ctx context.Context, want string) {
	t.Helper()
	for {
		w.mu.Lock()
		got := w.stdout
		w.mu.Unlock()
		if strings.Contains(got, want) {
			return
		}
		select {
		case <-w.change:
		case <-w.done:
			t.Fatalf("the command ended (err %v) without printing %q; stdout %q", w.err, want, got)
		case <-ctx.Done():
			t.Fatalf("stdout %q did not come within the test's deadline; got %q", want, got)
		}
	}
}

func (w *waiter) result(t *testing.T, ctx context.Context) *client.Outcome {
	t.Helper()
	select {
	case <-w.done:
	case <-ctx.Done():
		t.Fatal("the command did not finish within the test's deadline")
	}
	if w.err != nil {
		t.Fatalf("Wait: %v", w.err)
	}
	return w.out
}

func wantRPCError(t *testing.T, what string, err error, code codes.Code, mention string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), mention) {
		t.Errorf("%s: %v; want %v mentioning %q", what, err, code, mention)
	}
}

// awaitListing polls ListCommands (one default page) until ok holds of
// its commands, for at most a minute, and returns that answer; what is
// awaited (what) names the failure.
func awaitListing(t *testing.T, ctx context.Context, c sandboxv1.SandboxServiceClient, sb, what string, ok func([]*sandboxv1.CommandInfo) bool) *sandboxv1.ListCommandsResponse {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		r, err := c.ListCommands(ctx, &sandboxv1.ListCommandsRequest{SandboxId: sb})
		if err != nil {
			t.Fatal(err)
		}
		if ok(r.GetCommands()) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("ListCommands did not show %s within a minute: %v", what, r.GetCommands())
		}
		time.Sleep(50 * time.Millisecond) // polling the listing itself, bounded by the deadline
	}
}

// listPages walks a sandbox's commands size at a time, each page through
// the next of clients in turn (a page token is good on any replica), and
// returns their IDs in the order listed. Every page but the last must be
// full; more than a hundred pages fail the test.
func listPages(t *testing.T, ctx context.Context, size int32, clients []sandboxv1.SandboxServiceClient, sb string) []string {
	t.Helper()
	var ids []string
	token := ""
	for i := range 100 {
		r, err := clients[i%len(clients)].ListCommands(ctx, &sandboxv1.ListCommandsRequest{SandboxId: sb, PageSize: size, PageToken: token})
		if err != nil {
			t.Fatalf("page %d (token %q): %v", i, token, err)
		}
		for _, c := range r.GetCommands() {
			ids = append(ids, c.GetCommandId())
		}
		if token = r.GetNextPageToken(); token == "" {
			return ids
		}
		if len(r.GetCommands()) != int(size) {
			t.Fatalf("page %d has %d commands and a next page; want %d", i, len(r.GetCommands()), size)
		}
	}
	t.Fatalf("more than 100 pages of %d: %v", size, ids)
	return nil
}

func runProcesses(t *testing.T, env *e2eEnv, d *daemon) {
	ctx := e2eCtx(t)
	raw, _ := d.client(t)
	c, err := client.Dial(d.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sb := acquire(t, ctx, raw, "interactive").GetSandbox().GetSandboxId()
	bash := func(id, code string) client.Command {
		return client.Command{SandboxID: sb, ID: id, Language: "bash", Code: code, Stdin: true}
	}

	// An interactive read: the prompt arrives, the answer is typed.
	p, err := c.Start(ctx, bash("ask", `echo "name?"; read name; echo "hi $name"`))
	if err != nil {
		t.Fatal(err)
	}
	w := startWait(p)
	w.awaitStdout(t, ctx, "name?")
	sentAt := time.Now()
	if err := p.SendStdin(ctx, []byte("Ada\n")); err != nil {
		t.Fatal(err)
	}
	w.awaitStdout(t, ctx, "hi Ada")
	t.Logf("SendStdin to the answer's output: %v", time.Since(sentAt))
	if o := w.result(t, ctx); o.Stdout != "name?\nhi Ada\n" || o.Done.Status != client.StatusOK || o.Done.ExitCode == nil || *o.Done.ExitCode != 0 {
		t.Errorf("interactive read: stdout %q, done %+v", o.Stdout, o.Done)
	}

	// cat gets every byte in order (Write splits 150 KiB into 64 KiB
	// calls), sent before its stream is read, and ends on CloseStdin.
	p, err = c.Start(ctx, bash("cat", `cat; echo END`))
	if err != nil {
		t.Fatal(err)
	}
	var sent strings.Builder
	for i := range 3 {
		chunk := strings.Repeat(string(rune('a'+i)), 50<<10) + "\n"
		sent.WriteString(chunk)
		if _, err := p.Write([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.CloseStdin(ctx); err != nil {
		t.Fatal(err)
	}
	if o := startWait(p).result(t, ctx); o.Stdout != sent.String()+"END\n" || o.Done.Status != client.StatusOK {
		t.Errorf("cat: %d bytes of stdout (want %d), done %+v", len(o.Stdout), sent.Len()+4, o.Done)
	}

	// A terminal: tty says so, stty size follows ResizePty.
	p, err = c.Start(ctx, client.Command{SandboxID: sb, ID: "term", Language: "bash", Pty: &client.PtySize{Rows: 24, Cols: 80},
		Code: `tty; stty size; read -r line; stty size; echo "got $line"`})
	if err != nil {
		t.Fatal(err)
	}
	w = startWait(p)
	w.awaitStdout(t, ctx, "24 80")
	if err := p.Resize(ctx, client.PtySize{Rows: 40, Cols: 132}); err != nil {
		t.Fatal(err)
	}
	if err := p.SendStdin(ctx, []byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	o := w.result(t, ctx)
	for _, want := range []string{"/dev/pts/", "24 80", "40 132", "got hello"} {
		if !strings.Contains(o.Stdout, want) {
			t.Errorf("terminal output %q lacks %q", o.Stdout, want)
		}
	}

	// What cannot be served says why.
	mustOK(t, execute(t, ctx, raw, &sandboxv1.ExecuteRequest{SandboxId: sb, CommandId: "py", Code: "1"}), "py")
	_, err = raw.SendStdin(ctx, &sandboxv1.SendStdinRequest{SandboxId: sb, CommandId: "ask", Data: []byte("late\n")})
	wantRPCError(t, "SendStdin to a finished command", err, codes.FailedPrecondition, "has finished")
	_, err = raw.CloseStdin(ctx, &sandboxv1.CloseStdinRequest{SandboxId: sb, CommandId: "py"})
	wantRPCError(t, "CloseStdin of a command without stdin", err, codes.FailedPrecondition, "not started with stdin")
	_, err = raw.SendStdin(ctx, &sandboxv1.SendStdinRequest{SandboxId: sb, CommandId: "nobody", Data: []byte("x")})
	wantRPCError(t, "SendStdin to an unknown command", err, codes.NotFound, "nobody")
	_, err = raw.SendStdin(ctx, &sandboxv1.SendStdinRequest{SandboxId: sb, CommandId: "ask", Data: make([]byte, 64<<10+1)})
	wantRPCError(t, "SendStdin of 64 KiB + 1", err, codes.InvalidArgument, "limit")
	s, err := raw.Execute(ctx, &sandboxv1.ExecuteRequest{SandboxId: sb, Code: "input()", Stdin: true})
	if err == nil {
		_, err = s.Recv()
	}
	wantRPCError(t, "Python with stdin", err, codes.InvalidArgument, "bash commands only")

	// A command that waits for input, and one queued behind it.
	hold, err := c.Start(ctx, bash("hold", `read x; echo "held $x"`))
	if err != nil {
		t.Fatal(err)
	}
	holdW := startWait(hold)
	_, err = raw.ResizePty(ctx, &sandboxv1.ResizePtyRequest{SandboxId: sb, CommandId: "hold", Size: &sandboxv1.PtySize{Rows: 10, Cols: 10}})
	wantRPCError(t, "ResizePty of a command without a terminal", err, codes.FailedPrecondition, "terminal")
	queued, err := c.Start(ctx, client.Command{SandboxID: sb, ID: "queued", Language: "bash", Code: "echo after"})
	if err != nil {
		t.Fatal(err)
	}
	queuedW := startWait(queued)

	// The caller "lost" its IDs: ListCommands finds them, newest first.
	r := awaitListing(t, ctx, raw, sb, "hold running", func(cmds []*sandboxv1.CommandInfo) bool {
		return len(cmds) == 6 && cmds[1].GetState() == sandboxv1.CommandState_COMMAND_STATE_RUNNING
	})
	if r.GetTotalCommands() != 6 || r.GetNextPageToken() != "" {
		t.Errorf("one page of all: total %d, next %q", r.GetTotalCommands(), r.GetNextPageToken())
	}
	cmds := r.GetCommands()
	type want struct {
		id, lang  string
		state     sandboxv1.CommandState
		status    sandboxv1.CommandStatus
		stdin     bool
		pty       bool
		exitCode  int32
		hasExit   bool
		hasStart  bool
		available bool
	}
	fin, ok := sandboxv1.CommandState_COMMAND_STATE_FINISHED, sandboxv1.CommandStatus_COMMAND_STATUS_OK
	wants := []want{
		{"queued", "bash", sandboxv1.CommandState_COMMAND_STATE_QUEUED, 0, false, false, 0, false, false, false},
		{"hold", "bash", sandboxv1.CommandState_COMMAND_STATE_RUNNING, 0, true, false, 0, false, true, true},
		{"py", "python", fin, ok, false, false, 0, false, true, true},
		{"term", "bash", fin, ok, true, true, 0, true, true, true},
		{"cat", "bash", fin, ok, true, false, 0, true, true, true},
		{"ask", "bash", fin, ok, true, false, 0, true, true, true},
	}
	for i, w := range wants {
		g := cmds[i]
		if g.GetCommandId() != w.id || g.GetLanguage() != w.lang || g.GetState() != w.state || g.GetStatus() != w.status ||
			g.GetStdin() != w.stdin || g.GetPty() != w.pty || (g.ExitCode != nil) != w.hasExit || g.GetExitCode() != w.exitCode ||
			(g.GetStartedAt() != nil) != w.hasStart || g.GetOutputAvailable() != w.available ||
			(w.state == fin) != (g.GetFinishedAt() != nil && g.GetDuration() != nil) {
			t.Errorf("command %d: %v; want %+v", i, g, w)
		}
	}

	// Paging walks the same list, two at a time.
	if got := strings.Join(listPages(t, ctx, 2, []sandboxv1.SandboxServiceClient{raw}, sb), ","); got != "queued,hold,py,term,cat,ask" {
		t.Errorf("pages of 2 gave %s", got)
	}
	_, err = raw.ListCommands(ctx, &sandboxv1.ListCommandsRequest{SandboxId: sb, PageSize: 201})
	wantRPCError(t, "ListCommands page_size 201", err, codes.InvalidArgument, "page_size")
	_, err = raw.ListCommands(ctx, &sandboxv1.ListCommandsRequest{SandboxId: sb, PageToken: "forged"})
	wantRPCError(t, "ListCommands with a forged token", err, codes.InvalidArgument, "page_token")

	// sandboxctl ps shows the same.
	out, err := exec.CommandContext(ctx, env.sandboxctl, "--addr", d.addr, "ps", sb).CombinedOutput()
	if err != nil {
		t.Fatalf("sandboxctl ps: %v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 7 || !strings.HasPrefix(lines[0], "COMMAND_ID") || !strings.Contains(lines[1], "queued") ||
		!strings.Contains(lines[2], "bash+stdin") || !strings.Contains(lines[2], "running") || !strings.Contains(lines[4], "bash+pty") {
		t.Errorf("sandboxctl ps printed:\n%s", out)
	}
	t.Logf("sandboxctl ps:\n%s", out)

	// The held command gets its line; the queued one runs after it.
	if err := hold.SendStdin(ctx, []byte("on\n")); err != nil {
		t.Fatal(err)
	}
	if o := holdW.result(t, ctx); o.Stdout != "held on\n" {
		t.Errorf("hold printed %q", o.Stdout)
	}
	if o := queuedW.result(t, ctx); o.Stdout != "after\n" {
		t.Errorf("queued printed %q", o.Stdout)
	}
}
