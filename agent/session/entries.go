package session

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/agent/llm"
)

// Kind says what an Entry is.
type Kind string

// The entry kinds.
const (
	KindUser      Kind = "user"
	KindAssistant Kind = "assistant"
	KindTool      Kind = "tool"
	// KindNotice is a message from the agent itself to people (a sandbox
	// was replaced, the turn was stopped, the model failed). It is never
	// sent to the model; what the model must know goes into tool results.
	KindNotice Kind = "notice"
)

// Entry is one stored item of a conversation.
type Entry struct {
	// Seq orders the conversation's entries from 1.
	Seq int64
	// Turn is the turn it belongs to.
	Turn int
	// Kind says what it is.
	Kind Kind
	// Message is the model-facing message (user, assistant and tool
	// entries).
	Message llm.Message
	// Notice is a notice's text.
	Notice string
	// Usage is what the model call that wrote an assistant entry cost.
	Usage llm.Usage
	// CreatedAt is when it was stored.
	CreatedAt time.Time
}

func insertEntry(ctx context.Context, tx *sql.Tx, convID string, e Entry) (Entry, error) {
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) + 1 FROM entries WHERE conversation_id = ?`, convID).Scan(&e.Seq); err != nil {
		return e, err
	}
	msg, err := json.Marshal(e.Message)
	if err != nil {
		return e, err
	}
	t := now()
	e.CreatedAt = fromNanos(t)
	_, err = tx.ExecContext(ctx, `INSERT INTO entries (conversation_id, seq, turn, kind, message, notice, prompt_tokens, completion_tokens, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, convID, e.Seq, e.Turn, e.Kind, string(msg), e.Notice, e.Usage.PromptTokens, e.Usage.CompletionTokens, t)
	if err != nil {
		return e, fmt.Errorf("storing %s entry: %w", e.Kind, err)
	}
	return e, nil
}

// NewCall is a tool call to record with the assistant message that makes
// it.
type NewCall struct {
	// CallID is the model's ID for the call.
	CallID string
	// Name and Arguments are the tool and what the model passed.
	Name, Arguments string
	// CommandID is the sandbox command ID the call will use (NewCommandID).
	CommandID string
}

// AddAssistant records a model answer, what it cost, and its tool calls
// (pending, each with its command ID), in one transaction: after a crash
// either all of it is there or none.
func (s *Store) AddAssistant(ctx context.Context, convID string, turn int, msg llm.Message, usage llm.Usage, calls []NewCall) (Entry, error) {
	var e Entry
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var err error
		e, err = insertEntry(ctx, tx, convID, Entry{Turn: turn, Kind: KindAssistant, Message: msg, Usage: usage})
		if err != nil {
			return err
		}
		if err := addUsage(ctx, tx, convID, turn, usage); err != nil {
			return err
		}
		for i, c := range calls {
			if _, err := tx.ExecContext(ctx, `INSERT INTO tool_runs (conversation_id, call_id, turn, entry_seq, idx, name, arguments, command_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
				convID, c.CallID, turn, e.Seq, i, c.Name, c.Arguments, c.CommandID); err != nil {
				return fmt.Errorf("storing tool call %s: %w", c.CallID, err)
			}
		}
		return nil
	})
	return e, err
}

// AddNotice records a notice for people.
func (s *Store) AddNotice(ctx context.Context, convID string, turn int, text string) (Entry, error) {
	var e Entry
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var err error
		e, err = insertEntry(ctx, tx, convID, Entry{Turn: turn, Kind: KindNotice, Notice: text})
		return err
	})
	return e, err
}

// Entries returns a conversation's entries in order.
func (s *Store) Entries(ctx context.Context, convID string) ([]Entry, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT seq, turn, kind, message, notice, prompt_tokens, completion_tokens, created_at FROM entries
		WHERE conversation_id = ? ORDER BY seq`, convID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Entry
	for rows.Next() {
		var e Entry
		var msg string
		var created int64
		if err := rows.Scan(&e.Seq, &e.Turn, &e.Kind, &msg, &e.Notice, &e.Usage.PromptTokens, &e.Usage.CompletionTokens, &created); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(msg), &e.Message); err != nil {
			return nil, fmt.Errorf("entry %d of %s: %w", e.Seq, convID, err)
		}
		e.CreatedAt = fromNanos(created)
		out = append(out, e)
	}
	return out, rows.Err()
}
