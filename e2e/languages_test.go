package e2e

// Languages and per-command environment, end to end: JavaScript,
// TypeScript and R commands and Execute's env, through gRPC and the Go
// client, against real sandboxd and real containers of the sandbox image,
// under every runtime the suites run under (runc, and runsc when
// registered). A sandbox of an image without Node.js answers a JavaScript
// command with FAILED_PRECONDITION naming the language.

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/client"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

func TestLanguages(t *testing.T) {
	env := needE2E(t)
	for _, rt := range suiteRuntimes(t) {
		t.Run(rt, func(t *testing.T) {
			d := env.withRuntime(t, rt).start(t)
			languagesSuite(t, d, func(t *testing.T, ctx context.Context, sb string) string {
				t.Helper()
				return containerProcs(t, ctx, runningContainer(t, ctx, sb).id)
			})
		})
	}
}

// langRun runs one command with the Go client and returns its outcome and
// the events in order of arrival, with when each arrived.
type arrived struct {
	ev client.Event
	at time.Time
}

func langRun(t *testing.T, ctx context.Context, c *client.Client, cmd client.Command) (*client.Outcome, []arrived) {
	t.Helper()
	var evs []arrived
	out, err := c.Run(ctx, cmd, false, func(e client.Event) { evs = append(evs, arrived{e, time.Now()}) })
	if err != nil {
		t.Fatalf("%s command %q: %v", cmd.Language, cmd.Code, err)
	}
	if out.Done == nil {
		t.Fatalf("%s command %q: no done", cmd.Language, cmd.Code)
	}
	return out, evs
}

func resultOf(o *client.Outcome) string {
	for _, out := range o.Outputs {
		if out.Result {
			return out.Data["text/plain"]
		}
	}
	return "<no result>"
}

func wantStatus(t *testing.T, what string, o *client.Outcome, st client.Status) {
	t.Helper()
	if o.Done.Status != st {
		t.Fatalf("%s: status %v (reason %q, errors %v, stderr %q); want %v", what, o.Done.Status, o.Done.Reason, o.Errors, o.Stderr, st)
	}
}

