// Package loop is the agent: it runs a conversation's turns (call the model
// with the tools, run the tool calls in the user's sandbox, feed the results
// back, until the model answers without tool calls), writing every step to
// the session store before acting on it, and resumes turns a crash
// interrupted.
package loop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/agent/events"
	"github.com/sandboxd/sandboxd/agent/imagefit"
	"github.com/sandboxd/sandboxd/agent/llm"
	"github.com/sandboxd/sandboxd/agent/session"
	"github.com/sandboxd/sandboxd/agent/tools"
	"github.com/sandboxd/sandboxd/client"
)

// Sandboxes is what the agent needs from sandboxd; *client.Client is the
// real one.
type Sandboxes interface {
	Acquire(ctx context.Context, userID string, opts ...client.AcquireOption) (client.Acquired, error)
	Check(ctx context.Context, sandboxID string) error
	Interrupt(ctx context.Context, sandboxID, commandID string) error
}

// Config is what an Agent is made of.
type Config struct {
	// Store keeps the conversations.
	Store *session.Store
	// Model answers.
	Model llm.Model
	// Tools are offered to the model.
	Tools *tools.Registry
	// Sandboxes provides users' sandboxes.
	Sandboxes Sandboxes
	// Hub receives events; nil means a private hub.
	Hub *events.Hub
	// MaxIterations bounds the model calls of one turn; 0 means 20.
	MaxIterations int
	// SystemPrompt is the base system prompt; the tools' instructions are
	// appended. Empty means DefaultSystemPrompt.
	SystemPrompt string
	// ImageLimits bound the images sent to the model; zero means
	// imagefit.DefaultLimits.
	ImageLimits imagefit.Limits
	// NoImageInput keeps tool images from the model, for models that do not
	// accept image input (people still see them).
	NoImageInput bool
	// StopGrace is how long Stop waits for an interrupted command to end
	// before abandoning it; 0 means 5 seconds (sandboxd kills a command that
	// ignores the interrupt after 2).
	StopGrace time.Duration
	// Logger logs; nil means slog.Default().
	Logger *slog.Logger
}

// DefaultSystemPrompt is the base system prompt.
const DefaultSystemPrompt = `You are a helpful assistant with a code sandbox. Use it to compute, analyse data and make charts instead of guessing results you can compute. Keep answers short and clear, formatted in Markdown; show code only when it helps the user.`

// ErrClosed means the agent is shutting down.
var ErrClosed = errors.New("agent is shutting down")

// Cancellation causes of a turn.
var (
	errStopped  = errors.New("stopped by the user")
	errShutdown = errors.New("agent shutting down")
)

// Agent runs conversations. It is safe for concurrent use; each
// conversation runs at most one turn at a time.
type Agent struct {
	cfg    Config
	log    *slog.Logger
	system string

	mu     sync.Mutex
	active map[string]*activeTurn
	closed bool
	wg     sync.WaitGroup
}

// activeTurn is a turn being worked on.
type activeTurn struct {
	cancel  context.CancelCauseFunc
	done    chan struct{}
	stopped bool
	// sandboxID and commandID name the command running now, if any, so
	// Stop can interrupt it.
	sandboxID, commandID string
}

// New returns an agent.
func New(cfg Config) (*Agent, error) {
	if cfg.Store == nil || cfg.Model == nil || cfg.Tools == nil || cfg.Sandboxes == nil {
		return nil, errors.New("loop.New: Store, Model, Tools and Sandboxes are required")
	}
	if cfg.Hub == nil {
		cfg.Hub = events.NewHub()
	}
	if cfg.MaxIterations <= 0 {
		cfg.MaxIterations = 20
	}
	if cfg.SystemPrompt == "" {
		cfg.SystemPrompt = DefaultSystemPrompt
	}
	if cfg.ImageLimits == (imagefit.Limits{}) {
		cfg.ImageLimits = imagefit.DefaultLimits
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	system := cfg.SystemPrompt
	if ins := cfg.Tools.Instructions(); ins != "" {
		system += "\n\n" + ins
	}
	return &Agent{cfg: cfg, log: cfg.Logger, system: system, active: map[string]*activeTurn{}}, nil
}

// Hub is where the agent publishes events.
func (a *Agent) Hub() *events.Hub { return a.cfg.Hub }

// Store is the agent's session store.
func (a *Agent) Store() *session.Store { return a.cfg.Store }

// SystemPrompt is the full system prompt sent with every model call.
func (a *Agent) SystemPrompt() string { return a.system }

// Send records the user's message in a conversation and starts working on
// it in the background; follow the conversation's events (or Done) for the
// outcome. session.ErrBusy if the conversation is still working on the
// previous message.
func (a *Agent) Send(ctx context.Context, convID, text string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return ErrClosed
	}
	if _, busy := a.active[convID]; busy {
		return fmt.Errorf("conversation %s: %w", convID, session.ErrBusy)
	}
	e, err := a.cfg.Store.BeginTurn(ctx, convID, text)
	if err != nil {
		return err
	}
	a.publish(convID, events.Event{Kind: events.EntryAdded, Entry: &e})
	a.publishUsage(convID, events.TurnStarted)
	a.startLocked(convID)
	return nil
}

