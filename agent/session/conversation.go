package session

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/agent/llm"
)

// State says whether a conversation is working on a message.
type State string

// The conversation states.
const (
	// StateIdle: waiting for the user's next message.
	StateIdle State = "idle"
	// StateRunning: a turn is in progress. Found at start-up, it means the
	// agent crashed in the middle of the turn, which must be resumed.
	StateRunning State = "running"
)

// Conversation is one conversation's header.
type Conversation struct {
	// ID identifies it ("c" and 16 base32 characters).
	ID string
	// UserID owns it; the user's sandbox runs its code.
	UserID string
	// Title is the start of the first message.
	Title string
	// SandboxID is the sandbox its code last ran in (empty before the first
	// tool call).
	SandboxID string
	// State says whether a turn is in progress.
	State State
	// Usage is the tokens of all its model calls.
	Usage llm.Usage
	// CreatedAt and UpdatedAt are when it started and last changed.
	CreatedAt, UpdatedAt time.Time
}

// Turn is one user message and everything the agent did for it.
type Turn struct {
	// N numbers the conversation's turns from 1.
	N int
	// Usage is the tokens of the turn's model calls.
	Usage llm.Usage
	// ModelCalls counts them.
	ModelCalls int
	// StartedAt and FinishedAt bound it; FinishedAt is zero while it runs.
	StartedAt, FinishedAt time.Time
}

const convColumns = `id, user_id, title, sandbox_id, state, prompt_tokens, completion_tokens, created_at, updated_at`

func scanConversation(row interface{ Scan(...any) error }) (Conversation, error) {
	var c Conversation
	var created, updated int64
	err := row.Scan(&c.ID, &c.UserID, &c.Title, &c.SandboxID, &c.State, &c.Usage.PromptTokens, &c.Usage.CompletionTokens, &created, &updated)
	c.CreatedAt, c.UpdatedAt = fromNanos(created), fromNanos(updated)
	return c, err
}

// CreateConversation starts an empty conversation for userID.
func (s *Store) CreateConversation(ctx context.Context, userID string) (Conversation, error) {
	c := Conversation{ID: newID("c"), UserID: userID, State: StateIdle}
	t := now()
	_, err := s.db.ExecContext(ctx, `INSERT INTO conversations (id, user_id, title, created_at, updated_at) VALUES (?, ?, '', ?, ?)`, c.ID, userID, t, t)
	if err != nil {
		return Conversation{}, fmt.Errorf("creating conversation: %w", err)
	}
	c.CreatedAt, c.UpdatedAt = fromNanos(t), fromNanos(t)
	return c, nil
}

