package loop

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"

	"github.com/sandboxd/sandboxd/agent/events"
	"github.com/sandboxd/sandboxd/agent/llm"
	"github.com/sandboxd/sandboxd/agent/session"
	"github.com/sandboxd/sandboxd/agent/tools"
)

// runTurn works on the conversation's current turn until the model answers
// without tool calls, the iteration bound is hit, the user stops it, or the
// agent shuts down (which leaves the turn to be resumed).
//
// Every iteration starts from the store, so a turn resumed after a crash
// takes exactly the same path as one that never stopped: tool calls that
// are recorded but unanswered are run (or resumed by command ID), then the
// model is called.
func (a *Agent) runTurn(ctx context.Context, convID string, t *activeTurn) {
	store := a.cfg.Store
	// Store writes must not be cut short by a cancelled turn: a step is
	// either recorded whole or not at all, and the cancellation is handled
	// at the top of the loop.
	db := context.WithoutCancel(ctx)
	fail := func(what string, err error) {
		a.log.Error("turn failed", "conversation", convID, "step", what, "err", err)
		turn, _ := store.LastTurn(db, convID)
		a.notice(db, convID, turn.N, fmt.Sprintf("Internal error while %s: %v", what, err))
		a.endTurn(db, convID, turn.N, t)
	}
	for {
		turn, err := store.LastTurn(db, convID)
		if err != nil {
			fail("reading the conversation", err)
			return
		}
		if a.isStopped(t) || errors.Is(context.Cause(ctx), errStopped) {
			a.finishStopped(db, convID, turn.N, t)
			return
		}
		if ctx.Err() != nil {
			return // shutting down: the next agent process resumes the turn
		}
		entries, err := store.Entries(db, convID)
		if err != nil {
			fail("reading the conversation", err)
			return
		}
		runs, err := store.Runs(db, convID)
		if err != nil {
			fail("reading the tool calls", err)
			return
		}

		// Recorded tool calls without a result: run (or resume) them.
		var pending []session.ToolRun
		for _, r := range runs {
			if r.Turn == turn.N && r.State != session.RunDone {
				pending = append(pending, r)
			}
		}
		if len(pending) > 0 {
			conv, err := store.Conversation(db, convID)
			if err != nil {
				fail("reading the conversation", err)
				return
			}
			for _, r := range pending {
				if a.isStopped(t) || ctx.Err() != nil {
					break
				}
				if err := a.runTool(ctx, t, &conv, turn.N, r); err != nil && ctx.Err() == nil {
					fail("recording a tool result", err)
					return
				}
			}
			continue
		}

		iterations := 0
		var last *session.Entry
		for i, e := range entries {
			if e.Turn != turn.N || e.Kind == session.KindNotice {
				continue
			}
			if e.Kind == session.KindAssistant {
				iterations++
			}
			last = &entries[i]
		}
		if last != nil && last.Kind == session.KindAssistant && len(last.Message.ToolCalls) == 0 {
			// Answered (also after a crash that came before the turn was closed).
			a.endTurn(db, convID, turn.N, t)
			return
		}
		if iterations >= a.cfg.MaxIterations {
			a.notice(db, convID, turn.N, fmt.Sprintf("Stopped after %d model calls without a final answer (the limit per message). Send another message to continue.", iterations))
			a.endTurn(db, convID, turn.N, t)
			return
		}

		req := a.request(entries)
		// The answer as the model writes it, for the people watching; the
		// stored entry below is the whole of it.
		req.OnText = func(delta string) { a.publish(convID, events.Event{Kind: events.TextDelta, Text: delta}) }
		resp, err := a.cfg.Model.Complete(ctx, req)
		if err != nil {
			if ctx.Err() != nil {
				continue // stopped or shutting down: handled above
			}
			a.log.Warn("model call failed", "conversation", convID, "err", err)
			a.notice(db, convID, turn.N, fmt.Sprintf("The model call failed: %v", err))
			a.endTurn(db, convID, turn.N, t)
			return
		}
		calls := assignCallIDs(convID, &resp.Message, runs)
		e, err := store.AddAssistant(db, convID, turn.N, resp.Message, resp.Usage, calls)
		if err != nil {
			fail("recording the model's answer", err)
			return
		}
		a.publish(convID, events.Event{Kind: events.EntryAdded, Entry: &e})
		a.publishUsage(convID, events.Usage)
	}
}

