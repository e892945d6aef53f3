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
