package tools_test

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/agent/tools"
	"github.com/sandboxd/sandboxd/client"
)

// fakeExec replays fixed events (a unit test of run_code's formatting; the
// real sandbox is exercised by the agent's integration tests).
type fakeExec struct {
	events []client.Event
	got    []client.Command
	resume []bool
}

func (f *fakeExec) Run(_ context.Context, cmd client.Command, resume bool, fn func(client.Event)) (*client.Outcome, error) {
	f.got, f.resume = append(f.got, cmd), append(f.resume, resume)
	out := &client.Outcome{}
	for _, ev := range f.events {
		switch ev.Kind {
		case client.KindStdout:
			out.Stdout += ev.Text
		case client.KindStderr:
			out.Stderr += ev.Text
		case client.KindDisplay, client.KindResult:
			out.Outputs = append(out.Outputs, client.Output{Result: ev.Kind == client.KindResult, Data: ev.Data})
		case client.KindError:
			out.Errors = append(out.Errors, ev.Error)
		case client.KindDone:
			out.Done = ev.Done
		}
		fn(ev)
	}
	return out, nil
}

func TestRegistry(t *testing.T) {
	run := tools.RunCode(&fakeExec{}, tools.RunCodeOptions{})
	r, err := tools.NewRegistry(run)
	if err != nil {
		t.Fatal(err)
	}
	if specs := r.Specs(); len(specs) != 1 || specs[0].Name != "run_code" || specs[0].Parameters["type"] != "object" {
		t.Errorf("specs = %+v", specs)
	}
	ins := r.Instructions()
	for _, want := range []string{"## Tool run_code", "persistent", "plt.show() is unnecessary", "numpy", "plotly", "/workspace"} {
		if !strings.Contains(ins, want) {
			t.Errorf("instructions lack %q:\n%s", want, ins)
		}
	}
	if !strings.Contains(ins, "receive each figure as an image") {
		t.Errorf("instructions do not say figures come back as images:\n%s", ins)
	}
	if blind := tools.RunCode(&fakeExec{}, tools.RunCodeOptions{NoImageInput: true}).Instructions; strings.Contains(blind, "receive each figure") || !strings.Contains(blind, "do not see the figures") {
		t.Errorf("instructions without image input:\n%s", blind)
	}
	if _, err := tools.NewRegistry(run, run); err == nil {
		t.Error("duplicate tool accepted")
	}
	bad := run
	bad.Name = "has space"
	if _, err := tools.NewRegistry(bad); err == nil {
		t.Error("invalid tool name accepted")
	}
}

