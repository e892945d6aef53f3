package docker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/wswatch"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// watcher runs WatchDirectory in the background and collects its updates.
type watcher struct {
	t       *testing.T
	updates chan core.WatchUpdate
	done    chan error
	cancel  context.CancelFunc
}

func startWatch(t *testing.T, m *validated, id, p string, recursive bool) *watcher {
	t.Helper()
	w, err := tryWatch(t, t.Context(), m, id, p, recursive)
	if err != nil {
		t.Fatalf("WatchDirectory: %v", err)
	}
	return w
}

// tryWatch starts WatchDirectory as ctx's caller and waits until the watch
// is in place (then it ends with the test) or refused (its error).
func tryWatch(t *testing.T, ctx context.Context, m *validated, id, p string, recursive bool) (*watcher, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	w := &watcher{t: t, updates: make(chan core.WatchUpdate, 10000), done: make(chan error, 1), cancel: cancel}
	go func() {
		w.done <- m.WatchDirectory(ctx, id, p, recursive, func(u core.WatchUpdate) error {
			w.updates <- u
			return nil
		})
	}()
	select {
	case u := <-w.updates:
		if u.Event != nil {
			t.Fatalf("first update has an event: %+v", u.Event)
		}
	case err := <-w.done:
		cancel()
		return nil, err
	case <-time.After(10 * time.Second):
		t.Fatal("watch not ready")
	}
	t.Cleanup(func() { cancel(); <-w.done })
	return w, nil
}

// collect gathers events until quiet for 300ms (or 5s pass).
func (w *watcher) collect() (evs []core.WatchEvent, dropped uint64) {
	deadline := time.After(5 * time.Second)
	for {
		select {
		case u := <-w.updates:
			dropped += u.Dropped
			if u.Event != nil {
				evs = append(evs, *u.Event)
			}
		case <-time.After(300 * time.Millisecond):
			return evs, dropped
		case <-deadline:
			return evs, dropped
		}
	}
}

func has(evs []core.WatchEvent, op core.WatchOp, p string) bool {
	for _, e := range evs {
		if e.Op == op && e.Path == p {
			return true
		}
	}
	return false
}

func TestWatchDirectory(t *testing.T) {
	m, id, ws := fileOpsEnv(t)
	mustDo(t, os.Mkdir(filepath.Join(ws, "d"), 0o755))
	w := startWatch(t, m, id, "/workspace/d", false)

	p := filepath.Join(ws, "d", "f.txt")
	mustDo(t, os.WriteFile(p, []byte("1"), 0o644))
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	mustDo(t, err)
	for range 500 { // a loop of writes is coalesced
		f.Write([]byte("x"))
	}
	f.Close()
	time.Sleep(50 * time.Millisecond)
	mustDo(t, os.Rename(p, filepath.Join(ws, "d", "g.txt")))
	mustDo(t, os.Remove(filepath.Join(ws, "d", "g.txt")))
	mustDo(t, os.Mkdir(filepath.Join(ws, "d", "sub"), 0o755))
	mustDo(t, os.WriteFile(filepath.Join(ws, "d", "sub", "deep"), nil, 0o644)) // not recursive: unseen
	mustDo(t, os.WriteFile(filepath.Join(ws, "outside"), nil, 0o644))          // not under d: unseen

	evs, dropped := w.collect()
	writes := 0
	for _, e := range evs {
		if e.Op == core.WatchWrite {
			writes++
		}
		if strings.Contains(e.Path, "deep") || e.Path == "outside" || e.Time.IsZero() {
			t.Errorf("unexpected event %+v", e)
		}
	}
	for _, want := range []core.WatchEvent{{Op: core.WatchCreate, Path: "d/f.txt"}, {Op: core.WatchWrite, Path: "d/f.txt"}, {Op: core.WatchRename, Path: "d/f.txt"},
		{Op: core.WatchCreate, Path: "d/g.txt"}, {Op: core.WatchRemove, Path: "d/g.txt"}, {Op: core.WatchCreate, Path: "d/sub"}} {
		if !has(evs, want.Op, want.Path) {
			t.Errorf("no %v %s in %+v", want.Op, want.Path, evs)
		}
	}
	if writes == 0 || writes > 10 || dropped != 0 {
		t.Errorf("%d WRITE events for 501 writes (want coalesced), %d dropped", writes, dropped)
	}
}