// languagesSuite runs the kernels' scenarios on daemon d, on either
// backend; procs lists the command names of the processes in a sandbox's
// container.
func languagesSuite(t *testing.T, d *daemon, procs func(t *testing.T, ctx context.Context, sandboxID string) string) {
	ctx := e2eCtx(t)
	c, err := client.Dial(d.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	acq, err := c.Acquire(ctx, "lang-user", client.WithEnv(map[string]string{"SBX_E2E": "sandbox"}))
	if err != nil {
		t.Fatal(err)
	}
	sb := acq.ID
	n := 0
	cmd := func(lang, code string) client.Command {
		n++
		return client.Command{SandboxID: sb, ID: "lang-" + strconv.Itoa(n), Language: lang, Code: code}
	}
	js := func(code string) *client.Outcome {
		o, _ := langRun(t, ctx, c, cmd(client.LanguageJavaScript, code))
		return o
	}

	// Idle: only the Python kernel runs; Node and R start at first use.
	mustOKClient(t, ctx, c, cmd(client.LanguagePython, "1"))
	if procs := procs(t, ctx, sb); procCount(procs, "node") > 0 || procCount(procs, "R") > 0 {
		t.Fatalf("an idle sandbox runs more than the Python kernel:\n%s", procs)
	}

	t.Run("javascript globals, result, top-level await, import", func(t *testing.T) {
		o := js("const a = 20; let b = 1; function f(x) { return x + a + b }")
		wantStatus(t, "declarations", o, client.StatusOK)
		if len(o.Outputs) != 0 {
			t.Errorf("declarations gave outputs %v", o.Outputs)
		}
		if o = js("f(21)"); resultOf(o) != "42" {
			t.Fatalf("f(21) = %q; want 42 (globals kept across commands)", resultOf(o))
		}
		if o.Done.ExecutionCount == nil || *o.Done.ExecutionCount != 2 {
			t.Errorf("execution_count %v; want 2", o.Done.ExecutionCount)
		}
		o = js("import { readFileSync } from 'node:fs'\nimport path from 'node:path'\nconst txt = await Promise.resolve(readFileSync('/etc/hostname', 'utf8'));\n[txt.length > 0, path.basename('/a/b.txt')]")
		wantStatus(t, "import + await", o, client.StatusOK)
		if got := resultOf(o); got != "[ true, 'b.txt' ]" {
			t.Fatalf("import + await result %q", got)
		}
		if o = js("typeof readFileSync"); resultOf(o) != "'function'" {
			t.Fatalf("an imported binding is not kept: %q", resultOf(o))
		}
		if o = js("console.log('no value')"); len(o.Outputs) != 0 || o.Stdout != "no value\n" {
			t.Fatalf("undefined gave outputs %v / stdout %q", o.Outputs, o.Stdout)
		}
	})

	t.Run("console.log streams in order", func(t *testing.T) {
		_, evs := langRun(t, ctx, c, cmd(client.LanguageJavaScript, "console.log('one'); console.error('err'); await new Promise(r => setTimeout(r, 700)); console.log('two'); 'end'"))
		var kinds []string
		var oneAt, doneAt time.Time
		for _, a := range evs {
			switch a.ev.Kind {
			case client.KindStdout:
				kinds = append(kinds, "out:"+a.ev.Text)
				if a.ev.Text == "one\n" {
					oneAt = a.at
				}
			case client.KindStderr:
				kinds = append(kinds, "err:"+a.ev.Text)
			case client.KindResult:
				kinds = append(kinds, "result:"+a.ev.Data["text/plain"])
			case client.KindDone:
				doneAt = a.at
			}
		}
		// stdout and stderr are separate pipes: their relative order is
		// not promised (as for Python), the order within each and the
		// result after both are.
		var outs []string
		for _, k := range kinds {
			if !strings.HasPrefix(k, "err:") {
				outs = append(outs, k)
			}
		}
		if got := strings.Join(outs, "|"); got != "out:one\n|out:two\n|result:'end'" || !slices.Contains(kinds, "err:err\n") || slices.Index(kinds, "err:err\n") > slices.Index(kinds, "out:two\n") {
			t.Fatalf("events %q", strings.Join(kinds, "|"))
		}
		if oneAt.IsZero() || doneAt.Sub(oneAt) < 400*time.Millisecond {
			t.Fatalf("the first line arrived %v before done; want it streamed while the command ran", doneAt.Sub(oneAt))
		}
	})

	t.Run("javascript error with stack", func(t *testing.T) {
		o := js("function inner() { throw new RangeError('too far') }\nfunction outer() { inner() }\nouter()")
		wantStatus(t, "throw", o, client.StatusError)
		if len(o.Errors) != 1 || o.Errors[0].Name != "RangeError" || o.Errors[0].Value != "too far" {
			t.Fatalf("errors %v", o.Errors)
		}
		tb := strings.Join(o.Errors[0].Traceback, "")
		if !strings.Contains(tb, "at inner (<cell-") || !strings.Contains(tb, "at outer (<cell-") || strings.Contains(tb, "kernel.mjs") {
			t.Fatalf("stack %q", tb)
		}
	})

	t.Run("javascript timeout keeps globals", func(t *testing.T) {
		cm := cmd(client.LanguageJavaScript, "while (true) {}")
		cm.Timeout = time.Second
		o, _ := langRun(t, ctx, c, cm)
		wantStatus(t, "busy loop", o, client.StatusTimeout)
		if o.Done.StateLost {
			t.Fatalf("the timeout lost the globals: %q", o.Done.Reason)
		}
		if o = js("a"); resultOf(o) != "20" {
			t.Fatalf("a after the timeout = %q", resultOf(o))
		}
	})

	t.Run("typescript", func(t *testing.T) {
		o, _ := langRun(t, ctx, c, cmd(client.LanguageTypeScript, "interface Point { x: number; y: number }\nconst p: Point = { x: 40, y: 2 };\nconst sum = (q: Point): number => q.x + q.y;\nsum(p)"))
		wantStatus(t, "typescript", o, client.StatusOK)
		if resultOf(o) != "42" {
			t.Fatalf("typescript result %q", resultOf(o))
		}
		if o = js("sum({x: 1, y: a})"); resultOf(o) != "21" {
			t.Fatalf("javascript does not see typescript's globals: %q", resultOf(o))
		}
	})

	t.Run("r", func(t *testing.T) {
		r := func(code string) *client.Outcome {
			o, _ := langRun(t, ctx, c, cmd(client.LanguageR, code))
			return o
		}
		wantStatus(t, "r assign", r("x <- 21\nsq <- function(v) v * 2"), client.StatusOK)
		o := r("cat('hi\\n')\nsq(x)")
		if resultOf(o) != "[1] 42" || o.Stdout != "hi\n" {
			t.Fatalf("r result %q stdout %q", resultOf(o), o.Stdout)
		}
		o = r("f <- function() stop('boom')\nf()")
		wantStatus(t, "r error", o, client.StatusError)
		if len(o.Errors) != 1 || o.Errors[0].Name != "simpleError" || o.Errors[0].Value != "boom" {
			t.Fatalf("r errors %v", o.Errors)
		}
		o = r("plot(1:10, main = 'p')")
		if len(o.Outputs) != 1 || o.Outputs[0].Data["image/png"] == "" {
			t.Fatalf("r plot outputs %d", len(o.Outputs))
		}
	})

	t.Run("per-command env", func(t *testing.T) {
		envs := map[string]string{"SBX_E2E": "command", "SBX_NEW": "new"}
		for _, tc := range []struct{ lang, set, check, want, after string }{
			{client.LanguagePython, "import os, subprocess\nprint(os.environ['SBX_E2E'], os.environ['SBX_NEW'], subprocess.run('echo $SBX_NEW', shell=True, capture_output=True, text=True).stdout.strip())",
				"import os\nprint(os.environ['SBX_E2E'], os.environ.get('SBX_NEW', 'unset'))", "command new new\n", "sandbox unset\n"},
			{client.LanguageBash, "echo $SBX_E2E $SBX_NEW", "echo $SBX_E2E ${SBX_NEW:-unset}", "command new\n", "sandbox unset\n"},
			{client.LanguageJavaScript, "import { execSync } from 'node:child_process'\nconsole.log(process.env.SBX_E2E, process.env.SBX_NEW, execSync('echo $SBX_NEW').toString().trim())",
				"console.log(process.env.SBX_E2E, process.env.SBX_NEW ?? 'unset')", "command new new\n", "sandbox unset\n"},
			{client.LanguageR, "cat(Sys.getenv('SBX_E2E'), Sys.getenv('SBX_NEW'), system('echo $SBX_NEW', intern = TRUE), '\\n')",
				"cat(Sys.getenv('SBX_E2E'), Sys.getenv('SBX_NEW', 'unset'), '\\n')", "command new new \n", "sandbox unset \n"},
		} {
			cm := cmd(tc.lang, tc.set)
			cm.Env = envs
			o, _ := langRun(t, ctx, c, cm)
			if o.Stdout != tc.want {
				t.Errorf("%s with env: stdout %q, want %q (errors %v, stderr %q)", tc.lang, o.Stdout, tc.want, o.Errors, o.Stderr)
			}
			o, _ = langRun(t, ctx, c, cmd(tc.lang, tc.check))
			if o.Stdout != tc.after {
				t.Errorf("%s after a command with env: stdout %q, want %q (restored)", tc.lang, o.Stdout, tc.after)
			}
		}
		_, err := c.Run(ctx, client.Command{SandboxID: sb, Language: "bash", Code: "true", Env: map[string]string{"A=B": "x"}}, false, nil)
		if !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "A=B") {
			t.Errorf("env name with '=': %v; want INVALID_ARGUMENT naming it", err)
		}
	})

	t.Run("unknown language", func(t *testing.T) {
		_, err := c.Run(ctx, client.Command{SandboxID: sb, Language: "cobol", Code: "x"}, false, nil)
		if !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "javascript") {
			t.Fatalf("language cobol: %v; want INVALID_ARGUMENT listing the supported languages", err)
		}
	})

	t.Run("kernel death names the interpreter", func(t *testing.T) {
		for _, tc := range []struct{ lang, code, reason, check, want string }{
			{client.LanguageJavaScript, "process.exit(3)", "the Node.js process exited with code 3", "typeof a", "'undefined'"},
			{client.LanguageR, "quit(status = 4)", "the R process exited with code 4", "exists('x')", "[1] FALSE"},
			// What the OOM killer does, as far as the driver can tell.
			{client.LanguageJavaScript, "globalThis.a = 1; process.kill(process.pid, 'SIGKILL')", "the Node.js process was killed by SIGKILL from outside the driver (likely out of memory)", "typeof a", "'undefined'"},
			{client.LanguageR, "x <- 1; tools::pskill(Sys.getpid(), 9L)", "the R process was killed by SIGKILL from outside the driver (likely out of memory)", "exists('x')", "[1] FALSE"},
		} {
			o, _ := langRun(t, ctx, c, cmd(tc.lang, tc.code))
			wantStatus(t, tc.code, o, client.StatusKilled)
			if !o.Done.StateLost || !strings.Contains(o.Done.Reason, tc.reason) || strings.Contains(o.Done.Reason, "Python") {
				t.Errorf("%s: state_lost %v, reason %q; want state lost and %q", tc.code, o.Done.StateLost, o.Done.Reason, tc.reason)
			}
			o, _ = langRun(t, ctx, c, cmd(tc.lang, tc.check))
			if resultOf(o) != tc.want || o.Done.StateLost {
				t.Errorf("%s after the death: result %q, state_lost %v; want %s from a fresh kernel", tc.lang, resultOf(o), o.Done.StateLost, tc.want)
			}
		}
		// Python's globals were not touched.
		o, _ := langRun(t, ctx, c, cmd(client.LanguagePython, "1 + 1"))
		if o.Done.StateLost || resultOf(o) != "2" {
			t.Errorf("python after the other kernels died: %v %q", o.Done.StateLost, resultOf(o))
		}
	})

	// Each extra kernel is started once and kept.
	if procs := procs(t, ctx, sb); procCount(procs, "node") != 1 || procCount(procs, "R") != 1 {
		t.Errorf("want one Node.js and one R kernel after the commands:\n%s", procs)
	}
}

