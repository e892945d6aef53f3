package iolog

import (
	"errors"
	"testing"

	"github.com/sandboxd/sandboxd/ioproto"
)

// TestSealWhileHibernating: from a snapshot record to its restore record a
// sealed log takes no new command, but retries, input and the restore;
// and the seal is read back from the log by a new Dir (a restarted
// sidecar, a new Pod on the same volume).
func TestSealWhileHibernating(t *testing.T) {
	d := newDir(t)
	d.SealWhileHibernating()
	mustAppend := func(d *Dir, rec ioproto.Record, want bool) {
		t.Helper()
		got, err := d.Append(rec, nil)
		if err != nil || got != want {
			t.Fatalf("append %s %s: appended=%v err=%v, want appended=%v", rec.Type, rec.CommandID, got, err, want)
		}
	}
	refused := func(d *Dir, rec ioproto.Record) {
		t.Helper()
		if _, err := d.Append(rec, nil); !errors.Is(err, ErrHibernating) {
			t.Fatalf("append %s %s while hibernating: %v, want ErrHibernating", rec.Type, rec.CommandID, err)
		}
	}
	mustAppend(d, exec("c1"), true)
	snap := ioproto.Record{Type: ioproto.KindSnapshot, CommandID: "sbx-snapshot-a", Snapshot: "snap-a"}
	mustAppend(d, snap, true)
	refused(d, exec("c2"))
	refused(d, ioproto.Record{Type: ioproto.KindContext, CommandID: "ctx-1", Op: ioproto.ContextCreate, ContextID: "c", Language: ioproto.LanguagePython})
	refused(d, ioproto.Record{Type: ioproto.KindSnapshot, CommandID: "sbx-snapshot-b", Snapshot: "snap-b"})
	mustAppend(d, exec("c1"), false) // a retry of a logged command: answered, not run again
	mustAppend(d, snap, false)       // the same snapshot again: followed, not appended
	mustAppend(d, ioproto.Record{Type: ioproto.KindInterrupt, CommandID: "c1"}, true)

	// A new Dir on the same log (the sidecar of the woken Pod) is sealed too.
	d2 := New(d.path)
	d2.SealWhileHibernating()
	refused(d2, exec("c2"))
	mustAppend(d2, ioproto.Record{Type: ioproto.KindRestore, CommandID: "sbx-restore-a", Snapshot: "snap-a", Level: ioproto.LevelGlobals}, true)
	mustAppend(d2, exec("c2"), true)

	// Unsealed Dirs (the Docker backend's) never refuse.
	d3 := newDir(t)
	mustAppend(d3, snap, true)
	mustAppend(d3, exec("c3"), true)
}

// TestLiveSnapshotSealsNothing: a live snapshot record (a named snapshot
// or a fork's, the sandbox keeps running) leaves a sealed log open, also
// for a new Dir reading it back; it is itself refused while a
// hibernation's snapshot seals the log.
func TestLiveSnapshotSealsNothing(t *testing.T) {
	d := newDir(t)
	d.SealWhileHibernating()
	live := ioproto.Record{Type: ioproto.KindSnapshot, CommandID: "sbx-named-snapshot-a", Snapshot: "named-a", Live: true}
	if ok, err := d.Append(live, nil); !ok || err != nil {
		t.Fatalf("append a live snapshot: appended=%v err=%v", ok, err)
	}
	if ok, err := d.Append(exec("c1"), nil); !ok || err != nil {
		t.Fatalf("an exec after a live snapshot: appended=%v err=%v; want it taken", ok, err)
	}
	d2 := New(d.path)
	d2.SealWhileHibernating()
	if ok, err := d2.Append(exec("c2"), nil); !ok || err != nil {
		t.Fatalf("a new Dir on the log refuses an exec after a live snapshot: appended=%v err=%v", ok, err)
	}
	if ok, err := d2.Append(ioproto.Record{Type: ioproto.KindSnapshot, CommandID: "sbx-snapshot-h", Snapshot: "snap-h"}, nil); !ok || err != nil {
		t.Fatalf("a hibernation's snapshot: appended=%v err=%v", ok, err)
	}
	live.CommandID, live.Snapshot = "sbx-named-snapshot-b", "named-b"
	if _, err := d2.Append(live, nil); !errors.Is(err, ErrHibernating) {
		t.Fatalf("a live snapshot while hibernating: %v, want ErrHibernating", err)
	}
	if err := (&ioproto.Record{Type: ioproto.KindRestore, CommandID: "sbx-restore-x", Level: ioproto.LevelFiles, Live: true}).Validate(); !errors.Is(err, ioproto.ErrMalformed) {
		t.Fatalf("a live restore record: %v, want ErrMalformed", err)
	}
}
