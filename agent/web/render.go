package web

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"html/template"
	"strings"
	"time"

	"github.com/alecthomas/chroma/v2"
	chromahtml "github.com/alecthomas/chroma/v2/formatters/html"
	"github.com/alecthomas/chroma/v2/lexers"
	"github.com/alecthomas/chroma/v2/styles"
	"github.com/yuin/goldmark"
	highlighting "github.com/yuin/goldmark-highlighting/v2"
	"github.com/yuin/goldmark/extension"

	"github.com/sandboxd/sandboxd/agent/session"
	"github.com/sandboxd/sandboxd/agent/tools"
)

// codeStyle is the chroma style of code blocks (its CSS is served as
// /static/chroma.css; HTML carries classes only).
const codeStyle = "github"

// markdown renders the model's Markdown. Raw HTML in it is dropped
// (goldmark's default), so a model cannot inject markup.
var markdown = goldmark.New(
	goldmark.WithExtensions(
		extension.GFM,
		highlighting.NewHighlighting(
			highlighting.WithStyle(codeStyle),
			highlighting.WithFormatOptions(chromahtml.WithClasses(true)),
		),
	),
)

func renderMarkdown(src string) template.HTML {
	var buf bytes.Buffer
	if err := markdown.Convert([]byte(src), &buf); err != nil {
		return template.HTML("<pre>" + template.HTMLEscapeString(src) + "</pre>")
	}
	return template.HTML(buf.String())
}

var codeFormatter = chromahtml.New(chromahtml.WithClasses(true))

// highlight renders code in a language as HTML with chroma classes.
func highlight(code, language string) template.HTML {
	lexer := lexers.Get(language)
	if lexer == nil {
		lexer = lexers.Fallback
	}
	it, err := chroma.Coalesce(lexer).Tokenise(nil, code)
	var buf bytes.Buffer
	if err == nil {
		err = codeFormatter.Format(&buf, styles.Get(codeStyle), it)
	}
	if err != nil {
		return template.HTML("<pre>" + template.HTMLEscapeString(code) + "</pre>")
	}
	return template.HTML(buf.String())
}

// chromaCSS is the stylesheet for highlighted code.
func chromaCSS() []byte {
	var buf bytes.Buffer
	codeFormatter.WriteCSS(&buf, styles.Get(codeStyle))
	return buf.Bytes()
}

// chatItem is one item of the chat column.
type chatItem struct {
	// ID is the element ID ("e-<seq>").
	ID string
	// Kind is user, assistant or notice.
	Kind session.Kind
	// Text is a user message or a notice.
	Text string
	// HTML is an assistant message, rendered.
	HTML template.HTML
	// Calls link to the trace panel.
	Calls []callChip
}

// callChip is a tool call mentioned in the chat, with its live status and
// its figures (shown in the chat as thumbnails).
type callChip struct {
	CallID, Label string
	// Status is running, ok, error, interrupted, ... (the run's status).
	Status string
	// Title is the chip's tooltip.
	Title string
	// Images are the figures' URLs.
	Images []string
	// Charts counts the interactive charts (shown in the trace).
	Charts int
}

func chatItems(convID string, entries []session.Entry, runs []session.ToolRun) []chatItem {
	byCall := map[string]*session.ToolRun{}
	for i := range runs {
		byCall[runs[i].CallID] = &runs[i]
	}
	var items []chatItem
	for _, e := range entries {
		if it, ok := newChatItem(convID, e, byCall); ok {
			items = append(items, it)
		}
	}
	return items
}

// chipLabel says what a call did, in its current state.
func chipLabel(name, language, status string) string {
	what := name
	if language != "" {
		what = language
	}
	switch status {
	case "running":
		return "running " + what + "…"
	case "ok":
		if language != "" {
			return "ran " + language
		}
		return "called " + name
	case "pending", "":
		return what + " (waiting)"
	default:
		return what + ": " + status
	}
}

