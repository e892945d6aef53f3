package docker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Real-engine tests of what hostile sandboxed code can put in front of the
// host: names and bytes that are not UTF-8, and a full /io.

// TestIntegrationNonUTF8FromTheSandbox: the domain passes the sandbox's
// bytes on as they are (the gRPC API makes them valid, see
// grpcapi.TestIntegrationInvalidUTF8OverGRPC), and nothing breaks on them.
func TestIntegrationNonUTF8FromTheSandbox(t *testing.T) {
	m, _, _ := integrationManager(t)
	sb, err := m.Acquire(t.Context(), "it-utf8", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.Sandbox.ID

	// A file whose name is not UTF-8 is listed, under its real name.
	mustRunOK(t, m, id, "bash", `mkdir -p d && touch $'d/\xff\xfe.txt' d/ok.txt`)
	files, err := m.ListFiles(t.Context(), id, "d")
	if err != nil {
		t.Fatalf("ListFiles: %v", err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Path)
	}
	if len(names) != 2 || names[0] != "d/ok.txt" || names[1] != "d/\xff\xfe.txt" {
		t.Errorf("ListFiles(d) = %q; want d/ok.txt and d/\\xff\\xfe.txt", names)
	}

	// Invalid bytes on stdout: the driver replaces them.
	evs := runCommand(t, m, id, core.ExecRequest{Language: "python", Code: "import os; os.write(1, b'\\xff\\xfeabc\\n')"})
	if d := lastDone(t, evs); d.Status != "ok" {
		t.Fatalf("python ended %s: %+v", d.Status, evs)
	}
	if out := textOf(evs); !strings.Contains(out, "abc\n") {
		t.Errorf("stdout %q lacks abc", out)
	}

	// A text artifact rewritten with invalid bytes by a later command is
	// what a replay reads back.
	runArtifactTamper(t, m, id)
}

// runArtifactTamper displays a text/html value large enough to be stored
// as an artifact (command "art"), then rewrites the artifact from inside
// the sandbox with bytes that are not UTF-8, and returns the value a replay
// of "art" carries ("" when the reader refused the rewritten file).
func runArtifactTamper(t *testing.T, m *validated, id string) string {
	t.Helper()
	art := core.ExecRequest{CommandID: "art", Language: "python", Code: "display({'text/html': 'h' * 300000}, raw=True)"}
	evs := runCommand(t, m, id, art)
	if d := lastDone(t, evs); d.Status != "ok" {
		t.Fatalf("display ended %s: %+v", d.Status, evs)
	}
	mustRunOK(t, m, id, "bash", `n=0; for f in /io/out/art.*.1; do printf '\xff\xfe tampered' > "$f"; n=$((n+1)); done; test $n = 1`)
	evs = runCommand(t, m, id, art) // the same command again: a replay
	for _, e := range evs {
		if e.Type != "display" {
			continue
		}
		v, ok := e.Data["text/html"]
		switch {
		case !ok:
			t.Logf("the rewritten artifact was refused by the reader")
			return ""
		case v != "\xff\xfe tampered":
			t.Fatalf("replayed text/html = %q…, want the rewritten bytes", core.Truncate(v, 40))
		}
		return v
	}
	t.Fatalf("no display event in the replay: %+v", evs)
	return ""
}

// TestIntegrationIOFullHealth: code that fills /io makes the sandbox report
// itself unhealthy, with the driver's reason, while it stays running; once
// room is made and a command has run, the reason clears.
func TestIntegrationIOFullHealth(t *testing.T) {
	m, _, _ := integrationManager(t, func(c *Config) { c.IODiskBytes = 32 << 20 })
	if m.cfg.NoDiskVolumes {
		t.Skip("needs the size-limited /io volume")
	}
	res, err := m.Acquire(t.Context(), "it-iofull", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Sandbox.ID
	mustRunOK(t, m, id, "bash", "true")
	if sb, err := m.Get(t.Context(), id); err != nil || sb.HealthReason != "" {
		t.Fatalf("fresh sandbox: Get = %+v, %v; want healthy", sb, err)
	}

	runCommand(t, m, id, core.ExecRequest{Language: "bash", Code: "head -c 2G /dev/zero > /io/fill; df -h /io"})
	evs := runCommand(t, m, id, core.ExecRequest{Language: "bash", Code: "echo hi"})
	t.Logf("command on a full /io: %+v", lastDone(t, evs))
	reason := awaitHealth(t, m, id, func(r string) bool { return strings.HasPrefix(r, "/io is full") })
	if sb, _ := m.Get(t.Context(), id); sb.State != core.StateRunning {
		t.Errorf("state %s with /io full; want running", sb.State)
	}
	t.Logf("health reason: %s", reason)
	if sbs, err := m.List(t.Context(), core.ListFilter{}); err != nil || len(sbs) != 1 || sbs[0].HealthReason != reason {
		t.Errorf("List = %+v, %v; want the same reason", sbs, err)
	}

	// A command cannot remove the file: with /io full, none runs. The host
	// does it, as an operator would (the volume is mounted there).
	if err := os.Remove(filepath.Join(sandboxDir(m.cfg.StateDir, id), ioDir, "fill")); err != nil {
		t.Fatal(err)
	}
	if out := mustRunOK(t, m, id, "bash", "echo back"); out != "back\n" {
		t.Errorf("after freeing /io: %q", out)
	}
	awaitHealth(t, m, id, func(r string) bool { return r == "" })
}

// awaitHealth polls Get until the sandbox's HealthReason satisfies ok (the
// driver may write its status just after a command's done).
func awaitHealth(t *testing.T, m *validated, id string, ok func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		sb, err := m.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if !utf8.ValidString(sb.HealthReason) {
			t.Errorf("HealthReason %q is not UTF-8", sb.HealthReason)
		}
		if ok(sb.HealthReason) {
			return sb.HealthReason
		}
		if time.Now().After(deadline) {
			t.Fatalf("HealthReason is still %q after 15s", sb.HealthReason)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
