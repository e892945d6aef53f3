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

// callChip is a tool call mentioned in the chat.
type callChip struct {
	CallID, Label string
}

func chatItems(entries []session.Entry) []chatItem {
	var items []chatItem
	for _, e := range entries {
		if it, ok := newChatItem(e); ok {
			items = append(items, it)
		}
	}
	return items
}

// newChatItem renders an entry for the chat column; tool results are not
// shown there (they are in the trace panel).
func newChatItem(e session.Entry) (chatItem, bool) {
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
			label := tc.Name
			if tc.Name == tools.RunCodeName {
				if a, err := tools.ParseCodeArgs(tc.Arguments); err == nil {
					label = "ran " + a.Language
				}
			}
			it.Calls = append(it.Calls, callChip{CallID: tc.ID, Label: label})
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
	N        int
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

func newRunView(convID string, n int, r session.ToolRun, live []tools.Chunk) runView {
	v := runView{ID: "run-" + r.CallID, CallID: r.CallID, N: n, Name: r.Name, Running: r.State != session.RunDone}
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