// request builds the model call from the stored conversation.
func (a *Agent) request(entries []session.Entry) llm.Request {
	results := map[string]llm.Message{}
	for _, e := range entries {
		if e.Kind == session.KindTool {
			results[e.Message.ToolCallID] = e.Message
		}
	}
	var msgs []llm.Message
	for _, e := range entries {
		switch e.Kind {
		case session.KindUser:
			msgs = append(msgs, e.Message)
		case session.KindAssistant:
			msgs = append(msgs, e.Message)
			// Each call's result right after the call, as the API requires,
			// whatever was stored in between.
			for _, tc := range e.Message.ToolCalls {
				res, ok := results[tc.ID]
				if !ok {
					res = llm.Message{Role: llm.RoleTool, ToolCallID: tc.ID, Content: "error: this call has no result (it was interrupted)"}
				}
				msgs = append(msgs, res)
			}
		}
	}
	return llm.Request{System: a.system, Messages: msgs, Tools: a.cfg.Tools.Specs()}
}

// callID is what the agent accepts as a model's tool call ID: it becomes
// part of URLs and element IDs.
var callID = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// assignCallIDs gives each tool call of msg a command ID, and replaces call
// IDs that are missing, odd or already used in the conversation (some local
// model servers number calls from 0 in every answer).
func assignCallIDs(convID string, msg *llm.Message, runs []session.ToolRun) []session.NewCall {
	used := map[string]bool{}
	for _, r := range runs {
		used[r.CallID] = true
	}
	var calls []session.NewCall
	for i := range msg.ToolCalls {
		tc := &msg.ToolCalls[i]
		if !callID.MatchString(tc.ID) || used[tc.ID] {
			b := make([]byte, 8)
			rand.Read(b)
			tc.ID = "call_" + hex.EncodeToString(b)
		}
		used[tc.ID] = true
		calls = append(calls, session.NewCall{CallID: tc.ID, Name: tc.Name, Arguments: tc.Arguments, CommandID: session.NewCommandID(convID)})
	}
	return calls
}

// finishStopped ends a turn the user stopped: calls without a result get
// one saying so, so the conversation stays well-formed for the model.
func (a *Agent) finishStopped(db context.Context, convID string, turn int, t *activeTurn) {
	runs, err := a.cfg.Store.Runs(db, convID)
	if err != nil {
		a.log.Error("reading tool calls", "conversation", convID, "err", err)
	}
	for _, r := range runs {
		if r.Turn != turn || r.State == session.RunDone {
			continue
		}
		text := "not run: the user stopped the turn"
		if r.State == session.RunRunning {
			text = "stopped by the user before it finished; its outcome is unknown"
			if r.SandboxID != "" {
				// Abandoned without seeing its end: make sure it does not
				// keep running (best effort; it may be over already).
				ctx, cancel := context.WithTimeout(db, a.cfg.StopGrace)
				_ = a.cfg.Sandboxes.Interrupt(ctx, r.SandboxID, r.CommandID)
				cancel()
			}
		}
		res := tools.Result{Text: text, Status: "stopped", IsError: true, Console: []tools.Chunk{{Kind: tools.ChunkError, Text: text + "\n"}}}
		if err := a.finishRun(db, convID, turn, r, res); err != nil {
			a.log.Error("recording a stopped call", "conversation", convID, "call", r.CallID, "err", err)
		}
	}
	a.notice(db, convID, turn, "Stopped.")
	a.endTurn(db, convID, turn, t)
}

// notice records and publishes a notice for people.
func (a *Agent) notice(db context.Context, convID string, turn int, text string) {
	e, err := a.cfg.Store.AddNotice(db, convID, turn, text)
	if err != nil {
		a.log.Error("recording a notice", "conversation", convID, "notice", text, "err", err)
		return
	}
	a.publish(convID, events.Event{Kind: events.EntryAdded, Entry: &e})
}

// endTurn records the end of the turn, then makes the conversation free for
// the next message, then says so: whoever sees TurnFinished can Send at
// once.
func (a *Agent) endTurn(db context.Context, convID string, turn int, t *activeTurn) {
	if err := a.cfg.Store.EndTurn(db, convID, turn); err != nil {
		a.log.Error("ending a turn", "conversation", convID, "err", err)
	}
	a.release(convID, t)
	a.publishUsage(convID, events.TurnFinished)
}
