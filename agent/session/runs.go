package session

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/agent/llm"
	"github.com/sandboxd/sandboxd/agent/tools"
)

// RunState is where a tool call stands.
type RunState string

// The tool call states.
const (
	// RunPending: recorded, not sent to a sandbox yet.
	RunPending RunState = "pending"
	// RunRunning: sent (or about to be sent) to SandboxID as CommandID.
	RunRunning RunState = "running"
	// RunDone: finished; Result and the tool message are stored.
	RunDone RunState = "done"
)

// Artifact kinds.
const (
	ArtifactImage = "image"
	ArtifactChart = "chart"
)

// ToolRun is one tool call and, when done, its result.
type ToolRun struct {
	// CallID is the model's ID for the call.
	CallID string
	// Turn is the turn it belongs to.
	Turn int
	// EntrySeq is the assistant entry that made the call.
	EntrySeq int64
	// Name and Arguments are the tool and what the model passed.
	Name, Arguments string
	// CommandID is the sandbox command ID, fixed before the call runs.
	CommandID string
	// SandboxID is the sandbox it was sent to (empty while pending).
	SandboxID string
	// State says where it stands.
	State RunState
	// Result is set when done (without Images and Charts, which are
	// artifacts: see Images, Charts and Store.Artifact).
	Result tools.Result
	// Images and Charts count the artifacts.
	Images, Charts int
	// StartedAt and FinishedAt bound the run.
	StartedAt, FinishedAt time.Time
}

const runColumns = `call_id, turn, entry_seq, name, arguments, command_id, sandbox_id, state, result, images, charts, started_at, finished_at`

func scanRun(row interface{ Scan(...any) error }) (ToolRun, error) {
	var r ToolRun
	var result string
	var started, finished int64
	if err := row.Scan(&r.CallID, &r.Turn, &r.EntrySeq, &r.Name, &r.Arguments, &r.CommandID, &r.SandboxID, &r.State, &result, &r.Images, &r.Charts, &started, &finished); err != nil {
		return r, err
	}
	if result != "" {
		if err := json.Unmarshal([]byte(result), &r.Result); err != nil {
			return r, fmt.Errorf("tool call %s: result: %w", r.CallID, err)
		}
	}
	r.StartedAt, r.FinishedAt = fromNanos(started), fromNanos(finished)
	return r, nil
}

// StartRun records that a call is about to be sent to sandboxID (empty for
// tools that use no sandbox). It is written before the command is sent, so
// after a crash the command is looked for there.
func (s *Store) StartRun(ctx context.Context, convID, callID, sandboxID string) error {
	_, err := s.db.ExecContext(ctx, `UPDATE tool_runs SET state = ?, sandbox_id = ?, started_at = ? WHERE conversation_id = ? AND call_id = ?`,
		RunRunning, sandboxID, now(), convID, callID)
	return err
}

// FinishRun stores a call's result, its artifacts and the tool message for
// the model, in one transaction.
func (s *Store) FinishRun(ctx context.Context, convID string, turn int, callID string, res tools.Result, msg llm.Message) (Entry, error) {
	var e Entry
	err := s.tx(ctx, func(tx *sql.Tx) error {
		b, err := json.Marshal(res)
		if err != nil {
			return err
		}
		r, err := tx.ExecContext(ctx, `UPDATE tool_runs SET state = ?, result = ?, images = ?, charts = ?, finished_at = ?,
			started_at = CASE started_at WHEN 0 THEN ? ELSE started_at END WHERE conversation_id = ? AND call_id = ?`,
			RunDone, string(b), len(res.Images), len(res.Charts), now(), now(), convID, callID)
		if err != nil {
			return err
		}
		if n, _ := r.RowsAffected(); n == 0 {
			return fmt.Errorf("tool call %s of %s: %w", callID, convID, ErrNotFound)
		}
		for kind, arts := range map[string][]tools.Artifact{ArtifactImage: res.Images, ArtifactChart: res.Charts} {
			for i, a := range arts {
				if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO artifacts (conversation_id, call_id, kind, idx, mime, data) VALUES (?, ?, ?, ?, ?, ?)`,
					convID, callID, kind, i, a.MIME, a.Data); err != nil {
					return err
				}
			}
		}
		e, err = insertEntry(ctx, tx, convID, Entry{Turn: turn, Kind: KindTool, Message: msg})
		return err
	})
	return e, err
}

// Runs returns a conversation's tool calls in order.
func (s *Store) Runs(ctx context.Context, convID string) ([]ToolRun, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+runColumns+` FROM tool_runs WHERE conversation_id = ? ORDER BY entry_seq, idx`, convID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ToolRun
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Run returns one tool call.
func (s *Store) Run(ctx context.Context, convID, callID string) (ToolRun, error) {
	r, err := scanRun(s.db.QueryRowContext(ctx, `SELECT `+runColumns+` FROM tool_runs WHERE conversation_id = ? AND call_id = ?`, convID, callID))
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("tool call %s of %s: %w", callID, convID, ErrNotFound)
	}
	return r, err
}

// Artifact returns the idx-th image or chart (kind ArtifactImage or
// ArtifactChart) of a tool call.
func (s *Store) Artifact(ctx context.Context, convID, callID, kind string, idx int) (tools.Artifact, error) {
	var a tools.Artifact
	err := s.db.QueryRowContext(ctx, `SELECT mime, data FROM artifacts WHERE conversation_id = ? AND call_id = ? AND kind = ? AND idx = ?`,
		convID, callID, kind, idx).Scan(&a.MIME, &a.Data)
	if errors.Is(err, sql.ErrNoRows) {
		return a, fmt.Errorf("%s %d of tool call %s: %w", kind, idx, callID, ErrNotFound)
	}
	return a, err
}
