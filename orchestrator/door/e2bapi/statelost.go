package e2bapi

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// A client that leaves an /execute interrupts its command, as E2B's code
// interpreter does. When the command does not stop (it ignores SIGINT),
// sandboxd kills its interpreter and reports state_lost in the command's
// done: but the client that would have read it is gone, and the next
// execution in the context would run on fresh globals without a word. The
// door therefore follows an abandoned command to its end, and tells the
// next execution of the same context and interpreter, as a stderr line
// before its output (the code interpreter's SDKs show it in logs.stderr
// and onStderr; an error line would make a successful run look failed).
// The same holds for state lost that a command's own done reports with
// status ok (the sandbox restarted since the previous command), and for a
// wake that did not bring every global back: a stderr line, so that no
// E2B client meets missing state without a sign.
//
// What is remembered lives in the door's memory: a sandboxd restart in
// between loses it (the driver then reports its own restart, which the
// next execution's done carries).

// Bounds of what the door remembers of abandoned executions.
const (
	// maxAbandonedPerSandbox executions per sandbox, maxAbandoned in all,
	// are remembered; past them the oldest are forgotten.
	maxAbandonedPerSandbox = 32
	maxAbandoned           = 4096
	// abandonedFollow bounds how long the door follows an abandoned
	// command to its end (sandboxd kills one that ignores SIGINT after a
	// 2 s grace).
	abandonedFollow = 2 * time.Minute
	// abandonedWait bounds how long an execution waits for the end of an
	// abandoned command of its context to be known (it has ended: the
	// context ran the next command).
	abandonedWait = 10 * time.Second
)

// kernelKind is the interpreter whose globals a language's commands share:
// "" for bash, which keeps none.
func kernelKind(lang string) string {
	switch core.CanonicalLanguage(lang) {
	case ioproto.LanguageBash:
		return ""
	case ioproto.LanguageJavaScript, ioproto.LanguageTypeScript:
		return "node"
	case ioproto.LanguageR:
		return "r"
	case ioproto.LanguageJava:
		return "java"
	}
	return "python"
}

// abandoned is an execution whose client left before its end.
type abandoned struct {
	commandID string
	contextID string
	// ready is closed once the fields below are known.
	ready    chan struct{}
	kind     string
	lost     bool
	reason   string
	finished bool // its done was seen
}

// abandonedTable holds the abandoned executions, by sandbox, until the
// next execution in their context learns how they ended.
type abandonedTable struct {
	mu    sync.Mutex
	bySB  map[string][]*abandoned
	count int
}

func (t *abandonedTable) add(sandboxID string, a *abandoned) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.bySB == nil {
		t.bySB = map[string][]*abandoned{}
	}
	if t.count >= maxAbandoned {
		for id := range t.bySB { // forget an arbitrary sandbox's
			t.count -= len(t.bySB[id])
			delete(t.bySB, id)
			break
		}
	}
	list := t.bySB[sandboxID]
	if len(list) >= maxAbandonedPerSandbox {
		list = list[1:]
		t.count--
	}
	t.bySB[sandboxID] = append(list, a)
	t.count++
}

// inContext returns the abandoned executions of a sandbox's context.
func (t *abandonedTable) inContext(sandboxID, contextID string) []*abandoned {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*abandoned
	for _, a := range t.bySB[sandboxID] {
		if a.contextID == contextID {
			out = append(out, a)
		}
	}
	return out
}

func (t *abandonedTable) remove(sandboxID string, a *abandoned) {
	t.mu.Lock()
	defer t.mu.Unlock()
	list := t.bySB[sandboxID]
	for i, x := range list {
		if x == a {
			list = append(list[:i:i], list[i+1:]...)
			t.count--
			break
		}
	}
	if len(list) == 0 {
		delete(t.bySB, sandboxID)
	} else {
		t.bySB[sandboxID] = list
	}
}

func (t *abandonedTable) forget(sandboxID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.count -= len(t.bySB[sandboxID])
	delete(t.bySB, sandboxID)
}

