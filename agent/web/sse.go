package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/sandboxd/sandboxd/agent/events"
	"github.com/sandboxd/sandboxd/agent/session"
)

// keepAlive is how often an idle event stream sends a comment, so proxies
// and browsers keep it open.
const keepAlive = 15 * time.Second

// events streams a conversation's updates as server-sent events:
//
//	sync   {chat: [fragment], trace: [fragment], state}  the whole view, first
//	item   {panel, id, v, html}                          add or replace an element
//	out    {id, kind, text}                              output of a running call
//	delta  {text}                                        the model's answer as it is written
//	state  {running, usage}                              token counter and busy flag
//	sandbox {html}                                       the sandbox's CPU and memory, every sandboxRefresh
//
// A client that falls behind is disconnected; the browser's EventSource
// reconnects and gets a fresh sync.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	c, _, ok := s.conversation(w, r)
	if !ok {
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	ctx := r.Context()
	sub := s.agent.Hub().Subscribe(c.ID)
	defer sub.Close()
	// Subscribed first, then read the store: nothing falls in between, and
	// anything both in the view and in an event is applied idempotently.
	c, err := s.store.Conversation(ctx, c.ID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v, err := s.view(ctx, c, sub.Live)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	rc := http.NewResponseController(w)
	send := func(name string, data any) error {
		b, err := json.Marshal(data)
		if err != nil {
			return err
		}
		rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b); err != nil {
			return err
		}
		flusher.Flush()
		return nil
	}
	fmt.Fprint(w, "retry: 1000\n\n")
	if send("sync", map[string]any{"chat": v.Chat, "trace": v.Trace, "state": state{Running: v.Running, Usage: string(v.Usage)}}) != nil {
		return
	}
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	// The sandbox's figures; without metrics the channel stays nil.
	var sandboxTick <-chan time.Time
	if s.metrics != nil {
		t := time.NewTicker(sandboxRefresh)
		defer t.Stop()
		sandboxTick = t.C
	}
	for {
		var err error
		select {
		case <-ctx.Done():
			return
		case <-s.shutdown:
			return
		case <-tick.C:
			rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
			_, err = fmt.Fprint(w, ": keep-alive\n\n")
			flusher.Flush()
		case <-sandboxTick:
			// The conversation's sandbox may have changed (a new one after
			// a death): read it again.
			if cur, cerr := s.store.Conversation(ctx, c.ID); cerr == nil {
				err = send("sandbox", map[string]string{"html": string(s.sandboxHTML(ctx, cur.SandboxID))})
			}
		case ev, ok := <-sub.C:
			if !ok {
				return // fell behind: the browser reconnects and resyncs
			}
			err = s.sendEvent(r, ev, send)
		}
		if err != nil {
			return
		}
	}
}

// sendChatItem sends an entry's chat item, if it has one.
func (s *Server) sendChatItem(convID string, e session.Entry, runs []session.ToolRun, send func(string, any) error) error {
	byCall := map[string]*session.ToolRun{}
	for i := range runs {
		byCall[runs[i].CallID] = &runs[i]
	}
	it, ok := newChatItem(convID, e, byCall)
	if !ok {
		return nil
	}
	f, err := s.fragment("chat-item", it.ID, it)
	if err != nil {
		return err
	}
	return send("item", item{Panel: "chat", fragment: f})
}

// state is the busy flag and the token counter.
type state struct {
	Running bool   `json:"running"`
	Usage   string `json:"usage"`
}

// item is an element to add or replace.
type item struct {
	Panel string `json:"panel"`
	fragment
}

// MarshalJSON flattens the fragment.
func (i item) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]string{"panel": i.Panel, "id": i.ID, "v": i.V, "html": string(i.HTML)})
}

// MarshalJSON names a fragment's fields for the script.
func (f fragment) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]string{"id": f.ID, "v": f.V, "html": string(f.HTML)})
}

func (s *Server) sendEvent(r *http.Request, ev events.Event, send func(string, any) error) error {
	ctx := r.Context()
	switch ev.Kind {
	case events.EntryAdded:
		runs, err := s.store.Runs(ctx, ev.ConversationID)
		if err != nil {
			return err
		}
		return s.sendChatItem(ev.ConversationID, *ev.Entry, runs, send)
	case events.RunStarted, events.RunFinished:
		runs, err := s.store.Runs(ctx, ev.ConversationID)
		if err != nil {
			return err
		}
		n, first := len(runs), true
		for i, r := range runs {
			if r.CallID == ev.Run.CallID {
				n, first = i+1, i == 0 || runs[i-1].Turn != r.Turn
			}
		}
		// The store's copy, if it has one, so that the chip below agrees.
		run := *ev.Run
		if n <= len(runs) && runs[n-1].CallID == run.CallID {
			runs[n-1] = run
		}
		rv := newRunView(ev.ConversationID, n, run, nil, first)
		f, err := s.fragment("run", rv.ID, rv)
		if err != nil {
			return err
		}
		if err := send("item", item{Panel: "trace", fragment: f}); err != nil {
			return err
		}
		// The chat message that made the call: its chip and figures.
		entries, err := s.store.Entries(ctx, ev.ConversationID)
		if err != nil {
			return err
		}
		for _, e := range entries {
			for _, tc := range e.Message.ToolCalls {
				if e.Kind == session.KindAssistant && tc.ID == run.CallID {
					return s.sendChatItem(ev.ConversationID, e, runs, send)
				}
			}
		}
		return nil
	case events.TextDelta:
		return send("delta", map[string]string{"text": ev.Text})
	case events.RunOutput:
		return send("out", map[string]string{"id": "run-" + ev.CallID, "kind": ev.Chunk.Kind, "text": ev.Chunk.Text})
	case events.Usage, events.TurnStarted, events.TurnFinished:
		u, err := s.renderHTML("usage", newUsageView(*ev.Conversation, *ev.Turn))
		if err != nil {
			return err
		}
		return send("state", state{Running: ev.Kind != events.TurnFinished, Usage: string(u)})
	}
	return nil
}
