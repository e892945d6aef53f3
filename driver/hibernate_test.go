package driver

import (
	"slices"
	"testing"

	"github.com/sandboxd/sandboxd/ioproto"
)

// TestHibernateGlobals saves a kernel's globals with a snapshot record,
// stops the driver (as removing the container does), and restores them
// into the next driver's fresh kernel: data comes back by value, an open
// file and a generator are reported lost, and the first command after the
// restore says how the state came back in its started event.
func TestHibernateGlobals(t *testing.T) {
	io, ws := t.TempDir(), t.TempDir()
	h := startDriverIn(t, io, ws)
	h.submit("c1", "python", "import math as m\nx = [1, 2.5, 'three']\nd = {'k': (1, 2)}\nf = open('/dev/null')\ng = (i for i in range(3))\n")
	if d := lastEvent(t, h.wait("c1")); d.Status != ioproto.StatusOK {
		t.Fatalf("c1: %+v", d)
	}
	h.record(ioproto.Record{Type: ioproto.KindSnapshot, CommandID: "hib-1", Snapshot: "snap-1"})
	d := lastEvent(t, h.wait("hib-1"))
	if d.Status != ioproto.StatusOK || d.Snapshot == nil || d.Snapshot.Level != ioproto.LevelGlobals || d.Snapshot.Bytes <= 0 {
		t.Fatalf("snapshot done: %+v %+v", d, d.Snapshot)
	}
	for _, n := range []string{"x", "d", "m"} {
		if !slices.Contains(d.Snapshot.Names, n) {
			t.Errorf("snapshot names %v lack %s", d.Snapshot.Names, n)
		}
	}
	lost := map[string]bool{}
	for _, l := range d.Snapshot.Lost {
		lost[l.Name] = true
	}
	if !lost["f"] || !lost["g"] {
		t.Errorf("snapshot lost %+v, want f and g", d.Snapshot.Lost)
	}
	h.stop()

	h2 := startDriverIn(t, io, ws)
	h2.record(ioproto.Record{Type: ioproto.KindRestore, CommandID: "wake-1", Snapshot: "snap-1", Level: ioproto.LevelGlobals})
	d = lastEvent(t, h2.wait("wake-1"))
	if d.Status != ioproto.StatusOK || d.Snapshot == nil || d.Snapshot.Level != ioproto.LevelGlobals || !slices.Contains(d.Snapshot.Names, "x") {
		t.Fatalf("restore done: %+v %+v", d, d.Snapshot)
	}
	h2.submit("c2", "python", "print(x, d, m.pi)")
	evs := h2.wait("c2")
	if w := evs[0].Wake; w == nil || w.Level != ioproto.LevelGlobals {
		t.Fatalf("started of the first command after the wake: %+v", evs[0])
	}
	if dn := lastEvent(t, evs); dn.Status != ioproto.StatusOK || dn.StateLost || stdoutOf(evs) != "[1, 2.5, 'three'] {'k': (1, 2)} 3.141592653589793\n" {
		t.Fatalf("c2: %s / %+v", stdoutOf(evs), dn)
	}
	h2.submit("c3", "python", "1")
	if evs := h2.wait("c3"); evs[0].Wake != nil {
		t.Fatalf("wake reported twice: %+v", evs[0])
	}
}

// TestHibernateFilesLevel: a restore record at level files loads nothing;
// the next command reports the globals lost, with the wake's level.
func TestHibernateFilesLevel(t *testing.T) {
	io, ws := t.TempDir(), t.TempDir()
	h := startDriverIn(t, io, ws)
	h.submit("c1", "python", "x = 1")
	h.wait("c1")
	h.stop()
	h2 := startDriverIn(t, io, ws)
	h2.record(ioproto.Record{Type: ioproto.KindRestore, CommandID: "wake-1", Level: ioproto.LevelFiles})
	h2.wait("wake-1")
	h2.submit("c2", "python", "'x' in globals()")
	evs := h2.wait("c2")
	if w := evs[0].Wake; w == nil || w.Level != ioproto.LevelFiles {
		t.Fatalf("started: %+v", evs[0])
	}
	if dn := lastEvent(t, evs); !dn.StateLost {
		t.Fatalf("done should report state_lost: %+v", dn)
	}
}
