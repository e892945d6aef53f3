package kube

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/backend/kube/iosidecar"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	sandboxiov1 "github.com/sandboxd/sandboxd/proto/sandboxio/v1"
)

const (
	testSandbox = "sb-aaaaaaaaaaaaaaaaaaaa"
	testToken   = "test-token-0123456789abcdef"
)

// serve serves srv on 127.0.0.1 and returns a client of it.
func serve(t *testing.T, srv *grpc.Server) *iosidecar.Client {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	c, err := iosidecar.Dial(lis.Addr().String(), testToken)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// An error's meaning crosses the sidecar once: the sidecar's reason, read
// back by the Client through the table, and ioError adding the sandbox's
// context. What callers read is what the Docker backend's callers read for
// the same situation, or, for the files API, the sidecar's own text.
func TestIOErrorThroughTheSidecar(t *testing.T) {
	dir := t.TempDir()
	ioDir, ws := filepath.Join(dir, "io"), filepath.Join(dir, "workspace")
	for _, d := range []string{ioDir, ws} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := iosidecar.New(iosidecar.Config{IODir: ioDir, Workspace: ws, Token: testToken, Recheck: 20 * time.Millisecond, MaxUploadBytes: 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop(time.Second) })
	c := serve(t, srv.GRPC())
	m := &Manager{log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	exec := func(id, code string) ioproto.Record {
		return ioproto.Record{Type: ioproto.KindExec, CommandID: id, Language: ioproto.LanguagePython, Code: code}
	}
	follow := func(cmd string) error {
		return c.Follow(ctx, cmd, 0, func(ioproto.Event) error { return nil })
	}
	want := func(what string, err error, class *core.Class, msg string) {
		t.Helper()
		if core.ClassOf(err) != class || err.Error() != msg {
			t.Errorf("%s = %q (class %v);\nwant %q (class %v)", what, err, core.ClassOf(err), msg, class)
		}
	}

	if _, err := c.Append(ctx, exec("c1", "1")); err != nil {
		t.Fatal(err)
	}
	_, err = c.Append(ctx, exec("c1", "2"))
	want("a command ID re-used", m.ioError(testSandbox, "c1", err), core.ErrAlreadyExists, core.CommandIDReused("c1", testSandbox).Error())
	want("an unknown command", m.ioError(testSandbox, "nope", follow("nope")), core.ErrNotFound, core.CommandNotFound("nope", testSandbox).Error())
	_, err = c.Append(ctx, ioproto.Record{Type: ioproto.KindInterrupt, CommandID: "nope"})
	want("an interrupt of an unknown command", m.ioError(testSandbox, "nope", err), core.ErrNotFound, core.CommandNotFound("nope", testSandbox).Error())

	if _, err := c.Append(ctx, exec("pruned-1", "1")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ioDir, ioproto.StateFile), []byte(`{"version":1,"offset":1000000}`), 0o644); err != nil {
		t.Fatal(err)
	}
	want("pruned output", m.ioError(testSandbox, "pruned-1", follow("pruned-1")), core.ErrNotFound, core.OutputPruned("pruned-1", testSandbox).Error())

	if err := os.Symlink("/etc/passwd", filepath.Join(ioDir, ioproto.OutDir, ioproto.EventsFileName("c1"))); err != nil {
		t.Fatal(err)
	}
	err = m.ioError(testSandbox, "c1", follow("c1"))
	if core.ClassOf(err) != core.ErrFailedPrecondition || !strings.HasPrefix(err.Error(), "sandbox "+testSandbox+" tampered with its /io files (altered from inside the sandbox): io sidecar: the events file of command c1 was altered from inside the sandbox") {
		t.Errorf("a tampered events file = %v", err)
	}

	_, _, err = c.Download(ctx, "missing")
	want("a missing file", m.ioError(testSandbox, "", err), core.ErrNotFound, "io sidecar: download /workspace/missing: no such file or directory (NotFound)")
	_, err = c.Upload(ctx, "big", strings.NewReader(strings.Repeat("x", 11)), 0)
	want("an upload over the sidecar's cap", m.ioError(testSandbox, "", err), core.ErrResourceExhausted, "io sidecar: upload to /workspace/big is larger than its limit of 10 bytes (ResourceExhausted)")
	_, err = c.ListFiles(ctx, "../x", 1)
	want("a path outside (the sidecar's own check)", m.ioError(testSandbox, "", err), core.ErrInvalidArgument, `io sidecar: path "../x" escapes /workspace: ".." is not allowed (InvalidArgument)`)
	// The directory calls: each class crosses with the sidecar's text.
	_, err = c.MakeDirectory(ctx, "d/sub", false)
	want("a directory without its parent", m.ioError(testSandbox, "", err), core.ErrNotFound,
		"io sidecar: make directory /workspace/d/sub: parent directory /workspace/d does not exist (set parents to create it) (NotFound)")
	if _, err := c.MakeDirectory(ctx, "d/sub", true); err != nil {
		t.Fatal(err)
	}
	_, err = c.MakeDirectory(ctx, "d", false)
	want("an existing directory", m.ioError(testSandbox, "", err), core.ErrAlreadyExists, "io sidecar: make directory /workspace/d: already exists (AlreadyExists)")
	err = c.Remove(ctx, "d", false)
	want("a non-empty directory removed", m.ioError(testSandbox, "", err), core.ErrFailedPrecondition,
		"io sidecar: remove /workspace/d: the directory is not empty (set recursive to remove it with its content) (FailedPrecondition)")
	err = c.Remove(ctx, "/workspace", true)
	want("the workspace removed (the sidecar's own check)", m.ioError(testSandbox, "", err), core.ErrInvalidArgument,
		"io sidecar: remove /workspace: the workspace itself cannot be removed; remove what is in it (InvalidArgument)")
	if _, err := c.MakeDirectory(ctx, "e", false); err != nil {
		t.Fatal(err)
	}
	_, err = c.Rename(ctx, "e", "d", false)
	want("a rename onto an existing path", m.ioError(testSandbox, "", err), core.ErrAlreadyExists,
		"io sidecar: rename /workspace/e to /workspace/d: the destination exists (set overwrite to replace it) (AlreadyExists)")
	_, err = c.Rename(ctx, "e", "d/sub/e", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(ctx, "d", true); err != nil {
		t.Fatal(err)
	}
	_, err = c.Rename(ctx, "d", "f", false)
	want("a rename of a removed directory", m.ioError(testSandbox, "", err), core.ErrNotFound, "io sidecar: rename /workspace/d: no such file or directory (NotFound)")
	err = follow("../x")
	want("an invalid command ID (the sidecar's own check)", m.ioError(testSandbox, "../x", err), core.ErrInvalidArgument,
		`io sidecar: command_id "../x" has characters outside [A-Za-z0-9._-] or does not start with a letter or digit (InvalidArgument)`)

	// Input refused next to the log reads as under Docker (the texts are
	// the Docker backend's, cmdlog.InputError's).
	if _, err := c.Append(ctx, ioproto.Record{Type: ioproto.KindExec, CommandID: "sh", Language: ioproto.LanguageBash, Code: "cat", Stdin: true}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Append(ctx, ioproto.StdinRecord("c1", []byte("x")))
	want("stdin for a command without it", m.ioError(testSandbox, "c1", err), core.ErrFailedPrecondition,
		"command c1 in sandbox "+testSandbox+" was not started with stdin (ExecuteRequest.stdin or pty); its input is closed")
	_, err = c.Append(ctx, ioproto.Record{Type: ioproto.KindResize, CommandID: "sh", Pty: ioproto.PtySize{Rows: 2, Cols: 2}})
	want("a resize without a terminal", m.ioError(testSandbox, "sh", err), core.ErrFailedPrecondition,
		"command sh in sandbox "+testSandbox+" was not started with a terminal (ExecuteRequest.pty); it cannot be resized")
	_, err = c.Append(ctx, ioproto.Record{Type: ioproto.KindStdinClose, CommandID: "nope"})
	want("a close for an unknown command", m.ioError(testSandbox, "nope", err), core.ErrNotFound, core.CommandNotFound("nope", testSandbox).Error())
	if err := os.WriteFile(filepath.Join(ioDir, ioproto.OutDir, ioproto.EventsFileName("sh")), []byte(`{"seq":1,"type":"started","command_id":"sh"}`+"\n"+`{"seq":2,"type":"done","status":"ok"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = c.Append(ctx, ioproto.StdinRecord("sh", []byte("x")))
	want("stdin for a finished command", m.ioError(testSandbox, "sh", err), core.ErrFailedPrecondition,
		"command sh in sandbox "+testSandbox+" has finished; it takes no more input")

	// A forged reason, or one Follow cannot answer: the sidecar failed.
	for _, f := range []forger{
		{code: codes.NotFound, reason: "SANDBOX_DELETED"},
		{code: codes.ResourceExhausted, reason: "LOG_FULL"},
		{code: codes.NotFound, reason: "NOT_FOUND"},
		{code: codes.NotFound},
	} {
		h := grpc.NewServer()
		sandboxiov1.RegisterIOServiceServer(h, f)
		err := m.ioError(testSandbox, "c1", serve(t, h).Follow(ctx, "c1", 0, func(ioproto.Event) error { return nil }))
		if core.ClassOf(err) != core.ErrUnavailable || !strings.HasPrefix(err.Error(), "the io sidecar of sandbox "+testSandbox+" failed: io sidecar: sandbox sb-bbbbbbbbbbbbbbbbbbbb not found") {
			t.Errorf("Follow answered %v with reason %q = %v; want UNAVAILABLE, the io sidecar failed", f.code, f.reason, err)
		}
	}

	// The sidecar shutting down: try again.
	srv.Stop(time.Second)
	err = m.ioError(testSandbox, "c1", follow("c1"))
	if core.ClassOf(err) != core.ErrUnavailable || !strings.HasSuffix(err.Error(), "; try again") {
		t.Errorf("a stopped sidecar = %v; want UNAVAILABLE, try again", err)
	}
}

// forger is a sidecar whose Follow answers code with reason (none if
// empty) and a forged text.
type forger struct {
	code   codes.Code
	reason string
	sandboxiov1.UnimplementedIOServiceServer
}

func (f forger) Follow(*sandboxiov1.FollowRequest, grpc.ServerStreamingServer[sandboxiov1.FollowResponse]) error {
	st := status.New(f.code, "sandbox sb-bbbbbbbbbbbbbbbbbbbb not found")
	if f.reason != "" {
		st, _ = st.WithDetails(&errdetails.ErrorInfo{Reason: f.reason, Domain: iosidecar.ErrorDomain})
	}
	return st.Err()
}

// Header rules a Pod's sidecar cannot put in force (sealed under another
// token, or a sidecar of an earlier release) are the caller's to fix, by
// setting the policy again or waking the sandbox into a new Pod: never
// UNAVAILABLE, which says to retry the same call.
func TestIOErrorRulesSealed(t *testing.T) {
	m := &Manager{log: slog.New(slog.DiscardHandler)}
	err := m.ioError(testSandbox, "", fmt.Errorf("io sidecar: %w: sealed under another io token", iosidecar.ErrRulesSealed))
	if core.ClassOf(err) != core.ErrFailedPrecondition || !strings.Contains(err.Error(), "network rules of sandbox "+testSandbox) {
		t.Errorf("rules the sidecar cannot open = %v (class %v); want FAILED_PRECONDITION naming the sandbox's rules", err, core.ClassOf(err))
	}
}