// abandon interrupts a command whose client left (lang and contextID as
// known: from its started event, else its request), after remembering it,
// and follows it to its end, from afterSeq, in the background: the next
// execution of its context then learns whether its state was lost. The
// command is remembered before it is interrupted, so the next command of
// its context, which starts only once this one has ended, finds it.
func (s *Server) abandon(ctx context.Context, sandboxID, commandID, contextID, lang string, afterSeq int64) {
	a := &abandoned{commandID: commandID, contextID: contextID, kind: kernelKind(lang), ready: make(chan struct{})}
	if a.kind != "" {
		s.abandoned.add(sandboxID, a)
	}
	ctx = context.WithoutCancel(ctx)
	ictx, icancel := context.WithTimeout(ctx, 10*time.Second)
	defer icancel()
	if err := s.m.Interrupt(ictx, sandboxID, commandID); err != nil {
		s.log.Warn("interrupting an abandoned /execute", "sandbox_id", sandboxID, "command_id", commandID, "error", err)
	}
	if a.kind == "" {
		return
	}
	go func() {
		defer close(a.ready)
		fctx, fcancel := context.WithTimeout(ctx, abandonedFollow)
		defer fcancel()
		err := s.m.Follow(fctx, sandboxID, commandID, afterSeq, func(ev core.Event) error {
			switch ev.Type {
			case ioproto.EventStarted:
				a.kind = kernelKind(ev.Language)
			case ioproto.EventDone:
				a.finished, a.lost, a.reason = true, ev.StateLost, ev.Reason
			}
			return nil
		})
		if err != nil || !a.finished {
			s.log.Warn("following an abandoned /execute to its end", "sandbox_id", sandboxID, "command_id", commandID, "error", err)
		}
	}()
}

// lostNotices are the notices an execution gives before its output, once
// it started (ev, its started event): state lost by abandoned executions of
// its context and interpreter, and globals a wake did not bring back.
func (s *Server) lostNotices(ctx context.Context, sandboxID string, ev core.Event) []string {
	var out []string
	if w := core.WakeFromEvent(ev.Wake); w != nil && (w.Level == ioproto.LevelFiles || len(w.Lost) > 0) {
		msg := "the sandbox was resumed"
		if w.Level == ioproto.LevelFiles {
			msg += " with its files only: the globals defined before it was paused are gone"
		}
		if len(w.Lost) > 0 {
			names := make([]string, 0, min(len(w.Lost), 20))
			for _, l := range w.Lost[:min(len(w.Lost), 20)] {
				names = append(names, l.Name)
			}
			msg += "; globals not kept: " + strings.Join(names, ", ")
			if len(w.Lost) > 20 {
				msg += fmt.Sprintf(" and %d more", len(w.Lost)-20)
			}
		}
		if w.Reason != "" {
			msg += " (" + w.Reason + ")"
		}
		out = append(out, msg)
	}
	kind := kernelKind(ev.Language)
	if kind == "" {
		return out
	}
	for _, a := range s.abandoned.inContext(sandboxID, cmpOr(ev.ContextID, ioproto.DefaultContext)) {
		t := time.NewTimer(abandonedWait)
		select {
		case <-a.ready:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		select {
		case <-a.ready:
		default:
			continue // not known yet: a later execution may learn it
		}
		if a.lost && a.kind != kind {
			continue // another interpreter's globals: for its next execution
		}
		s.abandoned.remove(sandboxID, a)
		if a.lost {
			out = append(out, fmt.Sprintf("an earlier execution in this context (command %s) ended after its client had gone, and its state was lost: %s", a.commandID, a.reason))
		}
	}
	return out
}

// noticeLine is a notice as the stderr line of an execution.
func noticeLine(msg string) map[string]any {
	return map[string]any{"type": "stderr", "text": "[sandboxd] state_lost: " + msg + "\n", "timestamp": timestamp(time.Time{})}
}
