package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/durable"
	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/backend/kube/iosidecar"
	"github.com/sandboxd/sandboxd/orchestrator/core"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The backend's steps of snapshots and forks, with hibSidecars whose
// Export and Import move a stand-in archive (the real archive and its
// hostile cases are wsarchive's and iosidecar's tests; the real thing,
// end to end, is e2e's).

// snapSidecar is a hibSidecar with a workspace: Export sends it, Import
// replaces it.
type snapSidecar struct {
	*hibSidecar
	env *snapEnv
}

type snapEnv struct {
	*hibEnv
	// workspaces are the stand-in archives, by sidecar address; imports
	// record (address, globals name).
	workspaces map[string][]byte
	imports    []string
	// exportErr ends an Export after a first chunk, as the client does
	// when a sidecar sends past the bound.
	exportErr error
}

func (s *snapSidecar) Export(_ context.Context, globals string, maxBytes int64, w io.Writer) (iosidecar.ArchiveStats, error) {
	s.env.mu.Lock()
	ws := append([]byte("globals="+globals+";"), s.env.workspaces[s.pod]...)
	fail := s.env.exportErr
	s.env.mu.Unlock()
	n, err := w.Write(ws)
	if fail != nil {
		return iosidecar.ArchiveStats{}, fail
	}
	return iosidecar.ArchiveStats{Bytes: int64(n), Skipped: []string{"fifo: a FIFO"}, SkippedCount: 1}, err
}

func (s *snapSidecar) Import(_ context.Context, globals string, r io.Reader, _ int64) (iosidecar.ArchiveStats, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return iosidecar.ArchiveStats{}, err
	}
	s.env.mu.Lock()
	s.env.workspaces[s.pod] = b
	s.env.imports = append(s.env.imports, s.pod+" "+globals)
	s.env.mu.Unlock()
	return iosidecar.ArchiveStats{Bytes: int64(len(b))}, nil
}

func newSnapEnv(t *testing.T, with ...func(*Config)) *snapEnv {
	t.Helper()
	dir := t.TempDir()
	se := &snapEnv{workspaces: map[string][]byte{}}
	with = append(with, func(c *Config) {
		c.SnapshotDir = dir
		c.DialIO = func(_ context.Context, addr, _ string) (IOConn, error) {
			return &snapSidecar{hibSidecar: &hibSidecar{env: se.hibEnv, pod: addr}, env: se}, nil
		}
	})
	se.hibEnv = newHibEnv(t, with...)
	return se
}

func (e *snapEnv) sidecarOf(t *testing.T, id string) string {
	t.Helper()
	p := e.pod(t, id)
	return fmt.Sprintf("%s:%d", p.Status.PodIP, e.m.cfg.IOPort)
}

