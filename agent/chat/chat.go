// Package chat is the agent's terminal interface: read a message, then show
// what the agent does as it happens (the model's text, each tool call's code
// and streamed output, where images were saved, token usage).
package chat

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/agent/events"
	"github.com/sandboxd/sandboxd/agent/loop"
	"github.com/sandboxd/sandboxd/agent/session"
	"github.com/sandboxd/sandboxd/agent/tools"
	"github.com/sandboxd/sandboxd/internal/plotlyjs"
	"github.com/sandboxd/sandboxd/internal/termsafe"
)

// Options configure a chat session.
type Options struct {
	// Agent runs the conversation.
	Agent *loop.Agent
	// UserID owns a new conversation (and so chooses the sandbox).
	UserID string
	// ConversationID continues an existing conversation; empty starts one.
	ConversationID string
	// In is read line by line: each line is a message. EOF ends the session.
	In io.Reader
	// Out receives everything shown.
	Out io.Writer
	// ImageDir is where images and charts are saved, in a directory per
	// conversation.
	ImageDir string
	// Interrupts receives a value for each Ctrl-C: during a turn it stops
	// the turn (interrupting the running command); at the prompt it ends the
	// session. May be nil.
	Interrupts <-chan struct{}
	// Markdown renders the model's Markdown for the terminal (see
	// MarkdownRenderer); nil prints it as it is.
	Markdown func(string) string
}

// ErrInterrupted is returned when the user ended the session with Ctrl-C.
var ErrInterrupted = errors.New("interrupted")

// Run runs a chat session until EOF, Ctrl-C at the prompt, or ctx ends.
func Run(ctx context.Context, o Options) error {
	store := o.Agent.Store()
	var conv session.Conversation
	var err error
	if o.ConversationID != "" {
		if conv, err = store.Conversation(ctx, o.ConversationID); err != nil {
			return err
		}
	} else if conv, err = store.CreateConversation(ctx, o.UserID); err != nil {
		return err
	}
	v := &viewer{out: o.Out, store: store, conv: conv.ID, dir: filepath.Join(o.ImageDir, conv.ID), markdown: o.Markdown}
	fmt.Fprintf(o.Out, "conversation %s (continue it later with: agent chat --session %s)\n", conv.ID, conv.ID)
	if o.ConversationID != "" {
		if err := v.history(ctx); err != nil {
			return err
		}
		sub := o.Agent.Hub().Subscribe(conv.ID)
		resumed, err := o.Agent.Resume(ctx, conv.ID)
		if err != nil {
			sub.Close()
			return err
		}
		if resumed {
			fmt.Fprintln(o.Out, "resuming the interrupted turn...")
			if err := v.follow(ctx, o.Agent, sub, o.Interrupts); err != nil {
				return err
			}
		} else {
			sub.Close()
		}
	}

	lines := make(chan string)
	readErr := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(o.In)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		readErr <- sc.Err()
		close(lines)
	}()
	for {
		fmt.Fprint(o.Out, "\n> ")
		var line string
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-o.Interrupts:
			fmt.Fprintln(o.Out)
			return ErrInterrupted
		case l, ok := <-lines:
			if !ok {
				fmt.Fprintln(o.Out)
				return <-readErr
			}
			line = l
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		sub := o.Agent.Hub().Subscribe(conv.ID)
		if err := o.Agent.Send(ctx, conv.ID, line); err != nil {
			sub.Close()
			return err
		}
		if err := v.follow(ctx, o.Agent, sub, o.Interrupts); err != nil {
			return err
		}
	}
}

// viewer prints a conversation's events.
type viewer struct {
	out   io.Writer
	store *session.Store
	conv  string
	dir   string
	// midLine is true when the last output did not end a line.
	midLine bool
	// streamed is true once the running call showed output.
	streamed bool
	// drafted is the model's text shown as it streamed (plain output only:
	// rendered Markdown waits for the whole message).
	drafted strings.Builder
	// drafting is true between the first delta and the whole message.
	drafting bool
	markdown func(string) string
}

