// Package session stores conversations in an embedded SQLite database (the
// pure-Go modernc.org/sqlite driver) under the agent's state directory:
// messages, the tool calls with their sandbox command IDs, the artifacts
// they produced, and token usage.
//
// The agent writes every step here before acting on it (write-ahead), so a
// conversation interrupted by a crash can be resumed exactly where it
// stopped: a tool call that was sent is resumed by its command ID, never
// run again.
package session

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base32"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/sandboxd/sandboxd/agent/llm"
)

// ErrNotFound means the conversation (or tool call, or artifact) does not
// exist.
var ErrNotFound = errors.New("not found")

// ErrBusy means the conversation is already working on a message.
var ErrBusy = errors.New("conversation is busy with another message")

// Store is an open session database. It is safe for concurrent use.
type Store struct {
	db *sql.DB
}

// schemaVersion is stored in PRAGMA user_version.
const schemaVersion = 1

const schema = `
CREATE TABLE conversations (
	id                TEXT PRIMARY KEY,
	user_id           TEXT NOT NULL,
	title             TEXT NOT NULL,
	sandbox_id        TEXT NOT NULL DEFAULT '',
	state             TEXT NOT NULL DEFAULT 'idle',
	prompt_tokens     INTEGER NOT NULL DEFAULT 0,
	completion_tokens INTEGER NOT NULL DEFAULT 0,
	created_at        INTEGER NOT NULL,
	updated_at        INTEGER NOT NULL
);
CREATE INDEX conversations_user ON conversations (user_id, updated_at);
CREATE INDEX conversations_state ON conversations (state);

CREATE TABLE turns (
	conversation_id   TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
	turn              INTEGER NOT NULL,
	prompt_tokens     INTEGER NOT NULL DEFAULT 0,
	completion_tokens INTEGER NOT NULL DEFAULT 0,
	model_calls       INTEGER NOT NULL DEFAULT 0,
	started_at        INTEGER NOT NULL,
	finished_at       INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (conversation_id, turn)
);

-- entries: the conversation as stored. kind is user, assistant, tool or
-- notice (shown to people, never sent to the model). message is an
-- llm.Message as JSON.
CREATE TABLE entries (
	conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
	seq             INTEGER NOT NULL,
	turn            INTEGER NOT NULL,
	kind            TEXT NOT NULL,
	message         TEXT NOT NULL DEFAULT '{}',
	notice          TEXT NOT NULL DEFAULT '',
	prompt_tokens     INTEGER NOT NULL DEFAULT 0,
	completion_tokens INTEGER NOT NULL DEFAULT 0,
	created_at      INTEGER NOT NULL,
	PRIMARY KEY (conversation_id, seq)
);

-- tool_runs: one row per tool call, created with its command ID before the
-- call runs. state: pending (not sent), running (sent to sandbox_id), done.
CREATE TABLE tool_runs (
	conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
	call_id         TEXT NOT NULL,
	turn            INTEGER NOT NULL,
	entry_seq       INTEGER NOT NULL, -- the assistant entry that made the call
	idx             INTEGER NOT NULL, -- the call's position in it
	name            TEXT NOT NULL,
	arguments       TEXT NOT NULL,
	command_id      TEXT NOT NULL UNIQUE,
	sandbox_id      TEXT NOT NULL DEFAULT '',
	state           TEXT NOT NULL DEFAULT 'pending',
	result          TEXT NOT NULL DEFAULT '',
	images          INTEGER NOT NULL DEFAULT 0,
	charts          INTEGER NOT NULL DEFAULT 0,
	started_at      INTEGER NOT NULL DEFAULT 0,
	finished_at     INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (conversation_id, call_id)
);

CREATE TABLE artifacts (
	conversation_id TEXT NOT NULL,
	call_id         TEXT NOT NULL,
	kind            TEXT NOT NULL,
	idx             INTEGER NOT NULL,
	mime            TEXT NOT NULL,
	data            BLOB NOT NULL,
	PRIMARY KEY (conversation_id, call_id, kind, idx),
	FOREIGN KEY (conversation_id, call_id) REFERENCES tool_runs (conversation_id, call_id) ON DELETE CASCADE
);
`

// Open opens (creating if needed) the database at path.
func Open(path string) (*Store, error) {
	q := url.Values{}
	for _, p := range []string{
		"busy_timeout(10000)",
		"journal_mode(WAL)",
		// FULL: a committed step survives a power cut too, not only a crash
		// of the agent; steps are few, so the fsyncs are cheap.
		"synchronous(FULL)",
		"foreign_keys(ON)",
	} {
		q.Add("_pragma", p)
	}
	// Write transactions take the write lock at BEGIN, so two of them never
	// deadlock upgrading from a read lock.
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("opening session database %s: %w", path, err)
	}
	s := &Store{db: db}
	if err := s.migrate(context.Background()); err != nil {
		db.Close()
		return nil, fmt.Errorf("session database %s: %w", path, err)
	}
	return s, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

func (s *Store) migrate(ctx context.Context) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		var v int
		if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
			return err
		}
		switch v {
		case schemaVersion:
			return nil
		case 0:
			if _, err := tx.ExecContext(ctx, schema); err != nil {
				return fmt.Errorf("creating schema: %w", err)
			}
			_, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", schemaVersion))
			return err
		default:
			return fmt.Errorf("schema version %d is newer than this agent's (%d)", v, schemaVersion)
		}
	})
}

// tx runs fn in a write transaction.
func (s *Store) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// newID returns prefix followed by 16 random base32 characters: unique, and
// valid in sandbox command IDs.
func newID(prefix string) string {
	b := make([]byte, 10)
	rand.Read(b)
	return prefix + strings.ToLower(base32.StdEncoding.EncodeToString(b))
}

func now() int64 { return time.Now().UnixNano() }

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// NewCommandID returns a fresh sandbox command ID for a call of conversation
// convID. It is random, not a counter, so that a conversation store lost or
// restored from a backup can never reuse an ID the sandbox has seen (which
// would replay an old command's output instead of running new code).
func NewCommandID(convID string) string { return newID(convID + "-") }

// addUsage adds u to a turn and its conversation.
func addUsage(ctx context.Context, tx *sql.Tx, convID string, turn int, u llm.Usage) error {
	if _, err := tx.ExecContext(ctx, `UPDATE turns SET prompt_tokens = prompt_tokens + ?, completion_tokens = completion_tokens + ?, model_calls = model_calls + 1
		WHERE conversation_id = ? AND turn = ?`, u.PromptTokens, u.CompletionTokens, convID, turn); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `UPDATE conversations SET prompt_tokens = prompt_tokens + ?, completion_tokens = completion_tokens + ?, updated_at = ?
		WHERE id = ?`, u.PromptTokens, u.CompletionTokens, now(), convID)
	return err
}