func TestWatchDirectoryRecursive(t *testing.T) {
	m, id, ws := fileOpsEnv(t)
	mustDo(t, os.MkdirAll(filepath.Join(ws, "x/y"), 0o755))
	w := startWatch(t, m, id, "", true)

	mustDo(t, os.WriteFile(filepath.Join(ws, "x/y/old"), nil, 0o644))
	mustDo(t, os.MkdirAll(filepath.Join(ws, "a/b/c"), 0o755))
	time.Sleep(100 * time.Millisecond)
	mustDo(t, os.WriteFile(filepath.Join(ws, "a/b/c/new.txt"), []byte("hi"), 0o644))
	evs, _ := w.collect()
	for _, p := range []string{"x/y/old", "a", "a/b", "a/b/c", "a/b/c/new.txt"} {
		if !has(evs, core.WatchCreate, p) {
			t.Errorf("no CREATE %s in %+v", p, evs)
		}
	}
	// A watched directory moved away stops being reported under its old
	// name; under its new name it is watched again.
	mustDo(t, os.Rename(filepath.Join(ws, "a"), filepath.Join(ws, "a2")))
	time.Sleep(100 * time.Millisecond)
	mustDo(t, os.WriteFile(filepath.Join(ws, "a2/b/c/after"), nil, 0o644))
	evs, _ = w.collect()
	if !has(evs, core.WatchRename, "a") || !has(evs, core.WatchCreate, "a2") || !has(evs, core.WatchCreate, "a2/b/c/after") {
		t.Errorf("after rename: %+v", evs)
	}
	for _, e := range evs {
		if strings.HasPrefix(e.Path, "a/") {
			t.Errorf("event under the old name: %+v", e)
		}
	}
}

func TestWatchDirectoryConfined(t *testing.T) {
	m, id, ws := fileOpsEnv(t)
	host := t.TempDir()
	mustDo(t, os.Symlink(host, filepath.Join(ws, "hostdir")))
	ctx := t.Context()
	nop := func(core.WatchUpdate) error { return nil }
	for p, msg := range map[string]string{"hostdir": "escapes /workspace", "../x": "escapes /workspace", "/etc": "outside /workspace"} {
		wantClass(t, m.WatchDirectory(ctx, id, p, true, nop), core.ErrInvalidArgument, msg)
	}
	wantClass(t, m.WatchDirectory(ctx, id, "nope", true, nop), core.ErrNotFound, "/workspace/nope")
	mustDo(t, os.WriteFile(filepath.Join(ws, "file"), nil, 0o644))
	wantClass(t, m.WatchDirectory(ctx, id, "file", true, nop), core.ErrInvalidArgument, "not a directory")

	// A recursive watch neither follows the planted link nor a directory
	// replaced by a link to the host.
	mustDo(t, os.Mkdir(filepath.Join(ws, "d"), 0o755))
	w := startWatch(t, m, id, "", true)
	mustDo(t, os.Rename(filepath.Join(ws, "d"), filepath.Join(ws, "gone")))
	mustDo(t, os.Symlink(host, filepath.Join(ws, "d")))
	mustDo(t, os.Symlink(host, filepath.Join(ws, "gone", "link")))
	time.Sleep(100 * time.Millisecond)
	mustDo(t, os.WriteFile(filepath.Join(host, "secret"), []byte("s"), 0o644))
	mustDo(t, os.Mkdir(filepath.Join(host, "sub"), 0o755))
	evs, _ := w.collect()
	for _, e := range evs {
		if strings.Contains(e.Path, "secret") || strings.Contains(e.Path, "sub") {
			t.Errorf("event from outside the workspace: %+v", e)
		}
	}
	if !has(evs, core.WatchCreate, "d") || !has(evs, core.WatchCreate, "gone/link") {
		t.Errorf("events: %+v", evs)
	}
}

