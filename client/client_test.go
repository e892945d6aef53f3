package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// Every code maps to its class; the message and the code survive.
func TestErrorClasses(t *testing.T) {
	tests := []struct {
		code  codes.Code
		class error
	}{
		{codes.InvalidArgument, ErrInvalidArgument},
		{codes.OutOfRange, ErrInvalidArgument},
		{codes.NotFound, ErrNotFound},
		{codes.AlreadyExists, ErrAlreadyExists},
		{codes.FailedPrecondition, ErrFailedPrecondition},
		{codes.ResourceExhausted, ErrResourceExhausted},
		{codes.Unavailable, ErrUnavailable},
		{codes.Aborted, ErrUnavailable},
		{codes.Unauthenticated, ErrUnauthenticated},
		{codes.PermissionDenied, ErrPermissionDenied},
		{codes.Unimplemented, ErrNotImplemented},
		{codes.Internal, ErrInternal},
		{codes.Unknown, ErrInternal},
		{codes.DataLoss, ErrInternal},
		{codes.Code(99), ErrInternal},
		{codes.Canceled, context.Canceled},
		{codes.DeadlineExceeded, context.DeadlineExceeded},
	}
	for _, tc := range tests {
		t.Run(tc.code.String(), func(t *testing.T) {
			err := fromGRPC(status.Error(tc.code, "the server's words"))
			if !errors.Is(err, tc.class) {
				t.Errorf("errors.Is(%v, %v) = false", err, tc.class)
			}
			if status.Code(err) != tc.code {
				t.Errorf("status.Code = %v, want %v", status.Code(err), tc.code)
			}
			if want := "the server's words (" + tc.code.String() + ")"; err.Error() != want {
				t.Errorf("message %q, want %q", err.Error(), want)
			}
			// Wrapped with context, as the calls do, it is still classified.
			wrapped := fmt.Errorf("getting sandbox sb-1: %w", err)
			if !errors.Is(wrapped, tc.class) || status.Code(wrapped) != tc.code {
				t.Errorf("wrapped: errors.Is %v, code %v", errors.Is(wrapped, tc.class), status.Code(wrapped))
			}
		})
	}
	if fromGRPC(nil) != nil {
		t.Error("fromGRPC(nil) != nil")
	}
	plain := errors.New("disk full")
	if fromGRPC(plain) != plain {
		t.Error("an error without a status was changed")
	}
	once := fromGRPC(status.Error(codes.NotFound, "x"))
	if again := fromGRPC(fmt.Errorf("ctx: %w", once)); again.Error() != "ctx: x (NotFound)" {
		t.Errorf("converting twice: %q", again)
	}
}

// The token goes with every kind of call, over plaintext.
func TestToken(t *testing.T) {
	f := newFake()
	c := startFake(t, f, WithToken("s3cret"))
	ctx := context.Background()
	if _, err := c.Acquire(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run(ctx, Command{SandboxID: "sb-alice", ID: "c1"}, false, nil); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.auth) != 2 || f.auth[0] != "Bearer s3cret" || f.auth[1] != "Bearer s3cret" {
		t.Errorf("authorization metadata = %q, want the bearer token on both calls", f.auth)
	}
}

func TestSandboxes(t *testing.T) {
	f := newFake()
	c := startFake(t, f)
	ctx := context.Background()

	acq, err := c.Acquire(ctx, "alice", WithEnv(map[string]string{"K": "v"}), WithLimits(Limits{MemoryBytes: 1 << 30, DiskBytes: 1 << 28}), WithNetwork())
	if err != nil {
		t.Fatal(err)
	}
	want := Acquired{ID: "sb-alice", Created: true, StateLost: true, ReplacedID: "sb-old", ReplacedReason: "container exited with code 137"}
	got := acq
	got.Sandbox = nil
	if got != want || acq.Sandbox.GetUserId() != "alice" {
		t.Errorf("Acquire = %+v, want %+v", acq, want)
	}
	wantOpts := &sandboxv1.SandboxOptions{Env: map[string]string{"K": "v"}, Limits: &sandboxv1.ResourceLimits{MemoryBytes: 1 << 30, DiskBytes: 1 << 28}, Network: true}
	if _, err := c.Acquire(ctx, "bob"); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	if !proto.Equal(f.acquired[0].GetOptions(), wantOpts) || f.acquired[1].Options != nil {
		t.Errorf("sandboxd got options %v and %v; want %v and none", f.acquired[0].GetOptions(), f.acquired[1].GetOptions(), wantOpts)
	}
	f.mu.Unlock()
	if _, err := c.Acquire(ctx, ""); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "user_id is required") {
		t.Errorf("Acquire without a user: %v, want ErrInvalidArgument with sandboxd's message", err)
	}

	if sb, err := c.Get(ctx, "sb-1"); err != nil || sb.GetSandboxId() != "sb-1" {
		t.Errorf("Get = %v, %v", sb, err)
	}
	sbs, err := c.List(ctx, ListFilter{Tenant: "acme", State: sandboxv1.SandboxState_SANDBOX_STATE_DEAD})
	if err != nil || len(sbs) != 1 || sbs[0].GetSandboxId() != "sb-2" {
		t.Errorf("List(acme, dead) = %v, %v; want sb-2", sbs, err)
	}
	if sbs, err := c.List(ctx, ListFilter{UserID: "alice"}); err != nil || len(sbs) != 1 || sbs[0].GetSandboxId() != "sb-1" {
		t.Errorf("List(alice) = %v, %v; want sb-1", sbs, err)
	}
	if err := c.Delete(ctx, "sb-1"); err != nil {
		t.Errorf("Delete = %v", err)
	}
	err = c.Delete(ctx, "sb-9")
	if !errors.Is(err, ErrNotFound) || status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "sandbox sb-9 not found") {
		t.Errorf("Delete(unknown) = %v, want ErrNotFound with sandboxd's message", err)
	}
	if err := c.Interrupt(ctx, "sb-1", "c7"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Interrupt(unknown) = %v, want ErrNotFound", err)
	}
	if err := c.Check(ctx, "sb-1"); err != nil {
		t.Errorf("Check = %v", err)
	}
	if err := c.Ready(ctx); err != nil {
		t.Errorf("Ready = %v", err)
	}
}

