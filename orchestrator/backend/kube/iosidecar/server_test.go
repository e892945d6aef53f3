package iosidecar

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/iolog"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/wspath"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

const testToken = "test-token-0123456789abcdef"

// sidecar is a real server on 127.0.0.1 over temporary directories, with a
// client connected to it.
type sidecar struct {
	srv           *Server
	c             *Client
	addr          string
	io, workspace string
	volumes       string // Config.Volumes, if any
}

func startSidecar(t *testing.T) *sidecar {
	t.Helper()
	return startSidecarWith(t, nil)
}

// startSidecarWith is startSidecar with a directory of volumes (one per
// ID in vols, made before the server starts), and prepare run first in
// its temporary directory.
func startSidecarWith(t *testing.T, prepare func(volumes string), vols ...string) *sidecar {
	t.Helper()
	dir := t.TempDir()
	sc := &sidecar{io: filepath.Join(dir, "io"), workspace: filepath.Join(dir, "workspace")}
	for _, d := range []string{sc.io, sc.workspace} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := Config{IODir: sc.io, Workspace: sc.workspace, Token: testToken, Recheck: 50 * time.Millisecond, MaxUploadBytes: 1 << 20}
	if prepare != nil || len(vols) > 0 {
		sc.volumes = filepath.Join(dir, "volumes")
		cfg.Volumes = sc.volumes
		for _, id := range vols {
			if err := os.MkdirAll(filepath.Join(sc.volumes, id), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if prepare != nil {
			prepare(sc.volumes)
		}
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.GRPC().Serve(lis) }()
	sc.srv, sc.addr = srv, lis.Addr().String()
	c, err := Dial(sc.addr, testToken)
	if err != nil {
		t.Fatal(err)
	}
	sc.c = c
	t.Cleanup(func() {
		c.Close()
		srv.Stop(time.Second)
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return sc
}

// fakeDriver appends events to a command's events file, as the driver does.
func (sc *sidecar) writeEvents(t *testing.T, cmd string, evs ...ioproto.Event) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(sc.io, ioproto.OutDir, ioproto.EventsFileName(cmd)), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, ev := range evs {
		line, err := ioproto.EncodeEvent(&ev)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(line); err != nil {
			t.Fatal(err)
		}
	}
}

func execRec(id, code string) ioproto.Record {
	return ioproto.Record{Type: ioproto.KindExec, CommandID: id, Language: ioproto.LanguagePython, Code: code}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// The events of a command that printed twice and ended.
func threeEvents(cmd string) []ioproto.Event {
	return []ioproto.Event{
		{Seq: 1, Type: ioproto.EventStarted, CommandID: cmd, Language: ioproto.LanguagePython},
		{Seq: 2, Type: ioproto.EventStdout, Text: "hello\n"},
		{Seq: 3, Type: ioproto.EventDone, Status: ioproto.StatusOK},
	}
}

func collect(t *testing.T, c *Client, cmd string, after int64) ([]ioproto.Event, error) {
	t.Helper()
	var got []ioproto.Event
	err := c.Follow(ctxT(t), cmd, after, func(ev ioproto.Event) error { got = append(got, ev); return nil })
	return got, err
}

func seqs(evs []ioproto.Event) []int64 {
	var s []int64
	for _, ev := range evs {
		s = append(s, ev.Seq)
	}
	return s
}

func TestAppendOnceAndConflict(t *testing.T) {
	sc := startSidecar(t)
	ctx := ctxT(t)
	if ok, err := sc.c.Append(ctx, execRec("c1", "print(1)")); !ok || err != nil {
		t.Fatalf("first Append = %v, %v; want appended", ok, err)
	}
	if ok, err := sc.c.Append(ctx, execRec("c1", "print(1)")); ok || err != nil {
		t.Fatalf("retried Append = %v, %v; want not appended, no error", ok, err)
	}
	if _, err := sc.c.Append(ctx, execRec("c1", "print(2)")); !errors.Is(err, iolog.ErrConflict) {
		t.Fatalf("Append of another command under the same ID = %v; want iolog.ErrConflict", err)
	}
	if _, err := sc.c.Append(ctx, ioproto.Record{Type: ioproto.KindInterrupt, CommandID: "nope"}); !errors.Is(err, iolog.ErrUnknownCommand) {
		t.Fatalf("interrupt of an unknown command = %v; want iolog.ErrUnknownCommand", err)
	}
	log, err := os.ReadFile(filepath.Join(sc.io, ioproto.StdinFile))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(log, []byte("\n")); n != 1 {
		t.Errorf("the command log has %d records; want 1:\n%s", n, log)
	}
}

func TestAppendMalformedRecord(t *testing.T) {
	sc := startSidecar(t)
	// The client validates before sending; the server must too.
	for _, raw := range []string{`not json`, `{"type":"exec","command_id":"../x","code":"1"}`, `{"type":"bogus","command_id":"c"}`} {
		_, err := sc.c.rpc.Append(ctxT(t), &sandboxAppendReq{Record: []byte(raw)})
		if err := errorOf(t.Context(), callAppend, err); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("Append(%s) = %v; want core.ErrInvalidArgument", raw, err)
		}
	}
}

// TestAppendEnvRecord: an env record (a claimed pool Pod's shaping,
// kube/shape.go) is appended as the host's iolog appends it, and one
// setting a driver's own variable, sent raw past the client's encoder, is
// refused by the sidecar's own check.
func TestAppendEnvRecord(t *testing.T) {
	sc := startSidecar(t)
	ctx := ctxT(t)
	if ok, err := sc.c.Append(ctx, ioproto.EnvRecord(ioproto.EnvRecordIDPrefix+"0123", map[string]string{"A": "b"})); !ok || err != nil {
		t.Fatalf("Append(env record) = %v, %v; want appended", ok, err)
	}
	raw := `{"type":"env","command_id":"sbx-env-4567","env":{"` + ioproto.EnvLogLevel + `":"debug"}}`
	_, err := sc.c.rpc.Append(ctx, &sandboxAppendReq{Record: []byte(raw)})
	if err := errorOf(t.Context(), callAppend, err); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("Append(%s) = %v; want core.ErrInvalidArgument", raw, err)
	}
	log, err := os.ReadFile(filepath.Join(sc.io, ioproto.StdinFile))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(log, []byte("\n")); n != 1 || !bytes.Contains(log, []byte(`"type":"env"`)) {
		t.Errorf("the command log has %d records; want the env record alone:\n%s", n, log)
	}
}

func TestFollowFromStartAndResume(t *testing.T) {
	sc := startSidecar(t)
	if _, err := sc.c.Append(ctxT(t), execRec("c1", "print('hello')")); err != nil {
		t.Fatal(err)
	}
	sc.writeEvents(t, "c1", threeEvents("c1")...)
	got, err := collect(t, sc.c, "c1", 0)
	if err != nil || len(got) != 3 || got[1].Text != "hello\n" || got[2].Status != ioproto.StatusOK {
		t.Fatalf("Follow from 0 = %+v, %v; want the 3 events", got, err)
	}
	got, err = collect(t, sc.c, "c1", 1)
	if err != nil || !slices.Equal(seqs(got), []int64{2, 3}) {
		t.Fatalf("Follow after 1 = seqs %v, %v; want [2 3]", seqs(got), err)
	}
	got, err = collect(t, sc.c, "c1", 3)
	if err != nil || len(got) != 0 {
		t.Fatalf("Follow after done = %v, %v; want nothing, no error", seqs(got), err)
	}
}

func TestFollowWaitsForLaterEvents(t *testing.T) {
	sc := startSidecar(t)
	if _, err := sc.c.Append(ctxT(t), execRec("c1", "1")); err != nil {
		t.Fatal(err)
	}
	evs := threeEvents("c1")
	got := make(chan ioproto.Event, 10)
	done := make(chan error, 1)
	go func() {
		done <- sc.c.Follow(ctxT(t), "c1", 0, func(ev ioproto.Event) error { got <- ev; return nil })
	}()
	timeout := time.After(15 * time.Second)
	for i, ev := range evs {
		sc.writeEvents(t, "c1", ev) // the file does not exist before the first
		select {
		case g := <-got:
			if g.Seq != ev.Seq || g.Type != ev.Type {
				t.Fatalf("event %d = %+v; want %+v", i, g, ev)
			}
		case err := <-done:
			// Follow ends right after streaming the done event, so with
			// the last event both channels may be ready: the event was
			// streamed if it is in got.
			if len(got) == 0 || i != len(evs)-1 {
				t.Fatalf("Follow returned %v before event %d", err, ev.Seq)
			}
			if g := <-got; g.Seq != ev.Seq || g.Type != ev.Type || err != nil {
				t.Fatalf("last event %+v, Follow = %v; want %+v, nil", g, err, ev)
			}
			return
		case <-timeout:
			t.Fatalf("event %d written to the file was not streamed within 15 s", ev.Seq)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Follow after the done event = %v; want nil", err)
		}
	case <-timeout:
		t.Fatal("Follow did not end after the done event")
	}
}

func TestFollowUnknownAndPruned(t *testing.T) {
	sc := startSidecar(t)
	if _, err := collect(t, sc.c, "nope", 0); !errors.Is(err, iolog.ErrUnknownCommand) {
		t.Fatalf("Follow of an unknown command = %v; want iolog.ErrUnknownCommand", err)
	}
	if _, err := collect(t, sc.c, "../etc", 0); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("Follow of an invalid command ID = %v; want core.ErrInvalidArgument", err)
	}
	if _, err := sc.c.Append(ctxT(t), execRec("pruned-1", "1")); err != nil {
		t.Fatal(err)
	}
	// The driver is past the record and the events file is gone: pruned.
	if err := os.WriteFile(filepath.Join(sc.io, ioproto.StateFile), []byte(`{"version":1,"offset":1000000}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := collect(t, sc.c, "pruned-1", 0)
	if !errors.Is(err, iolog.ErrPruned) || errors.Is(err, iolog.ErrUnknownCommand) {
		t.Fatalf("Follow of pruned output = %v; want iolog.ErrPruned only", err)
	}
}

func TestFollowTamperedEvents(t *testing.T) {
	sc := startSidecar(t)
	if _, err := sc.c.Append(ctxT(t), execRec("c1", "1")); err != nil {
		t.Fatal(err)
	}
	// The sandbox plants a symlink to a host file as the events file.
	if err := os.Symlink("/etc/passwd", filepath.Join(sc.io, ioproto.OutDir, ioproto.EventsFileName("c1"))); err != nil {
		t.Fatal(err)
	}
	if _, err := collect(t, sc.c, "c1", 0); !errors.Is(err, iolog.ErrTampered) {
		t.Fatalf("Follow of a symlinked events file = %v; want iolog.ErrTampered", err)
	}
}

func TestAppendTamperedLog(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a log owned by another user")
	}
	sc := startSidecar(t)
	// The sandbox replaced the log with a file of its own.
	p := filepath.Join(sc.io, ioproto.StdinFile)
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.c.Append(ctxT(t), execRec("c1", "1")); !errors.Is(err, iolog.ErrTampered) {
		t.Fatalf("Append to a log the sandbox owns = %v; want iolog.ErrTampered", err)
	}
}

func TestAuth(t *testing.T) {
	sc := startSidecar(t)
	bad, err := Dial(sc.addr, "wrong-token-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if _, err := bad.Append(ctxT(t), execRec("c1", "1")); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("Append with a wrong token = %v; want ErrUnauthenticated", err)
	}
	if _, err := collect(t, bad, "c1", 0); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("Follow with a wrong token = %v; want ErrUnauthenticated", err)
	}
	if _, err := bad.ListFiles(ctxT(t), "", 1); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("ListFiles with a wrong token = %v; want ErrUnauthenticated", err)
	}
	// No token at all.
	conn, err := grpc.NewClient(sc.addr, grpc.WithTransportCredentials(insecureCreds()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	raw := &Client{conn: conn, rpc: newIOClient(conn)}
	if _, err := raw.DriverStatus(ctxT(t)); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("Status without a token = %v; want ErrUnauthenticated", err)
	}
	// Health needs none.
	resp, err := healthpb.NewHealthClient(conn).Check(ctxT(t), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health check without a token = %v, %v; want SERVING", resp, err)
	}
}

func TestDriverStatus(t *testing.T) {
	sc := startSidecar(t)
	if _, err := sc.c.DriverStatus(ctxT(t)); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("DriverStatus before the driver wrote it = %v; want core.ErrNotFound", err)
	}
	if err := os.WriteFile(filepath.Join(sc.io, ioproto.DriverStatusFile), []byte(`{"version":1,"pid":7,"boot":2,"health":"ok","languages":["python","bash"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	ds, err := sc.c.DriverStatus(ctxT(t))
	if err != nil || ds.PID != 7 || ds.Boot != 2 || len(ds.Languages) != 2 {
		t.Fatalf("DriverStatus = %+v, %v", ds, err)
	}
}

func TestPrepareLayoutKeepsTheLog(t *testing.T) {
	dir := t.TempDir()
	if err := PrepareLayout(dir); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, ioproto.OutDir))
	if err != nil || !st.IsDir() || st.Mode().Perm() != 0o755 {
		t.Fatalf("out/ = %v, %v; want a 0755 directory", st, err)
	}
	if os.Geteuid() == 0 {
		if uid := ownerOf(t, st); uid != 1000 {
			t.Errorf("out/ is owned by uid %d; want 1000", uid)
		}
		if st, err := os.Stat(dir); err != nil || ownerOf(t, st) != 1000 {
			t.Errorf("the io directory is not the sandbox user's: %v", err)
		}
	}
	p := filepath.Join(dir, ioproto.StdinFile)
	if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o644 || st.Size() != 0 {
		t.Fatalf("stdin = %v, %v; want an empty 0644 file", st, err)
	}
	if err := os.WriteFile(p, []byte(`{"type":"exec","command_id":"c1","code":"1"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A restarted sidecar container.
	if err := PrepareLayout(dir); err != nil {
		t.Fatalf("PrepareLayout on an existing layout: %v", err)
	}
	if b, _ := os.ReadFile(p); !strings.Contains(string(b), "c1") {
		t.Fatalf("the command log was not kept across a restart: %q", b)
	}
}

func TestFilesRoundTrip(t *testing.T) {
	sc := startSidecar(t)
	ctx := ctxT(t)
	content := bytes.Repeat([]byte("0123456789abcdef"), 150_000) // 2.4 MB: several chunks
	fi, err := sc.c.Upload(ctx, "/workspace/data/in/x.bin", bytes.NewReader(content[:1<<20]), 0)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Path != "data/in/x.bin" || fi.Size != 1<<20 || display(wspath.Workspace, fi) != "/workspace/data/in/x.bin" {
		t.Errorf("Upload = %+v", fi)
	}
	if os.Geteuid() == 0 && (fi.UID != 1000 || fi.GID != 1000) {
		t.Errorf("uploaded file owned by %d:%d; want 1000:1000", fi.UID, fi.GID)
	}
	st, err := os.Stat(filepath.Join(sc.workspace, "data"))
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 && ownerOf(t, st) != 1000 {
		t.Errorf("created parent owned by uid %d; want 1000", ownerOf(t, st))
	}
	// Over the server's cap (1 MiB in these tests), and over the header's.
	if _, err := sc.c.Upload(ctx, "big.bin", bytes.NewReader(content), 0); !errors.Is(err, core.ErrResourceExhausted) {
		t.Fatalf("Upload over the server's cap = %v; want core.ErrResourceExhausted", err)
	}
	if _, err := sc.c.Upload(ctx, "small.bin", bytes.NewReader(content[:100]), 99); !errors.Is(err, core.ErrResourceExhausted) {
		t.Fatalf("Upload over max_bytes = %v; want core.ErrResourceExhausted", err)
	}

	r, dfi, err := sc.c.Download(ctx, "data/in/x.bin")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, content[:1<<20]) || dfi.Size != 1<<20 {
		t.Fatalf("Download = %d bytes (info %+v), %v; want the %d uploaded", len(got), dfi, err, 1<<20)
	}
	if _, err := sc.c.Upload(ctx, "empty", bytes.NewReader(nil), 0); err != nil {
		t.Fatal(err)
	}
	r, _, err = sc.c.Download(ctx, "/workspace/empty")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(r); err != nil || len(got) != 0 {
		t.Fatalf("Download of an empty file = %q, %v", got, err)
	}
	r.Close()

	list, err := sc.c.ListFiles(ctx, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range list {
		names = append(names, f.Path)
	}
	if strings.Join(names, ",") != "data,empty" || !list[0].IsDir {
		t.Fatalf("ListFiles(\"\") = %v; want data (a directory), empty", names)
	}
	if list, err := sc.c.ListFiles(ctx, "/workspace/data/in/x.bin", 1); err != nil || len(list) != 1 || list[0].Size != 1<<20 {
		t.Fatalf("ListFiles of a file = %+v, %v", list, err)
	}
	if _, _, err := sc.c.Download(ctx, "missing"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("Download of a missing file = %v; want core.ErrNotFound", err)
	}
	if _, _, err := sc.c.Download(ctx, "data"); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("Download of a directory = %v; want core.ErrInvalidArgument", err)
	}
}

func TestPathEscapes(t *testing.T) {
	sc := startSidecar(t)
	ctx := ctxT(t)
	if err := os.Symlink("/etc", filepath.Join(sc.workspace, "etc")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"../x", "/etc/passwd", "a/../../x", "etc/passwd", "etc/x/y"} {
		if _, err := sc.c.Upload(ctx, p, strings.NewReader("x"), 0); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("Upload(%q) = %v; want core.ErrInvalidArgument", p, err)
		}
		if _, _, err := sc.c.Download(ctx, p); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("Download(%q) = %v; want core.ErrInvalidArgument", p, err)
		}
	}
	for _, p := range []string{"../", "etc", "/"} {
		if _, err := sc.c.ListFiles(ctx, p, 1); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("ListFiles(%q) = %v; want core.ErrInvalidArgument", p, err)
		}
	}
	if _, err := os.Stat("/etc/x"); err == nil {
		t.Fatal("an upload escaped to /etc/x")
	}
}
