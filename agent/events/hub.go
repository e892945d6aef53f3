// Package events carries what the agent does, as it happens, to the people
// watching a conversation (the web UI's server-sent events, the chat CLI).
// Everything an event says is also in the session store, except the output
// of a tool call that is still running, which the hub keeps until the call
// ends so that a late subscriber sees it too.
package events

import (
	"sync"

	"github.com/sandboxd/sandboxd/agent/session"
	"github.com/sandboxd/sandboxd/agent/tools"
)

// Kind says what happened.
type Kind string

// The event kinds.
const (
	// EntryAdded: Entry was stored (a user, assistant or tool message, or a
	// notice).
	EntryAdded Kind = "entry"
	// RunStarted: Run started (or resumed after a restart).
	RunStarted Kind = "run-started"
	// RunOutput: Chunk is more console output of the running call CallID.
	RunOutput Kind = "run-output"
	// RunFinished: Run finished; its result is stored.
	RunFinished Kind = "run-finished"
	// Usage: the token counts changed (Conversation and Turn).
	Usage Kind = "usage"
	// TurnStarted: the conversation started working on a message.
	TurnStarted Kind = "turn-started"
	// TurnFinished: the conversation is idle again.
	TurnFinished Kind = "turn-finished"
	// TextDelta: Text is more of the model's answer, as the model streams
	// it; the whole answer follows as an EntryAdded. Not kept for late
	// subscribers.
	TextDelta Kind = "text-delta"
)

// Event is one thing that happened in a conversation.
type Event struct {
	// ConversationID is where it happened.
	ConversationID string
	// Kind says what happened and which fields are set.
	Kind Kind
	// Entry is the stored entry (EntryAdded).
	Entry *session.Entry
	// Run is the tool call (RunStarted, RunFinished).
	Run *session.ToolRun
	// CallID and Chunk are a running call's output (RunOutput).
	CallID string
	// Chunk is the output.
	Chunk tools.Chunk
	// Text is a piece of the model's answer (TextDelta).
	Text string
	// Conversation and Turn carry the current usage (Usage, TurnStarted,
	// TurnFinished).
	Conversation *session.Conversation
	// Turn is the current turn.
	Turn *session.Turn
}

// subBuffer is how many events a subscriber may lag behind; one that lags
// more is dropped (its channel closed) and must subscribe again, which
// gives it a fresh snapshot.
const subBuffer = 1024

// maxLive bounds the output kept per running call for late subscribers.
const maxLive = 1 << 20

// Hub fans events out to subscribers. The zero value is not usable; use
// NewHub.
type Hub struct {
	mu   sync.Mutex
	subs map[string]map[*Subscription]struct{}
	live map[string]map[string]*liveRun // conversation → call → output so far
}

type liveRun struct {
	chunks []tools.Chunk
	size   int
}

// NewHub returns an empty hub.
func NewHub() *Hub {
	return &Hub{subs: map[string]map[*Subscription]struct{}{}, live: map[string]map[string]*liveRun{}}
}

// Subscription receives a conversation's events.
type Subscription struct {
	// C delivers the events. It is closed by Close, or when the subscriber
	// fell too far behind.
	C <-chan Event
	// Live is the output of the calls running when the subscription
	// started, by call ID; later output arrives on C.
	Live map[string][]tools.Chunk

	c      chan Event
	hub    *Hub
	convID string
	closed bool
}

// Subscribe starts receiving convID's events.
func (h *Hub) Subscribe(convID string) *Subscription {
	c := make(chan Event, subBuffer)
	s := &Subscription{C: c, c: c, hub: h, convID: convID, Live: map[string][]tools.Chunk{}}
	h.mu.Lock()
	defer h.mu.Unlock()
	for call, lr := range h.live[convID] {
		s.Live[call] = append([]tools.Chunk(nil), lr.chunks...)
	}
	if h.subs[convID] == nil {
		h.subs[convID] = map[*Subscription]struct{}{}
	}
	h.subs[convID][s] = struct{}{}
	return s
}

// Close stops the subscription.
func (s *Subscription) Close() {
	h := s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	s.closeLocked()
}

func (s *Subscription) closeLocked() {
	if s.closed {
		return
	}
	s.closed = true
	close(s.c)
	delete(s.hub.subs[s.convID], s)
	if len(s.hub.subs[s.convID]) == 0 {
		delete(s.hub.subs, s.convID)
	}
}

// Publish delivers ev to the conversation's subscribers without blocking.
func (h *Hub) Publish(ev Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch ev.Kind {
	case RunStarted:
		if h.live[ev.ConversationID] == nil {
			h.live[ev.ConversationID] = map[string]*liveRun{}
		}
		h.live[ev.ConversationID][ev.Run.CallID] = &liveRun{}
	case RunOutput:
		if lr := h.live[ev.ConversationID][ev.CallID]; lr != nil && lr.size < maxLive {
			lr.chunks = append(lr.chunks, ev.Chunk)
			lr.size += len(ev.Chunk.Text)
		}
	case RunFinished:
		delete(h.live[ev.ConversationID], ev.Run.CallID)
		if len(h.live[ev.ConversationID]) == 0 {
			delete(h.live, ev.ConversationID)
		}
	}
	for s := range h.subs[ev.ConversationID] {
		select {
		case s.c <- ev:
		default:
			s.closeLocked()
		}
	}
}
