package driver

import (
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/ioproto"
)

// TestJavaKernelLocal runs the JShell kernel with the host's JDK
// (openjdk-17-jdk-headless): definitions across cells, output order, the
// last expression as result, compile errors and exceptions, the
// environment, a timeout and an interrupt that keep the definitions, and
// an idle SIGINT that neither kills the kernel nor hits the next cell.
func TestJavaKernelLocal(t *testing.T) {
	h, d := startLangDriver(t)
	needLanguage(t, h, d, ioproto.LanguageJava)
	java := func(id, code string, env map[string]string) []ioproto.Event {
		t.Helper()
		return h.submitRec(ioproto.Record{CommandID: id, Language: ioproto.LanguageJava, Code: code, Env: env, TimeoutMS: 60000})
	}

	evs := java("j1", "import java.util.*;\nint x = 20;\nint twice(int a) { return a * 2; }\nclass Box { int v; Box(int v) { this.v = v; } int get() { return v + 1; } }", nil)
	dn := wantDone(t, evs, ioproto.StatusOK)
	if len(evsOf(evs, ioproto.EventResult)) != 0 {
		t.Fatalf("declarations gave a result: %+v", evs)
	}
	if dn.ExecutionCount == nil || *dn.ExecutionCount != 1 {
		t.Fatalf("execution_count %v", dn.ExecutionCount)
	}
	evs = java("j2", "List<Integer> l = new ArrayList<>(List.of(1, 2));\nSystem.out.println(\"out1\");\nSystem.err.println(\"err1\");\nSystem.out.print(\"out2\");\ntwice(x) + new Box(1).get() + l.size()", nil)
	wantDone(t, evs, ioproto.StatusOK)
	if got := plainResult(evs); got != "44" {
		t.Fatalf("definitions across cells: result %q; events %+v", got, evs)
	}
	var order []string
	for _, e := range evs {
		if e.Type == ioproto.EventStdout || e.Type == ioproto.EventStderr || e.Type == ioproto.EventResult {
			order = append(order, e.Type+":"+e.Text)
		}
	}
	if got := strings.Join(order, "|"); got != "stdout:out1\n|stderr:err1\n|stdout:out2|result:" {
		t.Fatalf("output order %q", got)
	}
	if got := plainResult(java("j3", "\"s\" + x", nil)); got != `"s20"` {
		t.Fatalf("string result %q", got)
	}
	if got := plainResult(java("j3b", "x", nil)); got != "20" {
		t.Fatalf("a variable alone: %q", got)
	}
	for i, code := range []string{"x = 3 * 7;", "int y = 1;", "System.out.println(1)", "void m() {}"} {
		if r := evsOf(java("j-nores-"+strconv.Itoa(i), code, nil), ioproto.EventResult); len(r) != 0 {
			t.Fatalf("%q gave a result: %+v", code, r)
		}
	}

	evs = java("j4", "int ok = 1;\nint bad = undefinedThing + 1;\nSystem.out.println(\"never\");", nil)
	wantDone(t, evs, ioproto.StatusError)
	errs := evsOf(evs, ioproto.EventError)
	if len(errs) != 1 || errs[0].EName != "CompilationError" || !strings.Contains(errs[0].EValue, "cannot find symbol") ||
		!strings.Contains(strings.Join(errs[0].Traceback, ""), "<cell-") || !strings.Contains(strings.Join(errs[0].Traceback, ""), ">:2: error") ||
		textOf(evs, ioproto.EventStdout) != "" {
		t.Fatalf("compile error: %+v", evs)
	}

	evs = java("j5", "int div(int a) { return a / 0; }\n\ndiv(x)", nil)
	wantDone(t, evs, ioproto.StatusError)
	errs = evsOf(evs, ioproto.EventError)
	if len(errs) != 1 || errs[0].EName != "java.lang.ArithmeticException" || errs[0].EValue != "/ by zero" {
		t.Fatalf("exception: %+v", errs)
	}
	tb := strings.Join(errs[0].Traceback, "")
	cellN := "<cell-" + strconv.Itoa(int(*evs[len(evs)-1].ExecutionCount)) + ">"
	if !strings.Contains(tb, "java.lang.ArithmeticException: / by zero\n") || !strings.Contains(tb, "at div("+cellN+":1)") || !strings.Contains(tb, "("+cellN+":3)") {
		t.Fatalf("traceback %q", tb)
	}
	evs = java("j5b", "throw new IllegalStateException(\"outer\", new RuntimeException(\"inner\"));", nil)
	errs = evsOf(evs, ioproto.EventError)
	if len(errs) != 1 || errs[0].EName != "java.lang.IllegalStateException" || !strings.Contains(strings.Join(errs[0].Traceback, ""), "Caused by: java.lang.RuntimeException: inner") {
		t.Fatalf("cause: %+v", errs)
	}

	evs = java("j6", "System.out.println(System.getenv(\"SBX_NEW\") + \" \" + new String(new ProcessBuilder(\"sh\", \"-c\", \"echo $SBX_NEW\").start().getInputStream().readAllBytes()).strip())", map[string]string{"SBX_NEW": "v1"})
	if got := textOf(evs, ioproto.EventStdout); got != "v1 v1\n" {
		t.Fatalf("env: stdout %q; %+v", got, evs)
	}
	if got := plainResult(java("j7", "System.getenv(\"SBX_NEW\")", nil)); got != "null" {
		t.Fatalf("env not restored: %q", got)
	}

	// A busy loop times out; the definitions stay.
	evs = h.submitRec(ioproto.Record{CommandID: "j8", Language: ioproto.LanguageJava, Code: "int before = 1;\nwhile (true) { x = x; }", TimeoutMS: 1500})
	if dn := wantDone(t, evs, ioproto.StatusTimeout); dn.StateLost {
		t.Fatalf("timeout lost state: %+v", dn)
	}
	if errs := evsOf(evs, ioproto.EventError); len(errs) != 1 || errs[0].EName != "Interrupted" {
		t.Fatalf("timeout error %+v", errs)
	}
	// The command right after runs whole: the stop was for the cell that
	// timed out only.
	evs = java("j8b", "System.out.println(\"after\");\nThread.sleep(300);\nx", nil)
	if textOf(evs, ioproto.EventStdout) != "after\n" || plainResult(evs) != "21" {
		t.Fatalf("the command after a timeout: %+v", evs)
	}
	// A sleep is interrupted on request.
	h.appendRecord(ioproto.Record{Type: ioproto.KindExec, CommandID: "j9", Language: ioproto.LanguageJava, Code: "System.out.println(\"sleeping\");\nThread.sleep(600000);"})
	h.waitRunning("j9")
	h.appendRecord(ioproto.Record{Type: ioproto.KindInterrupt, CommandID: "j9"})
	evs = h.wait("j9")
	if dn := wantDone(t, evs, ioproto.StatusInterrupted); dn.StateLost {
		t.Fatalf("interrupt lost state: %+v", dn)
	}
	evs = java("j10", "ProcessHandle.current().pid() + \":\" + (twice(x) + before)", nil)
	wantDone(t, evs, ioproto.StatusOK)
	pidText, val, _ := strings.Cut(strings.Trim(plainResult(evs), `"`), ":")
	if val != "43" {
		t.Fatalf("after the timeout and the interrupt: %+v", evs)
	}
	// An idle SIGINT is ignored.
	pid, err := strconv.Atoi(pidText)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitDelivered(t, pid)
	evs = java("j11", "x", nil)
	if dn := wantDone(t, evs, ioproto.StatusOK); dn.StateLost || plainResult(evs) != "21" {
		t.Fatalf("after an idle SIGINT: %+v", evs)
	}
}
