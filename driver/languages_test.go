package driver

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/ioproto"
)

// These tests run the driver directly with the host's interpreters (node
// with Debian's node-acorn and node-typescript, Rscript from r-base-core);
// the image's are exercised by e2e/languages_test.go.

func needLanguage(t *testing.T, h *driverHarness, d *Driver, lang string) {
	t.Helper()
	for _, l := range d.launcher.languages {
		if l == lang {
			return
		}
	}
	testenv.Unavailable(t, "%s is not installed on this host (apt-get install nodejs node-acorn node-typescript r-base-core)", lang)
}

func startLangDriver(t *testing.T) (*driverHarness, *Driver) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		testenv.Unavailable(t, "python3 is not installed")
	}
	var d *Driver
	h := startDriver(t, t.TempDir(), func(dd *Driver) { d = dd; dd.cfg.Grace = time.Second })
	return h, d
}

func (h *driverHarness) submitRec(rec ioproto.Record) []ioproto.Event {
	h.t.Helper()
	rec.Type = ioproto.KindExec
	line, err := ioproto.EncodeRecord(rec)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := ioproto.AppendLine(filepath.Join(h.io, ioproto.StdinFile), line); err != nil {
		h.t.Fatal(err)
	}
	return h.wait(rec.CommandID)
}

