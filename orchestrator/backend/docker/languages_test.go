package docker

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/ioproto"
)

// TestSubmitLanguages: aliases are normalised into the record, a language
// the image lacks (per driver.json) is FAILED_PRECONDITION naming it, an
// unknown one INVALID_ARGUMENT, and the env is validated, recorded, and
// part of the command's identity.
func TestSubmitLanguages(t *testing.T) {
	fd := newFakeDocker(testImage)
	m := newTestManager(t, testConfig(t), fd)
	sb := acquire(t, m, "u").Sandbox
	ctx := t.Context()
	status := filepath.Join(m.cfg.StateDir, "sandboxes", sb.ID, "io", ioproto.DriverStatusFile)
	writeStatus := func(langs []string) {
		if err := ioproto.WriteJSONFileAtomic(status, ioproto.DriverStatus{Version: 1, Languages: langs}, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// An old driver (no languages field): python and bash only.
	writeStatus(nil)
	_, err := m.Submit(ctx, core.ExecRequest{SandboxID: sb.ID, CommandID: "js-1", Language: "js", Code: "1"})
	if !errors.Is(err, core.ErrFailedPrecondition) || !strings.Contains(err.Error(), `"javascript"`) {
		t.Fatalf("javascript with an old driver: %v; want FAILED_PRECONDITION naming javascript", err)
	}
	if _, err := m.Submit(ctx, core.ExecRequest{SandboxID: sb.ID, CommandID: "b-1", Language: "bash", Code: "true"}); err != nil {
		t.Fatalf("bash: %v", err)
	}
	writeStatus([]string{"python", "bash", "javascript", "typescript"})
	if _, err := m.Submit(ctx, core.ExecRequest{SandboxID: sb.ID, CommandID: "r-1", Language: "R", Code: "1"}); !errors.Is(err, core.ErrFailedPrecondition) || !strings.Contains(err.Error(), `"r"`) {
		t.Fatalf("r without R in the image: %v", err)
	}
	if _, err := m.Submit(ctx, core.ExecRequest{SandboxID: sb.ID, CommandID: "java-1", Language: "java", Code: "1"}); !errors.Is(err, core.ErrFailedPrecondition) || !strings.Contains(err.Error(), `"java"`) {
		t.Fatalf("java without a JDK in the image: %v", err)
	}
	env := map[string]string{"K": "v"}
	if _, err := m.Submit(ctx, core.ExecRequest{SandboxID: sb.ID, CommandID: "ts-1", Language: "ts", Code: "1", Env: env}); err != nil {
		t.Fatalf("typescript: %v", err)
	}
	// Same ID, canonical name: a retry. Same ID, other env: a conflict.
	if _, err := m.Submit(ctx, core.ExecRequest{SandboxID: sb.ID, CommandID: "ts-1", Language: "typescript", Code: "1", Env: env}); err != nil {
		t.Fatalf("retry under the canonical name: %v", err)
	}
	if _, err := m.Submit(ctx, core.ExecRequest{SandboxID: sb.ID, CommandID: "ts-1", Language: "typescript", Code: "1", Env: map[string]string{"K": "w"}}); !errors.Is(err, core.ErrAlreadyExists) {
		t.Fatalf("same ID, other env: %v; want ALREADY_EXISTS", err)
	}
	recs := records(t, m, sb.ID)
	last := recs[len(recs)-1]
	if last.Language != ioproto.LanguageTypeScript || last.Env["K"] != "v" {
		t.Fatalf("record %+v", last)
	}

	for _, bad := range []core.ExecRequest{
		{Language: "cobol"},
		{Env: map[string]string{"": "x"}},
		{Env: map[string]string{"A=B": "x"}},
		{Env: map[string]string{"A": "x\x00"}},
		{Env: map[string]string{"A": strings.Repeat("x", ioproto.MaxEnvBytes)}},
	} {
		bad.SandboxID = sb.ID
		if _, err := m.Submit(ctx, bad); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("Submit(%q, env of %d) = %v; want INVALID_ARGUMENT", bad.Language, len(bad.Env), err)
		}
	}
	// A missing status lets the command through (the driver answers it).
	if err := os.Remove(status); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Submit(ctx, core.ExecRequest{SandboxID: sb.ID, CommandID: "r-2", Language: "r", Code: "1"}); err != nil {
		t.Fatalf("r with no driver status: %v", err)
	}
}
