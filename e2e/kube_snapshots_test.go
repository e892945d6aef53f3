package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// Named snapshots and forks on the kubernetes backend
// (orchestrator/backend/kube/snapshots.go), with two replicas sharing one
// --kube-snapshot-dir, as replicas share a ReadWriteMany volume: a
// snapshot taken through one replica is listed, started and deleted
// through the other; the new sandbox has the source's globals and files,
// symbolic links kept as links (never followed) and a FIFO left out
// (named in the reason: the copy does not block on it); the source keeps
// running and takes commands at once (its log is not sealed); a fork of
// two gives two independent sandboxes.
func kubeSnapshots(t *testing.T, k *kubeEnv) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := "--kube-snapshot-dir=" + t.TempDir()
	a, b := k.replica(t, "snap-a", dir), k.replica(t, "snap-b", dir)
	ca, _ := a.client(t)
	cb, _ := b.client(t)

	src := acquire(t, ctx, ca, "snap-src").GetSandbox().GetSandboxId()
	defer deleteQuietly(ca, src)
	mustOK(t, execute(t, ctx, ca, &sandboxv1.ExecuteRequest{SandboxId: src, Code: strings.Join([]string{
		"import os",
		"x = 41",
		"os.makedirs('/workspace/sub/deeper', exist_ok=True)",
		"open('/workspace/sub/deeper/notes.txt', 'w').write('kept')",
		"open('/workspace/big.bin', 'wb').write(bytes(range(256)) * 8192)",
		"os.symlink('/etc/passwd', '/workspace/passwd-link')",
		"os.mkfifo('/workspace/fifo')",
	}, "\n")}), "the source's state")

	snap, err := ca.CreateSnapshot(ctx, &sandboxv1.CreateSnapshotRequest{SandboxId: src, Name: "kube-snap"})
	if err != nil {
		t.Fatalf("CreateSnapshot through replica A: %v", err)
	}
	s := snap.GetSnapshot()
	if s.GetLevel() != "globals" || !strings.Contains(s.GetReason(), "fifo") || s.GetSizeBytes() < 2<<20 {
		t.Fatalf("snapshot %v; want level globals, the FIFO named as left out, the 2 MiB file counted", s)
	}
	// The source was not sealed: it takes a command at once.
	if o := execute(t, ctx, ca, &sandboxv1.ExecuteRequest{SandboxId: src, Code: "x + 1"}); len(o.results) != 1 || o.results[0]["text/plain"] != "42" {
		t.Fatalf("the source after its snapshot: %v %v; want 42", o.results, o.errs)
	}
	if _, err := ca.CreateSnapshot(ctx, &sandboxv1.CreateSnapshotRequest{SandboxId: src, Name: "kube-snap"}); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("a second snapshot of the name: %v; want ALREADY_EXISTS", err)
	}
	list, err := cb.ListSnapshots(ctx, &sandboxv1.ListSnapshotsRequest{SandboxId: src})
	if err != nil || len(list.GetSnapshots()) != 1 || list.GetSnapshots()[0].GetSnapshotId() != s.GetSnapshotId() {
		t.Fatalf("ListSnapshots through replica B: %v, %v; want the one", list.GetSnapshots(), err)
	}

	r, err := cb.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: "snap-copy", Options: &sandboxv1.SandboxOptions{FromSnapshot: "kube-snap"}})
	if err != nil {
		t.Fatalf("AcquireSandbox from the snapshot through replica B: %v", err)
	}
	cp := r.GetSandbox().GetSandboxId()
	defer deleteQuietly(cb, cp)
	if !r.GetCreated() || r.GetWoke().GetLevel() != "globals" || !slices.Contains(r.GetWoke().GetRestoredNames(), "x") {
		t.Fatalf("acquire from the snapshot: created %v, woke %v; want a new sandbox with x restored", r.GetCreated(), r.GetWoke())
	}
	o := execute(t, ctx, cb, &sandboxv1.ExecuteRequest{SandboxId: cp, Code: strings.Join([]string{
		"import os, hashlib",
		"print(x, open('/workspace/sub/deeper/notes.txt').read(), os.readlink('/workspace/passwd-link'),",
		"      hashlib.sha256(open('/workspace/big.bin', 'rb').read()).hexdigest()[:12] == hashlib.sha256(bytes(range(256)) * 8192).hexdigest()[:12],",
		"      os.path.exists('/workspace/fifo'), os.stat('/workspace/sub/deeper/notes.txt').st_uid)",
	}, "\n")})
	if want := "41 kept /etc/passwd True False 1000\n"; o.stdout != want {
		t.Fatalf("the sandbox from the snapshot prints %q (%v); want %q", o.stdout, o.errs, want)
	}

	forks, err := cb.ForkSandbox(ctx, &sandboxv1.ForkSandboxRequest{SandboxId: src, Count: 2})
	if err != nil {
		t.Fatalf("ForkSandbox through replica B: %v", err)
	}
	var ids []string
	for i, f := range forks.GetResults() {
		if f.GetErrorCode() != 0 || f.GetWoke().GetLevel() != "globals" {
			t.Fatalf("fork %d: %v", i, f)
		}
		ids = append(ids, f.GetSandbox().GetSandboxId())
		defer deleteQuietly(cb, f.GetSandbox().GetSandboxId())
	}
	if len(ids) != 2 {
		t.Fatalf("%d forks; want 2", len(ids))
	}
	mustOK(t, execute(t, ctx, cb, &sandboxv1.ExecuteRequest{SandboxId: ids[0], Code: "x = 'a'\nopen('/workspace/sub/deeper/notes.txt', 'w').write('a')"}), "change fork 0")
	for _, c := range []struct{ id, want string }{{ids[0], "a a"}, {ids[1], "41 kept"}, {src, "41 kept"}} {
		o := execute(t, ctx, ca, &sandboxv1.ExecuteRequest{SandboxId: c.id, Code: "print(x, open('/workspace/sub/deeper/notes.txt').read())"})
		if strings.TrimSpace(o.stdout) != c.want {
			t.Errorf("sandbox %s prints %q; want %q (forks are independent)", c.id, o.stdout, c.want)
		}
	}
	if list, err := ca.ListSnapshots(ctx, &sandboxv1.ListSnapshotsRequest{}); err != nil || len(list.GetSnapshots()) != 1 {
		t.Fatalf("snapshots after the fork: %v, %v; want only the named one (the fork's is deleted)", list.GetSnapshots(), err)
	}

	if _, err := cb.DeleteSnapshot(ctx, &sandboxv1.DeleteSnapshotRequest{Snapshot: "kube-snap"}); err != nil {
		t.Fatalf("DeleteSnapshot through replica B: %v", err)
	}
	if _, err := ca.AcquireSandbox(ctx, &sandboxv1.AcquireSandboxRequest{UserId: "snap-late", Options: &sandboxv1.SandboxOptions{FromSnapshot: "kube-snap"}}); status.Code(err) != codes.NotFound {
		t.Fatalf("a start from the deleted snapshot: %v; want NOT_FOUND", err)
	}
}
