package web

import (
	"bytes"
	"context"
	"html/template"
	"net/http"

	"github.com/sandboxd/sandboxd/agent/session"
	"github.com/sandboxd/sandboxd/agent/tools"
)

// pageData is what the page template shows.
type pageData struct {
	User          string
	Conversations []convLink
	// Usage is the token counter.
	Usage template.HTML
	// Conv is nil on the home page (a new conversation).
	Conv *convView
}

type convLink struct {
	ID, Title       string
	Active, Running bool
}

// convView is one conversation as shown.
type convView struct {
	ID, Title string
	Running   bool
	Chat      []fragment
	Trace     []fragment
	Usage     template.HTML
	// Sandbox is its sandbox's CPU and memory (sandbox.go), or empty.
	Sandbox template.HTML
}

// fragment is one element of the chat or the trace, rendered, with its ID
// and version (see version).
type fragment struct {
	ID, V string
	HTML  template.HTML
}

// view builds a conversation's view from the store; live is the output of
// running calls (from an events subscription).
func (s *Server) view(ctx context.Context, c session.Conversation, live map[string][]tools.Chunk) (*convView, error) {
	entries, err := s.store.Entries(ctx, c.ID)
	if err != nil {
		return nil, err
	}
	runs, err := s.store.Runs(ctx, c.ID)
	if err != nil {
		return nil, err
	}
	turn, err := s.store.LastTurn(ctx, c.ID)
	if err != nil {
		return nil, err
	}
	// The stored state, not the agent's in-memory one: the agent records the
	// end of a turn before it publishes it, so a view read after subscribing
	// is never stuck on "running".
	v := &convView{ID: c.ID, Title: c.Title, Running: c.State == session.StateRunning, Sandbox: s.sandboxHTML(ctx, c.SandboxID)}
	for _, it := range chatItems(c.ID, entries, runs) {
		f, err := s.fragment("chat-item", it.ID, it)
		if err != nil {
			return nil, err
		}
		v.Chat = append(v.Chat, f)
	}
	for i, r := range runs {
		rv := newRunView(c.ID, i+1, r, live[r.CallID], i == 0 || runs[i-1].Turn != r.Turn)
		f, err := s.fragment("run", rv.ID, rv)
		if err != nil {
			return nil, err
		}
		v.Trace = append(v.Trace, f)
	}
	if v.Usage, err = s.renderHTML("usage", newUsageView(c, turn)); err != nil {
		return nil, err
	}
	if v.Title == "" {
		v.Title = "New chat"
	}
	return v, nil
}

// fragment renders a chat or trace item with its version: rendered once to
// compute the version, then with it.
func (s *Server) fragment(name, id string, data any) (fragment, error) {
	type versioned struct {
		V    string
		Item any
	}
	h, err := s.renderHTML(name, versioned{Item: data})
	if err != nil {
		return fragment{}, err
	}
	v := version(string(h))
	h, err = s.renderHTML(name, versioned{V: v, Item: data})
	return fragment{ID: id, V: v, HTML: h}, err
}

func (s *Server) renderHTML(name string, data any) (template.HTML, error) {
	var buf bytes.Buffer
	if err := s.tmpl.ExecuteTemplate(&buf, name, data); err != nil {
		return "", err
	}
	return template.HTML(buf.String()), nil
}

// render writes the full page.
func (s *Server) render(w http.ResponseWriter, r *http.Request, user string, c *session.Conversation) {
	ctx := r.Context()
	d := pageData{User: user}
	convs, err := s.store.Conversations(ctx, user)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	for _, cv := range convs {
		title := cv.Title
		if title == "" {
			title = "New chat"
		}
		d.Conversations = append(d.Conversations, convLink{ID: cv.ID, Title: title, Active: c != nil && cv.ID == c.ID, Running: cv.State == session.StateRunning})
	}
	if c != nil {
		// Running output is in the hub until the call ends.
		sub := s.agent.Hub().Subscribe(c.ID)
		live := sub.Live
		sub.Close()
		if d.Conv, err = s.view(ctx, *c, live); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	if d.Conv != nil {
		d.Usage = d.Conv.Usage
	} else if d.Usage, err = s.renderHTML("usage", usageView{}); err != nil {
		s.fail(w, r, err)
		return
	}
	var buf bytes.Buffer
	if err := s.tmpl.ExecuteTemplate(&buf, "page", d); err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(buf.Bytes())
}