func TestRunCodeOutput(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\nfake")
	f := &fakeExec{events: []client.Event{
		{Kind: client.KindStdout, Text: "hello\n"},
		{Kind: client.KindStderr, Text: "warn\n"},
		{Kind: client.KindDisplay, Data: map[string]string{"text/plain": "<Figure>", "image/png": base64.StdEncoding.EncodeToString(png)}},
		{Kind: client.KindDisplay, Data: map[string]string{"text/plain": "Figure()", "text/html": `<div>plotly chart</div><script src="https://cdn.plot.ly/plotly-2.6.3.min.js"></script>`}},
		{Kind: client.KindResult, Data: map[string]string{"text/plain": "42"}},
		{Kind: client.KindDone, Done: &client.Done{Status: client.StatusOK, Files: []client.File{{Path: "out.csv", Size: 12}}}},
	}}
	var live []tools.Chunk
	res, err := tools.RunCode(f, tools.RunCodeOptions{}).Run(context.Background(), tools.Invocation{
		Arguments: `{"code": "x"}`, SandboxID: "sb-1", CommandID: "cmd-1", Resume: true,
		Progress: func(c tools.Chunk) { live = append(live, c) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if cmd := f.got[0]; cmd.SandboxID != "sb-1" || cmd.ID != "cmd-1" || cmd.Language != "python" || cmd.Code != "x" || !f.resume[0] {
		t.Errorf("command = %+v, resume %v", cmd, f.resume[0])
	}
	if res.IsError || res.Status != "ok" || len(res.Images) != 1 || string(res.Images[0].Data) != string(png) || len(res.Charts) != 1 {
		t.Errorf("result = %+v", res)
	}
	for _, want := range []string{"status: ok", "stdout:\nhello", "stderr:\nwarn", "result:\n42", "1 figure(s) captured", "1 plotly chart(s)", "out.csv (12 bytes)"} {
		if !strings.Contains(res.Text, want) {
			t.Errorf("model text lacks %q:\n%s", want, res.Text)
		}
	}
	if strings.Contains(res.Text, "<Figure>") {
		t.Errorf("model text repeats the figure's text/plain:\n%s", res.Text)
	}
	wantConsole := []tools.Chunk{{Kind: "stdout", Text: "hello\n"}, {Kind: "stderr", Text: "warn\n"}, {Kind: "result", Text: "42\n"}}
	if len(res.Console) != len(wantConsole) || len(live) != len(wantConsole) {
		t.Fatalf("console %+v, live %+v; want %+v", res.Console, live, wantConsole)
	}
	for i, c := range wantConsole {
		if res.Console[i] != c || live[i] != c {
			t.Errorf("chunk %d: console %+v, live %+v; want %+v", i, res.Console[i], live[i], c)
		}
	}
}

func TestRunCodeError(t *testing.T) {
	f := &fakeExec{events: []client.Event{
		{Kind: client.KindError, Error: &client.ExecError{Name: "NameError", Value: "name 'y' is not defined", Traceback: []string{"Traceback (most recent call last):\n", "NameError: name 'y' is not defined"}}},
		{Kind: client.KindDone, Done: &client.Done{Status: client.StatusError}},
	}}
	res, err := tools.RunCode(f, tools.RunCodeOptions{}).Run(context.Background(), tools.Invocation{Arguments: `{"code": "y"}`})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || res.Status != "error" || !strings.Contains(res.Text, "status: error") || !strings.Contains(res.Text, "NameError: name 'y' is not defined") {
		t.Errorf("result = %+v", res)
	}
}

func TestRunCodeBadArguments(t *testing.T) {
	f := &fakeExec{}
	for _, args := range []string{`not json`, `{"language": "ruby", "code": "1"}`} {
		res, err := tools.RunCode(f, tools.RunCodeOptions{}).Run(context.Background(), tools.Invocation{Arguments: args})
		if err != nil || !res.IsError || !strings.HasPrefix(res.Text, "error: ") {
			t.Errorf("%s: %+v, %v; want an error result for the model", args, res, err)
		}
	}
	if len(f.got) != 0 {
		t.Errorf("bad arguments ran %d commands", len(f.got))
	}
}

func TestRunCodeTruncatesForModel(t *testing.T) {
	long := strings.Repeat("a", 5000) + "MIDDLE" + strings.Repeat("z", 5000)
	f := &fakeExec{events: []client.Event{
		{Kind: client.KindStdout, Text: long},
		{Kind: client.KindDone, Done: &client.Done{Status: client.StatusOK}},
	}}
	res, err := tools.RunCode(f, tools.RunCodeOptions{MaxOutput: 1000}).Run(context.Background(), tools.Invocation{Arguments: `{"code":"x"}`})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Text) > 1200 || strings.Contains(res.Text, "MIDDLE") || !strings.Contains(res.Text, "characters omitted") ||
		!strings.Contains(res.Text, "aaaa") || !strings.HasSuffix(res.Text, "zzzz") {
		t.Errorf("model text (%d chars) not cut in the middle: %.200s...", len(res.Text), res.Text)
	}
	if res.Console[0].Text != long {
		t.Errorf("console output was cut too")
	}
}

func TestRunCodeBoundsConsole(t *testing.T) {
	chunk := strings.Repeat("x", 300<<10)
	var evs []client.Event
	for range 5 {
		evs = append(evs, client.Event{Kind: client.KindStdout, Text: chunk})
	}
	f := &fakeExec{events: append(evs, client.Event{Kind: client.KindDone, Done: &client.Done{Status: client.StatusOK}})}
	res, err := tools.RunCode(f, tools.RunCodeOptions{}).Run(context.Background(), tools.Invocation{Arguments: `{"code":"x"}`})
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, c := range res.Console {
		total += len(c.Text)
	}
	last := res.Console[len(res.Console)-1]
	if total > 1<<20+100 || last.Kind != "error" || !strings.Contains(last.Text, "bytes of output not shown") {
		t.Errorf("console holds %d bytes, ending %q", total, last.Text)
	}
}