func TestWatchDirectoryBounds(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxWatchDirsPerCall, cfg.MaxWatchDirsPerSandbox = 5, 8
	m := newTestManager(t, cfg, newFakeDocker(testImage))
	id := acquire(t, m, "u").Sandbox.ID
	ws := filepath.Join(m.cfg.StateDir, "sandboxes", id, "workspace")
	ctx := t.Context()
	for i := range 3 {
		mustDo(t, os.MkdirAll(filepath.Join(ws, "t", fmt.Sprint(i)), 0o755))
	}
	nop := func(core.WatchUpdate) error { return nil }

	// Per call: t and 3 children are 4 directories; a 6th is too many.
	mustDo(t, os.MkdirAll(filepath.Join(ws, "big/1/2/3/4/5"), 0o755))
	wantClass(t, m.WatchDirectory(ctx, id, "big", true, nop), core.ErrResourceExhausted, "cap of 5 watched directories (sandboxd --max-watch-dirs-per-call)")
	w1 := startWatch(t, m, id, "t", true) // 4
	// A new subdirectory past the cap ends the stream.
	mustDo(t, os.Mkdir(filepath.Join(ws, "t", "3"), 0o755)) // 5: fine
	mustDo(t, os.Mkdir(filepath.Join(ws, "t", "4"), 0o755)) // 6: too many
	select {
	case err := <-w1.done:
		wantClass(t, err, core.ErrResourceExhausted, "cap of 5 watched directories (sandboxd --max-watch-dirs-per-call)")
		w1.done <- err // for the cleanup
	case <-time.After(5 * time.Second):
		t.Fatal("watch past its cap did not end")
	}
	if n, _, _ := m.watchDirs.InUse(id, core.DefaultTenant); n != 0 {
		t.Errorf("%d directories still counted after the watch ended", n)
	}
	// Per sandbox: two watches of 4 fill 8; a third is refused.
	mustDo(t, os.RemoveAll(filepath.Join(ws, "t", "4")))
	mustDo(t, os.RemoveAll(filepath.Join(ws, "t", "3")))
	startWatch(t, m, id, "t", true)
	startWatch(t, m, id, "t", true)
	wantClass(t, m.WatchDirectory(ctx, id, "", false, nop), core.ErrResourceExhausted,
		"sandbox "+id+" has reached its cap of 8 watched directories (sandboxd --max-watch-dirs-per-sandbox)")
}

// capsEnv is a Manager with cfg's caps on watches and, for each of
// acme's a1, a2, a3, beta's b1 and gamma's g1, a sandbox whose workspace
// holds tree/{a,b} (3 directories).
func capsEnv(t *testing.T, cfg Config) (m *validated, acme, beta, gamma context.Context, ids map[string]string) {
	m = newTestManager(t, cfg, newFakeDocker(testImage))
	acme, beta, gamma = as(t, "acme", false), as(t, "beta", false), as(t, "gamma", false)
	ids = map[string]string{}
	for user, ctx := range map[string]context.Context{"a1": acme, "a2": acme, "a3": acme, "b1": beta, "g1": gamma} {
		res, err := m.Acquire(ctx, user, core.Options{})
		mustDo(t, err)
		ws := filepath.Join(m.cfg.StateDir, "sandboxes", res.Sandbox.ID, "workspace")
		mustDo(t, os.MkdirAll(filepath.Join(ws, "tree", "a"), 0o755))
		mustDo(t, os.MkdirAll(filepath.Join(ws, "tree", "b"), 0o755))
		ids[user] = res.Sandbox.ID
	}
	return m, acme, beta, gamma, ids
}

