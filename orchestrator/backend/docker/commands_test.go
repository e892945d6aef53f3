package docker

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// The rules of the interactive calls that need no sandbox: they are
// checked before any is looked up.
func TestInteractiveRequestRules(t *testing.T) {
	const sb = "sb-aaaaaaaaaaaaaaaaaaaa"
	for _, tc := range []struct {
		name    string
		req     core.ExecRequest
		mention string
	}{
		{"python with stdin", core.ExecRequest{SandboxID: sb, Stdin: true}, `language is "python"`},
		{"python with pty", core.ExecRequest{SandboxID: sb, Language: "python", Pty: core.PtySize{Rows: 2, Cols: 2}}, "bash commands only"},
		{"pty without cols", core.ExecRequest{SandboxID: sb, Language: "bash", Pty: core.PtySize{Rows: 2}}, "outside 1-4096"},
		{"pty too tall", core.ExecRequest{SandboxID: sb, Language: "bash", Pty: core.PtySize{Rows: 5000, Cols: 80}}, "5000x80"},
	} {
		if err := tc.req.Validate(); !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("%s: %v; want invalid argument mentioning %q", tc.name, err, tc.mention)
		}
	}
	for _, ok := range []core.ExecRequest{
		{SandboxID: sb, Language: "bash", Stdin: true},
		{SandboxID: sb, Language: "bash", Pty: core.PtySize{Rows: 4096, Cols: 1}},
	} {
		if err := ok.Validate(); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}

	// Behind the validating layer, as sandboxd serves the backend: only
	// the page token is this backend's to check.
	m := core.Validating(&Manager{}, core.DefaultPolicy())
	ctx := context.Background()
	if err := m.SendStdin(ctx, sb, "c1", make([]byte, core.MaxStdinChunk+1)); !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), "limit") {
		t.Errorf("SendStdin of 64 KiB + 1: %v", err)
	}
	if err := m.ResizePty(ctx, sb, "c1", core.PtySize{Rows: 0, Cols: 80}); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("ResizePty to 0 rows: %v", err)
	}
	if err := m.CloseStdin(ctx, sb, "../x"); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("CloseStdin of a malformed command ID: %v", err)
	}
	for _, tc := range []struct {
		size  int
		token string
	}{{-1, ""}, {core.MaxCommandPage + 1, ""}, {0, "abc"}, {0, "0"}, {0, "-3"}, {0, "99999999999"}} {
		if _, err := m.ListCommands(ctx, sb, tc.size, tc.token); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("ListCommands(size %d, token %q): %v; want invalid argument", tc.size, tc.token, err)
		}
	}
}
