package events_test

import (
	"testing"

	"github.com/sandboxd/sandboxd/agent/events"
	"github.com/sandboxd/sandboxd/agent/session"
	"github.com/sandboxd/sandboxd/agent/tools"
)

func TestLateSubscriberSeesRunningOutput(t *testing.T) {
	h := events.NewHub()
	run := &session.ToolRun{CallID: "call_1"}
	h.Publish(events.Event{ConversationID: "c1", Kind: events.RunStarted, Run: run})
	h.Publish(events.Event{ConversationID: "c1", Kind: events.RunOutput, CallID: "call_1", Chunk: tools.Chunk{Kind: "stdout", Text: "a"}})

	s := h.Subscribe("c1")
	defer s.Close()
	other := h.Subscribe("c2")
	defer other.Close()
	if got := s.Live["call_1"]; len(got) != 1 || got[0].Text != "a" {
		t.Fatalf("snapshot = %+v, want the output so far", s.Live)
	}
	h.Publish(events.Event{ConversationID: "c1", Kind: events.RunOutput, CallID: "call_1", Chunk: tools.Chunk{Kind: "stdout", Text: "b"}})
	h.Publish(events.Event{ConversationID: "c1", Kind: events.RunFinished, Run: run})
	if ev := <-s.C; ev.Kind != events.RunOutput || ev.Chunk.Text != "b" {
		t.Errorf("first event = %+v", ev)
	}
	if ev := <-s.C; ev.Kind != events.RunFinished {
		t.Errorf("second event = %+v", ev)
	}
	select {
	case ev := <-other.C:
		t.Errorf("other conversation got %+v", ev)
	default:
	}
	if late := h.Subscribe("c1"); len(late.Live) != 0 {
		t.Errorf("finished run still live: %+v", late.Live)
	}
}

func TestSlowSubscriberIsDropped(t *testing.T) {
	h := events.NewHub()
	s := h.Subscribe("c1")
	for range 5000 {
		h.Publish(events.Event{ConversationID: "c1", Kind: events.Usage})
	}
	n := 0
	for range s.C {
		n++
	}
	if n == 0 || n >= 5000 {
		t.Errorf("received %d events before the channel closed; want a full buffer, then close", n)
	}
	s.Close() // closing again is harmless
}
