package docker

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// TestSnapshotsNeedDiskVolumes: without disk volumes a snapshot, a fork
// and a start from a snapshot are refused, saying why; nothing is made.
func TestSnapshotsNeedDiskVolumes(t *testing.T) {
	fd := newFakeDocker(testImage)
	m := newTestManager(t, testConfig(t), fd) // NoDiskVolumes
	sb := acquire(t, m, "alice").Sandbox
	if _, err := m.CreateSnapshot(t.Context(), sb.ID, "s"); !errors.Is(err, core.ErrFailedPrecondition) || !strings.Contains(err.Error(), "disk volumes") {
		t.Errorf("CreateSnapshot = %v", err)
	}
	if _, err := m.Fork(t.Context(), sb.ID, core.ForkRequest{Count: 1}); !errors.Is(err, core.ErrFailedPrecondition) {
		t.Errorf("Fork = %v", err)
	}
	if _, err := m.Acquire(t.Context(), "bob", core.Options{FromSnapshot: "s"}); !errors.Is(err, core.ErrFailedPrecondition) {
		t.Errorf("Acquire from a snapshot = %v", err)
	}
	if l, err := m.ListSnapshots(t.Context(), core.SnapshotFilter{}); err != nil || len(l) != 0 {
		t.Errorf("ListSnapshots = %v, %v", l, err)
	}
}

func TestSnapshotIDs(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id := core.NewSnapshotID()
		if !core.IsSnapshotID(id) || seen[id] {
			t.Fatalf("snapshot ID %q: valid %v, seen %v", id, core.IsSnapshotID(id), seen[id])
		}
		seen[id] = true
	}
}
