package grpcapi

import (
	"context"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/orchestrator/backend/docker"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// serveReal serves the real domain over an in-memory connection.
func serveReal(t *testing.T, m *docker.Manager) sandboxv1.SandboxServiceClient {
	t.Helper()
	srv := NewServer(core.Validating(m, m.Policy()), slog.New(slog.NewTextHandler(t.Output(), nil)))
	lis := bufconn.Listen(1 << 20)
	go srv.Serve(lis)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(sandboxv1.MaxMessageSize)),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); srv.Stop() })
	return sandboxv1.NewSandboxServiceClient(conn)
}

// TestIntegrationInvalidUTF8OverGRPC runs hostile code in a real sandbox
// (Docker and the sandbox image) and checks that every call stays OK, with
// the sandbox's invalid bytes replaced: a file name in /workspace, bytes on
// stdout, and a text artifact rewritten from inside the sandbox.
func TestIntegrationInvalidUTF8OverGRPC(t *testing.T) {
	img := testenv.NeedDocker(t)
	m, err := docker.New(t.Context(), docker.Config{
		Policy:        core.Policy{Image: img, Runtime: os.Getenv("SANDBOX_RUNTIME")},
		StateDir:      t.TempDir(),
		NoDiskVolumes: true,
		Logger:        slog.New(slog.NewTextHandler(t.Output(), nil)),
	}, nil)
	if err != nil {
		t.Fatalf("docker.New: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	c := serveReal(t, m)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	acq, err := c.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: "it-grpc-utf8"})
	if err != nil {
		t.Fatal(err)
	}
	id := acq.GetSandbox().GetSandboxId()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		m.Delete(ctx, id)
	})
	collect := collector(t) // fails on a broken stream (INTERNAL before the fix)
	run := func(cid, lang, code string) []*sandboxv1.ExecuteEvent {
		t.Helper()
		evs := collect(c.Execute(ctx, &sandboxv1.ExecuteRequest{SandboxId: id, CommandId: cid, Language: lang, Code: code}))
		for _, ev := range evs {
			if _, err := proto.Marshal(ev); err != nil {
				t.Errorf("event %v: %v", ev, err)
			}
		}
		return evs
	}
	doneOf := func(evs []*sandboxv1.ExecuteEvent) *sandboxv1.Done {
		t.Helper()
		if len(evs) == 0 || evs[len(evs)-1].GetDone() == nil {
			t.Fatalf("no done: %v", evs)
		}
		return evs[len(evs)-1].GetDone()
	}

	run("mk", "bash", `touch $'\xff\xfe.txt' ok.txt`)
	list, err := c.ListFiles(ctx, &sandboxv1.ListFilesRequest{SandboxId: id})
	if err != nil {
		t.Fatalf("ListFiles with a non-UTF-8 name: %v", err)
	}
	var names []string
	for _, f := range list.GetFiles() {
		names = append(names, f.GetPath())
	}
	if strings.Join(names, ",") != "ok.txt,\uFFFD.txt" {
		t.Errorf("ListFiles = %q; want ok.txt and \uFFFD.txt", names)
	}

	var out strings.Builder
	for _, ev := range run("py", "python", "import os; os.write(1, b'\\xff\\xfeabc\\n')") {
		out.WriteString(ev.GetStdout().GetText())
	}
	if out.String() != "\uFFFDabc\n" {
		t.Errorf("stdout = %q, want %q", out.String(), "\uFFFDabc\n")
	}

	if d := doneOf(run("art", "python", "display({'text/html': 'h' * 300000}, raw=True)")); d.GetStatus() != sandboxv1.CommandStatus_COMMAND_STATUS_OK {
		t.Fatalf("display: %v", d)
	}
	run("tamper", "bash", `for f in /io/out/art.*.1; do printf '\xff\xfe tampered' > "$f"; done`)
	replay := collect(c.StreamCommand(ctx, &sandboxv1.StreamCommandRequest{SandboxId: id, CommandId: "art"}))
	doneOf(replay)
	for _, ev := range replay {
		if d := ev.GetDisplay(); d != nil {
			if v, ok := d.GetData()["text/html"]; ok && v != "\uFFFD tampered" {
				t.Errorf("replayed text/html = %q, want the rewritten bytes made valid", v[:min(len(v), 40)])
			}
		}
	}

	g, err := c.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: id})
	if err != nil || !utf8.ValidString(g.GetSandbox().GetHealthReason()) {
		t.Errorf("GetSandbox = %v, %v", g, err)
	}
}
