package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/agent/session"
)

// TestSessions: list shows the user's conversations with their titles (not
// other users'), delete removes one (and refuses an unknown or another
// user's), and an empty state directory says there is nothing yet.
func TestSessions(t *testing.T) {
	dir := t.TempDir()
	env := func(k string) string {
		return map[string]string{"AGENT_STATE_DIR": dir, "USER": "bob"}[k]
	}
	sessions := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := run(append([]string{"sessions"}, args...), env, strings.NewReader(""), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	if code, out, _ := sessions(); code != 0 || !strings.Contains(out, "No conversations yet") {
		t.Errorf("empty state: exit %d, %q", code, out)
	}

	ctx := context.Background()
	store, err := session.Open(filepath.Join(dir, "agent.db"))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, msg := range []string{"Plot the squares", "Fit a line"} {
		c, _ := store.CreateConversation(ctx, "cli-bob")
		store.BeginTurn(ctx, c.ID, msg)
		store.EndTurn(ctx, c.ID, 1)
		ids = append(ids, c.ID)
	}
	other, _ := store.CreateConversation(ctx, "cli-eve")
	store.BeginTurn(ctx, other.ID, "Eve's secret")
	store.EndTurn(ctx, other.ID, 1)
	store.Close()

	code, out, errOut := sessions("list")
	if code != 0 || !strings.Contains(out, ids[0]) || !strings.Contains(out, "Plot the squares") || !strings.Contains(out, "Fit a line") ||
		strings.Contains(out, "secret") || !strings.Contains(out, "agent sessions resume ID") {
		t.Errorf("list: exit %d, stdout\n%s\nstderr %q", code, out, errOut)
	}
	if code, out, errOut := sessions("delete", ids[0]); code != 0 || out != "deleted "+ids[0]+"\n" {
		t.Errorf("delete: exit %d, %q, %q", code, out, errOut)
	}
	if code, _, errOut := sessions("delete", other.ID, "cnosuchconversation"); code != 1 || strings.Count(errOut, "not found") != 2 {
		t.Errorf("deleting another user's and an unknown conversation: exit %d, stderr %q", code, errOut)
	}
	if code, out, _ := sessions(); code != 0 || strings.Contains(out, ids[0]) || !strings.Contains(out, ids[1]) {
		t.Errorf("list after delete: exit %d\n%s", code, out)
	}
	if code, _, errOut := sessions("frob"); code != 2 || !strings.Contains(errOut, "want list, resume or delete") {
		t.Errorf("unknown action: exit %d, %q", code, errOut)
	}
	if code, _, errOut := sessions("resume"); code != 2 || !strings.Contains(errOut, "conversation ID") {
		t.Errorf("resume without ID: exit %d, %q", code, errOut)
	}
}
