package e2e

import (
	"strings"
	"testing"
	"unicode"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// TestE2ETerminalSafe: what a sandbox or a caller puts in names reaches
// the operator's terminal escaped, through the real binaries. A file the
// sandbox names with a newline, a forged row, an escape sequence and a
// bidi override lists as one row of sandboxctl ls; a mkdir and an execute
// with such a path and language are recorded and print as one row each
// of sandboxctl audit.
func TestE2ETerminalSafe(t *testing.T) {
	env := needE2E(t)
	d := env.start(t)
	ctx := e2eCtx(t)
	c, _ := d.client(t)
	ctl := sandboxctlRunner(t, ctx, env.sandboxctl, d.addr)
	sb := acquire(t, ctx, c, "e2e-termsafe").GetSandbox().GetSandboxId()
	t.Cleanup(func() { deleteQuietly(c, sb) })

	// raw fails when out holds a rune a terminal acts on (the tables' own
	// tabs and newlines aside) or has other than lines lines.
	raw := func(what, out string, lines int) {
		t.Helper()
		for _, r := range out {
			if r != '\n' && r != '\t' && !unicode.IsGraphic(r) {
				t.Errorf("%s printed %U raw: %q", what, r, out)
				break
			}
		}
		if n := strings.Count(out, "\n"); n != lines {
			t.Errorf("%s printed %d lines; want %d:\n%s", what, n, lines, out)
		}
	}

	mustOK(t, execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: sb, Language: "bash",
		Code: `mkdir -p /workspace/d && touch "/workspace/d/$(printf 'evil\n-rw-r--r--  0:0  0  2026-01-01 00:00:00  forged\033[2J\342\200\256')"`}), "touch")
	out, errOut, code := ctl("", "ls", sb, "d")
	if code != 0 {
		t.Fatalf("sandboxctl ls: exit %d, stderr %q", code, errOut)
	}
	raw("sandboxctl ls", out, 1)
	if !strings.Contains(out, `evil\n-rw-r--r--  0:0  0  2026-01-01 00:00:00  forged\x1b[2J\u202e"`) {
		t.Errorf("sandboxctl ls did not print the name escaped:\n%s", out)
	}

	// Whether sandboxd takes them or not, both calls are recorded.
	ctl("", "mkdir", sb, "a\n\x1b[2Jb")
	if _, errOut, code := ctl("", "exec", sb, "--language", "py\n\x1b]0;pwned\x07", "1"); code == 0 {
		t.Errorf("exec with a forged language succeeded")
	} else {
		raw("sandboxctl exec's error", errOut, 1)
	}
	out, errOut, code = ctl("", "audit", "--sandbox", sb)
	if code != 0 {
		t.Fatalf("sandboxctl audit: exit %d, stderr %q", code, errOut)
	}
	// The header, acquire, the touch, mkdir, the refused execute.
	raw("sandboxctl audit", out, 5)
	if !strings.Contains(out, `path="a\n\x1b[2Jb"`) || !strings.Contains(out, `language="py\n\x1b]0;pwned\a"`) {
		t.Errorf("sandboxctl audit did not print the values escaped:\n%s", out)
	}
}
