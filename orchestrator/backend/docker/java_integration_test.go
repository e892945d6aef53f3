package docker

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// javaEvents sorts a command's events: the text of stdout and stderr in
// the order it came, the result's text/plain, the errors and done.
type javaEvents struct {
	order  []string // "stdout:…", "stderr:…", "result:…", "error:…"
	result string
	errs   []core.Event
	done   core.Event
	wake   *ioproto.HibResult
}

func sortJava(t *testing.T, evs []core.Event) javaEvents {
	t.Helper()
	var j javaEvents
	for _, e := range evs {
		switch e.Type {
		case ioproto.EventStarted:
			j.wake = e.Wake
		case ioproto.EventStdout, ioproto.EventStderr:
			j.order = append(j.order, e.Type+":"+e.Text)
		case ioproto.EventResult:
			j.result = e.Data["text/plain"]
			j.order = append(j.order, "result:"+j.result)
		case ioproto.EventError:
			j.errs = append(j.errs, e)
			j.order = append(j.order, "error:"+e.EName)
		}
	}
	j.done = lastDone(t, evs)
	return j
}

// TestIntegrationJava runs the Java kernel (JShell) in a real container of
// the image: started at the first Java command, definitions (a variable,
// a method, a class, an import) kept across commands, stdout and stderr in
// order, the last expression as result, a compile error and an exception
// as errors with their text, a timeout and an interrupt that keep the
// definitions, a second context of language java with its own JShell, and
// a wake after hibernation that names the Java definitions lost.
func TestIntegrationJava(t *testing.T) {
	m, _, _ := integrationManager(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	res, err := m.Acquire(ctx, "it-java", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Sandbox.ID
	mustRunOK(t, m, id, "python", "1")
	java := func(code string) javaEvents {
		t.Helper()
		return sortJava(t, runCommand(t, m, id, core.ExecRequest{Language: ioproto.LanguageJava, Code: code}))
	}
	wantOK := func(what string, j javaEvents) {
		t.Helper()
		if j.done.Status != ioproto.StatusOK {
			t.Fatalf("%s: status %s (%s); events %v %+v", what, j.done.Status, j.done.Reason, j.order, j.errs)
		}
	}

	// Cold: the first Java command starts the JVM and JShell.
	start := time.Now()
	j := java("1 + 1")
	cold := time.Since(start)
	wantOK("first command", j)
	if j.result != "2" {
		t.Fatalf("1 + 1 = %q", j.result)
	}
	start = time.Now()
	j = java("2 + 2")
	warm := time.Since(start)
	t.Logf("first Java result in a running sandbox: %s (JVM and JShell start included); the next: %s", cold.Round(time.Millisecond), warm.Round(time.Millisecond))
	t.Logf("the Java kernel's RSS after two cells: %s KiB", strings.TrimSpace(mustRunOK(t, m, id, "bash", "ps -o rss= -C java")))

	j = java("import java.util.stream.*;\nint base = 20;\nint twice(int a) { return a * 2; }\nrecord Pair(int a, int b) { int sum() { return a + b; } }")
	wantOK("definitions", j)
	if j.result != "" || len(j.order) != 0 {
		t.Fatalf("definitions gave output %v", j.order)
	}
	j = java("System.out.println(\"one\");\nSystem.err.println(\"two\");\nSystem.out.println(\"three\");\ntwice(base) + new Pair(1, 1).sum() + IntStream.of(0).sum()")
	wantOK("use", j)
	if got := strings.Join(j.order, "|"); got != "stdout:one\n|stderr:two\n|stdout:three\n|result:42" {
		t.Fatalf("definitions across commands, output order: %q", got)
	}

	j = java("int y = base +;")
	if j.done.Status != ioproto.StatusError || len(j.errs) != 1 || j.errs[0].EName != "CompilationError" ||
		!strings.Contains(j.errs[0].EValue, "illegal start of expression") || !strings.Contains(strings.Join(j.errs[0].Traceback, ""), "int y = base +;") {
		t.Fatalf("compile error: %s %+v", j.done.Status, j.errs)
	}
	j = java("String s = null;\ns.length()")
	if j.done.Status != ioproto.StatusError || len(j.errs) != 1 || j.errs[0].EName != "java.lang.NullPointerException" ||
		!strings.Contains(strings.Join(j.errs[0].Traceback, ""), "java.lang.NullPointerException") {
		t.Fatalf("exception: %s %+v", j.done.Status, j.errs)
	}

	evs := runCommand(t, m, id, core.ExecRequest{Language: ioproto.LanguageJava, Code: "base = 21;\nwhile (true) { base = base + 0; }", Timeout: 2 * time.Second})
	if j = sortJava(t, evs); j.done.Status != ioproto.StatusTimeout || j.done.StateLost {
		t.Fatalf("busy loop: %s (state lost %v, %s)", j.done.Status, j.done.StateLost, j.done.Reason)
	}
	cid, err := m.Submit(ctx, core.ExecRequest{SandboxID: id, Language: ioproto.LanguageJava, Code: "System.out.println(\"sleeping\");\nThread.sleep(600_000);"})
	if err != nil {
		t.Fatal(err)
	}
	status := ""
	if err := m.Follow(ctx, id, cid, 0, func(e core.Event) error {
		switch e.Type {
		case ioproto.EventStdout:
			return m.Interrupt(ctx, id, cid)
		case ioproto.EventDone:
			status = e.Status
			if e.StateLost {
				t.Errorf("interrupt lost state: %s", e.Reason)
			}
		}
		return nil
	}); err != nil || status != ioproto.StatusInterrupted {
		t.Fatalf("sleep: Follow %v, status %q; want interrupted", err, status)
	}
	if j = java("twice(base)"); j.result != "42" {
		t.Fatalf("after the timeout and the interrupt: %v %+v", j.order, j.errs)
	}

	// A context of language java has its own JShell.
	c, err := m.CreateContext(ctx, id, ioproto.LanguageJava, "")
	if err != nil {
		t.Fatal(err)
	}
	if c.Language != ioproto.LanguageJava {
		t.Fatalf("context %+v", c)
	}
	j = sortJava(t, runCommand(t, m, id, core.ExecRequest{ContextID: c.ID, Code: "int base = 1; base"}))
	if j.done.Status != ioproto.StatusOK || j.result != "1" {
		t.Fatalf("java context: %v %+v", j.order, j.errs)
	}
	if j = java("base"); j.result != "21" {
		t.Fatalf("the default context's base after the other context's: %q", j.result)
	}

	// Hibernation keeps Python's globals, not Java's: the wake says so.
	if _, err := m.Hibernate(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Wake(ctx, id); err != nil {
		t.Fatal(err)
	}
	j = java("base")
	if j.wake == nil || !slices.ContainsFunc(j.wake.Lost, func(l ioproto.LostName) bool { return l.Name == "(java globals)" }) {
		t.Fatalf("wake %+v; want (java globals) lost", j.wake)
	}
	if !j.done.StateLost || !strings.Contains(j.done.Reason, "Java globals defined before are gone") || j.done.Status != ioproto.StatusError {
		t.Fatalf("first Java command after the wake: %s, state lost %v (%s)", j.done.Status, j.done.StateLost, j.done.Reason)
	}
	if j = java("int base = 5; twice(1)"); j.done.Status != ioproto.StatusError {
		t.Fatalf("methods defined before the hibernation: %v", j.order)
	}
	if j = java("base"); j.result != "5" {
		t.Fatalf("a fresh JShell after the wake: %v %+v", j.order, j.errs)
	}
}
