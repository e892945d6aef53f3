package docker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// TestIntegrationWarmPoolVolumes: under runc, a request with volumes (one
// read-write, one read-only) takes a pool sandbox, whose running container
// gets them mounted: writes land in the volume, the read-only one refuses
// them. They are there again after the driver crashes and Docker restarts
// the container, and after a hibernation and a fast wake in another pool
// container. The next tenant's claim has none of them.
func TestIntegrationWarmPoolVolumes(t *testing.T) {
	m, c, cfg := fastWakeManager(t)
	ctx, cancel := context.WithTimeout(as(t, "acme", false), 6*time.Minute)
	defer cancel()
	awaitPoolWithin(t, m, 1, 2*time.Minute)
	data, err := m.CreateVolume(ctx, "data", 32<<20)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := m.CreateVolume(ctx, "ref", 32<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(volumeDataDir(cfg.StateDir, ref.ID), "ref.txt"), []byte("reference\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pooled := poolIDs(m)
	res, err := m.Acquire(ctx, "vol-alice", core.Options{Volumes: []core.VolumeMount{
		{Volume: data.ID, Path: "/data/main"}, {Volume: ref.ID, Path: "/mnt/ref", ReadOnly: true}}})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Sandbox.ID
	if id != pooled[0] {
		t.Fatalf("a request with volumes got %s; want the pool's sandbox %s", id, pooled[0])
	}
	check := func(what, line string) {
		t.Helper()
		out := mustRunOK(t, m, id, "bash", `
mountpoint -q /data/main && echo main-mounted
mountpoint -q /mnt/ref && echo ref-mounted
cat /mnt/ref/ref.txt
echo `+line+` >> /data/main/log.txt
touch /mnt/ref/x 2>/dev/null && echo ref-writable || echo ref-readonly`)
		for _, want := range []string{"main-mounted\n", "ref-mounted\n", "reference\n", "ref-readonly\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: %q lacks %q", what, out, want)
			}
		}
		b, err := os.ReadFile(filepath.Join(volumeDataDir(cfg.StateDir, data.ID), "log.txt"))
		if err != nil || !strings.Contains(string(b), line+"\n") {
			t.Errorf("%s: the volume holds %q, %v; want the sandbox's write %q", what, b, err, line)
		}
	}
	check("after the claim", "claimed")

	// The driver crashes and Docker restarts the container: the volumes
	// are mounted again, and no command runs before they are.
	crashDriver(t, ctx, c, res.Sandbox.ContainerID)
	check("after a restart of the container", "restarted")

	// Hibernated, then woken fast in another pool container.
	if _, err := m.Hibernate(ctx, id); err != nil {
		t.Fatal(err)
	}
	wakeInPool(t, ctx, m, m.pool, id)
	check("after a fast wake", "woken")

	// Another tenant's claim: none of the volumes.
	awaitPoolWithin(t, m, 1, 2*time.Minute)
	other, err := m.Acquire(as(t, "beta", false), "vol-bob", core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if out := mustRunOK(t, m, other.Sandbox.ID, "bash", "mountpoint -q /data/main && echo mounted; mountpoint -q /mnt/ref && echo mounted; echo done"); out != "done\n" {
		t.Errorf("the next tenant's sandbox sees %q", out)
	}
}
