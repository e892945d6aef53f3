package driver

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

// swapLink points link at target atomically (a rename over it), as the
// host's stacked mount makes /io and /workspace show another directory.
func swapLink(t *testing.T, target, link string) {
	t.Helper()
	tmp := link + ".new"
	if err := os.Symlink(target, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, link); err != nil {
		t.Fatal(err)
	}
}

// dirState is every file under dir with its size and modification time.
func dirState(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		out[p] = strconv.FormatInt(info.Size(), 10) + "@" + info.ModTime().String()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAdoption: a pool driver, its kernel warmed up, is adopted by a
// hibernated sandbox's /io and /workspace (here: the symlinks the driver
// was started on are swapped, as the host's stacked mounts swap what the
// paths show). It starts over on them with the same kernel process, in the
// new workspace, restores the sandbox's globals, runs no command twice,
// counts the next boot, and writes nothing more into the pool's /io. A
// forged adopt record (the sandbox appending one to its own log while its
// /io is its own) changes nothing.
func TestAdoption(t *testing.T) {
	base := t.TempDir()
	a, b := filepath.Join(base, "a"), filepath.Join(base, "b")
	for _, d := range []string{a + "/io", a + "/ws", b + "/io", b + "/ws"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	// B: a sandbox that ran a command and hibernated.
	hb := startDriverIn(t, b+"/io", b+"/ws")
	hb.submit("c1", "python", "x = 41\nopen('once.txt', 'a').write('run\\n')")
	if d := lastEvent(t, hb.wait("c1")); d.Status != ioproto.StatusOK {
		t.Fatalf("c1: %+v", d)
	}
	hb.record(ioproto.Record{Type: ioproto.KindSnapshot, CommandID: "hib-1", Snapshot: "snap-1"})
	if d := lastEvent(t, hb.wait("hib-1")); d.Status != ioproto.StatusOK || d.Snapshot.Level != ioproto.LevelGlobals {
		t.Fatalf("snapshot: %+v", d)
	}
	hb.stop()

	// The pool driver, started on links that show A.
	ioLink, wsLink := filepath.Join(base, "io"), filepath.Join(base, "ws")
	swapLink(t, a+"/io", ioLink)
	swapLink(t, a+"/ws", wsLink)
	if f, err := os.Create(filepath.Join(a, "io", ioproto.StdinFile)); err != nil {
		t.Fatal(err)
	} else {
		f.Close()
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- Serve(ctx, Config{IODir: ioLink, Workspace: wsLink, Wake: "inotify", MaxOutput: 16 << 20, Pool: true,
			Logger: slog.New(slog.NewTextHandler(io2testLog{t}, nil))})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Serve did not return within 30s of its context's end")
		}
	})
	ha := &driverHarness{t: t, io: ioLink, ws: wsLink}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(a, "io", ioproto.DriverStatusFile)); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the pool driver wrote no driver.json within 30s")
		}
	}
	ha.submit("sandboxd-pool-warmup", "python", "import json as _j\ndel _j")
	if d := lastEvent(t, ha.wait("sandboxd-pool-warmup")); d.Status != ioproto.StatusOK {
		t.Fatalf("warm-up: %+v", d)
	}
	// A forged adopt record: /io is still A, so it is ignored.
	ha.record(ioproto.Record{Type: ioproto.KindAdopt, CommandID: "forged"})
	ha.submit("pid", "python", "import os\nprint(os.getpid())\ndel os")
	evs := ha.wait("pid")
	pid := strings.TrimSpace(stdoutOf(evs))
	if lastEvent(t, evs).Status != ioproto.StatusOK || pid == "" {
		t.Fatalf("after a forged adopt record the pool driver should run on: %+v", evs)
	}

	// The host's adoption: the paths show B, the adopt record goes into A's
	// log through the file, not the path.
	before := dirState(t, a+"/io")
	swapLink(t, b+"/io", ioLink)
	swapLink(t, b+"/ws", wsLink)
	line, err := ioproto.EncodeRecord(ioproto.Record{Type: ioproto.KindAdopt, CommandID: "sbx-adopt-1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ioproto.AppendLine(filepath.Join(a, "io", ioproto.StdinFile), line); err != nil {
		t.Fatal(err)
	}
	before[filepath.Join(a, "io", ioproto.StdinFile)] = ""
	c1Before := dirState(t, b+"/io/out")

	hb = &driverHarness{t: t, io: ioLink, ws: wsLink}
	hb.record(ioproto.Record{Type: ioproto.KindRestore, CommandID: "wake-1", Snapshot: "snap-1", Level: ioproto.LevelGlobals})
	if d := lastEvent(t, hb.wait("wake-1")); d.Status != ioproto.StatusOK || d.Snapshot == nil || d.Snapshot.Level != ioproto.LevelGlobals || !slices.Contains(d.Snapshot.Names, "x") {
		t.Fatalf("restore after the adoption: %+v", d)
	}
	hb.submit("c2", "python", "import os\nprint(x + 1, os.getpid(), os.getcwd())")
	evs = hb.wait("c2")
	wantCwd, _ := filepath.EvalSymlinks(b + "/ws")
	if got, want := stdoutOf(evs), "42 "+pid+" "+wantCwd+"\n"; got != want || lastEvent(t, evs).StateLost {
		t.Fatalf("after the adoption: %q (done %+v); want %q: globals restored into the same kernel process, in B's workspace", got, lastEvent(t, evs), want)
	}
	if w := evs[0].Wake; w == nil || w.Level != ioproto.LevelGlobals {
		t.Errorf("the first command after the adoption reports wake %+v; want level globals", w)
	}
	// c1 again: B's log has it, so it does not run a second time.
	hb.submit("c1", "python", "open('once.txt', 'a').write('again\\n')")
	hb.submit("c3", "python", "print(open('once.txt').read(), end='')")
	if out := stdoutOf(hb.wait("c3")); out != "run\n" {
		t.Fatalf("once.txt holds %q: a command ran twice across the adoption", out)
	}
	var st ioproto.DriverStatus
	if err := ioproto.ReadJSONFile(filepath.Join(b, "io", ioproto.DriverStatusFile), &st); err != nil || st.Boot != 2 || strconv.Itoa(st.KernelPID) != pid {
		t.Errorf("B's driver.json: %+v, %v; want boot 2 with kernel %s", st, err, pid)
	}
	after := dirState(t, a+"/io")
	after[filepath.Join(a, "io", ioproto.StdinFile)] = ""
	for p, v := range after {
		if before[p] != v {
			t.Errorf("the pool's /io changed after the adoption: %s (%s, was %s)", p, v, before[p])
		}
	}
	for p, v := range c1Before {
		if strings.Contains(p, "c1.") && dirState(t, b+"/io/out")[p] != v {
			t.Errorf("c1's events changed: %s", p)
		}
	}
}

// TestAdoptionNotAPoolDriver: a driver not started as a pool driver ignores
// an adopt record even when /io shows another directory.
func TestAdoptionNotAPoolDriver(t *testing.T) {
	h := startDriverIn(t, t.TempDir(), t.TempDir())
	h.submit("c1", "python", "y = 1")
	h.wait("c1")
	h.record(ioproto.Record{Type: ioproto.KindAdopt, CommandID: "adopt-1"})
	h.submit("c2", "python", "print(y)")
	if evs := h.wait("c2"); stdoutOf(evs) != "1\n" {
		t.Fatalf("after an adopt record a plain driver should run on with its globals: %+v", evs)
	}
}