// text prints the model's text, rendered if there is a renderer. Its
// control characters are escaped first (termsafe.Text): a model repeats
// what a web page or a sandbox's output told it; the renderer's own
// styling is added after.
func (v *viewer) text(md string) {
	md = termsafe.Text(strings.TrimSpace(md))
	if v.markdown != nil {
		lines := strings.Split(strings.Trim(v.markdown(md), "\n"), "\n")
		for i, l := range lines {
			lines[i] = strings.TrimRight(l, " ")
		}
		fmt.Fprintf(v.out, "\n%s\n", strings.Join(lines, "\n"))
		return
	}
	fmt.Fprintf(v.out, "\n%s\n", md)
}

// follow prints events until the turn ends.
func (v *viewer) follow(ctx context.Context, a *loop.Agent, sub *events.Subscription, interrupts <-chan struct{}) error {
	defer sub.Close()
	done := a.Done(v.conv)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-interrupts:
			v.endLine()
			fmt.Fprintln(v.out, "stopping...")
			a.Stop(v.conv)
		case ev, ok := <-sub.C:
			if !ok {
				// Fell behind (a flood of output): the rest is in the store.
				<-done
				return nil
			}
			if v.show(ctx, ev) {
				return nil
			}
		}
	}
}

// show prints one event and says whether the turn ended.
func (v *viewer) show(ctx context.Context, ev events.Event) bool {
	switch ev.Kind {
	case events.EntryAdded:
		switch e := ev.Entry; e.Kind {
		case session.KindAssistant:
			streamed := strings.TrimSpace(v.drafted.String())
			v.drafted.Reset()
			v.drafting = false
			if e.Message.Content != "" {
				v.endLine()
				if streamed != strings.TrimSpace(e.Message.Content) {
					v.text(e.Message.Content)
				}
			}
		case session.KindNotice:
			v.endLine()
			fmt.Fprintf(v.out, "! %s\n", termsafe.Text(e.Notice))
		}
	case events.TextDelta:
		if v.markdown != nil {
			break
		}
		if !v.drafting {
			v.endLine()
			fmt.Fprintln(v.out)
			v.drafting = true
		}
		if v.drafted.Len() == 0 {
			ev.Text = strings.TrimLeft(ev.Text, " \n")
		}
		v.drafted.WriteString(ev.Text)
		fmt.Fprint(v.out, termsafe.Text(ev.Text))
		v.midLine = !strings.HasSuffix(ev.Text, "\n")
	case events.RunStarted:
		v.endLine()
		v.streamed = false
		v.runHeader(ev.Run)
	case events.RunOutput:
		v.streamed = true
		// Escaped, unlike sandboxctl exec's: the model wrote the code,
		// the operator did not, and the output is the sandbox's.
		fmt.Fprint(v.out, termsafe.Text(ev.Chunk.Text))
		v.midLine = !strings.HasSuffix(ev.Chunk.Text, "\n")
	case events.RunFinished:
		v.endLine()
		v.runFooter(ctx, ev.Run)
	case events.TurnFinished:
		v.endLine()
		v.drafted.Reset() // a stopped answer's start
		v.drafting = false
		if ev.Turn != nil && ev.Conversation != nil {
			u, c := ev.Turn.Usage, ev.Conversation.Usage
			fmt.Fprintf(v.out, "tokens: this message %d (prompt %d, completion %d; %d model calls) · conversation %d\n",
				u.Total(), u.PromptTokens, u.CompletionTokens, ev.Turn.ModelCalls, c.Total())
		}
		return true
	}
	return false
}

func (v *viewer) endLine() {
	if v.midLine {
		fmt.Fprintln(v.out)
		v.midLine = false
	}
}

