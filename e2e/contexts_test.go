package e2e

// Contexts end to end: several interpreters in one sandbox, through gRPC
// and the Go client, against the real sandboxd, Docker and image, under
// runc and (where registered) gVisor.

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/client"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

func TestContexts(t *testing.T) {
	env := needE2E(t)
	for _, rt := range suiteRuntimes(t) {
		t.Run(rt, func(t *testing.T) {
			e := env.withRuntime(t, rt)
			runContexts(t, e, e.start(t))
		})
	}
}

// runContexts is the contexts scenario on daemon d, whichever backend it
// runs (TestKube runs it too); env gives the sandboxctl binary.
func runContexts(t *testing.T, env *e2eEnv, d *daemon) {
	ctx := e2eCtx(t)
	raw, _ := d.client(t)
	c, err := client.Dial(d.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	sb := acquire(t, ctx, raw, "ctx-user").GetSandbox().GetSandboxId()
	t.Cleanup(func() { deleteQuietly(raw, sb) })

	run := func(ctxID, lang, code string) *client.Outcome {
		t.Helper()
		o, err := c.Run(ctx, client.Command{SandboxID: sb, ContextID: ctxID, Language: lang, Code: code}, false, nil)
		if err != nil {
			t.Fatalf("Run %q in context %q: %v", code, ctxID, err)
		}
		return o
	}
	mustRun := func(ctxID, lang, code string) *client.Outcome {
		t.Helper()
		o := run(ctxID, lang, code)
		if o.Done.Status != client.StatusOK {
			t.Fatalf("%q in context %q: done %+v, errors %v, stderr %q", code, ctxID, o.Done, o.Errors, o.Stderr)
		}
		return o
	}

	list, err := c.ListContexts(ctx, sb)
	if err != nil || len(list) != 1 || list[0].GetContextId() != client.DefaultContext || list[0].GetLanguage() != "python" {
		t.Fatalf("ListContexts of a new sandbox = %v, %v; want only the default python context", list, err)
	}
	mustRun("", "bash", "mkdir -p proj")
	a, err := c.CreateContext(ctx, sb, "python", "proj")
	if err != nil {
		t.Fatalf("CreateContext(python, proj): %v", err)
	}
	b, err := c.CreateContext(ctx, sb, "", "")
	if err != nil {
		t.Fatalf("CreateContext(default language): %v", err)
	}
	if a.GetCwd() != "proj" || b.GetLanguage() != "python" || b.GetCwd() != "." || a.GetContextId() == b.GetContextId() || a.GetCreatedAt() == nil {
		t.Fatalf("created contexts %v and %v", a, b)
	}
	// The one path rule: a working directory absolute under /workspace is
	// the same directory, as for the files API.
	abs, err := c.CreateContext(ctx, sb, "python", "/workspace/proj")
	if err != nil || abs.GetCwd() != "proj" {
		t.Fatalf("CreateContext(python, /workspace/proj) = %v, %v; want cwd proj", abs, err)
	}
	if o := mustRun(abs.GetContextId(), "", "import os; print(os.getcwd())"); o.Stdout != "/workspace/proj\n" {
		t.Errorf("cwd of a context created with /workspace/proj = %q", o.Stdout)
	}
	if err := c.DeleteContext(ctx, sb, abs.GetContextId()); err != nil {
		t.Fatal(err)
	}
	A, B := a.GetContextId(), b.GetContextId()
	list, err = c.ListContexts(ctx, sb)
	if err != nil || len(list) != 3 || list[0].GetContextId() != client.DefaultContext || list[1].GetContextId() != A || list[2].GetContextId() != B {
		t.Fatalf("ListContexts = %v, %v; want default, %s, %s", list, err, A, B)
	}

	t.Run("separate globals, shared files, own directory", func(t *testing.T) {
		mustRun(A, "", "x = 'a'")
		mustRun(B, "", "x = 'b'")
		mustRun("", "", "x = 'default'")
		for id, want := range map[string]string{A: "a\n", B: "b\n", "": "default\n", client.DefaultContext: "default\n"} {
			if o := mustRun(id, "", "print(x)"); o.Stdout != want {
				t.Errorf("print(x) in context %q = %q, want %q", id, o.Stdout, want)
			}
		}
		if o := mustRun(A, "", "import os; print(os.getcwd())"); o.Stdout != "/workspace/proj\n" {
			t.Errorf("cwd of A = %q", o.Stdout)
		}
		if o := mustRun(A, "bash", "pwd"); o.Stdout != "/workspace/proj\n" {
			t.Errorf("bash in A runs in %q", o.Stdout)
		}
		mustRun(B, "", "open('proj/shared.txt', 'w').write('from b')")
		if o := mustRun(A, "", "print(open('shared.txt').read())"); o.Stdout != "from b\n" {
			t.Errorf("A read %q from B's file", o.Stdout)
		}
	})

	t.Run("a JavaScript context, and commands listed with their context", func(t *testing.T) {
		js, err := c.CreateContext(ctx, sb, "js", "proj") // E2B's name for it
		if err != nil || js.GetLanguage() != "javascript" {
			t.Fatalf("CreateContext(js, proj) = %v, %v; want a javascript context", js, err)
		}
		J := js.GetContextId()
		mustRun(J, "", "const y = 21")
		o := mustRun(J, "", "y * 2")
		if len(o.Outputs) != 1 || !o.Outputs[0].Result || o.Outputs[0].Data["text/plain"] != "42" {
			t.Errorf("y * 2 in the JavaScript context: outputs %+v, want the result 42", o.Outputs)
		}
		if _, err := c.Run(ctx, client.Command{SandboxID: sb, ContextID: J, Language: "python", Code: "1"}, false, nil); !errors.Is(err, client.ErrFailedPrecondition) || !strings.Contains(err.Error(), "runs javascript") {
			t.Errorf("python in a JavaScript context: %v; want FAILED_PRECONDITION", err)
		}
		if o := mustRun(J, "", "process.cwd()"); len(o.Outputs) != 1 || o.Outputs[0].Data["text/plain"] != "'/workspace/proj'" {
			t.Errorf("cwd of the JavaScript context: %+v", o.Outputs)
		}
		cmds, _, err := c.ListCommands(ctx, sb, 3, "")
		if err != nil || len(cmds) != 3 {
			t.Fatalf("ListCommands: %v, %v", cmds, err)
		}
		if got := cmds[0]; got.GetContextId() != J || got.GetLanguage() != "javascript" {
			t.Errorf("newest command %v: want context %s, language javascript", got, J)
		}
		if err := c.DeleteContext(ctx, sb, J); err != nil {
			t.Fatalf("DeleteContext(%s): %v", J, err)
		}
	})

	t.Run("parallel across contexts", func(t *testing.T) {
		// The command in A can only finish if the one in B runs while it
		// waits: no timing involved.
		waiting := make(chan struct{})
		type res struct {
			o   *client.Outcome
			err error
		}
		got := make(chan res, 1)
		go func() {
			o, err := c.Run(ctx, client.Command{SandboxID: sb, ContextID: A, Code: `import os, time
print("waiting", flush=True)
for _ in range(3000):
    if os.path.exists("flag"):
        break
    time.sleep(0.01)
else:
    raise SystemExit("flag never appeared")
print("saw it")`}, false, func(ev client.Event) {
				if ev.Kind == client.KindStdout && strings.Contains(ev.Text, "waiting") {
					close(waiting)
				}
			})
			got <- res{o, err}
		}()
		select {
		case <-waiting:
		case r := <-got:
			t.Fatalf("the waiting command ended before it waited: %+v, %v", r.o, r.err)
		case <-ctx.Done():
			t.Fatal("the waiting command never started")
		}
		// Raw gRPC here, to see Started.context_id.
		evs := runEvents(t, ctx, raw, &sandboxv1.ExecuteRequest{SandboxId: sb, ContextId: B, Code: "open('proj/flag', 'w').close()"})
		if st := evs[0].GetStarted(); st.GetContextId() != B {
			t.Errorf("started of a command in %s names context %q", B, st.GetContextId())
		}
		r := <-got
		if r.err != nil || r.o.Done.Status != client.StatusOK || r.o.Stdout != "waiting\nsaw it\n" {
			t.Fatalf("the waiting command: %+v, %v", r.o, r.err)
		}
	})

	t.Run("restart gives fresh globals", func(t *testing.T) {
		if err := c.RestartContext(ctx, sb, A); err != nil {
			t.Fatalf("RestartContext: %v", err)
		}
		o := run(A, "", "print('x' in globals())")
		if o.Done.Status != client.StatusOK || o.Done.StateLost || o.Stdout != "False\n" {
			t.Fatalf("after restart: %+v stdout %q", o.Done, o.Stdout)
		}
		if o := mustRun(B, "", "print(x)"); o.Stdout != "b\n" {
			t.Errorf("restarting A changed B: %q", o.Stdout)
		}
		// A command running in the context ends with its interpreter.
		going := make(chan struct{})
		got := make(chan *client.Outcome, 1)
		go func() {
			o, err := c.Run(ctx, client.Command{SandboxID: sb, ContextID: A, Code: "import time\nprint('going', flush=True)\ntime.sleep(120)"}, false,
				func(ev client.Event) {
					if ev.Kind == client.KindStdout {
						close(going)
					}
				})
			if err != nil {
				t.Errorf("the running command: %v", err)
			}
			got <- o
		}()
		select {
		case <-going:
		case <-ctx.Done():
			t.Fatal("the long command never started")
		}
		if err := c.RestartContext(ctx, sb, A); err != nil {
			t.Fatalf("RestartContext while a command runs: %v", err)
		}
		if o := <-got; o == nil || o.Done == nil || o.Done.Status != client.StatusKilled || !o.Done.StateLost || !strings.Contains(o.Done.Reason, "restarted") {
			t.Fatalf("the command running during the restart: %+v", o)
		}
	})

	t.Run("delete", func(t *testing.T) {
		if err := c.DeleteContext(ctx, sb, B); err != nil {
			t.Fatalf("DeleteContext: %v", err)
		}
		_, err := c.Run(ctx, client.Command{SandboxID: sb, ContextID: B, Code: "1"}, false, nil)
		if !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), B) {
			t.Errorf("Run in a deleted context: %v; want NOT_FOUND naming it", err)
		}
		list, err := c.ListContexts(ctx, sb)
		if err != nil || len(list) != 2 {
			t.Errorf("contexts after delete: %v, %v", list, err)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		for _, tc := range []struct {
			what string
			err  error
			code codes.Code
		}{
			{"restart unknown", c.RestartContext(ctx, sb, "ctx-nope"), codes.NotFound},
			{"delete unknown", c.DeleteContext(ctx, sb, "ctx-nope"), codes.NotFound},
			{"delete default", c.DeleteContext(ctx, sb, client.DefaultContext), codes.FailedPrecondition},
			{"cwd leaving /workspace", second(c.CreateContext(ctx, sb, "python", "../etc")), codes.InvalidArgument},
			{"absolute cwd", second(c.CreateContext(ctx, sb, "python", "/etc")), codes.InvalidArgument},
			{"missing cwd", second(c.CreateContext(ctx, sb, "python", "missing")), codes.FailedPrecondition},
			{"bad language", second(c.CreateContext(ctx, sb, "cobol", "")), codes.InvalidArgument},
			{"bad context ID", second(c.Run(ctx, client.Command{SandboxID: sb, ContextID: "../x", Code: "1"}, false, nil)), codes.InvalidArgument},
		} {
			if status.Code(tc.err) != tc.code {
				t.Errorf("%s: %v; want %s", tc.what, tc.err, tc.code)
			}
		}
		sh, err := c.CreateContext(ctx, sb, "bash", "proj")
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Run(ctx, client.Command{SandboxID: sb, ContextID: sh.GetContextId(), Language: "python", Code: "1"}, false, nil)
		if !errors.Is(err, client.ErrFailedPrecondition) {
			t.Errorf("python in a bash context: %v; want FAILED_PRECONDITION", err)
		}
		if o := mustRun(sh.GetContextId(), "", "pwd; test -e shared.txt && echo shared"); o.Stdout != "/workspace/proj\nshared\n" {
			t.Errorf("bash context printed %q", o.Stdout)
		}
		// The bound (bash contexts hold no interpreter: cheap to fill with).
		list, err := c.ListContexts(ctx, sb)
		if err != nil {
			t.Fatal(err)
		}
		for range 16 - (len(list) - 1) {
			if _, err := c.CreateContext(ctx, sb, "bash", ""); err != nil {
				t.Fatalf("CreateContext below the bound: %v", err)
			}
		}
		if _, err := c.CreateContext(ctx, sb, "bash", ""); status.Code(err) != codes.ResourceExhausted {
			t.Errorf("a 17th context: %v; want RESOURCE_EXHAUSTED", err)
		}
	})

	t.Run("default context unchanged", func(t *testing.T) {
		evs := runEvents(t, ctx, raw, &sandboxv1.ExecuteRequest{SandboxId: sb, Code: "print(x)"})
		o := outcomeOf(evs)
		if o.stdout != "default\n" || o.done.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_OK || o.done.GetStateLost() {
			t.Errorf("default context: stdout %q done %v", o.stdout, o.done)
		}
		if got := evs[0].GetStarted().GetContextId(); got != "default" {
			t.Errorf("started.context_id of a default-context command = %q", got)
		}
	})

	t.Run("sandboxctl ctx ls", func(t *testing.T) {
		out, err := exec.CommandContext(ctx, env.sandboxctl, "--addr", d.addr, "ctx", "ls", sb).CombinedOutput()
		if err != nil || !strings.Contains(string(out), A) || !strings.Contains(string(out), "default") {
			t.Errorf("sandboxctl ctx ls: %v\n%s", err, out)
		}
	})
}

func second[T any](_ T, err error) error { return err }