// refusedWatch checks that a watch is refused with ErrResourceExhausted
// and a message naming msg.
func refusedWatch(t *testing.T, ctx context.Context, m *validated, id, p string, recursive bool, msg string) {
	t.Helper()
	_, err := tryWatch(t, ctx, m, id, p, recursive)
	wantClass(t, err, core.ErrResourceExhausted, msg)
}

// TestWatchCapsCalls: the caps on watches in progress hold per sandbox,
// then per tenant, then on the server, each refusal naming its cap, and an
// ended watch is given back.
func TestWatchCapsCalls(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxWatchesPerSandbox, cfg.MaxWatchesPerTenant, cfg.MaxWatches = 1, 2, 3
	m, acme, beta, gamma, id := capsEnv(t, cfg)

	wa1, err := tryWatch(t, acme, m, id["a1"], "", false)
	mustDo(t, err)
	refusedWatch(t, acme, m, id["a1"], "", false, "sandbox "+id["a1"]+" has reached its cap of 1 watches in progress (sandboxd --max-watches-per-sandbox)")
	_, err = tryWatch(t, acme, m, id["a2"], "", false)
	mustDo(t, err)
	refusedWatch(t, acme, m, id["a3"], "", false, "tenant acme has reached its cap of 2 watches in progress over all its sandboxes (sandboxd --max-watches-per-tenant)")
	_, err = tryWatch(t, beta, m, id["b1"], "", false) // acme at its cap does not block beta
	mustDo(t, err)
	refusedWatch(t, gamma, m, id["g1"], "", false, "the server has reached its cap of 3 watches in progress for all tenants together (sandboxd --max-watches)")
	wa1.cancel()
	wa1.done <- <-wa1.done
	_, err = tryWatch(t, gamma, m, id["g1"], "", false) // acme's ended watch was given back
	mustDo(t, err)
	if s, tn, all := m.watchCalls.InUse(id["a1"], "acme"); s != 0 || tn != 1 || all != 3 {
		t.Errorf("watches in progress: %d on a1, %d of acme, %d in all; want 0, 1, 3", s, tn, all)
	}
}

// TestWatchCapsDirs: the caps on watched directories hold per sandbox,
// then per tenant, then on the server, also part-way through a recursive
// watch, which then gives back what it took.
func TestWatchCapsDirs(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxWatchDirsPerCall, cfg.MaxWatchDirsPerSandbox, cfg.MaxWatchDirsPerTenant, cfg.MaxWatchDirs = 3, 3, 4, 6
	m, acme, beta, gamma, id := capsEnv(t, cfg)

	wa1, err := tryWatch(t, acme, m, id["a1"], "tree", true) // acme 3, server 3
	mustDo(t, err)
	refusedWatch(t, acme, m, id["a2"], "tree", true, "tenant acme has reached its cap of 4 watched directories over all its sandboxes (sandboxd --max-watch-dirs-per-tenant)")
	_, err = tryWatch(t, beta, m, id["b1"], "tree", true) // server 6
	mustDo(t, err)
	refusedWatch(t, beta, m, id["b1"], "", false, "sandbox "+id["b1"]+" has reached its cap of 3 watched directories (sandboxd --max-watch-dirs-per-sandbox)")
	refusedWatch(t, gamma, m, id["g1"], "", false, "the server has reached its cap of 6 watched directories for all tenants together (sandboxd --max-watch-dirs)")
	if s, tn, all := m.watchDirs.InUse(id["a2"], "acme"); s != 0 || tn != 3 || all != 6 {
		t.Errorf("watched directories: %d on a2, %d of acme, %d in all; want 0, 3, 6", s, tn, all)
	}
	wa1.cancel()
	wa1.done <- <-wa1.done
	_, err = tryWatch(t, gamma, m, id["g1"], "tree", true)
	mustDo(t, err)
	if s, tn, all := m.watchDirs.InUse(id["a1"], "acme"); s != 0 || tn != 0 || all != 6 {
		t.Errorf("watched directories: %d on a1, %d of acme, %d in all; want 0, 0, 6", s, tn, all)
	}
}