// Conversation returns conversation id; ErrNotFound if there is none.
func (s *Store) Conversation(ctx context.Context, id string) (Conversation, error) {
	c, err := scanConversation(s.db.QueryRowContext(ctx, `SELECT `+convColumns+` FROM conversations WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Conversation{}, fmt.Errorf("conversation %s: %w", id, ErrNotFound)
	}
	return c, err
}

// Conversations lists a user's conversations, most recently updated first.
func (s *Store) Conversations(ctx context.Context, userID string) ([]Conversation, error) {
	return s.queryConversations(ctx, `SELECT `+convColumns+` FROM conversations WHERE user_id = ? ORDER BY updated_at DESC`, userID)
}

// Interrupted lists the conversations whose turn was in progress: at
// start-up, the ones a crash interrupted.
func (s *Store) Interrupted(ctx context.Context) ([]Conversation, error) {
	return s.queryConversations(ctx, `SELECT `+convColumns+` FROM conversations WHERE state = ? ORDER BY updated_at`, StateRunning)
}

func (s *Store) queryConversations(ctx context.Context, q string, args ...any) ([]Conversation, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Conversation
	for rows.Next() {
		c, err := scanConversation(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// SetSandbox records the sandbox the conversation's code runs in.
func (s *Store) SetSandbox(ctx context.Context, convID, sandboxID string) error {
	_, err := s.db.ExecContext(ctx, `UPDATE conversations SET sandbox_id = ?, updated_at = ? WHERE id = ?`, sandboxID, now(), convID)
	return err
}

// BeginTurn records the user's message and marks the conversation running.
// ErrBusy if a turn is already in progress.
func (s *Store) BeginTurn(ctx context.Context, convID, text string) (Entry, error) {
	var e Entry
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var state State
		var title string
		if err := tx.QueryRowContext(ctx, `SELECT state, title FROM conversations WHERE id = ?`, convID).Scan(&state, &title); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("conversation %s: %w", convID, ErrNotFound)
			}
			return err
		}
		if state == StateRunning {
			return fmt.Errorf("conversation %s: %w", convID, ErrBusy)
		}
		var turn int
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(turn), 0) + 1 FROM turns WHERE conversation_id = ?`, convID).Scan(&turn); err != nil {
			return err
		}
		t := now()
		if _, err := tx.ExecContext(ctx, `INSERT INTO turns (conversation_id, turn, started_at) VALUES (?, ?, ?)`, convID, turn, t); err != nil {
			return err
		}
		if title == "" {
			title = makeTitle(text)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE conversations SET state = ?, title = ?, updated_at = ? WHERE id = ?`, StateRunning, title, t, convID); err != nil {
			return err
		}
		var err error
		e, err = insertEntry(ctx, tx, convID, Entry{Turn: turn, Kind: KindUser, Message: llm.Message{Role: llm.RoleUser, Content: text}})
		return err
	})
	return e, err
}

// EndTurn marks the turn finished and the conversation idle.
func (s *Store) EndTurn(ctx context.Context, convID string, turn int) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		t := now()
		if _, err := tx.ExecContext(ctx, `UPDATE turns SET finished_at = ? WHERE conversation_id = ? AND turn = ?`, t, convID, turn); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE conversations SET state = ?, updated_at = ? WHERE id = ?`, StateIdle, t, convID)
		return err
	})
}

// LastTurn returns the conversation's newest turn (N is 0 if it has none).
func (s *Store) LastTurn(ctx context.Context, convID string) (Turn, error) {
	var t Turn
	var started, finished int64
	err := s.db.QueryRowContext(ctx, `SELECT turn, prompt_tokens, completion_tokens, model_calls, started_at, finished_at FROM turns
		WHERE conversation_id = ? ORDER BY turn DESC LIMIT 1`, convID).Scan(&t.N, &t.Usage.PromptTokens, &t.Usage.CompletionTokens, &t.ModelCalls, &started, &finished)
	if errors.Is(err, sql.ErrNoRows) {
		return Turn{}, nil
	}
	t.StartedAt, t.FinishedAt = fromNanos(started), fromNanos(finished)
	return t, err
}

// makeTitle is the first line of text, cut at a word near 60 characters.
func makeTitle(text string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(text), "\n")
	r := []rune(line)
	if len(r) <= 60 {
		return line
	}
	cut := string(r[:60])
	if i := strings.LastIndexByte(cut, ' '); i > 30 {
		cut = cut[:i]
	}
	return cut + "…"
}

// DeleteConversation removes a conversation with everything stored for it
// (turns, entries, tool calls, artifacts); ErrNotFound if there is none,
// ErrBusy while a turn is in progress (stop it first). The sandbox and its
// files are not touched: they belong to the user, not to the conversation.
func (s *Store) DeleteConversation(ctx context.Context, id string) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		var state State
		err := tx.QueryRowContext(ctx, `SELECT state FROM conversations WHERE id = ?`, id).Scan(&state)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("conversation %s: %w", id, ErrNotFound)
		}
		if err != nil {
			return err
		}
		if state == StateRunning {
			return fmt.Errorf("conversation %s is working on a message: %w", id, ErrBusy)
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM conversations WHERE id = ?`, id)
		return err
	})
}
