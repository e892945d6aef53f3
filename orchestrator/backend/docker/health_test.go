package docker

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/cmdlog"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/iolog"
)

func writeDriverStatus(t *testing.T, dir string, ds ioproto.DriverStatus) {
	t.Helper()
	if err := ioproto.WriteJSONFileAtomic(filepath.Join(dir, ioproto.DriverStatusFile), ds, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestReadDriverHealth(t *testing.T) {
	full := ioproto.DriverStatus{Version: 1, Health: ioproto.HealthIOFull, HealthReason: "/io is full: 10 KiB free, a command needs at least 1 MiB"}
	for _, tc := range []struct {
		name    string
		plant   func(t *testing.T, dir string)
		want    string
		wantErr error // nil: no error
	}{
		{"missing", func(*testing.T, string) {}, "", nil},
		{"ok", func(t *testing.T, d string) {
			writeDriverStatus(t, d, ioproto.DriverStatus{Version: 1, Health: ioproto.HealthOK})
		}, "", nil},
		{"older driver", func(t *testing.T, d string) { writeDriverStatus(t, d, ioproto.DriverStatus{Version: 1, PID: 7}) }, "", nil},
		{"io full", func(t *testing.T, d string) { writeDriverStatus(t, d, full) }, full.HealthReason, nil},
		{"io full without reason", func(t *testing.T, d string) {
			writeDriverStatus(t, d, ioproto.DriverStatus{Health: ioproto.HealthIOFull})
		}, "/io is full", nil},
		{"unknown health", func(t *testing.T, d string) { writeDriverStatus(t, d, ioproto.DriverStatus{Health: "on fire"}) },
			`the sandbox's driver reports health "on fire"`, nil},
		{"long reason", func(t *testing.T, d string) {
			writeDriverStatus(t, d, ioproto.DriverStatus{Health: ioproto.HealthIOFull, HealthReason: strings.Repeat("r", 4000)})
		}, strings.Repeat("r", cmdlog.MaxHealthReason) + "…", nil},
		{"symlink to a host file", func(t *testing.T, d string) {
			host := filepath.Join(t.TempDir(), "secret.json")
			data, _ := json.Marshal(full)
			os.WriteFile(host, data, 0o600)
			os.Symlink(host, filepath.Join(d, ioproto.DriverStatusFile))
		}, "", iolog.ErrTampered},
		{"fifo", func(t *testing.T, d string) {
			if err := syscall.Mkfifo(filepath.Join(d, ioproto.DriverStatusFile), 0o644); err != nil {
				t.Skip(err)
			}
		}, "", iolog.ErrTampered},
		{"directory", func(t *testing.T, d string) { os.Mkdir(filepath.Join(d, ioproto.DriverStatusFile), 0o755) }, "", iolog.ErrTampered},
		{"too large", func(t *testing.T, d string) {
			os.WriteFile(filepath.Join(d, ioproto.DriverStatusFile), []byte(`{"health":"io_full","health_reason":"`+strings.Repeat("x", 1<<20)+`"}`), 0o644)
		}, "", iolog.ErrTampered},
		{"not json", func(t *testing.T, d string) {
			os.WriteFile(filepath.Join(d, ioproto.DriverStatusFile), []byte("\xff{"), 0o644)
		}, "", errAny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.plant(t, dir)
			done := make(chan struct{})
			var got string
			var err error
			go func() { got, _, err = readDriverHealth(iolog.New(dir)); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("readDriverHealth blocked")
			}
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("err = %v", err)
			case tc.wantErr == errAny && err == nil, tc.wantErr != nil && tc.wantErr != errAny && !errors.Is(err, tc.wantErr):
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("reason = %q, want %q", got, tc.want)
			}
		})
	}
	if got, _, err := readDriverHealth(iolog.New(filepath.Join(t.TempDir(), "none"))); got != "" || err != nil {
		t.Errorf("missing io dir: %q, %v", got, err)
	}
}

// errAny stands for "some error" in test tables.
var errAny = errors.New("any error")

// TestSandboxHealthFromDriverStatus: Get and List report the driver's
// health of a running sandbox, follow its changes, and read the file only
// when it changed.
func TestSandboxHealthFromDriverStatus(t *testing.T) {
	fd := newFakeDocker(testImage)
	m := newTestManager(t, testConfig(t), fd)
	sb := acquire(t, m, "alice").Sandbox
	sbIO := filepath.Join(sandboxDir(m.cfg.StateDir, sb.ID), ioDir)
	get := func() core.Sandbox {
		t.Helper()
		s, err := m.Get(t.Context(), sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	list := func() core.Sandbox {
		t.Helper()
		l, err := m.List(t.Context(), core.ListFilter{})
		if err != nil || len(l) != 1 {
			t.Fatalf("List = %v, %v", l, err)
		}
		return l[0]
	}
	if s := get(); s.HealthReason != "" {
		t.Errorf("no driver status yet: HealthReason %q", s.HealthReason)
	}

	reason := "/io is full: 10 KiB free, a command needs at least 1 MiB"
	writeDriverStatus(t, sbIO, ioproto.DriverStatus{Version: 1, Health: ioproto.HealthIOFull, HealthReason: reason})
	if s := get(); s.HealthReason != reason || s.State != core.StateRunning {
		t.Errorf("io full: Get = %q %q; want running with %q", s.State, s.HealthReason, reason)
	}
	if s := list(); s.HealthReason != reason {
		t.Errorf("io full: List HealthReason = %q", s.HealthReason)
	}

	// Unchanged, the file is not read again: a value planted in the cache
	// survives Get and List; a new version of the file (the driver renames
	// a new one into place) replaces it.
	h := &m.reg.get(sb.ID).health
	planted := "planted in the cache"
	h.reason.Store(&planted)
	if s := get(); s.HealthReason != planted {
		t.Errorf("unchanged file read again: HealthReason %q", s.HealthReason)
	}
	if s := list(); s.HealthReason != planted {
		t.Errorf("unchanged file read again by List: HealthReason %q", s.HealthReason)
	}
	writeDriverStatus(t, sbIO, ioproto.DriverStatus{Version: 1, Health: ioproto.HealthOK})
	if s := get(); s.HealthReason != "" {
		t.Errorf("healthy again: HealthReason %q", s.HealthReason)
	}
	// A planted FIFO says nothing, and does not block the call.
	os.Remove(filepath.Join(sbIO, ioproto.DriverStatusFile))
	if err := syscall.Mkfifo(filepath.Join(sbIO, ioproto.DriverStatusFile), 0o644); err == nil {
		if s := list(); s.HealthReason != "" {
			t.Errorf("FIFO: HealthReason %q", s.HealthReason)
		}
	}

	// A dead sandbox has no health to report.
	os.Remove(filepath.Join(sbIO, ioproto.DriverStatusFile))
	writeDriverStatus(t, sbIO, ioproto.DriverStatus{Version: 1, Health: ioproto.HealthIOFull, HealthReason: reason})
	if s := get(); s.HealthReason != reason {
		t.Fatalf("HealthReason %q", s.HealthReason)
	}
	fd.exit(sb.ContainerID, 1, false)
	if s := get(); s.State != core.StateDead || s.HealthReason != "" {
		t.Errorf("dead: state %q, HealthReason %q; want dead with none", s.State, s.HealthReason)
	}
}
