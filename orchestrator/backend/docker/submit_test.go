package docker

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/google/uuid"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/iolog"
)

func TestSubmitIdempotent(t *testing.T) {
	fd := newFakeDocker(testImage)
	m := newTestManager(t, testConfig(t), fd)
	sb := acquire(t, m, "u").Sandbox
	ctx := t.Context()

	req := core.ExecRequest{SandboxID: sb.ID, CommandID: "cmd-1", Code: "x = 21", Timeout: 5 * time.Second}
	for range 2 {
		id, err := m.Submit(ctx, req)
		if err != nil || id != "cmd-1" {
			t.Fatalf("Submit = %q, %v", id, err)
		}
	}
	// Concurrent retries of another command: still one record.
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			if _, err := m.Submit(ctx, core.ExecRequest{SandboxID: sb.ID, CommandID: "cmd-2", Code: "x * 2", Language: "python"}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	gen, err := m.Submit(ctx, core.ExecRequest{SandboxID: sb.ID, Code: "echo hi", Language: "bash"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := uuid.Parse(gen); err != nil {
		t.Errorf("generated command ID %q is not a UUID", gen)
	}
	recs := records(t, m, sb.ID)
	if len(recs) != 3 {
		t.Fatalf("stdin has %d records, want 3: %+v", len(recs), recs)
	}
	want := []ioproto.Record{
		{Type: "exec", CommandID: "cmd-1", Language: "python", Code: "x = 21", TimeoutMS: 5000},
		{Type: "exec", CommandID: "cmd-2", Language: "python", Code: "x * 2", TimeoutMS: core.DefaultCommandTimeout.Milliseconds()},
		{Type: "exec", CommandID: gen, Language: "bash", Code: "echo hi", TimeoutMS: core.DefaultCommandTimeout.Milliseconds()},
	}
	for i := range want {
		if !reflect.DeepEqual(recs[i], want[i]) {
			t.Errorf("record %d = %+v, want %+v", i, recs[i], want[i])
		}
	}
}

func TestSubmitValidation(t *testing.T) {
	fd := newFakeDocker(testImage)
	m := newTestManager(t, testConfig(t), fd)
	sb := acquire(t, m, "u").Sandbox
	ctx := t.Context()
	for _, c := range []struct {
		req  core.ExecRequest
		want error
		msg  string
	}{
		{core.ExecRequest{SandboxID: sb.ID, Language: "ruby"}, core.ErrInvalidArgument, "language"},
		{core.ExecRequest{SandboxID: sb.ID, CommandID: "../x"}, core.ErrInvalidArgument, "command_id"},
		{core.ExecRequest{SandboxID: sb.ID, Code: strings.Repeat("x", core.MaxCodeBytes+1)}, core.ErrInvalidArgument, "limit is 1048576"},
		{core.ExecRequest{SandboxID: sb.ID, Code: "\xff"}, core.ErrInvalidArgument, "UTF-8"},
		{core.ExecRequest{SandboxID: sb.ID, Timeout: 2 * time.Hour}, core.ErrInvalidArgument, "maximum"},
		{core.ExecRequest{SandboxID: sb.ID, Timeout: -time.Second}, core.ErrInvalidArgument, "negative"},
		{core.ExecRequest{SandboxID: "sb-aaaaaaaaaaaaaaaaaaaa"}, core.ErrNotFound, "not found"},
		{core.ExecRequest{SandboxID: "x"}, core.ErrInvalidArgument, "sandbox ID"},
	} {
		_, err := m.Submit(ctx, c.req)
		wantClass(t, err, c.want, c.msg)
	}
	if n := countLines(t, filepath.Join(m.cfg.StateDir, "sandboxes", sb.ID, "io", "stdin")); n != 0 {
		t.Errorf("invalid requests appended %d lines", n)
	}
}

func TestSubmitLearnsExistingLog(t *testing.T) {
	fd := newFakeDocker(testImage)
	m := newTestManager(t, testConfig(t), fd)
	sb := acquire(t, m, "u").Sandbox
	stdin := filepath.Join(m.cfg.StateDir, "sandboxes", sb.ID, "io", "stdin")
	// What a previous sandboxd process wrote: a valid exec, an interrupt, a
	// malformed record with a readable ID, and a torn last line.
	prior := `{"type":"exec","command_id":"old-1","code":"1"}` + "\n" +
		`{"type":"interrupt","command_id":"only-interrupted"}` + "\n" +
		`{"type":"exec","command_id":"bad-1","language":"cobol"}` + "\n" +
		`{"type":"exec","command_id":"torn`
	if err := os.WriteFile(stdin, []byte(prior), 0o644); err != nil {
		t.Fatal(err)
	}
	forgetLog(m, sb.ID) // as if this process had not used the sandbox yet

	for _, id := range []string{"old-1", "bad-1"} {
		// The same code as old-1's: a re-used ID with other code is a
		// conflict (TestSubmitCommandIDConflict).
		if _, err := m.Submit(t.Context(), core.ExecRequest{SandboxID: sb.ID, CommandID: id, Code: "1"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Submit(t.Context(), core.ExecRequest{SandboxID: sb.ID, CommandID: "only-interrupted"}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(stdin)
	got := strings.TrimPrefix(string(b), prior)
	// The torn line is terminated first, so the new record stands alone.
	if !strings.HasPrefix(got, "\n{") || strings.Count(got, "\n") != 2 || !strings.Contains(got, `"only-interrupted"`) {
		t.Errorf("appended %q", got)
	}
}

func TestInterrupt(t *testing.T) {
	fd := newFakeDocker(testImage)
	m := newTestManager(t, testConfig(t), fd)
	sb := acquire(t, m, "u").Sandbox
	wantClass(t, m.Interrupt(t.Context(), sb.ID, "nope"), core.ErrNotFound, "nope")
	if _, err := m.Submit(t.Context(), core.ExecRequest{SandboxID: sb.ID, CommandID: "c1", Code: "while True: pass"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Interrupt(t.Context(), sb.ID, "c1"); err != nil {
		t.Fatal(err)
	}
	recs := records(t, m, sb.ID)
	if len(recs) != 2 || !reflect.DeepEqual(recs[1], ioproto.Record{Type: "interrupt", CommandID: "c1"}) {
		t.Errorf("records = %+v", recs)
	}
}

func TestSubmitRefusesTamperedLog(t *testing.T) {
	fd := newFakeDocker(testImage)
	m := newTestManager(t, testConfig(t), fd)
	sb := acquire(t, m, "u").Sandbox
	// Sandboxed code owns io/: it replaces stdin with a symlink to a host file.
	victim := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(victim, []byte("precious\n"), 0o644)
	stdin := filepath.Join(m.cfg.StateDir, "sandboxes", sb.ID, "io", "stdin")
	os.Remove(stdin)
	if err := os.Symlink(victim, stdin); err != nil {
		t.Fatal(err)
	}
	forgetLog(m, sb.ID)
	_, err := m.Submit(t.Context(), core.ExecRequest{SandboxID: sb.ID, CommandID: "c1"})
	wantClass(t, err, core.ErrFailedPrecondition, "altered")
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Fatalf("host file modified: %q", b)
	}

	// A file of the sandbox user's in its place is refused too.
	os.Remove(stdin)
	os.WriteFile(stdin, nil, 0o644)
	os.Chown(stdin, 1000, 1000)
	_, err = m.Submit(t.Context(), core.ExecRequest{SandboxID: sb.ID, CommandID: "c1"})
	wantClass(t, err, core.ErrFailedPrecondition, "altered")
}

// forgetLog drops what m knows of a sandbox's command log, as if this
// process had not used the sandbox yet: the next use reads the log again.
func forgetLog(m *validated, id string) {
	sb := m.reg.get(id)
	sb.io = iolog.New(sb.io.Path())
}

func TestSubmitCommandIDConflict(t *testing.T) {
	fd := newFakeDocker(testImage)
	m := newTestManager(t, testConfig(t), fd)
	sb := acquire(t, m, "u").Sandbox
	if _, err := m.Submit(t.Context(), core.ExecRequest{SandboxID: sb.ID, CommandID: "c1", Code: "print(1)"}); err != nil {
		t.Fatal(err)
	}
	// The same command again: a retry, nothing appended.
	if id, err := m.Submit(t.Context(), core.ExecRequest{SandboxID: sb.ID, CommandID: "c1", Code: "print(1)"}); err != nil || id != "c1" {
		t.Fatalf("retry = %q, %v", id, err)
	}
	_, err := m.Submit(t.Context(), core.ExecRequest{SandboxID: sb.ID, CommandID: "c1", Code: "print(2)"})
	wantClass(t, err, core.ErrAlreadyExists, "c1")
	forgetLog(m, sb.ID) // and after a restart, from the log
	_, err = m.Submit(t.Context(), core.ExecRequest{SandboxID: sb.ID, CommandID: "c1", Code: "print(2)", Language: "bash"})
	wantClass(t, err, core.ErrAlreadyExists, "different command")
	if n := len(records(t, m, sb.ID)); n != 1 {
		t.Errorf("log has %d records, want 1", n)
	}
}
