package main

import (
	"context"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// TestRunStateless: sandboxctl run streams the output of code run in a
// sandbox of its own, made with the flags' options for a run- user, and
// deleted once the command is done; a failing command exits non-zero.
func TestRunStateless(t *testing.T) {
	fake, submitted, mu := execFake(func(cid string) []core.Event {
		return []core.Event{
			{Seq: 1, Type: ioproto.EventStarted, CommandID: cid, Language: "bash"},
			{Seq: 2, Type: ioproto.EventStdout, Text: "ci\n"},
			{Seq: 3, Type: ioproto.EventDone, Status: ioproto.StatusOK},
		}
	})
	var user string
	var opts core.Options
	var deleted []string
	fake.AcquireFunc = func(_ context.Context, u string, o core.Options) (core.AcquireResult, error) {
		mu.Lock()
		defer mu.Unlock()
		user, opts = u, o
		return core.AcquireResult{Sandbox: core.Sandbox{ID: sbA, UserID: u, State: core.StateRunning}, Created: true}, nil
	}
	fake.DeleteFunc = func(_ context.Context, id string) error {
		mu.Lock()
		defer mu.Unlock()
		deleted = append(deleted, id)
		return nil
	}
	addr := startServer(t, fake)
	r := runCLI(t, nil, addr, "", "run", "--language", "bash", "--env", "MODE=ci", "echo $MODE")
	if r.code != 0 || r.stdout != "ci\n" {
		t.Fatalf("run: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.HasPrefix(user, core.StatelessUserPrefix) || opts.Env["MODE"] != "ci" {
		t.Errorf("acquired for %q with %+v; want a run- user with MODE=ci", user, opts)
	}
	if len(*submitted) != 1 || (*submitted)[0].Language != "bash" || (*submitted)[0].Code != "echo $MODE" {
		t.Errorf("submitted %+v", *submitted)
	}
	if len(deleted) != 1 || deleted[0] != sbA {
		t.Errorf("deleted %v; want the run's sandbox", deleted)
	}
}
