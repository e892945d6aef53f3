package main

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/ioproto"
)

// TestExecSaveAndEvents: --save writes a figure and a self-contained plotly
// chart (summarised in one line instead of its repr), --events shows seqs,
// and a failed bash command reports its exit code once.
func TestExecSaveAndEvents(t *testing.T) {
	png := base64.StdEncoding.EncodeToString([]byte("\x89PNG fake"))
	repr := "Figure({\n    'data': [{'type': 'bar', 'x': ['a'], 'y': [1]}, {'type': 'scatter', 'y': [2]}],\n    'layout': {'template': '...', 'title': {'text': 'Counts'}}\n})"
	fake, _, _ := execFake(func(cid string) []core.Event {
		if cid == "bash-1" {
			code := 3
			return []core.Event{{Seq: 1, Type: ioproto.EventStarted, CommandID: cid},
				{Seq: 2, Type: ioproto.EventDone, Status: ioproto.StatusError, ExitCode: &code, Reason: "exit status 3"}}
		}
		return []core.Event{
			{Seq: 1, Type: ioproto.EventStarted, CommandID: cid, Language: "python"},
			{Seq: 2, Type: ioproto.EventStdout, Text: "hi\n"},
			{Seq: 3, Type: ioproto.EventDisplay, Data: map[string]string{"text/plain": "<Figure>", "image/png": png}},
			{Seq: 4, Type: ioproto.EventResult, Data: map[string]string{"text/plain": repr,
				"text/html": `<div id="f"></div><script src="https://cdn.plot.ly/plotly-2.6.3.min.js"></script><script>Plotly.newPlot("f", [])</script>`}},
			{Seq: 5, Type: ioproto.EventDone, Status: ioproto.StatusOK},
		}
	})
	addr := startServer(t, fake)
	dir := filepath.Join(t.TempDir(), "figs") // created by --save
	r := runCLI(t, nil, addr, "", "exec", "--user", "alice", "--command-id", "job-1", "--save", dir, "--events", "plot()")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	want := "[seq 1 started] [seq 2 stdout] hi\n" +
		"[seq 3 display] [image/png 9 bytes saved to " + filepath.Join(dir, "job-1-3-figure.png") + "]\n" +
		"[seq 4 result] [plotly figure: \"Counts\", traces: 1 bar, 1 scatter saved to " + filepath.Join(dir, "job-1-4-chart.html") + "]\n" +
		"[seq 5 done] ok\n"
	if r.stdout != want {
		t.Errorf("stdout\n%q\nwant\n%q", r.stdout, want)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "job-1-3-figure.png")); err != nil || string(b) != "\x89PNG fake" {
		t.Errorf("saved figure: %q, %v", b, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "job-1-4-chart.html"))
	if err != nil || !strings.Contains(string(b), "plotly.js v") || strings.Contains(string(b), "cdn.plot.ly/plotly-2") || !strings.Contains(string(b), `Plotly.newPlot("f", [])`) {
		t.Errorf("saved chart is not self-contained (%d bytes, %v)", len(b), err)
	}

	r = runCLI(t, nil, addr, "", "exec", "--user", "alice", "--language", "bash", "--command-id", "bash-1", "exit 3")
	if r.code != 1 {
		t.Errorf("failed bash: exit %d", r.code)
	}
	oneLine(t, r.stderr, "sandboxctl: exec: command bash-1 failed with exit code 3\n")
}
