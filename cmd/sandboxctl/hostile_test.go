package main

import (
	"context"
	"encoding/json"
	"io/fs"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/orchestrator/audit"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
	"github.com/sandboxd/sandboxd/orchestrator/door/grpcapi"
)

// Values a sandbox or a tenant can put in what sandboxctl prints: a
// newline and a row forged after it, a screen-clearing escape, a window
// title (OSC) ended by BEL, a bidi override, and the C1 CSI.
const (
	forgedPath = "notes.txt\n2026-11-21 07:30:00  acme  admin  delete  sb-forged\x1b[2J"
	forgedLang = "python\x1b]0;pwned\x07\u202eyp"
	forgedName = "x\u009b2J\u2066evil\u2069"
)

// terminalSafe fails when out holds a rune a terminal acts on (tab and
// newline aside: the tables' own) or a byte that is not UTF-8, and when
// it has other than lines lines.
func terminalSafe(t *testing.T, what, out string, lines int) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Errorf("%s printed invalid UTF-8 (a raw C1 byte reaches the terminal): %q", what, out)
	}
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

// TestAuditHostileValues: a path and a language with a newline and escape
// sequences, recorded (the domain refuses them, and refusals are
// recorded), print as one row each, escaped.
func TestAuditHostileValues(t *testing.T) {
	l, err := audit.Open(audit.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	fake := &coretest.Manager{}
	m := audit.Audited(coretest.Validated(fake), l)
	ctx := core.WithCaller(t.Context(), core.Caller{Tenant: "acme", Name: "ci-bot"})
	m.CreateContext(ctx, sbA, forgedLang, forgedPath)
	m.MakeDirectory(ctx, sbA, forgedPath, false)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	addr := startServerWith(t, fake, grpcapi.WithAudit(l))

	r := runCLI(t, nil, addr, "", "audit")
	if r.code != exitOK {
		t.Fatalf("audit: exit %d, stderr %q", r.code, r.stderr)
	}
	terminalSafe(t, "audit", r.stdout, 3)
	if !strings.Contains(r.stdout, `path="notes.txt\n2026-11-21 07:30:00  acme  admin  delete  sb-forged\x1b[2J"`) ||
		!strings.Contains(r.stdout, `language="python\x1b]0;pwned\a\u202eyp"`) {
		t.Errorf("audit did not print the values escaped:\n%s", r.stdout)
	}
}

// TestPsLsHostileValues: ps and ls print a command's language and a
// file's path escaped, one row each; an error's message too, in one line.
func TestPsLsHostileValues(t *testing.T) {
	fake := &coretest.Manager{
		ListCommandsFunc: func(context.Context, string, int, string) (core.CommandPage, error) {
			return core.CommandPage{Total: 1, Commands: []core.CommandInfo{{ID: "c1", Language: forgedLang, Phase: core.CommandFinished}}}, nil
		},
		ListFilesFunc: func(_ context.Context, _, p string) ([]core.FileInfo, error) {
			if p == "missing" {
				return nil, core.NotFoundf("no such file: %s", forgedPath)
			}
			return []core.FileInfo{{Path: forgedPath, Type: core.FileRegular, Mode: 0o644, ModTime: t0},
				{Path: forgedName, Type: core.FileDirectory, Mode: fs.ModeDir | 0o755, ModTime: t0}}, nil
		},
	}
	addr := startServer(t, fake)
	r := runCLI(t, nil, addr, "", "ps", sbA)
	terminalSafe(t, "ps", r.stdout, 2)
	if !strings.Contains(r.stdout, `"python\x1b]0;pwned\a\u202eyp"`) {
		t.Errorf("ps did not print the language escaped:\n%s", r.stdout)
	}
	r = runCLI(t, nil, addr, "", "ls", sbA)
	terminalSafe(t, "ls", r.stdout, 2)
	if !strings.Contains(r.stdout, `"x\u009b2J\u2066evil\u2069"`) {
		t.Errorf("ls did not print the name escaped:\n%s", r.stdout)
	}
	r = runCLI(t, nil, addr, "", "ls", sbA, "-o", "json")
	terminalSafe(t, "ls -o json", r.stdout, strings.Count(r.stdout, "\n"))
	var files []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &files); err != nil || len(files) != 2 || files[0]["path"] != forgedPath || files[1]["path"] != forgedName {
		t.Errorf("ls -o json: %v, %q", err, r.stdout)
	}
	r = runCLI(t, nil, addr, "", "ls", sbA, "missing")
	terminalSafe(t, "ls's error", r.stderr, 1)
}

