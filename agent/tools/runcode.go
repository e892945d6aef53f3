package tools

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/client"
)

// Executor runs sandbox commands; *client.Client is the real one.
type Executor interface {
	Run(ctx context.Context, cmd client.Command, resume bool, fn func(client.Event)) (*client.Outcome, error)
}

// RunCodeOptions tune run_code.
type RunCodeOptions struct {
	// Timeout bounds each command; 0 means sandboxd's default.
	Timeout time.Duration
	// MaxOutput bounds each of stdout, stderr, the result and the traceback
	// in the text the model reads, in characters (the middle is cut); 0
	// means 16000. People see the whole output.
	MaxOutput int
	// NoImageInput says figures are not sent to the model (see
	// loop.Config.NoImageInput), so the instructions do not promise it.
	NoImageInput bool
}

// maxConsole bounds the output kept for people per call, in bytes.
const maxConsole = 1 << 20

// RunCodeName is the name of the run_code tool.
const RunCodeName = "run_code"

const runCodeInstructions = `
You can run code with run_code in a sandbox that belongs to this user:
- language "python" (the default) runs in one persistent Python 3 interpreter, like a Jupyter kernel: variables, imports and functions defined in one call stay available in later calls and later messages. Do not redefine what already exists unless it must change.
- language "bash" runs a shell command; each call is a fresh shell, but files persist.
- languages "javascript" and "typescript" share one persistent Node.js interpreter (top-level await, import statements); "r" runs in one persistent R session; "java" in one persistent JShell (statements, methods and classes; the last expression's value is returned). Prefer Python for data work.
- The working directory is /workspace; files written there persist.
- Installed: numpy, pandas, scipy, matplotlib, seaborn, plotly and pillow. There is no network access, so pip install and downloads will fail.
- The value of the last expression is returned, as in a notebook; print anything else you need to see. Very long output is cut in the middle.
- Figures are captured automatically: create the matplotlib figure and it is shown to the user (plt.show() is unnecessary). PIL images displayed or left as the last expression are shown too.%s
- Plotly figures (fig.show() or the last expression) are shown to the user as interactive charts; you cannot see them, so make a matplotlib version if you need to look.
- If a call fails, read the error, fix the code and try again.`

// RunCode is the run_code tool: Python or bash in the user's sandbox.
func RunCode(exec Executor, opts RunCodeOptions) Tool {
	if opts.MaxOutput <= 0 {
		opts.MaxOutput = 16000
	}
	return Tool{
		Name:        RunCodeName,
		Description: "Run Python (persistent interpreter: variables survive between calls), bash, JavaScript, TypeScript or R in the user's sandbox and return the output, the value of the last expression, errors and figures.",
		Parameters: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"language": map[string]any{"type": "string", "enum": codeLanguages, "description": "python (default), bash, javascript, typescript, r or java"},
				"code":     map[string]any{"type": "string", "description": "the code to run"},
			},
			"required": []string{"code"},
		},
		Instructions: fmt.Sprintf(runCodeInstructions, seeFigures(opts)),
		UsesSandbox:  true,
		Run: func(ctx context.Context, inv Invocation) (Result, error) {
			return runCode(ctx, exec, opts, inv)
		},
	}
}

func seeFigures(opts RunCodeOptions) string {
	if opts.NoImageInput {
		return " You do not see the figures: check the data numerically instead."
	}
	return " You receive each figure as an image too, so you can check the chart and improve it."
}

// codeLanguages are the languages run_code offers: every language the
// sandbox image has (a sandbox without one answers that it lacks it).
var codeLanguages = []string{client.LanguagePython, client.LanguageBash, client.LanguageJavaScript, client.LanguageTypeScript, client.LanguageR, client.LanguageJava}

// CodeArgs are run_code's arguments.
type CodeArgs struct {
	// Language is one of codeLanguages.
	Language string `json:"language"`
	// Code is the source.
	Code string `json:"code"`
}

// ParseCodeArgs decodes and checks run_code's arguments; the error is meant
// for the model.
func ParseCodeArgs(raw string) (CodeArgs, error) {
	var a CodeArgs
	if err := json.Unmarshal([]byte(raw), &a); err != nil {
		return a, fmt.Errorf("the arguments are not a JSON object: %v; send {\"language\": \"python\", \"code\": \"...\"}", err)
	}
	if a.Language == "" {
		a.Language = client.LanguagePython
	}
	if !slices.Contains(codeLanguages, a.Language) {
		return a, fmt.Errorf("language %q is not supported; use one of %q", a.Language, codeLanguages)
	}
	return a, nil
}

