package driver

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/ioproto"
)

// fakeMounts stands in for the mount namespace: paths are mount points
// once mounted, and each check is counted, so a test knows the driver is
// waiting.
type fakeMounts struct {
	mu      sync.Mutex
	mounted map[string]bool
	checks  chan string
}

func newFakeMounts() *fakeMounts {
	return &fakeMounts{mounted: map[string]bool{}, checks: make(chan string, 1)}
}

func (f *fakeMounts) isMounted(p string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case f.checks <- p:
	default:
	}
	return f.mounted[p], nil
}

func (f *fakeMounts) mount(p string) {
	f.mu.Lock()
	f.mounted[p] = true
	f.mu.Unlock()
}

// awaitCheck waits until the driver checked for a mount point since the
// last call: it is waiting for one.
func (f *fakeMounts) awaitCheck(t *testing.T) {
	t.Helper()
	<-f.checks // drain one that may predate the call
	<-f.checks
}

// TestMountsRecordWaits: a command after a mounts record does not run
// until every path of the record is a mount point, also in a driver that
// starts over on the log (a restarted container, whose mounts the host
// adds again after it started); a command before it is not held.
func TestMountsRecordWaits(t *testing.T) {
	io := t.TempDir()
	fm := newFakeMounts()
	h := startDriver(t, io, func(d *Driver) { d.cfg.Mounted = fm.isMounted })
	h.submit("before", ioproto.LanguageBash, "echo before")
	if got := h.out("before"); got != "before\n" {
		t.Fatalf("before: %q", got)
	}
	h.record(ioproto.MountsRecord("sbx-mounts-1", []string{"/data", "/ro"}))
	h.submit("after", ioproto.LanguageBash, "echo after")
	fm.awaitCheck(t)
	fm.mount("/data")
	fm.awaitCheck(t)
	if _, err := os.Stat(filepath.Join(io, "out", ioproto.EventsFileName("after"))); err == nil {
		t.Fatal("a command after the mounts record ran before /ro was mounted")
	}
	fm.mount("/ro")
	if got := h.out("after"); got != "after\n" {
		t.Fatalf("after: %q", got)
	}
	if _, err := os.Stat(filepath.Join(io, "out", ioproto.EventsFileName("sbx-mounts-1"))); err == nil {
		t.Error("the mounts record got an events file: it is no command")
	}

	// The driver starts over (a restarted container): its mounts are gone
	// until the host adds them again.
	h.stop()
	fm2 := newFakeMounts()
	h2 := startDriver(t, io, func(d *Driver) { d.cfg.Mounted = fm2.isMounted })
	h2.submit("restarted", ioproto.LanguageBash, "echo restarted")
	fm2.awaitCheck(t)
	if _, err := os.Stat(filepath.Join(io, "out", ioproto.EventsFileName("restarted"))); err == nil {
		t.Fatal("a command ran after a restart before the record's mounts were back")
	}
	fm2.mount("/data")
	fm2.mount("/ro")
	if got := h2.out("restarted"); got != "restarted\n" {
		t.Fatalf("restarted: %q", got)
	}

	// A later record replaces the set: /ro (a volume deleted by force) is
	// no longer waited for, after a restart either.
	h2.record(ioproto.MountsRecord("sbx-mounts-2", []string{"/data"}))
	h2.stop()
	fm3 := newFakeMounts()
	fm3.mount("/data")
	h3 := startDriver(t, io, func(d *Driver) { d.cfg.Mounted = fm3.isMounted })
	h3.submit("replaced", ioproto.LanguageBash, "echo replaced")
	if got := h3.out("replaced"); got != "replaced\n" {
		t.Fatalf("replaced: %q", got)
	}
}