func (v *viewer) runHeader(r *session.ToolRun) {
	if r.Name != tools.RunCodeName {
		fmt.Fprintf(v.out, "── %s %s\n", termsafe.Field(r.Name), termsafe.Line(r.Arguments))
		return
	}
	args, err := tools.ParseCodeArgs(r.Arguments)
	if err != nil {
		fmt.Fprintf(v.out, "── run_code (bad arguments) %s\n", termsafe.Line(r.Arguments))
		return
	}
	fmt.Fprintf(v.out, "── run_code [%s]\n", termsafe.Field(args.Language))
	for _, l := range strings.Split(strings.TrimRight(args.Code, "\n"), "\n") {
		fmt.Fprintf(v.out, "│ %s\n", termsafe.Line(l))
	}
	fmt.Fprintln(v.out, "── output")
}

// maxReason bounds the output shown for a call that streamed none.
const maxReason = 4 << 10

// runFooter prints a call's outcome and saves its images and charts. A call
// that failed before it could stream output (sandboxd unreachable, bad
// arguments) gets its recorded output shown, so the reason is visible.
func (v *viewer) runFooter(ctx context.Context, r *session.ToolRun) {
	if !v.streamed && r.Result.Status != "ok" {
		var b strings.Builder
		for _, c := range r.Result.Console {
			b.WriteString(c.Text)
		}
		reason := strings.TrimSpace(b.String())
		if reason == "" {
			reason = strings.TrimSpace(r.Result.Text)
		}
		if len(reason) > maxReason {
			reason = reason[:maxReason] + "…"
		}
		if reason != "" {
			fmt.Fprintln(v.out, termsafe.Text(reason))
		}
	}
	status := termsafe.Field(r.Result.Status)
	if d := r.Result.Duration; d > 0 {
		status += " in " + roundDuration(d).String()
	}
	if r.Result.StateLost {
		status += " (sandbox state lost)"
	}
	fmt.Fprintf(v.out, "── %s\n", status)
	for _, art := range []struct {
		kind string
		n    int
	}{{session.ArtifactImage, r.Images}, {session.ArtifactChart, r.Charts}} {
		kind := art.kind
		for i := range art.n {
			a, err := v.store.Artifact(ctx, v.conv, r.CallID, kind, i)
			if err != nil {
				fmt.Fprintf(v.out, "(%s %d not available: %v)\n", kind, i+1, err)
				continue
			}
			ext := ".png"
			switch a.MIME {
			case "image/jpeg":
				ext = ".jpg"
			case "text/html":
				ext = ".html"
			}
			data := a.Data
			if a.MIME == "text/html" {
				// Opens offline: plotly.js inside rather than from its CDN.
				data = plotlyjs.Standalone("chart "+r.CallID, string(a.Data))
			}
			path := filepath.Join(v.dir, fmt.Sprintf("%s-%s%d%s", r.CallID, kind, i+1, ext))
			if err := os.MkdirAll(v.dir, 0o755); err == nil {
				err = os.WriteFile(path, data, 0o644)
			}
			if err != nil {
				fmt.Fprintf(v.out, "(saving %s: %v)\n", kind, err)
				continue
			}
			fmt.Fprintf(v.out, "%s saved: %s\n", kind, path)
		}
	}
}

// history prints an existing conversation briefly.
func (v *viewer) history(ctx context.Context) error {
	es, err := v.store.Entries(ctx, v.conv)
	if err != nil {
		return err
	}
	for _, e := range es {
		switch e.Kind {
		case session.KindUser:
			fmt.Fprintf(v.out, "\n> %s\n", termsafe.Text(e.Message.Content))
		case session.KindAssistant:
			if e.Message.Content != "" {
				v.text(e.Message.Content)
			}
			for _, tc := range e.Message.ToolCalls {
				fmt.Fprintf(v.out, "── %s (%d bytes of arguments)\n", termsafe.Field(tc.Name), len(tc.Arguments))
			}
		case session.KindNotice:
			fmt.Fprintf(v.out, "! %s\n", termsafe.Text(e.Notice))
		}
	}
	return nil
}

// roundDuration keeps two or three significant digits: 1.23s, 456ms.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Millisecond)
	default:
		return d.Round(time.Microsecond)
	}
}