func runCode(ctx context.Context, exec Executor, opts RunCodeOptions, inv Invocation) (Result, error) {
	args, err := ParseCodeArgs(inv.Arguments)
	if err != nil {
		return Result{Text: "error: " + err.Error(), IsError: true, Status: "error", Console: []Chunk{{Kind: ChunkError, Text: err.Error()}}}, nil
	}
	var console []Chunk
	kept, dropped := 0, 0
	emit := func(kind, text string) {
		if text == "" {
			return
		}
		// People see the output, but a runaway loop's megabytes would only
		// bloat the store and the page.
		if kept+len(text) > maxConsole {
			dropped += len(text)
			return
		}
		kept += len(text)
		if n := len(console); n > 0 && console[n-1].Kind == kind {
			console[n-1].Text += text
		} else {
			console = append(console, Chunk{Kind: kind, Text: text})
		}
		if inv.Progress != nil {
			inv.Progress(Chunk{Kind: kind, Text: text})
		}
	}
	cmd := client.Command{SandboxID: inv.SandboxID, ID: inv.CommandID, Language: args.Language, Code: args.Code, Timeout: opts.Timeout}
	out, err := exec.Run(ctx, cmd, inv.Resume, func(ev client.Event) {
		switch ev.Kind {
		case client.KindStdout:
			emit(ChunkStdout, ev.Text)
		case client.KindStderr:
			emit(ChunkStderr, ev.Text)
		case client.KindResult:
			if t := ev.Data["text/plain"]; t != "" && !hasVisual(ev.Data) {
				emit(ChunkResult, t+"\n")
			}
		case client.KindDisplay:
			if t := ev.Data["text/plain"]; t != "" && !hasVisual(ev.Data) {
				emit(ChunkStdout, t+"\n")
			}
		case client.KindError:
			emit(ChunkError, ev.Error.String())
		}
	})
	if dropped > 0 {
		console = append(console, Chunk{Kind: ChunkError, Text: fmt.Sprintf("\n[%d more bytes of output not shown]\n", dropped)})
	}
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return Result{}, err
		}
		// What arrived is kept; the loop adds what the failure means.
		return Result{Console: console}, err
	}
	res := Result{Console: console, Status: string(out.Done.Status), StateLost: out.Done.StateLost, Duration: out.Done.Duration}
	res.IsError = out.Done.Status != client.StatusOK
	for _, o := range out.Outputs {
		for _, mime := range []string{"image/png", "image/jpeg"} {
			if b64, ok := o.Data[mime]; ok {
				if data, err := base64.StdEncoding.DecodeString(b64); err == nil {
					res.Images = append(res.Images, Artifact{MIME: mime, Data: data})
				}
				break
			}
		}
		if h, ok := o.Data["text/html"]; ok && isPlotly(h) {
			res.Charts = append(res.Charts, Artifact{MIME: "text/html", Data: []byte(h)})
		}
	}
	res.Text = describe(args.Language, out, res, opts.MaxOutput)
	return res, nil
}

// hasVisual says a bundle is shown as an image or chart rather than text.
func hasVisual(data map[string]string) bool {
	_, png := data["image/png"]
	_, jpg := data["image/jpeg"]
	return png || jpg || isPlotly(data["text/html"])
}

func isPlotly(html string) bool { return strings.Contains(html, "plotly") }

// describe writes the outcome for the model.
func describe(language string, out *client.Outcome, res Result, limit int) string {
	var b strings.Builder
	d := out.Done
	fmt.Fprintf(&b, "status: %s", d.Status)
	if d.ExitCode != nil && language == "bash" {
		fmt.Fprintf(&b, " (exit code %d)", *d.ExitCode)
	}
	if d.Status != client.StatusOK && d.Reason != "" {
		fmt.Fprintf(&b, ": %s", d.Reason)
	}
	b.WriteByte('\n')
	if d.StateLost {
		fmt.Fprintf(&b, "STATE LOST: the Python interpreter was restarted (%s); variables, imports and functions from earlier calls are gone and must be recreated. Files in /workspace are kept.\n", d.Reason)
	}
	section := func(name, text string) {
		if text = strings.TrimRight(text, "\n"); text != "" {
			fmt.Fprintf(&b, "%s:\n%s\n", name, truncateMiddle(text, limit))
		}
	}
	section("stdout", out.Stdout)
	section("stderr", out.Stderr)
	for _, o := range out.Outputs {
		if t := o.Data["text/plain"]; o.Result && !hasVisual(o.Data) {
			section("result", t)
		} else if !o.Result && !hasVisual(o.Data) {
			section("display", t)
		}
	}
	for _, e := range out.Errors {
		section("error", e.String())
	}
	if n := len(res.Images); n > 0 {
		fmt.Fprintf(&b, "figures: %d figure(s) captured and shown to the user.\n", n)
	}
	if n := len(res.Charts); n > 0 {
		fmt.Fprintf(&b, "interactive charts: %d plotly chart(s) shown to the user (you cannot see them).\n", n)
	}
	if len(d.Files) > 0 {
		b.WriteString("files changed:")
		for i, f := range d.Files {
			if i == 20 {
				fmt.Fprintf(&b, " ... and %d more", len(d.Files)-i)
				break
			}
			fmt.Fprintf(&b, " %s (%d bytes)", f.Path, f.Size)
		}
		b.WriteByte('\n')
	}
	if d.Status == client.StatusOK && out.Stdout == "" && out.Stderr == "" && len(out.Outputs) == 0 && len(out.Errors) == 0 {
		b.WriteString("(no output)\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

// truncateMiddle keeps the start and the end of s within limit characters.
func truncateMiddle(s string, limit int) string {
	r := []rune(s)
	if len(r) <= limit {
		return s
	}
	head := limit * 6 / 10
	tail := limit - head
	return fmt.Sprintf("%s\n... [%d characters omitted] ...\n%s", string(r[:head]), len(r)-head-tail, string(r[len(r)-tail:]))
}