// newChatItem renders an entry for the chat column; tool results are not
// shown there (they are in the trace panel), but each call's status and
// figures are.
func newChatItem(convID string, e session.Entry, runs map[string]*session.ToolRun) (chatItem, bool) {
	it := chatItem{ID: fmt.Sprintf("e-%d", e.Seq), Kind: e.Kind}
	switch e.Kind {
	case session.KindUser:
		it.Text = e.Message.Content
	case session.KindNotice:
		it.Text = e.Notice
	case session.KindAssistant:
		if e.Message.Content != "" {
			it.HTML = renderMarkdown(e.Message.Content)
		}
		for _, tc := range e.Message.ToolCalls {
			var language string
			if tc.Name == tools.RunCodeName {
				if a, err := tools.ParseCodeArgs(tc.Arguments); err == nil {
					language = a.Language
				}
			}
			chip := callChip{CallID: tc.ID, Status: "pending"}
			if r := runs[tc.ID]; r != nil {
				switch {
				case r.State == session.RunRunning:
					chip.Status = "running"
				case r.State == session.RunDone:
					chip.Status = r.Result.Status
					for i := range r.Images {
						chip.Images = append(chip.Images, fmt.Sprintf("/c/%s/runs/%s/images/%d", convID, r.CallID, i))
					}
					chip.Charts = r.Charts
				}
			}
			chip.Label = chipLabel(tc.Name, language, chip.Status)
			chip.Title = "show this call in the trace (" + chip.Status + ")"
			it.Calls = append(it.Calls, chip)
		}
	default:
		return it, false
	}
	return it, true
}

// runView is a tool call in the trace panel.
type runView struct {
	// ID is the element ID ("run-<call>").
	ID     string
	CallID string
	// N numbers the calls of the conversation from 1.
	N int
	// Sep, on the first call of a message, labels the separator before it.
	Sep      string
	Name     string
	Language string
	// Code is the highlighted code (run_code), or the raw arguments.
	Code template.HTML
	// Console is the output so far, in order.
	Console []tools.Chunk
	// Running is true until the call has a result.
	Running   bool
	Status    string
	Duration  string
	StateLost bool
	// Images and Charts are artifact URLs.
	Images, Charts []string
}

// newRunView renders a run; first says it is the first call of its message.
func newRunView(convID string, n int, r session.ToolRun, live []tools.Chunk, first bool) runView {
	v := runView{ID: "run-" + r.CallID, CallID: r.CallID, N: n, Name: r.Name, Running: r.State != session.RunDone}
	if first {
		v.Sep = fmt.Sprintf("Message %d", r.Turn)
	}
	if a, err := tools.ParseCodeArgs(r.Arguments); r.Name == tools.RunCodeName && err == nil {
		v.Language = a.Language
		v.Code = highlight(a.Code, a.Language)
	} else {
		v.Code = highlight(r.Arguments, "json")
	}
	if v.Running {
		v.Status = "running"
		v.Console = live
		return v
	}
	v.Status = r.Result.Status
	v.StateLost = r.Result.StateLost
	v.Console = r.Result.Console
	if d := r.Result.Duration; d > 0 {
		switch {
		case d >= time.Second:
			d = d.Round(10 * time.Millisecond)
		case d >= time.Millisecond:
			d = d.Round(time.Millisecond)
		}
		v.Duration = d.String()
	}
	for i := range r.Images {
		v.Images = append(v.Images, fmt.Sprintf("/c/%s/runs/%s/images/%d", convID, r.CallID, i))
	}
	for i := range r.Charts {
		v.Charts = append(v.Charts, fmt.Sprintf("/c/%s/runs/%s/charts/%d", convID, r.CallID, i))
	}
	return v
}

// usageView is the token counter.
type usageView struct {
	Turn, TurnPrompt, TurnCompletion, Conversation int64
	ModelCalls                                     int
}

func newUsageView(c session.Conversation, t session.Turn) usageView {
	return usageView{Turn: t.Usage.Total(), TurnPrompt: t.Usage.PromptTokens, TurnCompletion: t.Usage.CompletionTokens,
		Conversation: c.Usage.Total(), ModelCalls: t.ModelCalls}
}

// version is a short hash of an item's HTML: the page's script skips
// replacing an element whose version is unchanged (so charts do not reload).
func version(html string) string {
	h := sha256.Sum256([]byte(html))
	return hex.EncodeToString(h[:6])
}

// thousands formats n with thin separators (12 345).
func thousands(n int64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && c != '-' && s[i-1] != '-' {
			b.WriteString("\u202f")
		}
		b.WriteRune(c)
	}
	return b.String()
}
