package driver

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

// These tests run the driver in-process with the host's interpreters, as
// languages_test.go does. The driver sets an env record's variables in its
// own process environment, which the test binary shares: every variable
// they use starts with SBXENV_ and is removed again when the test ends.

// cleanSandboxEnv removes the SBXENV_ variables from the process
// environment when t ends (after its drivers stopped: register it first).
func cleanSandboxEnv(t *testing.T) {
	t.Helper()
	unset := func() {
		for _, kv := range os.Environ() {
			if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "SBXENV_") {
				os.Unsetenv(k)
			}
		}
	}
	unset()
	t.Cleanup(unset)
}

// envRecord appends an env record.
func (h *driverHarness) envRecord(id string, env map[string]string) {
	h.t.Helper()
	h.record(ioproto.EnvRecord(id, env))
}

// appendLine appends a raw line to the log, as a forged or broken record.
func (h *driverHarness) appendLine(line string) {
	h.t.Helper()
	if err := ioproto.AppendLine(filepath.Join(h.io, ioproto.StdinFile), []byte(line+"\n")); err != nil {
		h.t.Fatal(err)
	}
}

// out waits for command id and returns its stdout, failing unless it
// ended ok.
func (h *driverHarness) out(id string) string {
	h.t.Helper()
	evs := h.wait(id)
	expectDone(h.t, evs, ioproto.StatusOK)
	return stdoutOf(evs)
}

const (
	pyEnv   = "import os\nprint(os.environ.get('SBXENV_A', 'unset'), os.environ.get('SBXENV_B', 'unset'))"
	bashEnv = "echo ${SBXENV_A:-unset} ${SBXENV_B:-unset}"
)

