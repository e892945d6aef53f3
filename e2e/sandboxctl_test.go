package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestE2ESandboxctlUX: sandboxctl's newer commands and flags, through the
// real binary against a real sandboxd and sandbox: help with examples and
// suggestions, -o json, exec by sandbox ID, --events seqs that resume
// --after-seq takes, --save of a matplotlib figure and a self-contained
// plotly chart, cp in both directions, a reused command ID with other code
// refused, and clear errors for a bad host and a failed bash command.
func TestE2ESandboxctlUX(t *testing.T) {
	env := needE2E(t)
	d := env.start(t)
	ctx := e2eCtx(t)
	ctl := sandboxctlRunner(t, ctx, env.sandboxctl, d.addr)

	// Help and suggestions need no server.
	if out, _, code := ctl("", "help", "cp"); code != 0 || !strings.Contains(out, "Usage: sandboxctl cp ") || !strings.Contains(out, "Examples:") {
		t.Errorf("help cp: exit %d:\n%s", code, out)
	}
	if _, errOut, code := ctl("", "exce"); code != 2 || !strings.Contains(errOut, "did you mean exec?") {
		t.Errorf("exce: exit %d, stderr %q", code, errOut)
	}

	// An empty list says so; -o json is [].
	if out, _, code := ctl("", "list", "--user", "e2e-ux"); code != 0 || out != "No sandboxes match user e2e-ux.\n" {
		t.Errorf("empty list: exit %d, stdout %q", code, out)
	}
	if out, _, code := ctl("", "list", "--user", "e2e-ux", "-o", "json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("empty list -o json: exit %d, stdout %q", code, out)
	}

	// exec --user, with --events: each event with its seq.
	out, errOut, code := ctl("", "exec", "--user", "e2e-ux", "--command-id", "ux-1", "--events", "import time\nx = 6 * 7\nprint('one', flush=True)\ntime.sleep(0.5)  # two separate stdout events\nprint('two', flush=True)\nx")
	if code != 0 || !strings.Contains(out, "] one\n") || !strings.Contains(out, "42\n") {
		t.Fatalf("exec --events: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	seqs := regexp.MustCompile(`\[seq (\d+) (\w+)\] `).FindAllStringSubmatch(out, -1)
	if len(seqs) < 3 {
		t.Fatalf("exec --events shows %d seqs: %q", len(seqs), out)
	}
	var list []map[string]any
	out, _, _ = ctl("", "list", "--user", "e2e-ux", "-o", "json")
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 1 {
		t.Fatalf("list -o json: %v, %q", err, out)
	}
	sb := list[0]["sandbox_id"].(string)

	// resume --after-seq with a seq that --events showed skips up to it.
	var afterOne string
	for _, m := range seqs {
		if m[2] == "stdout" {
			afterOne = m[1]
			break
		}
	}
	out, errOut, code = ctl("", "resume", sb, "ux-1", "--after-seq", afterOne)
	if code != 0 || strings.Contains(out, "one") || !strings.Contains(out, "two\n") {
		t.Errorf("resume --after-seq %s: exit %d, stdout %q, stderr %q", afterOne, code, out, errOut)
	}

	// The same command ID with other code is refused, naming the command;
	// with the same code it replays.
	if _, errOut, code := ctl("", "exec", "--sandbox", sb, "--command-id", "ux-1", "print('different')"); code != 1 ||
		!strings.Contains(errOut, "command ID ux-1 is already used") {
		t.Errorf("reused command ID with other code: exit %d, stderr %q", code, errOut)
	}

	// exec by sandbox ID, positionally and with --sandbox: the variables are there.
	if out, errOut, code := ctl("", "exec", sb, "print(x + 1)"); code != 0 || out != "43\n" {
		t.Errorf("exec SANDBOX_ID: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if out, errOut, code := ctl("", "exec", "--sandbox", sb, "--language", "bash", "echo $((x + 2))"); code != 0 || out != "2\n" {
		// bash does not see Python's x: $((x + 2)) is 2
		t.Errorf("exec --sandbox --language bash: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	// A failed bash command: the exit code, once.
	if _, errOut, code := ctl("", "exec", "--sandbox", sb, "--language", "bash", "exit 3"); code != 1 ||
		!strings.Contains(errOut, "failed with exit code 3") || strings.Contains(errOut, "exit status 3") {
		t.Errorf("failing bash: exit %d, stderr %q", code, errOut)
	}

	// --save: a matplotlib figure as PNG, a plotly chart as one HTML file
	// with plotly.js inside; the terminal shows a summary line.
	dir := t.TempDir()
	code2 := "import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\nplt.show()\n" +
		"import plotly.express as px\npx.bar(x=['a', 'b'], y=[2, 5], title='Counts')"
	out, errOut, code = ctl("", "exec", "--sandbox", sb, "--command-id", "ux-plot", "--save", dir, code2)
	if code != 0 || !strings.Contains(out, `[plotly figure: "Counts", traces: 1 bar saved to `) || !strings.Contains(out, "[image/png ") || strings.Contains(out, "Figure({") {
		t.Errorf("exec --save: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	pngs, _ := filepath.Glob(filepath.Join(dir, "ux-plot-*-figure.png"))
	htmls, _ := filepath.Glob(filepath.Join(dir, "ux-plot-*-chart.html"))
	if len(pngs) != 1 || len(htmls) != 1 {
		t.Fatalf("saved %v and %v; want a PNG and an HTML file", pngs, htmls)
	}
	if b, _ := os.ReadFile(pngs[0]); !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Errorf("%s is not a PNG", pngs[0])
	}
	if b, _ := os.ReadFile(htmls[0]); !bytes.Contains(b, []byte("plotly.js v")) || bytes.Contains(b, []byte(`src="https://cdn.plot.ly`)) {
		t.Errorf("%s does not carry plotly.js itself (%d bytes)", htmls[0], len(b))
	}

	// cp both ways, and ls -o json.
	local := filepath.Join(t.TempDir(), "in.csv")
	payload := "a,b\n1,2\n"
	os.WriteFile(local, []byte(payload), 0o644)
	if _, errOut, code := ctl("", "cp", local, sb+":data/"); code != 0 || !strings.Contains(errOut, "data/in.csv") {
		t.Errorf("cp up: exit %d, stderr %q", code, errOut)
	}
	if out, errOut, code := ctl("", "exec", sb, "print(open('data/in.csv').read().split()[1])"); code != 0 || out != "1,2\n" {
		t.Errorf("reading the uploaded file: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	ctl("", "exec", sb, "open('out.txt', 'w').write('from the sandbox')")
	down := t.TempDir()
	if _, errOut, code := ctl("", "cp", sb+":out.txt", down); code != 0 {
		t.Errorf("cp down: exit %d, stderr %q", code, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(down, "out.txt")); err != nil || string(b) != "from the sandbox" {
		t.Errorf("downloaded %q, %v", b, err)
	}
	if out, _, code := ctl("", "cp", sb+":out.txt", "-"); code != 0 || out != "from the sandbox" {
		t.Errorf("cp to stdout: exit %d, %q", code, out)
	}
	if _, errOut, code := ctl("", "cp", sb+":missing.txt", down); code != 1 || !strings.Contains(errOut, "missing.txt") {
		t.Errorf("cp of a missing file: exit %d, stderr %q", code, errOut)
	}
	if entries, _ := os.ReadDir(down); len(entries) != 1 {
		t.Errorf("a failed cp left files behind: %v", entries)
	}
	var files []map[string]any
	out, _, _ = ctl("", "ls", sb, "data", "-o", "json")
	if err := json.Unmarshal([]byte(out), &files); err != nil || len(files) != 1 || files[0]["path"] != "data/in.csv" {
		t.Errorf("ls -o json: %v, %q", err, out)
	}

	var contexts []map[string]any
	ctl("", "ctx", "create", sb, "--cwd", "data")
	out, _, _ = ctl("", "ctx", "ls", sb, "-o", "json")
	if err := json.Unmarshal([]byte(out), &contexts); err != nil || len(contexts) == 0 {
		t.Errorf("ctx ls -o json: %v, %q", err, out)
	}

	// A bad host is named.
	cmd := exec.CommandContext(ctx, env.sandboxctl, "--addr", "no-such-host.invalid:50051", "list")
	var errBuf bytes.Buffer
	cmd.Stderr = &errBuf
	if err := cmd.Run(); err == nil || !strings.Contains(errBuf.String(), `"no-such-host.invalid:50051"`) {
		t.Errorf("bad host: %v, stderr %q", err, errBuf.String())
	}
	d.stop(t)
}