// TestLanguageMissingFromImage: a sandbox whose image has no Node.js answers
// a JavaScript command with FAILED_PRECONDITION naming the language. The
// image is the test image with node removed (built here, offline, in a
// second), so the driver's probe and sandboxd's check are both exercised.
func TestLanguageMissingFromImage(t *testing.T) {
	env := needE2E(t)
	ctx := e2eCtx(t)
	tag := "sandboxd-test-no-node:" + strconv.Itoa(os.Getpid())
	build := exec.CommandContext(ctx, "docker", "build", "-q", "-t", tag, "-")
	build.Stdin = strings.NewReader("FROM " + env.image + "\nUSER root\nRUN rm -f /usr/bin/node /usr/bin/nodejs\nUSER 1000:1000\n")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building an image without node: %v: %s", err, out)
	}
	// Registered first, so it runs last: after sandboxd and its containers.
	t.Cleanup(func() { _ = exec.Command("docker", "image", "rm", "-f", tag).Run() })
	f := env.fork(t)
	f.image = tag
	d := f.start(t)
	c, _ := d.client(t)
	sb := acquire(t, ctx, c, "no-node-user").GetSandbox().GetSandboxId()
	mustOK(t, execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: sb, Code: "1"}), "python in the image without node")
	for _, lang := range []string{"javascript", "ts"} {
		s, err := c.Execute(ctx, &sandboxv1.ExecuteRequest{SandboxId: sb, Language: lang, Code: "1"})
		if err == nil {
			_, err = s.Recv()
		}
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "script\"") {
			t.Fatalf("%s in an image without node: %v; want FAILED_PRECONDITION naming the language", lang, err)
		}
	}
	// Nor can a context run it.
	if _, err := c.CreateContext(ctx, &sandboxv1.CreateContextRequest{SandboxId: sb, Language: "javascript"}); status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "javascript") {
		t.Fatalf("CreateContext(javascript) in an image without node: %v; want FAILED_PRECONDITION naming the language", err)
	}
	// R is still there.
	o := execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: sb, Language: "r", Code: "1 + 1"})
	if len(o.results) != 1 || o.results[0]["text/plain"] != "[1] 2" {
		t.Fatalf("r in the image without node: %v %v", o.results, o.errs)
	}
}

func mustOKClient(t *testing.T, ctx context.Context, c *client.Client, cmd client.Command) {
	t.Helper()
	o, _ := langRun(t, ctx, c, cmd)
	wantStatus(t, cmd.Code, o, client.StatusOK)
}

// containerProcs lists the command names of a Docker container's
// processes.
func containerProcs(t *testing.T, ctx context.Context, ctr string) string {
	t.Helper()
	out, err := dockerProcs(ctx, ctr)
	if err != nil {
		t.Fatalf("docker exec ps: %v: %s", err, out)
	}
	return out
}

// dockerProcs is containerProcs' docker exec.
func dockerProcs(ctx context.Context, ctr string) (string, error) {
	out, err := exec.CommandContext(ctx, "docker", "exec", ctr, "ps", "-e", "-o", "comm=").CombinedOutput()
	return string(out), err
}

// procCount counts the processes named name in containerProcs' list.
func procCount(procs, name string) int {
	n := 0
	for _, l := range strings.Split(procs, "\n") {
		if strings.TrimSpace(l) == name {
			n++
		}
	}
	return n
}