// TestSnapshotAndStartFrom: a named snapshot runs one live snapshot record
// (the log is not sealed), stores the sidecar's archive, and is listed to
// its tenant only; a name is its tenant's once; a sandbox started from it
// gets the archive and the globals' file name of one restore record
// before its Acquire returns, woken at level globals without a "woken"
// event; a deleted snapshot starts nothing.
func TestSnapshotAndStartFrom(t *testing.T) {
	events := &eventCounter{}
	e := newSnapEnv(t, func(c *Config) { c.Lifecycle = events })
	ctx := core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
	r, err := e.m.Acquire(ctx, "alice", core.Options{Limits: e.m.cfg.DefaultLimits})
	if err != nil {
		t.Fatal(err)
	}
	src := r.Sandbox.ID
	e.mu.Lock()
	e.workspaces[e.sidecarOf(t, src)] = []byte("the workspace")
	e.mu.Unlock()

	snap, err := e.m.CreateSnapshot(ctx, src, "first")
	if err != nil {
		t.Fatalf("CreateSnapshot: %v", err)
	}
	if snap.Level != ioproto.LevelGlobals || snap.Tenant != "acme" || snap.SandboxID != src || snap.Name != "first" || !core.IsSnapshotID(snap.ID) ||
		!strings.Contains(snap.Reason, "not kept from /workspace (1): fifo: a FIFO") {
		t.Fatalf("snapshot %+v", snap)
	}
	recs := e.records()
	if len(recs) != 1 || recs[0].rec.Type != ioproto.KindSnapshot || !recs[0].rec.Live || !strings.HasPrefix(recs[0].rec.Snapshot, "named-") {
		t.Fatalf("records sent %+v; want one live snapshot record", recs)
	}
	archive, err := os.ReadFile(filepath.Join(e.m.cfg.SnapshotDir, snap.ID, snapArchiveFile))
	if want := "globals=" + recs[0].rec.Snapshot + ";the workspace"; err != nil || string(archive) != want || snap.Bytes != int64(len(want)) {
		t.Fatalf("stored archive %q (%d bytes recorded), %v; want %q", archive, snap.Bytes, err, want)
	}
	if _, err := e.m.CreateSnapshot(ctx, src, "first"); !errors.Is(err, core.ErrAlreadyExists) {
		t.Fatalf("a second snapshot named first: %v; want ErrAlreadyExists", err)
	}
	other := core.WithCaller(t.Context(), core.Caller{Tenant: "beta"})
	if list, err := e.m.ListSnapshots(other, core.SnapshotFilter{}); err != nil || len(list) != 0 {
		t.Fatalf("another tenant lists %+v, %v; want none", list, err)
	}
	if list, err := e.m.ListSnapshots(ctx, core.SnapshotFilter{SandboxID: src}); err != nil || len(list) != 1 || list[0].ID != snap.ID {
		t.Fatalf("ListSnapshots = %+v, %v; want the one", list, err)
	}
	if _, err := e.m.Acquire(other, "eve", core.Options{Limits: e.m.cfg.DefaultLimits, FromSnapshot: snap.ID}); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("another tenant starts from it: %v; want not found", err)
	}

	r, err = e.m.Acquire(ctx, "bob", core.Options{Limits: e.m.cfg.DefaultLimits, FromSnapshot: "first"})
	if err != nil {
		t.Fatalf("Acquire from the snapshot: %v", err)
	}
	if !r.Created || r.Woke == nil || r.Woke.Level != ioproto.LevelGlobals {
		t.Fatalf("Acquire from the snapshot = %+v (woke %+v); want a new sandbox, its globals restored", r, r.Woke)
	}
	addr := e.sidecarOf(t, r.Sandbox.ID)
	e.mu.Lock()
	got, imports := string(e.workspaces[addr]), append([]string(nil), e.imports...)
	e.mu.Unlock()
	if got != string(archive) || len(imports) != 1 || !strings.HasPrefix(imports[0], addr+" from-") {
		t.Fatalf("the new sandbox's sidecar got %q (imports %v); want the archive, with a from- globals file", got, imports)
	}
	recs = e.records()
	last := recs[len(recs)-1]
	if last.pod != addr || last.rec.Type != ioproto.KindRestore || last.rec.Level != ioproto.LevelGlobals || last.rec.Snapshot != strings.TrimPrefix(imports[0], addr+" ") {
		t.Fatalf("last record %+v; want the restore of the imported globals in the new sandbox", last)
	}
	if p := e.pod(t, r.Sandbox.ID); p.Annotations[annWaking] != "" {
		t.Fatalf("the new sandbox still carries its start: %q", p.Annotations[annWaking])
	}
	if n := events.count(core.LifecycleWoken); n != 0 {
		t.Fatalf("%d woken events for a start from a snapshot; want none", n)
	}

	if err := e.m.DeleteSnapshot(ctx, "first"); err != nil {
		t.Fatalf("DeleteSnapshot: %v", err)
	}
	if _, err := os.Stat(filepath.Join(e.m.cfg.SnapshotDir, snap.ID)); !os.IsNotExist(err) {
		t.Fatalf("the deleted snapshot's directory: %v; want it gone", err)
	}
	if _, err := e.m.Acquire(ctx, "carol", core.Options{Limits: e.m.cfg.DefaultLimits, FromSnapshot: snap.ID}); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("a start from a deleted snapshot: %v; want not found", err)
	}
	// The name is free again.
	if _, err := e.m.CreateSnapshot(ctx, src, "first"); err != nil {
		t.Fatalf("a snapshot named as a deleted one: %v", err)
	}
}

