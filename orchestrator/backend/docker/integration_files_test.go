package docker

import (
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// TestIntegrationFilesAPI runs the workspace file calls against a real
// sandbox: a watch sees what a command inside it does, and the directories
// MakeDirectory creates are the sandbox user's.
func TestIntegrationFilesAPI(t *testing.T) {
	m, _, _ := integrationManager(t)
	ctx := t.Context()
	res, err := m.Acquire(ctx, "it-files", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Sandbox.ID

	w := startWatch(t, m, id, "/workspace", true)
	// The directories first, and their events collected, so the watch is
	// on out/sub before a.txt is written: writes to a file in a directory
	// the watch has not reached yet are not events (its scan reports the
	// file as created), and on a loaded machine 301 appends can all land
	// before it gets there.
	if d := lastDone(t, runCommand(t, m, id, core.ExecRequest{Language: "bash", Code: "mkdir -p out/sub"})); d.Status != "ok" {
		t.Fatalf("mkdir: %+v", d)
	}
	got, dropped := w.collect()
	evs := runCommand(t, m, id, core.ExecRequest{Language: "bash", Code: `set -e
echo 0 > out/sub/a.txt
for i in $(seq 300); do echo $i >> out/sub/a.txt; done
mv out/sub/a.txt out/b.txt
rm out/b.txt
ln -s /etc out/etc
`})
	if d := lastDone(t, evs); d.Status != "ok" {
		t.Fatalf("command: %+v", evs)
	}
	more, dropped2 := w.collect()
	got, dropped = append(got, more...), dropped+dropped2
	writes := 0
	for _, e := range got {
		if e.Op == core.WatchWrite {
			writes++
		}
	}
	for _, want := range []core.WatchEvent{
		{Op: core.WatchCreate, Path: "out"}, {Op: core.WatchCreate, Path: "out/sub"}, {Op: core.WatchCreate, Path: "out/sub/a.txt"},
		{Op: core.WatchWrite, Path: "out/sub/a.txt"}, {Op: core.WatchRename, Path: "out/sub/a.txt"}, {Op: core.WatchCreate, Path: "out/b.txt"},
		{Op: core.WatchRemove, Path: "out/b.txt"}, {Op: core.WatchCreate, Path: "out/etc"},
	} {
		if !has(got, want.Op, want.Path) {
			t.Errorf("no %v %s in %+v", want.Op, want.Path, got)
		}
	}
	if writes > 20 || dropped != 0 {
		t.Errorf("%d WRITE events for 301 writes, %d dropped", writes, dropped)
	}

	// A directory made through the API is the sandbox user's to use.
	fi, err := m.MakeDirectory(ctx, id, "made/here", true)
	if err != nil {
		t.Fatal(err)
	}
	if fi.UID != sandboxUID {
		t.Errorf("MakeDirectory = %+v", fi)
	}
	evs = runCommand(t, m, id, core.ExecRequest{Language: "bash", Code: "echo x > /workspace/made/here/f && stat -c %u /workspace/made/here/f"})
	if d := lastDone(t, evs); d.Status != "ok" {
		t.Fatalf("writing into the made directory: %+v", evs)
	}
	if _, err := m.Rename(ctx, id, "made/here/f", "made/g", false); err != nil {
		t.Fatal(err)
	}
	list, err := m.ListFilesDepth(ctx, id, "made", 2)
	if err != nil || len(list) != 2 || list[0].Path != "made/g" || list[0].UID != sandboxUID || list[1].Path != "made/here" {
		t.Fatalf("ListFilesDepth = %+v, %v", list, err)
	}
	if err := m.Remove(ctx, id, "made", true); err != nil {
		t.Fatal(err)
	}
	evs = runCommand(t, m, id, core.ExecRequest{Language: "bash", Code: "test ! -e /workspace/made && test -L /workspace/out/etc"})
	if d := lastDone(t, evs); d.Status != "ok" {
		t.Fatalf("after Remove: %+v", evs)
	}
}
