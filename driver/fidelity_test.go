package driver_test

import (
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/ioproto"
)

// fidelityVariants are the runtimes the fidelity suite runs under: runc and,
// where installed, gVisor (the wake mode is not what these tests are about).
func fidelityVariants(t *testing.T) map[string]boxOptions {
	v := map[string]boxOptions{"runc": {}}
	if hasRuntime("runsc") {
		v["runsc"] = boxOptions{runtime: "runsc"}
	} else {
		t.Log("gVisor (runsc) is not registered with Docker; its variant is not run")
	}
	return v
}

// TestDriverFidelity covers what users coming from Jupyter-style code
// interpreters rely on: exit codes, whole-line output, execution counts,
// structured results and !shell lines.
func TestDriverFidelity(t *testing.T) {
	requireDocker(t)
	for name, opts := range fidelityVariants(t) {
		t.Run(name, func(t *testing.T) {
			b := startBox(t, opts)

			t.Run("every bash command reports its exit code, 0 included", func(t *testing.T) {
				d := expectStatus(t, b.wait(b.submit("bash", "true", 0)), ioproto.StatusOK, false)
				if d.ExitCode == nil || *d.ExitCode != 0 {
					t.Fatalf("bash true: exit code = %v, want present and 0", d.ExitCode)
				}
				d = expectStatus(t, b.wait(b.submit("bash", "exit 3", 0)), ioproto.StatusError, false)
				if d.ExitCode == nil || *d.ExitCode != 3 {
					t.Fatalf("bash exit 3: exit code = %v", d.ExitCode)
				}
				if d := expectStatus(t, b.py("1"), ioproto.StatusOK, false); d.ExitCode != nil {
					t.Fatalf("python: exit code = %d, want absent", *d.ExitCode)
				}
			})

			t.Run("python done carries the kernel's execution count", func(t *testing.T) {
				count := func(evs []ioproto.Event) int64 {
					t.Helper()
					d := done(t, evs)
					if d.ExecutionCount == nil {
						t.Fatalf("no execution_count: %s", dump(evs))
					}
					return *d.ExecutionCount
				}
				first := count(b.py("1"))
				if n := count(b.py("raise ValueError('counted too')")); n != first+1 {
					t.Fatalf("after an error cell: %d, want %d", n, first+1)
				}
				if n := count(b.py("def broken(:")); n != first+2 {
					t.Fatalf("after a syntax error: %d, want %d", n, first+2)
				}
				if d := done(t, b.wait(b.submit("bash", "true", 0))); d.ExecutionCount != nil {
					t.Fatalf("bash: execution_count = %d, want absent", *d.ExecutionCount)
				}
				if n := count(b.py("2")); n != first+3 {
					t.Fatalf("bash counted as a cell: %d, want %d", n, first+3)
				}
				// A restarted kernel counts from 1 again.
				if d := done(t, b.py("import os\nos._exit(1)")); d.ExecutionCount != nil || !d.StateLost {
					t.Fatalf("a kernel death: %+v", d)
				}
				if n := count(b.py("3")); n != 1 {
					t.Fatalf("first cell of a new kernel: %d, want 1", n)
				}
			})

			t.Run("a print arrives as one stdout event", func(t *testing.T) {
				const n = 200
				split := 0
				for i := range n {
					evs := b.py(`print("x")`)
					expectStatus(t, evs, ioproto.StatusOK, false)
					outs := ofType(evs, ioproto.EventStdout)
					if len(outs) != 1 || outs[0].Text != "x\n" {
						split++
						if split <= 3 {
							t.Errorf("print %d: stdout events %s", i, dump(outs))
						}
					}
				}
				t.Logf("%d of %d single prints split into more than one event", split, n)

				// Many lines with a flush between each: one event per line.
				evs := b.py("import sys\nfor i in range(200):\n    print('line', i, flush=True)")
				expectStatus(t, evs, ioproto.StatusOK, false)
				for _, e := range ofType(evs, ioproto.EventStdout) {
					if !strings.HasSuffix(e.Text, "\n") {
						t.Fatalf("a flushed line was split: %q", e.Text)
					}
				}

				// A partial line that stays partial is not held back until
				// the line ends: it arrives while the command still sleeps.
				id := b.submit("python", "import sys, time\nsys.stdout.write('partial'); sys.stdout.flush()\ntime.sleep(1)\nprint('!')", 0)
				evs = b.until(id, "the partial line", func(evs []ioproto.Event) bool { return strings.Contains(stdout(evs), "partial") })
				if isDone(evs) || strings.Contains(stdout(evs), "!") {
					t.Fatalf("the partial line only arrived with the rest of the command: %s", dump(evs))
				}
				evs = b.wait(id)
				outs := ofType(evs, ioproto.EventStdout)
				if len(outs) != 2 || outs[0].Text != "partial" || outs[1].Text != "!\n" {
					t.Fatalf("partial line then the rest: %s", dump(outs))
				}

				// The same holds for bash.
				id = b.submit("bash", "printf partial; sleep 1; echo '!'", 0)
				evs = b.until(id, "bash's partial line", func(evs []ioproto.Event) bool { return strings.Contains(stdout(evs), "partial") })
				if isDone(evs) || strings.Contains(stdout(evs), "!") {
					t.Fatalf("bash's partial line only arrived with the rest: %s", dump(evs))
				}
			})
		})
	}
}