// TestForkKube: a fork of two makes two sandboxes from one hidden
// snapshot, each with the source's archive; the snapshot is gone after,
// and a user who has a sandbox gets none.
func TestForkKube(t *testing.T) {
	e := newSnapEnv(t)
	ctx := core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
	r, err := e.m.Acquire(ctx, "alice", core.Options{Limits: e.m.cfg.DefaultLimits})
	if err != nil {
		t.Fatal(err)
	}
	src := r.Sandbox.ID
	e.mu.Lock()
	e.workspaces[e.sidecarOf(t, src)] = []byte("ws")
	e.mu.Unlock()
	res, err := e.m.Fork(ctx, src, core.ForkRequest{Count: 3, UserIDs: []string{"f1", "f2", "alice"}})
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	for i, fr := range res[:2] {
		if fr.Err != nil || fr.Sandbox.ID == "" || fr.Sandbox.ID == src || fr.Woke == nil || fr.Woke.Level != ioproto.LevelGlobals {
			t.Fatalf("fork %d: %+v", i, fr)
		}
		e.mu.Lock()
		ws := string(e.workspaces[e.sidecarOf(t, fr.Sandbox.ID)])
		e.mu.Unlock()
		if !strings.HasSuffix(ws, ";ws") {
			t.Fatalf("fork %d's workspace %q; want the source's", i, ws)
		}
	}
	if !errors.Is(res[2].Err, core.ErrAlreadyExists) {
		t.Fatalf("a fork for alice, who has a sandbox: %+v; want ErrAlreadyExists", res[2])
	}
	ents, err := os.ReadDir(e.m.cfg.SnapshotDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ents {
		if d.Name() != snapNamesDir {
			t.Fatalf("the snapshot directory keeps %s after the fork; want the fork's snapshot gone", d.Name())
		}
	}
}

// TestSnapshotFailedExportLeavesNothing: an export that fails (here, as
// the client fails one past its bound) fails the snapshot with the
// sidecar's class, and leaves neither a directory nor the name reserved.
func TestSnapshotFailedExportLeavesNothing(t *testing.T) {
	e := newSnapEnv(t)
	ctx := core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
	r, err := e.m.Acquire(ctx, "alice", core.Options{Limits: e.m.cfg.DefaultLimits})
	if err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	e.exportErr = core.Errorf(core.ErrResourceExhausted, "the archive passed its bound")
	e.mu.Unlock()
	if _, err := e.m.CreateSnapshot(ctx, r.Sandbox.ID, "big"); !errors.Is(err, core.ErrResourceExhausted) {
		t.Fatalf("CreateSnapshot of an oversized archive: %v; want ErrResourceExhausted", err)
	}
	ents, _ := os.ReadDir(e.m.cfg.SnapshotDir)
	for _, d := range ents {
		if d.Name() != snapNamesDir {
			t.Fatalf("the refused snapshot left %s", d.Name())
		}
	}
	if names, _ := os.ReadDir(filepath.Join(e.m.cfg.SnapshotDir, snapNamesDir)); len(names) != 0 {
		t.Fatalf("the refused snapshot's name stays reserved (%d files)", len(names))
	}
}

// TestBoundedWriter: the store stops at its bound, whatever the sidecar
// sends.
func TestBoundedWriter(t *testing.T) {
	var buf strings.Builder
	w := &boundedWriter{w: &buf, left: 10}
	if n, err := w.Write([]byte("12345678")); n != 8 || err != nil {
		t.Fatalf("a write within the bound: %d, %v", n, err)
	}
	if _, err := w.Write([]byte("abc")); !errors.Is(err, core.ErrResourceExhausted) || buf.String() != "12345678" || w.n != 8 {
		t.Fatalf("a write past the bound: %v (kept %q, counted %d); want ErrResourceExhausted, nothing more kept", err, buf.String(), w.n)
	}
}

// TestSnapshotsNeedADirectory: without Config.SnapshotDir every snapshot
// call, and a start from one, fails naming what is missing.
func TestSnapshotsNeedADirectory(t *testing.T) {
	e := newHibEnv(t)
	ctx := core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
	for name, err := range map[string]error{
		"list":   func() error { _, err := e.m.ListSnapshots(ctx, core.SnapshotFilter{}); return err }(),
		"delete": e.m.DeleteSnapshot(ctx, "x"),
		"start":  func() error { _, err := e.m.Acquire(ctx, "u", core.Options{FromSnapshot: "x"}); return err }(),
	} {
		if !errors.Is(err, core.ErrNotImplemented) || !strings.Contains(err.Error(), "--kube-snapshot-dir") {
			t.Errorf("%s without a snapshot directory: %v; want UNIMPLEMENTED naming --kube-snapshot-dir", name, err)
		}
	}
}

// TestSnapshotSweep: the leader's sweep removes what crashed replicas left
// (old .tmp- directories, old snapshot directories without a record, old
// hidden snapshots) and nothing else.
func TestSnapshotSweep(t *testing.T) {
	dir := t.TempDir()
	s := &snapStore{dir: dir}
	old := time.Now().Add(-snapStaleAfter - time.Minute)
	mk := func(name string, rec *snapRecord, mtime time.Time) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if rec != nil {
			rec.ID = name
			if err := durable.WriteFile(filepath.Join(p, snapRecordFile), mustJSON(t, rec)); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	ids := make([]string, 5)
	for i := range ids {
		ids[i] = core.NewSnapshotID()
	}
	mk(snapTmpPrefix+ids[0], nil, old)                               // removed
	mk(snapTmpPrefix+ids[1], nil, time.Now())                        // being taken: kept
	mk(ids[2], nil, old)                                             // no record: removed
	mk(ids[3], &snapRecord{Hidden: true}, old)                       // a crashed fork's: removed
	mk(ids[4], &snapRecord{Snapshot: core.Snapshot{Name: "n"}}, old) // named: kept
	n, err := s.sweep(time.Now())
	if err != nil || n != 3 {
		t.Fatalf("sweep removed %d, %v; want 3", n, err)
	}
	var left []string
	ents, _ := os.ReadDir(dir)
	for _, d := range ents {
		left = append(left, d.Name())
	}
	if want := []string{snapTmpPrefix + ids[1], ids[4]}; !sameSet(left, want) {
		t.Fatalf("left %v; want %v", left, want)
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]bool{}
	for _, s := range a {
		seen[s] = true
	}
	for _, s := range b {
		if !seen[s] {
			return false
		}
	}
	return true
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSnapshotBudget: past the per-tenant budget (--snapshot-disk-budget-
// per-tenant) a snapshot is refused naming the flag and leaves nothing;
// another tenant's snapshots do not count against it.
func TestSnapshotBudget(t *testing.T) {
	e := newSnapEnv(t, func(c *Config) { c.SnapshotBudget = core.SnapshotBudget{PerTenant: 100} })
	acme := core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
	beta := core.WithCaller(t.Context(), core.Caller{Tenant: "beta"})
	var ids []string
	for _, ctx := range []context.Context{acme, beta} {
		r, err := e.m.Acquire(ctx, "alice", core.Options{Limits: e.m.cfg.DefaultLimits})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.Sandbox.ID)
		e.mu.Lock()
		e.workspaces[e.sidecarOf(t, r.Sandbox.ID)] = []byte(strings.Repeat("w", 30))
		e.mu.Unlock()
	}
	// Each archive is 30 bytes of workspace and the globals' name: about
	// 60. The first of each tenant fits; acme's second does not.
	for i, tc := range []struct {
		ctx context.Context
		id  string
		ok  bool
	}{{acme, ids[0], true}, {beta, ids[1], true}, {acme, ids[0], false}} {
		_, err := e.m.CreateSnapshot(tc.ctx, tc.id, "")
		switch {
		case tc.ok && err != nil:
			t.Fatalf("snapshot %d: %v; want it within the budget", i, err)
		case !tc.ok && (!errors.Is(err, core.ErrResourceExhausted) || !strings.Contains(err.Error(), "--snapshot-disk-budget-per-tenant")):
			t.Fatalf("snapshot %d: %v; want RESOURCE_EXHAUSTED naming the flag", i, err)
		}
	}
	if list, err := e.m.ListSnapshots(acme, core.SnapshotFilter{}); err != nil || len(list) != 1 {
		t.Fatalf("acme's snapshots after the refusal: %+v, %v; want the first only", list, err)
	}
}

// TestStartFromSnapshotTakesAPoolPod: a start from a snapshot of the
// server's image claims a warm-pool Pod (its start carried on the claim's
// update) and restores into it; one of another image starts cold in that
// image.
func TestStartFromSnapshotTakesAPoolPod(t *testing.T) {
	counted := &countingMetrics{}
	e := newSnapEnv(t, func(c *Config) { c.WarmPool = 1; c.Metrics = counted })
	ctx := core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
	awaitPool := func() {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for len(e.m.readyPool()) == 0 {
			if time.Now().After(deadline) {
				ps, err := e.cs.CoreV1().Pods(e.ns).List(t.Context(), metav1.ListOptions{})
				for _, p := range ps.Items {
					t.Logf("pod %s labels %v phase %s conditions %v", p.Name, p.Labels, p.Status.Phase, p.Status.Conditions)
				}
				t.Fatalf("no ready pool pod within 30 s (leader %v, %v)", e.m.Reporting(), err)
			}
			select {
			case <-e.m.changed():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	awaitPool()
	r, err := e.m.Acquire(ctx, "alice", core.Options{Limits: e.m.cfg.DefaultLimits})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := e.m.CreateSnapshot(ctx, r.Sandbox.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	awaitPool()
	pooled := e.m.readyPool()[0].Labels[labelSandboxID]
	r, err = e.m.Acquire(ctx, "bob", core.Options{Limits: e.m.cfg.DefaultLimits, FromSnapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	if r.Sandbox.ID != pooled || r.Woke == nil || r.Woke.Level != ioproto.LevelGlobals {
		t.Fatalf("start from a snapshot: sandbox %s (woke %+v); want pool pod %s, restored", r.Sandbox.ID, r.Woke, pooled)
	}
	e.mu.Lock()
	imports := append([]string(nil), e.imports...)
	e.mu.Unlock()
	if len(imports) != 1 || !strings.HasPrefix(imports[0], e.sidecarOf(t, pooled)+" ") {
		t.Fatalf("imports %v; want one, into the pool pod", imports)
	}

	e.m.cfg.Image = "sandbox:newer" // the snapshot's image is now not the server's
	awaitPool()
	r, err = e.m.Acquire(ctx, "carol", core.Options{Limits: e.m.cfg.DefaultLimits, FromSnapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	if img := imageOf(e.pod(t, r.Sandbox.ID)); img != "sandbox:test" || r.Woke == nil || r.Woke.Level != ioproto.LevelGlobals {
		t.Fatalf("start from an older image's snapshot: image %s (woke %+v); want sandbox:test, restored", img, r.Woke)
	}
	counted.mu.Lock()
	defer counted.mu.Unlock()
	if counted.acquired[core.AcquireWarmPool] != 2 || counted.acquired[core.AcquireCold] != 1 {
		t.Fatalf("acquires %v; want alice and bob from the pool, carol cold", counted.acquired)
	}
}

// A name reservation is renewed while its snapshot is taken, so another
// replica refuses the name; one a crashed replica left stops being
// renewed and is taken over after snapReserveStale (by the directory's
// clock), not after an hour; release stops the renewal and frees the name.
func TestSnapshotNameReservations(t *testing.T) {
	s := &snapStore{dir: t.TempDir()}
	warn := func(string, error) {}
	release, err := s.reserveName("acme", "n", warn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.reserveName("acme", "n", warn); !errors.Is(err, core.ErrAlreadyExists) || !strings.Contains(err.Error(), "is being taken") {
		t.Fatalf("a second reservation of a name being taken: %v; want ALREADY_EXISTS", err)
	}
	if r, err := s.reserveName("other", "n", warn); err != nil {
		t.Fatalf("another tenant's name: %v", err)
	} else {
		r()
	}
	names := filepath.Join(s.dir, snapNamesDir)
	ents, err := os.ReadDir(names)
	if err != nil || len(ents) != 1 {
		t.Fatalf("reservations %v, %v; want one", ents, err)
	}
	p := filepath.Join(names, ents[0].Name())
	release()
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("the released reservation is still there: %v", err)
	}

	// Renewal moves the time forward.
	mustWrite := func(mtime time.Time) {
		t.Helper()
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(time.Now().Add(-time.Hour))
	stop := renewReservation(p, 10*time.Millisecond)
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := os.Stat(p)
		if err == nil && time.Since(st.ModTime()) < time.Minute {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reservation was not renewed within 10 s: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("release left the reservation: %v", err)
	}

	// A crashed replica's: fresh enough, still refused; unrenewed past
	// snapReserveStale, taken over.
	mustWrite(time.Now().Add(-snapReserveStale / 2))
	if _, err := s.reserveName("acme", "n", warn); !errors.Is(err, core.ErrAlreadyExists) {
		t.Fatalf("a reservation renewed %v ago: %v; want it still held", snapReserveStale/2, err)
	}
	mustWrite(time.Now().Add(-snapReserveStale - time.Minute))
	release, err = s.reserveName("acme", "n", warn)
	if err != nil {
		t.Fatalf("a reservation unrenewed for %v: %v; want it taken over", snapReserveStale+time.Minute, err)
	}
	release()
	if ents, _ := os.ReadDir(names); len(ents) != 0 {
		t.Errorf("left in %s: %v (probe files included)", names, ents)
	}
}
