package driver_test

import (
	"encoding/json"
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

			t.Run("DataFrames and figures carry their data", func(t *testing.T) {
				evs := b.py("import pandas as pd\npd.DataFrame({'a': [1.5, None], 'b': ['x', 'y']})")
				expectStatus(t, evs, ioproto.StatusOK, false)
				var table struct {
					Schema struct {
						Fields     []struct{ Name, Type string }
						PrimaryKey []string
					}
					Data      []map[string]any
					Truncated *struct{ Rows int }
				}
				res := result(t, evs)
				if err := json.Unmarshal([]byte(res["application/vnd.dataresource+json"]), &table); err != nil {
					t.Fatalf("table data: %v in %v", err, res)
				}
				if len(table.Schema.Fields) != 3 || table.Schema.Fields[1].Name != "a" || table.Schema.Fields[1].Type != "number" ||
					len(table.Data) != 2 || table.Data[0]["a"] != 1.5 || table.Data[1]["a"] != nil || table.Data[1]["b"] != "y" || table.Truncated != nil {
					t.Fatalf("table data: %+v", table)
				}
				if !strings.Contains(res["text/html"], "<table") {
					t.Fatalf("the HTML rendering is gone: %v", keys(res))
				}
				res = result(t, b.py("pd.DataFrame({'n': range(2500)})"))
				table.Truncated = nil
				if err := json.Unmarshal([]byte(res["application/vnd.dataresource+json"]), &table); err != nil ||
					len(table.Data) != 1000 || table.Truncated == nil || table.Truncated.Rows != 2500 {
					t.Fatalf("a long table: %v, %d rows, truncated %+v", err, len(table.Data), table.Truncated)
				}

				type chart struct {
					Type, Title, XLabel, YLabel string
					Series                      []struct {
						Label  string
						Points [][2]any
					}
					Bars []struct {
						Label any
						Value float64
					}
					Slices []struct {
						Label    string
						Fraction float64
					}
					Boxes []struct {
						Label  string
						Median float64
					}
					Charts []json.RawMessage
				}
				figure := func(code string) chart {
					t.Helper()
					evs := b.py("import matplotlib.pyplot as plt\n" + code)
					expectStatus(t, evs, ioproto.StatusOK, false)
					disp := ofType(evs, ioproto.EventDisplay)
					if len(disp) != 1 {
						t.Fatalf("want one figure: %s", dump(evs))
					}
					expectPNG(t, disp[0])
					var c chart
					raw := strings.NewReplacer(`"x_label"`, `"XLabel"`, `"y_label"`, `"YLabel"`).Replace(disp[0].Data["application/vnd.sandboxd.chart+json"])
					if err := json.Unmarshal([]byte(raw), &c); err != nil {
						t.Fatalf("chart of %q: %v in %s", code, err, dump(disp))
					}
					return c
				}
				c := figure("plt.plot([1, 2, 3], [4, 5, 6], label='up')\nplt.title('T')\nplt.xlabel('X')\nplt.ylabel('Y')")
				if c.Type != "line" || c.Title != "T" || c.XLabel != "X" || c.YLabel != "Y" || len(c.Series) != 1 ||
					c.Series[0].Label != "up" || len(c.Series[0].Points) != 3 || c.Series[0].Points[2][1] != 6.0 {
					t.Fatalf("line chart: %+v", c)
				}
				c = figure("plt.bar(['a', 'b'], [3, 4])")
				if c.Type != "bar" || len(c.Bars) != 2 || c.Bars[1].Label != "b" || c.Bars[1].Value != 4 {
					t.Fatalf("bar chart: %+v", c)
				}
				c = figure("plt.scatter([1, 2], [3, 4])")
				if c.Type != "scatter" || len(c.Series) != 1 || len(c.Series[0].Points) != 2 {
					t.Fatalf("scatter chart: %+v", c)
				}
				c = figure("plt.pie([1, 3], labels=['x', 'y'])")
				if c.Type != "pie" || len(c.Slices) != 2 || c.Slices[1].Label != "y" || c.Slices[1].Fraction != 0.75 {
					t.Fatalf("pie chart: %+v", c)
				}
				c = figure("plt.boxplot([[1, 2, 3, 4, 5]], labels=['p'])")
				if c.Type != "box" || len(c.Boxes) != 1 || c.Boxes[0].Label != "p" || c.Boxes[0].Median != 3 {
					t.Fatalf("box chart: %+v", c)
				}
				c = figure("fig, (a, b) = plt.subplots(1, 2)\na.plot([1, 2])\nb.bar([1], [2])")
				if c.Type != "composite" || len(c.Charts) != 2 {
					t.Fatalf("two charts: %+v", c)
				}
				// A figure whose chart cannot be read still shows.
				evs = b.py("import matplotlib.pyplot as plt\nplt.imshow([[1, 2], [3, 4]])\nplt.show()")
				expectStatus(t, evs, ioproto.StatusOK, false)
				if disp := ofType(evs, ioproto.EventDisplay); len(disp) != 1 || disp[0].Data["application/vnd.sandboxd.chart+json"] != "" {
					t.Fatalf("an image plot: %s", dump(evs))
				}
			})

			t.Run("!cmd lines run in bash, %magics are refused", func(t *testing.T) {
				evs := b.py("print('before')\n!echo from-bash; echo to-stderr >&2\nfor i in range(2):\n    !echo \"n=$((1 + 1))\"\ns = '''\n!not a shell line\n'''\n!exit 3\nprint('after', _exit_code, s.strip())")
				expectStatus(t, evs, ioproto.StatusOK, false)
				if got := stdout(evs); got != "before\nfrom-bash\nn=2\nn=2\nafter 3 !not a shell line\n" {
					t.Fatalf("stdout = %q", got)
				}
				if got := ofType(evs, ioproto.EventStderr); len(got) != 1 || got[0].Text != "to-stderr\n" {
					t.Fatalf("stderr: %s", dump(got))
				}
				if ofType(evs, ioproto.EventResult) != nil {
					t.Fatalf("a final shell line has no result: %s", dump(evs))
				}

				// Output streams while the shell line runs.
				id := b.submit("python", "!echo first; sleep 1; echo second", 0)
				evs = b.until(id, "the shell line's first output", func(evs []ioproto.Event) bool { return strings.Contains(stdout(evs), "first") })
				if isDone(evs) {
					t.Fatalf("the shell line's output only came with done: %s", dump(evs))
				}
				expectStatus(t, b.wait(id), ioproto.StatusOK, false)

				evs = b.py("ran = True\n%pip install requests")
				expectStatus(t, evs, ioproto.StatusError, false)
				errs := ofType(evs, ioproto.EventError)
				if len(errs) != 1 || errs[0].EName != "SyntaxError" || !strings.Contains(errs[0].EValue, "%pip is not supported") ||
					!strings.Contains(errs[0].EValue, "!pip install") {
					t.Fatalf("%%pip: %s", dump(evs))
				}
				if errs := ofType(b.py("ran"), ioproto.EventError); len(errs) != 1 || errs[0].EName != "NameError" {
					t.Fatalf("a cell with a magic ran in part: %s", dump(errs))
				}
				// A modulo continued on the next line is not a magic.
				if got := result(t, b.py("(7\n% 4)"))["text/plain"]; got != "3" {
					t.Fatalf("(7 %% 4) = %q", got)
				}
			})
		})
	}
}