func evsOf(evs []ioproto.Event, typ string) []ioproto.Event {
	var out []ioproto.Event
	for _, e := range evs {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

func textOf(evs []ioproto.Event, typ string) string {
	var b strings.Builder
	for _, e := range evsOf(evs, typ) {
		b.WriteString(e.Text)
	}
	return b.String()
}

func plainResult(evs []ioproto.Event) string {
	r := evsOf(evs, ioproto.EventResult)
	if len(r) != 1 {
		return "<no single result>"
	}
	return r[0].Data["text/plain"]
}

func wantDone(t *testing.T, evs []ioproto.Event, status string) ioproto.Event {
	t.Helper()
	d := evs[len(evs)-1]
	if d.Status != status {
		t.Fatalf("status %q, want %q; events: %+v", d.Status, status, evs)
	}
	return d
}

func TestJavaScriptKernelLocal(t *testing.T) {
	h, d := startLangDriver(t)
	needLanguage(t, h, d, ioproto.LanguageJavaScript)
	js := func(id, code string) []ioproto.Event {
		return h.submitRec(ioproto.Record{CommandID: id, Language: ioproto.LanguageJavaScript, Code: code, TimeoutMS: 20000})
	}

	evs := js("g1", "const x = 20; let y = 1; var z = 0; function f(a) { return a + x }; class C { v() { return 7 } }")
	wantDone(t, evs, ioproto.StatusOK)
	if r := evsOf(evs, ioproto.EventResult); len(r) != 0 {
		t.Fatalf("declarations gave a result: %+v", r)
	}
	evs = js("g2", "f(y) + new C().v() + z")
	wantDone(t, evs, ioproto.StatusOK)
	if got := plainResult(evs); got != "28" {
		t.Fatalf("globals across cells: result %q; events %+v", got, evs)
	}
	// Re-running a cell with const declarations works (notebook habit).
	wantDone(t, js("g3", "const x = 21; x * 2"), ioproto.StatusOK)

	evs = js("await", "const r = await new Promise(res => setTimeout(() => res('later'), 50)); console.log('got', r); ({r})")
	wantDone(t, evs, ioproto.StatusOK)
	if got := textOf(evs, ioproto.EventStdout); got != "got later\n" {
		t.Fatalf("stdout %q", got)
	}
	if got := plainResult(evs); got != "{ r: 'later' }" {
		t.Fatalf("result %q", got)
	}

	evs = js("imp", "import fs from 'node:fs'\nimport { join } from 'node:path'\nimport * as os from 'os'\nfs.writeFileSync(join(process.cwd(), 'a.txt'), 'hi'); typeof os.cpus")
	wantDone(t, evs, ioproto.StatusOK)
	if got := plainResult(evs); got != "'function'" {
		t.Fatalf("import result %q; events %+v", got, evs)
	}
	if got := plainResult(js("imp2", "fs.readFileSync('a.txt', 'utf8')")); got != "'hi'" {
		t.Fatalf("imported binding not kept: %q", got)
	}

	evs = js("err", "function boom() { throw new TypeError('bad thing') }\nboom()")
	wantDone(t, evs, ioproto.StatusError)
	errs := evsOf(evs, ioproto.EventError)
	if len(errs) != 1 || errs[0].EName != "TypeError" || errs[0].EValue != "bad thing" {
		t.Fatalf("error events %+v", errs)
	}
	// The user's frames only: not the kernel's, nor the wrapper's call on
	// the line after the cell's last.
	if tb := strings.Join(errs[0].Traceback, ""); !strings.Contains(tb, "boom") || !strings.Contains(tb, "<cell-") || strings.Contains(tb, "kernel.mjs") || strings.Contains(tb, ">:3:") {
		t.Fatalf("traceback %q", tb)
	}
	// Columns on a cell's first line are the user's.
	evs = js("col", "const nothing = null; nothing.x\n1")
	if e := evsOf(evs, ioproto.EventError); len(e) != 1 || !strings.Contains(strings.Join(e[0].Traceback, ""), ">:1:31") {
		t.Fatalf("first-line frame: %+v", e)
	}
	evs = js("syn", "let = = 2")
	wantDone(t, evs, ioproto.StatusError)
	if e := evsOf(evs, ioproto.EventError); len(e) != 1 || e[0].EName != "SyntaxError" {
		t.Fatalf("syntax error events %+v", evs)
	}

	// A busy synchronous loop is interrupted (vm breakOnSigint); globals stay.
	evs = h.submitRec(ioproto.Record{CommandID: "loop", Language: ioproto.LanguageJavaScript, Code: "globalThis.k = 5; while (true) {}", TimeoutMS: 500})
	dn := wantDone(t, evs, ioproto.StatusTimeout)
	if dn.StateLost {
		t.Fatalf("timeout lost state: %+v", dn)
	}
	if got := plainResult(js("after", "k + x")); got != "26" {
		t.Fatalf("globals after interrupt: %q", got)
	}
	// Waiting on a promise is interrupted too.
	evs = h.submitRec(ioproto.Record{CommandID: "wait", Language: ioproto.LanguageJavaScript, Code: "await new Promise(r => setTimeout(r, 60000))", TimeoutMS: 300})
	if dn := wantDone(t, evs, ioproto.StatusTimeout); dn.StateLost {
		t.Fatalf("state lost: %+v", dn)
	}
	// A busy loop after an await cannot be interrupted: the kernel is killed.
	evs = h.submitRec(ioproto.Record{CommandID: "busy", Language: ioproto.LanguageJavaScript, Code: "await null; while (true) {}", TimeoutMS: 300})
	dn = wantDone(t, evs, ioproto.StatusKilled)
	if !dn.StateLost || !strings.Contains(dn.Reason, "Node.js") || strings.Contains(dn.Reason, "Python") {
		t.Fatalf("busy loop after await: %+v", dn)
	}
	evs = js("fresh", "typeof k")
	if got := plainResult(evs); got != "'undefined'" {
		t.Fatalf("after the kill: %q", got)
	}

	// TypeScript shares the kernel.
	evs = h.submitRec(ioproto.Record{CommandID: "ts1", Language: ioproto.LanguageTypeScript, Code: "interface P { n: number }\nconst p: P = { n: 41 };\nenum E { A = 1 }\nconst t: number = p.n + E.A;\nt"})
	wantDone(t, evs, ioproto.StatusOK)
	if got := plainResult(evs); got != "42" {
		t.Fatalf("ts result %q; events %+v", got, evs)
	}
	if got := plainResult(js("ts2", "t + 1")); got != "43" {
		t.Fatalf("ts global from js: %q", got)
	}
	evs = h.submitRec(ioproto.Record{CommandID: "ts3", Language: ioproto.LanguageTypeScript, Code: "const q: number = ;"})
	wantDone(t, evs, ioproto.StatusError)
	if e := evsOf(evs, ioproto.EventError); len(e) != 1 || e[0].EName != "SyntaxError" || !strings.Contains(e[0].EValue, "<cell-") {
		t.Fatalf("typescript syntax error: %+v", e)
	}
	// Small shapes of cells: a destructuring declaration, a trailing
	// comment, an await as the last expression, a class used at once.
	evs = js("shapes", "const { p1, p2: [p3] } = { p1: 1, p2: [2] }\nclass K { static n = 3 }\n(await Promise.resolve(p1 + p3 + K.n)) // six")
	if got := plainResult(evs); got != "6" {
		t.Fatalf("shapes: %q; %+v", got, evs)
	}

	// Env: set for the command, restored afterwards, seen by subprocesses.
	evs = h.submitRec(ioproto.Record{CommandID: "env1", Language: ioproto.LanguageJavaScript, Env: map[string]string{"HOME": "/elsewhere", "SBX_NEW": "v1"},
		Code: "import { execSync } from 'node:child_process'\nconsole.log(process.env.HOME, process.env.SBX_NEW, execSync('echo $SBX_NEW').toString().trim())"})
	wantDone(t, evs, ioproto.StatusOK)
	if got := textOf(evs, ioproto.EventStdout); got != "/elsewhere v1 v1\n" {
		t.Fatalf("env stdout %q", got)
	}
	evs = js("env2", "[process.env.HOME === '/elsewhere', 'SBX_NEW' in process.env]")
	if got := plainResult(evs); got != "[ false, false ]" {
		t.Fatalf("env not restored: %q", got)
	}
	if ec := evs[len(evs)-1].ExecutionCount; ec == nil || *ec < 2 {
		t.Fatalf("execution_count %v", ec)
	}
}

func TestRKernelLocal(t *testing.T) {
	h, d := startLangDriver(t)
	needLanguage(t, h, d, ioproto.LanguageR)
	r := func(id, code string, env map[string]string) []ioproto.Event {
		return h.submitRec(ioproto.Record{CommandID: id, Language: ioproto.LanguageR, Code: code, Env: env, TimeoutMS: 20000})
	}
	evs := r("r1", "x <- 21\nf <- function(a) a * 2", nil)
	wantDone(t, evs, ioproto.StatusOK)
	if len(evsOf(evs, ioproto.EventResult)) != 0 {
		t.Fatalf("assignment gave a result: %+v", evs)
	}
	evs = r("r2", "cat('hello\\n')\nf(x)", nil)
	wantDone(t, evs, ioproto.StatusOK)
	if got := plainResult(evs); got != "[1] 42" {
		t.Fatalf("result %q; events %+v", got, evs)
	}
	if got := textOf(evs, ioproto.EventStdout); got != "hello\n" {
		t.Fatalf("stdout %q", got)
	}
	evs = r("r3", "g <- function() stop('boom')\ng()", nil)
	wantDone(t, evs, ioproto.StatusError)
	errs := evsOf(evs, ioproto.EventError)
	if len(errs) != 1 || errs[0].EName != "simpleError" || errs[0].EValue != "boom" || !strings.Contains(strings.Join(errs[0].Traceback, ""), "g()") {
		t.Fatalf("error %+v", errs)
	}
	evs = r("r4", "plot(1:10)", nil)
	wantDone(t, evs, ioproto.StatusOK)
	if ds := evsOf(evs, ioproto.EventDisplay); len(ds) != 1 || (ds[0].Data["image/png"] == "" && len(ds[0].Refs) == 0) {
		t.Fatalf("plot: %+v", evs)
	}
	evs = r("r5", "cat(Sys.getenv('HOME'), Sys.getenv('SBX_NEW'), system('echo $SBX_NEW', intern=TRUE), '\\n')", map[string]string{"HOME": "/elsewhere", "SBX_NEW": "v1"})
	if got := textOf(evs, ioproto.EventStdout); got != "/elsewhere v1 v1 \n" {
		t.Fatalf("env stdout %q; %+v", got, evs)
	}
	evs = r("r6", "c(Sys.getenv('HOME') == '/elsewhere', nzchar(Sys.getenv('SBX_NEW')))", nil)
	if got := plainResult(evs); got != "[1] FALSE FALSE" {
		t.Fatalf("env not restored: %q", got)
	}
	evs = h.submitRec(ioproto.Record{CommandID: "r7", Language: ioproto.LanguageR, Code: "repeat {}", TimeoutMS: 500})
	if dn := wantDone(t, evs, ioproto.StatusTimeout); dn.StateLost {
		t.Fatalf("timeout lost state: %+v", dn)
	}
	if got := plainResult(r("r8", "x", nil)); got != "[1] 21" {
		t.Fatalf("after interrupt %q", got)
	}
}

func TestEnvPythonBashLocal(t *testing.T) {
	h, _ := startLangDriver(t)
	env := map[string]string{"HOME": "/elsewhere", "SBX_NEW": "v1"}
	evs := h.submitRec(ioproto.Record{CommandID: "p1", Language: ioproto.LanguagePython, Env: env,
		Code: "import os, subprocess\nprint(os.environ['HOME'], os.environ['SBX_NEW'], subprocess.run('echo $SBX_NEW', shell=True, capture_output=True, text=True).stdout.strip())"})
	if got := textOf(evs, ioproto.EventStdout); got != "/elsewhere v1 v1\n" {
		t.Fatalf("python env stdout %q; %+v", got, evs)
	}
	evs = h.submitRec(ioproto.Record{CommandID: "p2", Language: ioproto.LanguagePython, Code: "import os\nos.environ.get('HOME') == '/elsewhere', 'SBX_NEW' in os.environ"})
	if got := plainResult(evs); got != "(False, False)" {
		t.Fatalf("python env not restored: %q", got)
	}
	evs = h.submitRec(ioproto.Record{CommandID: "b1", Language: ioproto.LanguageBash, Env: env, Code: "echo $HOME $SBX_NEW"})
	if got := textOf(evs, ioproto.EventStdout); got != "/elsewhere v1\n" {
		t.Fatalf("bash env stdout %q", got)
	}
	evs = h.submitRec(ioproto.Record{CommandID: "b2", Language: ioproto.LanguageBash, Code: "echo ${SBX_NEW:-unset}"})
	if got := textOf(evs, ioproto.EventStdout); got != "unset\n" {
		t.Fatalf("bash env leaked %q", got)
	}
}

// TestIdleSIGINTLocal: a SIGINT that reaches a kernel between commands (a
// timeout racing the command's end) neither kills it nor interrupts the
// next command.
func TestIdleSIGINTLocal(t *testing.T) {
	h, d := startLangDriver(t)
	// Each set cell's result is the kernel's PID.
	for _, tc := range []struct{ lang, set, get, want string }{
		{ioproto.LanguageJavaScript, "globalThis.v = 7; process.pid", "v", "7"},
		{ioproto.LanguageR, "v <- 7; Sys.getpid()", "v", "[1] 7"},
		{ioproto.LanguagePython, "import os; v = 7; os.getpid()", "v", "7"},
	} {
		needLanguage(t, h, d, tc.lang)
		evs := h.submitRec(ioproto.Record{CommandID: tc.lang + "-set", Language: tc.lang, Code: tc.set})
		wantDone(t, evs, ioproto.StatusOK)
		pid, err := strconv.Atoi(strings.TrimPrefix(plainResult(evs), "[1] "))
		if err != nil {
			t.Fatalf("%s: kernel PID %q", tc.lang, plainResult(evs))
		}
		if err := syscall.Kill(pid, syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		waitDelivered(t, pid)
		evs = h.submitRec(ioproto.Record{CommandID: tc.lang + "-get", Language: tc.lang, Code: tc.get})
		dn := wantDone(t, evs, ioproto.StatusOK)
		if dn.StateLost || plainResult(evs) != tc.want {
			t.Fatalf("%s after an idle SIGINT: %+v", tc.lang, evs)
		}
	}
}

// waitDelivered waits until no signal is pending for pid (its handler ran).
func waitDelivered(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatal(err)
		}
		pending := false
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) == 2 && (f[0] == "SigPnd:" || f[0] == "ShdPnd:") && strings.Trim(f[1], "0") != "" {
				pending = true
			}
		}
		if !pending {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a signal to %d is still pending after 5s", pid)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRestartLostStateLocal: after a driver restart, the first command of
// each language used before reports its globals lost, naming the
// interpreter; a language never used before starts fresh without a loss.
func TestRestartLostStateLocal(t *testing.T) {
	h, d := startLangDriver(t)
	needLanguage(t, h, d, ioproto.LanguageJavaScript)
	needLanguage(t, h, d, ioproto.LanguageR)
	wantDone(t, h.submitRec(ioproto.Record{CommandID: "js-1", Language: ioproto.LanguageJavaScript, Code: "globalThis.v = 1"}), ioproto.StatusOK)
	h.stop()

	h2 := startDriver(t, h.io, func(dd *Driver) {})
	evs := h2.submitRec(ioproto.Record{CommandID: "js-2", Language: ioproto.LanguageJavaScript, Code: "typeof v"})
	dn := wantDone(t, evs, ioproto.StatusOK)
	if !dn.StateLost || !strings.Contains(dn.Reason, "Node.js globals defined before are gone") || plainResult(evs) != "'undefined'" {
		t.Fatalf("javascript after a restart: %+v", dn)
	}
	evs = h2.submitRec(ioproto.Record{CommandID: "r-1", Language: ioproto.LanguageR, Code: "1"})
	if dn := wantDone(t, evs, ioproto.StatusOK); dn.StateLost {
		t.Fatalf("R, never used before the restart, reported lost state: %+v", dn)
	}
}

// TestOutputCapLocal: the per-command output cap holds for the new kernels.
func TestOutputCapLocal(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		testenv.Unavailable(t, "python3 is not installed")
	}
	var d *Driver
	h := startDriver(t, t.TempDir(), func(dd *Driver) { d = dd; dd.cfg.MaxOutput = 64 << 10 })
	for _, tc := range []struct{ lang, code string }{
		{ioproto.LanguageJavaScript, "for (let i = 0; i < 4000; i++) console.log('x'.repeat(100)); 'after'"},
		{ioproto.LanguageR, "for (i in 1:4000) cat(strrep('x', 100), '\\n'); 'after'"},
	} {
		needLanguage(t, h, d, tc.lang)
		evs := h.submitRec(ioproto.Record{CommandID: tc.lang + "-cap", Language: tc.lang, Code: tc.code})
		dn := wantDone(t, evs, ioproto.StatusOK)
		if out := len(textOf(evs, ioproto.EventStdout)); !dn.OutputTruncated || out > 64<<10 {
			t.Fatalf("%s: %d bytes of stdout, truncated %v; want at most 64 KiB and truncated", tc.lang, out, dn.OutputTruncated)
		}
	}
}

// bigLines are lines from to to-1 of the large outputs below: each a tag
// and its number, then 60000 x.
func bigLines(tag string, from, to int) string {
	var b strings.Builder
	x := strings.Repeat("x", 60000)
	for i := from; i < to; i++ {
		fmt.Fprintf(&b, "<%s%d>%s\n", tag, i, x)
	}
	return b.String()
}

// firstDiff describes where got first differs from want, for a failure
// message that does not print megabytes.
func firstDiff(got, want string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	excerpt := func(s string) string {
		s = s[i:min(len(s), i+60)]
		return strings.ReplaceAll(s, strings.Repeat("x", 40), "x…")
	}
	return fmt.Sprintf("%d bytes, want %d; first difference at byte %d: got %q, want %q", len(got), len(want), i, excerpt(got), excerpt(want))
}

// bigCase is a command printing far more than a pipe holds.
type bigCase struct {
	name, code string
	// before, if set, runs as a command of its own before code.
	before         string
	stdout, stderr string
	result         string // text/plain of the result, "" for none
}

// childLines is Python code printing bigLines(tag, from, to) on stdout, for
// a child process of a kernel.
func childLines(tag string, from, to int) string {
	return fmt.Sprintf(`import sys
for i in range(%d, %d): sys.stdout.write("<%s%%d>" %% i + "x" * 60000 + "\n")`, from, to, tag)
}

// nonBlocking is Python code for a child process that leaves the stdout
// and stderr it inherited non-blocking, as a Node.js child killed by
// SIGKILL does (O_NONBLOCK belongs to the pipe, which the kernel shares).
const nonBlocking = "import os; os.set_blocking(1, False); os.set_blocking(2, False)"

// TestLargeOutputOrderLocal: every kernel's markers follow all of the
// command's output, even when the output is far more than a pipe holds.
// 150 lines of 60 KB (9 MB, under the 16 MiB cap) all arrive, in order,
// before the result and done, with status OK; the next command gets
// exactly its own output; an output over the cap is reported truncated,
// not silently cut. The same for stdout and stderr interleaved, for
// children writing to the stdout they inherit, after a child left the
// pipes non-blocking and, in JavaScript, for process.stdout.write with
// callbacks, one large write, fs.writeSync to fd 1, a worker thread and a
// corked stream; bash's done likewise follows its output. (Issue 22, item
// 6: Node queued stdout writes in memory once the pipe was full while its
// markers went out with writeSync and overtook them.)
func TestLargeOutputOrderLocal(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		testenv.Unavailable(t, "python3 is not installed")
	}
	var d *Driver
	h := startDriver(t, t.TempDir(), func(dd *Driver) { d = dd; dd.cfg.MaxOutput = 16 << 20 })
	a150, o100, e100 := bigLines("A", 0, 150), bigLines("O", 0, 100), bigLines("E", 0, 100)
	for _, tc := range []struct {
		lang string
		// print prints bigLines("A", 0, n), then gives 'end' as its result
		// (end as the language shows it); it defines the global s, 60000 x,
		// which the cases in more use. own prints "B-own\n".
		print    func(n int) string
		end, own string
		more     []bigCase
	}{
		{ioproto.LanguageJavaScript, func(n int) string {
			return fmt.Sprintf("const s = 'x'.repeat(60000); for (let i = 0; i < %d; i++) console.log('<A' + i + '>' + s); 'end'", n)
		}, "'end'", "console.log('B-own')", []bigCase{
			{name: "console.error interleaved", code: "for (let i = 0; i < 100; i++) { console.log('<O' + i + '>' + s); console.error('<E' + i + '>' + s) }",
				stdout: o100, stderr: e100},
			{name: "write callbacks", code: "let n = 0; for (let i = 0; i < 150; i++) process.stdout.write('<A' + i + '>' + s + '\\n', () => n++); await new Promise(r => setImmediate(r)); n",
				stdout: a150, result: "150"},
			{name: "one large write", code: "process.stdout.write(Array.from({ length: 150 }, (_, i) => '<A' + i + '>' + s + '\\n').join(''))",
				stdout: a150},
			{name: "fs.writeSync to fd 1", code: "require('node:fs').writeSync(1, Array.from({ length: 150 }, (_, i) => '<A' + i + '>' + s + '\\n').join(''))",
				stdout: a150},
			{name: "worker thread awaited", code: "const { Worker } = require('node:worker_threads'); await new Promise(r => new Worker(\"for (let i = 0; i < 150; i++) console.log('<A' + i + '>' + 'x'.repeat(60000))\", { eval: true }).on('exit', r))",
				stdout: a150},
			{name: "fs.writeSync after a child left the pipes non-blocking", before: "require('node:child_process').execFileSync('python3', ['-c', " + strconv.Quote(nonBlocking) + "], { stdio: 'inherit' })",
				code:   "const fs = require('node:fs'); for (let i = 0; i < 100; i++) { fs.writeSync(1, '<O' + i + '>' + s + '\\n'); fs.writeSync(2, '<E' + i + '>' + s + '\\n') }",
				stdout: o100, stderr: e100},
			{name: "corked", code: "process.stdout.cork(); for (let i = 0; i < 150; i++) process.stdout.write('<A' + i + '>' + s + '\\n')",
				stdout: a150},
			{name: "child inheriting stdout", code: "import { execFileSync } from 'node:child_process'\nconsole.log('<A0>' + s)\nexecFileSync('python3', ['-c', " + strconv.Quote(childLines("A", 1, 150)) + "], { stdio: 'inherit' })",
				stdout: a150},
			{name: "child awaited", code: "import { spawn } from 'node:child_process'\nconsole.log('<A0>' + s)\nawait new Promise((res, rej) => spawn('python3', ['-c', " + strconv.Quote(childLines("A", 1, 150)) + "], { stdio: 'inherit' }).on('close', res).on('error', rej))",
				stdout: a150},
		}},
		{ioproto.LanguagePython, func(n int) string {
			return fmt.Sprintf("s = 'x' * 60000\nfor i in range(%d): print('<A%%d>' %% i + s)\n'end'", n)
		}, "'end'", "print('B-own')", []bigCase{
			{name: "stderr interleaved", code: "import sys\nfor i in range(100):\n    print('<O%d>' % i + s)\n    print('<E%d>' % i + s, file=sys.stderr)",
				stdout: o100, stderr: e100},
			{name: "child inheriting stdout", code: "import subprocess, sys\nprint('<A0>' + s, flush=True)\nsubprocess.run([sys.executable, '-c', " + strconv.Quote(childLines("A", 1, 150)) + "], check=True)",
				stdout: a150},
			{name: "after a child left the pipes non-blocking", before: "import subprocess, sys\nsubprocess.run([sys.executable, '-c', " + strconv.Quote(nonBlocking) + "], check=True)",
				code:   "import sys\nfor i in range(100):\n    print('<O%d>' % i + s)\n    print('<E%d>' % i + s, file=sys.stderr)",
				stdout: o100, stderr: e100},
		}},
		{ioproto.LanguageR, func(n int) string {
			return fmt.Sprintf("s <- strrep('x', 60000)\nfor (i in seq_len(%d) - 1) cat('<A', i, '>', s, '\\n', sep = '')\n'end'", n)
		}, `[1] "end"`, "cat('B-own\\n')", []bigCase{
			{name: "stderr interleaved", code: "for (i in 0:99) { cat('<O', i, '>', s, '\\n', sep = ''); cat('<E', i, '>', s, '\\n', sep = '', file = stderr()) }",
				stdout: o100, stderr: e100},
			{name: "child inheriting stdout", code: "cat('<A0>', s, '\\n', sep = '')\ninvisible(system2('python3', c('-c', shQuote(" + strconv.Quote(childLines("A", 1, 150)) + "))))",
				stdout: a150},
			{name: "after a child left the pipes non-blocking", before: "invisible(system2('python3', c('-c', shQuote(" + strconv.Quote(nonBlocking) + "))))",
				code:   "for (i in 0:99) { cat('<O', i, '>', s, '\\n', sep = ''); cat('<E', i, '>', s, '\\n', sep = '', file = stderr()) }",
				stdout: o100, stderr: e100},
		}},
		{ioproto.LanguageJava, func(n int) string {
			return fmt.Sprintf("String s = \"x\".repeat(60000);\nfor (int i = 0; i < %d; i++) System.out.println(\"<A\" + i + \">\" + s);\n\"end\"", n)
		}, `"end"`, "System.out.println(\"B-own\")", []bigCase{
			{name: "System.err interleaved", code: "for (int i = 0; i < 100; i++) { System.out.println(\"<O\" + i + \">\" + s); System.err.println(\"<E\" + i + \">\" + s); }",
				stdout: o100, stderr: e100},
			{name: "child inheriting stdout", code: "System.out.println(\"<A0>\" + s);\nnew ProcessBuilder(\"python3\", \"-c\", " + strconv.Quote(childLines("A", 1, 150)) + ").inheritIO().start().waitFor()",
				stdout: a150, result: "0"},
		}},
		// bash has no markers and no result: its done follows the end of
		// its output (EOF on both pipes).
		{ioproto.LanguageBash, func(n int) string {
			return fmt.Sprintf("s=$(printf '%%60000s' '' | tr ' ' x)\nfor ((i = 0; i < %d; i++)); do printf '<A%%d>%%s\\n' $i \"$s\"; done", n)
		}, "", "echo B-own", []bigCase{
			{name: "stderr interleaved", code: "s=$(printf '%60000s' '' | tr ' ' x)\nfor ((i = 0; i < 100; i++)); do printf '<O%d>%s\\n' $i \"$s\"; printf '<E%d>%s\\n' $i \"$s\" >&2; done",
				stdout: o100, stderr: e100},
		}},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			needLanguage(t, h, d, tc.lang)
			n := 0
			run := func(code string) []ioproto.Event {
				n++
				return h.submitRec(ioproto.Record{CommandID: fmt.Sprintf("%s-%d", tc.lang, n), Language: tc.lang, Code: code, TimeoutMS: 60000})
			}
			own := func(after string) {
				t.Helper()
				evs := run(tc.own)
				if got, errText := textOf(evs, ioproto.EventStdout), textOf(evs, ioproto.EventStderr); got != "B-own\n" || errText != "" {
					t.Errorf("after %s: the next command's stdout is %s; its stderr %d bytes; want exactly its own output", after, firstDiff(got, "B-own\n"), len(errText))
				}
				if st := evs[len(evs)-1].Status; st != ioproto.StatusOK {
					t.Errorf("after %s: the next command's status %q", after, st)
				}
			}
			check := func(c bigCase) {
				t.Helper()
				if c.before != "" {
					if evs := run(c.before); evs[len(evs)-1].Status != ioproto.StatusOK {
						t.Errorf("%s: the command before failed: %+v", c.name, evs)
					}
				}
				evs := run(c.code)
				dn := evs[len(evs)-1]
				if dn.Status != ioproto.StatusOK || dn.OutputTruncated || dn.Reason != "" {
					t.Errorf("%s: done status %q, truncated %v, reason %q; want ok, nothing truncated", c.name, dn.Status, dn.OutputTruncated, dn.Reason)
				}
				if got := textOf(evs, ioproto.EventStdout); got != c.stdout {
					t.Errorf("%s: stdout %s", c.name, firstDiff(got, c.stdout))
				}
				if got := textOf(evs, ioproto.EventStderr); got != c.stderr {
					t.Errorf("%s: stderr %s", c.name, firstDiff(got, c.stderr))
				}
				if c.result != "" {
					// The result follows all of the output.
					last, result := -1, -1
					for i, e := range evs {
						switch e.Type {
						case ioproto.EventStdout, ioproto.EventStderr:
							last = i
						case ioproto.EventResult:
							result = i
						}
					}
					if got := plainResult(evs); got != c.result || result < last {
						t.Errorf("%s: result %q is event %d, the last output event %d; want %q after all output", c.name, got, result, last, c.result)
					}
				}
				own(c.name)
			}

			check(bigCase{name: "150 lines of 60 KB", code: tc.print(150), stdout: a150, result: tc.end})
			for _, c := range tc.more {
				check(c)
			}

			// 300 lines (18 MB) pass the 16 MiB cap.
			evs := run(tc.print(300))
			dn := evs[len(evs)-1]
			got, all := textOf(evs, ioproto.EventStdout), bigLines("A", 0, 300)
			if dn.Status != ioproto.StatusOK || !dn.OutputTruncated || !strings.Contains(dn.Reason, "output truncated at the 16 MiB limit") ||
				!strings.Contains(textOf(evs, ioproto.EventStderr), "[sandbox: output truncated") {
				t.Errorf("18 MB of output over a 16 MiB cap: done status %q, truncated %v, reason %q, stderr %q; want ok, reported truncated", dn.Status, dn.OutputTruncated, dn.Reason, textOf(evs, ioproto.EventStderr))
			}
			if len(got) < 16<<20-64<<10 || !strings.HasPrefix(all, got) {
				t.Errorf("stdout of 18 MB cut at 16 MiB: %s; want the first 16 MiB of it", firstDiff(got, all[:min(len(all), len(got))]))
			}
			own("18 MB")
		})
	}
}