func TestWatchDirectoryDropsForSlowReader(t *testing.T) {
	m, id, ws := fileOpsEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	release := make(chan struct{})
	updates := make(chan core.WatchUpdate, 100000)
	done := make(chan error, 1)
	first := true
	go func() {
		done <- m.WatchDirectory(ctx, id, "", false, func(u core.WatchUpdate) error {
			updates <- u
			if first {
				first = false
				return nil
			}
			<-release
			return nil
		})
	}()
	<-updates
	for i := range 3 * wswatch.QueueLen {
		mustDo(t, os.WriteFile(filepath.Join(ws, fmt.Sprint("f", i)), nil, 0o644))
	}
	time.Sleep(500 * time.Millisecond)
	close(release)
	var events int
	var dropped uint64
	deadline := time.After(10 * time.Second)
loop:
	for {
		select {
		case u := <-updates:
			dropped += u.Dropped
			if u.Event != nil {
				events++
			}
		case <-time.After(500 * time.Millisecond):
			break loop
		case <-deadline:
			break loop
		}
	}
	if dropped == 0 || events > wswatch.QueueLen+2 {
		t.Errorf("%d events, %d dropped; want at most %d and some dropped", events, dropped, wswatch.QueueLen+1)
	}
}

func TestWatchDirectoryEndsWithSandbox(t *testing.T) {
	m, id, _ := fileOpsEnv(t)
	w := startWatch(t, m, id, "", true)
	mustDo(t, m.Delete(t.Context(), id))
	select {
	case err := <-w.done:
		wantClass(t, err, core.ErrNotFound, id)
		w.done <- err
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not end with the sandbox")
	}
}

func TestWatchDirectoryEndsWhenRemoved(t *testing.T) {
	for _, how := range []string{"remove", "rename"} {
		t.Run(how, func(t *testing.T) {
			m, id, ws := fileOpsEnv(t)
			mustDo(t, os.MkdirAll(filepath.Join(ws, "w", "sub"), 0o755))
			w := startWatch(t, m, id, "w", true)
			if how == "remove" {
				mustDo(t, os.RemoveAll(filepath.Join(ws, "w")))
			} else {
				mustDo(t, os.Rename(filepath.Join(ws, "w"), filepath.Join(ws, "w2")))
			}
			select {
			case err := <-w.done:
				wantClass(t, err, core.ErrNotFound, "watched directory was removed or moved")
				w.done <- err
			case <-time.After(5 * time.Second):
				t.Fatal("watch did not end when its directory went")
			}
			if n, _, _ := m.watchDirs.InUse(id, core.DefaultTenant); n != 0 {
				t.Errorf("%d directories still counted", n)
			}
		})
	}
}

// TestWatchTenantCannotTakeEveryWatch is issue 22's scenario, with the
// server's default caps: tenant acme opens watches on its own sandboxes
// until it is refused; the refusal names acme's own cap, and tenant beta
// can still watch.
func TestWatchTenantCannotTakeEveryWatch(t *testing.T) {
	m := newTestManager(t, testConfig(t), newFakeDocker(testImage))
	acme, beta := as(t, "acme", false), as(t, "beta", false)
	var mine []string
	for i := range 10 {
		res, err := m.Acquire(acme, fmt.Sprint("u", i), core.Options{})
		mustDo(t, err)
		mine = append(mine, res.Sandbox.ID)
	}
	theirs, err := m.Acquire(beta, "u0", core.Options{})
	mustDo(t, err)

	var refused error
	opened := 0
	for ; opened < 1000 && refused == nil; opened++ {
		_, refused = tryWatch(t, acme, m, mine[opened%len(mine)], "", false)
	}
	if refused == nil {
		t.Fatalf("tenant acme opened %d watches without being refused", opened)
	}
	if _, err := tryWatch(t, beta, m, theirs.Sandbox.ID, "", false); err != nil {
		t.Errorf("tenant beta cannot watch after acme opened %d watches: %v", opened-1, err)
	}
	wantClass(t, refused, core.ErrResourceExhausted, "tenant acme")
}
