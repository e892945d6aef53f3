package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
	"github.com/sandboxd/sandboxd/orchestrator/door/grpcapi"
)

func TestPs(t *testing.T) {
	const sb = "sb-aaaaaaaaaaaaaaaaaaaa"
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	two := 2
	var tokens []string
	pm := &coretest.Manager{
		ListCommandsFunc: func(_ context.Context, _ string, size int, token string) (core.CommandPage, error) {
			tokens = append(tokens, token)
			if token == "" {
				return core.CommandPage{Total: 3, NextPageToken: "1", Commands: []core.CommandInfo{
					{ID: "c3", Language: "bash", Phase: core.CommandRunning, StartedAt: start, OutputAvailable: true, Pty: true, Stdin: true},
					{ID: "c2", Language: "bash", Phase: core.CommandFinished, Status: "error", ExitCode: &two, StartedAt: start,
						FinishedAt: start.Add(1500 * time.Millisecond), Duration: 1500 * time.Millisecond, OutputAvailable: true},
				}}, nil
			}
			return core.CommandPage{Total: 3, Commands: []core.CommandInfo{{ID: "c1", Language: "python", Phase: core.CommandFinished}}}, nil
		},
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpcapi.NewServer(coretest.Validated(pm), nil)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)

	r := runCLI(t, nil, lis.Addr().String(), "", "ps", sb)
	if r.code != exitOK {
		t.Fatalf("ps: exit %d, stderr %q", r.code, r.stderr)
	}
	want := `COMMAND_ID  LANGUAGE  STATE     STATUS  EXIT  STARTED              DURATION  OUTPUT
c3          bash+pty  running   -       -     2026-01-02 03:04:05  -         yes
c2          bash      finished  error   2     2026-01-02 03:04:05  1.5s      yes
c1          python    finished  -       -     -                    -         pruned
`
	if r.stdout != want {
		t.Errorf("ps printed:\n%s\nwant:\n%s", r.stdout, want)
	}
	if strings.Join(tokens, ",") != ",1" {
		t.Errorf("page tokens asked: %q", tokens)
	}

	tokens = nil
	if r := runCLI(t, nil, lis.Addr().String(), "", "ps", sb, "--limit", "1"); r.code != exitOK || strings.Count(r.stdout, "\n") != 3 {
		// The server's first page has two; --limit 1 asks for one, the
		// fake gives two: what the server sends is printed, no more pages.
		t.Errorf("ps --limit 1: exit %d, stdout %q", r.code, r.stdout)
	}
	if len(tokens) != 1 {
		t.Errorf("ps --limit 1 fetched %d pages", len(tokens))
	}
	if r := runCLI(t, nil, lis.Addr().String(), "", "ps"); r.code != exitUsage {
		t.Errorf("ps without a sandbox: exit %d", r.code)
	}
}