// ResumeAll resumes every conversation whose turn a crash interrupted. It is
// meant for start-up, before serving.
func (a *Agent) ResumeAll(ctx context.Context) (int, error) {
	convs, err := a.cfg.Store.Interrupted(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range convs {
		ok, err := a.Resume(ctx, c.ID)
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}

// Resume resumes conversation convID if a crash interrupted its turn, and
// says whether it did.
func (a *Agent) Resume(ctx context.Context, convID string) (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return false, ErrClosed
	}
	if _, busy := a.active[convID]; busy {
		return false, nil
	}
	c, err := a.cfg.Store.Conversation(ctx, convID)
	if err != nil || c.State != session.StateRunning {
		return false, err
	}
	a.log.Info("resuming interrupted conversation", "conversation", convID)
	turn, err := a.cfg.Store.LastTurn(ctx, convID)
	if err != nil {
		return false, err
	}
	e, err := a.cfg.Store.AddNotice(ctx, convID, turn.N, "The agent restarted while working on this message; it resumes where it stopped.")
	if err != nil {
		return false, err
	}
	a.publish(convID, events.Event{Kind: events.EntryAdded, Entry: &e})
	a.publishUsage(convID, events.TurnStarted)
	a.startLocked(convID)
	return true, nil
}

// startLocked runs convID's current turn in the background.
func (a *Agent) startLocked(convID string) {
	ctx, cancel := context.WithCancelCause(context.Background())
	t := &activeTurn{cancel: cancel, done: make(chan struct{})}
	a.active[convID] = t
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer close(t.done)
		defer cancel(nil)
		a.runTurn(ctx, convID, t)
		a.release(convID, t) // if endTurn did not (shutdown)
	}()
}

// release frees the conversation for its next turn.
func (a *Agent) release(convID string, t *activeTurn) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.active[convID] == t {
		delete(a.active, convID)
	}
}

// Running says whether the conversation is working on a message.
func (a *Agent) Running(convID string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.active[convID]
	return ok
}

// Done returns a channel closed when the conversation's current turn has
// ended and its goroutine returned (already closed when there is none).
func (a *Agent) Done(convID string) <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t, ok := a.active[convID]; ok {
		return t.done
	}
	c := make(chan struct{})
	close(c)
	return c
}

// Stop ends the conversation's current turn: the running command is
// interrupted (its Python state is kept), calls not yet run are skipped,
// and the model is not called again. It returns at once; the turn ends
// shortly after (see Done).
func (a *Agent) Stop(convID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.active[convID]
	if !ok || t.stopped {
		return
	}
	t.stopped = true
	if t.commandID == "" {
		t.cancel(errStopped)
		return
	}
	sb, cmd := t.sandboxID, t.commandID
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), a.cfg.StopGrace)
		defer cancel()
		if err := a.cfg.Sandboxes.Interrupt(ctx, sb, cmd); err != nil {
			a.log.Warn("interrupting command", "conversation", convID, "command", cmd, "err", err)
		}
		// The command normally ends (interrupted) well within the grace
		// period; if not, abandon it.
		select {
		case <-t.done:
		case <-time.After(a.cfg.StopGrace):
			t.cancel(errStopped)
		}
	}()
}

// Close stops working: running turns are abandoned as they are, so the next
// agent process on the same store resumes them (their commands keep running
// in the sandboxes). It waits for the turns' goroutines to return.
func (a *Agent) Close() {
	a.mu.Lock()
	a.closed = true
	for _, t := range a.active {
		t.cancel(errShutdown)
	}
	a.mu.Unlock()
	a.wg.Wait()
}

func (a *Agent) setCommand(t *activeTurn, sandboxID, commandID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t.sandboxID, t.commandID = sandboxID, commandID
}

func (a *Agent) isStopped(t *activeTurn) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return t.stopped
}

func (a *Agent) publish(convID string, ev events.Event) {
	ev.ConversationID = convID
	a.cfg.Hub.Publish(ev)
}

// publishUsage publishes the conversation's and current turn's state.
func (a *Agent) publishUsage(convID string, kind events.Kind) {
	ctx := context.Background()
	c, err := a.cfg.Store.Conversation(ctx, convID)
	if err != nil {
		a.log.Warn("reading conversation", "conversation", convID, "err", err)
		return
	}
	t, err := a.cfg.Store.LastTurn(ctx, convID)
	if err != nil {
		a.log.Warn("reading turn", "conversation", convID, "err", err)
		return
	}
	a.publish(convID, events.Event{Kind: kind, Conversation: &c, Turn: &t})
}