// TestNetHostileValues: net prints a policy's entries and a denial's name
// and reason escaped, a raw C1 byte included.
func TestNetHostileValues(t *testing.T) {
	fake := &coretest.Manager{NetworkStatusFunc: func(context.Context, string) (core.NetworkStatus, error) {
		return core.NetworkStatus{
			Policy:  core.NetworkPolicy{AllowOut: []string{"pypi.org\n  deny_out:        none\x1b[2J"}},
			Denials: []core.NetworkDenial{{Time: t0, Kind: "dns", Name: forgedName, Reason: "denied\u009b2J"}},
		}, nil
	}}
	r := runCLI(t, nil, startNetServer(t, fake), "", "net", sbA)
	if r.code != exitOK {
		t.Fatalf("net: exit %d, stderr %q", r.code, r.stderr)
	}
	terminalSafe(t, "net", r.stdout, 15)
	if !strings.Contains(r.stdout, `"x\u009b2J\u2066evil\u2069"`) || !strings.Contains(r.stdout, `"denied\u009b2J"`) {
		t.Errorf("net did not print the denial escaped:\n%s", r.stdout)
	}
}

// TestTemplateLogHostileLines: a build log's lines are printed with their
// control characters escaped in place, tabs kept.
func TestTemplateLogHostileLines(t *testing.T) {
	fake := &coretest.Manager{
		FollowTemplateBuildFunc: func(_ context.Context, _ string, _ int, _ int64, fn func(core.TemplateBuildEvent) error) error {
			fn(core.TemplateBuildEvent{Seq: 1, Line: "\x1b[31mE:\x1b[0m\tUnable\r100%\u202e"})
			fn(core.TemplateBuildEvent{Seq: 2, Line: "two\nlines"})
			return fn(core.TemplateBuildEvent{Done: &core.TemplateVersion{Version: 1, State: core.TemplateReady}})
		},
	}
	r := runCLI(t, nil, startServer(t, fake), "", "template", "logs", "tools", "--version", "1")
	if r.code != exitOK {
		t.Fatalf("template logs: exit %d, stderr %q", r.code, r.stderr)
	}
	terminalSafe(t, "template logs", r.stdout, 2)
	if want := "\\x1b[31mE:\\x1b[0m\tUnable\\r100%\\u202e\ntwo\\nlines\n"; r.stdout != want {
		t.Errorf("template logs printed %q; want %q", r.stdout, want)
	}
}

// TestTablesHostileValues: the other tables print what the server sends
// escaped, one row per item.
func TestTablesHostileValues(t *testing.T) {
	fake := &coretest.Manager{
		ListFunc: func(context.Context, core.ListFilter) ([]core.Sandbox, error) {
			return []core.Sandbox{{ID: sbA, Tenant: forgedName, UserID: forgedPath, State: core.StateDead, StateReason: forgedLang,
				Image: forgedName, Metadata: map[string]string{forgedName: forgedPath}}}, nil
		},
		ListVolumesFunc: func(context.Context, string) ([]core.Volume, error) {
			return []core.Volume{{ID: "vol-1", Name: forgedName, Tenant: forgedPath, MountedBy: []string{forgedLang}}}, nil
		},
		VolumeListFilesFunc: func(context.Context, string, string, int) ([]core.FileInfo, error) {
			return []core.FileInfo{{Path: forgedPath, Type: core.FileRegular, ModTime: t0}}, nil
		},
		ListSnapshotsFunc: func(context.Context, core.SnapshotFilter) ([]core.Snapshot, error) {
			return []core.Snapshot{{ID: "snap-1", Name: forgedName, Tenant: forgedPath, SandboxID: forgedLang}}, nil
		},
		ListTemplatesFunc: func(context.Context, string) ([]core.Template, error) {
			return []core.Template{{ID: "tpl-1", Name: forgedName, Tenant: forgedPath}}, nil
		},
		ListContextsFunc: func(context.Context, string) ([]core.ContextInfo, error) {
			return []core.ContextInfo{{ID: "ctx-1", Language: forgedLang, Cwd: forgedPath}}, nil
		},
	}
	addr := startServer(t, fake)
	for _, args := range [][]string{
		{"list"}, {"list", "-o", "wide"}, {"volume", "ls"}, {"volume", "files", "vol-1"}, {"snapshot", "ls"},
		{"template", "ls"}, {"ctx", "ls", sbA},
	} {
		r := runCLI(t, nil, addr, "", args...)
		lines := 2
		if len(args) > 1 && args[1] == "files" {
			lines = 1
		}
		terminalSafe(t, strings.Join(args, " ")+" (stdout "+r.stderr+")", r.stdout, lines)
	}
}
