package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/backend/docker"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// TestE2ESnapshotCrash kills sandboxd (SIGKILL, through
// SANDBOXD_TEST_CRASH_AT in a test build) at each step of a named snapshot
// and of a fork, restarts it (the build that ships), and checks what a
// user relies on: no half-written snapshot is listed and none is left on
// disk; the source's /workspace is not left frozen (it takes a write at
// once); a fork's sandbox, if it exists, has the source's state (the
// restore finished by start-up recovery, once) or says it lost it; the
// snapshot can be taken again.
func TestE2ESnapshotCrash(t *testing.T) { forRuntimes(t, testSnapshotCrash) }

func testSnapshotCrash(t *testing.T, env *e2eEnv) {
	crashing := env.withCrashHooks(t)
	for i, step := range docker.SnapshotSteps {
		t.Run(strings.ReplaceAll(step, ":", "-"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			d := crashing.startEnv(t, []string{"SANDBOXD_TEST_CRASH_AT=" + step})
			c, _ := d.client(t)
			src := acquire(t, ctx, c, "snap-src-"+strconv.Itoa(i)).GetSandbox().GetSandboxId()
			execOut(t, ctx, c, src, "set", "x = 41\nopen('/workspace/f.txt', 'w').write('file kept')")
			var err error
			if step == "restore:registered" {
				_, err = c.ForkSandbox(ctx, &sandboxv1.ForkSandboxRequest{SandboxId: src, Count: 1, UserIds: []string{"snap-fork-" + strconv.Itoa(i)}})
			} else {
				_, err = c.CreateSnapshot(ctx, &sandboxv1.CreateSnapshotRequest{SandboxId: src, Name: "crashed"})
			}
			awaitCrash(t, d, step, err)

			d = env.start(t)
			c, _ = d.client(t)
			l, err := c.ListSnapshots(ctx, &sandboxv1.ListSnapshotsRequest{})
			if err != nil || len(l.GetSnapshots()) != 0 {
				t.Fatalf("after the crash at %s: snapshots %v, %v; want none listed", step, l.GetSnapshots(), err)
			}
			if ents, _ := os.ReadDir(filepath.Join(env.stateDir, "snapshots")); len(ents) != 0 {
				t.Errorf("after the crash at %s: %d entries left in the snapshots directory", step, len(ents))
			}
			// The source's /workspace takes a write at once: not frozen.
			wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
			o, _ := execOut(t, wctx, c, src, "write", "open('/workspace/g.txt', 'w').write('after')\nprint(x, open('/workspace/f.txt').read())")
			wcancel()
			if o.stdout != "41 file kept\n" {
				t.Fatalf("the source after the crash at %s: %q %v", step, o.stdout, o.errs)
			}
			if step == "restore:registered" {
				fork := acquire(t, ctx, c, "snap-fork-"+strconv.Itoa(i)).GetSandbox()
				out, started := execOut(t, ctx, c, fork.GetSandboxId(), "get", "print(open('/workspace/f.txt').read())\nprint(x)")
				t.Logf("the fork after the crash: wake %v, output %q", started.GetWake(), out.stdout)
				switch {
				case out.stdout == "file kept\n41\n":
				case out.done.GetStateLost() || started.GetWake().GetLevel() == "files":
					// Lost, and said so.
				default:
					t.Fatalf("the fork after the crash: output %q, done %+v, wake %v: a loss not reported", out.stdout, out.done, started.GetWake())
				}
			}
			s, err := c.CreateSnapshot(ctx, &sandboxv1.CreateSnapshotRequest{SandboxId: src, Name: "crashed"})
			if err != nil || s.GetSnapshot().GetLevel() != "globals" {
				t.Fatalf("the snapshot taken again after the crash: %v, %v", s, err)
			}
			if _, err := c.DeleteSnapshot(ctx, &sandboxv1.DeleteSnapshotRequest{Snapshot: s.GetSnapshot().GetSnapshotId()}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
