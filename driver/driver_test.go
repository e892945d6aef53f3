package driver_test

import (
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

// variants are the environments the whole behaviour suite runs in: the
// default runtime with inotify, the same with the polling fallback forced,
// and gVisor (where installed), where the driver must find the fallback by
// itself.
func variants(t *testing.T) map[string]boxOptions {
	v := map[string]boxOptions{
		"runc":      {},
		"runc-poll": {env: []string{"SANDBOX_WAKE=poll"}},
	}
	if hasRuntime("runsc") {
		v["runsc"] = boxOptions{runtime: "runsc"}
	} else {
		t.Log("gVisor (runsc) is not registered with Docker; its variant is not run")
	}
	return v
}

func TestDriverBehaviour(t *testing.T) {
	requireDocker(t)
	for name, opts := range variants(t) {
		t.Run(name, func(t *testing.T) {
			b := startBox(t, opts)
			runBehaviourSuite(t, b, name)
		})
	}
}

func runBehaviourSuite(t *testing.T, b *box, variant string) {
	t.Run("wake mode", func(t *testing.T) {
		b.py("1") // the driver has started once a command ran
		st := b.driverStatus()
		want := "inotify"
		if variant != "runc" {
			want = "poll"
		}
		if st.Wake != want {
			t.Fatalf("driver wake mode = %q, want %q", st.Wake, want)
		}
	})

	t.Run("state persists and the last expression is the result", func(t *testing.T) {
		expectStatus(t, b.py("x = 21"), ioproto.StatusOK, false)
		evs := b.py("x * 2")
		expectStatus(t, evs, ioproto.StatusOK, false)
		if got := result(t, evs)["text/plain"]; got != "42" {
			t.Fatalf("x * 2 = %q, want 42", got)
		}
		if got := stdout(b.py("print(x)")); got != "21\n" {
			t.Fatalf("print(x) printed %q", got)
		}
		evs = b.py("def f(a):\n    return a + x\nclass C: pass\nimport math")
		expectStatus(t, evs, ioproto.StatusOK, false)
		if got := result(t, b.py("f(1), C.__name__, math.pi > 3"))["text/plain"]; got != "(22, 'C', True)" {
			t.Fatalf("functions/classes/imports did not persist: %q", got)
		}
		if ofType(b.py("y = 5"), ioproto.EventResult) != nil {
			t.Fatal("an assignment produced a result")
		}
	})

	t.Run("output at the file-descriptor level", func(t *testing.T) {
		evs := b.py(`import os, subprocess, sys
os.system("echo hi")
subprocess.run(["echo", "from-subprocess"])
sys.stderr.write("to stderr\n")`)
		expectStatus(t, evs, ioproto.StatusOK, false)
		if got := stdout(evs); got != "hi\nfrom-subprocess\n" {
			t.Fatalf("stdout = %q", got)
		}
		var errText string
		for _, e := range ofType(evs, ioproto.EventStderr) {
			errText += e.Text
		}
		if errText != "to stderr\n" {
			t.Fatalf("stderr = %q", errText)
		}
	})

	t.Run("output streams while the command runs", func(t *testing.T) {
		id := b.submit("python", "import time\nfor i in range(3):\n    print('line', i)\n    time.sleep(1)", 0)
		evs := b.until(id, "first line", func(evs []ioproto.Event) bool { return strings.Contains(stdout(evs), "line 0") })
		if isDone(evs) {
			t.Fatalf("the first line only appeared together with done: %s", dump(evs))
		}
		evs = b.wait(id)
		if got := stdout(evs); got != "line 0\nline 1\nline 2\n" {
			t.Fatalf("stdout = %q", got)
		}
		if n := len(ofType(evs, ioproto.EventStdout)); n < 3 {
			t.Fatalf("want the lines as separate chunks, got %d chunks", n)
		}
	})

	t.Run("errors have name, value and the user's traceback", func(t *testing.T) {
		evs := b.py("def g():\n    return undefined_name\ng()")
		expectStatus(t, evs, ioproto.StatusError, false)
		errs := ofType(evs, ioproto.EventError)
		if len(errs) != 1 || errs[0].EName != "NameError" || !strings.Contains(errs[0].EValue, "undefined_name") {
			t.Fatalf("error events: %s", dump(evs))
		}
		tb := strings.Join(errs[0].Traceback, "")
		if !strings.Contains(tb, "return undefined_name") || strings.Contains(tb, "kernel.py") {
			t.Fatalf("traceback should show the user's code and no kernel frames:\n%s", tb)
		}
		evs = b.py("def broken(:\n    pass")
		if errs := ofType(evs, ioproto.EventError); len(errs) != 1 || errs[0].EName != "SyntaxError" {
			t.Fatalf("syntax error: %s", dump(evs))
		}
	})

	t.Run("SystemExit and KeyboardInterrupt end the command, not the kernel", func(t *testing.T) {
		b.py("kept = 'still here'")
		for _, code := range []string{"import sys; sys.exit(3)", "raise KeyboardInterrupt", "raise SystemExit('bye')", "exit()"} {
			evs := b.py(code)
			if d := done(t, evs); d.StateLost || d.Status == ioproto.StatusKilled {
				t.Fatalf("%s lost the kernel: %s", code, dump(evs))
			}
		}
		if got := result(t, b.py("kept"))["text/plain"]; got != "'still here'" {
			t.Fatalf("globals after exits: %q", got)
		}
	})

	t.Run("rich output", func(t *testing.T) {
		evs := b.py("import pandas as pd\ndf = pd.DataFrame({'a': [1, 2], 'b': [3, 4]})\ndf")
		expectStatus(t, evs, ioproto.StatusOK, false)
		res := result(t, evs)
		if !strings.Contains(res["text/html"], "<table") || !strings.Contains(res["text/plain"], "a  b") {
			t.Fatalf("DataFrame result: %v", res)
		}

		evs = b.py("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nprint('plotted')")
		expectStatus(t, evs, ioproto.StatusOK, false)
		disp := ofType(evs, ioproto.EventDisplay)
		if len(disp) != 1 {
			t.Fatalf("want one figure display, got: %s", dump(evs))
		}
		expectPNG(t, disp[0])
		if got := ofType(b.py("plt.get_fignums()"), ioproto.EventResult); len(got) != 1 || got[0].Data["text/plain"] != "[]" {
			t.Fatalf("figures were not closed after capture: %s", dump(got))
		}

		evs = b.py("from PIL import Image\nImage.new('RGB', (40, 30), 'red')")
		expectPNG(t, ofType(evs, ioproto.EventResult)[0])

		// Image.show() displays the image where the code is, as plt.show()
		// does (there is no viewer to hand it to); so does ImageShow.show.
		evs = b.py("from PIL import Image, ImageShow\nprint('before')\nImage.new('RGB', (40, 30), 'blue').show()\n" +
			"print('between')\nshown = ImageShow.show(Image.new('L', (8, 8)), title='t')\nprint('after', shown)")
		expectStatus(t, evs, ioproto.StatusOK, false)
		if disp := ofType(evs, ioproto.EventDisplay); len(disp) != 2 {
			t.Fatalf("Image.show() and ImageShow.show(): want two displays, got: %s", dump(evs))
		} else {
			expectPNG(t, disp[0])
			expectPNG(t, disp[1])
		}
		if out := stdout(evs); out != "before\nbetween\nafter True\n" {
			t.Fatalf("stdout %q", out)
		}

		// Prints and displays travel through different pipes; the driver
		// must still emit them in the order the code produced them.
		evs = b.py("import matplotlib.pyplot as plt\nfor i in range(20):\n    print('p', i)\n    display(i)\nprint('before-show')\nplt.plot([1])\nplt.show()\nprint('after-show')")
		var order []string
		var text strings.Builder
		flushText := func() {
			for _, l := range strings.Split(strings.TrimSuffix(text.String(), "\n"), "\n") {
				if l != "" {
					order = append(order, l)
				}
			}
			text.Reset()
		}
		for _, e := range evs {
			switch e.Type {
			case ioproto.EventStdout:
				text.WriteString(e.Text)
			case ioproto.EventDisplay:
				flushText()
				if _, ok := e.Data["image/png"]; ok {
					order = append(order, "figure")
				} else {
					order = append(order, "d "+e.Data["text/plain"])
				}
			}
		}
		flushText()
		var want []string
		for i := range 20 {
			want = append(want, "p "+strconv.Itoa(i), "d "+strconv.Itoa(i))
		}
		want = append(want, "before-show", "figure", "after-show")
		if strings.Join(order, "|") != strings.Join(want, "|") {
			t.Fatalf("output out of order:\n got %v\nwant %v", order, want)
		}

		evs = b.py("import plotly.graph_objects as go\ngo.Figure(go.Bar(y=[1, 2]))")
		if html := result(t, evs)["text/html"]; !strings.Contains(html, "plotly") {
			t.Fatalf("plotly figure has no HTML: %s", dump(evs))
		}
	})

	t.Run("files changed in the workspace are listed", func(t *testing.T) {
		evs := b.py("open('report.csv', 'w').write('a,b\\n1,2\\n')")
		d := expectStatus(t, evs, ioproto.StatusOK, false)
		if len(d.Files) != 1 || d.Files[0].Path != "report.csv" || d.Files[0].Size != 8 {
			t.Fatalf("done.files = %+v", d.Files)
		}
		if b, err := os.ReadFile(filepath.Join(b.ws, "report.csv")); err != nil || string(b) != "a,b\n1,2\n" {
			t.Fatalf("file on the host: %q, %v", b, err)
		}
	})

	t.Run("timeout interrupts and keeps globals", func(t *testing.T) {
		b.py("counter = 7")
		id := b.submit("python", "while True:\n    pass", 2*time.Second)
		evs := b.wait(id)
		d := expectStatus(t, evs, ioproto.StatusTimeout, false)
		if !strings.Contains(d.Reason, "timed out") {
			t.Fatalf("reason = %q", d.Reason)
		}
		if got := result(t, b.py("counter"))["text/plain"]; got != "7" {
			t.Fatalf("globals after timeout: %q", got)
		}
	})

	t.Run("interrupt record stops the running command", func(t *testing.T) {
		id := b.submit("python", "import time\nprint('sleeping', flush=True)\ntime.sleep(60)", 0)
		b.until(id, "first output", func(evs []ioproto.Event) bool { return strings.Contains(stdout(evs), "sleeping") })
		b.appendRaw(`{"type":"interrupt","command_id":"` + id + `"}` + "\n")
		expectStatus(t, b.wait(id), ioproto.StatusInterrupted, false)
		if got := result(t, b.py("counter"))["text/plain"]; got != "7" {
			t.Fatalf("globals after interrupt: %q", got)
		}
	})

	t.Run("a command that ignores SIGINT is killed and the kernel replaced", func(t *testing.T) {
		id := b.submit("python", "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass", time.Second)
		d := expectStatus(t, b.wait(id), ioproto.StatusKilled, true)
		if !strings.Contains(d.Reason, "SIGINT") {
			t.Fatalf("reason = %q", d.Reason)
		}
		evs := b.py("counter")
		if errs := ofType(evs, ioproto.EventError); len(errs) != 1 || errs[0].EName != "NameError" {
			t.Fatalf("a fresh kernel should not know old globals: %s", dump(evs))
		}
		if got := result(t, b.py("1 + 1"))["text/plain"]; got != "2" {
			t.Fatalf("fresh kernel: %q", got)
		}
	})

	t.Run("kernel death is reported and a fresh kernel follows", func(t *testing.T) {
		b.py("z = 1")
		evs := b.py("import os\nprint('bye', flush=True)\nos._exit(1)")
		d := expectStatus(t, evs, ioproto.StatusKilled, true)
		if !strings.Contains(d.Reason, "exited with code 1") || stdout(evs) != "bye\n" {
			t.Fatalf("os._exit: reason %q, stdout %q", d.Reason, stdout(evs))
		}
		evs = b.py("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
		d = expectStatus(t, evs, ioproto.StatusKilled, true)
		if !strings.Contains(d.Reason, "likely out of memory") {
			t.Fatalf("SIGKILL from outside: reason %q", d.Reason)
		}
		if got := result(t, b.py("2 + 2"))["text/plain"]; got != "4" {
			t.Fatalf("after kernel death: %q", got)
		}
	})

	t.Run("bash streams its output", func(t *testing.T) {
		id := b.submit("bash", "for i in 1 2 3; do echo \"n=$i\"; sleep 0.5; done\npwd", 0)
		evs := b.until(id, "first line", func(evs []ioproto.Event) bool { return strings.Contains(stdout(evs), "n=1") })
		if isDone(evs) {
			t.Fatalf("bash output only appeared with done: %s", dump(evs))
		}
		evs = b.wait(id)
		expectStatus(t, evs, ioproto.StatusOK, false)
		if got := stdout(evs); got != "n=1\nn=2\nn=3\n/workspace\n" {
			t.Fatalf("bash stdout = %q", got)
		}
		d := expectStatus(t, b.wait(b.submit("bash", "echo oops >&2; exit 3", 0)), ioproto.StatusError, false)
		if d.ExitCode == nil || *d.ExitCode != 3 {
			t.Fatalf("exit code = %v", d.ExitCode)
		}
		expectStatus(t, b.wait(b.submit("bash", "sleep 30", time.Second)), ioproto.StatusTimeout, false)
	})

	t.Run("large artifacts go to files", func(t *testing.T) {
		evs := b.py("'x' * 300000")
		res := ofType(evs, ioproto.EventResult)
		if len(res) != 1 || res[0].Refs["text/plain"] == "" {
			t.Fatalf("a 300 kB result should be an artifact: %s", dump(evs))
		}
		data, err := os.ReadFile(filepath.Join(b.io, ioproto.OutDir, res[0].Refs["text/plain"]))
		if err != nil || len(data) != 300002 {
			t.Fatalf("artifact: %d bytes, %v", len(data), err)
		}
	})
}

func expectPNG(t *testing.T, e ioproto.Event) {
	t.Helper()
	png, err := base64.StdEncoding.DecodeString(e.Data["image/png"])
	if err != nil || len(png) < 8 || string(png[1:4]) != "PNG" {
		t.Fatalf("event %d has no PNG image: %v (keys %v)", e.Seq, err, keys(e.Data))
	}
}

func keys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// TestDriverProtocolRobustness covers the log's edge cases and restarts.
func TestDriverProtocolRobustness(t *testing.T) {
	b := startBox(t, boxOptions{})

	t.Run("a line written in two parts runs once, when complete", func(t *testing.T) {
		b.appendRaw(`{"type":"exec","command_id":"half","code":"half_count = globals().get('half_count', 0) + 1`)
		// The pause is the scenario (a writer stalled mid-line), not
		// synchronisation: nothing may run while the line is incomplete.
		time.Sleep(300 * time.Millisecond)
		if evs := b.readEvents("half"); evs != nil {
			t.Fatalf("a half-written record ran: %s", dump(evs))
		}
		b.appendRaw(`\nprint(half_count)"}` + "\n")
		evs := b.wait("half")
		if got := stdout(evs); got != "1\n" {
			t.Fatalf("half-written command printed %q", got)
		}
	})

	t.Run("malformed lines are skipped and reported", func(t *testing.T) {
		b.appendRaw("this is not json\n")
		b.appendRaw(`{"type":"exec","command_id":"bad-lang","language":"cobol","code":"x"}` + "\n")
		b.appendRaw(`{"type":"exec","command_id":"bad-json","code":` + "\n")
		for _, id := range []string{"bad-lang", "bad-json"} {
			evs := b.wait(id)
			expectStatus(t, evs, ioproto.StatusError, false)
			if errs := ofType(evs, ioproto.EventError); len(errs) != 1 || errs[0].EName != ioproto.MalformedRecordName {
				t.Fatalf("%s: %s", id, dump(evs))
			}
		}
		if got := result(t, b.py("'alive'"))["text/plain"]; got != "'alive'" {
			t.Fatalf("driver after malformed lines: %q", got)
		}
		logs, _ := exec.Command("docker", "logs", b.container).CombinedOutput()
		if !strings.Contains(string(logs), "skipping malformed record") {
			t.Fatalf("the unreadable line was not logged:\n%s", logs)
		}
	})

	t.Run("a duplicate command ID never runs again", func(t *testing.T) {
		b.py("runs = 0")
		line := `{"type":"exec","command_id":"once","code":"runs += 1\nruns"}` + "\n"
		b.appendRaw(line)
		b.wait("once")
		b.appendRaw(line)
		if got := result(t, b.py("runs"))["text/plain"]; got != "1" {
			t.Fatalf("runs = %s after a duplicate record", got)
		}
	})

	t.Run("driver restart re-runs nothing", func(t *testing.T) {
		// Counters live in the workspace, which survives the restart.
		counter := "import pathlib\np = pathlib.Path('count-%s')\np.write_text(str(int(p.read_text() if p.exists() else 0) + 1))\nprint(p.read_text(), flush=True)"
		first := b.wait(b.submit("python", strings.ReplaceAll(counter, "%s", "a"), 0))
		expectStatus(t, first, ioproto.StatusOK, false)
		b.py("before_restart = True")
		long := b.submit("python", strings.ReplaceAll(counter, "%s", "b")+"\nimport time\ntime.sleep(60)", 0)
		b.until(long, "first output", func(evs []ioproto.Event) bool { return stdout(evs) != "" })

		boot := b.driverStatus().Boot
		pid := b.driverStatus().PID
		// Kill the driver the way a crash would; the container's restart
		// policy brings it back on the same /io.
		if out, err := exec.Command("docker", "exec", b.container, "kill", "-9", strconv.Itoa(pid)).CombinedOutput(); err != nil {
			t.Fatalf("kill driver: %v: %s", err, out)
		}
		evs := b.wait(long)
		d := expectStatus(t, evs, ioproto.StatusKilled, true)
		if !strings.Contains(d.Reason, "restarted") {
			t.Fatalf("reason = %q", d.Reason)
		}
		if st := b.driverStatus(); st.Boot != boot+1 {
			t.Fatalf("driver boot = %d, want %d", st.Boot, boot+1)
		}
		evs = b.py("print(open('count-a').read(), open('count-b').read())")
		if got := stdout(evs); got != "1 1\n" {
			t.Fatalf("after restart the counters are %q; something ran twice", got)
		}
		// The first Python command after the restart says the globals are gone.
		if d := done(t, evs); !d.StateLost {
			t.Fatalf("first command after a restart should report state_lost: %s", dump(evs))
		}
		if evs := b.readEvents(long); len(ofType(evs, ioproto.EventStarted)) != 1 {
			t.Fatalf("the interrupted command was started again: %s", dump(evs))
		}
	})

	t.Run("container restart re-runs nothing", func(t *testing.T) {
		before := len(b.readEvents("half"))
		if out, err := exec.Command("docker", "restart", "-t", "1", b.container).CombinedOutput(); err != nil {
			t.Fatalf("docker restart: %v: %s", err, out)
		}
		evs := b.py("print(open('count-a').read())")
		if got := stdout(evs); got != "1\n" {
			t.Fatalf("counter after container restart = %q", got)
		}
		if after := len(b.readEvents("half")); after != before {
			t.Fatalf("events of an old command changed across the restart: %d -> %d", before, after)
		}
	})
}

// TestDriverOutputCap runs commands that print far more than the cap: the
// command still finishes normally, its events stay small, and it says what
// happened.
func TestDriverOutputCap(t *testing.T) {
	b := startBox(t, boxOptions{env: []string{"SANDBOX_MAX_OUTPUT=1048576"}})
	for name, cmd := range map[string][2]string{
		"python": {"python", "import sys\nline = 'x' * 1023 + '\\n'\nfor _ in range(50_000):\n    sys.stdout.write(line)\n'finished'"},
		"bash":   {"bash", "yes 0123456789 | head -c 50000000; echo; echo finished >&2"},
	} {
		t.Run(name, func(t *testing.T) {
			id := b.submit(cmd[0], cmd[1], 0)
			evs := b.wait(id)
			d := expectStatus(t, evs, ioproto.StatusOK, false)
			if !d.OutputTruncated || !strings.Contains(d.Reason, "output truncated at the 1 MiB limit") {
				t.Fatalf("done = %+v", d)
			}
			if n := len(stdout(evs)); n > 1<<20 || n < 1<<19 {
				t.Fatalf("stdout kept %d bytes, want up to the 1 MiB cap", n)
			}
			var notice bool
			for _, e := range ofType(evs, ioproto.EventStderr) {
				notice = notice || strings.Contains(e.Text, "output truncated")
			}
			if !notice {
				t.Fatal("no truncation notice on stderr")
			}
			info, err := os.Stat(filepath.Join(b.io, ioproto.OutDir, ioproto.EventsFileName(id)))
			if err != nil || info.Size() > 2<<20 {
				t.Fatalf("events file is %d bytes (%v); the cap should bound it", info.Size(), err)
			}
		})
	}
	if got := result(t, b.py("1 + 1"))["text/plain"]; got != "2" {
		t.Fatalf("sandbox after a flood of output: %q", got)
	}
}

// TestDriverSurvivesForkBomb fills the container's pids limit from user
// code. The bomb must end with its command (timeout, or killed with a fresh
// kernel) while the driver itself keeps running: no restart, and the next
// command works.
func TestDriverSurvivesForkBomb(t *testing.T) {
	b := startBox(t, boxOptions{pids: 96})
	b.py("1")
	boot := b.driverStatus().Boot
	bombs := map[string][2]string{
		"bash":   {"bash", ":(){ :|:& };:\nsleep 10"},
		"python": {"python", "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"},
	}
	for _, name := range []string{"bash", "python"} {
		t.Run(name, func(t *testing.T) {
			id := b.submit(bombs[name][0], bombs[name][1], 2*time.Second)
			d := done(t, b.wait(id))
			if d.Status != ioproto.StatusTimeout && d.Status != ioproto.StatusKilled {
				t.Fatalf("fork bomb ended with %q: %+v", d.Status, d)
			}
			if st := b.driverStatus(); st.Boot != boot {
				t.Fatalf("the driver restarted (boot %d -> %d); it must outlive the bomb", boot, st.Boot)
			}
			// Only init, the driver, the kernel and this pipeline may remain; zombies
			// are init's to reap and hold nothing but their pid until then.
			psEvents := b.wait(b.submit("bash", "ps -e --no-headers -o stat= | grep -vc Z", 0))
			out := stdout(psEvents)
			if n, err := strconv.Atoi(strings.TrimSpace(out)); err != nil || n > 9 {
				t.Fatalf("%q processes left after the bomb's command ended (%v): %s", out, err, dump(psEvents))
			}
			if got := result(t, b.py("6 * 7"))["text/plain"]; got != "42" {
				t.Fatalf("sandbox after a fork bomb: %q", got)
			}
		})
	}
}