// A file goes up in chunks and comes back the same.
func TestFilesRoundTrip(t *testing.T) {
	f := newFake()
	c := startFake(t, f)
	ctx := context.Background()
	data := bytes.Repeat([]byte("0123456789abcdef"), 200_000) // 3.2 MB: several chunks
	// HalfReader checks that short reads still make whole chunks.
	info, err := c.Upload(ctx, "sb-1", "data/in.bin", iotest.HalfReader(bytes.NewReader(data)))
	if err != nil || info.GetSize() != int64(len(data)) || info.GetPath() != "data/in.bin" {
		t.Fatalf("Upload = %v, %v", info, err)
	}
	if _, err := c.Upload(ctx, "sb-1", "empty", strings.NewReader("")); err != nil {
		t.Fatalf("Upload(empty) = %v", err)
	}
	var back bytes.Buffer
	info, err = c.Download(ctx, "sb-1", "data/in.bin", &back)
	if err != nil || !bytes.Equal(back.Bytes(), data) || info.GetSize() != int64(len(data)) {
		t.Fatalf("Download = %v, %v; %d bytes back, want %d", info, err, back.Len(), len(data))
	}
	files, err := c.ListFiles(ctx, "sb-1", "")
	if err != nil || len(files) != 2 || files[0].GetPath() != "data/in.bin" || files[1].GetPath() != "empty" {
		t.Errorf("ListFiles = %v, %v", files, err)
	}

	if _, err := c.Upload(ctx, "sb-1", "../etc/passwd", strings.NewReader("x")); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Upload outside /workspace = %v, want ErrInvalidArgument", err)
	}
	if _, err := c.Download(ctx, "sb-1", "missing", io.Discard); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "file missing not found") {
		t.Errorf("Download(missing) = %v, want ErrNotFound", err)
	}
	broken := errors.New("read failed")
	if _, err := c.Upload(ctx, "sb-1", "half", io.MultiReader(strings.NewReader("x"), iotest.ErrReader(broken))); !errors.Is(err, broken) {
		t.Errorf("Upload with a failing reader = %v, want its error", err)
	}
	f.mu.Lock()
	_, stored := f.files["sb-1/half"]
	f.mu.Unlock()
	if stored {
		t.Error("an upload whose reader failed was stored")
	}
}

// A dead sandbox is gone too, with the reason sandboxd gives.
func TestCheckDead(t *testing.T) {
	f := newFake()
	f.deadReason = "container exited with code 137"
	c := startFake(t, f)
	err := c.Check(context.Background(), "sb-1")
	if !errors.Is(err, ErrGone) || !strings.Contains(err.Error(), "code 137") {
		t.Errorf("Check = %v, want ErrGone with the reason", err)
	}
}

func TestTLSConfig(t *testing.T) {
	if cfg, err := TLSConfig(""); err != nil || cfg.RootCAs != nil {
		t.Errorf("TLSConfig(\"\") = %v, %v; want the system's CAs", cfg, err)
	}
	dir := t.TempDir()
	if _, err := TLSConfig(filepath.Join(dir, "missing.pem")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing CA file: %v", err)
	}
	bad := filepath.Join(dir, "bad.pem")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := TLSConfig(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("CA file without a certificate: %v", err)
	}
}