// TestSandboxEnvPythonBashLocal: an env record's variables reach every
// Python and bash command after it in the log (os.environ, a shell line, a
// subprocess), also one queued behind a busy command, and none before it,
// neither the one running nor those queued; a command's own env overrides
// them for that command only, and they are back after it; a later record
// overrides key by key; a valid record gets no events file.
func TestSandboxEnvPythonBashLocal(t *testing.T) {
	cleanSandboxEnv(t)
	h, _ := startLangDriver(t)

	// A running Python command and queued ones, all before the record.
	h.submit("run-before", ioproto.LanguagePython, waitForFile("go")+"\n"+pyEnv)
	h.waitRunning("run-before")
	h.submit("py-before", ioproto.LanguagePython, pyEnv)
	h.submit("bash-before", ioproto.LanguageBash, bashEnv)
	h.envRecord("sbx-env-1", map[string]string{"SBXENV_A": "1", "SBXENV_B": "two words"})
	h.submit("py-after", ioproto.LanguagePython, pyEnv+"\nimport subprocess\nprint(subprocess.run('echo sub:$SBXENV_A', shell=True, capture_output=True, text=True).stdout.strip())\n!echo shell:$SBXENV_B")
	h.submit("bash-after", ioproto.LanguageBash, bashEnv)
	if err := os.WriteFile(filepath.Join(h.ws, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := h.out("run-before"); got != "waiting\nsaw it\nunset unset\n" {
		t.Fatalf("the command running when the record came: stdout %q, want the variables unset", got)
	}
	if got := h.out("py-before"); got != "unset unset\n" {
		t.Fatalf("a Python command queued before the record: stdout %q, want the variables unset", got)
	}
	if got := h.out("bash-before"); got != "unset unset\n" {
		t.Fatalf("a bash command queued before the record: stdout %q, want the variables unset", got)
	}
	if got := h.out("py-after"); got != "1 two words\nsub:1\nshell:two words\n" {
		t.Fatalf("a Python command after the record: stdout %q", got)
	}
	if got := h.out("bash-after"); got != "1 two words\n" {
		t.Fatalf("a bash command after the record: stdout %q", got)
	}
	if _, err := os.Stat(filepath.Join(h.io, ioproto.OutDir, ioproto.EventsFileName("sbx-env-1"))); !os.IsNotExist(err) {
		t.Fatalf("the env record has an events file (stat: %v); it is no command", err)
	}

	// A command's own env wins for that command, then the sandbox's is back.
	over := map[string]string{"SBXENV_A": "mine"}
	h.record(ioproto.Record{Type: ioproto.KindExec, CommandID: "py-own", Language: ioproto.LanguagePython, Code: pyEnv, Env: over})
	h.record(ioproto.Record{Type: ioproto.KindExec, CommandID: "bash-own", Language: ioproto.LanguageBash, Code: bashEnv, Env: over})
	h.submit("py-back", ioproto.LanguagePython, pyEnv)
	h.submit("bash-back", ioproto.LanguageBash, bashEnv)
	for id, want := range map[string]string{"py-own": "mine two words\n", "bash-own": "mine two words\n", "py-back": "1 two words\n", "bash-back": "1 two words\n"} {
		if got := h.out(id); got != want {
			t.Errorf("%s: stdout %q, want %q (a command's env over the sandbox's, then restored to it)", id, got, want)
		}
	}

	// A later record overrides key by key.
	h.envRecord("sbx-env-2", map[string]string{"SBXENV_B": "2"})
	h.submit("py-2", ioproto.LanguagePython, pyEnv)
	h.submit("bash-2", ioproto.LanguageBash, bashEnv)
	for id, want := range map[string]string{"py-2": "1 2\n", "bash-2": "1 2\n"} {
		if got := h.out(id); got != want {
			t.Errorf("%s after a second record: stdout %q, want %q", id, got, want)
		}
	}
	if got := os.Getenv("SBXENV_B"); got != "2" {
		t.Errorf("the driver's own environment has SBXENV_B=%q, want 2", got)
	}
}

// TestSandboxEnvNodeRLocal: the Node.js and R kernels, started before the
// record (at their first command), get its variables for good before the
// next command after it, for process.env / Sys.getenv and the processes
// they start; a command's own env overrides them once.
func TestSandboxEnvNodeRLocal(t *testing.T) {
	cleanSandboxEnv(t)
	h, d := startLangDriver(t)
	needLanguage(t, h, d, ioproto.LanguageJavaScript)
	needLanguage(t, h, d, ioproto.LanguageR)
	js := "import { execSync } from 'node:child_process'\nconsole.log(process.env.SBXENV_A ?? 'unset', execSync('echo ${SBXENV_A:-unset}').toString().trim())"
	r := "cat(Sys.getenv('SBXENV_A', 'unset'), system('echo ${SBXENV_A:-unset}', intern = TRUE), '\\n')"
	exec := func(id, lang, code string, env map[string]string) {
		h.record(ioproto.Record{Type: ioproto.KindExec, CommandID: id, Language: lang, Code: code, Env: env, TimeoutMS: 20000})
	}
	exec("js-before", ioproto.LanguageJavaScript, js, nil)
	exec("r-before", ioproto.LanguageR, r, nil)
	if got := h.out("js-before"); got != "unset unset\n" {
		t.Fatalf("javascript before the record: %q", got)
	}
	if got := h.out("r-before"); got != "unset unset \n" {
		t.Fatalf("R before the record: %q", got)
	}
	h.envRecord("sbx-env-1", map[string]string{"SBXENV_A": "1"})
	exec("js-after", ioproto.LanguageJavaScript, js, nil)
	exec("ts-after", ioproto.LanguageTypeScript, "const v: string = process.env.SBXENV_A ?? 'unset'; console.log(v)", nil)
	exec("r-after", ioproto.LanguageR, r, nil)
	exec("js-own", ioproto.LanguageJavaScript, js, map[string]string{"SBXENV_A": "mine"})
	exec("r-own", ioproto.LanguageR, r, map[string]string{"SBXENV_A": "mine"})
	exec("js-back", ioproto.LanguageJavaScript, js, nil)
	exec("r-back", ioproto.LanguageR, r, nil)
	for _, c := range []struct{ id, want string }{
		{"js-after", "1 1\n"}, {"ts-after", "1\n"}, {"r-after", "1 1 \n"},
		{"js-own", "mine mine\n"}, {"r-own", "mine mine \n"},
		{"js-back", "1 1\n"}, {"r-back", "1 1 \n"},
	} {
		if got := h.out(c.id); got != c.want {
			t.Errorf("%s: stdout %q, want %q", c.id, got, c.want)
		}
	}
}

// TestSandboxEnvContextsLocal: contexts created before and after the
// record get its variables for their commands after it, also a command
// queued in a context whose kernel is busy when the record comes; a
// command queued there before the record does not.
func TestSandboxEnvContextsLocal(t *testing.T) {
	cleanSandboxEnv(t)
	// With the binary's output cap, as in contexts_test.go: commands run
	// in parallel here.
	h := startDriverIn(t, t.TempDir(), t.TempDir())
	h.mustOp("op-1", ioproto.ContextCreate, "early", ioproto.LanguagePython, "")
	h.submitIn("early", "busy", ioproto.LanguagePython, waitForFile("go"))
	h.waitRunning("busy")
	h.submitIn("early", "early-before", ioproto.LanguagePython, pyEnv)
	h.envRecord("sbx-env-1", map[string]string{"SBXENV_A": "1", "SBXENV_B": "2"})
	h.submitIn("early", "early-after", ioproto.LanguagePython, pyEnv)
	h.submitIn("early", "early-bash", ioproto.LanguageBash, bashEnv)
	h.mustOp("op-2", ioproto.ContextCreate, "late", ioproto.LanguagePython, "")
	h.submitIn("late", "late-py", ioproto.LanguagePython, pyEnv)
	h.submitIn("late", "late-bash", ioproto.LanguageBash, bashEnv)
	// The late context runs while the early one is still busy.
	for id, want := range map[string]string{"late-py": "1 2\n", "late-bash": "1 2\n"} {
		if got := h.out(id); got != want {
			t.Errorf("%s (context created after the record): stdout %q, want %q", id, got, want)
		}
	}
	if err := os.WriteFile(filepath.Join(h.ws, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"busy": "waiting\nsaw it\n", "early-before": "unset unset\n", "early-after": "1 2\n", "early-bash": "1 2\n"} {
		if got := h.out(id); got != want {
			t.Errorf("%s (context created before the record): stdout %q, want %q", id, got, want)
		}
	}
	// A context restarted after the record: its fresh kernel has them.
	h.mustOp("op-3", ioproto.ContextRestart, "early", "", "")
	h.submitIn("early", "early-restarted", ioproto.LanguagePython, pyEnv)
	if got := h.out("early-restarted"); got != "1 2\n" {
		t.Errorf("after a restart of the context: stdout %q", got)
	}
}

// TestSandboxEnvSurvivesRestartLocal: a restarted driver on the same /io
// applies the env records before its saved offset again, before it runs
// anything (the default context's warm kernel included), and those after
// it in order.
func TestSandboxEnvSurvivesRestartLocal(t *testing.T) {
	cleanSandboxEnv(t)
	h, _ := startLangDriver(t)
	h.envRecord("sbx-env-1", map[string]string{"SBXENV_A": "1", "SBXENV_B": "b"})
	h.envRecord("sbx-env-2", map[string]string{"SBXENV_A": "one"})
	h.submit("first", ioproto.LanguagePython, pyEnv)
	if got := h.out("first"); got != "one b\n" {
		t.Fatalf("before the restart: stdout %q", got)
	}
	h.stop()
	// A new driver process starts without them; so does this one.
	for _, k := range []string{"SBXENV_A", "SBXENV_B"} {
		os.Unsetenv(k)
	}

	h2 := startDriver(t, h.io, func(*Driver) {})
	h2.submit("py-restarted", ioproto.LanguagePython, pyEnv)
	h2.submit("bash-restarted", ioproto.LanguageBash, bashEnv)
	for id, want := range map[string]string{"py-restarted": "one b\n", "bash-restarted": "one b\n"} {
		if got := h2.out(id); got != want {
			t.Errorf("%s after a driver restart: stdout %q, want %q", id, got, want)
		}
	}
	if got := os.Getenv("SBXENV_A"); got != "one" {
		t.Errorf("the restarted driver's own environment has SBXENV_A=%q, want one", got)
	}
	var st ioproto.State
	if err := ioproto.ReadJSONFile(filepath.Join(h.io, ioproto.StateFile), &st); err != nil || st.Offset == 0 {
		t.Fatalf("state.json: %+v, %v", st, err)
	}
}

// TestSandboxEnvRefusedRecordsLocal: an env record breaking the rules (a
// bad name, a driver-internal variable, a sandbox environment past the
// bounds) changes nothing and is answered under its command ID like any
// malformed record.
func TestSandboxEnvRefusedRecordsLocal(t *testing.T) {
	cleanSandboxEnv(t)
	h, _ := startLangDriver(t)
	big := map[string]string{}
	for i := range ioproto.MaxEnvVars - 1 {
		big[fmt.Sprint("SBXENV_N", i)] = "x"
	}
	h.envRecord("sbx-env-big", big)
	h.appendLine(`{"type":"env","command_id":"bad-name","env":{"SBXENV_X=Y":"1","SBXENV_A":"1"}}`)
	h.appendLine(`{"type":"env","command_id":"pool-var","env":{"` + ioproto.EnvPoolDriver + `":"1","SBXENV_A":"1"}}`)
	h.appendLine(`{"type":"env","command_id":"max-output","env":{"` + ioproto.EnvMaxOutput + `":"1"}}`)
	// 255 variables and these two would be 257.
	h.envRecord("too-many", map[string]string{"SBXENV_A": "1", "SBXENV_B": "1"})
	h.submit("after", ioproto.LanguageBash, "echo ${SBXENV_A:-unset} ${SBXENV_N7:-unset} ${SANDBOX_POOL_DRIVER:-unset} ${SANDBOX_MAX_OUTPUT:-unset}")
	for id, want := range map[string]string{"bad-name": "contains '='", "pool-var": "driver reads for its own control", "max-output": "driver reads for its own control", "too-many": "env bounds"} {
		evs := h.wait(id)
		dn := expectDone(t, evs, ioproto.StatusError)
		errs := evsOf(evs, ioproto.EventError)
		if len(errs) != 1 || errs[0].EName != ioproto.MalformedRecordName || !strings.Contains(errs[0].EValue, want) || !strings.Contains(dn.Reason, "not run") {
			t.Errorf("%s: want a MalformedRecord answer saying %q; events %+v", id, want, evs)
		}
	}
	if got := h.out("after"); got != "unset x unset unset\n" {
		t.Fatalf("after refused env records: stdout %q, want only the valid record's variables", got)
	}
	if v, ok := os.LookupEnv(ioproto.EnvPoolDriver); ok {
		t.Fatalf("the driver's environment has %s=%q from a refused record", ioproto.EnvPoolDriver, v)
	}
}

// TestSandboxEnvAdoptionLocal: a pool driver adopted by a sandbox's /io
// applies that sandbox's env records before it runs anything, also in
// the kernel it keeps (the pool's Python kernel, started without them).
func TestSandboxEnvAdoptionLocal(t *testing.T) {
	cleanSandboxEnv(t)
	base := t.TempDir()
	a, b := filepath.Join(base, "a"), filepath.Join(base, "b")
	for _, d := range []string{a + "/io", a + "/ws", b + "/io", b + "/ws"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// B: a sandbox shaped by an env record, then stopped.
	hb := startDriverIn(t, b+"/io", b+"/ws")
	hb.envRecord("sbx-env-1", map[string]string{"SBXENV_A": "woken"})
	hb.submit("c1", ioproto.LanguageBash, bashEnv)
	if got := hb.out("c1"); got != "woken unset\n" {
		t.Fatalf("B before the adoption: %q", got)
	}
	hb.stop()
	os.Unsetenv("SBXENV_A") // the pool container's driver never had it

	ioLink, wsLink := filepath.Join(base, "io"), filepath.Join(base, "ws")
	swapLink(t, a+"/io", ioLink)
	swapLink(t, a+"/ws", wsLink)
	if err := os.WriteFile(filepath.Join(a, "io", ioproto.StdinFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- Serve(ctx, Config{IODir: ioLink, Workspace: wsLink, Wake: "inotify", MaxOutput: 16 << 20, Pool: true,
			Logger: slog.New(slog.NewTextHandler(io2testLog{t}, nil))})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Serve did not return within 30s of its context's end")
		}
	})
	ha := &driverHarness{t: t, io: ioLink, ws: wsLink}
	// The harness waits on /io/out: it exists once the pool driver started.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(a, "io", ioproto.DriverStatusFile)); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the pool driver wrote no driver.json within 30s")
		}
	}
	ha.submit("pid", ioproto.LanguagePython, "import os\nprint(os.getpid(), os.environ.get('SBXENV_A', 'unset'))\ndel os")
	pool := strings.Fields(ha.out("pid"))
	if len(pool) != 2 || pool[1] != "unset" {
		t.Fatalf("the pool driver's kernel: %q", pool)
	}

	swapLink(t, b+"/io", ioLink)
	swapLink(t, b+"/ws", wsLink)
	line, err := ioproto.EncodeRecord(ioproto.Record{Type: ioproto.KindAdopt, CommandID: "sbx-adopt-1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ioproto.AppendLine(filepath.Join(a, "io", ioproto.StdinFile), line); err != nil {
		t.Fatal(err)
	}
	hb = &driverHarness{t: t, io: ioLink, ws: wsLink}
	hb.submit("c2", ioproto.LanguagePython, "import os\nprint(os.getpid(), os.environ.get('SBXENV_A', 'unset'))")
	hb.submit("c3", ioproto.LanguageBash, bashEnv)
	if got, want := hb.out("c2"), pool[0]+" woken\n"; got != want {
		t.Errorf("the kept kernel after the adoption: stdout %q, want %q (same process, B's variables)", got, want)
	}
	if got := hb.out("c3"); got != "woken unset\n" {
		t.Errorf("bash after the adoption: stdout %q", got)
	}
}
